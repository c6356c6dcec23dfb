"""KV-slot bookkeeping: request-to-token map writes and reads, accepted slots, bonus tokens, and
copying KV rows between slots in every layer's buffer."""

from __future__ import annotations

import ctypes

import torch


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
                                 out_cache_loc, pool_len: int) -> None:
    """``req_to_token[req_pool_indices[i], start[i]:end[i]]`` = the next ``end[i] - start[i]``
    entries of ``out_cache_loc``."""
    done = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(),
                               end_offset.tolist()):
        req_to_token[row, start:end] = out_cache_loc[done:done + end - start].to(req_to_token.dtype)
        done += end - start


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
                                 out_cache_loc, pool_len: int) -> None:
    """The reverse: ``out_cache_loc`` = each request's ``req_to_token`` slots in
    ``[start, end)``, requests one after another."""
    done = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(),
                               end_offset.tolist()):
        out_cache_loc[done:done + end - start] = req_to_token[row, start:end]
        done += end - start


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens,
                                           out_cache_loc, pool_len: int, topk: int,
                                           num_steps: int) -> None:
    """Each request's ``topk * num_steps`` draft slots, reserved after its ``seq_len``."""
    width = topk * num_steps
    for i, (row, start) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        out_cache_loc[i * width:(i + 1) * width] = req_to_token[row, start:start + width]


def build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk: int,
                                    num_steps: int, pool_len: int) -> torch.Tensor:
    """``[bs * topk, pool_len]``: row ``b * topk + k`` is request ``b``'s committed prefix then
    candidate ``k``'s draft slots (laid out at ``seq_len + k * num_steps``)."""
    rows = req_pool_indices.numel()
    out = torch.empty(rows * topk, pool_len, dtype=req_to_token.dtype)
    for b, (row, sl) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        for k in range(topk):
            dst = out[b * topk + k]
            dst[:sl] = req_to_token[row, :sl]
            dst[sl:sl + num_steps] = req_to_token[row, sl + k * num_steps:sl + (k + 1) * num_steps]
    return out


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride: int) -> None:
    """``bonus_tokens[i]`` = request ``i``'s last accepted token (``accept_lens`` counts the
    bonus)."""
    bs = accept_lens.numel()
    where = torch.arange(bs, dtype=torch.long) * accept_stride + accept_lens.long() - 1
    bonus_tokens.copy_(accept_tokens.reshape(-1)[where].to(bonus_tokens.dtype))


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc,
                                  size: int | None = None) -> None:
    """The KV slots of the accepted nodes, in order, skipping -1. SGLang 0.5.21 passes three
    arguments, later kernels also the size of ``accept_index`` to read."""
    flat = accept_index.reshape(-1)
    if size is not None:
        flat = flat[:size]
    taken = flat[flat > -1].long()
    accept_out_cache_loc[:taken.numel()] = out_cache_loc[taken]


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc) -> None:
    """For every buffer (one per layer and K/V: its address and bytes per slot), copy slot
    ``src_loc[j]`` to slot ``tgt_loc[j]``; all sources are read before any target is written."""
    if tgt_loc.numel() == 0:
        return
    src, tgt = src_loc.long(), tgt_loc.long()
    rows = int(max(src.max(), tgt.max())) + 1
    for address, stride in zip(data_ptrs.tolist(), strides.tolist()):
        raw = (ctypes.c_uint8 * (rows * int(stride))).from_address(int(address))
        view = torch.frombuffer(raw, dtype=torch.uint8).view(rows, int(stride))
        view[tgt] = view[src]
