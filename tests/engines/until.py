"""Traffic until a verdict: the real-engine tests that assert one drive rounds of traffic until
the check has decided or a stated cap has passed, then assert. The cap is set from the check's
own rule, so a check that works decides before it: a test never asserts on a workload sized at
the edge of its rule, where whether it decides depends on how long the answers ran.

The in-engine sampling-truth check (``exact.truth_state``) FAILs a sampled class when the
binomial tail at its mean expected argmax share p over its n positions falls below ``ALPHA``
(and the share observed is past p + 5 points). Under a verify that commits the argmax at every
position that tail is p**n <= exp(-n (1 - p)): the FAIL is certain once the expected
non-argmax mass M = n (1 - p), which the section reports (positions times one less the
expected share), reaches ln(1 / ALPHA) = 20.7, whatever the prompts. ``ARGMAX_MASS_CAP`` is
twice that: an honest run of the rule misses a silent greedy by it with probability 0 (the
statistic is a function of the positions' distributions, not a draw), and a handful of
positions off the argmax (near ties in bfloat16) still leave it failing.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from specscope.exact import ALPHA

#: the expected non-argmax mass at which a test stops driving an argmax-committing verify and
#: asserts its FAIL (module docstring)
ARGMAX_MASS_CAP = 2 * math.log(1 / ALPHA)


def argmax_mass(truth: dict[str, Any] | None) -> float:
    """A sampling-truth row's expected non-argmax mass: positions times one less the share
    honest sampling would commit the argmax (0 where the row is absent or has no figure)."""
    if not truth or truth.get("expected_top1_rate") is None:
        return 0.0
    return float(truth.get("num_positions") or 0) * (1.0 - float(truth["expected_top1_rate"]))


def rounds_until(one_round: Callable[[int], Any], done: Callable[[], bool], *,
                 capped: Callable[[], bool], max_s: float = 600.0) -> tuple[list[Any], float]:
    """Call ``one_round(i)`` for i = 0, 1, ... until ``done()`` or ``capped()`` (both asked
    after each round), or ``max_s`` passes (a guard against a server that stopped answering:
    the caller's assertion then fails with its figures). Returns the rounds' results and the
    seconds they took."""
    out: list[Any] = []
    t0 = time.monotonic()
    i = 0
    while True:
        out.append(one_round(i))
        i += 1
        if done() or capped() or time.monotonic() - t0 > max_s:
            return out, time.monotonic() - t0


def pit_cap(shift: float, miss: float = 1e-4) -> int:
    """Positions by which a fault that moves the committed tokens' mean PIT by ``shift`` has
    failed the whole-distribution test (``specscope.pit``) except with probability ``miss``:
    its summed deviation, ``shift * n`` less ``z(miss)`` standard deviations (u lies in [0, 1]:
    at most sqrt(n) / 2), is past the FAIL threshold at the largest variance an honest
    position has (1/12)."""
    from statistics import NormalDist

    from specscope import pit

    z = NormalDist().inv_cdf(1.0 - miss)
    n = 16
    while shift * n - z * math.sqrt(n) / 2 < pit.threshold(n / 12):
        n = math.ceil(n * 1.05)
    return n


def accept_cap(shift: float, miss: float = 1e-4) -> int:
    """Draft positions tested by which a verify that accepts ``shift`` more or fewer of them
    than the acceptance rule gives has failed its check except with probability ``miss``:
    ``pit_cap``'s reasoning, each trial a Bernoulli (standard deviation at most 1/2, variance
    at most 1/4, increments within 1)."""
    from statistics import NormalDist

    from specscope import pit

    z = NormalDist().inv_cdf(1.0 - miss)
    n = 16
    while shift * n - z * math.sqrt(n) / 2 < pit.threshold(n / 4, b=1.0):
        n = math.ceil(n * 1.05)
    return n
