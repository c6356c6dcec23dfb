"""The probe's whole-distribution check: where in its distribution each committed token fell
(mid-rank PIT, ``specscope.pit``), from the engine's own log-probabilities. Pure functions over
``Position``s; never imports torch.

The returned alternatives give the distribution coarsened: each returned token, and the
tokens not returned as one group ranked below them (``interval``); its mid-rank PIT has mean
1/2 under honest sampling as the full one does. At a temperature still to apply (raw
log-probabilities) the tempered normaliser is known only between the returned tokens' tempered
mass and that plus the tail's bound (``checks._tail_bound``), so each position contributes an
interval [lo, hi] for u (a point where the figures are probabilities); the check fails the low side only where even the sum of the upper ends
is too low (committed tokens too high in their distribution, verify sharper than asked), the
high side only where even the sum of the lower ends is too high, at the same sequential bound
as in-engine. Raw log-probabilities of a request that truncates (top-p, top-k) are not tested:
the truncated distribution's normaliser is bounded too loosely there; processed ones (vLLM's
``processed_logprobs``) are the truncated distribution and are.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from .. import pit
from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from ..exact import ALPHA, PASS_ALPHA, fmt_p
from .checks import SLACK, Position, Semantics, _tail_bound, temperature_left

CHECK = "distribution honoured"


def interval(p: Position, sem: Semantics, exclude: str = ""
             ) -> tuple[float, float, float] | None:
    """(lowest u, highest u, a variance bound) of ``p``'s committed token, or None where the
    returned figures do not bound it (unknown, or raw figures under truncation).

    The distribution is read coarsened: each returned token on its own, every token not
    returned in one group ranked below them all (each is less probable than any returned
    one). The mid-rank PIT of the coarsened distribution has mean 1/2 under honest sampling
    just as the full one does, and is known exactly where the normaliser is (probabilities as
    returned: temperature 1, tempered, processed): a committed token outside the returned ones
    sits in the tail group, u = (returned mass + half the tail's). With a temperature still
    to apply, the normaliser lies between the returned tokens' tempered mass (plus the
    committed token's, where it is outside them) and that plus the tail's bound.

    ``exclude``: the distribution with that token removed and the rest renormalised (the
    residual a verify step draws from where it rejected a deterministic draft of it); where it
    was not returned, its mass is bounded by the tail's cap and the normaliser with it."""
    if not p.known or p.temperature <= 0:
        return None
    assert p.logprob is not None  # known
    if (p.top_p < 1.0 or p.top_k > 0) and not sem.processed:
        return None
    if sem.processed and p.logprob == -math.inf:
        return 1.0, 1.0, 1.0 / 12  # outside the processed distribution: ranked below all of it
    t = 1.0 if sem.processed else max(temperature_left(p, sem), 1e-6)
    listed = sorted(((lp, tok) for tok, lp in p.top if lp > -math.inf), reverse=True)
    # the last listed may be the committed token, listed because it was committed (vLLM's
    # OpenAI server): only the others are surely the best, the rest is the tail group
    best = {tok: lp for lp, tok in listed[:max(1, len(listed) - 1)]}
    gone = next((lp for lp, tok in listed if tok == exclude), None) if exclude else None
    returned = {tok: lp for tok, lp in best.items() if tok != exclude}
    inside = p.token in returned
    lps = list(returned.values())
    ref = max(lps + [p.logprob])
    w = [math.exp((lp - ref) / t) for lp in lps]
    c = math.exp((p.logprob - ref) / t)
    listed_w = sum(w)
    if t == 1.0:  # the returned figures are probabilities: the normaliser is 1 (scaled here)
        z_lo = z_hi = math.exp(-ref)
        if gone is not None:
            z_lo = z_hi = z_hi - math.exp(gone - ref)
        elif exclude:  # not returned: at most the tail's cap
            z_lo -= min(_tail_cap(list(best.values())), max(0.0, 1.0 - sum(
                math.exp(lp) for lp in best.values()))) * math.exp(-ref)
    else:
        tail = _tail_bound(list(best.values()), t, sem.vocab) * math.exp(-ref / t)
        z_lo, z_hi = listed_w + (0.0 if inside else c), listed_w + max(tail, 0.0 if inside else c)
    if z_lo <= 0.0:
        return None
    if inside:
        above = sum(x for lp, x in zip(lps, w) if lp > p.logprob + SLACK)
        tie = sum(x for lp, x in zip(lps, w) if abs(lp - p.logprob) <= SLACK) or c
        lo, hi = (above + tie / 2) / z_hi, (above + tie / 2) / z_lo
    else:  # in the tail group: every returned token above it, and half the tail's mass
        lo, hi = 0.5 + listed_w / (2 * z_hi), 0.5 + listed_w / (2 * z_lo)
    cube = sum((x / z_hi) ** 3 for x in w)
    return max(0.0, lo), min(1.0, hi), max(0.0, 1.0 - cube) / 12


def failed_side(low: "pit.PitDecision", high: "pit.PitDecision"
                ) -> "tuple[pit.PitDecision, int, float] | None":
    """(decision, side, mean shift) of a two-sided test read from intervals that FAILed in its own
    direction: -1 the low side (its sums from the upper ends, too low), 1 the high side (from
    the lower ends, too high); None where neither did."""
    for d, side in ((low, -1), (high, 1)):
        if d.state == FAIL and d.shift is not None and math.copysign(1, d.shift) == side:
            return d, side, d.shift
    return None


def shift_bound(dev_lo: float, dev_hi: float, var: float, n: int, pass_alpha: float,
                b: float = 0.5) -> float:
    """The mean shift a PASS rules out: the wider of the intervals' summed deviations plus
    the fixed-sample bound at ``pass_alpha`` (increments within ``b`` of their mean), per
    increment."""
    return (max(abs(dev_lo), abs(dev_hi))
            + pit.threshold(var, pass_alpha / 2.0, levels=1, b=b)) / n


def sided_p(low: "pit.PitDecision", high: "pit.PitDecision") -> float:
    """The smaller p-value of a two-sided test read from intervals, each side's counted only in
    its own direction (the low side's from the upper ends, when they sit below; the high
    side's from the lower ends, when they sit above): the other reading is no evidence."""
    return min((d.p_fail for d, side in ((low, -1), (high, 1))
                if d.shift is not None and math.copysign(1, d.shift) == side), default=1.0)


def _tail_cap(lps: Sequence[float]) -> float:
    """The most probability one token outside the returned ones can hold: the second smallest
    returned (the smallest may be the committed token, listed because it was committed)."""
    probs = sorted(math.exp(lp) for lp in lps)
    return probs[1] if len(probs) > 1 else probs[0] if probs else 1.0


def distribution_check(positions: Sequence[Position], sem: Semantics, *, label: str,
                       blind: bool = False, alpha: float = ALPHA,
                       pass_alpha: float = PASS_ALPHA) -> Assessment | None:
    """The committed tokens' mean PIT is 1/2 (both sides, from the intervals' ends); None
    where the check does not apply (raw log-probabilities of a truncating class: nothing to
    read, which the other checks' evidence already says).
    ``blind``: the positions may include tokens verify never produced (undrafted ones, honest
    whatever verify does): a FAIL stands, a PASS cannot rule out a fault confined to the others
    and is INCONCLUSIVE."""
    found = [(p, interval(p, sem)) for p in positions]
    got = [x for _, x in found if x is not None]
    n = len(got)
    lo = sum(x[0] for x in got)
    hi = sum(x[1] for x in got)
    var = sum(x[2] for x in got)
    check = f"{CHECK} ({label})"
    ev: dict[str, Any] = {"mode_requested": label, "num_positions": n,
                          "num_unknown": len(positions) - n, "reading": sem.mode,
                          "pit_mean_bounds": [lo / n, hi / n] if n else None,
                          "rules_out": f"rules out committed tokens whose mean rank in their "
                                       f"distribution is {pit.PASS_SHIFT:g} or more off honest "
                                       "sampling's 1/2 (mid-rank PIT), in either direction"}
    if not n:
        if positions and not sem.processed and all(p.top_p < 1.0 or p.top_k > 0
                                                   for p in positions):
            return None
        ev.update(positions_needed=None, reason="no position whose rank the returned "
                  "log-probabilities bound")
        return Assessment(check, INCONCLUSIVE, ev)
    low = pit.decide(hi, n, var, alpha=alpha, pass_alpha=pass_alpha)  # the sharp side
    high = pit.decide(lo, n, var, alpha=alpha, pass_alpha=pass_alpha)  # the flat side
    failed = failed_side(low, high)
    if failed is not None:
        d, side, shift = failed
        ev.update(p_value=d.p_fail, positions_needed=None, lean="fault", message=(
            f"the committed tokens' mean rank in their distribution (mid-rank PIT) is "
            f"{'at most' if side < 0 else 'at least'} {0.5 + shift:.3f} where honest "
            f"sampling gives 0.500 (p {fmt_p(d.p_fail)} over {n} positions, {sem.mode} "
            "log-probabilities): "
            + ("verify commits tokens sharper than asked" if side < 0 else
               "verify commits tokens flatter than asked")))
        return Assessment(check, FAIL, ev)
    ev["p_value"] = sided_p(low, high)
    bound = shift_bound(lo - n / 2, hi - n / 2, var, n, pass_alpha)
    if bound < pit.PASS_SHIFT and not blind:
        ev.update(positions_needed=None, lean="honest", shift_bound=bound)
        return Assessment(check, PASS, ev)
    needs = [d.need for d in (low, high) if d.need is not None]
    need = max(needs) if needs else None
    ev.update(positions_needed=None if need is None else n + need,
              lean="fault" if "fault" in (low.lean, high.lean) else "honest", shift_bound=bound)
    if blind and bound < pit.PASS_SHIFT:
        ev["reason"] = ("which tokens verify produced is unknown: a fault confined to them "
                        "could hide among the undrafted ones")
        need = None
    return Assessment(check, INCONCLUSIVE, ev, need, "positions")
