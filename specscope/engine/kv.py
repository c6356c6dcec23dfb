"""A batched KV cache over any Hugging Face causal LM, with per-entry validity.

Rows of a batch advance by different amounts per verify step. Instead of cropping each row,
entries of rejected draft tokens stay in the cache and are masked out of attention through an
explicit 4-D mask; rows leave the batch with ``select``. Costs: the cache grows by the tokens
scored per step (not only the accepted ones).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

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

    @property
    def batch(self) -> int:
        return self.valid.shape[0]

    def _tensors(self):
        return [layer for layer in self.cache.layers if getattr(layer, "is_initialized", False)
                and layer.keys.numel()]

    def merge(self, other: "BatchKV") -> None:
        """Append ``other``'s rows to this batch (requests join between steps).

        The shorter cache is padded at its end with entries marked invalid, so positions and
        masks stay exact; an empty side takes zeros shaped like the other's layers.
        """
        if other.batch == 0:
            return
        if self.batch == 0:
            self.cache, self.valid = other.cache, other.valid
            return
        length = max(self.length, other.length)
        mine, theirs = self.cache.layers, other.cache.layers
        for a, b in zip(mine, theirs):
            ka, va = _padded(a, self.batch, length, b)
            kb, vb = _padded(b, other.batch, length, a)
            if ka is None:
                continue
            keys, values = torch.cat([ka, kb]), torch.cat([va, vb])
            if not a.is_initialized:
                a.lazy_initialization(keys, values)
            a.keys, a.values = keys, values
        pad = torch.zeros
        self.valid = torch.cat([
            torch.cat([self.valid, pad(self.batch, length - self.length, dtype=torch.bool,
                                       device=self.device)], dim=1),
            torch.cat([other.valid, pad(other.batch, length - other.length, dtype=torch.bool,
                                        device=self.device)], dim=1)])

    def compact(self, slack: float = 2.0, floor: int = 64) -> bool:
        """Drop invalid entries once they outnumber valid ones (``slack`` x the longest row).

        Each row keeps its valid entries in order, left-aligned; shorter rows are padded with
        invalid entries. A long-lived batch otherwise grows by every token ever scored.
        """
        if self.length <= floor or not self.batch:  # short caches: nothing worth the gather
            return False
        counts = self.valid.sum(dim=1)
        keep = int(counts.max())
        if self.length <= max(floor, slack * keep):
            return False
        order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)[:, :keep]
        for layer in self._tensors():
            b, h, _, d = layer.keys.shape
            idx = order[:, None, :, None].expand(b, h, keep, d)
            layer.keys = layer.keys.gather(2, idx)
            layer.values = layer.values.gather(2, order[:, None, :, None].expand(
                b, h, keep, layer.values.shape[-1]))
        self.valid = torch.arange(keep, device=self.device)[None, :] < counts[:, None]
        return True


def _padded(layer, batch: int, length: int, like):
    """A layer's keys and values padded to ``length`` (zeros shaped like ``like`` if empty)."""
    has = getattr(layer, "is_initialized", False) and layer.keys.numel() > 0
    ref = layer if has else like
    if not (getattr(ref, "is_initialized", False) and ref.keys.numel() > 0):
        return None, None
    _, h, _, d = ref.keys.shape
    dv = ref.values.shape[-1]
    if not has:
        k = ref.keys.new_zeros(batch, h, length, d)
        return k, ref.values.new_zeros(batch, h, length, dv)
    n = layer.keys.shape[2]
    if n == length:
        return layer.keys, layer.values
    return (torch.cat([layer.keys, layer.keys.new_zeros(batch, h, length - n, d)], dim=2),
            torch.cat([layer.values, layer.values.new_zeros(batch, h, length - n, dv)], dim=2))


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


def like_lengths(rows: list, length: Callable[[Any], int], ratio: float = 2.0,
                 short: int = 256) -> list[list]:
    """Prefill groups (prefill pads a group to its longest prompt): the rows as given where
    every prompt is within ``short`` tokens or ``ratio`` times the shortest; else by length,
    split where a prompt is over both."""
    def fits(n: int, first: int) -> bool:
        return n <= short or n <= ratio * max(1, first)

    lengths = [length(row) for row in rows]
    if all(fits(n, min(lengths)) for n in lengths):
        return [rows]
    groups: list[list] = []
    for row in sorted(rows, key=length):
        if groups and fits(length(row), length(groups[-1][0])):
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups
