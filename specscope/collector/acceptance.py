"""Acceptance against a baseline: the regression detector ``compare``, ``regress``,
``report --baseline`` and the live trailing windows share. Never imports torch or dash."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .. import schema
from ..exact import PASS_ALPHA, _z
from .stats import SpecStats
from .verdict import FAIL, INCONCLUSIVE, PASS, Assessment


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

    PASS only where the data rule a fall of ``min_relative_drop`` out: the one-sided lower
    bound (at ``pass_alpha``, normal) of the run's mean minus the baseline's lies above minus
    that fall (per drafted position, from counters, where the histograms are missing: every
    position with drafts in both); INCONCLUSIVE between, with the lean and about how many more
    drafts would settle it; never on fewer than ``min_drafts`` (the normal approximation).
    """

    baseline: SpecStats | None = None
    z_threshold: float = 5.0
    min_relative_drop: float = 0.05
    min_drafts: int = 30
    pass_alpha: float = PASS_ALPHA

    def drafts_to_detect(self) -> int | None:
        """Drafts the run needs for a ``min_relative_drop`` fall to reach ``z_threshold``;
        None where the baseline itself is too small for any run to tell."""
        m0, v0, n0 = _mean_var_n(self.baseline.accept_len_hist) if self.baseline else (0, 0, 0)
        if not n0 or not m0:
            return None
        budget = (self.min_relative_drop * m0 / self.z_threshold) ** 2 - v0 / n0
        if budget <= 0:
            return None
        return max(self.min_drafts, math.ceil(max(v0, 1e-9) / budget))

    def assess(self, stats: SpecStats, run_id: str = "") -> list[Assessment]:
        base = self.baseline
        if base is None or not base.num_drafts or not stats.num_drafts:
            return []
        findings: dict[str, Any] = {}
        m1, v1, n1 = _mean_var_n(stats.accept_len_hist)
        m0, v0, n0 = _mean_var_n(base.accept_len_hist)
        needed = self.drafts_to_detect()
        check = "acceptance vs baseline"
        evidence: dict[str, Any] = {"num_drafts": stats.num_drafts, "drafts_needed": needed,
                    "baseline_mean_acceptance_length": m0, "mean_acceptance_length": m1}
        # counters (an engine's /metrics, imported logs) give per-position counts without the
        # accept-length histogram: then the per-position tests alone run
        counters_only = not stats.accept_len_hist and not base.accept_len_hist
        evidence["rules_out"] = (f"rules out a fall of {self.min_relative_drop:.0%} or more in "
                                 "acceptance (length with the bonus token, or per position) "
                                 "against the baseline")
        if (n1 < self.min_drafts or n0 < self.min_drafts) and not counters_only:
            evidence["lean"] = "fault" if m1 < m0 * (1 - self.min_relative_drop) else "honest"
            return [Assessment(check, INCONCLUSIVE, evidence, max(1, self.min_drafts - n1),
                               "drafts")]
        se = math.sqrt(v1 / n1 + v0 / n0) if n1 and n0 else 0.0
        z = (m1 - m0) / se if se else 0.0
        if z < -self.z_threshold and m1 < m0 * (1 - self.min_relative_drop):
            findings["mean_acceptance_length"] = {"baseline": m0, "now": m1, "z": z}
        for pos, (a1, d1, a0, d0) in enumerate(zip(stats.accepted_per_pos, stats.drafted_per_pos,
                                                   base.accepted_per_pos, base.drafted_per_pos)):
            if d1 < self.min_drafts or d0 < self.min_drafts:
                continue
            p1, p0 = a1 / d1, a0 / d0
            pooled = (a1 + a0) / (d1 + d0)
            se = math.sqrt(pooled * (1 - pooled) * (1 / d1 + 1 / d0))
            zp = (p1 - p0) / se if se else 0.0
            if zp < -self.z_threshold and p1 < p0 * (1 - self.min_relative_drop):
                findings[f"position_{pos}"] = {"baseline": p0, "now": p1, "z": zp}
        if not findings:
            return [self._equivalence(stats, base, evidence, counters_only, check)]
        what = ", ".join(f"{k} {v['baseline']:.3f} -> {v['now']:.3f} (z {v['z']:.1f})"
                         for k, v in findings.items())
        return [Assessment(check, FAIL, findings, anomaly=schema.AnomalyRecord(
            run_id=run_id, kind="acceptance_regression", severity="warning",
            message=f"acceptance fell: {what}", evidence=findings))]

    def _equivalence(self, stats: SpecStats, base: SpecStats, evidence: dict[str, Any],
                     counters_only: bool, check: str) -> Assessment:
        """PASS where every mean the run has (acceptance length, else each position's rate)
        has a lower bound above the baseline's less ``min_relative_drop``."""
        zp, drop = _z(self.pass_alpha), self.min_relative_drop
        if counters_only:
            means = [(a1 / d1, a1 / d1 * (1 - a1 / d1), d1, a0 / d0, a0 / d0 * (1 - a0 / d0), d0)
                     for a1, d1, a0, d0 in zip(stats.accepted_per_pos, stats.drafted_per_pos,
                                               base.accepted_per_pos, base.drafted_per_pos)
                     if d1 and d0]
        else:
            means = [(*_mean_var_n(stats.accept_len_hist), *_mean_var_n(base.accept_len_hist))]
        if not means:
            evidence["reason"] = "no drafted position in both the run and the baseline"
            return Assessment(check, INCONCLUSIVE, evidence, None, "drafts")
        needs: list[int | None] = []
        lean, bounds = "honest", []
        for m1, v1, n1, m0, v0, n0 in means:
            gap = m1 - m0 + drop * m0
            se = math.sqrt(v1 / n1 + v0 / n0)
            bounds.append((m1 - m0) - zp * se)
            if gap <= zp * se:
                if gap <= 0:
                    lean = "fault"
                    needs.append(None)
                    continue
                budget = (gap / zp) ** 2 - v0 / n0
                needs.append(None if budget <= 0 else max(1, math.ceil(max(v1, 1e-9) / budget) - n1))
        evidence["lower_bound_of_change"] = min(bounds)
        if not needs:
            return Assessment(check, PASS, evidence, None, "drafts")
        evidence["lean"] = lean
        if None in needs:
            evidence["reason"] = ("the run's acceptance sits at or below the fall it must rule out"
                                  if lean == "fault" else "the baseline is too small to rule a "
                                  f"{drop:.0%} fall out at any run size")
            return Assessment(check, INCONCLUSIVE, evidence, None, "drafts")
        return Assessment(check, INCONCLUSIVE, evidence, max(n for n in needs if n is not None),
                          "drafts")

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        return [a.anomaly for a in self.assess(stats, run_id) if a.anomaly is not None]

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
