"""The reference decoder is correct: greedy is exact, sampling is lossless, faults break it."""

from __future__ import annotations

import pytest
import torch

from specscope import schema
from specscope.engine.decoder import Request, SpecConfig, SpeculativeDecoder
from specscope.engine.models import tiny_pair
from specscope.hooks import Recorder, forbid_sync


@pytest.fixture(scope="module")
def pair64():
    return tiny_pair(dtype=torch.float64, seed=3)


def _requests(n, vocab, max_new=40, **kw):
    g = torch.Generator().manual_seed(7)
    return [Request(f"r{i}", torch.randint(0, vocab, (3 + i % 5,), generator=g).tolist(),
                    max_new_tokens=max_new, **kw) for i in range(n)]


@pytest.mark.parametrize("cfg", [SpecConfig(num_steps=1), SpecConfig(num_steps=4),
                                 SpecConfig(num_steps=3, topk=2, num_draft_tokens=6),
                                 SpecConfig(num_steps=4, topk=3, num_draft_tokens=10),
                                 SpecConfig(algorithm="ngram", num_steps=4)],
                         ids=lambda c: c.config_id)
def test_greedy_speculative_equals_greedy_target_only(pair64, cfg):
    reqs = _requests(6, 256)
    ref = SpeculativeDecoder(pair64.target, None, SpecConfig(num_steps=0)).generate(reqs)
    out = SpeculativeDecoder(pair64.target, pair64.draft, cfg).generate(reqs)
    assert [o.token_ids for o in out] == [r.token_ids for r in ref]
    steps = sum(len(o.chunks) for o in out)
    assert steps < sum(len(o.token_ids) for o in out)  # drafts were accepted along the way


def test_hooks_inside_record_every_step_without_sync(tiny, run_record):
    rec = Recorder(run_record)
    reqs = _requests(4, 256, max_new=20, temperature=0.7)
    dec = SpeculativeDecoder(tiny.target, tiny.draft, SpecConfig(num_steps=3), recorder=rec)
    calls = []
    original = rec.record_verify

    def guarded(**kw):
        calls.append(1)
        with forbid_sync():
            original(**kw)

    rec.record_verify = guarded
    outs = dec.generate(reqs)
    records = rec.drain()
    steps = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    assert rec.num_hook_errors == 0 and len(steps) == len(calls) == dec.step_index
    # every committed token is accounted for: prefill token + (accepted + 1) per verify entry
    committed = sum(1 + sum(e.num_accepted + 1 for s in steps for e in s.entries
                            if e.request_id == o.request_id) for o in outs)
    assert committed >= sum(len(o.token_ids) for o in outs)  # >=: the last step may overshoot
    reqs_out = [r for r in records if isinstance(r, schema.RequestRecord)]
    assert sorted(r.request_id for r in reqs_out) == [r.request_id for r in reqs]
    # each request's own figures are the sums of its verify entries, step by step
    for r in reqs_out:
        mine = [e for s in steps for e in s.entries if e.request_id == r.request_id]
        assert r.num_verify_steps == len(mine) == sum(r.accept_len_hist)
        assert r.num_draft_tokens == sum(e.num_drafted for e in mine)
        assert r.num_accepted == sum(e.num_accepted for e in mine)
        assert r.acceptance_length == pytest.approx(1 + r.num_accepted / len(mine))
        assert sum(i * n for i, n in enumerate(r.accept_len_hist)) == \
            r.num_accepted + r.num_verify_steps
    assert all(s.draft_depth == 3 for s in steps)
    phases = {r.phase for r in records if isinstance(r, schema.PhaseRecord)}
    assert {"prefill", "draft_extend", "draft", "verify_forward", "verify_sample"} <= phases


# ---------------------------------------------------------------- distribution tests
# Many identical requests in one batch are independent samples. The token committed by the
# first verify step at the second output position is compared with the target's exact
# marginal there (enumerated over the first token), by a chi-square test at alpha = 0.001:
# a correct sampler fails it once in a thousand seeds.
VOCAB, N = 8, 6000
CHI2_CRIT_DF7_ALPHA001 = 24.32  # chi-square(7) upper 0.1% point


@pytest.fixture(scope="module")
def small_pair():
    return tiny_pair(vocab_size=VOCAB, noise=0.6, head_std=0.25, seed=5)


def _exact_marginal(model, prompt, temperature, top_p=1.0):
    from specscope.engine.sampling import process_probs

    def dist(ctx):
        logits = model(input_ids=torch.tensor([ctx])).logits[0, -1]
        return process_probs(logits[None], torch.tensor([temperature]), torch.tensor([top_p]),
                             torch.tensor([0]))[0].double()

    with torch.no_grad():
        p1 = dist(prompt)
        return sum(p1[t] * dist(prompt + [t]) for t in range(VOCAB))


def _second_tokens(pair, cfg, temperature, top_p=1.0, seed=0):
    prompt = [1, 2, 3]
    reqs = [Request(f"r{i}", prompt, max_new_tokens=2, temperature=temperature, top_p=top_p)
            for i in range(N)]
    outs = SpeculativeDecoder(pair.target, pair.draft, cfg, seed=seed).generate(reqs)
    counts = torch.zeros(VOCAB, dtype=torch.float64)
    for o in outs:
        counts[o.token_ids[1]] += 1
    return counts, _exact_marginal(pair.target, prompt, temperature, top_p)


def _chi2(counts, probs):
    expected = probs * counts.sum()
    keep = expected > 0
    assert counts[~keep].sum() == 0, "tokens outside the support were committed"
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())


@pytest.mark.parametrize("mode", ["speculative-sampling", "target-temperature"])
def test_sampling_verify_reproduces_the_target_distribution(small_pair, mode):
    cfg = SpecConfig(num_steps=3, verify_mode=mode)
    assert _chi2(*_second_tokens(small_pair, cfg, 0.9)) < CHI2_CRIT_DF7_ALPHA001


def test_ngram_speculative_sampling_reproduces_the_target_distribution(small_pair):
    """Prompt lookup drafts a one-hot: accepted with probability p(x), else a token of p with x
    taken out. Every (3, x) pair is in the prompt, so the second token is verified against a
    looked-up draft whatever the first was (except 3, whose row drafts nothing)."""
    prompt = [3, 0, 3, 1, 3, 2, 3, 4, 3, 5, 3, 6, 3, 7, 3]
    reqs = [Request(f"r{i}", prompt, max_new_tokens=2, temperature=0.9) for i in range(N)]
    dec = SpeculativeDecoder(small_pair.target, None, SpecConfig(algorithm="ngram", num_steps=4))
    outs = dec.generate(reqs)
    counts = torch.zeros(VOCAB, dtype=torch.float64)
    for o in outs:
        counts[o.token_ids[1]] += 1
    drafted = [o.record.num_draft_tokens for o in outs]
    assert sum(d > 0 for d in drafted) > N * 0.7  # most second tokens were verified drafts
    assert _chi2(counts, _exact_marginal(small_pair.target, prompt, 0.9)) < CHI2_CRIT_DF7_ALPHA001


def test_ngram_drafts_vary_per_request_and_count_only_where_drafted(small_pair, run_record):
    from specscope.engine import ngram

    assert ngram.propose([1, 2, 3, 9, 1, 2], 4) == [3, 9, 1, 2]  # the most recent match
    assert ngram.propose([1, 2, 7, 1, 2, 8, 1, 2], 1) == [8]
    assert ngram.propose([5, 6, 7, 8], 4) == []  # nothing repeats: no draft
    rec = Recorder(run_record)
    # every (3, x) pair is in the looping prompt: it drafts from its first step; the fresh one
    # (no pair repeats) drafts nothing until its own output repeats
    looping = Request("loop", [3, 0, 3, 1, 3, 2, 3, 4, 3, 5, 3, 6, 3, 7, 3], max_new_tokens=6,
                      temperature=0.9)
    fresh = Request("fresh", [0, 1, 2, 4, 5], max_new_tokens=6, temperature=0.9)
    dec = SpeculativeDecoder(small_pair.target, None, SpecConfig(algorithm="ngram", num_steps=3),
                             recorder=rec)
    dec.generate([looping, fresh])
    records = rec.drain()
    steps = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    entries = [e for s in steps for e in s.entries]
    assert {e.num_drafted for e in entries} - {0, 1, 2, 3} == set()
    assert any(e.num_drafted == 0 for e in entries) and any(e.num_drafted > 0 for e in entries)
    assert {r.phase for r in records if isinstance(r, schema.PhaseRecord)} & {"draft_extend"} == set()
    # a step where nothing matched ran at depth 3 with nothing drafted: speculation was not off
    assert {s.draft_depth for s in steps} == {3}
    alone = Recorder(run_record)
    SpeculativeDecoder(small_pair.target, None, SpecConfig(algorithm="ngram", num_steps=3),
                       recorder=alone).generate([Request("only", [0, 1, 2, 4, 5], max_new_tokens=2)])
    first = next(r for r in alone.drain() if isinstance(r, schema.VerifyStepRecord))
    assert first.draft_depth == 3 and first.entries[0].num_drafted == 0  # no match at all
    # a request's own figures count the steps it drafted in, as engines count drafts
    for r in (x for x in records if isinstance(x, schema.RequestRecord)):
        mine = [e for e in entries if e.request_id == r.request_id and e.num_drafted > 0]
        assert r.num_verify_steps == len(mine) == sum(r.accept_len_hist)
        assert r.num_draft_tokens == sum(e.num_drafted for e in mine)
        assert r.num_accepted == sum(e.num_accepted for e in mine)
    loop = next(x for x in records if isinstance(x, schema.RequestRecord) and x.request_id == "loop")
    assert loop.num_draft_tokens > 0


def test_tree_target_only_sampling_reproduces_the_target_distribution(small_pair):
    cfg = SpecConfig(num_steps=2, topk=2, num_draft_tokens=5)
    assert _chi2(*_second_tokens(small_pair, cfg, 0.9)) < CHI2_CRIT_DF7_ALPHA001


def test_top_p_is_honoured(small_pair):
    cfg = SpecConfig(num_steps=3)
    assert _chi2(*_second_tokens(small_pair, cfg, 1.0, top_p=0.7)) < CHI2_CRIT_DF7_ALPHA001


@pytest.mark.parametrize("fault,top_p", [("silent_greedy", 1.0), ("draft_prob_shortcut", 1.0),
                                         ("topk_fallback", 0.7)])
def test_each_fault_breaks_the_distribution_check(small_pair, fault, top_p):
    cfg = SpecConfig(num_steps=3, fault=fault)
    if fault == "topk_fallback":
        with pytest.warns(RuntimeWarning, match="falling back to argmax"):
            stat = _chi2_or_inf(small_pair, cfg, top_p)
    else:
        stat = _chi2_or_inf(small_pair, cfg, top_p)
    assert stat > CHI2_CRIT_DF7_ALPHA001


def _chi2_or_inf(pair, cfg, top_p):
    try:
        return _chi2(*_second_tokens(pair, cfg, 1.0, top_p=top_p))
    except AssertionError:  # committed tokens outside the target's support
        return float("inf")


def test_faults_leave_greedy_alone(pair64):
    reqs = _requests(4, 256)
    ref = SpeculativeDecoder(pair64.target, None, SpecConfig(num_steps=0)).generate(reqs)
    for fault in ("silent_greedy", "draft_prob_shortcut", "topk_fallback"):
        out = SpeculativeDecoder(pair64.target, pair64.draft,
                                 SpecConfig(num_steps=3, fault=fault)).generate(reqs)
        assert [o.token_ids for o in out] == [r.token_ids for r in ref], fault


def test_config_validation():
    with pytest.raises(ValueError, match="speculative sampling needs a chain"):
        SpecConfig(num_steps=3, topk=2, verify_mode="speculative-sampling")
    with pytest.raises(ValueError, match="unknown fault"):
        SpecConfig(fault="nope")
    # a fault the tree path would not seed is refused, never run honest under its name
    with pytest.raises(ValueError, match="draft_prob_shortcut fault lives on the chain"):
        SpecConfig(num_steps=3, topk=2, num_draft_tokens=6, fault="draft_prob_shortcut")
    assert SpecConfig(num_steps=3).num_draft_tokens == 4  # SGLang counts the root
    assert SpecConfig(num_steps=3).config_id == "draft-model-s3-k1-d4"


def test_the_cli_offers_every_seeded_fault():
    from specscope.cli.spec import FAULTS as OFFERED
    from specscope.engine.config import FAULTS

    assert OFFERED == FAULTS
