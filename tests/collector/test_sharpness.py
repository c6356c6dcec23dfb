"""The sharpness test in the collector: a class FAILs on its own sums; sampled classes whose sums
each fall short FAIL pooled, as a check of their own; a class leaning toward a fault never
PASSes; the statistics policy leaves each class to decide on its own."""

from __future__ import annotations

import numpy as np

from specscope import sharp
from specscope.collector.detectors import SamplingTruthDetector
from specscope.collector.stats import SpecStats, TruthStats
from specscope.hooks.policy import UntilDecided

#: log ratios per alternative leaning to 0.8x the requested temperature, scaled per use
LEAN = [0.6 if c == 0.8 else 0.4 if c in (0.63, 0.9) else -1.0 for c in sharp.GRID]


def _truth(n: int, scale: float) -> TruthStats:
    """A class with an honest top-1 share over ``n`` positions and sharpness sums ``scale`` x
    ``LEAN``."""
    return TruthStats(num_verified=n, num_top1=int(0.6 * n), expected_top1=0.6 * n,
                      var_top1=0.24 * n, sharp_positions=n, sharp_llr=[scale * x for x in LEAN])


def _stats(**classes: TruthStats) -> SpecStats:
    s = SpecStats()
    s.truth = {k.replace("_", "-").replace("-top-p", "+top-p"): v for k, v in classes.items()}
    return s


def test_two_classes_short_alone_fail_pooled_as_a_check_of_their_own():
    # e^(0.6 * 25) / 8 each, short of 1e9; pooled e^(0.6 * 50) / 8 is past it
    s = _stats(speculative_sampling=_truth(600, 25.0), speculative_sampling_top_p=_truth(600, 25.0))
    checks = SamplingTruthDetector().assess(s)
    by = {a.check: a for a in checks}
    assert by["sampling truth (speculative-sampling)"].state != "fail"
    assert by["sampling truth (speculative-sampling+top-p)"].state != "fail"
    pooled = by["sampling truth (sampled)"]
    assert pooled.state == "fail" and pooled.anomaly.kind == "distribution_mismatch"
    assert pooled.evidence["sharp_positions"] == 1200
    assert pooled.evidence["sharp_temperature_ratio"] == 0.8
    assert "sharper than asked" in pooled.anomaly.message


def test_a_class_that_fails_alone_needs_no_pooled_check_and_a_lean_holds_back_a_pass():
    s = _stats(speculative_sampling=_truth(600, 50.0), speculative_sampling_top_p=_truth(600, 1.0))
    checks = {a.check: a for a in SamplingTruthDetector().assess(s)}
    assert checks["sampling truth (speculative-sampling)"].state == "fail"
    assert "sampling truth (sampled)" not in checks
    # e^(0.6 * 12) / 8 ~ 167: past 100 to 1, so the top-1 share's PASS waits
    lean = _stats(speculative_sampling=_truth(2000, 12.0))
    (a,) = SamplingTruthDetector().assess(lean)
    assert a.state == "inconclusive" and a.evidence["lean"] == "fault", a.evidence
    honest = _truth(2000, 1.0)
    honest.sharp_llr = [-6.0] * len(sharp.GRID)  # every alternative outweighed past 100 to 1
    (a,) = SamplingTruthDetector().assess(_stats(speculative_sampling=honest))
    assert a.state == "pass", a.evidence


def test_the_pooled_fail_leaves_each_class_deciding_on_its_own():
    """A pooled FAIL is the run's verdict; each class keeps its statistics until its own checks
    decide (a class decided by the pooled test would be sampled at one step in 32, and its own
    verdict, which says which class is broken, would be starved)."""
    policy = UntilDecided(every=32)
    n = np.array([300, 300])
    policy.observe([0.8, 0.8], [1.0, 0.9], None, n, (n * 0.6).astype(int), n * 0.6,
                   sharp=(n.astype(float), np.array([[25.0 * x for x in LEAN]] * 2)))
    assert not policy.decided and policy.wants(5, [0.8, 0.8], [1.0, 0.9])
