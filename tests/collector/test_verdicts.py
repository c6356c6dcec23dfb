"""Three states: a check says PASS only where the data could have failed it, INCONCLUSIVE with
how much more it needs below that, FAIL with its evidence."""

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
    assert small.why == "INCONCLUSIVE (need ~7 more positions)"
    (big,) = det.assess(_truth(32, 32, 0.4))
    assert big.state == FAIL and big.anomaly.kind == "silent_greedy"
    assert big.evidence["p_value"] < 1e-9 and big.evidence["positions_needed"] == 23


def test_an_honest_run_passes_only_once_it_could_have_failed():
    det = SamplingTruthDetector()
    assert det.assess(_truth(10, 4, 0.4))[0].state == INCONCLUSIVE
    assert det.assess(_truth(30, 13, 0.4))[0].state == PASS
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
                           num_draft_tokens=4, backend="cpu", model="m",
                           labels={"draft_dtype": "float32"})
    collapsed = _draft(66, 0)
    greedy = eval_gate(collapsed, None, run=run)
    assert greedy["verdict"] is None  # reported (draft_health in the report), not gated
    sampled = _draft(66, 0)
    sampled.truth[MODE] = TruthStats(40, 17, 16.0, 9.6)
    gate = eval_gate(sampled, None, run=run)
    assert gate["verdict"] == FAIL
    assert {c["check"]: c["state"] for c in gate["checks"]} == {
        f"sampling truth ({MODE})": PASS, "draft probabilities computed": FAIL}
    short = _draft(0, 3)
    short.truth[MODE] = TruthStats(8, 3, 3.2, 1.9)
    gate = eval_gate(short, None, run=run)
    assert gate["verdict"] == INCONCLUSIVE
    assert gate_text(gate) == "INCONCLUSIVE (need ~20 more drafted positions): draft probabilities computed"
    assert {c["need"] for c in gate["checks"]} == {15, 20}


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
    (a,) = det.assess(few)
    assert a.state == INCONCLUSIVE and a.need == need - 20 and a.unit == "drafts"
    worse = SpecStats()
    worse.accept_len_hist, worse.num_drafts = Counter({1: 900, 2: 300}), 1200
    (b,) = det.assess(worse)
    assert b.state == FAIL and b.anomaly.kind == "acceptance_regression"
    same = SpecStats()
    same.accept_len_hist, same.num_drafts = Counter(base.accept_len_hist), 12_000
    assert det.assess(same)[0].state == PASS
