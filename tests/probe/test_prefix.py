"""The probe's prefix class: greedy answers with a long shared prefix, alone, repeated and at
concurrency, against the alone answer (structural partings and new corruption signatures FAIL,
near-tie flips are counted); the reference engine honest and with a batch-row fault."""

from __future__ import annotations

import pytest

from specscope.collector.verdict import FAIL, INCONCLUSIVE, PASS
from specscope.probe import format_probe
from specscope.probe.checks import Position
from specscope.probe.client import Answer
from specscope.probe.prefix import (ALONE, CONCURRENT, REPEATED, document, parting, prefix_check,
                                    parses_as_json, prefix_tokens, prompts, signatures)

from .reference import probe_reference

TIE = 0.25


def _answer(tokens, phase, margins=None, text=None, index=0):
    margins = margins or [2.0] * len(tokens)
    pos = [Position("r", i, t, -0.1, ((t, -0.1), ("other", -0.1 - m)))
           for i, (t, m) in enumerate(zip(tokens, margins))]
    a = Answer("prefix", "p", {"temperature": 0.0}, response={}, positions=pos,
               text=text if text is not None else "".join(tokens), index=index)
    a.phase = phase
    return a


def test_a_parting_is_placed_with_the_alone_answers_margin_there():
    alone = _answer(list("abcdef"), ALONE, margins=[2, 2, 0.1, 2, 2, 2])
    assert parting(alone, _answer(list("abcdef"), REPEATED)) is None
    p = parting(alone, _answer(list("abXdef"), CONCURRENT))
    assert (p.index, p.margin) == (2, pytest.approx(0.1))
    assert parting(alone, _answer(list("abcd"), CONCURRENT)).margin is None  # ended early


def test_corruption_signatures():
    assert signatures("fine text", list("fine text")) == []
    assert "one token repeated 20 times" in signatures("!" * 20, ["!"] * 20)
    assert any("U+FFFD" in s for s in signatures("a\ufffdb", []))
    assert any("<|im_end|>" in s for s in signatures("done<|im_end|>more", []))
    # JSON where the prompt asks for it and the answer ended by itself: it must parse
    fenced = '```json\n{"title": "Plan", "items": ["a", "b", "c"]}\n```'
    assert parses_as_json(fenced) and signatures(fenced, [], json_ended=True) == []
    broken = '{"title": "Plan", "items": ["a", "b"!!!!'
    assert "invalid JSON where the prompt asks for JSON" in signatures(broken, [], True)
    assert signatures(broken, [], json_ended=False) == []  # cut by max_tokens: no evidence


def test_structural_partings_and_new_signatures_fail_near_ties_do_not():
    alone = _answer(list("abcdef"), ALONE, margins=[2, 2, 0.1, 2, 2, 2])
    same = [_answer(list("abcdef"), REPEATED, index=i) for i in range(1, 14)]
    assert prefix_check([alone] + same, TIE).state == PASS
    flip = [_answer(list("abXdef"), CONCURRENT, index=i) for i in range(1, 14)]
    check = prefix_check([alone] + flip, TIE)  # at a near tie: counted, never a fault
    assert check.state == PASS and check.evidence["tie_flips"] == 13
    bad = prefix_check([alone] + same[:2] + [_answer(list("abcdeZ"), CONCURRENT, index=20)], TIE)
    assert bad.state == FAIL and "request 20 (concurrent)" in bad.evidence["message"]
    assert "structural" in bad.evidence["message"]
    junk = _answer(list("abcdef") + ["!"] * 16, CONCURRENT, index=21)
    assert prefix_check([alone, junk], TIE).state == FAIL
    unknown = [_answer([], CONCURRENT, text="zzz", index=i) for i in range(30)]
    assert prefix_check([alone] + unknown, TIE).state == INCONCLUSIVE  # no margins: unknown


def test_the_prefix_is_sized_from_the_context_and_shared():
    assert prefix_tokens(None, 64) == 512 and prefix_tokens(8192, 64) == 1024
    assert prefix_tokens(1024, 64) == 448
    doc = document(1000, ["alpha", "beta"])
    asks = prompts(doc)
    assert len(doc) == 1000 and all(a.startswith(doc) for a in asks)
    assert len(set(asks)) == len(asks) and len(asks[0]) == max(map(len, asks))


@pytest.mark.parametrize("fault,cache,state", [
    ("", False, PASS), ("", True, PASS), ("batch_row_mixup", False, FAIL),
    ("prefix_cache_full_hit", False, FAIL)])
def test_the_reference_engine_passes_clean_and_fails_a_batch_row_or_prefix_cache_fault(
        fault, cache, state):
    result = probe_reference(("prefix",), fault, prefix_cache=cache)
    (check,) = result.checks
    assert check.state == state, format_probe(result)
    # the tiny model's context (1,024 tokens, a token a character) refused the first two sizes:
    # the prefix was halved twice, and no request the class kept was refused
    said = result.classes["prefix"]
    assert said["state"] == "checked" and said["refused"] == 0, said
    assert {a.phase for a in result.answers} == {ALONE, REPEATED, CONCURRENT}
    assert all(len(a.prompt) > 480 for a in result.answers)  # 2,048 and 1,024 characters refused
    if fault == "prefix_cache_full_hit":  # the first of each prompt right, every repeat wrong
        assert check.evidence["faults"] == 15 and "(repeated)" in check.evidence["message"]
