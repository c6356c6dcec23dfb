"""The log-probabilities the reference engine returns for committed tokens: the target's raw
log-softmax (temperature 1, before truncation), as vLLM's default ``raw_logprobs`` gives them."""

from __future__ import annotations

import torch

#: one committed token: its log-probability and the ``k`` most probable tokens (id, logprob)
Logprob = tuple[float, tuple[tuple[int, float], ...]]


def committed(logits: torch.Tensor, tokens: list[int], k: int) -> list[Logprob]:
    """Per committed token (``tokens[j]`` drawn from ``logits[j]``): its raw log-probability and
    the ``k`` best alternatives."""
    if not tokens:
        return []
    ls = torch.log_softmax(logits[:len(tokens)].float(), dim=-1)
    mine = ls[torch.arange(len(tokens)), torch.tensor(tokens, device=ls.device)].tolist()
    if k <= 0:
        return [(lp, ()) for lp in mine]
    vals, ids = ls.topk(min(k, ls.shape[-1]), dim=-1)
    return [(lp, tuple(zip(i, v))) for lp, i, v in zip(mine, ids.tolist(), vals.tolist())]


def prompt(model: torch.nn.Module, ids: list[int], k: int, shift: bool = False) -> list:
    """Each prompt token's raw log-probability given the tokens before it, with the ``k`` best
    alternatives (``committed``'s layout); None for the first, which has no context (vLLM's
    ``prompt_logprobs``). ``shift`` seeds the ``prompt_logprobs_shifted`` fault: each token
    scored by the distribution one position late (a prefill chunk's offset)."""
    with torch.inference_mode():
        dev = next(model.parameters()).device
        logits = model(input_ids=torch.tensor([ids], device=dev), use_cache=False).logits[0]
    scored = logits[1:] if shift else logits[:-1]
    return [None, *committed(scored, ids[1:len(scored) + 1], k)][:len(ids)]
