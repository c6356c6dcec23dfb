"""The sharpness test in the engine: among each position's most probable tokens, the committed
token's likelihood at the requested temperature against 0.5x to 2x of it. Honest sampling
(truncated or not, bfloat16 ties and all) never fails it and passes it; a verify that samples
sharper or flatter than asked fails it on its side; greedy rows and tokens outside the set read
nothing."""

from __future__ import annotations

import pytest
import torch

from specscope import sharp
from specscope.engine.sampling import process_probs
from specscope.hooks import stats

# the columns of verify_columns' output: the four truth columns and two mismatch columns come
# first, then the PIT's two, the acceptance rule's two and the outside count
N_AT = stats.COL_SHARP_N - stats.COL_MISMATCH_MARGIN + 4
LLR_AT = N_AT + 1


def _sums(temperature: float, top_p: float, top_k: int, *, verify_t: float | None = None,
          steps: int = 20, seed: int = 0, bf16: bool = False, b: int = 32, p: int = 4,
          v: int = 300) -> tuple[list[float], int]:
    """The sharpness sums (per alternative) and positions read over ``steps`` batches of random
    logits whose committed tokens verify drew at ``verify_t`` (the requested temperature where
    None), truncated as the request asks."""
    g = torch.Generator().manual_seed(seed)
    sums, n = [0.0] * len(sharp.GRID), 0
    for _ in range(steps):
        logits = torch.randn(b, p, v, generator=g) * 3
        if bf16:
            logits = logits.to(torch.bfloat16)
        t = torch.full((b,), temperature)
        tp, tk = torch.full((b,), top_p), torch.full((b,), top_k, dtype=torch.long)
        probs = process_probs(logits.float(), t if verify_t is None else torch.full((b,), verify_t),
                              tp, tk)
        committed = torch.multinomial(probs.view(-1, v), 1, generator=g).view(b, p)
        truncating = top_p < 1.0 or top_k > 0
        out = stats.verify_columns(logits, committed, torch.full((b,), p - 1), t,
                                   tp if top_p < 1.0 else None, tk if top_k > 0 else None,
                                   truncated=torch.arange(b) if truncating else None)
        n += int(out[:, N_AT].sum())
        sums = [a + float(x) for a, x in zip(sums, out[:, LLR_AT:].sum(dim=0))]
    return sums, n


@pytest.mark.parametrize("temperature,top_p,top_k,bf16", [
    (0.8, 1.0, 0, False), (0.5, 0.9, 0, False), (1.0, 1.0, 5, False), (0.7, 0.95, 40, True),
    (1.0, 1.0, 0, True)])
def test_honest_sampling_passes_truncation_and_ties_included(temperature, top_p, top_k, bf16):
    sums, n = _sums(temperature, top_p, top_k, bf16=bf16)
    d = sharp.decide(sums, n)
    assert n > 1000 and d.state == "pass", (n, d)


@pytest.mark.parametrize("verify_t,direction", [(0.64, "sharper"), (0.8 * 1.4, "flatter")])
def test_a_verify_sharper_or_flatter_than_asked_fails_on_its_side(verify_t, direction):
    """Requests at 0.8: verify at 0.64 (the temperature applied twice) or 1.4 times it, over
    1,280 positions (the test decides such faults within a few hundred)."""
    sums, n = _sums(0.8, 1.0, 0, verify_t=verify_t, steps=10)
    d = sharp.decide(sums, n)
    assert d.state == "fail" and d.direction == direction, (n, d)


def test_greedy_rows_and_tokens_outside_the_set_read_nothing():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 3, 200, generator=g)
    worst = logits.argmin(dim=-1)  # never among the most probable tokens
    out = stats.verify_columns(logits, worst, torch.full((2,), 2), torch.tensor([0.0, 0.9]))
    assert out[:, N_AT].tolist() == [0.0, 0.0] and not out[:, LLR_AT:].any()
    best = logits.argmax(dim=-1)
    out = stats.verify_columns(logits, best, torch.full((2,), 2), torch.tensor([0.0, 0.9]))
    assert out[:, N_AT].tolist() == [0.0, 3.0]  # the greedy row reads nothing
    # the argmax at every position: the sharper alternatives fit it better
    assert out[1, LLR_AT] > 0 > out[1, LLR_AT + len(sharp.GRID) - 1]


def test_the_edge_of_a_truncation_is_left_out_of_the_set():
    """Top-k 3: the set holds the two tokens above the third (an engine's own arithmetic may
    cut the third where ours keeps it), so a committed third token reads nothing."""
    logits = torch.tensor([[[4.0, 3.0, 2.0, 1.0, 0.0]]])
    t, k = torch.tensor([1.0]), torch.tensor([3])
    for token, read in ((0, 1.0), (1, 1.0), (2, 0.0)):
        out = stats.verify_columns(logits, torch.tensor([[token]]), torch.tensor([0]), t, None, k,
                                   truncated=torch.arange(1))
        assert float(out[0, N_AT]) == read, token
