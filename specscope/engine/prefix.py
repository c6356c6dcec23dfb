"""The target's prefix cache: the KV entries of recent prompts, reused for the longest prefix a
new prompt shares with one of them (in whole blocks, or the whole prompt), so its prefill
computes only the rest.

As engines do, a prompt found whole still has its last token computed again: its logits give
the first output token. The ``prefix_cache_full_hit`` fault computes it from an input slot never
written (token 0): the first output token comes from the wrong input, so a repeated prompt's
answer parts from its first (the probe's prefix class). Capacity counts prompts, not tokens:
each keeps a copy of its KV (for SmolLM2-135M in float32, about 46 MB per 1,000 tokens).
"""

from __future__ import annotations

import os
from collections import OrderedDict

import torch

from .kv import BatchKV

#: prompts kept (least recently used first out); each holds one copy of its KV
CAPACITY = 16
#: a shared prefix is reused in whole blocks of this many tokens (or the whole prompt)
BLOCK = 16


class PrefixCache:
    """Per prompt (its token ids), each layer's keys and values ``[1, H, n, D]``."""

    def __init__(self, capacity: int = CAPACITY, block: int = BLOCK) -> None:
        self.capacity, self.block = capacity, block
        self.entries: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = \
            OrderedDict()
        self.hits = self.tokens_reused = 0

    def lookup(self, prompt: list[int]) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The longest prefix of ``prompt`` cached (whole blocks, or the whole prompt) and its
        entries; (0, []) where none is."""
        best, found = 0, None
        for key in self.entries:
            n = len(os.path.commonprefix([list(key), prompt]))
            if n < len(prompt):  # (a whole prompt found is reused whole)
                n -= n % self.block
            if n > best:
                best, found = n, key
        if found is None:
            return 0, []
        self.entries.move_to_end(found)
        self.hits += 1
        self.tokens_reused += best
        return best, [(k[:, :, :best], v[:, :, :best]) for k, v in self.entries[found]]

    def store(self, prompt: list[int], kv: BatchKV, row: int) -> None:
        """Keep the first ``len(prompt)`` valid entries of ``row`` of ``kv`` (its prompt's)."""
        key = tuple(prompt)
        if key in self.entries:
            self.entries.move_to_end(key)
            return
        where = kv.valid[row]
        layers = []
        for layer in kv.cache.layers:
            if not getattr(layer, "is_initialized", False) or not layer.keys.numel():
                return
            layers.append((layer.keys[row][:, where][:, :len(prompt)][None].clone(),
                           layer.values[row][:, where][:, :len(prompt)][None].clone()))
        self.entries[key] = layers
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)


def seeded(model: torch.nn.Module, layers: list[tuple[torch.Tensor, torch.Tensor]],
           device: torch.device) -> BatchKV:
    """A one-row cache holding ``layers``' entries, all valid."""
    kv = BatchKV(model, 1, device)
    for i, (k, v) in enumerate(layers):
        kv.cache.update(k, v, i)
    kv.valid = torch.ones(1, layers[0][0].shape[2] if layers else 0, dtype=torch.bool,
                          device=device)
    return kv
