"""The detectors' tails: exact binomial tails, the Hoeffding bound on Poisson-binomial counts,
and the sample a test needs before it can fail."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.exact import ALPHA, lower_tail, positions_to_detect, upper_tail


def _binom_upper(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(max(k, 0), n + 1))


def _poisson_binomial(ps: list[float]) -> list[float]:
    """Exact pmf of a sum of independent Bernoulli(p_i), by convolution."""
    pmf = [1.0]
    for p in ps:
        nxt = [0.0] * (len(pmf) + 1)
        for j, v in enumerate(pmf):
            nxt[j] += v * (1 - p)
            nxt[j + 1] += v * p
        pmf = nxt
    return pmf


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 80), p=st.floats(0.001, 0.999), k=st.integers(-1, 82))
def test_the_tails_are_the_binomial_tails(n, p, k):
    exact_up = _binom_upper(k, n, p) if k <= n else 0.0
    assert math.isclose(upper_tail(k, n, p), exact_up, rel_tol=1e-9, abs_tol=1e-15)
    exact_low = 1.0 - (_binom_upper(k + 1, n, p) if k + 1 <= n else 0.0)
    assert math.isclose(lower_tail(k, n, p), exact_low, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=200, deadline=None)
@given(ps=st.lists(st.floats(0.01, 0.99), min_size=2, max_size=40))
def test_the_binomial_tail_at_the_mean_rate_bounds_the_honest_count(ps):
    """Hoeffding (1956): beyond one of the mean, the Poisson-binomial tail is below the binomial
    tail at the mean rate, so a flag at tail < alpha has a false-alarm rate of at most alpha."""
    n, mu = len(ps), sum(ps)
    pmf = _poisson_binomial(ps)
    for c in range(n + 1):
        if c >= mu + 1:
            assert sum(pmf[c:]) <= upper_tail(c, n, mu / n) * (1 + 1e-9) + 1e-15
        if c <= mu - 1:
            assert sum(pmf[:c + 1]) <= lower_tail(c, n, mu / n) * (1 + 1e-9) + 1e-15


def test_the_issue_example_and_the_sample_each_rate_needs():
    # 32 positions, every one the argmax, where honest sampling gives 0.399: p = 0.399^32
    assert math.isclose(upper_tail(32, 32, 0.399), 0.399 ** 32, rel_tol=1e-9)
    assert upper_tail(32, 32, 0.399) < ALPHA
    assert positions_to_detect(0.4) == 23 and 0.4 ** 23 < ALPHA < 0.4 ** 22
    assert positions_to_detect(0.9) == 197
    assert positions_to_detect(1.0) is None  # honest sampling that is greedy cannot be told apart
    # large samples do not loop for ever: a million positions answer at once
    assert upper_tail(600_000, 1_000_000, 0.5) < 1e-300 + 1e-300
    assert lower_tail(400_000, 1_000_000, 0.5) == upper_tail(600_000, 1_000_000, 0.5)


def test_fisher_s_exact_test_for_the_quality_checks():
    from specscope.collector.evalgate import requests_to_detect
    from specscope.exact import one_sided_excess

    # 3 of 10 vs 1 of 10: P(X >= 3), X hypergeometric(20 requests, 4 hits, 10 drawn)
    excess, p = one_sided_excess(3, 10, 1, 10)
    exact = (math.comb(4, 3) * math.comb(16, 7) + math.comb(16, 6)) / math.comb(20, 10)
    assert math.isclose(excess, 0.2) and math.isclose(p, exact, rel_tol=1e-12)
    assert one_sided_excess(0, 10, 5, 10)[1] == pytest.approx(1.0)
    # a reference of 12 clean requests cannot show a 30-point rise at p < 0.01 (0.7^12 > 0.01)
    assert requests_to_detect(0, 12) is None
    need = requests_to_detect(0, 32)
    assert one_sided_excess(math.floor(0.3 * need), need, 0, 32)[1] < 0.01
    assert one_sided_excess(math.floor(0.3 * (need - 1)), need - 1, 0, 32)[1] >= 0.01
