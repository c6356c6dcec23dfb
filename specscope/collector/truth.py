"""The sampling-truth detector: committed tokens against the distribution their requests asked
for, by the top-1 share, the whole distribution (``specscope.pit``), the sharpness test
(``specscope.sharp``), the acceptance rule and the truncation. Never imports torch or dash.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .. import pit, schema, sharp
from ..exact import ALPHA, PASS_ALPHA, decide_rate, fmt_p, greedy_positions_needed, tie_margin
from .stats import SpecStats, TruthStats
from .verdict import FAIL, INCONCLUSIVE, PASS, Assessment, rate_evidence

TRUTH_CHECK = "sampling truth"  #: followed by " (mode)"


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

    And the sharpness test (``specscope.sharp``), where the entries carry it: the committed
    tokens against the same distributions at 0.5x to 2x the requested temperature, a
    sequential likelihood ratio among each position's most probable tokens; at 1/alpha it is
    ``distribution_mismatch`` too (verify sampling sharper or flatter than asked: a temperature
    applied twice, or another request's). It holds back a PASS while it leans toward a fault
    (its ratio past 1/pass_alpha), and is not needed for one.

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
        out = [self.assess_greedy(t, run_id, mismatches=stats.mismatches)
               if mode == schema.GREEDY else self.assess_one(mode, t, run_id)
               for mode, t in sorted(stats.truth.items()) if t.num_verified]
        pooled = self.assess_pooled(stats, run_id)
        if pooled is not None and not any(a.state == FAIL and a.evidence.get("sharp_state") == FAIL
                                           for a in out):
            out.append(pooled)
        return out

    def assess_pooled(self, stats: SpecStats, run_id: str = "") -> Assessment | None:
        """The sharpness test pooled over every sampled class (a temperature applied wrongly
        is rarely confined to one, and pooled it reads all their positions at once), as a
        check of its own ("sampling truth (sampled)") only where it FAILs: the classes' own
        checks carry each class's verdict. None otherwise, or with fewer than two classes."""
        read = [(mode, t) for mode, t in sorted(stats.truth.items())
                if mode != schema.GREEDY and t.sharp_positions
                and len(t.sharp_llr) == len(sharp.GRID)]
        if len(read) < 2:
            return None
        n = sum(t.sharp_positions for _, t in read)
        sums = [sum(t.sharp_llr[i] for _, t in read) for i in range(len(sharp.GRID))]
        d = sharp.decide(sums, n, alpha=self.alpha, pass_alpha=self.pass_alpha)
        if d.state != FAIL:
            return None
        modes = [m for m, _ in read]
        evidence = {"mode_requested": "sampled", "classes": modes, **d.evidence(n),
                    "p_value": d.p_value, "positions_needed": None,
                    "rules_out": sharp.rules_out(self.pass_alpha)}
        message = (f"requests asking for sampling ({', '.join(modes)}, pooled) commit tokens "
                   f"that {d.finding(n)}")
        return Assessment(f"{TRUTH_CHECK} (sampled)", FAIL, evidence, anomaly=schema.AnomalyRecord(
            run_id=run_id, kind="distribution_mismatch", severity="critical", message=message,
            evidence=evidence))

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
        resid = self._resid(t, evidence)
        temp = self._sharp(t, evidence)
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
        elif temp is not None and temp.state == FAIL:
            kind, message = "distribution_mismatch", (
                f"requests asking for {mode}{where} commit tokens that "
                f"{temp.finding(t.sharp_positions)}")
        elif rule is not None and rule.state == FAIL:
            assert rule.shift is not None  # decided on trials
            kind, message = "acceptance_mismatch", (
                f"requests asking for {mode}{where} had {t.accept_hits} of {t.accept_trials} "
                f"draft tokens accepted where the acceptance rule min(1, p/q) at the requested "
                f"sampling gives {t.accept_expected:.1f} (p {fmt_p(rule.p_fail)}): verify "
                + ("accepts more drafts than its own rule allows" if rule.shift > 0 else
                   "accepts fewer drafts than its own rule gives"))
        elif resid is not None and resid.state == FAIL:
            assert resid.shift is not None  # decided on rejections
            kind, message = "residual_mismatch", (
                f"requests asking for {mode}{where} had the tokens that replace rejected drafts "
                f"at a mean rank (mid-rank PIT) of {0.5 + resid.shift:.3f} in the residual "
                f"max(p - q, 0) where honest verify gives 0.500 (p {fmt_p(resid.p_fail)} over "
                f"{t.resid_positions} rejections): "
                + ("the residual is drawn too sharp (its argmax, or at a lower temperature)"
                   if resid.shift < 0 else "the residual is drawn too flat, or in the tail"))
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
        # the sharpness test only FAILs, but a PASS waits while it leans toward a fault
        dist_open = (dist is not None and dist.state != PASS) or \
            (rule is not None and rule.state != PASS) or \
            (resid is not None and resid.state != PASS) or \
            (temp is not None and temp.state == INCONCLUSIVE and temp.lean == "fault")
        if hi.state == PASS and lo.state == PASS and not dist_open:
            return Assessment(check, PASS, evidence, None, "positions")
        side = hi if obs >= exp else lo
        open_sides = [d for d in (hi, lo) if d.state != PASS]
        needs = [d.need for d in open_sides] + [x.need for x in (dist, rule, resid)
                                                if x is not None and x.state != PASS]
        need = max(n for n in needs if n is not None) if needs and None not in needs else None
        evidence["lean"] = "fault" if any(d.lean == "fault" for d in (hi, lo)) or any(
            x is not None and x.state != PASS and x.lean == "fault"
            for x in (dist, rule, resid, temp)) \
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

    def _resid(self, t: TruthStats, evidence: dict) -> "pit.PitDecision | None":
        """The residual rule's test of ``t``: the PITs of the tokens committed in place of
        rejected drafts, in the residual max(p - q, 0), against 1/2 (``pit.decide``, both
        sides), its figures added to ``evidence``; None where no entry carried it."""
        if not t.resid_positions:
            return None
        d = pit.decide(t.resid_sum, t.resid_positions, t.resid_var, alpha=self.alpha,
                       pass_alpha=self.pass_alpha, pass_shift=pit.RESID_PASS_SHIFT)
        evidence.update(resid_positions=t.resid_positions,
                        resid_mean=None if d.shift is None else 0.5 + d.shift,
                        resid_p_value=d.p_fail, resid_state=d.state,
                        p_value=min(evidence["p_value"], d.p_fail))
        evidence["rules_out"] += (f"; and tokens replacing rejected drafts whose mean rank in "
                                  f"the residual max(p - q, 0) is {pit.RESID_PASS_SHIFT:g} or "
                                  "more off 1/2")
        return d

    def _sharp(self, t: TruthStats, evidence: dict) -> "sharp.SharpDecision | None":
        """The sharpness test of ``t`` (``specscope.sharp``: the requested temperature against
        0.5x to 2x of it, a sequential likelihood ratio), its figures added to ``evidence``;
        None where no entry carried it. It can FAIL a class and hold back a PASS while it leans
        toward a fault; a class's PASS does not wait for its own."""
        if not t.sharp_positions or len(t.sharp_llr) != len(sharp.GRID):
            return None
        d = sharp.decide(t.sharp_llr, t.sharp_positions, alpha=self.alpha,
                         pass_alpha=self.pass_alpha)
        evidence.update(d.evidence(t.sharp_positions), p_value=min(evidence["p_value"], d.p_value))
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


def _json_z(z: float) -> float | str:
    return z if math.isfinite(z) else ("inf" if z > 0 else "-inf")
