"""Detectors: small classes that read a SpecStats and emit AnomalyRecords with evidence.

Never imports torch or dash. Thresholds are chosen for a false-alarm rate near zero on clean
runs; each class says what it measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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
    reference runs no drafted position was at exactly 1.0 (0 of 3,801 on the tiny model at
    temperature 0.7; 0 of 426 on SmolLM2 with the int:4 draft, greedy), so more than half at
    exactly 1.0 means the probabilities are not being computed.
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


def _mean_var_n(hist: dict[int, int]) -> tuple[float, float, int]:
    n = sum(hist.values())
    if not n:
        return 0.0, 0.0, 0
    mean = sum(k * v for k, v in hist.items()) / n
    var = sum(v * (k - mean) ** 2 for k, v in hist.items()) / max(1, n - 1)
    return mean, var, n


@dataclass
class AcceptanceRegressionDetector:
    """Acceptance length and per-position acceptance fell against a baseline.

    Accept length: Welch z of the means of the accept-length histograms. Per position: a
    two-proportion z per drafted position. Flags where z < -``z_threshold`` AND the drop is at
    least ``min_relative_drop``: with |z| > 5 one test in about 3.5 million flags by chance on
    independent samples; steps of one request are correlated, so the clean-run check (two clean
    reference runs with different seeds, tests/collector/test_regression.py) is the figure
    that counts: 0 flags. Use ``baseline`` = an earlier run, or ``check_windows`` to compare the
    latest window with the ones before it.
    """

    baseline: SpecStats | None = None
    z_threshold: float = 5.0
    min_relative_drop: float = 0.05
    min_drafts: int = 200

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        base = self.baseline
        if base is None or stats.num_drafts < self.min_drafts or base.num_drafts < self.min_drafts:
            return []
        findings: dict[str, Any] = {}
        m1, v1, n1 = _mean_var_n(stats.accept_len_hist)
        m0, v0, n0 = _mean_var_n(base.accept_len_hist)
        se = math.sqrt(v1 / n1 + v0 / n0) if n1 and n0 else 0.0
        z = (m1 - m0) / se if se else 0.0
        if z < -self.z_threshold and m1 < m0 * (1 - self.min_relative_drop):
            findings["mean_acceptance_length"] = {"baseline": m0, "now": m1, "z": z}
        for pos, (a1, d1, a0, d0) in enumerate(zip(stats.accepted_per_pos, stats.drafted_per_pos,
                                                   base.accepted_per_pos, base.drafted_per_pos)):
            if not d1 or not d0:
                continue
            p1, p0 = a1 / d1, a0 / d0
            pooled = (a1 + a0) / (d1 + d0)
            se = math.sqrt(pooled * (1 - pooled) * (1 / d1 + 1 / d0))
            zp = (p1 - p0) / se if se else 0.0
            if zp < -self.z_threshold and p1 < p0 * (1 - self.min_relative_drop):
                findings[f"position_{pos}"] = {"baseline": p0, "now": p1, "z": zp}
        if not findings:
            return []
        what = ", ".join(f"{k} {v['baseline']:.3f} -> {v['now']:.3f} (z {v['z']:.1f})"
                         for k, v in findings.items())
        return [schema.AnomalyRecord(run_id=run_id, kind="acceptance_regression",
                                     severity="warning", message=f"acceptance fell: {what}",
                                     evidence=findings)]

    def check_windows(self, windows: list[SpecStats], recent: int = 1,
                      run_id: str = "") -> list[schema.AnomalyRecord]:
        """The last ``recent`` windows against all the windows before them."""
        if len(windows) <= recent:
            return []
        base, now = SpecStats(), SpecStats()
        for w in windows[:-recent]:
            base = base.merge(w)
        for w in windows[-recent:]:
            now = now.merge(w)
        return AcceptanceRegressionDetector(base, self.z_threshold, self.min_relative_drop,
                                            self.min_drafts).check(now, run_id)


@dataclass
class QualityDetector:
    """Repetition-loop and invalid-output rates above a baseline run's.

    One-sided two-proportion test at ``alpha`` and at least ``min_excess`` more (absolute):
    false-alarm rate at most ``alpha`` per signal when the runs are alike.
    """

    baseline: SpecStats | None = None
    alpha: float = 0.001
    min_excess: float = 0.10

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        from .evalgate import one_sided_excess

        if self.baseline is None:
            return []
        out = []
        for name in ("repetition_loop", "invalid"):
            hits, n = stats.evals.get(name, [0, 0])
            b_hits, b_n = self.baseline.evals.get(name, [0, 0])
            if not n or not b_n:
                continue
            excess, p = one_sided_excess(hits, n, b_hits, b_n)
            if p < self.alpha and excess >= self.min_excess:
                out.append(schema.AnomalyRecord(
                    run_id=run_id, kind=f"{name}_rate", severity="critical",
                    message=(f"{name.replace('_', ' ')} rate {hits / n:.1%} against "
                             f"{b_hits / b_n:.1%} in the baseline (p = {p:.2g})"),
                    evidence={"rate": hits / n, "baseline_rate": b_hits / b_n, "p_value": p,
                              "n": n, "baseline_n": b_n}))
        return out


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
