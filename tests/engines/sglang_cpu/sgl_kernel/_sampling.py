"""Sampling ops for verify's sampling branch, which SGLang's CPU build never reaches as shipped
(its CPU verify commits the argmax); the tests' repaired verify reaches them.

``SGLANG_STANDIN_FAULT`` (tests only) names a file read at each call: ``sharpened`` verifies
against the target's probabilities squared and renormalised (its temperature halved: the
temperature applied twice over); ``top_p_dropped`` makes the top-p renormalisation return its
input (a sampling setting dropped under speculation). Anything else: honest."""

from __future__ import annotations

import os

import torch


def _fault() -> str:
    path = os.environ.get("SGLANG_STANDIN_FAULT")
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def top_k_renorm_prob(probs, top_ks) -> torch.Tensor:
    """Keep each row's ``top_k`` largest probabilities, exactly ``top_k`` of them (among ties,
    the lowest token ids, as ``argmax`` picks), renormalised; ``top_k`` <= 0 or >= the
    vocabulary keeps the row."""
    k = top_ks.reshape(-1).long()
    vocab = probs.shape[-1]
    k = torch.where((k <= 0) | (k >= vocab), torch.full_like(k, vocab), k)
    order = probs.sort(dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(vocab).expand_as(order))
    kept = torch.where(rank < k.unsqueeze(-1), probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


def top_p_renorm_prob(probs, top_ps) -> torch.Tensor:
    """Keep the smallest set of largest probabilities whose mass reaches ``top_p``, renormalised.
    Summed in float32 whatever ``probs``' dtype, as sgl-kernel's kernel does: a bfloat16
    running sum near 0.9 drops every probability below about 0.002 and so keeps tokens far
    outside the nucleus."""
    if _fault() == "top_p_dropped":
        return probs
    work = probs.float()
    p = top_ps.reshape(-1, 1).float()
    ordered, order = work.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered  # mass strictly above each token
    keep_sorted = before < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = torch.where(keep, work, torch.zeros_like(work))
    return (kept / kept.sum(dim=-1, keepdim=True)).to(probs.dtype)


def _draw(probs: torch.Tensor, coin: float) -> int:
    """The token at ``coin`` in ``probs``' cumulative distribution."""
    cdf = probs.double().cumsum(0)
    pick = int(torch.searchsorted(cdf, torch.tensor([coin * float(cdf[-1])], dtype=cdf.dtype)))
    return min(pick, probs.numel() - 1)


def tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates,
                                          retrive_index, retrive_next_token,
                                          retrive_next_sibling, uniform_samples,
                                          uniform_samples_for_final_sampling, target_probs,
                                          draft_probs, threshold_single: float = 1.0,
                                          threshold_acc: float = 1.0,
                                          deterministic: bool = True) -> None:
    """Verify with sampling from the target alone: at each accepted node draw the target's own
    token from ``target_probs`` (coin ``uniform_samples[b, depth]``), accept the child whose draft
    token equals it, else commit the drawn token and stop. The committed tokens follow the
    target's distribution exactly, whatever the drafts were. ``draft_probs`` and the thresholds
    are not used (target-only verify, thresholds 1)."""
    bs, n = candidates.shape
    depth = accept_index.shape[1]
    cand = candidates.tolist()
    index, nxt, sib = retrive_index.tolist(), retrive_next_token.tolist(), retrive_next_sibling.tolist()
    coins = uniform_samples.reshape(bs, -1).tolist()
    final = uniform_samples_for_final_sampling.reshape(-1).tolist()
    probs = target_probs.reshape(bs * n, -1)
    if _fault() == "sharpened":
        probs = probs.double() ** 2
        probs = probs / probs.sum(dim=-1, keepdim=True)
    for b in range(bs):
        last, local, accepted, rejected = index[b][0], 0, 0, False
        accept_index[b, 0] = last
        for j in range(1, depth):
            cur = nxt[b][local]
            if cur == -1:
                break
            token = _draw(probs[last], coins[b][min(j - 1, len(coins[b]) - 1)])
            while cur != -1 and cand[b][cur] != token:
                cur = sib[b][cur]
            predicts[last] = token
            if cur == -1:
                rejected = True
                break
            accepted += 1
            accept_index[b, accepted] = index[b][cur]
            last, local = index[b][cur], cur
        accept_token_num[b] = accepted
        if not rejected:
            predicts[last] = _draw(probs[last], final[b])
