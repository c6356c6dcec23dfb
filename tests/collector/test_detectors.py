"""Detectors: false-alarm rate on clean runs of the reference decoder, and what they catch."""

from __future__ import annotations

import pytest

from specscope.collector.detectors import run_detectors
from specscope.collector.stats import SpecStats
from specscope.engine.decoder import SpecConfig
from specscope.engine.workload import WorkloadSpec, run_workload
from specscope.io.trace import read_trace

CLEAN = [(0.0, 1.0, 0), (0.5, 1.0, 0), (0.7, 1.0, 0), (1.0, 1.0, 0), (0.7, 0.9, 0),
         (0.9, 1.0, 20), (1.3, 0.8, 0), (0.7, 1.0, 0)]


@pytest.mark.parametrize("seed", [0, 1])
def test_no_false_alarm_on_clean_reference_runs(tiny, tmp_path, seed):
    """16 clean runs (8 sampling settings x 2 seeds; chain, tree, both verify modes): 0 flags."""
    for i, (t, p, k) in enumerate(CLEAN):
        cfg = (SpecConfig(num_steps=3, topk=2, num_draft_tokens=6) if i % 3 == 2
               else SpecConfig(num_steps=3, verify_mode="target-temperature" if i % 2 else ""))
        spec = WorkloadSpec(requests=8, concurrency=8, max_new_tokens=48, temperature=t,
                            top_p=p, top_k=k, seed=seed * 100 + i, reference=False)
        path = run_workload(tiny, cfg, spec, tmp_path / f"{i}.jsonl", progress=False)
        stats = SpecStats().observe_all(read_trace(path).records)
        assert run_detectors(stats) == [], (t, p, k, cfg.config_id)


def _counted(drafts: int, accepted: int) -> SpecStats:
    from specscope import schema

    return SpecStats().observe_all([schema.SpecCountsRecord(
        run_id="r", rank=0, t_ns=1, num_drafts=drafts, num_draft_tokens=3 * drafts,
        num_accepted=accepted)])


def test_acceptance_length_pinned_near_one_or_near_k_plus_1():
    """From counts over at least 200 drafts: under 1.05 (bonus included) is a broken draft,
    within 3% of k + 1 the sign of looping output; k unknown gets no upper check, and a
    window too small is left alone (the thresholds specscope rules alerts on)."""
    from specscope.collector.detectors import AcceptanceLengthBoundsDetector

    d = AcceptanceLengthBoundsDetector()
    assert [a.kind for a in d.check(_counted(1000, 40), k=3)] == ["acceptance_length_near_one"]
    assert [a.kind for a in d.check(_counted(1000, 2900), k=3)] == ["acceptance_length_near_max"]
    assert d.check(_counted(1000, 2900), k=None) == []  # 3.9 with k unknown
    assert d.check(_counted(1000, 2800), k=3) == []  # 3.8 < 0.97 * 4
    assert d.check(_counted(1000, 60), k=3) == []  # 1.06
    assert d.check(_counted(150, 0), k=3) == []  # too few drafts
    # recent windows pooled back to 200 drafts: the latest alone (100) is too few
    windows = [_counted(1000, 1500), _counted(150, 3), _counted(100, 2)]
    pooled = d.recent(windows)
    assert pooled.num_drafts == 250 and d.check(pooled, k=3)[0].kind == "acceptance_length_near_one"


#: each fault of the reference decoder whose top-1 share stays near honest (engine/config.py),
#: with the sampling it is seen under, and the least shift of the mean PIT it makes on the
#: tiny model at temperature 0.8 (measured: 0.07, 0.05, 0.05 and 0.05 over 3,000 positions)
SHAPES = [("temperature_twice", 1.0), ("top_p_ignored", 0.9), ("residual_argmax", 1.0),
          ("bonus_argmax", 1.0)]
SHIFT = 0.04


@pytest.mark.parametrize("fault,top_p", SHAPES)
def test_faults_of_other_shapes_fail_the_whole_distribution(tiny, tmp_path, fault, top_p):
    """Rounds of 16 requests until the sampled class FAILs or the cap passes: ``pit_cap``
    positions, by which a fault moving the mean PIT by ``SHIFT`` has failed the
    whole-distribution test except with probability 1e-4. Rounds go on until the PIT itself
    has failed (the top-1 share catches some of these first: a sharper verify raises it)."""
    from specscope.collector.detectors import SamplingTruthDetector

    from tests.engines.until import pit_cap

    cap, records, failed = pit_cap(SHIFT), [], []
    stats = SpecStats()
    for i in range(64):
        spec = WorkloadSpec(requests=16, concurrency=16, max_new_tokens=96, temperature=0.8,
                            top_p=top_p, seed=i, reference=False)
        path = run_workload(tiny, SpecConfig(num_steps=3, fault=fault), spec,
                            tmp_path / f"{i}.jsonl", progress=False)
        records += read_trace(path).records
        stats = SpecStats().observe_all(records)
        checks = [a for a in SamplingTruthDetector().assess(stats) if a.evidence.get("pit_positions")]
        failed = [a for a in checks if a.evidence["pit_state"] == "fail"]
        if failed or sum(a.evidence["pit_positions"] for a in checks) >= cap:
            break
    assert failed, [a.evidence for a in checks]
    (a,) = failed
    assert a.state == "fail" and a.anomaly is not None, a.evidence
    shift = a.evidence["pit_mean"] - 0.5
    assert (shift > 0) == (fault == "top_p_ignored"), shift  # dropped top-p is flatter
    if fault == "top_p_ignored":  # and it commits tokens the nucleus excludes: named at once
        assert a.anomaly.kind == "truncation_violated" and a.evidence["num_outside"] > 0
    print(f"{fault}: FAIL after {a.evidence['pit_positions']} positions ({i + 1} rounds), "
          f"mean PIT {a.evidence['pit_mean']:.3f}, top-1 {a.evidence['observed_top1_rate']:.3f} "
          f"against {a.evidence['expected_top1_rate']:.3f}")


def test_a_verify_that_accepts_against_its_own_rule_fails_the_acceptance_check(tiny, tmp_path):
    """``accept_ignores_q``: the acceptance test reads p alone while the draft samples, so
    verify accepts fewer drafts than min(1, p/q) gives; the top-1 share and the PIT stay near
    honest. Rounds until the acceptance check FAILs or ``accept_cap(0.1)`` tested drafts (by
    which a verify 10 points off its rule has failed except with probability 1e-4); clean
    rounds of the same size never FAIL it."""
    from tests.engines.until import accept_cap

    cap = accept_cap(0.1)

    def rounds(fault: str):
        return _rounds(tiny, tmp_path, fault, "accept_trials", lambda a: a.evidence[
            "accept_state"] == "fail" or a.evidence["accept_trials"] >= cap)[0]

    a = rounds("accept_ignores_q")
    assert a.state == "fail" and a.anomaly is not None and a.anomaly.kind == "acceptance_mismatch"
    assert a.evidence["accept_observed_rate"] < a.evidence["accept_expected_rate"] - 0.1
    assert a.evidence["pit_state"] != "fail", a.evidence  # the distribution looks honest
    clean = rounds("")
    assert clean.evidence["accept_state"] != "fail" and clean.state != "fail", clean.evidence


def test_a_temperature_applied_twice_fails_the_sharpness_test_and_clean_rounds_do_not(tiny,
                                                                                      tmp_path):
    """``temperature_twice``: verify samples at T squared (requests at 0.8 sampled at 0.64).
    Rounds of 16 requests until the sharpness test FAILs or 32 rounds pass; it names the
    sharper side and the alternative nearest the fault (0.8x). The same rounds clean never
    FAIL it (its false-alarm rate is 1e-9 however often it is read)."""
    def rounds(fault: str, limit: int = 32):
        return _rounds(tiny, tmp_path, fault, "sharp_positions",
                       lambda a: a.evidence["sharp_state"] == "fail", limit)

    a, n = rounds("temperature_twice")
    assert a.evidence["sharp_state"] == "fail" and a.state == "fail", a.evidence
    assert a.anomaly is not None and a.anomaly.kind in ("distribution_mismatch", "silent_greedy")
    assert a.evidence["sharp_temperature_ratio"] < 1, a.evidence
    print(f"temperature_twice: sharpness FAIL after {a.evidence['sharp_positions']} positions "
          f"({n} rounds), e^{a.evidence['sharp_log_ratio']:.1f}, best "
          f"{a.evidence['sharp_temperature_ratio']}x")
    clean, _ = rounds("", limit=n)
    assert clean.evidence["sharp_state"] != "fail", clean.evidence


def _rounds(tiny, tmp_path, fault: str, key: str, done, limit: int = 32):
    """Rounds of 16 requests at temperature 0.8 on the reference decoder with ``fault``, until
    ``done`` holds of the sampled class's assessment (the one whose evidence has ``key``) or
    ``limit`` rounds have run: that assessment and the rounds it took."""
    from specscope.collector.detectors import SamplingTruthDetector

    records: list = []
    for i in range(limit):
        spec = WorkloadSpec(requests=16, concurrency=16, max_new_tokens=64, temperature=0.8,
                            seed=i, reference=False)
        path = run_workload(tiny, SpecConfig(num_steps=3, fault=fault), spec,
                            tmp_path / f"{fault}{i}.jsonl", progress=False)
        records += read_trace(path).records
        (a,) = [x for x in SamplingTruthDetector().assess(SpecStats().observe_all(records))
                if x.evidence.get(key)]
        if done(a):
            return a, i + 1
    return a, limit
