"""Detectors: small classes that read a SpecStats and emit AnomalyRecords with evidence.

Never imports torch or dash. Thresholds are chosen for a false-alarm rate near zero on clean
runs; each class says what it measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .. import schema
from ..exact import ALPHA, PASS_ALPHA, decide_rate, fmt_p, one_sided_excess, tie_margin
from .acceptance import AcceptanceRegressionDetector  # noqa: F401 - re-exported
from .truth import TRUTH_CHECK, SamplingTruthDetector  # noqa: F401 - re-exported
from .stats import SpecStats
from .slots import slot_outliers
from .drift import ALL, ALPHA as DRIFT_ALPHA, drift
from .verdict import FAIL, Assessment, rate_evidence


DRAFT_CHECK = "draft probabilities computed"


@dataclass
class FallbackDetector:
    """Any fallback event: verify did not run what the request asked for."""

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        return [schema.AnomalyRecord(
            run_id=run_id, kind="fallback", severity="warning",
            message=f"{n} fallback event(s) to argmax, reason {reason}",
            evidence={"reason": reason, "count": n}) for reason, n in sorted(stats.fallbacks.items()) if n > 0]


#: The most an honest draft softmax puts at exactly 1.0, by the draft's dtype (share of drafted
#: positions). A float32 softmax reaches 1.0 only where every other probability is below 2^-24
#: of the top one; bf16 and fp16 round any top-1 above 1 - 2^-9 (bf16) or 1 - 2^-11 (fp16) to
#: 1.0. Measured (``make bench``, row "draft top-1 at exactly 1.0") on SmolLM2's int:4 draft
#: over its target's greedy text, with the logits sharpened x1, x3.3 and x10 as stand-ins for
#: more confident drafts: float32 0% / 2.4% / 35%, bf16 0.1% / 29% / 66%, fp16 0% / 20% / 58%.
#: The ceilings sit above the x10 figures; an unknown dtype gets the half-precision one.
HONEST_SHARE_AT_ONE = {"float32": 0.4, "bfloat16": 0.75, "float16": 0.75, "": 0.75}


@dataclass
class DraftHealthDetector:
    """The draft's top-1 probability sits at exactly 1.0 (never computed) or in one bin.

    The count of drafted positions at exactly 1.0 is tested against the most an honest softmax
    in the draft's dtype produces (``HONEST_SHARE_AT_ONE``), binomial upper tail below
    ``alpha``. PASS only where the share's upper bound at ``pass_alpha`` lies below that
    ceiling (a draft whose top-1 is never computed at the ceiling's share of positions or more
    is ruled out: 6 clean positions in float32, 17 in half precision); INCONCLUSIVE between.
    """

    alpha: float = ALPHA
    pass_alpha: float = PASS_ALPHA
    draft_dtype: str = ""  #: "float32", "bfloat16", "float16"; "" = unknown
    min_positions_one_bin: int = 100  #: the one-bin warning (not part of any gate) waits for this
    max_share_one_bin: float = 0.995

    def assess(self, stats: SpecStats, run_id: str = "") -> list[Assessment]:
        hist = stats.draft_hist
        n = sum(hist)
        if not n:
            return []
        base = HONEST_SHARE_AT_ONE.get(self.draft_dtype, HONEST_SHARE_AT_ONE[""])
        k = hist[-1]
        d = decide_rate(k, n, base, base, alpha=self.alpha, pass_alpha=self.pass_alpha, up=True)
        p = d.p_fail
        evidence = {"num_positions": n, "share_at_exactly_one": k / n, "histogram": list(hist),
                    "honest_share_at_one": base, "draft_dtype": self.draft_dtype or "unknown",
                    "p_value": p, "positions_needed": None if d.need is None else n + d.need,
                    **rate_evidence(d),
                    "rules_out": f"rules out a draft top-1 of exactly 1.0 at {base:.0%} or more "
                                 "of drafted positions (the most an honest "
                                 f"{self.draft_dtype or 'half-precision'} softmax gives)"}
        check = DRAFT_CHECK
        if d.state == FAIL:
            return [Assessment(check, FAIL, evidence, anomaly=schema.AnomalyRecord(
                run_id=run_id, kind="draft_prob_collapse", severity="critical",
                message=(f"{k / n:.1%} of {n} drafted positions have a draft top-1 probability "
                         f"of exactly 1.0, where an honest {self.draft_dtype or 'half-precision'} "
                         f"softmax gives at most {base:.0%} (p {fmt_p(p)}): the draft "
                         "distribution is not being computed"), evidence=evidence))]
        out = [Assessment(check, d.state, evidence, d.need, "drafted positions")]
        top_bin = max(range(len(hist)), key=lambda i: hist[i])
        if n >= self.min_positions_one_bin and hist[top_bin] / n > self.max_share_one_bin:
            out.append(Assessment("draft probabilities spread", FAIL, evidence,
                                  anomaly=schema.AnomalyRecord(
                run_id=run_id, kind="draft_prob_collapse", severity="warning",
                message=f"draft top-1 probabilities collapsed into one bin ({top_bin})",
                evidence=evidence)))
        return out

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        return [a.anomaly for a in self.assess(stats, run_id) if a.anomaly is not None]


@dataclass
class QualityDetector:
    """Repetition-loop and invalid-output rates above a baseline run's.

    Fisher's exact one-sided test at ``alpha`` and at least ``min_excess`` more (absolute):
    false-alarm rate at most ``alpha`` per signal when the runs are alike.
    """

    baseline: SpecStats | None = None
    alpha: float = 0.001
    min_excess: float = 0.10

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
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


@dataclass
class SpeculationOffDetector:
    """Speculation has been off (k = 0, as a speculation policy chose) for longer than
    ``max_off_s``, measured between the steps' own times: the draft model is loaded and idle,
    and whatever turned it off (acceptance, batch size) has lasted."""

    max_off_s: float = 60.0

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        if stats.last_depth != 0 or stats.off_since_ns is None or stats.last_depth_ns is None:
            return []
        off_s = (stats.last_depth_ns - stats.off_since_ns) / 1e9
        if off_s <= self.max_off_s:
            return []
        return [schema.AnomalyRecord(
            run_id=run_id, kind="speculation_off", severity="warning",
            message=f"speculation has been off for {off_s:.0f} s (more than {self.max_off_s:.0f} s): "
                    f"{stats.depth_steps.get(0, 0)} steps without drafting, {stats.off_periods} "
                    "off period(s); the trace's depth reasons say why",
            evidence={"off_s": off_s, "off_since_ns": stats.off_since_ns,
                      "off_steps": stats.depth_steps.get(0, 0), "off_periods": stats.off_periods,
                      "max_off_s": self.max_off_s})]


@dataclass
class AcceptanceLengthBoundsDetector:
    """Acceptance length (bonus included) pinned at either end over recent windows, from
    counts: under ``near_one`` the draft agrees with almost nothing (a broken draft, garbled
    output); within ``max_margin`` of k + 1 nearly every draft token is accepted, a known sign
    of degenerate repetition (outputs looping: throughput dashboards look best exactly then).
    Pooled over at least ``min_drafts`` drafts, the thresholds ``specscope rules`` alerts on.
    Meant for engines' counters (``specscope scrape``); a run whose k is unknown gets no
    upper check."""

    near_one: float = 1.05
    max_margin: float = 0.03
    min_drafts: int = 200

    def check(self, stats: SpecStats, run_id: str = "", k: int | None = None
              ) -> list[schema.AnomalyRecord]:
        al = stats.mean_acceptance_length
        if al is None or stats.num_drafts < self.min_drafts:
            return []
        evidence = {"mean_acceptance_length": al, "num_drafts": stats.num_drafts, "k": k}
        if al < self.near_one:
            return [schema.AnomalyRecord(
                run_id=run_id, kind="acceptance_length_near_one", severity="critical",
                message=f"acceptance length {al:.3f} (bonus included) over {stats.num_drafts} "
                        f"drafts: under {self.near_one}, the draft agrees with almost nothing",
                evidence=evidence)]
        if k and al > (1 - self.max_margin) * (k + 1):
            return [schema.AnomalyRecord(
                run_id=run_id, kind="acceptance_length_near_max", severity="warning",
                message=f"acceptance length {al:.3f} over {stats.num_drafts} drafts is within "
                        f"{self.max_margin:.0%} of k + 1 = {k + 1}: nearly every draft token is "
                        "accepted, a known sign of degenerate repetition (outputs looping)",
                evidence=evidence)]
        return []

    def recent(self, windows: list[SpecStats]) -> SpecStats:
        """The latest windows pooled, back to the first that reaches ``min_drafts``."""
        pooled = SpecStats(keep_samples=False)
        for w in reversed(windows):
            pooled = pooled.merge(w)
            if pooled.num_drafts >= self.min_drafts:
                break
        return pooled


@dataclass
class SlotDetector:
    """One batch row whose drafts are accepted far less often than the other rows'
    (``slots.py``: under a tenth of their rate, Fisher's exact test at ``alpha`` over the rows
    judged): the pooled rate only drops, which reads as a harder workload."""

    alpha: float = ALPHA

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        return self._found(stats.row_draft_tokens, stats.row_accepted, run_id, "row",
                           "batch row", "rows")

    def check_ranks(self, counts: dict[tuple[str, int], tuple[int, int]], run_id: str = ""
                    ) -> list[schema.AnomalyRecord]:
        """The same test across a run's ranks (``slots.rank_counts``: by node and rank;
        llama.cpp's slots)."""
        keys = sorted(counts)
        names = [f"{node}/{rank}" if node else str(rank) for node, rank in keys]
        return self._found([counts[k][0] for k in keys], [counts[k][1] for k in keys],
                           run_id, "rank", "rank", "ranks", names)

    def _found(self, drafted: list[int], accepted: list[int], run_id: str, key: str,
               what: str, plural: str, names: list[str] | None = None
               ) -> list[schema.AnomalyRecord]:
        name = names or [str(i) for i in range(len(drafted))]
        return [schema.AnomalyRecord(
            run_id=run_id, kind="slot_at_zero", severity="warning",
            message=f"{what} {name[f.slot]}: acceptance {f.rate:.3f} over {f.draft_tokens} draft "
                    f"tokens against {f.rest_rate:.3f} in the other {plural} (Fisher's exact "
                    f"one-sided p {fmt_p(f.p_value)} < {self.alpha:g} / {f.judged} {plural}, "
                    "its draft tokens read as independent, and under a tenth of their rate); "
                    "the pooled rate only drops. One that held only requests whose drafts fail "
                    "reads the same: look at the requests it held",
            evidence={key: name[f.slot] if names else f.slot, "draft_tokens": f.draft_tokens,
                      "accepted": f.accepted, "rate": f.rate, "rest_rate": f.rest_rate,
                      "p_value": f.p_value, f"{plural}_judged": f.judged, "alpha": self.alpha})
            for f in slot_outliers(drafted, accepted, alpha=self.alpha)]


@dataclass
class DriftDetector:
    """Acceptance that falls with uptime within the segments between restarts, per prompt
    class and draft position (``drift.py``: one slope, an intercept per segment, a one-sided
    t test at ``alpha`` over the cells judged)."""

    alpha: float = DRIFT_ALPHA

    def check(self, records: Sequence[schema.Record], run_id: str = "") -> list[schema.AnomalyRecord]:
        found = drift(records, alpha=self.alpha)
        out = []
        for t in found.flagged:
            where = "all positions" if t.position == ALL else f"draft position {t.position}"
            klass = f" of class {t.klass!r}" if t.klass else ""
            out.append(schema.AnomalyRecord(
                run_id=run_id, kind="acceptance_drift", severity="warning",
                message=f"acceptance at {where}{klass} falls {-t.relative_per_h:.1%} of its "
                        f"starting rate per hour of uptime ({t.fall:.1%} over {t.span_h:.2f} h, "
                        f"from {t.start_rate:.3f}; mean {t.rate:.3f}; {t.bins} spans in {t.segments} segment(s), "
                        f"{found.restarts} restart(s) seen, each a new level, never a change; "
                        f"t {t.t:.1f} on {t.df} df, one-sided p {fmt_p(t.p_value)} < "
                        f"{self.alpha:g} / {t.judged} cells): a restart restores it if the "
                        "engine ages; a workload that changes within the class reads the same",
                evidence={"class": t.klass, "position": t.position, "rate": t.rate,
                          "start_rate": t.start_rate,
                          "slope_per_h": t.slope_per_h, "relative_per_h": t.relative_per_h,
                          "fall": t.fall, "span_h": t.span_h, "t": t.t, "df": t.df,
                          "p_value": t.p_value, "cells_judged": t.judged,
                          "segments": t.segments, "restarts": found.restarts,
                          "alpha": self.alpha}))
        return out


DEFAULT_DETECTORS = (SamplingTruthDetector(), FallbackDetector(), DraftHealthDetector(),
                     SpeculationOffDetector())


def run_dtype(run: schema.RunRecord | None) -> str:
    """The dtype the run's target computes its logits in, where the run says ("" = unknown)."""
    if run is None:
        return ""
    labels = run.labels or {}
    return str(labels.get("dtype") or labels.get("target_dtype") or "").replace("torch.", "")


def detectors_for(run: schema.RunRecord | None, *, rows: bool = True) -> tuple:
    """The default detectors, told what the run says of itself (its draft's dtype), the
    acceptance- and distribution-based ones run only where the run measures them
    (``configured.py``: forced acceptance, lossy verification). ``rows``: the batch-row test
    too, for one run's records (never rows pooled over runs: each run fills its rows its own
    way)."""
    from .configured import ConfiguredVerification

    dtype = (run.labels.get("draft_dtype", "") if run is not None else "") or ""
    health = DraftHealthDetector(draft_dtype=dtype) if dtype else DraftHealthDetector()
    truth = SamplingTruthDetector(tie_margin=tie_margin(run_dtype(run)))
    return (ConfiguredVerification(run, (truth, health)), FallbackDetector(),
            SpeculationOffDetector()) + ((SlotDetector(),) if rows and run is not None else ())


def evaluate(stats: SpecStats, run_id: str = "", detectors=DEFAULT_DETECTORS
             ) -> tuple[list[Assessment], list[schema.AnomalyRecord]]:
    """Every detector once over one aggregate: its checks (PASS / FAIL / INCONCLUSIVE) and the
    anomalies they raise (detectors without checks, like fallbacks, only raise)."""
    checks: list[Assessment] = []
    anomalies: list[schema.AnomalyRecord] = []
    for d in detectors:
        if hasattr(d, "assess"):
            found = d.assess(stats, run_id)
            checks += found
            anomalies += [a.anomaly for a in found if a.anomaly is not None]
        else:
            anomalies += d.check(stats, run_id)
    return checks, anomalies


def run_detectors(stats: SpecStats, run_id: str = "",
                  detectors=DEFAULT_DETECTORS) -> list[schema.AnomalyRecord]:
    """Every detector's findings for one aggregate."""
    return evaluate(stats, run_id, detectors)[1]
