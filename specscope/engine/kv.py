"""A batched KV cache over any Hugging Face causal LM, with per-entry validity.

Rows of a batch advance by different amounts per verify step. Instead of cropping each row,
entries of rejected draft tokens stay in the cache and are masked out of attention through an
explicit 4-D mask; rows leave the batch with ``select``. Costs: the cache grows by the tokens
scored per step (not only the accepted ones).
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache


class BatchKV:
    """One model's cache for a batch, plus the mask of which cached entries are real."""

    def __init__(self, model: torch.nn.Module, batch: int, device: torch.device) -> None:
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)
        self.device = device
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @property
    def length(self) -> int:
        return self.valid.shape[1]

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, new_valid: torch.Tensor,
                struct: torch.Tensor, tail_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Run ``tokens`` ``[B, q]``; ``struct`` ``[B|1, q, q]`` says which new token sees which.

        Returns logits ``[B, q, V]``. Every token also sees the valid cached entries and itself
        (so padding rows stay finite). ``tail_mask`` ``[B, q, n]`` overrides what each new token
        sees of the last n cached entries (a draft tree's own nodes: each sees its ancestors).
        """
        b, q = tokens.shape
        past = self.length
        eye = torch.eye(q, dtype=torch.bool, device=self.device)
        new = (struct & new_valid[:, None, :]) | eye
        old = self.valid[:, None, :].expand(b, q, past)
        if tail_mask is not None and tail_mask.shape[2]:
            n = tail_mask.shape[2]
            old = torch.cat([old[:, :, :past - n], tail_mask], dim=2)
        mask = torch.cat([old, new.expand(b, q, q)], dim=2)
        out = self.model(input_ids=tokens, position_ids=positions, attention_mask=mask[:, None],
                         use_cache=True, **{self._cache_kw: self.cache})
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        return out.logits

    def invalidate_tail(self, keep: torch.Tensor) -> None:
        """Keep only ``keep`` ``[B, n]`` of the last n cached entries."""
        n = keep.shape[1]
        self.valid[:, self.length - n:] &= keep

    def select(self, rows: torch.Tensor) -> None:
        """Keep only these batch rows (finished requests leave the batch)."""
        self.cache.batch_select_indices(rows)
        self.valid = self.valid[rows]


def causal(q: int, device: torch.device) -> torch.Tensor:
    return torch.ones(q, q, dtype=torch.bool, device=device).tril()[None]


def feed_pending(kv: BatchKV, pending: list[list[int]], start_pos: list[int],
                 pad_id: int = 0) -> torch.Tensor:
    """Feed each row's not-yet-cached committed tokens, right-aligned; logits of the last one.

    Rows with fewer tokens are left-padded with masked dummies. Returns ``[B, V]``.
    """
    width = max(len(p) for p in pending)
    b = len(pending)
    tokens = torch.full((b, width), pad_id, dtype=torch.long)
    positions = torch.zeros((b, width), dtype=torch.long)
    valid = torch.zeros((b, width), dtype=torch.bool)
    for i, (toks, pos) in enumerate(zip(pending, start_pos)):
        n = len(toks)
        tokens[i, width - n:] = torch.tensor(toks, dtype=torch.long)
        positions[i, width - n:] = torch.arange(pos, pos + n)
        valid[i, width - n:] = True
    dev = kv.device
    logits = kv.forward(tokens.to(dev), positions.to(dev), valid.to(dev), causal(width, dev))
    return logits[:, -1]
