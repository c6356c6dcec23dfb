"""The sgl_kernel CPU stand-in (tests/engines/sglang_cpu), op by op against references written
from what each op means: paged attention against torch's own attention over the gathered keys,
the tree ops against trees given as parent lists, the cache ops on small explicit layouts."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

STANDIN = Path(__file__).with_name("sglang_cpu")


@pytest.fixture(scope="module")
def sk():
    sys.path.insert(0, str(STANDIN))
    try:
        module = importlib.import_module("sgl_kernel")
        assert getattr(module, "STANDIN", False), f"another sgl_kernel shadows the stand-in: {module}"
        yield module
    finally:
        sys.path.remove(str(STANDIN))
        for name in [m for m in sys.modules if m == "sgl_kernel" or m.startswith("sgl_kernel.")]:
            del sys.modules[name]


def test_an_op_it_lacks_is_named(sk, capfd):
    with pytest.raises(ImportError, match="fused_qk_norm_rope_cpu"):
        from sgl_kernel import fused_qk_norm_rope_cpu  # noqa: F401
    with pytest.raises(AttributeError, match="not in the sgl_kernel CPU stand-in"):
        sk.rotate_input_ids_cpu  # noqa: B018 (the attribute access is what raises)
    assert "missing op sgl_kernel.fused_qk_norm_rope_cpu" in capfd.readouterr().err
    assert "rotate_input_ids_cpu" in sk.MISSING
    assert not hasattr(torch.ops.sgl_kernel, "fused_qk_norm_cpu")  # SGLang probes with hasattr
    assert torch.ops.sgl_kernel.decode_attention_cpu is sk.decode_attention_cpu


def _pool(tokens: int, kv_heads: int, dim: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(tokens, kv_heads, dim, generator=g).to(dtype),
            torch.randn(tokens, kv_heads, dim, generator=g).to(dtype))


def _reference(q, k, v, mask):
    """torch's attention, grouped-query heads expanded: q [T,H,D], k/v [L,Hkv,D]."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    out = F.scaled_dot_product_attention(q.transpose(0, 1).float(), k.transpose(0, 1).float(),
                                         v.transpose(0, 1).float(), attn_mask=mask)
    return out.transpose(0, 1)


def test_decode_attention_writes_the_new_key_and_attends_over_the_request(sk):
    heads, kv_heads, dim = 6, 2, 16
    k_cache, v_cache = _pool(64, kv_heads, dim)
    req_to_token = torch.zeros(4, 32, dtype=torch.int32)
    req_to_token[1, :5] = torch.tensor([9, 3, 40, 41, 7], dtype=torch.int32)
    req_to_token[3, :3] = torch.tensor([12, 13, 50], dtype=torch.int32)
    seq_lens = torch.tensor([5, 3])
    q = torch.randn(2, heads, dim)
    key, value = torch.randn(2, kv_heads, dim), torch.randn(2, kv_heads, dim)
    loc = torch.tensor([7, 50])  # each request's newest slot
    out = torch.empty(2, heads, dim)
    sk.decode_attention_cpu(q, k_cache, v_cache, 1.0, 1.0, out, key, value, loc,
                            torch.empty(0), req_to_token, torch.tensor([1, 3]), seq_lens,
                            dim ** -0.5, 0.0, False, 0, None, None)
    assert torch.equal(k_cache[loc], key) and torch.equal(v_cache[loc], value)
    for b, (row, n) in enumerate([(1, 5), (3, 3)]):
        slots = req_to_token[row, :n].long()
        want = _reference(q[b:b + 1], k_cache[slots], v_cache[slots], None)[0]
        torch.testing.assert_close(out[b], want, rtol=1e-5, atol=1e-5)


def test_extend_attention_causal_and_under_a_tree_mask(sk):
    heads, kv_heads, dim, prefix, new = 4, 2, 16, 6, 4
    k_buf, v_buf = _pool(32, kv_heads, dim, torch.bfloat16)
    req_to_token = torch.arange(32, dtype=torch.int32).view(2, 16)
    q = torch.randn(2 * new, heads, dim, dtype=torch.bfloat16)
    k_new, v_new = torch.randn(2 * new, kv_heads, dim), torch.randn(2 * new, kv_heads, dim)
    k_new, v_new = k_new.bfloat16(), v_new.bfloat16()
    # node i of 4 sees the root and itself; node 3 also sees node 1 (a tree, not a chain)
    tree = torch.eye(new, dtype=torch.bool)
    tree[:, 0] = True
    tree[3, 1] = True
    for mask in (None, torch.cat([tree.reshape(-1), tree.reshape(-1)])):
        out = torch.empty(2 * new, heads, dim, dtype=torch.bfloat16)
        sk.extend_attention_cpu(q, k_new, v_new, out, k_buf, v_buf, 1.0, 1.0, req_to_token,
                                torch.tensor([0, 1]), torch.tensor([prefix + new] * 2),
                                torch.tensor([new, new]), torch.tensor([0, new]), new,
                                dim ** -0.5, 0.0, False, 0, None, None, mask, True)
        inner = torch.ones(new, new, dtype=torch.bool).tril() if mask is None else tree
        allowed = torch.cat([torch.ones(new, prefix, dtype=torch.bool), inner], dim=1)
        for b in range(2):
            slots = req_to_token[b, :prefix].long()
            k = torch.cat([k_buf[slots], k_new[b * new:(b + 1) * new]])
            v = torch.cat([v_buf[slots], v_new[b * new:(b + 1) * new]])
            want = _reference(q[b * new:(b + 1) * new], k, v, allowed[None])
            torch.testing.assert_close(out[b * new:(b + 1) * new].float(), want,
                                       rtol=2e-2, atol=2e-2)


#: draft trees as parent lists (node 0 the root; parents precede children)
TREES = [[-1, 0, 1, 2], [-1, 0, 0, 1, 1, 2, 3, 3], [-1, 0, 1, 0, 3, 0, 2, 6]]


def _mask(parents: list[int]) -> torch.Tensor:
    n = len(parents)
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j != -1:
            m[i, j] = True
            j = parents[j]
    return m


def _links(sk, trees: list[list[int]], seq_lens: list[int]):
    n = len(trees[0])
    bs = len(trees)
    mask = torch.cat([_mask(p).reshape(-1) for p in trees])
    positions = torch.zeros(bs * n, dtype=torch.long)
    ri, nt, ns = (torch.full((bs, n), -1, dtype=torch.long) for _ in range(3))
    sk.reconstruct_indices_from_tree_mask(mask, torch.tensor(seq_lens), positions, ri, nt, ns,
                                          bs, n)
    return positions, ri, nt, ns


def _depth(parents, i):
    return 0 if parents[i] == -1 else 1 + _depth(parents, parents[i])


def test_tree_links_from_a_mask_follow_the_parent_lists(sk):
    trees = [TREES[1], TREES[2]]
    positions, ri, nt, ns = _links(sk, trees, [10, 20])
    for b, parents in enumerate(trees):
        n = len(parents)
        children = {i: [j for j in range(n) if parents[j] == i] for i in range(n)}
        assert ri[b].tolist() == [b * n + i for i in range(n)]
        assert nt[b].tolist() == [min(children[i], default=-1) for i in range(n)]
        assert ns[b].tolist() == [
            next((j for j in range(i + 1, n) if parents[j] == parents[i]), -1)
            if parents[i] != -1 else -1 for i in range(n)]
        assert positions[b * n:(b + 1) * n].tolist() == [[10, 20][b] + _depth(parents, i)
                                                         for i in range(n)]


@pytest.mark.parametrize("parents", TREES)
def test_greedy_verify_accepts_the_path_the_target_agrees_with(sk, parents):
    n = len(parents)
    g = torch.Generator().manual_seed(n)
    for _ in range(20):
        candidates = torch.randint(0, 3, (1, n), generator=g)
        target = torch.randint(0, 3, (1, n), generator=g)
        _, ri, nt, ns = _links(sk, [parents], [5])
        depth = max(_depth(parents, i) for i in range(n)) + 1
        predicts = torch.zeros(n, dtype=torch.int32)
        accept_index = torch.full((1, depth), -1, dtype=torch.int32)
        accepted = torch.empty(1, dtype=torch.int32)
        sk.verify_tree_greedy_cpu(predicts, accept_index, accepted, candidates, ri, nt, ns, target)
        # reference: from the root, the first child (by index) whose draft token is the target's
        path, node = [0], 0
        while True:
            nxt = [j for j in range(n) if parents[j] == node and candidates[0, j] == target[0, node]]
            if not nxt:
                break
            node = nxt[0]
            path.append(node)
        assert int(accepted) == len(path) - 1
        assert accept_index[0, :len(path)].tolist() == path
        assert (accept_index[0, len(path):] == -1).all()
        for node in path:  # each committed token is the target's at its node
            assert int(predicts[node]) == int(target[0, node])


def test_build_tree_for_a_chain(sk):
    """topk 1, depth 3, 4 draft tokens: a chain; positions after the committed prefix."""
    n, bs = 4, 2
    parent_list = torch.tensor([[-1, 0, 1], [-1, 0, 1]])
    selected = torch.tensor([[0, 1, 2], [0, 1, 2]])
    seq = torch.tensor([7, 3])
    mask = torch.zeros(bs * n * n, dtype=torch.bool)
    positions = torch.zeros(bs * n, dtype=torch.long)
    ri, nt, ns = (torch.full((bs, n), -1, dtype=torch.long) for _ in range(3))
    sk.build_tree_kernel_efficient_cpu(parent_list, selected, seq, mask, positions, ri, nt, ns,
                                       1, 3, n, 1)
    assert nt.tolist() == [[1, 2, 3, -1]] * 2 and (ns == -1).all()
    assert ri.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert positions.tolist() == [7, 8, 9, 10, 3, 4, 5, 6]
    assert torch.equal(mask.view(bs, n, n)[0], torch.ones(n, n, dtype=torch.bool).tril())


def test_cache_slot_ops(sk):
    req_to_token = torch.zeros(3, 8, dtype=torch.int32)
    sk.assign_req_to_token_pool_cpu(torch.tensor([2, 0]), req_to_token, torch.tensor([1, 0]),
                                    torch.tensor([3, 2]), torch.tensor([11, 12, 13, 14]), 8)
    assert req_to_token[2, 1:3].tolist() == [11, 12] and req_to_token[0, :2].tolist() == [13, 14]
    out = torch.zeros(4, dtype=torch.long)
    sk.assign_extend_cache_locs_cpu(torch.tensor([0, 2]), req_to_token, torch.tensor([0, 1]),
                                    torch.tensor([2, 3]), out, 8)
    assert out.tolist() == [13, 14, 11, 12]
    bonus = torch.zeros(2, dtype=torch.int32)
    sk.fill_bonus_tokens_cpu(torch.tensor([5, 6, 7, 8, 9, 10], dtype=torch.int32),
                             torch.tensor([2, 3], dtype=torch.int32), bonus, 3)
    assert bonus.tolist() == [6, 10]
    accepted = torch.zeros(3, dtype=torch.long)
    sk.fill_accept_out_cache_loc_cpu(torch.tensor([[0, 2, -1], [4, -1, -1]], dtype=torch.int32),
                                     torch.tensor([100, 101, 102, 103, 104, 105]), accepted)
    assert accepted.tolist() == [100, 102, 104]
    draft = torch.zeros(4, dtype=torch.long)
    req_to_token[1] = torch.arange(20, 28, dtype=torch.int32)
    sk.assign_draft_cache_locs_contiguous_cpu(torch.tensor([1]), req_to_token, torch.tensor([3]),
                                              draft, 8, 2, 2)
    assert draft.tolist() == [23, 24, 25, 26]
    meta = sk.build_draft_decode_metadata_cpu(req_to_token, torch.tensor([1]), torch.tensor([3]),
                                              2, 2, 8)
    assert meta[0, :5].tolist() == [20, 21, 22, 23, 24]
    assert meta[1, :5].tolist() == [20, 21, 22, 25, 26]


def test_kv_rows_copied_in_every_layer_buffer(sk):
    buffers = [torch.arange(40, dtype=torch.float16).view(10, 2, 2).clone() for _ in range(3)]
    ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
    strides = torch.tensor([b[0].numel() * b.element_size() for b in buffers])
    before = [b.clone() for b in buffers]
    sk.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.tensor([1, 2]), torch.tensor([2, 8]))
    for b, old in zip(buffers, before):
        assert torch.equal(b[1], old[2]) and torch.equal(b[2], old[8])  # read before written
        assert torch.equal(b[0], old[0]) and torch.equal(b[3:], old[3:])


def test_target_only_sampling_verify_commits_the_targets_distribution(sk):
    """A chain of one draft token whose target distribution is (0.25, 0.75): over coins spread
    evenly, the first committed token follows the target, whatever the draft proposed."""
    probs = torch.tensor([[0.25, 0.75, 0.0], [0.5, 0.5, 0.0]])
    for draft in (0, 1):
        firsts = []
        for coin in torch.linspace(0.005, 0.995, 100).tolist():
            predicts = torch.zeros(2, dtype=torch.int32)
            accept_index = torch.full((1, 2), -1, dtype=torch.int32)
            accepted = torch.empty(1, dtype=torch.int32)
            sk.tree_speculative_sampling_target_only(
                predicts, accept_index, accepted, torch.tensor([[5, draft]]),
                torch.tensor([[0, 1]]), torch.tensor([[1, -1]]), torch.tensor([[-1, -1]]),
                torch.tensor([[coin, coin]]), torch.tensor([0.5]), probs[None], None)
            firsts.append(int(predicts[0]))
            assert int(accepted) == (1 if firsts[-1] == draft else 0)
        assert firsts.count(1) == 75
    k = sk.top_k_renorm_prob(torch.tensor([[0.1, 0.2, 0.3, 0.4]]), torch.tensor([2]))
    torch.testing.assert_close(k, torch.tensor([[0.0, 0.0, 3 / 7, 4 / 7]]))
    # top_k 1 is SGLang's greedy: exactly the argmax, the first among ties
    tied = torch.tensor([[0.1, 0.35, 0.2, 0.35], [0.4, 0.3, 0.2, 0.1]])
    one = sk.top_k_renorm_prob(tied, torch.tensor([1, 1]))
    assert torch.equal(one.argmax(-1), tied.argmax(-1)) and torch.equal(one.max(-1).values,
                                                                        torch.ones(2))
    p = sk.top_p_renorm_prob(torch.tensor([[0.1, 0.2, 0.3, 0.4]]), torch.tensor([0.6]))
    torch.testing.assert_close(p, torch.tensor([[0.0, 0.0, 3 / 7, 4 / 7]]))
    # bfloat16 probabilities (SGLang's softmax of bfloat16 logits): the nucleus is the one a
    # float64 sum gives, not the far wider one a bfloat16 running sum would keep
    logits = torch.randn(4, 49152, generator=torch.Generator().manual_seed(0)) * 3
    probs = torch.softmax(logits.bfloat16(), dim=-1)
    got = sk.top_p_renorm_prob(probs, torch.full((4,), 0.9)) > 0
    ordered, order = probs.double().sort(dim=-1, descending=True)
    want = torch.zeros_like(got).scatter(-1, order, (ordered.cumsum(-1) - ordered) < 0.9)
    assert (got != want).sum() <= 4, int((got != want).sum())  # at most a tie at the edge
    assert got.dtype == torch.bool and probs.dtype == torch.bfloat16
