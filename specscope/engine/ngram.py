"""Prompt-lookup (n-gram) drafting for the reference decoder: no draft model.

For each request, the last ``n`` committed tokens (``n`` from ``n_max`` down to ``n_min``) are
looked up in its own earlier tokens, prompt included; the tokens that followed the most recent
earlier match are the draft, up to ``k`` of them. A request with no match drafts nothing, so the
draft depth varies per request and per step, as vLLM's ``ngram`` method and llama.cpp's
``ngram-simple`` do. The proposer is deterministic: its draft distribution is a one-hot at each
drafted token, which keeps speculative sampling lossless (accept with probability p(x)).
"""

from __future__ import annotations

from typing import Sequence

import torch

#: vLLM's prompt-lookup defaults: match the longest of 4 .. 2 trailing tokens (a single token
#: matches too often to be worth a verify position on this model)
N_MAX, N_MIN = 4, 2


def propose(tokens: Sequence[int], k: int, n_max: int = N_MAX, n_min: int = N_MIN) -> list[int]:
    """Up to ``k`` draft tokens for one request: what followed the most recent earlier
    occurrence of its longest matching suffix (``n_max`` .. ``n_min`` tokens); [] if none."""
    size = len(tokens)
    if k <= 0:
        return []
    for n in range(min(n_max, size - 1), n_min - 1, -1):
        tail = list(tokens[size - n:])
        first = tail[0]
        # the most recent start position j < size - n with tokens[j:j+n] == tail
        for j in range(size - n - 1, -1, -1):
            if tokens[j] == first and list(tokens[j:j + n]) == tail:
                return list(tokens[j + n:j + n + k])
    return []


def draft_batch(rows: Sequence[Sequence[int]], k: int, vocab: int, device: torch.device
                ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Drafts for a batch: tokens ``[B, D]`` (D the longest draft; shorter rows padded with
    their last token), the one-hot draft distributions ``[B, D, V]`` and each row's length."""
    drafts = [propose(r, k) for r in rows]
    lengths = [len(d) for d in drafts]
    depth = max(lengths, default=0)
    toks = torch.tensor([d + [r[-1]] * (depth - len(d)) for d, r in zip(drafts, rows)],
                        dtype=torch.long, device=device).view(len(rows), depth)
    q = torch.zeros(len(rows), depth, vocab, device=device)
    q.scatter_(-1, toks[..., None], 1.0)
    return toks, q, lengths
