"""The acceptance rule and the residual checked from outside under prompt lookup: an honest
verify of deterministic drafts (accept d with p(d), else draw from p without d) never FAILs
either check, read exactly (processed figures) or within bounds (raw figures, a temperature
still to apply, most of the vocabulary unreturned); a residual taken as its argmax FAILs the
residual check on its sharp side while the acceptance check holds; an acceptance rule that
accepts too often FAILs on its high side; positions without named drafts give no check."""

from __future__ import annotations

import math
import random

import pytest

from specscope.collector.verdict import FAIL, PASS
from specscope.probe.acceptance import acceptance_check, draft_prob, residual_check
from specscope.probe.checks import Position, Semantics


def _draw(rng: random.Random, probs: list[float], skip: int | None = None) -> int:
    weights = [0.0 if i == skip else p for i, p in enumerate(probs)]
    return rng.choices(range(len(probs)), weights=weights)[0]


def _verify(rng: random.Random, n: int, fault: str = "", *, vocab: int = 8, temperature=0.8,
            returned: int | None = None) -> tuple[list[Position], Semantics]:
    """``n`` drafted places, each a fresh distribution, a draft drawn apart from it (a drafter
    that is often right), and verify's token: honest, or with ``fault``. ``returned``: only
    the best few raw log-probabilities come back (the temperature still to apply); else all,
    as the distribution sampled from (processed)."""
    out = []
    for i in range(n):
        logits = [rng.gauss(0, 2.0) for _ in range(vocab)]
        raw = [math.exp(x) for x in logits]
        raw = [x / sum(raw) for x in raw]
        tempered = [x ** (1 / temperature) for x in raw]
        p = [x / sum(tempered) for x in tempered]
        d = _draw(rng, p)
        accept = rng.random() < (1.0 if fault == "accept_top1" and p[d] == max(p) else p[d])
        if accept:
            x, role = d, "accepted"
        elif fault == "residual_argmax":
            x, role = max((j for j in range(vocab) if j != d), key=lambda j: p[j]), "correction"
        else:
            x, role = _draw(rng, p, skip=d), "correction"
        shown = raw if returned else p
        top = sorted(((f"t{j}", math.log(shown[j])) for j in range(vocab)), key=lambda t: -t[1])
        if returned:
            top = top[:returned]
            if all(tok != f"t{x}" for tok, _ in top):  # vLLM lists the committed token too
                top = top + [(f"t{x}", math.log(shown[x]))]
        out.append(Position(request=f"r{i // 16}", index=i % 16, token=f"t{x}",
                            logprob=math.log(shown[x]), top=tuple(top), temperature=temperature,
                            role=role, draft=f"t{d}"))
    sem = Semantics(engine="vllm", processed=not returned, vocab=vocab)
    return out, sem


@pytest.mark.parametrize("returned", [None, 6], ids=["processed", "raw-top6-of-64"])
def test_honest_verify_of_deterministic_drafts_never_fails(returned):
    vocab = 64 if returned else 8
    states = []
    for seed in range(6):
        pos, sem = _verify(random.Random(seed), 1600, vocab=vocab, returned=returned)
        rule, res = (acceptance_check(pos, sem, label="sampled"),
                     residual_check(pos, sem, label="sampled"))
        assert rule is not None and res is not None
        assert FAIL not in (rule.state, res.state), (seed, rule.evidence, res.evidence)
        states += [rule.state, res.state]
    if returned is None:  # read exactly, 1600 places settle both
        assert states.count(PASS) == len(states)


@pytest.mark.parametrize("returned", [None, 6], ids=["processed", "raw-top6-of-64"])
def test_a_residual_taken_as_its_argmax_fails_the_residual_and_not_the_rule(returned):
    vocab = 64 if returned else 8
    pos, sem = _verify(random.Random(7), 400, "residual_argmax", vocab=vocab, returned=returned)
    res = residual_check(pos, sem, label="sampled")
    assert res is not None and res.state == FAIL, res.evidence
    assert "sharper" in res.evidence["message"]
    rule = acceptance_check(pos, sem, label="sampled")
    assert rule is not None and rule.state != FAIL


def test_an_acceptance_rule_that_accepts_too_often_fails_on_its_high_side():
    pos, sem = _verify(random.Random(3), 600, "accept_top1")
    rule = acceptance_check(pos, sem, label="sampled")
    assert rule is not None and rule.state == FAIL and "more drafts" in rule.evidence["message"]


def test_the_draft_probability_is_exact_where_returned_and_bounded_where_not():
    top = (("a", math.log(0.5)), ("b", math.log(0.3)), ("c", math.log(0.1)))
    at = Position(request="r", index=0, token="a", logprob=top[0][1], top=top, temperature=0.7,
                  role="correction", draft="b")
    assert draft_prob(at, Semantics(processed=True)) == pytest.approx((0.3, 0.3))
    lo, hi = draft_prob(Position(**{**at.__dict__, "draft": "z"}), Semantics(processed=True))
    assert lo == 0.0 and 0 < hi <= 0.1  # unreturned: at most the tail's cap and its mass
    lo, hi = draft_prob(at, Semantics(vocab=100))  # raw, the temperature still to apply
    assert 0 < lo < hi < 1
    assert draft_prob(Position(**{**at.__dict__, "top_p": 0.9}), Semantics()) is None
    assert draft_prob(Position(**{**at.__dict__, "draft": ""}), Semantics()) is None


def test_without_named_drafts_there_is_no_check():
    pos, sem = _verify(random.Random(1), 50)
    unnamed = [Position(**{**p.__dict__, "draft": ""}) for p in pos]
    assert acceptance_check(unnamed, sem, label="sampled") is None
    assert residual_check(unnamed, sem, label="sampled") is None


def test_the_probe_reads_both_pooled_over_the_sampled_classes_only_where_drafts_are_named():
    from specscope.probe.client import Answer
    from specscope.probe.run import run_checks

    pos, sem = _verify(random.Random(5), 400, "residual_argmax")
    named = [Answer("temperature", "p", {"temperature": 0.8}, response={}, positions=pos,
                    roles_by="replay")]
    checks = {c.check: c for c in run_checks(named, sem)}
    assert checks["residual honoured (sampled)"].state == FAIL
    assert checks["residual honoured (sampled)"].evidence["probe_classes"] == ["temperature"]
    assert "acceptance rule honoured (sampled)" in checks
    unnamed = [Answer("temperature", "p", {"temperature": 0.8}, response={}, roles_by="replay",
                      positions=[Position(**{**p.__dict__, "draft": ""}) for p in pos])]
    names = {c.check for c in run_checks(unnamed, sem)}
    assert not names & {"residual honoured (sampled)", "acceptance rule honoured (sampled)"}
