"""Draft trees: build the retrieval links, walk them greedily, and recover them from a mask.

Layout shared by the three ops (flat node ``b * n + i`` for request ``b``'s node ``i`` of ``n``
draft tokens, node 0 the last committed token): ``retrive_index[b, i]`` the flat index of node
``i``, ``retrive_next_token[b, i]`` its first child, ``retrive_next_sibling[b, i]`` its next
sibling (-1 for none).
"""

from __future__ import annotations

import torch


def verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index,
                           retrive_next_token, retrive_next_sibling, target_predict) -> None:
    """Walk each request's tree from the root, at each depth taking the first child (in sibling
    order) whose draft token equals the target's token at the last accepted node.

    Writes, in place: ``predicts[flat]`` the token committed after each accepted node (the next
    accepted draft, or the target's own token at the last one); ``accept_index[b, :1 + a]`` the
    accepted nodes' flat indices, root first (the rest untouched, -1 from the caller);
    ``accept_token_num[b]`` the accepted drafts ``a``, bonus excluded."""
    bs, n = candidates.shape
    depth = accept_index.shape[1]
    cand = candidates.tolist()
    index, nxt, sib = retrive_index.tolist(), retrive_next_token.tolist(), retrive_next_sibling.tolist()
    target = target_predict.reshape(-1).tolist()
    for b in range(bs):
        last = index[b][0]
        accept_index[b, 0] = last
        accepted = 0
        cur = 0
        for _ in range(1, depth):
            cur = nxt[b][cur]
            while cur != -1:
                if cand[b][cur] == target[last]:
                    predicts[last] = target[last]
                    accepted += 1
                    accept_index[b, accepted] = index[b][cur]
                    last = index[b][cur]
                    break
                cur = sib[b][cur]
            if cur == -1:
                break
        accept_token_num[b] = accepted
        predicts[last] = target[last]


def build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask,
                                    positions, retrive_index, retrive_next_token,
                                    retrive_next_sibling, topk: int, depth: int,
                                    draft_token_num: int, tree_mask_mode: int) -> None:
    """EAGLE's tree from its top-k expansion: ``selected_index[b, i - 1]`` is node ``i``'s entry in
    the expansion (``// topk`` its parent's slot, resolved through ``parent_list``). Fills the
    links, each node's position (``seq_len`` + depth) and the tree mask (mode 1, QLEN_ONLY:
    ``[bs * n * n]``, row ``i`` marking node ``i``'s ancestors and itself among the draft
    tokens; mode 0, FULL_MASK: the same rows after each request's committed prefix)."""
    if tree_mask_mode == 2:
        raise NotImplementedError("build_tree_kernel_efficient_cpu: QLEN_ONLY_BITPACKING is not "
                                  "supported on CPU (nor in the stand-in)")
    n = draft_token_num
    bs = parent_list.shape[0]
    parents, sel = parent_list.tolist(), selected_index.tolist()
    seq_lens = verified_seq_len.tolist()
    rows_ri = retrive_index.view(bs, n)
    rows_nt = retrive_next_token.view(bs, n)
    rows_ns = retrive_next_sibling.view(bs, n)
    offset = 0
    for b in range(bs):
        off, seq_len = b * n, seq_lens[b]
        nt, ns = rows_nt[b].tolist(), rows_ns[b].tolist()
        positions[off] = seq_len
        rows_ri[b] = torch.arange(off, off + n, dtype=rows_ri.dtype)

        def slot_of(entry: int) -> int:  # the node whose expansion entry is ``entry``
            for j in range(n - 1):
                if sel[b][j] == entry:  # noqa: B023 (called only within this iteration)
                    return j
            return n - 1

        for i in range(n - 1, 0, -1):
            parent_tb = sel[b][i - 1] // topk
            parent = 0 if parent_tb == 0 else slot_of(parents[b][parent_tb]) + 1
            if parent >= n:
                continue
            if nt[parent] != -1:
                ns[i] = nt[parent]
            nt[parent] = i
        rows_nt[b] = torch.tensor(nt, dtype=rows_nt.dtype)
        rows_ns[b] = torch.tensor(ns, dtype=rows_ns.dtype)
        rows = torch.zeros(n, n, dtype=torch.bool)
        rows[:, 0] = True
        for tid in range(1, n):
            cur, position = tid - 1, 0
            while True:
                position += 1
                rows[tid, cur + 1] = True
                parent_tb = sel[b][cur] // topk
                if parent_tb == 0:
                    break
                cur = slot_of(parents[b][parent_tb])
            positions[off + tid] = position + seq_len
        if tree_mask_mode == 1:
            tree_mask[off * n:(off + n) * n] = rows.reshape(-1)
        else:
            width = seq_len + n
            block = tree_mask[offset:offset + n * width].view(n, width)
            block[:, seq_len:] = rows
            offset += n * width


def reconstruct_indices_from_tree_mask(tree_mask, verified_seq_len, positions, retrive_index,
                                       retrive_next_token, retrive_next_sibling,
                                       batch_size: int, draft_token_num: int) -> None:
    """The links back from a QLEN mask (NGRAM): ``mask[b, i, j]`` marks node ``j`` an ancestor
    of ``i``. Depth = ancestors before ``i``; parent = the nearest; first child = the first
    later node whose row marks ``i``; next sibling = the first later node under the same
    parent with no ancestor between."""
    n = draft_token_num
    mask = tree_mask.view(batch_size, n, n).tolist()
    seq_lens = verified_seq_len.tolist()
    ri, nt, ns = (t.view(batch_size, n) for t in (retrive_index, retrive_next_token,
                                                  retrive_next_sibling))
    for b in range(batch_size):
        m = mask[b]
        for tid in range(n):
            ancestors = [i for i in range(tid) if m[tid][i]]
            parent = ancestors[-1] if ancestors else -1
            ri[b, tid] = b * n + tid
            positions[b * n + tid] = len(ancestors) + seq_lens[b]
            nt[b, tid] = next((i for i in range(tid + 1, n) if m[i][tid]), -1)
            sibling = -1
            if parent != -1:
                for i in range(tid + 1, n):
                    if m[i][parent] and not any(m[i][parent + 1:i]):
                        sibling = i
                        break
            ns[b, tid] = sibling
