"""The adaptive statistics policy: every step until each sampling class has decided, then one in
N; a class not seen before gets every step again. And the greedy structural check the
statistics feed: a mismatch beyond the tie margin fails at once, a near-tie does not."""

from __future__ import annotations

import numpy as np
import torch

from specscope import schema
from specscope.collector.detectors import SamplingTruthDetector
from specscope.collector.stats import SpecStats
from specscope.hooks import Recorder
from specscope.hooks.policy import UntilDecided


def test_every_step_until_decided_then_one_in_n_and_a_new_class_starts_again():
    policy = UntilDecided(every=32)
    greedy, sampled = [0.0, 0.0], [0.8, 0.8]
    assert all(policy.wants(s, sampled) for s in range(1, 40))  # nothing decided yet
    n = np.array([600, 600])  # an honest share: what the collector needs to PASS it
    policy.observe(sampled, None, None, n, (n * 0.6).astype(int), n * 0.6)
    # the temperature class has passed: one step in 32 for batches of it alone
    assert [s for s in range(1, 65) if policy.wants(s, sampled)] == [32, 64]
    # greedy has not decided: its batches still get every step
    assert all(policy.wants(s, greedy) for s in range(1, 10))
    # a batch with top-p asks again: a class it has not seen
    assert policy.wants(5, sampled, [0.9, 1.0], None)
    assert not policy.wants(5, sampled, [1.0, 1.0], [0, 0])


def test_a_class_that_already_failed_is_decided_and_an_undecidable_one_stops_asking():
    policy = UntilDecided(every=32, undecidable_positions=100)
    n = np.array([30])
    policy.observe([0.8], None, None, n, n, n * 0.3)  # all argmax where 30% is honest: failed
    assert 1 in policy.decided
    near_greedy = np.array([120])  # honest p_max 0.99: no sample size tells; stops at 100
    policy.observe([0.8], [0.5], None, near_greedy, near_greedy, near_greedy * 0.99)
    assert 1 | 2 in policy.decided


def _recorder_with_mismatch(run_record, gap: float) -> list:
    """One greedy request-step whose second verified position commits a token ``gap`` nats
    below the argmax."""
    rec = Recorder(run_record)
    logits = torch.zeros(1, 3, 20)
    logits[0, :, 1] = 10.0
    logits[0, 1, 7] = 10.0 - gap
    committed = torch.tensor([[1, 7, 1]])
    rec.record_verify(request_ids=["r0"], num_accepted=torch.tensor([2]), num_drafted=2,
                      temperature=[0.0], committed_tokens=committed, target_logits=logits)
    return rec.drain(wait=True)


def test_a_greedy_mismatch_beyond_the_tie_margin_fails_at_once_with_its_evidence(run_record):
    records = _recorder_with_mismatch(run_record, gap=3.0)
    (m,) = [r for r in records if isinstance(r, schema.MismatchRecord)]
    assert (m.request_id, m.position, round(m.margin, 3)) == ("r0", 1, 3.0)
    stats = SpecStats().observe_all(records)
    (check,) = SamplingTruthDetector(tie_margin=0.25).assess(stats)
    assert check.state == "fail" and stats.truth["greedy"].num_verified == 3  # 3 positions suffice
    ev = check.evidence
    assert (ev["worst_request_id"], ev["worst_position"], ev["structural_mismatches"]) == ("r0", 1, 1)
    assert "3 nats" in check.anomaly.message


def test_a_near_tie_keeps_the_allowance(run_record):
    records = _recorder_with_mismatch(run_record, gap=0.1)
    assert [r for r in records if isinstance(r, schema.MismatchRecord)]  # recorded, as evidence
    (check,) = SamplingTruthDetector(tie_margin=0.25).assess(SpecStats().observe_all(records))
    assert check.state == "inconclusive"


def test_a_class_waits_for_the_sharpness_test_and_its_fail_decides_it():
    """A top-1 share at its honest value decides nothing while the sharpness test has not
    ruled 0.8x and 1.25x the requested temperature out; its FAIL decides the class at once."""
    from specscope import sharp

    def observe(policy, n, llr):
        rows = np.array([n])
        policy.observe([0.8], None, None, rows, (rows * 0.6).astype(int), rows * 0.6,
                       sharp=(np.array([float(n)]), np.array([llr], dtype=float)))

    far = [c <= sharp.RULED_OUT or c >= 1 / sharp.RULED_OUT for c in sharp.GRID]
    open_ = UntilDecided(every=32)
    observe(open_, 600, [-1.0] * len(sharp.GRID))  # no alternative outweighed yet
    assert 1 not in open_.decided and open_.wants(5, [0.8])
    passed = UntilDecided(every=32)
    observe(passed, 600, [-6.0 if f else -1.0 for f in far])  # each far one at e^-6 < 1/100
    assert 1 in passed.decided and not passed.wants(5, [0.8])
    failed = UntilDecided(every=32)
    observe(failed, 60, [25.0 if c == 0.8 else -5.0 for c in sharp.GRID])  # e^25 / 8 > 1e9
    assert 1 in failed.decided
