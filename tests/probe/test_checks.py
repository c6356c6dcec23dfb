"""The probe's checks on positions built to a known truth: a structural greedy mismatch fails and
a near-tie does not; an all-argmax temperature request fails and honest samples never do; a
token outside its nucleus fails, while one that only looks outside when the returned tokens are
renormalised alone does not; and the shapes each engine returns read into positions."""

from __future__ import annotations

import math
import random

import pytest

from specscope.probe.checks import (FAIL, TRUNCATION_FIRST, Position, Semantics, greedy_check,
                                    mass_above, p_max_bound, temperature_check,
                                    truncation_check)
from specscope.probe.client import positions_of, roles


def _pos(top, token, t=0.8, top_p=1.0, top_k=0, i=0, request="r"):
    lp = dict(top)[token] if token in dict(top) else -20.0
    return Position(request=request, index=i, token=token, logprob=lp, top=tuple(top),
                    temperature=t, top_p=top_p, top_k=top_k)


def _dist(rng: random.Random, n: int = 8) -> list[tuple[str, float]]:
    """A random target distribution over ``n`` tokens with a small remainder (the tail)."""
    w = [rng.random() ** 2 for _ in range(n)]
    s = sum(w) / 0.97
    return sorted(((f"t{i}", math.log(x / s)) for i, x in enumerate(w)), key=lambda x: -x[1])


def test_greedy_structural_mismatch_fails_at_once_and_a_near_tie_does_not():
    top = [("a", -0.1), ("b", -0.2), ("c", -3.0)]
    ties = [_pos(top, "b", t=0.0, i=i) for i in range(3)]  # 0.1 nats: a bfloat16 tie
    assert greedy_check(ties, tie_margin=0.25).state == "inconclusive"
    firm = ties + [_pos(top, "c", t=0.0, i=3)]
    check = greedy_check(firm, tie_margin=0.25)
    assert check.state == "fail" and check.evidence["worst_position"] == 3
    assert abs(check.evidence["worst_margin"] - 2.9) < 1e-9


def test_all_argmax_under_temperature_fails_and_honest_sampling_never_does():
    rng = random.Random(0)
    sem = Semantics()
    greedy = [_pos(d, d[0][0], i=i) for i, d in enumerate(_dist(rng) for _ in range(150))]
    assert temperature_check(greedy, sem, label="temperature").state == "fail"
    states = []
    for seed in range(40):  # honest draws at T = 0.8 from each position's distribution
        rng = random.Random(seed)
        honest = []
        for i in range(1500):  # what ruling a 5-point excess out takes
            d = _dist(rng)
            w = [math.exp(lp / 0.8) for _, lp in d]
            tok = rng.choices([t for t, _ in d], weights=w)[0]
            honest.append(_pos(d, tok, i=i))
        states.append(temperature_check(honest, sem, label="temperature").state)
    assert "fail" not in states and states.count("pass") > 30


def test_outside_the_nucleus_fails_and_renormalising_over_returned_tokens_would_lie():
    sem = Semantics()
    top = [("a", math.log(0.6)), ("b", math.log(0.35)), ("c", math.log(0.04))]
    outside = _pos(top, "c", t=1.0, top_p=0.9)  # 0.95 of the mass ranks above it
    assert truncation_check([outside], sem, label="top-p").state == "fail"
    # the three returned tokens hold only half the mass: over them alone "a" + "b" would be 0.94
    # of it (> 0.9, a false alarm); with the tail bounded the mass above "c" is at most 0.47
    half = [("a", math.log(0.3)), ("b", math.log(0.17)), ("c", math.log(0.03))]
    inside = _pos(half, "c", t=1.0, top_p=0.9)
    assert mass_above(inside, sem) < 0.5
    assert truncation_check([inside], sem, label="top-p").state != "fail"
    # top-k: 20 tokens returned above the committed one
    many = [(f"t{i}", -1.0 - i * 0.1) for i in range(25)]
    assert truncation_check([_pos(many, "t21", top_k=20)], sem, label="top-k").state == "fail"
    assert truncation_check([_pos(many, "t5", top_k=20)], sem, label="top-k").state != "fail"


def test_a_token_under_its_min_p_floor_fails_at_the_temperature_the_engine_applies_it():
    # min-p 0.1 at T 0.8: "c" is exp(-2.0) = 0.135 of the top-1's probability raw, but
    # exp(-2.0 / 0.8) = 0.082 once tempered: under the floor where temperature comes first
    top = [("a", -0.5), ("b", -1.5), ("c", -2.5)]
    c = Position("r", 0, "c", -2.5, tuple(top), temperature=0.8, min_p=0.1)
    check = truncation_check([c], Semantics(), label="min-p")
    assert check.state == FAIL and "min-p 0.1" in check.evidence["message"]
    # llama.cpp applies min-p before temperature: the same token is above its floor there
    assert truncation_check([c], Semantics(order=TRUNCATION_FIRST), label="min-p").state != FAIL
    # log-probabilities tempered already (SGLang's) are compared as returned
    assert truncation_check([c], Semantics(tempered=True), label="min-p").state != FAIL
    b = Position("r", 1, "b", -1.5, tuple(top), temperature=0.8, min_p=0.1)
    assert truncation_check([b], Semantics(), label="min-p").state != FAIL  # 0.29 of the top-1


def test_a_token_at_the_nucleus_edge_within_bfloat16_rounding_is_not_called_outside():
    """Seen on SGLang's CPU build (bfloat16): a top-p 0.9 request's token with 0.903 of the
    tempered mass ranked above it by the returned log-probabilities; logits off by bfloat16's
    tie margin move that edge by more than 0.003, so it is no evidence. Far outside still FAILs,
    and the top-k count ignores tokens within the margin."""
    from specscope.exact import tie_margin

    sem, bf16 = Semantics(order=TRUNCATION_FIRST), tie_margin("bfloat16")
    edge = _pos([("a", math.log(0.80)), ("b", math.log(0.103)), ("c", math.log(0.05))], "c",
                t=1.0, top_p=0.9)
    assert truncation_check([edge], sem, label="top-p").state == "fail"  # exact arithmetic
    assert truncation_check([edge], sem, label="top-p", margin=bf16).state != "fail"
    assert mass_above(edge, sem, bf16) < 0.9 < mass_above(edge, sem)
    far = _pos([("a", math.log(0.97)), ("c", math.log(0.005))], "c", t=1.0, top_p=0.9)
    assert truncation_check([far], sem, label="top-p", margin=bf16).state == "fail"
    close = [(f"t{i}", -1.0 - i * 0.01) for i in range(25)]  # 21 within 0.25 nats of t21
    assert truncation_check([_pos(close, "t21", top_k=20)], sem, label="top-k").state == "fail"
    assert truncation_check([_pos(close, "t21", top_k=20)], sem, label="top-k",
                            margin=bf16).state != "fail"


def test_temperature_first_mass_is_a_lower_bound_of_the_true_tempered_mass():
    rng = random.Random(3)
    for _ in range(200):
        full = _dist(rng, 40)
        t = rng.choice([0.5, 0.8, 1.3])
        returned = full[:6]
        c = returned[-1][0]
        p = _pos(returned, c, t=t, top_p=0.9)
        w = [math.exp(lp / t) for _, lp in full]
        true = sum(w[:5]) / (sum(w) + (0.03 ** (1 / t)))  # the 3% tail, at worst one token
        bound = mass_above(p, Semantics(vocab=40))
        assert bound <= true + 1e-9
    # truncation first (llama.cpp): the raw probabilities ranked above, exactly
    p = _pos([("a", math.log(0.5)), ("b", math.log(0.3))], "b", t=0.5, top_p=0.9)
    assert abs(mass_above(p, Semantics(order=TRUNCATION_FIRST)) - 0.5) < 1e-12


def test_engine_shapes_read_into_positions_and_vllm_step_detail_gives_roles():
    chat = {"id": "c1", "choices": [{"logprobs": {"content": [
        {"token": "A", "logprob": -0.1, "top_logprobs": [{"token": "A", "logprob": -0.1},
                                                         {"token": "B", "logprob": -2.5}]},
        {"token": "B", "logprob": 0.0, "top_logprobs": []},  # llama.cpp under speculation
        {"token": "C", "logprob": -0.3, "top_logprobs": [{"token": "C", "logprob": -0.3}]},
        {"token": "D", "logprob": -0.2, "top_logprobs": [{"token": "D", "logprob": -0.2}]},
    ]}}], "metrics": {"speculative_decoding": {"per_step_accepted": [1, 0],
                                               "per_step_drafted": [2, 2],
                                               "num_draft_tokens": 4, "num_accepted_draft_tokens": 1}}}
    ps = positions_of(chat, "c1", {"temperature": 0.8})
    assert [p.known for p in ps] == [True, False, True, True] and ps[1].logprob is None
    ps, drafted, accepted = roles(ps, chat)
    assert [p.role for p in ps] == ["prefill", "accepted", "correction", "correction"]
    assert (drafted, accepted) == (4, 1)
    completions = {"choices": [{"logprobs": {"tokens": ["x", "y"], "token_logprobs": [-0.5, -1.0],
                                             "top_logprobs": [{"x": -0.5, "z": -1.5},
                                                              {"z": -0.2, "y": -1.0}]}}]}
    ps = positions_of(completions, "k", {"temperature": 0.0})
    assert [p.is_top1 for p in ps] == [True, False] and abs(ps[1].margin - 0.8) < 1e-9


def test_p_max_bound_holds_in_both_sampler_orders():
    """Against the exact p_max of the full distribution, truncated and tempered in each order."""
    from specscope.probe.checks import TEMPERATURE_FIRST, p_max_bound

    rng = random.Random(7)
    for _ in range(300):
        full = _dist(rng, 60)
        t, top_p = rng.choice([0.5, 0.8, 1.2]), rng.choice([0.7, 0.9, 1.0])
        p = _pos(full[:10], full[0][0], t=t, top_p=top_p)
        raw = [math.exp(lp) for _, lp in full] + [0.03 / 30] * 30  # the tail as 30 tokens
        for order in (TEMPERATURE_FIRST, TRUNCATION_FIRST):
            probs = sorted(raw, reverse=True)
            if order == TEMPERATURE_FIRST:
                probs = [x ** (1 / t) for x in probs]
                probs = [x / sum(probs) for x in probs]
            kept, above = [], 0.0
            for x in probs:
                if above >= top_p:
                    break
                kept.append(x)
                above += x
            if order == TRUNCATION_FIRST:
                kept = [x ** (1 / t) for x in kept]
            exact = kept[0] / sum(kept)
            assert p_max_bound(p, Semantics(order=order)) >= exact - 1e-9


def test_sglang_native_meta_info_reads_into_positions_and_its_counts():
    """SGLang's /generate with return_logprob (shape from its sources: [logprob, id, text] per
    token, per position a list of them): tokens compared by id; its spec counts as the
    importer reads them."""
    resp = {"text": "ab", "meta_info": {
        "id": "s1", "completion_tokens": 2, "spec_verify_ct": 1, "spec_num_correct_drafts": 1,
        "spec_num_proposed_drafts": 3,
        "output_token_logprobs": [[-0.2, 11, "a"], [-1.9, 12, "b"]],
        "output_top_logprobs": [[[-0.2, 11, "a"], [-2.0, 13, "c"]], [[-0.3, 13, "c"], [-1.9, 12, "b"]]]}}
    ps = positions_of(resp, "s1", {"temperature": 0.0})
    assert [p.is_top1 for p in ps] == [True, False] and abs(ps[1].margin - 1.6) < 1e-9
    _, drafted, accepted = roles(ps, resp)
    assert (drafted, accepted) == (3, 1)


def test_sglangs_tempered_log_probabilities_are_never_tempered_again():
    """SGLang returns log_softmax(logits / T): read as raw and tempered again, the nucleus
    shrinks and an honest token inside it reads as outside (the false FAIL a no-speculation
    SGLang server gave under top-p); read as tempered, it is inside. The argmax bound follows
    the same reading."""
    from specscope.probe.client import semantics

    # at T 0.5 as returned: 0.6, 0.25, 0.15; top-p 0.9 keeps all three (0.85 ranks above
    # "c"); tempered again they read 0.81, 0.14, 0.05 and "c" looks outside
    top = [("a", math.log(0.6)), ("b", math.log(0.25)), ("c", math.log(0.15))]
    p = _pos(top, "c", t=0.5, top_p=0.9)
    tempered, raw = semantics("sglang"), semantics("sglang", "raw")
    assert tempered.tempered and tempered.mode == "tempered" and semantics("vllm").mode == "raw"
    assert truncation_check([p] * 40, tempered, label="top-p").state != FAIL
    assert truncation_check([p] * 40, raw, label="top-p").state == FAIL  # the misreading
    assert p_max_bound(_pos(top, "a", t=0.5), tempered) == pytest.approx(0.6)


def test_processed_log_probabilities_are_the_nucleus_renormalised_so_only_minus_inf_is_outside():
    """vLLM's processed log-probabilities are the truncated distribution renormalised: the last
    token inside a top-p 0.9 nucleus ({a 0.8, b 0.1} of the raw mass, so a is 0.889 of it
    processed, with ``c`` cut) has more than 0.9 ranked above it there. A clean vLLM failed this
    check so before; a token with a -inf processed log-probability still FAILs."""
    sem = Semantics(processed=True)
    nucleus = [("a", math.log(0.8 / 0.9)), ("b", math.log(0.1 / 0.9)), ("c", -math.inf)]
    last_inside = _pos(nucleus, "b", t=1.0, top_p=0.9)
    assert truncation_check([last_inside] * 400, sem, label="top-p").state == "pass"
    cut = _pos(nucleus, "c", t=1.0, top_p=0.9)
    check = truncation_check([last_inside, cut], sem, label="top-p")
    assert check.state == FAIL and "-inf" in check.evidence["message"]
    # the same figures read as raw log-probabilities are a token outside the nucleus
    assert truncation_check([_pos(nucleus[:2] + [("c", math.log(0.01))], "c", t=1.0, top_p=0.5)],
                            Semantics(), label="top-p").state == FAIL
    # ranks survive the renormalisation: a token with 20 finite tokens above it breaks top-k 20
    many = [(f"t{i}", -1.0 - i * 0.1) for i in range(25)]
    assert truncation_check([_pos(many, "t21", top_k=20)], sem, label="top-k").state == FAIL
    # vLLM writes that -inf as -9999.0 in its responses: read back as -inf, never as a figure
    response = {"choices": [{"logprobs": {"content": [
        {"token": "c", "logprob": -9999.0,
         "top_logprobs": [{"token": "a", "logprob": math.log(0.8 / 0.9)},
                          {"token": "c", "logprob": -9999.0}]}]}}]}
    (read,) = positions_of(response, "r", {"temperature": 1.0, "top_p": 0.9})
    assert read.logprob == -math.inf and read.top[-1] == ("c", -math.inf)
    assert truncation_check([read], sem, label="top-p").state == FAIL
