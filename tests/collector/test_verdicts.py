"""Three states: a check says PASS only where the data rule its fault out at the stated size,
INCONCLUSIVE with its lean and how much more would settle it, FAIL with its evidence."""

from __future__ import annotations

from collections import Counter

from specscope import schema
from specscope.collector.detectors import (AcceptanceRegressionDetector, DraftHealthDetector,
                                           SamplingTruthDetector)
from specscope.collector.evalgate import eval_gate, gate_text
from specscope.collector.stats import SpecStats, TruthStats
from specscope.collector.verdict import FAIL, INCONCLUSIVE, PASS

MODE = schema.SPECULATIVE_SAMPLING


def _truth(n: int, top1: int, rate: float) -> SpecStats:
    s = SpecStats()
    s.truth[MODE] = TruthStats(n, top1, rate * n, rate * (1 - rate) * n)
    return s


def test_silent_greedy_fails_as_soon_as_the_sample_could_show_it():
    det = SamplingTruthDetector()
    (small,) = det.assess(_truth(16, 16, 0.4))  # 0.4^16 = 4e-7: not beyond 1e-9 yet
    assert small.state == INCONCLUSIVE and small.need == 23 - 16
    assert small.why == "INCONCLUSIVE (leans toward the fault; need ~7 more positions)"
    (big,) = det.assess(_truth(32, 32, 0.4))
    assert big.state == FAIL and big.anomaly.kind == "silent_greedy"
    assert big.evidence["p_value"] < 1e-9


def test_an_honest_run_passes_only_once_it_rules_the_fault_out():
    det = SamplingTruthDetector()
    assert det.assess(_truth(10, 4, 0.4))[0].state == INCONCLUSIVE
    # 30 positions could fail an all-argmax verify, but cannot exclude an excess of 5 points
    early = det.assess(_truth(30, 12, 0.4))[0]
    assert early.state == INCONCLUSIVE and early.evidence["lean"] == "honest"
    assert early.why.startswith("INCONCLUSIVE (leans honest; need ~") and 300 < 30 + early.need < 900
    honest = det.assess(_truth(800, 320, 0.4))[0]
    assert honest.state == PASS and honest.evidence["excess_bound"] < 0.05
    assert honest.why == ("PASS (rules out an argmax share 5% or more away from honest sampling's "
                          "40.0% (verify committing the argmax at 8% or more of positions, or a "
                          "deficit as large))")
    # sampling at a temperature so low that it is nearly greedy cannot be told from greedy
    near = det.assess(_truth(10_000, 9_800, 0.98))[0]
    assert near.state == INCONCLUSIVE and near.need is None and "too close to greedy" in near.why
    # too few argmaxes: the committed tokens are not target samples
    low = det.assess(_truth(200, 20, 0.6))[0]
    assert low.state == FAIL and low.anomaly.kind == "sampling_mismatch"


def _draft(at_one: int, below: int) -> SpecStats:
    s = SpecStats()
    s.draft_hist = [below] + [0] * (schema.DRAFT_HIST_BINS - 2) + [at_one]
    return s


def test_draft_health_tests_the_share_at_one_against_the_dtype_s_honest_rate():
    fp32 = DraftHealthDetector(draft_dtype="float32")
    (a,) = fp32.assess(_draft(66, 0))
    assert a.state == FAIL and a.anomaly.severity == "critical"
    few = fp32.assess(_draft(3, 0))[0]  # 0.4^3 is not small enough
    assert few.state == INCONCLUSIVE and few.need == 23 - 3
    assert fp32.assess(_draft(2, 998))[0].state == PASS
    # half precision rounds confident probabilities to 1.0: 60% at one can be honest there
    assert DraftHealthDetector(draft_dtype="bfloat16").assess(_draft(600, 400))[0].state == PASS
    assert fp32.assess(_draft(600, 400))[0].state == FAIL
    # an unknown dtype gets the half-precision ceiling
    assert DraftHealthDetector().assess(_draft(600, 400))[0].state == PASS


def test_the_gate_reads_draft_health_only_where_verification_reads_the_draft():
    run = schema.RunRecord(run_id="r", config_id="c", algorithm="eagle", num_steps=3, topk=1,
                           num_verify_tokens=4, backend="cpu", model="m",
                           labels={"draft_dtype": "float32"})
    collapsed = _draft(66, 0)
    greedy = eval_gate(collapsed, None, run=run)
    assert greedy["verdict"] is None  # reported (draft_health in the report), not gated
    sampled = _draft(66, 0)
    sampled.truth[MODE] = TruthStats(1000, 400, 400.0, 240.0)
    gate = eval_gate(sampled, None, run=run)
    assert gate["verdict"] == FAIL
    assert {c["check"]: c["state"] for c in gate["checks"]} == {
        f"sampling truth ({MODE})": PASS, "draft probabilities computed": FAIL}
    short = _draft(0, 3)
    short.truth[MODE] = TruthStats(8, 3, 3.2, 1.9)
    gate = eval_gate(short, None, run=run)
    assert gate["verdict"] == INCONCLUSIVE
    # 3 of 8 where 40% is honest sits halfway to a 5-point deficit: sampling truth needs the most
    assert gate_text(gate).endswith(f"more positions): sampling truth ({MODE})")
    draft = next(c for c in gate["checks"] if c["check"] == "draft probabilities computed")
    assert draft["state"] == INCONCLUSIVE and draft["lean"] == "honest" and draft["need"] == 7
    assert draft["state"] == INCONCLUSIVE  # 0.6^10 < 1%: ten clean positions rule 40% out


def test_a_regression_check_says_how_many_drafts_it_needs():
    base = SpecStats()
    base.accept_len_hist = Counter({1: 300, 2: 300, 3: 300, 4: 300})
    base.num_drafts = 1200
    # 1,200 baseline drafts cannot show a 5% fall at z 5 whatever the run's size
    assert AcceptanceRegressionDetector(base).drafts_to_detect() is None
    base.accept_len_hist = Counter({1: 3000, 2: 3000, 3: 3000, 4: 3000})
    base.num_drafts = 12_000
    det = AcceptanceRegressionDetector(base)
    need = det.drafts_to_detect()
    assert need is not None and 1000 < need < 12_000
    few = SpecStats()
    few.accept_len_hist, few.num_drafts = Counter({1: 10, 2: 10}), 20
    (a,) = det.assess(few)  # under the normal approximation's minimum: 10 more to start
    assert a.state == INCONCLUSIVE and a.need == 10 and a.unit == "drafts"
    # as good as the baseline, but 200 drafts cannot exclude a 5% fall yet
    mid = SpecStats()
    mid.accept_len_hist, mid.num_drafts = Counter({1: 50, 2: 50, 3: 50, 4: 50}), 200
    (m,) = det.assess(mid)
    assert m.state == INCONCLUSIVE and m.evidence["lean"] == "honest" and 100 < m.need < 1000
    worse = SpecStats()
    worse.accept_len_hist, worse.num_drafts = Counter({1: 900, 2: 300}), 1200
    (b,) = det.assess(worse)
    assert b.state == FAIL and b.anomaly.kind == "acceptance_regression"
    same = SpecStats()
    same.accept_len_hist, same.num_drafts = Counter(base.accept_len_hist), 12_000
    assert det.assess(same)[0].state == PASS


def test_pass_needs_the_fault_ruled_out_at_its_size():
    """The cases a real SGLang gave: excess argmax shares that alpha does not flag are no PASS."""
    det = SamplingTruthDetector()
    # observed 0.926 against 0.847 over 189 positions, z 4.1: leans toward silent greedy
    (a,) = det.assess(_truth(189, 175, 0.847))
    assert a.state == INCONCLUSIVE and a.evidence["lean"] == "fault"
    assert a.evidence["excess_bound"] > 0.05
    # 0.924 against 0.876 over 2,367 (p 1e-14, an excess just under min_excess): not a PASS
    (b,) = det.assess(_truth(2367, 2187, 0.876))
    assert b.state == INCONCLUSIVE and b.evidence["lean"] == "fault"
    assert b.why.startswith("INCONCLUSIVE (leans toward the fault")
    # an excess of exactly the fault's size never passes, however large the sample
    for n in (100, 1000, 10_000, 100_000):
        (c,) = det.assess(_truth(n, round(0.65 * n), 0.6))
        assert c.state != PASS
    # and just inside it, a large enough sample does
    assert det.assess(_truth(100_000, 64_000, 0.6))[0].state == PASS
    # a deficit as large is a fault too (committed tokens not target samples)
    (d,) = det.assess(_truth(300, 100, 0.37))
    assert d.state == INCONCLUSIVE


def test_the_pass_rule_s_error_budget_holds_for_a_fault_of_the_stated_size():
    """Draws from a verify that commits the argmax 5 points too often pass at most 1% of the
    time, at any sample size; honest draws of the stated size pass most of the time."""
    import random

    det = SamplingTruthDetector()
    rng = random.Random(7)
    for n in (200, 1000, 4000):
        faulty = sum(det.assess(_truth(n, sum(rng.random() < 0.65 for _ in range(n)), 0.6))[0]
                     .state == PASS for _ in range(200))
        assert faulty <= 6  # 1% of 200 is 2; binomial slack
    honest = [det.assess(_truth(2000, sum(rng.random() < 0.6 for _ in range(2000)), 0.6))[0].state
              for _ in range(100)]
    assert FAIL not in honest and honest.count(PASS) >= 95
