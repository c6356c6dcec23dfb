"""SpecStats: figures pooled from counters, merge associative with an identity, clamping."""

from __future__ import annotations

import dataclasses
import random

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
                                num_verify_tokens=4, backend="cuda", model="m")

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


def _random_records(rng: random.Random, t0: int) -> list:
    """A valid mix of every record SpecStats folds, from ``t0`` on (times increase)."""
    t, out = t0, []
    for step in range(rng.randint(1, 6)):
        t += rng.randint(1, 10**6)
        entries = []
        for i in range(rng.randint(1, 4)):
            d = rng.randint(0, 4)
            a = rng.randint(0, d + (rng.random() < 0.1))  # now and then an impossible count
            temp = rng.choice([0.0, 0.8])
            mode = schema.GREEDY if temp == 0 else schema.SPECULATIVE_SAMPLING
            n = rng.randint(0, 3)
            entries.append(schema.VerifyEntry(
                request_id=f"q{i}", num_drafted=d, num_draft_tokens=d + rng.randint(0, 2),
                num_accepted=a, accepted_per_pos=(), temperature=temp,
                top_p=rng.choice([1.0, 0.9]), top_k=rng.choice([0, 20]), mode_requested=mode,
                mode_used=rng.choice([mode, schema.FALLBACK_ARGMAX]), num_verified=n,
                num_top1=rng.randint(0, n), expected_top1=rng.random() * n,
                var_top1=rng.random() * n / 4,
                draft_top1_hist=tuple(rng.randint(0, 2) for _ in range(schema.DRAFT_HIST_BINS))
                if rng.random() < 0.5 else ()))
        out.append(schema.VerifyStepRecord(
            run_id="r", config_id="c", rank=0, step=step, t_ns=t, batch_size=len(entries),
            entries=tuple(entries), draft_depth=rng.choice([None, 0, 0, 2, 3]),
            depth_reason=rng.choice(["", "", "acceptance fell"])))
        chunks = tuple(t + 10**5 * (j + 1) for j in range(rng.randint(0, 3)))
        out += [
            schema.RequestRecord(
                run_id="r", rank=0, request_id=f"req{t}", t_arrival_ns=t - 10**6,
                t_first_token_ns=t, t_finish_ns=t + 10**6, num_prompt_tokens=5,
                num_output_tokens=rng.randint(1, 9), chunk_times_ns=chunks,
                chunk_num_tokens=tuple(rng.randint(1, 3) for _ in chunks)),
            schema.PhaseRecord(run_id="r", rank=0, step=step, phase=rng.choice(["draft", "verify"]),
                               device="cpu", t_start_ns=t, duration_ns=rng.randint(1, 10**6)),
            schema.FallbackRecord(run_id="r", rank=0, step=step, t_ns=t,
                                  reason=rng.choice(["top_p_unsupported", "x"]), count=rng.randint(1, 2)),
            schema.MismatchRecord(run_id="r", step=step, t_ns=t, request_id="q0", position=0,
                                  margin=rng.random() * 3),
            schema.SpecCountsRecord(
                run_id="r", t_ns=t, source=rng.choice(["", "vllm-v0"]),
                num_drafts=rng.choice([None, 3]), num_draft_tokens=rng.choice([None, 9, 12]),
                num_accepted=rng.choice([None, 4]), accepted_per_pos=(2, 1, 1),
                reported_mean_acceptance_length=rng.choice([None, 1.9]),
                reported_acceptance_rate=rng.choice([None, 0.4]), reported_weight=rng.choice([None, 2.0])),
            schema.SampleRecord(run_id="r", t_ns=t, values={"kv": rng.random(), "q": float(step)}),
            schema.EvalRecord(run_id="r", request_id=f"req{t}", exact_match=rng.random() < 0.5,
                              invalid=rng.choice([None, True, False])),
        ]
    out.append(schema.BenchmarkRecord(run_id="r", t_ns=t, metrics={"tok_s": rng.random()}))
    return out


def _same(x, y) -> bool:
    """Equal, floats to rounding (sums taken in another grouping)."""
    if isinstance(x, float) or isinstance(y, float):
        return x == pytest.approx(y, rel=1e-9, abs=1e-12)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return type(x) is type(y) and all(_same(getattr(x, f.name), getattr(y, f.name))
                                           for f in dataclasses.fields(x))
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and \
            all(_same(a, b) for a, b in zip(x, y))
    return x == y


@pytest.mark.parametrize("seed", range(40))
def test_merge_is_associative_on_every_field(seed):
    """Three random, valid aggregates in time order: both groupings and the identity agree on
    every field SpecStats has, so a field added without a merge rule (or with one that is not
    associative) fails here."""
    rng = random.Random(seed)
    a, b, c = (SpecStats(keep_samples=rng.random() < 0.8).observe_all(
        _random_records(rng, t0)) for t0 in (10**9, 2 * 10**9, 3 * 10**9))
    left, right = a.merge(b).merge(c), a.merge(b.merge(c))
    for f in dataclasses.fields(SpecStats):
        assert _same(getattr(left, f.name), getattr(right, f.name)), f.name
        assert _same(getattr(a.merge(SpecStats()), f.name), getattr(a, f.name)), f.name
        assert _same(getattr(SpecStats().merge(a), f.name), getattr(a, f.name)), f.name


def test_the_random_aggregates_reach_every_field():
    """The generator above sets every field somewhere (else the associativity test would
    compare a field's default with itself)."""
    rng = random.Random(0)
    made = [SpecStats(keep_samples=rng.random() < 0.8).observe_all(_random_records(rng, 10**9))
            for _ in range(40)]
    empty = SpecStats()
    for f in dataclasses.fields(SpecStats):
        assert any(not _same(getattr(s, f.name), getattr(empty, f.name)) for s in made), f.name


def test_a_field_without_a_merge_rule_cannot_merge():
    from specscope.collector._merge import by, merged, total

    @dataclasses.dataclass
    class Partial:
        counted: int = by(total, default=0)
        forgotten: int = 0

    with pytest.raises(TypeError, match="Partial.forgotten declares no merge rule"):
        merged(Partial(), Partial())


@pytest.mark.parametrize("seed", range(40))
def test_merged_batches_hold_what_one_aggregate_of_all_their_records_holds(seed):
    """Batches folded apart and merged give every field that folding all the records at once
    gives (a rule that is associative but wrong, such as off periods summed where one batch
    continues the last one's, fails here)."""
    rng = random.Random(seed)
    parts = [_random_records(rng, t0) for t0 in (10**9, 2 * 10**9, 3 * 10**9)]
    whole = SpecStats().observe_all(r for part in parts for r in part)
    merged = SpecStats()
    for part in parts:
        merged = merged.merge(SpecStats().observe_all(part))
    for f in dataclasses.fields(SpecStats):
        assert _same(getattr(merged, f.name), getattr(whole, f.name)), f.name
