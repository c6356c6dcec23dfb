"""SpecStats: figures pooled from counters, merge associative with an identity, clamping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope import schema
from specscope.collector.report import build_report
from specscope.collector.stats import SpecStats


def _step(accepts, drafted=3, t_ns=0, step=0, mode="greedy"):
    return schema.VerifyStepRecord(
        run_id="r", config_id="c", rank=0, step=step, t_ns=t_ns, batch_size=len(accepts),
        entries=tuple(schema.VerifyEntry(
            request_id=f"q{i}", num_drafted=drafted, num_draft_tokens=drafted, num_accepted=a,
            accepted_per_pos=tuple(int(p < a) for p in range(drafted)), temperature=0.0,
            mode_requested=mode, mode_used=mode) for i, a in enumerate(accepts)))


def test_figures_are_pooled_from_counters():
    s = SpecStats().observe_all([_step([0, 3]), _step([1], drafted=1)])
    assert s.draft_tokens == 7 and s.accepted_tokens == 4 and s.num_drafts == 3
    assert s.acceptance_rate == pytest.approx(4 / 7)  # not the mean of 0, 1, 1
    assert s.mean_acceptance_length == pytest.approx((4 + 3) / 3)  # bonus token included
    assert s.per_position_acceptance == [pytest.approx(2 / 3), 0.5, 0.5]
    assert dict(s.accept_len_hist) == {1: 1, 4: 1, 2: 1}


def test_impossible_entries_are_clamped_and_counted():
    s = SpecStats().observe_all([_step([5], drafted=3), _step([-1], drafted=2)])
    assert s.num_clamped == 2
    assert s.accepted_tokens == 3 and s.draft_tokens == 5


def test_unknown_figures_are_null_not_invented():
    report = build_report([])
    t = report["totals"]
    assert t["mean_acceptance_length"] is None and t["acceptance_rate"] is None
    assert t["per_position_acceptance"] == [] and report["windows"] == []


def test_report_json_keys_and_windows():
    recs = [_step([i % 4], t_ns=i * 10**8, step=i) for i in range(20)]
    report = build_report(recs, window_s=0.5)
    keys = {"draft_tokens", "accepted_tokens", "mean_acceptance_length", "acceptance_rate",
            "per_position_acceptance"}
    assert keys <= set(report["totals"])
    assert len(report["windows"]) == 4
    assert all(keys | {"time"} <= set(w) for w in report["windows"])
    assert sum(w["accepted_tokens"] for w in report["windows"]) == report["totals"]["accepted_tokens"]


accepts = st.lists(st.integers(0, 4), min_size=1, max_size=5)
stats_st = st.lists(accepts, max_size=4).map(
    lambda steps: SpecStats().observe_all(_step(a, drafted=4, t_ns=i) for i, a in enumerate(steps)))


def _key(s: SpecStats):
    return (s.num_steps, s.num_drafts, s.draft_tokens, s.accepted_tokens, s.drafted_per_pos,
            s.accepted_per_pos, dict(s.accept_len_hist), s.t_first_ns, s.t_last_ns)


@settings(max_examples=60)
@given(stats_st, stats_st, stats_st)
def test_merge_is_associative_with_identity(a, b, c):
    assert _key(a.merge(b).merge(c)) == _key(a.merge(b.merge(c)))
    assert _key(a.merge(SpecStats())) == _key(a) == _key(SpecStats().merge(a))


def test_a_cumulative_sources_figure_is_its_latest_value_and_runs_never_average_theirs():
    """vLLM V0 logs its acceptance rate since start: the engine's own total is the last value,
    not the mean of 0.200 and 0.067. Over several runs the report's totals pool counts only: two
    SGLang runs' own acceptance lengths (2.5 and 3.0) are not averaged into a 2.75."""
    from specscope.collector.report import build_report

    def run(rid, algorithm="eagle"):
        return schema.RunRecord(run_id=rid, config_id=rid, algorithm=algorithm, num_steps=3, topk=1,
                                num_draft_tokens=4, backend="cuda", model="m")

    v0 = [run("v0"), *(schema.SpecCountsRecord(run_id="v0", t_ns=t, reported_acceptance_rate=rate,
                                               source="vllm-v0")
                       for t, rate in ((2, 0.067), (1, 0.200)))]
    (sec,) = build_report(v0)["runs"]
    assert sec["totals"]["reported_acceptance_rate"] == 0.067
    merged = SpecStats().observe_all(v0[:2]).merge(SpecStats().observe_all(v0[2:]))
    assert merged.reported_rate_last == (2, 0.067)
    sglang = [run("a"), schema.SpecCountsRecord(run_id="a", t_ns=1, reported_mean_acceptance_length=2.5,
                                                source="sglang"),
              run("b"), schema.SpecCountsRecord(run_id="b", t_ns=1, reported_mean_acceptance_length=3.0,
                                                source="sglang")]
    rep = build_report(sglang)
    assert [s["totals"]["reported_mean_acceptance_length"] for s in rep["runs"]] == [2.5, 3.0]
    assert rep["totals"]["reported_mean_acceptance_length"] is None
    assert all(w["reported_mean_acceptance_length"] is None for w in rep["windows"])
