"""Sampling and chain verification for the reference decoder (torch, batched, per-row modes).

Every function works on a whole batch at once with per-request temperature, top-p and top-k,
the way an engine's sampling kernels do.
"""

from __future__ import annotations

from typing import Sequence, Union

import torch

#: where a batch's draws come from: one generator for the whole batch, or one per row (a seeded
#: request draws from its own: the same seed, the same draws, whatever else shares the batch)
Generators = Union[torch.Generator, Sequence[torch.Generator], None]


def uniform(shape: tuple[int, ...], generator: Generators, device: torch.device) -> torch.Tensor:
    """Uniforms of ``shape`` (rows first): from ``generator``, or row by row from each row's."""
    if generator is None or isinstance(generator, torch.Generator):
        return torch.rand(shape, generator=generator, device=device)
    return torch.stack([torch.rand(shape[1:], generator=g, device=device) for g in generator])


def needs_truncation(top_p: list[float], top_k: list[int]) -> bool:
    return any(p < 1.0 for p in top_p) or any(k > 0 for k in top_k)


def process_probs(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
                  top_k: torch.Tensor, truncate: bool = True) -> torch.Tensor:
    """The distribution each row samples from: ``[B, ..., V]`` logits -> probabilities.

    Temperature scaling, then top-k and top-p (nucleus: keep the smallest prefix of the sorted
    distribution whose mass reaches p, the top token always kept), renormalised. Rows with
    temperature 0 get a one-hot at the argmax.
    """
    x = logits.float()
    shape = (-1,) + (1,) * (x.dim() - 1)
    t = temperature.view(shape).to(x.dtype)
    z = x / t.clamp_min(1e-5)
    if truncate:
        zs, order = torch.sort(z, dim=-1, descending=True)
        rank = torch.arange(z.shape[-1], device=z.device)
        k = top_k.view(shape)
        keep = (k <= 0) | (rank < k)
        probs = torch.softmax(zs.masked_fill(~keep, float("-inf")), dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs
        keep = keep & (before < top_p.view(shape).to(x.dtype))
        zs = zs.masked_fill(~keep, float("-inf"))
        z = torch.empty_like(z).scatter_(-1, order, zs)
    probs = torch.softmax(z, dim=-1)
    onehot = torch.zeros_like(probs).scatter_(-1, x.argmax(dim=-1, keepdim=True), 1.0)
    return torch.where((t <= 0), onehot, probs)


def sample_from(weights: torch.Tensor, generator: Generators) -> torch.Tensor:
    """Inverse-CDF sample from unnormalised non-negative weights ``[..., V]`` -> ``[...]``.

    Like a fused sampling kernel, an all-zero row does not raise: it returns the last index.
    """
    cdf = torch.cumsum(weights.float(), dim=-1)
    u = uniform(cdf.shape[:-1] + (1,), generator, cdf.device)
    idx = torch.searchsorted(cdf, u * cdf[..., -1:], right=True)
    return idx.clamp_max(weights.shape[-1] - 1).squeeze(-1)


def verify_chain(
    draft: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    row_mode: torch.Tensor,
    generator: Generators,
    lengths: torch.Tensor | None = None,
    fault: str = "",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify a chain of D draft tokens per row; returns (num_accepted ``[B]``, committed ``[B, D+1]``).

    ``target_probs`` ``[B, D+1, V]`` and ``draft_probs`` ``[B, D, V]`` are processed
    distributions. ``row_mode`` per row: 0 = argmax (greedy, or an argmax fallback),
    1 = target-only temperature sampling (commit y ~ p, accept a draft iff it equals y),
    2 = speculative sampling (accept with min(1, p/q), else resample from norm(max(0, p - q))).
    ``committed[:, :num_accepted + 1]`` are the tokens to commit; later columns are don't-care.
    ``lengths`` ``[B]``: drafts shorter than D (an n-gram proposer's); a row accepts at most its
    own length, and the token after a fully accepted short draft is a sample of p there.
    ``fault``: "residual_argmax", "bonus_argmax" or "accept_ignores_q" seed those faults
    (``engine/config.py``).
    """
    b, d = draft.shape
    argmax = target_probs.argmax(dim=-1)  # [B, D+1]
    sampled = sample_from(target_probs, generator)  # [B, D+1]
    y = torch.where((row_mode == 0)[:, None], argmax, sampled)
    match = draft == y[:, :d]
    p_d = target_probs[:, :d].gather(-1, draft[..., None]).squeeze(-1)
    q_d = draft_probs.gather(-1, draft[..., None]).squeeze(-1)
    u = uniform((b, d), generator, draft.device)
    spec = (row_mode == 2)[:, None]
    accept = torch.where(spec, (u if fault == "accept_ignores_q" else u * q_d) < p_d, match)
    if lengths is not None:
        accept = accept & (torch.arange(d, device=draft.device)[None, :] < lengths[:, None])
    num_accepted = torch.cumprod(accept.long(), dim=1).sum(dim=1)
    leftover = (target_probs[:, :d] - draft_probs).clamp_min(0.0)
    residual = leftover.argmax(dim=-1) if fault == "residual_argmax" \
        else sample_from(leftover, generator)
    if fault == "bonus_argmax":  # every bonus token (after a fully accepted draft) the argmax
        sampled = argmax
    # the token committed after the accepted prefix: bonus (all accepted) or correction
    spec_fix = torch.cat([residual, sampled[:, d:]], dim=1)  # [B, D+1]
    if lengths is not None:  # past a row's own draft: the bonus, a sample of p
        past = torch.arange(d + 1, device=draft.device)[None, :] >= lengths[:, None]
        spec_fix = torch.where(past, sampled, spec_fix)
    fix = torch.where(spec, spec_fix, y)
    committed = torch.cat([draft, draft[:, :1]], dim=1).clone()
    committed.scatter_(1, num_accepted[:, None], fix.gather(1, num_accepted[:, None]))
    return num_accepted, committed


def top2(logits: torch.Tensor) -> list[tuple[float, int]]:
    """Per row of ``logits`` (b, V): the top-1 minus top-2 logit and the second choice (one
    top-2 per row; a target-only run records them for divergence analysis)."""
    v, i = logits.float().topk(2, dim=-1)
    return [(a - b, second) for (a, b), (_, second) in zip(v.tolist(), i.tolist())]


def second_choice(fixed: torch.Tensor, logits: torch.Tensor, num_acc: torch.Tensor,
                  mode: torch.Tensor) -> torch.Tensor:
    """The seeded ``greedy_second_choice`` fault: greedy rows (``mode`` 0) commit the target's
    second choice as the step's correction or bonus token (``fixed`` (b, d + 1) tokens,
    ``logits`` (b, d + 1, V), ``num_acc`` (b,) accepted drafts)."""
    rows = torch.arange(fixed.shape[0], device=fixed.device)
    second = logits[rows, num_acc].topk(2, dim=-1).indices[:, 1]
    out = fixed.clone()
    out[rows, num_acc] = torch.where(mode == 0, second, fixed[rows, num_acc])
    return out


def hold_eos(logits: torch.Tensor, produced: list[int], min_new: list[int],
             stops: list[set[int]] | list[frozenset[int]], sees: torch.Tensor | None = None,
             first_only: bool = False) -> torch.Tensor:
    """``logits`` with each row's ``stops`` (its end-of-sequence and stop tokens) at -inf
    wherever its output would still be shorter than its ``min_new`` tokens (vLLM's
    ``min_tokens``, which holds back every stop token). ``[B, V]``: the next token,
    after ``produced``; ``[B, N, V]``: a verify pass, node i predicting output token
    ``produced + depth(i)`` (``sees`` ``[1 or B, N, N]``, each node's path, itself included).
    ``first_only`` seeds the ``min_tokens_first_only`` fault: the mask at each pass's first
    position only. Rows without min_tokens are returned as they came."""
    if not any(m > n and s for m, n, s in zip(min_new, produced, stops)):
        return logits
    dev = logits.device
    short = torch.tensor([m - n for m, n in zip(min_new, produced)], device=dev)  # tokens owed
    if logits.dim() == 3:
        assert sees is not None, "a verify pass needs its paths"
        depth = sees.float().sum(dim=-1).expand(logits.shape[0], -1) - 1  # [B, N]
        hold = depth < short[:, None]
        if first_only:
            hold = hold & (depth == 0)
    else:
        hold = short > 0
    out = logits.float().clone()
    for k, s in enumerate(stops):
        if s and min_new[k] > produced[k]:
            ids = torch.tensor(sorted(s), device=dev)
            row = out[k]  # [V] or [N, V]
            masked = row.index_select(-1, ids).masked_fill(hold[k][..., None], float("-inf"))
            row.index_copy_(-1, ids, masked)
    return out


def penalize(logits: torch.Tensor, outputs: list[list[int]], presence: list[float],
             frequency: list[float], tokens: torch.Tensor | None = None,
             sees: torch.Tensor | None = None, first_only: bool = False) -> torch.Tensor:
    """Presence and frequency penalties (OpenAI's, as vLLM and SGLang apply them): each
    token's logit less ``presence`` once it has appeared in the request's output and
    ``frequency`` per appearance, before temperature.

    ``logits`` ``[B, V]`` (one position per row, after ``outputs``) or ``[B, N, V]`` (a verify
    pass over ``tokens`` ``[B, N]``, node 0 the last committed token, ``sees`` ``[1 or B, N, N]``
    which nodes each node follows, itself included): each node's counts take the output so far
    and the draft tokens on its own path. ``first_only`` seeds the ``penalty_first_only`` fault:
    penalties at each verify pass's first position only, its drafted positions unpenalised.
    Rows without penalties are returned as they came."""
    if not any(presence) and not any(frequency):
        return logits
    b, v, dev = logits.shape[0], logits.shape[-1], logits.device
    counts = torch.zeros(b, v, device=dev)
    for k, out in enumerate(outputs):
        if out:
            counts[k].index_add_(0, torch.tensor(out, device=dev), torch.ones(len(out), device=dev))
    if logits.dim() == 3:
        assert tokens is not None and sees is not None, "a verify pass needs its tokens"
        onehot = torch.nn.functional.one_hot(tokens, v).float()
        onehot[:, 0] = 0.0  # the root is committed already: in ``outputs``
        counts = counts[:, None] + torch.bmm(sees.expand(b, -1, -1).float(), onehot)
    shape = (-1,) + (1,) * (logits.dim() - 1)
    pres = torch.tensor(presence, device=dev).view(shape)
    freq = torch.tensor(frequency, device=dev).view(shape)
    out = logits.float() - pres * (counts > 0) - freq * counts
    if first_only and logits.dim() == 3:
        out = torch.cat([out[:, :1], logits[:, 1:].float()], dim=1)
    return out
