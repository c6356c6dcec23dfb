"""A target-only run has no verify steps: its throughput over time counts the tokens its
requests emitted, when they were emitted (each one decode step), live and from a trace."""

from __future__ import annotations

from specscope import schema
from specscope.collector.report import build_report
from specscope.collector.service import Collector

T0 = 1_700_000_000_000_000_000


def _records():
    run = schema.RunRecord(run_id="base", config_id="none", algorithm="none", num_steps=0,
                           topk=0, num_draft_tokens=0, backend="cpu", model="m")
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
