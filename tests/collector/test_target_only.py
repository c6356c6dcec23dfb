"""A target-only run has no verify steps: its throughput over time counts the tokens its
requests emitted, when they were emitted (each one decode step), live and from a trace."""

from __future__ import annotations

from specscope import schema
from specscope.collector.report import build_report
from specscope.collector.service import Collector

T0 = 1_700_000_000_000_000_000


def _records():
    run = schema.RunRecord(run_id="base", config_id="none", algorithm="none", num_steps=0,
                           topk=0, num_verify_tokens=0, backend="cpu", model="m")
    reqs = [schema.RequestRecord(
        run_id="base", rank=0, request_id=f"r{i}", t_arrival_ns=T0, t_first_token_ns=T0 + 10**8,
        t_finish_ns=T0 + 4 * 10**9, num_prompt_tokens=8, num_output_tokens=40,
        chunk_times_ns=tuple(T0 + 10**8 * (j + 1) for j in range(40)),
        chunk_num_tokens=(1,) * 40) for i in range(3)]
    return [run, *reqs]


def test_target_only_throughput_counts_its_emitted_tokens_in_report_windows():
    (sec,) = build_report(_records(), window_s=1.0)["runs"]
    windows = sec["windows"]
    assert sum(w["committed_tokens"] for w in windows) == 120
    assert len(windows) == 4 and all(w["committed_tokens"] > 0 for w in windows)


def test_target_only_throughput_counts_its_emitted_tokens_live():
    collector = Collector(window_s=1.0)
    collector.observe(_records())
    windows = next(iter(collector._windows.values()))
    assert sum(s.undrafted_request_steps for s in windows.values()) == 120


def _waves(gap_s: int) -> list:
    """Two waves of three requests 4 s each, ``gap_s`` apart: a run that takes turns."""
    recs = _records()
    later = [schema.RequestRecord(
        run_id="base", rank=0, request_id=f"w1-r{i}", t_arrival_ns=T0 + gap_s * 10**9,
        t_first_token_ns=T0 + gap_s * 10**9 + 10**8, t_finish_ns=T0 + (gap_s + 4) * 10**9,
        num_prompt_tokens=8, num_output_tokens=40,
        chunk_times_ns=tuple(T0 + gap_s * 10**9 + 10**8 * (j + 1) for j in range(40)),
        chunk_num_tokens=(1,) * 40) for i in range(3)]
    return recs + later


def test_throughput_of_a_run_that_takes_turns_is_over_its_busy_time():
    from specscope.collector import busy
    from specscope.collector.compare import run_sample

    assert busy.union([(0, 4), (2, 6), (10, 12)]) == ((0, 6), (10, 12))
    # past the limit the closest intervals are joined (their gap counted as busy)
    assert busy.union([(0, 1), (10, 11), (13, 14), (30, 31), (32, 33)], limit=3) == \
        ((0, 1), (10, 14), (30, 33))
    assert busy.add(((0, 6),), (5, 9)) == ((0, 9),) and busy.add(((0, 6),), (7, 9)) == ((0, 6), (7, 9))
    (sec,) = build_report(_waves(gap_s=60), window_s=1.0)["runs"]
    totals = sec["totals"]
    # 240 tokens in 8 busy seconds, not over the 64 s from the first arrival to the last finish
    assert totals["busy_s"] == 8.0 and totals["span_s"] >= 60
    assert totals["output_tokens_per_s"] == 30.0
    assert run_sample(_waves(gap_s=60), "base").span_s == 8.0
    # the live collector keeps the same busy time through merges of its windows
    collector = Collector(window_s=1.0)
    collector.observe(_waves(gap_s=60))
    (stats,) = collector.snapshot().totals.values()
    assert busy.seconds(stats.busy) == 8.0


def test_live_throughput_breaks_its_line_where_the_run_idled():
    from specscope.dashboard.data import snapshot_views
    from specscope.dashboard.figures.live import idle_gaps

    collector = Collector(window_s=1.0, num_windows=1000)
    collector.observe(_waves(gap_s=30))
    (view,) = snapshot_views(collector.snapshot(), "live")
    xs, ys, rate = idle_gaps([w for w in view.section.windows if w.window_s])
    assert ys.count(None) == 1  # one idle stretch between the two waves, drawn as a break
    assert all(y > 0 for y in ys if y is not None)  # never a zero for the idle time
    # the legend's rate: tokens over its busy windows only (5 one-second windows a wave)
    assert rate == 240 / len([y for y in ys if y is not None]) == 24.0
