"""The whole-distribution test of sampling truth: committed tokens against the distribution
their requests asked for, every token counted, on both sides.

Each verified position contributes the committed token's mid-rank probability-integral
transform (PIT): rank the vocabulary from the most probable token down; u is the mass ranked
above the committed token plus half the mass of its tie group (``hooks/stats.pit_columns``).
Under honest sampling, whatever the position's distribution, E[u] = 1/2 exactly and
Var[u] <= (1 - sum p^3) / 12; speculative decoding keeps this at every verified position
(the committed token there, given the prefix, is a sample of the target's distribution, and
whether a position is reached depends on the prefix alone). So the sum of (u - 1/2) over
positions is a martingale with increments in [-1/2, 1/2] and a known predictable variance V.

Why this statistic (and not the top-1 share alone, which stays the readable figure for
verify committing the argmax): it reads where in the distribution every committed token
fell, so a distribution too sharp (the argmax, a temperature applied twice, a residual taken
as its argmax, a bonus token taken greedily) moves it down and one too flat (a temperature
too high, tokens outside the nucleus) moves it up. It is bounded, which gives an exact tail
at 1e-9 without a normal approximation; the surprisal's mean against the entropy tests the
same two directions, but the surprisal is unbounded (a token at probability 1e-6 weighs 14
nats), so its 1e-9 tail rests on a normal approximation that fails exactly there.

The bound is Freedman's inequality (a Bernstein bound for martingales): for a fixed variance
budget v, P(exists n: |S_n| >= t, V_n <= v) <= 2 exp(-t^2 / (2v + t/3)). V is not known in
advance, so budgets lie on a geometric grid (ratio ``GRID``) and each gets an equal share of
alpha: the test stays valid however often it is looked at (after every verify step, after every
probe answer). Pure functions, stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .exact import ALPHA, FAIL, INCONCLUSIVE, PASS, PASS_ALPHA

#: the shift of the mean PIT from 1/2 that PASS rules out: verify committing the argmax at a
#: position whose top-1 holds 60% moves u there from 1/2 to 0.3, so this excludes it at a quarter
#: of such positions or more, and any other fault that moves the mean as far
PASS_SHIFT = 0.05
#: FAIL needs the mean off 1/2 by more than this as well as the tail below alpha: a bias this
#: small (float rounding between the engine's sampler and the statistics) is never a FAIL
FAIL_SHIFT = 0.01
#: the acceptance rule's (``decide_sum`` over tested draft tokens): PASS rules out an acceptance
#: rate 10 points or more off what min(1, p/q) gives the same drafts (each trial a Bernoulli of
#: variance up to 1/4, so 5 points would need four times the drafts); FAIL needs 2 points
ACCEPT_PASS_SHIFT = 0.1
ACCEPT_FAIL_SHIFT = 0.02
#: the residual rule's (the tokens that replace rejected drafts, ``decide`` of their PITs): a
#: PASS rules out a mean shift of 0.1 at rejections, which are a fraction of the positions; the
#: residual's argmax taken moves SmolLM2's mean to about 0.3, a shift of 0.2
RESID_PASS_SHIFT = 0.1
#: ratio between neighbouring variance budgets, and the budgets' range (in variance units: one
#: position holds at most 1/12): from 1 to 10^7 positions' worth
GRID = 1.25
_V_MIN, _V_MAX = 1.0, 1e7 / 12
_LEVELS = math.ceil(math.log(_V_MAX / _V_MIN) / math.log(GRID)) + 1
_MAX_NEED = 10_000_000


def _budget(var: float) -> float:
    """The smallest grid budget at or above ``var``."""
    if var <= _V_MIN:
        return _V_MIN
    return _V_MIN * GRID ** math.ceil(math.log(var / _V_MIN) / math.log(GRID) - 1e-12)


def tail(dev: float, var: float, b: float = 0.5) -> float:
    """The sequential two-sided p-value of a summed deviation ``dev`` (sum of u - 1/2) with
    predictable variance ``var``, each increment at most ``b`` from its mean: every grid
    budget's share included."""
    t = abs(dev)
    v = _budget(var)
    return min(1.0, _LEVELS * 2.0 * math.exp(-t * t / (2.0 * v + 2.0 * b * t / 3.0)))


def threshold(var: float, alpha: float = ALPHA, levels: int = _LEVELS, b: float = 0.5) -> float:
    """The summed deviation at which ``tail`` reaches ``alpha`` (the root of t^2 - (2bL/3) t -
    2 v L = 0, L = ln(2 levels / alpha))."""
    big = math.log(2.0 * levels / alpha)
    v = _budget(var) if levels == _LEVELS else var
    c = 2.0 * b * big / 3.0
    return (c + math.sqrt(c * c + 8.0 * v * big)) / 2.0


@dataclass(frozen=True)
class PitDecision:
    """The PIT check of one sampling class."""

    state: str
    shift: float | None  #: mean u - 1/2 (negative: too sharp, toward the argmax; positive: too flat)
    p_fail: float  #: sequential two-sided p-value at the honest mean
    bound: float | None  #: |shift| is below this at 1 - PASS_ALPHA (the PASS side)
    need: int | None  #: INCONCLUSIVE: about how many more positions would settle it
    lean: str  #: "fault" or "honest"


def decide(u_sum: float, n: int, var: float, *, alpha: float = ALPHA,
           pass_alpha: float = PASS_ALPHA, pass_shift: float = PASS_SHIFT,
           fail_shift: float = FAIL_SHIFT) -> PitDecision:
    """The PIT sum ``u_sum`` over ``n`` positions: ``decide_sum`` of its deviation from n/2
    (increments within 1/2 of their mean)."""
    return decide_sum(u_sum - n / 2.0, n, var, 0.5, alpha=alpha, pass_alpha=pass_alpha,
                      pass_shift=pass_shift, fail_shift=fail_shift)


def decide_sum(dev: float, n: int, var: float, b: float, *, alpha: float = ALPHA,
               pass_alpha: float = PASS_ALPHA, pass_shift: float = PASS_SHIFT,
               fail_shift: float = FAIL_SHIFT) -> PitDecision:
    """A summed deviation ``dev`` of ``n`` increments, each within ``b`` of its predictable
    mean, of predictable variance ``var``. FAIL: off 0 at ``alpha`` (sequential, both sides)
    and by more than ``fail_shift`` per increment; PASS: a mean shift of ``pass_shift`` or more
    is excluded at ``pass_alpha`` (a fixed-sample Bernstein bound: a PASS is read once, where a
    run ends); else INCONCLUSIVE, with the increments that would settle it at the shift seen (a
    FAIL where it is past ``pass_shift / 2``, else a PASS)."""
    if n <= 0:
        return PitDecision(INCONCLUSIVE, None, 1.0, None, None, "honest")
    shift = dev / n
    p = tail(dev, var, b)
    bound = (abs(dev) + threshold(var, pass_alpha / 2.0, levels=1, b=b)) / n
    if p <= alpha and abs(shift) > fail_shift:
        return PitDecision(FAIL, shift, p, bound, None, "fault")
    if bound < pass_shift:
        return PitDecision(PASS, shift, p, bound, None, "honest")
    per = max(var / n, 1e-6)  # variance per increment
    toward = abs(shift) >= pass_shift / 2
    lean = "fault" if toward or p < pass_alpha else "honest"
    if toward:  # settles as a FAIL: the deviation grows as n, the bound as its square root
        need = _positions(lambda m: abs(shift) * m >= threshold(per * m, alpha, b=b), n)
    else:  # settles as a PASS
        need = _positions(lambda m: abs(shift) + threshold(per * m, pass_alpha / 2.0, 1, b) / m
                          < pass_shift, n)
    return PitDecision(INCONCLUSIVE, shift, p, bound, need, lean)


def _positions(enough, n: int) -> int | None:
    """The fewest more positions m - n with ``enough(m)`` (doubling, then bisection)."""
    hi = max(n, 1)
    while not enough(hi):
        hi *= 2
        if hi > _MAX_NEED:
            return None
    lo = hi // 2 if hi > n else n
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return max(1, hi - n)
