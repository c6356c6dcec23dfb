"""Continuous batching: requests join and leave a running batch between verify steps."""

from __future__ import annotations

import pytest
import torch

from specscope.engine.decoder import Request, SpecConfig, SpeculativeDecoder
from specscope.engine.kv import BatchKV
from specscope.engine.models import tiny_pair


@pytest.fixture(scope="module")
def pair64():
    return tiny_pair(dtype=torch.float64, seed=5)


def _requests(n, max_new):
    g = torch.Generator().manual_seed(11)
    return [Request(f"r{i}", torch.randint(0, 256, (2 + 3 * i % 7,), generator=g).tolist(),
                    max_new_tokens=max_new[i % len(max_new)]) for i in range(n)]


@pytest.mark.parametrize("cfg", [SpecConfig(num_steps=3), SpecConfig(num_steps=0),
                                 SpecConfig(num_steps=3, topk=2, num_draft_tokens=6)],
                         ids=lambda c: c.config_id)
def test_requests_joining_mid_run_decode_exactly_as_alone(pair64, cfg):
    """Greedy output of each request is the same whether it decodes alone or joins a batch
    that is already running (caches of different lengths merged, rows leaving)."""
    reqs = _requests(7, [5, 30, 12, 60])
    alone = {r.request_id: SpeculativeDecoder(pair64.target, None, SpecConfig(num_steps=0))
             .generate([r])[0].token_ids for r in reqs}
    dec = SpeculativeDecoder(pair64.target, pair64.draft, cfg)
    batch, outs, pending, sizes = dec.new_batch(), {}, list(reqs), []
    streamed: dict[str, list[int]] = {}

    def on_chunk(rid, toks):
        streamed.setdefault(rid, []).extend(toks)

    step = 0
    while pending or batch.rows:
        if pending and step % 3 == 0:  # one request joins every third step
            outs.update((o.request_id, o) for o in dec.admit(batch, [pending.pop(0)], on_chunk))
        outs.update((o.request_id, o) for o in dec.step(batch, on_chunk))
        sizes.append(len(batch))
        step += 1
    assert max(sizes) > 1 and {o: outs[o].token_ids for o in outs} == alone
    assert {rid: toks for rid, toks in streamed.items()} == alone  # the stream is the output
    rec = outs["r3"].record
    assert rec.num_output_tokens == 60 and sum(rec.chunk_num_tokens) == 60
    assert rec.t_arrival_ns <= rec.t_first_token_ns <= rec.t_finish_ns


def test_compaction_drops_rejected_entries_and_keeps_attention_exact(pair64):
    kv = BatchKV(pair64.target, 2, torch.device("cpu"))
    from specscope.engine.kv import causal, feed_pending

    feed_pending(kv, [[1, 2, 3, 4], [5, 6]], [0, 0])
    for i in range(40):  # entries of rejected tokens pile up
        kv.forward(torch.tensor([[7], [8]]), torch.tensor([[4 + i], [2 + i]]),
                   torch.ones(2, 1, dtype=torch.bool), causal(1, kv.device))
        kv.invalidate_tail(torch.tensor([[i % 4 == 0], [i % 2 == 0]]))
    before = kv.forward(torch.tensor([[9], [9]]), torch.tensor([[50], [50]]),
                        torch.ones(2, 1, dtype=torch.bool), causal(1, kv.device))
    kv.invalidate_tail(torch.zeros(2, 1, dtype=torch.bool))
    valid = kv.valid.sum(dim=1).tolist()
    assert kv.compact(slack=1.0, floor=0)
    assert kv.length == max(valid) and kv.valid.sum(dim=1).tolist() == valid
    after = kv.forward(torch.tensor([[9], [9]]), torch.tensor([[50], [50]]),
                       torch.ones(2, 1, dtype=torch.bool), causal(1, kv.device))
    torch.testing.assert_close(after, before)


def test_a_long_prompt_prefills_apart_and_decodes_as_alone(tiny):
    """A wave with one long prompt prefills the short ones without padding them to its length;
    every request decodes exactly as it does alone."""
    from specscope.engine.decoder import Request, SpecConfig, SpeculativeDecoder
    from specscope.engine.kv import like_lengths

    reqs = [Request("short-a", [3, 4, 5] * 7, 12), Request("long", list(range(7, 200)) * 3, 12),
            Request("short-b", [9, 8] * 12, 12)]
    groups = like_lengths(reqs, lambda r: len(r.prompt_ids))
    assert [[r.request_id for r in g] for g in groups] == [["short-a", "short-b"], ["long"]]
    assert like_lengths(reqs[::2], lambda r: len(r.prompt_ids)) == [reqs[::2]]  # as given
    dec = SpeculativeDecoder(tiny.target, tiny.draft, SpecConfig(num_steps=3))
    together = dec.generate(reqs)
    alone = [dec.generate([r])[0] for r in reqs]
    assert [o.request_id for o in together] == [r.request_id for r in reqs]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
