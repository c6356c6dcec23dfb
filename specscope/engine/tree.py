"""EAGLE-style tree drafting and tree verification for the reference decoder.

The draft expands the ``topk`` best nodes per depth (by cumulative draft log-probability) into
``topk`` children each; the best ``num_draft_tokens`` candidates form the tree, which the target
verifies in one forward pass with a tree attention mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .kv import BatchKV


@dataclass
class DraftTree:
    tokens: torch.Tensor  #: [B, N] node tokens; node 0 is the root (last committed token)
    parent: torch.Tensor  #: [B, N] parent node index (root: 0)
    depth: torch.Tensor  #: [B, N] depth (root: 0)
    ancestors: torch.Tensor  #: [B, N, N] node i sees node j (ancestor or self)
    draft_top1: torch.Tensor  #: [B, num_steps] draft top-1 probability per depth (best node)


def draft_tree(kv: BatchKV, root_logits: torch.Tensor, root_tokens: torch.Tensor,
               base_pos: torch.Tensor, num_steps: int, topk: int, budget: int) -> DraftTree:
    """Grow a draft tree of ``budget`` nodes below each row's root.

    ``root_logits`` ``[B, V]``: the draft's logits after the last committed token (at position
    ``base_pos - 1``). The draft's own entries for expanded nodes are hidden from later steps.
    """
    dev = root_logits.device
    b = root_logits.shape[0]
    logq = torch.log_softmax(root_logits.float(), dim=-1)
    top1 = [logq.max(dim=-1).values.exp()]
    f_score, f_tok = logq.topk(topk, dim=-1)  # frontier [B, k]
    f_gid = torch.arange(topk, device=dev).expand(b, topk)
    toks, scores, parents, depths = [f_tok], [f_score], [torch.full((b, topk), -1, device=dev)], [1] * topk
    f_anc = torch.zeros(b, topk, 0, dtype=torch.bool, device=dev)
    n_ids = topk
    for depth in range(2, num_steps + 1):
        pos = (base_pos + depth - 2)[:, None].expand(b, topk)
        logits = kv.forward(f_tok, pos, torch.ones(b, topk, dtype=torch.bool, device=dev),
                            torch.zeros(1, topk, topk, dtype=torch.bool, device=dev),
                            tail_mask=f_anc)
        kv.valid[:, -topk:] = False  # visible only to their own descendants (via tail_mask)
        own = torch.eye(topk, dtype=torch.bool, device=dev).expand(b, topk, topk)
        anc_full = torch.cat([f_anc, own], dim=2)  # [B, k, n_added]
        lq = torch.log_softmax(logits.float(), dim=-1)  # [B, k, V]
        top1.append(lq[:, 0].max(dim=-1).values.exp())
        c_lp, c_tok = lq.topk(topk, dim=-1)  # [B, k, k]
        c_score = (f_score[:, :, None] + c_lp).reshape(b, -1)
        c_tok = c_tok.reshape(b, -1)
        c_parent = f_gid[:, :, None].expand(b, topk, topk).reshape(b, -1)
        toks.append(c_tok)
        scores.append(c_score)
        parents.append(c_parent)
        depths.extend([depth] * (topk * topk))
        c_gid = n_ids + torch.arange(topk * topk, device=dev).expand(b, -1)
        n_ids += topk * topk
        f_score, idx = c_score.topk(topk, dim=-1)
        f_tok = c_tok.gather(1, idx)
        f_gid = c_gid.gather(1, idx)
        f_anc = anc_full.gather(1, (idx // topk)[:, :, None].expand(b, topk, anc_full.shape[2]))
    all_tok = torch.cat(toks, dim=1)
    all_parent = torch.cat(parents, dim=1)
    all_depth = torch.tensor(depths, device=dev)
    # Parents must outrank children: cumulative scores never increase along a path, and the
    # depth penalty breaks ties, so the selected set is closed under "parent of".
    adjusted = torch.cat(scores, dim=1) - 1e-5 * all_depth[None].float()
    n_sel = min(budget, all_tok.shape[1])
    sel = adjusted.topk(n_sel, dim=-1).indices.sort(dim=-1).values  # [B, n_sel], depth order
    node_of = torch.full_like(all_parent, -1)
    node_of.scatter_(1, sel, torch.arange(1, n_sel + 1, device=dev).expand(b, -1))
    sel_parent_gid = all_parent.gather(1, sel)
    parent = torch.where(sel_parent_gid < 0, torch.zeros_like(sel_parent_gid),
                         node_of.gather(1, sel_parent_gid.clamp_min(0)))
    n = n_sel + 1
    parent = torch.cat([torch.zeros(b, 1, dtype=torch.long, device=dev), parent], dim=1)
    tokens = torch.cat([root_tokens[:, None], all_tok.gather(1, sel)], dim=1)
    depth_t = torch.cat([torch.zeros(b, 1, dtype=torch.long, device=dev), all_depth[sel]], dim=1)
    anc = torch.zeros(b, n, n, dtype=torch.bool, device=dev)
    anc[:, 0, 0] = True
    rows = torch.arange(b, device=dev)
    for i in range(1, n):
        anc[:, i] = anc[rows, parent[:, i]]
        anc[:, i, i] = True
    return DraftTree(tokens=tokens, parent=parent, depth=depth_t, ancestors=anc,
                     draft_top1=torch.stack(top1, dim=1))


def walk_tree(tokens: list[list[int]], parent: list[list[int]],
              choice: list[list[int]]) -> list[list[int]]:
    """The accepted path of each row: from the root, follow the child whose token equals the
    target's choice at the current node (argmax or a sample). Returns node indices, root first.
    """
    paths = []
    for tok, par, y in zip(tokens, parent, choice):
        children: dict[int, dict[int, int]] = {}
        for i in range(1, len(tok)):
            children.setdefault(par[i], {}).setdefault(tok[i], i)
        node, path = 0, [0]
        while True:
            nxt = children.get(node, {}).get(y[node])
            if nxt is None:
                break
            path.append(nxt)
            node = nxt
        paths.append(path)
    return paths
