"""Exact tail probabilities for the detectors: binomial tails and the sample a test needs.

The count of committed argmax tokens over n verified positions, each with its own argmax
probability p_i, is Poisson-binomial under honest sampling. The collector keeps mergeable
counters (n, sum p_i, sum p_i (1 - p_i)), not every p_i, so the tail used is the binomial one at
the mean rate p = sum p_i / n: by Hoeffding (1956, Theorem 4) it bounds the Poisson-binomial tail
from above, P(X >= c) <= P(Bin(n, p) >= c) for c >= np + 1 and P(X <= c) <= P(Bin(n, p) <= c)
for c <= np - 1. A flag at tail < alpha therefore has a false-alarm rate of at most alpha.

Pure functions, stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: two target logits closer than this (nats) are a numerical tie in the engine's dtype: 2-3 units
#: in the last place at a language model's top-logit scale (16-32) for bfloat16 and float16, and
#: the drift of a reduction in another order for float32 (measured in ``collector/diverge.py``)
TIE_MARGIN = {"float32": 1e-3, "float16": 0.05, "bfloat16": 0.25}
#: a margin or bound is exceeded only past this much (log-probabilities travel as rounded
#: decimals): a margin of 0.25000003 nats is within bfloat16's 0.25
TIE_SLACK = 1e-4


def tie_margin(dtype: str | None) -> float:
    """The tie margin of ``dtype`` ("bfloat16", "torch.float16", ...); an unknown dtype gets the
    widest (bfloat16's), so that a tie is never called structural."""
    name = (dtype or "").replace("torch.", "")
    return TIE_MARGIN.get(name, max(TIE_MARGIN.values()))


#: the detectors' false-alarm budget per one-sided test: about the one-sided 6-sigma normal tail
ALPHA = 1e-9
#: per request: one test per request and mode, so a run of 1,000 requests spends at most 1e-3;
#: a 16-position request that committed only argmaxes at an expected rate of 0.4 (p = 4e-7)
#: is caught, where at ``ALPHA`` it would need 23 positions
PER_REQUEST_ALPHA = 1e-6

_TERMS = 200_000  #: beyond this many terms a tail falls back to its Chernoff bound (also an upper bound)


def _log_pmf(k: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == n else -math.inf
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


def _kl(q: float, p: float) -> float:
    """KL(Bernoulli(q) || Bernoulli(p))."""
    out = 0.0
    if q > 0:
        out += q * math.log(q / p) if p > 0 else math.inf
    if q < 1:
        out += (1 - q) * math.log((1 - q) / (1 - p)) if p < 1 else math.inf
    return out


def _tail_sum(k: int, n: int, p: float, step: int) -> float:
    """Sum of pmf from k away from the mean (step +1: k..n; step -1: k..0), in log space."""
    end = n if step > 0 else 0
    log_first = _log_pmf(k, n, p)
    if log_first == -math.inf:
        return 0.0
    total, term, j = 1.0, 1.0, k
    odds = p / (1 - p) if 0 < p < 1 else None
    for _ in range(_TERMS):
        if j == end or odds is None:
            return min(1.0, math.exp(log_first) * total)
        term *= ((n - j) / (j + 1) * odds) if step > 0 else (j / (n - j + 1) / odds)
        j += step
        total += term
        if term < total * 1e-17:
            return min(1.0, math.exp(log_first) * total)
    return math.exp(-n * _kl(k / n, p))  # Chernoff bound


def upper_tail(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) >= k): the chance of ``k`` or more hits where ``p`` is the rate."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if k >= n * p:
        return _tail_sum(k, n, p, +1)
    return 1.0 - _tail_sum(k - 1, n, p, -1)


def lower_tail(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) <= k)."""
    if k >= n:
        return 1.0
    if k < 0:
        return 0.0
    if k <= n * p:
        return _tail_sum(k, n, p, -1)
    return 1.0 - _tail_sum(k + 1, n, p, +1)


def fmt_p(v: float) -> str:
    """A p-value for text: below the smallest double it is shown as a bound, not as 0."""
    return "< 1e-300" if v < 1e-300 else f"{v:.2g}"


def positions_to_detect(rate: float, alpha: float = ALPHA) -> int | None:
    """The fewest trials at which ``n`` hits out of ``n`` (every position an argmax, every draft
    probability exactly 1.0) has an upper tail below ``alpha`` where ``rate`` is honest: the
    smallest sample at which the test can fail. None where no sample can (rate 1)."""
    if rate >= 1.0:
        return None
    if rate <= 0.0:
        return 1
    return max(1, math.ceil(math.log(alpha) / math.log(rate)))


def greedy_positions_needed(tie_rate: float = 0.01, min_excess: float = 0.05,
                            alpha: float = ALPHA) -> int:
    """Positions at which greedy requests that commit the argmax only ``1 - tie_rate -
    min_excess`` of the time would fail the tie-allowance check (its lower tail at the allowed
    rate below ``alpha``): the sample a greedy PASS needs."""
    exp = 1.0 - tie_rate
    rate = exp - min_excess - 0.005
    n = 1
    while lower_tail(math.floor(rate * n), n, exp) >= alpha and n < 100_000:
        n += max(1, n // 8)
    return n


def one_sided_excess(hits_a: int, n_a: int, hits_b: int, n_b: int) -> tuple[float, float]:
    """(rate_a - rate_b, p) of Fisher's exact one-sided test that a's rate exceeds b's: the
    hypergeometric tail of a's hits given both samples' totals (exact at any sample size)."""
    if not n_a or not n_b:
        return 0.0, 1.0
    hits_a, hits_b = int(round(hits_a)), int(round(hits_b))
    total, hits = n_a + n_b, hits_a + hits_b
    log_norm = _log_comb(total, n_a)
    p, mode = 0.0, (hits + 1) * (n_a + 1) / (total + 2)
    for x in range(hits_a, min(hits, n_a) + 1):
        term = math.exp(_log_comb(hits, x) + _log_comb(total - hits, n_a - x) - log_norm)
        p += term
        if x > mode and term <= p * 1e-17:  # past the mode the terms only fall: the rest is
            break  # below a float's resolution of p
    return hits_a / n_a - hits_b / n_b, min(1.0, p)


def _log_comb(n: int, k: int) -> float:
    if k < 0 or k > n:
        return -math.inf
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


# --- PASS: a one-sided equivalence test ---------------------------------------------------------
# A check says PASS only where its data exclude the fault it names at a stated size: the
# confidence bound of the observed rate on the fault's side lies short of the fault's rate. A
# FAIL keeps its own, far stricter false-alarm budget (``ALPHA``); everything between is
# INCONCLUSIVE, leaning one way or the other.

#: a PASS's error budget: a fault of exactly the stated size passes at most this often (a 99%
#: one-sided confidence bound)
PASS_ALPHA = 0.01
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
_MAX_NEED = 10_000_000  #: beyond this many more units a verdict is "not within reach"


def _z(alpha: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(1.0 - alpha)


def wilson_bound(k: float, n: float, upper: bool, alpha: float = PASS_ALPHA) -> float | None:
    """The one-sided Wilson score bound of a rate at ``1 - alpha`` (for display; the decisions
    use the exact tails)."""
    if not n:
        return None
    z = _z(alpha)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return min(1.0, centre + half) if upper else max(0.0, centre - half)


def _normal_need(obs: float, target: float, var: float, alpha: float) -> int | None:
    """About how many units, in all, put ``target`` ``z(alpha)`` standard errors from ``obs``."""
    gap = abs(target - obs)
    if gap <= 1e-12:
        return None
    n = math.ceil(_z(alpha) ** 2 * max(var, 1e-6) / gap ** 2)
    return n if n <= _MAX_NEED else None


@dataclass(frozen=True)
class RateDecision:
    """One side of a rate check: FAIL where the rate is beyond the honest one at ``ALPHA`` and
    past the fault's size, PASS where the fault's rate is excluded at ``PASS_ALPHA``."""

    state: str
    need: int | None  #: INCONCLUSIVE: about how many more units would settle it (None: out of reach)
    lean: str  #: "fault" (past halfway to the fault's rate, or significantly off honest) or "honest"
    bound: float | None  #: the rate's confidence bound on the fault's side (Wilson, 1 - PASS_ALPHA)
    p_fail: float  #: the tail of the observed count at the honest rate, on the fault's side
    p_pass: float  #: the tail of the observed count at the fault's rate, on the honest side


def decide_rate(k: float, n: int, honest: float, fault: float, *, alpha: float = ALPHA,
                pass_alpha: float = PASS_ALPHA, up: bool | None = None) -> RateDecision:
    """``k`` hits in ``n`` against an honest rate and a fault at rate ``fault`` (above or below
    ``honest``: the side is the fault's). FAIL: the honest tail beyond ``k`` is below ``alpha``
    and the observed rate is past ``fault``; PASS: a true rate at ``fault`` or beyond would give
    ``k`` or a count further from it with chance below ``pass_alpha`` (binomial tails at the mean
    rate bound the Poisson-binomial ones, Hoeffding 1956); else INCONCLUSIVE. ``up`` names the
    fault's side where ``fault`` equals ``honest`` (a ceiling that is both)."""
    up = fault > honest if up is None else up
    k = int(round(k))
    if n <= 0:
        return RateDecision(INCONCLUSIVE, None, "honest", None, 1.0, 1.0)
    obs = k / n
    p_fail = upper_tail(k, n, honest) if up else lower_tail(k, n, honest)
    p_pass = (lower_tail(k, n, fault) if up else upper_tail(k, n, fault)) if 0.0 < fault < 1.0 \
        else 1.0
    past = obs - fault > 0 if up else fault - obs > 0
    # toward the fault: past halfway from the honest rate to the fault's, or beyond the honest
    # rate at PASS's own confidence
    toward = (obs - honest) if up else (honest - obs)
    lean = "fault" if toward >= abs(fault - honest) / 2 or p_fail < pass_alpha else "honest"
    bound = wilson_bound(k, n, upper=up, alpha=pass_alpha)
    if p_fail < alpha and past:
        return RateDecision(FAIL, None, "fault", bound, p_fail, p_pass)
    if p_pass < pass_alpha:
        return RateDecision(PASS, None, "honest", bound, p_fail, p_pass)
    if not 0.0 < fault < 1.0:
        return RateDecision(INCONCLUSIVE, None, lean, bound, p_fail, p_pass)
    if past and obs in (0.0, 1.0) and honest not in (0.0, 1.0):  # every position an extreme
        total = positions_to_detect(honest if up else 1.0 - honest, alpha)
    elif past:  # settles as a FAIL
        total = _normal_need(obs, honest, honest * (1 - honest), alpha)
    elif k == (0 if up else n):  # none on the fault's side yet: exact
        total = positions_to_rule_out(fault if up else 1.0 - fault, pass_alpha)
    else:  # settles as a PASS
        total = _normal_need(obs, fault, fault * (1 - fault), pass_alpha)
    need = None if total is None else max(1, total - n)
    return RateDecision(INCONCLUSIVE, need, lean, bound, p_fail, p_pass)


def positions_to_rule_out(share: float, pass_alpha: float = PASS_ALPHA) -> int | None:
    """The fewest units, none of them faulty, that exclude a fault present in ``share`` of them
    (``(1 - share)^n < pass_alpha``): e.g. 13 greedy pairs rule out structural divergence in 30%
    of requests. None where ``share`` is 0."""
    if share <= 0.0:
        return None
    if share >= 1.0:
        return 1
    return max(1, math.floor(math.log(pass_alpha) / math.log(1.0 - share)) + 1)


def truth_state(k: float, n: int, expected: float, min_excess: float = 0.05, *,
                alpha: float = ALPHA, pass_alpha: float = PASS_ALPHA) -> str:
    """A sampled class's sampling-truth state from its counters: FAIL where the argmax share is
    past ``min_excess`` from the expected one on either side at ``alpha``; PASS where both sides
    are ruled out at ``pass_alpha``; else INCONCLUSIVE (always, where the expected share is
    within ``min_excess`` of 1: silent greedy cannot be told apart there)."""
    hi = decide_rate(k, n, expected, expected + min_excess, alpha=alpha, pass_alpha=pass_alpha)
    lo = decide_rate(k, n, expected, expected - min_excess, alpha=alpha, pass_alpha=pass_alpha)
    if FAIL in (hi.state, lo.state):
        return FAIL
    if 1.0 - expected <= min_excess:
        return INCONCLUSIVE
    if hi.state == PASS and (lo.state == PASS or expected - min_excess <= 0.0):
        return PASS
    return INCONCLUSIVE
