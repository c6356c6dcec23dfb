"""The acceptance rule and the residual, checked from outside where each draft token is known.
Pure functions over ``Position``s; never imports torch.

Under prompt lookup the draft is a function of the tokens so far, which the replay in
``ngram`` runs again: it names the token drafted at each place (``Position.draft``). An honest
verify of a deterministic draft token d (its draft distribution one-hot) accepts it with
probability min(1, p(d)/1) = p(d), p the distribution the request asked to sample from, and
where it rejects d draws from the residual max(p - q, 0) normalised: p without d, renormalised.
So each faulty shape has a test of its own:

- **acceptance rule honoured**: the number of drafts accepted against the sum of p(d) over the
  drafted places verify reached (Poisson-binomial with known per-place probabilities: each
  reached place is a Bernoulli trial given the prefix), both sides, at the sequential bound the
  engine's own acceptance test uses (``pit.decide_sum``, increments within 1). p(d) is bounded
  from the returned log-probabilities: exact where d was returned and the figures are
  probabilities, between 0 and the tail's cap where it was not; the low side FAILs only where
  even the upper ends are too many, the high side only where even the lower ends are too few.
- **residual honoured**: the tokens verify drew at rejections, each one's mid-rank PIT in the
  residual (``distribution.interval`` with d excluded), both sides. A residual drawn wrongly
  (its argmax taken, the draft left in, a temperature not applied) touches only these tokens;
  among every verified token it is diluted by the accepted ones, here it is not.

Raw log-probabilities of a request that truncates (top-p, top-k) bound neither (as for the
whole-distribution check); processed ones (vLLM ``--logprobs-mode processed_logprobs``) are the
truncated distribution and do.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from .. import pit
from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from ..exact import ALPHA, PASS_ALPHA, fmt_p
from .checks import Position, Semantics, _tail_bound, temperature_left
from .distribution import _tail_cap, failed_side, interval, shift_bound, sided_p

ACCEPT_CHECK = "acceptance rule honoured"
RESIDUAL_CHECK = "residual honoured"
#: the shift of the rejections' mean rank in their residual that the residual check's PASS
#: rules out. Rejections are a fraction of the verified tokens, and raw figures bound each rank
#: only to an interval, so this is twice the whole-distribution check's: the residual's argmax
#: taken moves SmolLM2's to about 0.3 (a shift of 0.2), a draw at half the temperature by
#: about as much
RESIDUAL_PASS_SHIFT = 0.1


def draft_prob(p: Position, sem: Semantics) -> tuple[float, float] | None:
    """(lowest, highest) probability with which honest sampling at ``p`` commits its draft
    token (and so an honest verify accepts it); None where unknown (no draft, no figures, a
    greedy request, raw figures under truncation)."""
    if not p.draft or not p.known or p.temperature <= 0:
        return None
    if (p.top_p < 1.0 or p.top_k > 0) and not sem.processed:
        return None
    assert p.logprob is not None  # known
    if p.draft == p.token:
        d_lp: float | None = p.logprob
    else:
        d_lp = next((lp for tok, lp in p.top if tok == p.draft), None)
    if sem.processed and d_lp == -math.inf:
        return 0.0, 0.0  # outside the processed distribution
    t = 1.0 if sem.processed else max(temperature_left(p, sem), 1e-6)
    listed = {tok: lp for tok, lp in p.top if lp > -math.inf}
    listed.setdefault(p.token, p.logprob)
    ordered = sorted(listed.values(), reverse=True)
    best = ordered[:max(1, len(ordered) - 1)]  # the last may be listed because committed
    cap = min(_tail_cap(best), max(0.0, 1.0 - sum(math.exp(lp) for lp in listed.values())))
    if t == 1.0:
        if d_lp is not None:
            x = min(1.0, math.exp(d_lp))
            return x, x
        return 0.0, cap
    ref = ordered[0]
    z_lo = sum(math.exp((lp - ref) / t) for lp in ordered)
    z_hi = z_lo + _tail_bound(best, t, sem.vocab) * math.exp(-ref / t)
    if d_lp is not None:
        w = math.exp((d_lp - ref) / t)
        return w / z_hi, min(1.0, w / z_lo)
    return 0.0, min(1.0, cap ** (1.0 / t) * math.exp(-ref / t) / z_lo) if cap > 0 else 0.0


def _bernoulli_var(lo: float, hi: float) -> float:
    """The largest p(1 - p) over p in [lo, hi]."""
    if lo <= 0.5 <= hi:
        return 0.25
    return max(lo * (1 - lo), hi * (1 - hi))


def acceptance_check(positions: Sequence[Position], sem: Semantics, *, label: str,
                     alpha: float = ALPHA, pass_alpha: float = PASS_ALPHA) -> Assessment | None:
    """The drafts accepted against the acceptance rule's expectation over the drafted places
    verify reached (``positions`` with a draft: accepted ones and corrections), both sides;
    None where no position names its draft (the drafts are unknown: nothing to check)."""
    drafted = [p for p in positions if p.draft and p.role in ("accepted", "correction")]
    if not drafted:
        return None
    found = [(p.role == "accepted", draft_prob(p, sem)) for p in drafted]
    got = [(hit, b) for hit, b in found if b is not None]
    n = len(got)
    hits = sum(hit for hit, _ in got)
    lo = sum(b[0] for _, b in got)
    hi = sum(b[1] for _, b in got)
    var = sum(_bernoulli_var(*b) for _, b in got)
    check = f"{ACCEPT_CHECK} ({label})"
    ev: dict[str, Any] = {
        "mode_requested": label, "num_positions": n, "num_unknown": len(drafted) - n,
        "reading": sem.mode, "accepted": hits,
        "expected_accepted_bounds": [lo, hi],
        "rules_out": f"rules out an acceptance rate {pit.ACCEPT_PASS_SHIFT:.0%} or more off "
                     "what the acceptance rule (p(d) for a deterministic draft d) gives the "
                     "same drafts, in either direction"}
    if not n:
        ev.update(positions_needed=None, reason="no drafted place whose draft probability "
                  "the returned log-probabilities bound")
        return Assessment(check, INCONCLUSIVE, ev)
    kw = dict(alpha=alpha, pass_alpha=pass_alpha, pass_shift=pit.ACCEPT_PASS_SHIFT,
              fail_shift=pit.ACCEPT_FAIL_SHIFT)
    few = pit.decide_sum(hits - hi, n, var, 1.0, **kw)  # fewer than even the upper ends
    many = pit.decide_sum(hits - lo, n, var, 1.0, **kw)  # more than even the lower ends
    failed = failed_side(few, many)
    if failed is not None:
        d, side, shift = failed
        ev.update(p_value=d.p_fail, positions_needed=None, lean="fault", message=(
            f"verify accepted {hits} of {n} drafts where the acceptance rule gives "
            f"{lo:.1f} to {hi:.1f} (p {fmt_p(d.p_fail)}, {sem.mode} log-probabilities): "
            "it accepts " + ("fewer" if side < 0 else "more") + " drafts than the "
            "requested sampling allows"))
        return Assessment(check, FAIL, ev)
    ev["p_value"] = sided_p(few, many)
    bound = shift_bound(hits - lo, hits - hi, var, n, pass_alpha, b=1.0)
    ev["shift_bound"] = bound
    if bound < pit.ACCEPT_PASS_SHIFT:
        ev.update(positions_needed=None, lean="honest")
        return Assessment(check, PASS, ev)
    return _open(check, ev, n, few, many)


def residual_check(positions: Sequence[Position], sem: Semantics, *, label: str,
                   alpha: float = ALPHA, pass_alpha: float = PASS_ALPHA) -> Assessment | None:
    """The tokens drawn at rejections, each in its residual (the distribution without the
    rejected draft token), mean mid-rank PIT 1/2 both sides; None where no rejection names
    its draft."""
    corrections = [p for p in positions if p.draft and p.role == "correction"]
    if not corrections:
        return None
    got = [x for x in (interval(p, sem, exclude=p.draft) for p in corrections) if x is not None]
    n = len(got)
    lo, hi = sum(x[0] for x in got), sum(x[1] for x in got)
    var = sum(x[2] for x in got)
    check = f"{RESIDUAL_CHECK} ({label})"
    ev: dict[str, Any] = {
        "mode_requested": label, "num_positions": n, "num_unknown": len(corrections) - n,
        "reading": sem.mode, "pit_mean_bounds": [lo / n, hi / n] if n else None,
        "rules_out": f"rules out tokens drawn at rejections whose mean rank in the residual "
                     f"(the distribution without the rejected draft) is {RESIDUAL_PASS_SHIFT:g} or "
                     "more off honest sampling's 1/2, in either direction"}
    if not n:
        ev.update(positions_needed=None, reason="no rejection whose residual the returned "
                  "log-probabilities bound")
        return Assessment(check, INCONCLUSIVE, ev)
    kw = dict(alpha=alpha, pass_alpha=pass_alpha, pass_shift=RESIDUAL_PASS_SHIFT)
    sharp, flat = pit.decide(hi, n, var, **kw), pit.decide(lo, n, var, **kw)
    failed = failed_side(sharp, flat)
    if failed is not None:
        d, side, shift = failed
        ev.update(p_value=d.p_fail, positions_needed=None, lean="fault", message=(
            f"the tokens verify drew at {n} rejections sit at a mean rank "
            f"{'of at most' if side < 0 else 'of at least'} {0.5 + shift:.3f} in the "
            f"residual where honest sampling gives 0.500 (p {fmt_p(d.p_fail)}, {sem.mode} "
            "log-probabilities): the residual is drawn "
            + ("sharper" if side < 0 else "flatter") + " than the rule allows"))
        return Assessment(check, FAIL, ev)
    ev["p_value"] = sided_p(sharp, flat)
    bound = shift_bound(lo - n / 2, hi - n / 2, var, n, pass_alpha)
    ev["shift_bound"] = bound
    if bound < RESIDUAL_PASS_SHIFT:
        ev.update(positions_needed=None, lean="honest")
        return Assessment(check, PASS, ev)
    return _open(check, ev, n, sharp, flat)


def _open(check: str, ev: dict[str, Any], n: int, *sides: pit.PitDecision) -> Assessment:
    """INCONCLUSIVE with its lean and about how many more positions would settle it."""
    needs = [d.need for d in sides if d.need is not None]
    need = max(needs) if needs else None
    ev.update(positions_needed=None if need is None else n + need,
              lean="fault" if any(d.lean == "fault" for d in sides) else "honest")
    return Assessment(check, INCONCLUSIVE, ev, need, "positions")
