"""The reference engine's prefix cache: the longest shared prefix in whole blocks (or the whole
prompt) is reused, the least recently used prompt leaves first, and answers with the cache are
the answers without it (greedy tokens, figures to float rounding) while the prefill computes
fewer tokens; the seeded full-hit fault changes every repeat."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specscope.engine.decoder import Request, SpecConfig, SpeculativeDecoder  # noqa: E402
from specscope.engine.models import tiny_pair  # noqa: E402
from specscope.engine.prefix import BLOCK, PrefixCache  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def _answers(pair, prompts, cache, fault=""):
    dec = SpeculativeDecoder(pair.target, pair.draft, SpecConfig(num_steps=3, fault=fault),
                             prefix_cache=cache)
    return [dec.generate([Request(f"r{i}", p, 16, 0.0, 1.0, 0, top_logprobs=1)])[0]
            for i, p in enumerate(prompts)], dec.prefix_cache


def test_the_longest_shared_prefix_is_reused_in_whole_blocks_or_whole(pair):
    shared = list(range(3, 3 + 2 * BLOCK + 5))  # two blocks and five tokens
    prompts = [shared + [200, 201], shared + [210], shared + [200, 201]]
    outs, cache = _answers(pair, prompts, PrefixCache())
    # the second: two whole blocks of the first; the third: the first, whole
    assert (cache.hits, cache.tokens_reused) == (2, 2 * BLOCK + len(prompts[0]))
    plain, _ = _answers(pair, prompts, None)
    for got, want in zip(outs, plain):
        assert got.token_ids == want.token_ids
        assert [g[0] for g in got.logprobs] == pytest.approx([w[0] for w in want.logprobs],
                                                             abs=1e-4)


def test_the_least_recently_used_prompt_leaves_first(pair):
    cache = PrefixCache(capacity=2)
    five, six, seven = ([i] * 20 for i in (5, 6, 7))
    _answers(pair, [five, six, five, seven], cache)  # five used again: six leaves, not five
    assert list(cache.entries) == [tuple(five), tuple(seven)] and cache.hits == 1


def test_a_wave_of_warm_and_cold_prompts_of_other_lengths_answers_as_without_the_cache(pair):
    shared = list(range(3, 3 + 3 * BLOCK))
    first = [shared + [200 + i] for i in range(2)]
    wave = [first[0], shared[:BLOCK] + [9] * 40, [7] * 5, shared + [250, 251]]

    def answers(cache):
        dec = SpeculativeDecoder(pair.target, pair.draft, SpecConfig(num_steps=3),
                                 prefix_cache=cache)
        for i, p in enumerate(first):
            dec.generate([Request(f"f{i}", p, 4, 0.0, 1.0, 0)])
        return dec.generate([Request(f"w{i}", p, 16, 0.0, 1.0, 0, top_logprobs=1)
                             for i, p in enumerate(wave)]), dec

    cached, dec = answers(PrefixCache())
    plain, _ = answers(None)
    assert dec.prefix_cache.hits >= 3  # the whole prompt, one block, three blocks
    for got, want in zip(cached, plain):
        assert got.token_ids == want.token_ids
        assert [g[0] for g in got.logprobs] == pytest.approx([w[0] for w in want.logprobs],
                                                             abs=1e-4)


def test_the_full_hit_fault_changes_every_repeat_and_brings_its_own_cache(pair):
    prompt = list(range(3, 60))
    outs, cache = _answers(pair, [prompt] * 3, None, fault="prefix_cache_full_hit")
    assert cache is not None and cache.hits == 2
    assert outs[1].token_ids == outs[2].token_ids != outs[0].token_ids
