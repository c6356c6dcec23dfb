"""An honest sampler for the probe's fake engines: the committed token's rank drawn from the
distribution the request asked for (temperature, then top-k and top-p, over four tokens at
0.4, 0.3, 0.2 and 0.1), seeded per request, so every check sees what honest sampling gives."""

from __future__ import annotations

import random
from typing import Any

PROBS = (0.4, 0.3, 0.2, 0.1)


def ranks(body: dict[str, Any], n: int) -> list[int]:
    """``n`` committed ranks for a request ``body`` (greedy: the top-1 every time)."""
    t = body.get("temperature", 1.0)  # left out: vLLM's default
    if t <= 0:
        return [0] * n
    w = [p ** (1.0 / t) for p in PROBS]
    k = body.get("top_k") or 0
    if 0 < k < len(w):
        w = w[:k]
    q = [x / sum(w) for x in w]
    kept = nucleus(q, body.get("top_p", 1.0))
    rng = random.Random(body.get("seed", 0))
    return rng.choices(range(len(kept)), weights=kept, k=n)


def nucleus(q: list[float], top_p: float) -> list[float]:
    """The leading probabilities of ``q`` (best first) that top-p keeps, as vLLM's sampler
    keeps them: each while the mass before it is below ``top_p``."""
    kept, before = [], 0.0
    for x in q:
        if before >= top_p:
            break
        kept.append(x)
        before += x
    return kept
