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
class SilentGreedyDetector:
    """Verify commits the argmax far more often than the requested sampling would.

    For each requested sampling mode other than greedy, the observed count of committed tokens
    equal to the target argmax is compared with its expectation (sum of p_max) through
    z = (observed - expected) / sqrt(sum p(1 - p)). Under honest sampling z is close to standard
    normal, so z > 6 has a false-alarm rate below 1e-8 per check (0 of 40 clean reference runs
    flagged; see tests/collector). ``min_excess`` guards against huge samples flagging tiny,
    harmless biases.
    """

    min_positions: int = 200
    z_threshold: float = 6.0
    min_excess: float = 0.05

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        out = []
        for mode, t in sorted(stats.truth.items()):
            if mode == schema.GREEDY or t.num_verified < self.min_positions:
                continue
            z = t.z
            excess = (t.observed_rate or 0.0) - (t.expected_rate or 0.0)
            if z is not None and z > self.z_threshold and excess > self.min_excess:
                out.append(schema.AnomalyRecord(
                    run_id=run_id, kind="silent_greedy", severity="critical",
                    message=(f"requests asking for {mode} commit the target argmax "
                             f"{t.observed_rate:.1%} of the time; honest sampling would give "
                             f"{t.expected_rate:.1%} (z = {_fmt_z(z)} over {t.num_verified} "
                             "positions): verify is running greedy"),
                    evidence={"mode_requested": mode, "num_positions": t.num_verified,
                              "observed_top1_rate": t.observed_rate,
                              "expected_top1_rate": t.expected_rate, "z": _json_z(z)}))
        return out


@dataclass
class SamplingMismatchDetector:
    """Committed tokens equal the target argmax far LESS often than the requested sampling
    implies: verify is committing tokens that are not target samples (for example a residual
    computed from wrong draft probabilities). Same statistic and thresholds as silent greedy.
    """

    min_positions: int = 200
    z_threshold: float = 6.0
    min_excess: float = 0.05

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        out = []
        for mode, t in sorted(stats.truth.items()):
            if t.num_verified < self.min_positions:
                continue
            z = t.z
            deficit = (t.expected_rate or 0.0) - (t.observed_rate or 0.0)
            if z is not None and z < -self.z_threshold and deficit > self.min_excess:
                out.append(schema.AnomalyRecord(
                    run_id=run_id, kind="sampling_mismatch", severity="critical",
                    message=(f"requests asking for {mode} commit the target argmax only "
                             f"{t.observed_rate:.1%} of the time where the target distribution "
                             f"gives {t.expected_rate:.1%} (z = {_fmt_z(z)}): committed tokens "
                             "are not target samples"),
                    evidence={"mode_requested": mode, "num_positions": t.num_verified,
                              "observed_top1_rate": t.observed_rate,
                              "expected_top1_rate": t.expected_rate, "z": _json_z(z)}))
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


DEFAULT_DETECTORS = (SilentGreedyDetector(), SamplingMismatchDetector(), FallbackDetector(),
                     DraftHealthDetector())


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
