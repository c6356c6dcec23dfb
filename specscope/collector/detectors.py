"""Detectors: small classes that read a SpecStats and emit AnomalyRecords with evidence.

Never imports torch or dash. Thresholds are chosen for a false-alarm rate near zero on clean
runs; each class says what it measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import schema
from .stats import SpecStats


@dataclass
class SamplingTruthDetector:
    """Committed tokens do not follow the distribution the requests asked for.

    For each requested sampling mode other than greedy, the observed count of committed tokens
    equal to the target argmax is compared with its expectation (sum of p_max) through
    z = (observed - expected) / sqrt(sum p(1 - p)). Under honest sampling z is close to standard
    normal, so |z| > 6 has a false-alarm rate below 1e-8 per check (0 flags on 16 clean
    reference runs, tests/collector/test_detectors.py). Far above: ``silent_greedy`` (verify
    commits the argmax). Far below: ``sampling_mismatch`` (committed tokens are not target
    samples, e.g. a residual built from wrong draft probabilities). ``min_excess`` keeps huge
    samples from flagging tiny, harmless biases.
    """

    min_positions: int = 200
    z_threshold: float = 6.0
    min_excess: float = 0.05

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        out = []
        for mode, t in sorted(stats.truth.items()):
            if mode == schema.GREEDY or t.num_verified < self.min_positions or t.z is None:
                continue
            obs, exp, z = t.observed_rate or 0.0, t.expected_rate or 0.0, t.z
            evidence = {"mode_requested": mode, "num_positions": t.num_verified,
                        "observed_top1_rate": obs, "expected_top1_rate": exp, "z": _json_z(z)}
            if z > self.z_threshold and obs - exp > self.min_excess:
                kind, message = "silent_greedy", (
                    f"requests asking for {mode} commit the target argmax {obs:.1%} of the "
                    f"time; honest sampling would give {exp:.1%} (z = {_fmt_z(z)} over "
                    f"{t.num_verified} positions): verify is running greedy")
            elif z < -self.z_threshold and exp - obs > self.min_excess:
                kind, message = "sampling_mismatch", (
                    f"requests asking for {mode} commit the target argmax only {obs:.1%} of "
                    f"the time where the target distribution gives {exp:.1%} (z = {_fmt_z(z)}): "
                    "committed tokens are not target samples")
            else:
                continue
            out.append(schema.AnomalyRecord(run_id=run_id, kind=kind, severity="critical",
                                            message=message, evidence=evidence))
        return out


@dataclass
class FallbackDetector:
    """Any fallback event: verify did not run what the request asked for."""

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        return [schema.AnomalyRecord(
            run_id=run_id, kind="fallback", severity="warning",
            message=f"{n} fallback event(s) to argmax, reason {reason}",
            evidence={"reason": reason, "count": n}) for reason, n in sorted(stats.fallbacks.items()) if n > 0]


@dataclass
class DraftHealthDetector:
    """The draft's top-1 probability sits at exactly 1.0 (never computed) or in one bin.

    A computed float32 softmax reaches exactly 1.0 only on very peaked positions; on clean
    reference runs the share was below 10% (tiny model) and about 20% (SmolLM2, self-draft),
    so more than half at exactly 1.0 means the probabilities are not being computed.
    """

    min_positions: int = 100
    max_share_at_one: float = 0.5
    max_share_one_bin: float = 0.995

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        hist = stats.draft_hist
        n = sum(hist)
        if n < self.min_positions:
            return []
        at_one = hist[-1] / n
        top_bin = max(range(len(hist)), key=lambda i: hist[i])
        evidence = {"num_positions": n, "share_at_exactly_one": at_one, "histogram": list(hist)}
        if at_one > self.max_share_at_one:
            return [schema.AnomalyRecord(
                run_id=run_id, kind="draft_prob_collapse", severity="critical",
                message=(f"{at_one:.1%} of {n} drafted positions have a draft top-1 probability "
                         "of exactly 1.0: the draft distribution is not being computed"),
                evidence=evidence)]
        if hist[top_bin] / n > self.max_share_one_bin:
            return [schema.AnomalyRecord(
                run_id=run_id, kind="draft_prob_collapse", severity="warning",
                message=f"draft top-1 probabilities collapsed into one bin ({top_bin})",
                evidence=evidence)]
        return []


DEFAULT_DETECTORS = (SamplingTruthDetector(), FallbackDetector(), DraftHealthDetector())


def run_detectors(stats: SpecStats, run_id: str = "",
                  detectors=DEFAULT_DETECTORS) -> list[schema.AnomalyRecord]:
    """Every detector's findings for one aggregate."""
    out: list[schema.AnomalyRecord] = []
    for d in detectors:
        out.extend(d.check(stats, run_id))
    return out


def _json_z(z: float) -> float | str:
    return z if math.isfinite(z) else ("inf" if z > 0 else "-inf")


def _fmt_z(z: float) -> str:
    return f"{z:.1f}" if math.isfinite(z) else "inf"
