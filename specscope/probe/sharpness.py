"""The probe's sharpness check: did verify sample at the temperature each request asked for?
Pure functions over ``Position``s; never imports torch.

A sequential likelihood-ratio test, pooled over every sampled class. Per verified position it
takes the returned tokens that are surely the best of the distribution the request sampled from
and surely inside its top-k and top-p nucleus (the unknown tail bounded: ``support``), S; the
last one listed is left out, since an engine may list the committed token there because it was
committed (vLLM's OpenAI server lists the sampled token first and cuts the list at the count
asked, so a token ranked 30th takes the 20th place). Given that the committed token lies in S,
honest sampling draws it from the request's distribution restricted to S, whose normaliser
cancels: exact at any temperature, from raw log-probabilities as from tempered or processed
ones, whatever the tail holds. The alternatives are the same distribution at c times the
requested temperature, for c on ``GRID`` (0.5 to 2). Per position the ratio
p_c(x | S) / p_1(x | S) where the committed token x is in S (1 where it is not) has mean 1
under honest sampling, so each product over positions is a martingale, and so is their average
over the grid: by Ville's inequality it ever reaches 1/alpha with probability at most alpha,
however often it is looked at (after every answer). FAIL there; PASS where each alternative
at or beyond ``RULED_OUT`` (0.8x, 1.25x) has been outweighed 1/PASS_ALPHA to 1 (each such
alternative, were it true, would have done that with probability at most PASS_ALPHA).

Why beside the PIT (``distribution.py``): against a temperature applied wrongly (twice, or the
wrong request's) the likelihood ratio is the most powerful test there is, and pooled over the
sampled classes it reads twice the positions. On the real vLLM with the temperature squared at
verify it FAILed after 40 s of the probe's traffic (1,014 verified positions), where the PIT
per class, its tail bounded, was still INCONCLUSIVE at 100 s and the top-1 share at 114 s; on
the same vLLM honest, with and without speculation, it PASSed after 20-30 s. The PIT stays for
faults of other shapes (a token outside the nucleus, a residual mis-drawn) and for what it reads
of the tail.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Sequence

from .. import sharp
from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from ..exact import ALPHA, PASS_ALPHA
from ..sharp import GRID, RULED_OUT  # noqa: F401 - re-exported
from .checks import SLACK, TRUNCATION_FIRST, Position, Semantics, temperature_left

CHECK = "sharpness honoured"
#: a nucleus bound is trusted only this far inside top-p (log-probabilities travel rounded)
P_MARGIN = 1e-3


def support(p: Position, sem: Semantics) -> tuple[tuple[float, ...], int, float] | None:
    """(the log-probabilities of the returned tokens surely inside the distribution ``p``'s
    request sampled from, best first; the committed token's index among them, -1 where it is
    not one of them; the temperature still to apply) or None where nothing is read (unknown,
    greedy, or fewer than two tokens surely inside: no information either way)."""
    if not p.known or p.temperature <= 0:
        return None
    seen: dict[str, float] = {}
    for tok, lp in p.top:
        if lp > -math.inf and tok not in seen:
            seen[tok] = lp
    toks = sorted(seen, key=lambda t: -seen[t])
    lps = [seen[t] for t in toks]
    t = 1.0 if sem.processed else max(temperature_left(p, sem), 1e-6)
    # the last listed may be the committed token itself, listed because it was committed
    # (vLLM's OpenAI server lists the sampled token first and cuts the list at the count
    # asked): only the others are surely the distribution's best
    keep = len(lps) - 1
    if not sem.processed:
        if 0 < p.top_k < keep:  # the first k, a tie group across the k-th dropped
            keep = p.top_k
            while keep > 0 and abs(lps[keep - 1] - lps[p.top_k]) <= SLACK:
                keep -= 1
        if p.top_p < 1.0 and keep:  # inside while even the most mass above it is below top-p
            tn = 1.0 if sem.order == TRUNCATION_FIRST else t
            w = [math.exp((lp - lps[0]) / tn) for lp in lps[:keep]]
            listed, above, inside = sum(w), 0.0, 0
            for x in w:
                if above / listed >= p.top_p - P_MARGIN:
                    break
                above, inside = above + x, inside + 1
            keep = inside
    if keep < 2:
        return None
    idx = toks.index(p.token) if p.token in toks[:keep] else -1
    return tuple(lps[:keep]), idx, t


@lru_cache(maxsize=1 << 17)
def _ratios(lps: tuple[float, ...], idx: int, t: float) -> tuple[float, ...]:
    """log p_c(x | S) - log p_1(x | S) for each c on ``GRID``."""
    top = lps[0]

    def logp(scale: float) -> float:
        z = sum(math.exp((lp - top) / scale) for lp in lps)
        return (lps[idx] - top) / scale - math.log(z)

    base = logp(t)
    return tuple(logp(c * t) - base for c in GRID)


def sharpness_check(positions: Sequence[Position], sem: Semantics, *, label: str = "sampled",
                    blind: bool = False, alpha: float = ALPHA,
                    pass_alpha: float = PASS_ALPHA) -> Assessment:
    """The requested temperature against ``GRID``'s alternatives over ``positions`` (the
    tokens verify produced, every sampled class). ``blind``: the positions may include tokens
    verify never produced: a FAIL stands, a PASS is INCONCLUSIVE."""
    sums = [0.0] * len(GRID)
    n = outside = unread = 0
    for p in positions:
        s = support(p, sem)
        if s is None:
            unread += 1
            continue
        if s[1] < 0:
            outside += 1
            continue
        n += 1
        for i, r in enumerate(_ratios(*s)):
            sums[i] += r
    d = sharp.decide(sums, n, alpha=alpha, pass_alpha=pass_alpha, can_pass=not blind)
    check = f"{CHECK} ({label})"
    ev: dict[str, Any] = {
        "mode_requested": label, "num_positions": n, "num_outside": outside,
        "num_unread": unread, "reading": sem.mode, "log_likelihood_ratio": d.log_ratio,
        "temperature_ratio": d.best, "p_value": d.p_value, "lean": d.lean,
        "positions_needed": None if d.need is None else n + d.need,
        "rules_out": sharp.rules_out(pass_alpha)}
    if d.state == FAIL:
        ev["message"] = "the committed tokens " + d.finding(n, f"{sem.mode} log-probabilities")
        return Assessment(check, FAIL, ev)
    if d.state == PASS:
        return Assessment(check, PASS, ev)
    if blind:
        ev["reason"] = ("which tokens verify produced is unknown: a fault confined to them "
                        "could hide among the undrafted ones")
    elif not n:
        ev["reason"] = "no verified position whose distribution the returned figures bound"
    return Assessment(check, INCONCLUSIVE, ev, d.need, "positions")
