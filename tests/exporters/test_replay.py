"""Replay and Parquet datasets: the same counters as live, one query across many runs."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request

import pytest

from specscope import schema
from specscope.collector.service import Collector
from specscope.io.trace import compact
from specscope.exporters.prometheus import render
from specscope.exporters.replay import replay
from tests.conftest import ROOT
from tests.exporters.test_real_prometheus import _free_port, _stop

#: the process's own figures, and the detectors' verdicts as of their last tick (a live
#: collector's tick may fall before or after the run's last step): not counters
VOLATILE = re.compile(r"^specscope_(process_|collector_events|check_state|anomal)")


def _counters(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or VOLATILE.match(line):
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A recorded run with its own /metrics, scraped after the run."""
    tmp = tmp_path_factory.mktemp("live")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specscope", "record", "--model", "tiny", "--requests", "8",
         "--concurrency", "4", "--max-new-tokens", "24", "--temperature", "0.7", "--quiet",
         "--metrics-port", str(port), "--linger", "60", "-o", str(tmp / "live.jsonl")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("trace written"):
                break
        text = _scrape(port)
    finally:
        _stop(proc)
    return tmp / "live.jsonl", text


def test_replay_yields_the_live_counters(live):
    trace, live_text = live
    collector = Collector()
    replay([trace], collector, progress=False)
    replayed = _counters(render(collector.snapshot()))
    expected = _counters(live_text)
    assert expected and replayed == expected


def test_parquet_replay_equals_jsonl_replay(live, tmp_path):
    trace, _ = live
    out = compact([trace], tmp_path / "pq")
    a, b = Collector(), Collector()
    replay([trace], a, progress=False)
    replay([out], b, progress=False)
    assert _counters(render(a.snapshot())) == _counters(render(b.snapshot()))


def test_paced_replay_sleeps_at_recorded_pace(live):
    from specscope.io.trace import read_trace

    trace, _ = live
    times = [t for t in (schema.time_ns(r, end=True) for r in read_trace(trace).records) if t]
    span_s = (max(times) - min(times)) / 1e9
    slept = []  # a fake sleep: the replay asks to wait until each record's recorded offset
    replay([trace], Collector(), speed=2.0, progress=False, sleep=slept.append)
    assert slept and max(slept) == pytest.approx(span_s / 2, abs=0.25)


def test_duckdb_query_across_runs(tmp_path, tiny):
    duckdb = pytest.importorskip("duckdb")
    from specscope.collector.stats import SpecStats
    from specscope.engine.decoder import SpecConfig
    from specscope.engine.workload import WorkloadSpec, run_workload
    from specscope.io.trace import read_trace

    traces = []
    for i, steps in enumerate((2, 3, 4)):
        spec = WorkloadSpec(requests=4, concurrency=4, max_new_tokens=16, seed=i, reference=False)
        traces.append(run_workload(tiny, SpecConfig(num_steps=steps), spec,
                                   tmp_path / f"r{i}.jsonl", progress=False))
    out = compact(traces, tmp_path / "dataset")
    rows = duckdb.sql(
        f"SELECT config, sum(num_accepted) AS accepted, sum(num_drafted) AS drafted "
        f"FROM read_parquet('{out}/verify/**/*.parquet', hive_partitioning = true) "
        f"GROUP BY config ORDER BY config").fetchall()
    assert [r[0] for r in rows] == ["draft-model-s2-k1-d3", "draft-model-s3-k1-d4",
                                    "draft-model-s4-k1-d5"]
    for (_config, accepted, drafted), path in zip(rows, traces):
        s = SpecStats().observe_all(read_trace(path).records)
        assert (accepted, drafted) == (s.accepted_tokens, s.draft_tokens)
