"""The Collector: many processes into exact totals, clamping, label caps, bad batches."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope import schema
from specscope.collector.columns import VerifyColumns, observe_columns
from specscope.collector.service import Collector
from specscope.collector.stats import SpecStats
from specscope.io.transport import ZmqReceiver
from specscope.io.trace import read_trace
from tests.collector.test_stats import _key, _step
from tests.conftest import ROOT


def _run(run_id, model="m", steps=3):
    return schema.RunRecord(run_id=run_id, config_id=f"c{steps}", algorithm="eagle",
                            num_steps=steps, topk=1, num_verify_tokens=steps + 1, backend="cpu",
                            model=model)


def _total(snap) -> SpecStats:
    out = SpecStats()
    for s in snap.totals.values():
        out = out.merge(s)
    return out


def test_n_processes_recording_concurrently_sum_exactly(tmp_path):
    collector = Collector()
    receiver = ZmqReceiver(collector, "tcp://127.0.0.1:0").start()
    try:
        procs = [subprocess.Popen(
            [sys.executable, "-m", "specscope", "record", "--model", "tiny", "--requests", "8",
             "--concurrency", "4", "--max-new-tokens", "24", "--temperature", str(0.3 * i),
             "--seed", str(i), "--quiet", "--collector", receiver.endpoint,
             "-o", str(tmp_path / f"p{i}.jsonl")], cwd=ROOT, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True) for i in range(3)]
        for p in procs:
            assert p.wait(timeout=300) == 0, p.stderr.read()
            p.stderr.close()
        expected = SpecStats().observe_all(read_trace([tmp_path / f"p{i}.jsonl"
                                                       for i in range(3)]).records)
        deadline = time.time() + 10
        while time.time() < deadline and _key(_total(collector.snapshot())) != _key(expected):
            time.sleep(0.1)
    finally:
        receiver.close()
    snap = collector.snapshot()
    got = _total(snap)
    assert _key(got) == _key(expected)
    assert got.num_requests == expected.num_requests == 48  # 3 x (8 measured + 8 reference)
    assert {p["role"] for p in snap.processes} >= {"collector"}
    assert snap.health["batches_received"] > 0


def test_impossible_entries_clamped_and_counted():
    c = Collector()
    c.observe([_run("r"), _step([5, -1, 2], drafted=3)])
    snap = c.snapshot()
    assert snap.health["entries_clamped"] == 2
    (stats,) = snap.totals.values()
    assert stats.accepted_tokens == 5 and stats.num_clamped == 2


def test_label_sets_are_capped_and_counted():
    c = Collector(max_label_sets=3)
    for i in range(10):
        c.observe([_run(f"r{i}", model=f"model-{i}"),
                   dataclasses.replace(_step([1]), run_id=f"r{i}")])
    snap = c.snapshot()
    assert len(snap.totals) == 4  # three real label sets and "other"
    assert snap.health["label_sets_overflowed"] == 7
    assert sum(s.accepted_tokens for s in snap.totals.values()) == 10


@pytest.mark.parametrize("msg,reason", [
    (b"\xff\x00garbage", "malformed"), (b'{"v": 99, "records": []}', "version"),
    (b'{"v": 1}', "malformed"), (b"x" * 100, "oversized")])
def test_bad_batches_are_rejected_and_counted(msg, reason):
    c = Collector()
    receiver = ZmqReceiver(c, "tcp://127.0.0.1:0", max_bytes=64)
    try:
        receiver.handle(msg)
        good = json.dumps({"v": 1, "records": [{"kind": "phase", "run_id": "r"}]}).encode()
        receiver.handle(good)  # a bad record inside a good batch is skipped, counted
    finally:
        receiver.close()
    assert c.health[f"batches_rejected_{reason}"] == 1
    assert c.health["records_rejected"] == 1 and c.health["batches_received"] == 1


accepts = st.lists(st.lists(st.integers(-1, 5), min_size=1, max_size=6), min_size=1, max_size=6)


@settings(max_examples=50)
@given(accepts)
def test_columnar_ingest_equals_record_ingest(steps):
    records = [_step(a, drafted=4, t_ns=i * 7, step=i) for i, a in enumerate(steps)]
    by_record = SpecStats().observe_all(records)
    by_column = SpecStats()
    for cols in VerifyColumns.from_records(records):
        observe_columns(by_column, cols)
    assert _key(by_column) == _key(by_record)
    assert by_column.num_clamped == by_record.num_clamped
    assert dict(by_column.modes) == dict(by_record.modes)
    assert (by_column.row_draft_tokens, by_column.row_accepted) == (
        by_record.row_draft_tokens, by_record.row_accepted)


@settings(max_examples=50)
@given(st.lists(st.lists(st.integers(-1, 5), min_size=1, max_size=70), min_size=1, max_size=5),
       st.integers(0, 4))
def test_batch_rows_count_the_same_from_records_and_from_the_compact_columns(steps, drafted):
    """Each entry's batch row, from the records and from the compact columns the recorder and
    the wire send (one step-level value per step, ``step_sizes``): rows past the 64th pooled
    into the last, entries that drafted nothing or an impossible count clamped alike."""
    import dataclasses

    import numpy as np

    from specscope.io.columns import STEP_ARRAYS

    records = [_step(a, drafted=drafted, t_ns=i * 7, step=i) for i, a in enumerate(steps)]
    by_record = SpecStats().observe_all(records)
    for cols in VerifyColumns.from_records(records, detail=True):
        assert cols.seq is not None
        first = np.r_[0, np.flatnonzero(np.diff(cols.seq)) + 1]
        compact = dataclasses.replace(
            cols, step_sizes=np.diff(np.r_[first, len(cols)]),
            **{name: getattr(cols, name)[first] for name in STEP_ARRAYS
               if getattr(cols, name) is not None})
        by_column = SpecStats()
        observe_columns(by_column, compact)
        assert (by_column.row_draft_tokens, by_column.row_accepted) == (
            by_record.row_draft_tokens, by_record.row_accepted)
        assert len(by_record.row_draft_tokens) <= 64


def _greedy_under_sampling(run_id: str, n: int, t_ns: int) -> schema.VerifyStepRecord:
    """A step whose temperature-0.8 requests committed the argmax every time (silent greedy)."""
    entry = schema.VerifyEntry(request_id="q", num_drafted=3, num_draft_tokens=3, num_accepted=2,
                               accepted_per_pos=(1, 1, 0), temperature=0.8,
                               mode_requested=schema.SPECULATIVE_SAMPLING,
                               mode_used=schema.SPECULATIVE_SAMPLING, num_verified=n,
                               num_top1=n, expected_top1=0.4 * n, var_top1=0.24 * n)
    return schema.VerifyStepRecord(run_id=run_id, config_id="c3", rank=0, step=0, t_ns=t_ns,
                                   batch_size=1, entries=(entry,))


def test_scraping_never_changes_what_the_metrics_say():
    from specscope.exporters.prometheus import render

    def fed() -> Collector:
        c = Collector()
        c.observe([_run("r"), _greedy_under_sampling("r", 400, 1)])
        return c

    once, often = fed(), fed()
    assert not once.snapshot().anomalies  # nothing has ticked yet: no detector ran on a scrape
    for _ in range(100):
        render(often.snapshot())
    once.tick()
    often.tick()
    for c in (once, often):
        c.health.clear()
        c._pids.clear()
    a, b = render(once.snapshot()), render(often.snapshot())
    assert a == b and 'kind="silent_greedy"} 1' in a
    # a transition counts once however often it is looked at, and again when it recurs
    often.tick()
    assert often.snapshot().anomaly_counts == once.snapshot().anomaly_counts


def test_the_ticker_runs_the_detectors_on_its_own():
    c = Collector(tick_s=0.05).start()
    try:
        c.observe([_run("r"), _greedy_under_sampling("r", 400, 1)])
        deadline = time.time() + 10
        while time.time() < deadline and not c.snapshot().anomalies:
            time.sleep(0.02)
        assert {a.kind for _, a in c.snapshot().anomalies} == {"silent_greedy"}
        assert c.num_ticks >= 1
    finally:
        c.close()


def test_the_metrics_carry_each_check_s_state_pass_fail_or_inconclusive():
    from specscope.exporters.prometheus import render
    from specscope.io import promtext

    def state_of(c: Collector) -> dict[str, str]:
        c.tick()
        out = {}
        for s in promtext.parse(render(c.snapshot())).samples:
            if s.name == "specscope_check_state" and s.value == 1:
                out[s.labels["check"]] = s.labels["state"]
        return out

    check = f"sampling truth ({schema.SPECULATIVE_SAMPLING})"
    small = Collector()
    small.observe([_run("r"), _greedy_under_sampling("r", 8, 1)])  # 0.4^8: too few to tell
    assert state_of(small) == {check: "inconclusive"}
    assert not small.snapshot().anomalies
    small.observe([_greedy_under_sampling("r", 40, 2)])  # 48 positions, all argmax
    assert state_of(small) == {check: "fail"}
    honest = Collector()
    entry = _greedy_under_sampling("r", 1000, 1)
    e = entry.entries[0]
    fair = dataclasses.replace(e, num_top1=410)
    honest.observe([_run("r"), dataclasses.replace(entry, entries=(fair,))])
    assert state_of(honest) == {check: "pass"}
