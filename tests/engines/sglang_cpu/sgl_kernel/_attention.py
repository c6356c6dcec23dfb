"""Paged attention over SGLang's KV pool, the two ops its ``intel_amx`` backend calls
(``torch.ops.sgl_kernel.decode_attention_cpu`` / ``extend_attention_cpu``), one request at a time
in float32. Request ``b``'s keys live at ``k_buffer[req_to_token[req_pool_indices[b], :len]]``.
Grouped-query heads share their KV head. Sinks, cross-attention, sliding windows and scaled
(fp8) caches are not stood in for: they raise."""

from __future__ import annotations

import math

import torch


def _unsupported(op: str, *, sinks=None, is_cross: bool = False, window: int = 0,
                 key_scale: float = 1.0, value_scale: float = 1.0) -> None:
    for what, present in (("attention sinks", sinks is not None), ("cross-attention", is_cross),
                          ("a sliding window", window > 0),
                          ("scaled KV caches", key_scale != 1.0 or value_scale != 1.0)):
        if present:
            raise NotImplementedError(f"sgl_kernel stand-in {op}: {what} not supported")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
            sm_scale: float, logit_cap: float) -> torch.Tensor:
    """``q [T, H, D]`` over ``k [L, Hkv, D]``, ``v [L, Hkv, Dv]``; ``allowed [T, L]`` or None."""
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    qf = q.float().transpose(0, 1)                                       # [H, T, D]
    kf = k.float().repeat_interleave(group, dim=1).transpose(0, 1)        # [H, L, D]
    vf = v.float().repeat_interleave(group, dim=1).transpose(0, 1)        # [H, L, Dv]
    scores = qf @ kf.transpose(1, 2) * sm_scale                          # [H, T, L]
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if allowed is not None:
        scores = scores.masked_fill(~allowed.unsqueeze(0), -math.inf)
    return (scores.softmax(dim=-1) @ vf).transpose(0, 1)                 # [T, H, Dv]


def decode_attention_cpu(query, k_cache, v_cache, key_scale, value_scale, output, key, value,
                         loc, attn_logits, req_to_token, req_pool_indices, seq_lens, sm_scale,
                         logit_cap, is_cross=False, sliding_window=0, encoder_lens=None,
                         sinks=None) -> None:
    """One new token per request: its key and value (when given) written at ``loc`` first, then
    ``query[b]`` attends to the request's ``seq_lens[b]`` slots. ``attn_logits`` is the real
    kernel's split-KV scratch, unused here."""
    _unsupported("decode_attention_cpu", sinks=sinks, is_cross=is_cross, window=sliding_window,
                 key_scale=key_scale, value_scale=value_scale)
    if key is not None and value is not None:
        slots = loc.long()
        k_cache[slots] = key.reshape(k_cache[slots].shape).to(k_cache.dtype)
        v_cache[slots] = value.reshape(v_cache[slots].shape).to(v_cache.dtype)
    for b, (row, length) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        slots = req_to_token[row, :length].long()
        out = _attend(query[b:b + 1], k_cache[slots], v_cache[slots], None, sm_scale, logit_cap)
        output[b] = out[0].to(output.dtype)


def extend_attention_cpu(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, key_scale,
                         value_scale, req_to_token, req_pool_indices, seq_lens, extend_seq_lens,
                         extend_start_loc, max_len_extend, sm_scale, logit_cap, is_cross=False,
                         sliding_window=0, encoder_lens=None, sinks=None, tree_mask=None,
                         is_causal=True) -> None:
    """Several new tokens per request (prefill, or verify's draft tokens): request ``b``'s
    ``extend_seq_lens[b]`` queries from ``extend_start_loc[b]`` attend to its committed prefix
    (``seq_lens[b]`` minus the new tokens, all visible) and to the new tokens, causally, or as
    ``tree_mask`` says (``[bs * n * n]``, row ``i`` marking the draft tokens node ``i`` sees).
    The new keys come from ``k_extend`` (the caller has also written them to the pool)."""
    _unsupported("extend_attention_cpu", sinks=sinks, is_cross=is_cross, window=sliding_window,
                 key_scale=key_scale, value_scale=value_scale)
    for b, (row, total, new, start) in enumerate(zip(
            req_pool_indices.tolist(), seq_lens.tolist(), extend_seq_lens.tolist(),
            extend_start_loc.tolist())):
        prefix = total - new
        slots = req_to_token[row, :prefix].long()
        if k_extend is not None:
            k_new, v_new = k_extend[start:start + new], v_extend[start:start + new]
        else:
            fresh = req_to_token[row, prefix:total].long()
            k_new, v_new = k_buffer[fresh], v_buffer[fresh]
        k = torch.cat([k_buffer[slots].to(k_new.dtype), k_new])
        v = torch.cat([v_buffer[slots].to(v_new.dtype), v_new])
        if tree_mask is not None:
            inner = tree_mask[b * new * new:(b + 1) * new * new].view(new, new).bool()
        elif is_causal:
            inner = torch.ones(new, new, dtype=torch.bool).tril()
        else:
            inner = torch.ones(new, new, dtype=torch.bool)
        allowed = torch.cat([torch.ones(new, prefix, dtype=torch.bool), inner], dim=1)
        out = _attend(q_extend[start:start + new], k, v, allowed, sm_scale, logit_cap)
        o_extend[start:start + new] = out.to(o_extend.dtype)
