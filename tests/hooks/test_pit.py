"""The whole-distribution test: the committed tokens' mid-rank PIT averages exactly 1/2 under
honest sampling (ties, truncation and all), moves down for a verify sharper than asked and up
for one flatter, and its bound holds however often it is read."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from specscope import pit
from specscope.engine.sampling import process_probs
from specscope.hooks import stats


def _columns(temperature: float, top_p: float, top_k: int, *, verify_t: float | None = None,
             argmax: bool = False, steps: int = 40, seed: int = 0, bf16: bool = False):
    """Sums of (positions, PIT, PIT variance) over ``steps`` batches of random logits whose
    committed tokens verify drew at ``verify_t`` (the requested temperature where None)."""
    g = torch.Generator().manual_seed(seed)
    b, p, v = 32, 4, 300
    n = u = var = 0.0
    for _ in range(steps):
        logits = torch.randn(b, p, v, generator=g) * 3
        if bf16:  # bfloat16 logits: many exact ties among the tail's values
            logits = logits.to(torch.bfloat16)
        t = torch.full((b,), temperature)
        tp, tk = torch.full((b,), top_p), torch.full((b,), top_k, dtype=torch.long)
        probs = process_probs(logits, t if verify_t is None else torch.full((b,), verify_t),
                              tp, tk)
        committed = probs.argmax(-1) if argmax else \
            torch.multinomial(probs.view(-1, v), 1, generator=g).view(b, p)
        truncating = top_p < 1.0 or top_k > 0
        out = stats.verify_columns(logits, committed, torch.full((b,), p - 1), t,
                                   tp if top_p < 1.0 else None, tk if top_k > 0 else None,
                                   truncated=torch.arange(b) if truncating else None)
        n += float(out[:, 0].sum())
        u += float(out[:, 6].sum())
        var += float(out[:, 7].sum())
    return u, int(n), var


@pytest.mark.parametrize("temperature,top_p,top_k,bf16", [
    (0.8, 1.0, 0, False), (0.8, 0.9, 0, False), (1.0, 1.0, 20, False), (0.7, 0.95, 40, True),
    (1.0, 1.0, 0, True)])
def test_an_honest_sample_averages_one_half_ties_and_truncation_included(temperature, top_p,
                                                                        top_k, bf16):
    u, n, var = _columns(temperature, top_p, top_k, bf16=bf16)
    z = (u - n / 2) / math.sqrt(var)
    assert abs(z) < 5, (u / n, z)  # 5 sd: a bias of 0.01 over these 5,120 positions is 3.7 sd
    assert pit.decide(u, n, var).state == "pass"


@pytest.mark.parametrize("verify_t,argmax,side", [(0.64, False, -1), (1.2, False, 1),
                                                  (None, True, -1)])
def test_a_sharper_or_flatter_verify_fails_on_its_side(verify_t, argmax, side):
    """Requests at temperature 0.8: verify at 0.64 (the temperature applied twice), at 1.2, or
    committing the argmax."""
    u, n, var = _columns(0.8, 1.0, 0, verify_t=verify_t, argmax=argmax, steps=10)
    d = pit.decide(u, n, var)
    assert d.state == "fail" and d.shift is not None and math.copysign(1, d.shift) == side, d


def test_tokens_outside_the_nucleus_rank_below_all_of_it():
    """A verify that drops top-p (samples the untruncated distribution) commits tokens the
    nucleus excludes: each counts as u = 1, and the mean moves up."""
    u, n, var = _columns(1.0, 0.5, 0, verify_t=1.0, steps=10)
    assert u / n > 0.5
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 50, generator=g)
    worst = logits.argmin(dim=-1)  # outside any nucleus
    out = stats.verify_columns(logits, worst, torch.full((2,), 2), torch.full((2,), 1.0),
                               torch.full((2,), 0.5), None, truncated=torch.arange(2))
    assert torch.allclose(out[:, 6], torch.full((2,), 3.0))  # three positions at u = 1


def test_the_bound_holds_when_read_after_every_position():
    """Honest PITs of random discrete distributions, the test read after each of 300
    positions in 2,000 runs at alpha 0.05: the share of runs that ever fail stays at or under
    0.05 (Freedman's bound over a grid of variance budgets is time-uniform)."""
    rng = np.random.default_rng(3)
    runs, length, vocab = 2000, 300, 8
    w = rng.gamma(0.3, size=(runs, length, vocab))
    p = w / w.sum(axis=-1, keepdims=True)
    order = np.argsort(-p, axis=-1)
    ps = np.take_along_axis(p, order, axis=-1)
    above = np.cumsum(ps, axis=-1) - ps
    pick = (rng.random((runs, length, 1)) > np.cumsum(ps, axis=-1)).sum(axis=-1)
    pick = np.minimum(pick, vocab - 1)
    mass = np.take_along_axis(ps, pick[..., None], -1)[..., 0]
    u = np.take_along_axis(above, pick[..., None], -1)[..., 0] + mass / 2  # no ties: real-valued
    var = (1 - (p ** 3).sum(axis=-1)) / 12
    su, sv = np.cumsum(u - 0.5, axis=1), np.cumsum(var, axis=1)
    ever = 0
    for r in range(runs):
        for m in range(0, length, 5):
            if pit.tail(float(su[r, m]), float(sv[r, m])) <= 0.05:
                ever += 1
                break
    assert ever / runs <= 0.05, ever


def test_decide_says_what_would_settle_it():
    d = pit.decide(0.5 * 100 - 4, 100, 100 / 15)  # shift -0.04 over 100 positions
    assert d.state == "inconclusive" and d.need is not None and d.lean == "fault"
    later = pit.decide((100 + d.need) * (0.5 - 0.04), 100 + d.need, (100 + d.need) / 15)
    assert later.state == "fail"
    clean = pit.decide(200 / 2, 200, 200 / 15)
    assert clean.state == "inconclusive" and clean.lean == "honest" and clean.need
    assert pit.decide(0, 0, 0).state == "inconclusive"
