"""Detectors: small classes that read a SpecStats and emit AnomalyRecords with evidence.

Never imports torch or dash. Thresholds are chosen for a false-alarm rate near zero on clean
runs; each class says what it measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .. import pit, schema
from ..exact import (ALPHA, PASS_ALPHA, decide_rate, fmt_p, greedy_positions_needed,
                     one_sided_excess, tie_margin)
from .acceptance import AcceptanceRegressionDetector  # noqa: F401 - re-exported
from .stats import SpecStats, TruthStats
from .verdict import FAIL, INCONCLUSIVE, PASS, Assessment, rate_evidence


TRUTH_CHECK = "sampling truth"  #: followed by " (mode)"
DRAFT_CHECK = "draft probabilities computed"


@dataclass
class SamplingTruthDetector:
    """Committed tokens do not follow the distribution the requests asked for.

    For each requested sampling mode other than greedy, the count of committed tokens equal to
    the target argmax over n verified positions is Poisson-binomial under honest sampling (each
    position has its own argmax probability). Its tail is bounded by the binomial tail at the
    mean expected rate (``exact.py``), so flagging at a tail below ``alpha`` (1e-9, about the
    one-sided 6-sigma normal tail) has a false-alarm rate of at most ``alpha`` per test. Far
    above: ``silent_greedy`` (verify commits the argmax). Far below: ``sampling_mismatch``
    (committed tokens are not target samples, e.g. a residual built from wrong draft
    probabilities). ``min_excess`` keeps huge samples from flagging tiny, harmless biases.

    PASS only where the data rule the fault out at its size: the argmax share's one-sided
    bounds at ``pass_alpha`` (99%) lie within ``min_excess`` of the expected rate on both sides
    (an equivalence test: an excess of 5 points or more, silent greedy at ``min_excess / (1 -
    expected)`` of positions or more, is excluded, and so is a deficit as large). Everything
    between is INCONCLUSIVE, leaning toward the fault or honest, with about how many more
    positions would settle it; a run whose expected rate is within ``min_excess`` of 1 can never
    rule silent greedy out and stays INCONCLUSIVE with that reason.

    Beside the top-1 share, the whole distribution (``specscope.pit``), where the entries carry
    it: the committed tokens' mean mid-rank PIT must be 1/2. Off it at ``alpha`` (a sequential
    two-sided bound, valid however often it is read) and by more than ``pit.FAIL_SHIFT``:
    ``distribution_mismatch``, committed tokens too concentrated on the most probable ones
    (below 1/2: a temperature applied twice, a residual or a bonus token taken as its argmax)
    or spread too far into the tail (above). A class PASSes only where both tests do (the PIT's:
    a shift of ``pit.PASS_SHIFT`` or more ruled out at ``pass_alpha``).

    Greedy requests must commit the argmax at every position. The only honest exception is a
    near tie that the verify kernel breaks another way than the statistics' argmax (reduced
    precision, another reduction order): ``greedy_tie_rate`` (1%) allows for it, so
    ``greedy_mismatch`` flags a share of non-argmax tokens that a 1% tie rate gives with
    probability under ``alpha`` and that exceeds it by ``min_excess``; PASS rules out a share of
    ``greedy_tie_rate + min_excess`` (6%) or more.
    """

    alpha: float = ALPHA
    min_excess: float = 0.05
    greedy_tie_rate: float = 0.01
    pass_alpha: float = PASS_ALPHA
    #: nats: a greedy mismatch whose margin exceeds this is structural (``exact.TIE_MARGIN`` of
    #: the run's dtype; by default the widest, bfloat16's)
    tie_margin: float = tie_margin("")

    def assess(self, stats: SpecStats, run_id: str = "") -> list[Assessment]:
        return [self.assess_greedy(t, run_id, mismatches=stats.mismatches)
                if mode == schema.GREEDY else self.assess_one(mode, t, run_id)
                for mode, t in sorted(stats.truth.items()) if t.num_verified]

    def greedy_needed(self) -> int:
        """Positions at which greedy requests that commit the argmax only ``1 - tie rate -
        min_excess`` of the time would fail the check."""
        return greedy_positions_needed(self.greedy_tie_rate, self.min_excess, self.alpha)

    def assess_greedy(self, t: TruthStats, run_id: str = "", scope: str = "",
                      mismatches: Sequence[tuple] = ()) -> Assessment:
        """Greedy requests' counters: every committed token should be the target argmax.

        A mismatch whose margin exceeds ``tie_margin`` (``mismatches``: (margin, request, step,
        position, rank), widest first) FAILS at once, whatever the count of positions: no
        numerical tie explains it. Near-ties keep the ``greedy_tie_rate`` allowance."""
        n, k = t.num_verified, t.num_top1
        exp = 1.0 - self.greedy_tie_rate
        fault = exp - self.min_excess
        obs = k / n
        d = decide_rate(k, n, exp, fault, alpha=self.alpha, pass_alpha=self.pass_alpha)
        needed = self.greedy_needed()
        if scope:
            mismatches = [m for m in mismatches if m[1] == scope]
        structural = [m for m in mismatches if m[0] > self.tie_margin]
        evidence = {"mode_requested": schema.GREEDY, "num_positions": n,
                    "observed_top1_rate": obs, "expected_top1_rate": 1.0,
                    "allowed_tie_rate": self.greedy_tie_rate, "p_value": d.p_fail,
                    "positions_needed": needed, "tie_margin": self.tie_margin,
                    "structural_mismatches": len(structural), **rate_evidence(d),
                    "rules_out": f"rules out non-argmax tokens at {1 - fault:.0%} or more of "
                                 "greedy positions"}
        where = f" in request {scope}" if scope else ""
        if scope:
            evidence["request_id"] = scope
        check = f"{TRUTH_CHECK} ({schema.GREEDY})"
        if structural:
            margin, request, step, position, rank = structural[0]
            evidence.update(worst_margin=margin, worst_request_id=request, worst_step=step,
                            worst_position=position, worst_rank=rank, lean=None)
            message = (f"a greedy request{where} committed a token its target ranked below the "
                       f"argmax by {margin:.3g} nats (request {request}, step {step}, position "
                       f"{position}), beyond the {self.tie_margin:g}-nat tie margin; "
                       f"{len(structural)} such request-step(s): verify is not lossless")
            return Assessment(check, FAIL, evidence, anomaly=schema.AnomalyRecord(
                run_id=run_id, kind="greedy_mismatch", severity="critical", message=message,
                evidence=evidence))
        if d.state == FAIL:
            message = (f"requests asking for greedy decoding{where} commit the target argmax "
                       f"only {obs:.1%} of the time (p {fmt_p(d.p_fail)} over {n} positions, "
                       f"allowing {self.greedy_tie_rate:.0%} near ties): verify commits tokens "
                       "the target did not choose")
            return Assessment(check, FAIL, evidence, anomaly=schema.AnomalyRecord(
                run_id=run_id, kind="greedy_mismatch", severity="critical", message=message,
                evidence=evidence))
        return Assessment(check, d.state, evidence, d.need, "positions")

    def assess_one(self, mode: str, t: TruthStats, run_id: str = "",
                   scope: str = "") -> Assessment:
        """One requested mode's counters (a run's, or one request's with ``scope`` its id)."""
        if mode == schema.GREEDY:
            return self.assess_greedy(t, run_id, scope)
        n, k = t.num_verified, t.num_top1
        exp = min(1.0, max(0.0, t.expected_top1 / n))
        obs = k / n
        delta = self.min_excess
        hi = decide_rate(k, n, exp, exp + delta, alpha=self.alpha, pass_alpha=self.pass_alpha)
        lo = decide_rate(k, n, exp, exp - delta, alpha=self.alpha, pass_alpha=self.pass_alpha)
        if exp - delta <= 0.0:  # no deficit that large is possible: nothing to rule out below
            lo = lo.__class__(PASS, None, "honest", lo.bound, lo.p_fail, 0.0)
        evidence = {"mode_requested": mode, "num_positions": n, "observed_top1_rate": obs,
                    "expected_top1_rate": exp, "p_value": min(hi.p_fail, lo.p_fail),
                    "z": _json_z(t.z) if t.z is not None else None,
                    "positions_needed": None, "bound": hi.bound,
                    "excess_bound": None if hi.bound is None else hi.bound - exp,
                    "lower_bound": lo.bound, "p_pass": max(hi.p_pass, lo.p_pass),
                    "rules_out": (f"rules out an argmax share {delta:.0%} or more away from "
                                  f"honest sampling's {exp:.1%} (verify committing the argmax "
                                  f"at {min(1.0, delta / max(1e-9, 1 - exp)):.0%} or more of "
                                  "positions, or a deficit as large)")}
        where = f" in request {scope}" if scope else ""
        dist = self._pit(t, evidence)
        rule = self._accept(t, evidence)
        kind = message = None
        if t.num_outside:
            evidence["num_outside"] = t.num_outside
        if t.num_outside:
            kind, message = "truncation_violated", (
                f"{t.num_outside} committed token(s) of requests asking for {mode}{where} lie "
                "outside their top-k / top-p truncation by more than bfloat16's 0.25-nat tie "
                "margin: verify samples tokens the request excludes")
        elif hi.state == FAIL:
            kind, message = "silent_greedy", (
                f"requests asking for {mode}{where} commit the target argmax {obs:.1%} of the "
                f"time; honest sampling would give {exp:.1%} (p {fmt_p(hi.p_fail)} over {n} "
                "positions): verify is running greedy")
        elif lo.state == FAIL:
            kind, message = "sampling_mismatch", (
                f"requests asking for {mode}{where} commit the target argmax only {obs:.1%} of "
                f"the time where the target distribution gives {exp:.1%} (p {fmt_p(lo.p_fail)} "
                f"over {n} positions): committed tokens are not target samples")
        elif dist is not None and dist.state == FAIL:
            assert dist.shift is not None  # decided on positions
            kind, message = "distribution_mismatch", (
                f"requests asking for {mode}{where} commit tokens whose mean rank in their "
                f"distribution (mid-rank PIT) is {0.5 + dist.shift:.3f} where honest sampling "
                f"gives 0.500 (p {fmt_p(dist.p_fail)} over {t.pit_positions} positions): "
                + ("committed tokens sit too high, on the most probable ones (verify sharper "
                   "than asked)" if dist.shift < 0 else "committed tokens sit too low, in the "
                   "tail (verify flatter than asked)"))
        elif rule is not None and rule.state == FAIL:
            assert rule.shift is not None  # decided on trials
            kind, message = "acceptance_mismatch", (
                f"requests asking for {mode}{where} had {t.accept_hits} of {t.accept_trials} "
                f"draft tokens accepted where the acceptance rule min(1, p/q) at the requested "
                f"sampling gives {t.accept_expected:.1f} (p {fmt_p(rule.p_fail)}): verify "
                + ("accepts more drafts than its own rule allows" if rule.shift > 0 else
                   "accepts fewer drafts than its own rule gives"))
        if scope:
            evidence["request_id"] = scope
        check = f"{TRUTH_CHECK} ({mode})"
        if kind is not None:
            return Assessment(check, FAIL, evidence, anomaly=schema.AnomalyRecord(
                run_id=run_id, kind=kind, severity="critical", message=message or check,
                evidence=evidence))
        if 1.0 - exp <= delta:
            evidence.update(lean="honest" if obs < 1.0 else "fault", reason=(
                f"honest sampling here commits the argmax {exp:.0%} of the time: too close to "
                "greedy to tell apart"))
            return Assessment(check, INCONCLUSIVE, evidence, None, "positions")
        dist_open = (dist is not None and dist.state != PASS) or \
            (rule is not None and rule.state != PASS)
        if hi.state == PASS and lo.state == PASS and not dist_open:
            return Assessment(check, PASS, evidence, None, "positions")
        side = hi if obs >= exp else lo
        open_sides = [d for d in (hi, lo) if d.state != PASS]
        needs = [d.need for d in open_sides] + [x.need for x in (dist, rule)
                                                if x is not None and x.state != PASS]
        need = max(n for n in needs if n is not None) if needs and None not in needs else None
        evidence["lean"] = "fault" if any(d.lean == "fault" for d in (hi, lo)) or any(
            x is not None and x.state != PASS and x.lean == "fault" for x in (dist, rule)) \
            else side.lean
        if need is None:
            evidence["reason"] = (f"the observed rate sits at the fault's size ({obs:.1%} "
                                  f"against {exp:.1%}): no sample within reach settles it")
        else:
            evidence["positions_needed"] = n + need
        return Assessment(check, INCONCLUSIVE, evidence, need, "positions")

    def _accept(self, t: TruthStats, evidence: dict) -> "pit.PitDecision | None":
        """The acceptance rule's test of ``t``: the accepted count against the sum of the
        probabilities an honest verify accepts each tested draft token with (Poisson-binomial;
        the same sequential bound as the PIT's, increments within 1), its figures added to
        ``evidence``; None where no entry carried it."""
        if not t.accept_trials:
            return None
        d = pit.decide_sum(t.accept_hits - t.accept_expected, t.accept_trials, t.accept_var,
                           1.0, alpha=self.alpha, pass_alpha=self.pass_alpha,
                           pass_shift=pit.ACCEPT_PASS_SHIFT, fail_shift=pit.ACCEPT_FAIL_SHIFT)
        evidence.update(accept_trials=t.accept_trials,
                        accept_observed_rate=t.accept_hits / t.accept_trials,
                        accept_expected_rate=t.accept_expected / t.accept_trials,
                        accept_p_value=d.p_fail, accept_state=d.state,
                        p_value=min(evidence["p_value"], d.p_fail))
        evidence["rules_out"] += (f"; and an acceptance rate {pit.ACCEPT_PASS_SHIFT:.0%} or "
                                  "more off what the acceptance rule min(1, p/q) gives the "
                                  "same drafts")
        return d

    def _pit(self, t: TruthStats, evidence: dict) -> "pit.PitDecision | None":
        """The whole-distribution test of ``t``, its figures added to ``evidence``; None
        where no entry carried it."""
        if not t.pit_positions:
            return None
        d = pit.decide(t.pit_sum, t.pit_positions, t.pit_var, alpha=self.alpha,
                       pass_alpha=self.pass_alpha)
        evidence.update(pit_positions=t.pit_positions,
                        pit_mean=None if d.shift is None else 0.5 + d.shift,
                        pit_p_value=d.p_fail, pit_bound=d.bound, pit_state=d.state,
                        p_value=min(evidence["p_value"], d.p_fail))
        evidence["rules_out"] += (f"; and committed tokens whose mean rank in their "
                                  f"distribution is {pit.PASS_SHIFT:g} or more off honest "
                                  "sampling's 1/2 (mid-rank PIT), in either direction")
        return d

    def check(self, stats: SpecStats, run_id: str = "") -> list[schema.AnomalyRecord]:
        return [a.anomaly for a in self.assess(stats, run_id) if a.anomaly is not None]


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


DEFAULT_DETECTORS = (SamplingTruthDetector(), FallbackDetector(), DraftHealthDetector(),
                     SpeculationOffDetector())


def run_dtype(run: schema.RunRecord | None) -> str:
    """The dtype the run's target computes its logits in, where the run says ("" = unknown)."""
    if run is None:
        return ""
    labels = run.labels or {}
    return str(labels.get("dtype") or labels.get("target_dtype") or "").replace("torch.", "")


def detectors_for(run: schema.RunRecord | None) -> tuple:
    """The default detectors, told what the run says of itself (its draft's dtype), the
    acceptance- and distribution-based ones run only where the run measures them
    (``configured.py``: forced acceptance, lossy verification)."""
    from .configured import ConfiguredVerification

    dtype = (run.labels.get("draft_dtype", "") if run is not None else "") or ""
    health = DraftHealthDetector(draft_dtype=dtype) if dtype else DraftHealthDetector()
    truth = SamplingTruthDetector(tie_margin=tie_margin(run_dtype(run)))
    return (ConfiguredVerification(run, (truth, health)), FallbackDetector(),
            SpeculationOffDetector())


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


def _json_z(z: float) -> float | str:
    return z if math.isfinite(z) else ("inf" if z > 0 else "-inf")
