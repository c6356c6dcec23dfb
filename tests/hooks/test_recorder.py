"""The Recorder's hot-path rules: no sync, never blocks, never raises; correct records out."""

from __future__ import annotations

import os

import pytest
import torch

from specscope import schema
from specscope.hooks import Recorder, SyncError, every_n, forbid_sync

B, D, V = 4, 3, 50


def _inputs(seed: int = 0, **over):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, D + 1, V, generator=g) * 3
    kw = dict(request_ids=[f"r{i}" for i in range(B)], num_accepted=torch.tensor([0, 1, 3, 2]),
              num_drafted=D, temperature=[0.0, 0.7, 1.0, 0.7], top_p=[1.0, 0.9, 1.0, 1.0],
              top_k=[0, 0, 20, 0], committed_tokens=logits.argmax(-1), target_logits=logits,
              draft_top1_probs=torch.tensor([[1.0, 0.5, 0.05]] * B))
    kw.update(over)
    return kw


def test_sync_guard_catches_each_sync_forcing_call():
    x = torch.arange(4.0)
    for bad in (lambda: x[0].item(), lambda: x.tolist(), lambda: bool(x[0]), lambda: x.cpu(),
                lambda: x.numpy(), lambda: x.nonzero(), lambda: x[x > 1], lambda: int(x[0]),
                lambda: x.unique(), lambda: torch.masked_select(x, x > 1)):
        with pytest.raises(SyncError), forbid_sync():
            bad()
    meta = torch.empty(4, device="meta")  # stands in for a device tensor on a CPU-only machine
    for bad in (lambda: meta.to("cpu"), lambda: torch.empty(4).copy_(meta)):
        with pytest.raises(SyncError), forbid_sync():
            bad()
    with forbid_sync():  # what the hooks do is allowed
        torch.empty(4).copy_(x, non_blocking=True)
        (x * 2).sum(dim=0)


@pytest.mark.parametrize("over", [{}, {"committed_tokens": None, "target_logits": None},
                                  {"draft_top1_probs": None}, {"top_p": None, "top_k": None},
                                  {"mode_used": "fallback-argmax"},
                                  {"num_accepted": torch.tensor([0, 1, 3, 2], dtype=torch.int32)}])
def test_every_hook_path_is_sync_free(run_record, over):
    rec = Recorder(run_record)
    with forbid_sync():
        rec.record_verify(**_inputs(**over))
        with rec.phase("verify_forward"):
            pass
        rec.record_fallback(reason="top_p_unsupported", request_id="r1", temperature=0.7,
                            top_p=0.9)
        rec.record_request(schema.RequestRecord(
            run_id="run-1", rank=0, request_id="r0", t_arrival_ns=0, t_first_token_ns=1,
            t_finish_ns=2, num_prompt_tokens=1, num_output_tokens=1))
    assert rec.num_hook_errors == 0
    kinds = [type(r).__name__ for r in rec.drain()]
    assert kinds.count("VerifyStepRecord") == 1 and "PhaseRecord" in kinds
    assert "FallbackRecord" in kinds and "RequestRecord" in kinds


def test_verify_record_fields(run_record):
    rec = Recorder(run_record)
    rec.record_verify(**_inputs(), mode_used=["greedy", "speculative-sampling",
                                              "speculative-sampling", "fallback-argmax"])
    (step,) = [r for r in rec.drain() if isinstance(r, schema.VerifyStepRecord)]
    assert step.batch_size == B and step.config_id == "eagle-s3-k1-d4"
    e = step.entries
    assert [x.num_accepted for x in e] == [0, 1, 3, 2]
    assert e[2].accepted_per_pos == (1, 1, 1) and e[1].accepted_per_pos == (1, 0, 0)
    assert e[0].mode_requested == "greedy" and e[1].mode_requested == "speculative-sampling"
    assert e[3].mode_used == "fallback-argmax"
    assert [x.num_verified for x in e] == [1, 2, 4, 3]  # accepted + the bonus/correction token
    assert all(x.num_top1 == x.num_verified for x in e)  # committed == argmax here
    assert e[0].expected_top1 == pytest.approx(1.0)  # greedy: p_max = 1
    assert 0 < e[1].expected_top1 < e[1].num_verified
    assert e[0].draft_top1_hist == (0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1) or sum(e[0].draft_top1_hist) == 3
    assert e[0].draft_top1_hist[-1] == 1 and e[0].draft_top1_hist[0] == 1


@pytest.mark.parametrize("truncated", [False, True])
def test_the_fused_columns_are_the_two_apart(truncated):
    """One pass's figures (argmax agreement, p_max, mismatch margin) equal truth_columns' and
    mismatch_columns' on the same step, greedy rows, a committed non-argmax and top-p/top-k."""
    from specscope.hooks.stats import mismatch_columns, truth_columns, verify_columns

    g = torch.Generator().manual_seed(5)
    logits = torch.randn(6, 4, 300, generator=g) * 3
    committed = logits.argmax(-1)
    committed[1, 0], committed[4, 2] = 7, 9  # two positions verify did not take the argmax at
    acc = torch.tensor([0, 3, 1, 2, 3, 0])
    temps = torch.tensor([0.0, 0.7, 1.0, 0.3, 0.0, 1.3])
    tp = torch.tensor([1.0, 0.9, 1.0, 1.0, 1.0, 0.5]) if truncated else None
    tk = torch.tensor([0, 0, 20, 0, 0, 0]) if truncated else None
    fused = verify_columns(logits, committed, acc, temps, tp, tk)
    apart = torch.cat([truth_columns(logits, committed, acc, temps, tp, tk),
                       mismatch_columns(logits, committed, acc)], dim=1)
    torch.testing.assert_close(fused[:, :6], apart, rtol=1e-5, atol=1e-5)
    # the PIT columns: per row, the sum over its verified positions is within [0, positions]
    assert bool(((fused[:, 6] >= 0) & (fused[:, 6] <= fused[:, 0])).all())
    assert fused[1, 1] == 3 and fused[1, 4] > 0 and fused[4, 4] > 0  # counted, margins found


@pytest.mark.parametrize("width", [1024, 8])
def test_truncated_p_max_from_the_largest_logits_is_exact_or_unknown(width):
    """A top-k/top-p row's p_max from the ``width`` largest logits equals the full sort's, or is
    NaN (unknown) where the width cannot hold its nucleus or its top-k set; the recorder then
    keeps no statistics for that row rather than a guess."""
    from specscope.hooks.stats import expected_top1, expected_top1_topk

    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 3, 300, generator=g) * 2
    temps = torch.tensor([0.5, 1.0, 0.8, 1.3, 0.7, 2.0])
    tp = torch.tensor([0.9, 1.0, 0.5, 0.95, 1.0, 0.99])
    tk = torch.tensor([0, 20, 5, 0, 0, 400])  # 400: wider than the vocabulary, so off
    exact = expected_top1(logits, temps, tp, tk)
    got = expected_top1_topk(logits, temps, tp, tk, width=width)
    known = ~torch.isnan(got)
    torch.testing.assert_close(got[known], exact[known], rtol=1e-5, atol=1e-6)
    if width >= 300:
        assert known.all()
    else:  # top-k 20 is wider than 8: unknown; top-k 5 and untruncated known; wide nuclei
        # (top-p 0.9 and more at temperatures up to 2) reach past 8 at some positions
        assert (~known[1]).all() and known[2].all() and known[4].all()
        assert (~known[[0, 3, 5]]).any()


def test_the_statistics_budget_takes_deciding_rows_first_then_every_row_in_turn(run_record):
    """At most ``max_stats_rows`` rows of a step get statistics: rows of a class still deciding
    first; with every class decided, the rows take turns, so each is sampled; a row left out
    has no statistics (0 verified positions), never zeros counted as evidence."""
    import numpy as np

    from specscope.hooks.policy import UntilDecided

    policy = UntilDecided(every=1)
    n = np.array([100_000])
    policy.observe([0.0], None, None, n, n, n * 1.0)  # greedy decided: 100,000 of 100,000
    rec = Recorder(run_record, stats_policy=policy, max_stats_rows=2)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, D + 1, V, generator=g)
    step = dict(request_ids=[f"r{i}" for i in range(6)], num_accepted=torch.tensor([1] * 6),
                num_drafted=D, temperature=[0.0, 0.0, 0.7, 0.0, 0.0, 0.0],
                committed_tokens=logits.argmax(-1), target_logits=logits)
    rec.record_verify(**step, step=0)
    (first,) = [r for r in rec.drain() if isinstance(r, schema.VerifyStepRecord)]
    sampled = [e.request_id for e in first.entries if e.num_verified]
    assert len(sampled) == 2 and "r2" in sampled, sampled  # the deciding class's row first
    seen: set[str] = set()
    for i in range(1, 4):
        rec.record_verify(**{**step, "temperature": [0.0] * 6}, step=i)
        (r,) = [x for x in rec.drain() if isinstance(x, schema.VerifyStepRecord)]
        got = [e.request_id for e in r.entries if e.num_verified]
        assert len(got) == 2 and all(e.num_verified in (0, 2) for e in r.entries), r.entries
        seen |= set(got)
    assert seen == {f"r{i}" for i in range(6)}  # three steps of two rows: every row in turn
    with pytest.raises(ValueError, match="max_stats_rows"):
        Recorder(run_record, max_stats_rows=0)


def test_expected_top1_matches_brute_force():
    from specscope.hooks.stats import expected_top1

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 2, 40, generator=g) * 2
    temps = torch.tensor([0.5, 1.0, 0.8])
    top_p = torch.tensor([1.0, 0.8, 1.0])
    top_k = torch.tensor([0, 0, 5])
    got = expected_top1(logits, temps, top_p, top_k)
    for b in range(3):
        for p in range(2):
            probs = torch.softmax(logits[b, p] / temps[b], -1).sort(descending=True).values
            if top_k[b] > 0:
                probs = probs[: int(top_k[b])]
            if top_p[b] < 1:
                keep = (probs.cumsum(0) - probs) < top_p[b]
                probs = probs[keep]
            assert got[b, p].item() == pytest.approx((probs[0] / probs.sum()).item(), rel=1e-5)


def test_full_ring_drops_and_counts_never_blocks(run_record):
    rec = Recorder(run_record, ring_slots=4)
    for _ in range(10):
        rec.record_verify(**_inputs())
    assert rec.num_dropped_ring_full == 6
    assert sum(isinstance(r, schema.VerifyStepRecord) for r in rec.drain()) == 4
    rec.record_verify(**_inputs())  # slots are free again after the drain
    assert rec.num_dropped_ring_full == 6 and len(rec.drain()) == 1


def test_oversized_batch_is_dropped_and_counted(run_record):
    rec = Recorder(run_record, max_batch=2)
    rec.record_verify(**_inputs())
    assert rec.num_dropped_batch_too_large == 1


def test_hook_raising_10000_times_never_reaches_the_caller(run_record):
    rec = Recorder(run_record, max_errors=100)
    bad = _inputs(num_accepted="not a tensor")
    for _ in range(10_000):
        rec.record_verify(**bad)
        with rec.phase("draft"):
            pass
        rec.record_fallback(reason=object())  # unhashable-ish junk is fine too
    assert rec.num_hook_errors == 100 and not rec.enabled
    health = rec.health()
    assert health.disabled and health.num_hook_errors == 100


def test_sink_errors_are_counted_not_raised(run_record):
    class Broken:
        def write(self, records):
            raise OSError("disk full")

        def close(self):
            raise OSError("disk full")

    rec = Recorder(run_record, sinks=[Broken()])
    rec.record_verify(**_inputs())
    rec.close()
    assert rec.num_sink_errors >= 2


def test_stats_policy_samples_steps(run_record):
    rec = Recorder(run_record, stats_policy=every_n(2))
    for step in range(4):
        rec.record_verify(**_inputs(), step=step)
    steps = [r for r in rec.drain() if isinstance(r, schema.VerifyStepRecord)]
    sampled = [s.step for s in steps if s.entries[0].num_verified]
    assert sampled == [0, 2]
    assert all(s.entries[2].num_accepted == 3 for s in steps)  # counts on every step


def test_close_writes_health_and_background_thread_flushes(run_record):
    got = []

    class Sink:
        def write(self, records):
            got.extend(records)

        def close(self):
            got.append("closed")

    rec = Recorder(run_record, sinks=[Sink()]).start(interval_s=0.01)
    rec.record_verify(**_inputs())
    rec.close()
    assert isinstance(got[0], schema.RunRecord)
    assert any(isinstance(r, schema.VerifyStepRecord) for r in got)
    assert isinstance(got[-2], schema.HookHealthRecord) and got[-1] == "closed"


def test_an_idle_recorder_leaves_its_health_before_it_is_killed(run_record, tmp_path):
    """A process killed without closing (vLLM's model worker at its default shutdown) still
    leaves its accounting: the recorder writes its cumulative health record once it goes idle;
    the report reads each process's latest, a closed recorder's final one over its snapshots,
    and the collector counts each process's drops once however many snapshots it sent."""
    import time

    from specscope.collector.report import build_report
    from specscope.collector.service import Collector
    from specscope.io.trace import TraceWriter, read_trace

    path = tmp_path / "worker.jsonl"
    rec = Recorder(run_record, sinks=[TraceWriter(path)]).start(interval_s=0.01)
    for step in range(3):
        rec.record_verify(**_inputs(), step=step)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the trace as a kill would leave it
        got = read_trace(path).records
        snaps = schema.latest_health(got)
        if snaps and snaps[0].num_recorded == 3:
            break
        time.sleep(0.02)
    (snap,) = schema.latest_health(read_trace(path).records)
    assert (snap.num_recorded, snap.final, snap.pid) == (3, False, os.getpid())
    (sec,) = build_report(read_trace(path).records)["runs"]
    assert [h["num_recorded"] for h in sec["hooks"]] == [3]
    rec.num_dropped_ring_full = 2  # seeded: two steps lost after the snapshot
    rec.close()
    records = read_trace(path).records
    assert sum(isinstance(r, schema.HookHealthRecord) for r in records) >= 2
    (last,) = schema.latest_health(records)
    assert last.final and last.num_dropped_ring_full == 2
    collector = Collector()
    collector.observe(records)
    collector.observe([r for r in records if isinstance(r, schema.HookHealthRecord)])  # resent
    assert collector.health["hook_records_dropped"] == 2


def test_a_busy_recorder_hands_over_its_last_step_and_a_snapshot_as_soon_as_it_goes_quiet(
        run_record):
    """At the default intervals: steps every 10 ms (busy), then nothing, as an engine that is
    stopped right after its last request. The last step reaches the sink, and a health snapshot
    that counts it follows it there, without a close (a killed process never closes); the
    delays are printed (the step within BUSY_INTERVAL_S, the snapshot once no step has come for
    IDLE_S, or with the step where the last snapshot is HEALTH_BUSY_S old: about 7 and 27 ms
    on a loaded machine)."""
    import threading
    import time

    from specscope.hooks.recorder import BUSY_INTERVAL_S

    got: list = []
    lock = threading.Lock()

    class Sink:
        def write(self, records):
            now = time.monotonic()
            with lock:
                got.extend((now, r) for r in records)

        def close(self):
            pass

    rec = Recorder(run_record, sinks=[Sink()]).start()
    for step in range(20):
        rec.record_verify(**_inputs(), step=step)
        time.sleep(0.01)
    t_last = time.monotonic()
    deadline = t_last + 10
    snap = None
    while time.monotonic() < deadline and snap is None:
        time.sleep(0.005)
        with lock:
            snap = next((t for t, r in got if isinstance(r, schema.HookHealthRecord)
                         and r.num_recorded == 20), None)
    with lock:
        steps = [t for t, r in got if isinstance(r, schema.VerifyStepRecord)]
    rec.close()
    assert len(steps) == 20 and snap is not None, (len(steps), snap)
    assert snap >= steps[-1]  # the snapshot that counts the last step comes after it
    print(f"last step handed over {1e3 * (steps[-1] - t_last):.0f} ms after it was recorded, "
          f"its snapshot {1e3 * (snap - t_last):.0f} ms (busy interval "
          f"{1e3 * BUSY_INTERVAL_S:.0f} ms)")


def test_a_failing_sink_does_not_make_health_snapshots_churn(run_record):
    """Each failed write is a sink error; the snapshots it would trigger are not written."""
    import time

    class Broken:
        writes = 0

        def write(self, records):
            Broken.writes += 1
            raise OSError("disk full")

        def close(self):
            pass

    rec = Recorder(run_record, sinks=[Broken()]).start(interval_s=0.01)
    rec.record_verify(**_inputs())
    time.sleep(0.5)  # about 50 idle drains
    rec.close()
    assert Broken.writes <= 6, Broken.writes  # the step, one snapshot, the final record


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_path_has_no_sync(run_record):
    rec = Recorder(run_record, device="cuda")
    kw = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in _inputs().items()}
    with forbid_sync():
        rec.record_verify(**kw)
        with rec.phase("verify_forward"):
            torch.randn(256, 256, device="cuda") @ torch.randn(256, 256, device="cuda")
    records = rec.drain(wait=True)
    assert any(isinstance(r, schema.VerifyStepRecord) for r in records)
    (ph,) = [r for r in records if isinstance(r, schema.PhaseRecord)]
    assert ph.clock == "cuda_event" and ph.duration_ns > 0


def test_the_engines_own_counts_ride_with_health_and_the_report_names_what_was_not_seen(
        run_record, tmp_path):
    """vLLM's speculative counters, summed as its /metrics adds them (``EngineCounts``, fed
    here as vLLM's ``SpecDecodingProm.observe`` is), are written with each health record and
    at close; the report holds the recorded verify steps to them: equal, it says every step
    was seen; with a step the engine counted that no hook recorded, it names it and its
    tokens. Never added to the run's totals."""
    from types import SimpleNamespace

    from specscope.collector.report import build_report
    from specscope.collector.text import format_report
    from specscope.hooks.engines.vllm_requests import EngineCounts
    from specscope.io.trace import TraceWriter, read_trace

    def stats(drafted: list[int], accepted: list[int]) -> SimpleNamespace:
        per_pos = [sum(1 for a in accepted if a > p) for p in range(max(drafted))]
        return SimpleNamespace(num_drafts=len(drafted), num_draft_tokens=sum(drafted),
                               num_accepted_tokens=sum(accepted),
                               num_accepted_tokens_per_pos=per_pos)

    path = tmp_path / "run.jsonl"
    counts = EngineCounts()
    rec = Recorder(run_record, sinks=[TraceWriter(path)])
    rec.attach(counts)
    for step in range(2):  # what the hooks record, what vLLM counts of the same steps
        rec.record_verify(**_inputs(), step=step)
        counts.observe(stats([D] * B, [0, 1, 3, 2]))
    rec.flush()
    assert rec.hand_over(5.0)
    (sec,) = build_report(read_trace(path).records)["runs"]
    seen = sec["engine_counts"]
    assert seen["not_seen"] is None and not seen["final"], seen
    assert seen["engine_counts"]["num_drafts"] == 2 * B == sec["totals"]["num_drafts"]
    counts.observe(stats([D, D], [2, 0]))  # a step vLLM counted that no hook recorded
    rec.close()
    records = read_trace(path).records
    assert sum(isinstance(r, schema.EngineCountsRecord) for r in records) == 2
    (sec,) = build_report(records)["runs"]
    assert sec["totals"]["num_drafts"] == 2 * B  # the engine's counts never pooled in
    assert sec["engine_counts"]["final"]
    assert sec["engine_counts"]["not_seen"] == {"num_drafts": 2, "draft_tokens": 2 * D,
                                                "accepted_tokens": 2}
    assert "NOT SEEN: vllm's own counts (final): 10 drafts, 30 drafted, 14 accepted; the " \
        "hooks recorded 8, 24, 12: 2 request-step(s) not seen (6 drafted, 2 accepted)" \
        in format_report(build_report(records))
