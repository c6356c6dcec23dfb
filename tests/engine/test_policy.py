"""Speculation policies: k by batch size, adaptive k that turns speculation off when it loses,
and the trace and collector showing which k ran when and why."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope import schema
from specscope.collector.detectors import SpeculationOffDetector
from specscope.collector.stats import SpecStats
from specscope.engine.policy import AdaptivePolicy, BatchPolicy, parse_policy


@pytest.mark.parametrize("text, error", [
    ("batch:4", "each entry is BATCH=K"), ("batch:0=2", "each entry is BATCH=K"),
    ("batch:1=9", "above the drafted depth"), ("sometimes", "one of fixed, adaptive"),
])
def test_bad_policies_are_named(text, error):
    with pytest.raises(ValueError, match=error):
        parse_policy(text, 3)


def test_batch_policy_picks_k_by_running_batch_size():
    p = parse_policy("batch:1=3,4=2,16=0", 3)
    assert isinstance(p, BatchPolicy)
    got = [p.choose(b) for b in (1, 3, 4, 15, 16, 40, 2)]
    assert [k for k, _ in got] == [3, 3, 2, 2, 0, 0, 3]
    assert [bool(why) for _, why in got] == [True, False, True, False, True, False, True]
    assert got[2][1] == "batch size 4: k 3 -> k 2 (batch:1=3,4=2,16=0)"


def _drive(policy: AdaptivePolicy, steps: int, cost: dict[int, float], accepted: int, batch: int = 4):
    """Run the policy against a fake engine: a step at depth k takes cost[k] seconds and every
    row accepts ``accepted`` drafts (capped by k). Returns (k, reason) per step."""
    out = []
    for _ in range(steps):
        k, why = policy.choose(batch)
        policy.observe(k, batch, cost[k], [min(k, accepted)] * batch)
        out.append((k, why))
    return out


def test_adaptive_turns_speculation_off_where_it_loses_and_says_why():
    # every depth loses: k 1 commits 2 tokens in 2.2x the time of a target-only step, k 3 2 in 3x
    p = AdaptivePolicy(3, reprobe=40)
    trace = _drive(p, 600, {0: 1.0, 1: 2.2, 2: 2.6, 3: 3.0}, accepted=1)
    ks = [k for k, _ in trace]
    assert ks[:3] == [3, 3, 3] and ks[3] == 0  # the start, then the target-only probe
    verdict = next(why for _, why in trace[4:] if why)
    assert "speculation off" in verdict and "k 0: 1.00 tokens/step" in verdict
    assert ks.count(0) / len(ks) > 0.9
    # re-probes come back to measure, each one later than the last
    probes = [i for i, (_, why) in enumerate(trace) if why.startswith("re-probe")]
    assert len(probes) >= 2 and probes[1] - probes[0] > probes[0] - 8


def test_adaptive_keeps_speculating_where_it_wins():
    # k 3 costs 1.3x and commits up to 4 tokens: speculation wins, k stays up
    p = AdaptivePolicy(3)
    ks = [k for k, _ in _drive(p, 200, {0: 1.0, 1: 1.1, 2: 1.2, 3: 1.3}, accepted=3)]
    assert ks[3:6] == [0] * 3  # the one target-only probe
    assert ks[6:].count(3) / len(ks[6:]) > 0.9


def test_adaptive_steps_k_down_when_the_deepest_position_rarely_accepts():
    p = AdaptivePolicy(3)
    trace = _drive(p, 40, {0: 1.0, 1: 1.05, 2: 1.1, 3: 1.15}, accepted=1)
    assert any(why.startswith("the deepest position accepts 0%") for _, why in trace)
    assert 2 in [k for k, _ in trace]


@settings(max_examples=60, deadline=None)
@given(depths=st.lists(st.sampled_from([0, 0, 1, 3]), min_size=1, max_size=40),
       cut=st.integers(0, 40))
def test_depth_counters_merge_as_if_observed_at_once(depths, cut):
    """Off periods, the current k and when it went off do not depend on how the steps were
    split into batches (the collector folds batches in as they come)."""
    times = [1000 * (i + 1) for i in range(len(depths))]
    whole = SpecStats()
    whole.observe_depths(depths, times)
    a, b = SpecStats(), SpecStats()
    a.observe_depths(depths[:cut], times[:cut])
    b.observe_depths(depths[cut:], times[cut:])
    m = a.merge(b)
    assert (m.off_periods, m.last_depth, m.off_since_ns, dict(m.depth_steps)) == \
        (whole.off_periods, whole.last_depth, whole.off_since_ns, dict(whole.depth_steps))
    runs = sum(1 for i, k in enumerate(depths) if k == 0 and (i == 0 or depths[i - 1] != 0))
    assert whole.off_periods == runs


def test_decoder_trace_shows_when_and_why_speculation_went_off(tiny):
    """The reference decoder under an adaptive policy that finds speculation losing (the
    draft made 20x as slow as it is, as a slow draft on a busy host would be): off steps are
    recorded with k 0, the switch with its reason, and the collector counts it and flags it."""
    from specscope.engine.decoder import SpecConfig, SpeculativeDecoder
    from specscope.engine.workload import WorkloadSpec, build_requests
    from specscope.hooks.recorder import Recorder

    class SlowDraft(AdaptivePolicy):
        def observe(self, k, batch_size, seconds, accepted):
            super().observe(k, batch_size, seconds * (20 if k else 1), accepted)

    pair = tiny
    cfg = SpecConfig(num_steps=3, policy="adaptive")
    assert cfg.config_id.endswith("-adaptive")
    run = schema.RunRecord(run_id="r", config_id=cfg.config_id, algorithm="draft-model", num_steps=3,
                           topk=1, num_verify_tokens=4, backend="cpu", model="tiny")
    rec = Recorder(run)
    dec = SpeculativeDecoder(pair.target, pair.draft, cfg, recorder=rec, eos_ids=(), policy=SlowDraft(3))
    reqs, _ = build_requests(pair, WorkloadSpec(requests=4, max_new_tokens=40))
    for r in reqs:
        r.ignore_eos = True
    records = []
    batch = dec.new_batch()
    dec.admit(batch, reqs[:4])
    while batch.rows:
        dec.step(batch)
        records += rec.drain()
    records += rec.drain(wait=True)
    rec.close()
    steps = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    depths = [r.draft_depth for r in steps]
    assert depths[:3] == [3] * 3 and 0 in depths
    off = [r for r in steps if r.draft_depth == 0]
    assert all(e.num_drafted == 0 for r in off for e in r.entries)
    said = [(r.draft_depth, r.depth_reason) for r in steps if r.depth_reason]
    assert said[0] == (3, "start at the configured k 3")
    assert any(k == 0 and "speculation off" in why for k, why in said)
    s = SpecStats().observe_all(records)
    assert s.off_periods >= 1 and s.depth_steps[0] == len(off) and s.last_depth == 0
    assert s.mean_acceptance_length is not None  # off steps do not enter acceptance
    assert s.num_drafts == sum(len(r.entries) for r in steps if r.draft_depth)
    found = SpeculationOffDetector(max_off_s=0.0).check(s, "r")
    assert found and found[0].kind == "speculation_off"
    assert not SpeculationOffDetector(max_off_s=3600).check(s, "r")
