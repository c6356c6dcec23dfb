"""The probe's seed class: the same seeded request sent twice alone gives the same answer; a pair
that parts where the engine's own figures were the same FAILs at two such pairs, one whose
figures differed first is numerical, and a PASS rules out a seed ignored at PASS_ALPHA. The
reference engine honest and with its draft sampled from the batch's generator."""

from __future__ import annotations

import math

import pytest

from specscope.collector.verdict import FAIL, INCONCLUSIVE, PASS
from specscope.probe import ProbePlan, format_probe
from specscope.probe.checks import Position, Semantics
from specscope.probe.client import Answer
from specscope.probe.seed import AGAIN, FIRST, compare, requests, seed_check

from .reference import probe_reference

SEM = Semantics("vllm")


def _answer(tokens, phase, prompt="p", shift=0.0, known=True, index=0):
    """An answer whose every position returns two alternatives, the letter of its place first
    (log-probability -0.5) and "other" (``shift`` moves the figures: another computation)."""
    pos = [Position("r", i, t, -0.5 + shift,
                    (("abcdefgh"[i], -0.5 + shift), ("other", -1.5 - shift)) if known else (),
                    temperature=0.8) for i, t in enumerate(tokens)]
    a = Answer("seed", prompt, {"temperature": 0.8, "seed": 7}, response={}, positions=pos,
               text="".join(tokens), index=index)
    a.phase = phase
    return a


def test_a_pair_is_judged_by_whether_the_figures_were_the_same_up_to_the_parting():
    first = _answer(list("abcdef"), FIRST)
    assert compare(first, _answer(list("abcdef"), AGAIN), SEM).kind == "agree"
    parted = compare(first, _answer(list("abXdef"), AGAIN), SEM)
    assert (parted.kind, parted.index) == ("parted", 2)
    # the same tokens' figures differing before the parting: another computation, numerical
    other = _answer(list("abXdef"), AGAIN, shift=1e-3)
    assert compare(first, other, SEM).kind == "numerical"
    assert compare(first, _answer(list("abXdef"), AGAIN, known=False), SEM).kind == "unknown"
    # one ended early: its end token's figures are not returned, so the parting is unknown
    assert compare(first, _answer(list("abcd"), AGAIN), SEM).kind == "unknown"


def test_two_pairs_parting_at_the_same_figures_fail_one_does_not():
    firsts = [_answer(list("abcdef"), FIRST, prompt=f"p{i}", index=i) for i in range(4)]
    parted = [_answer(list("abXdef"), AGAIN, prompt=f"p{i}", index=10 + i) for i in range(2)]
    agree = [_answer(list("abcdef"), AGAIN, prompt=f"p{i}", index=10 + i) for i in range(2, 4)]
    check = seed_check(firsts + parted + agree, SEM)
    assert check.state == FAIL and "2 of 4 seeded requests" in check.evidence["message"]
    one = seed_check(firsts + parted[:1] + agree, SEM)
    assert one.state == INCONCLUSIVE and one.evidence["lean"] == "fault"
    numerical = [_answer(list("abXdef"), AGAIN, prompt=f"p{i}", shift=1e-3, index=10 + i)
                 for i in range(4)]
    numerically = seed_check(firsts + numerical, SEM)  # never judged, nor leaning either way
    assert numerically.state == INCONCLUSIVE and numerically.evidence["lean"] == "honest"


def test_a_pass_needs_agreeing_pairs_that_independent_draws_would_rarely_give():
    firsts = [_answer(list("abcdefgh"), FIRST, prompt=f"p{i}", index=i) for i in range(3)]
    agree = [_answer(list("abcdefgh"), AGAIN, prompt=f"p{i}", index=10 + i) for i in range(3)]
    check = seed_check(firsts + agree, SEM)
    # each position's top-1 at 0.8, renormalised over the two returned tokens (the unknown
    # tail only lowers it): 1 / (1 + e^(-1/0.8)), 24 positions over 3 pairs
    each = 1 / (1 + math.exp(-1 / 0.8))
    assert check.state == PASS and check.evidence["independent_agree_bound"] == \
        pytest.approx(each ** 24)
    assert seed_check(firsts[:2] + agree[:2], SEM).state == INCONCLUSIVE  # too few pairs
    short = [_answer(list("a"), phase, prompt=f"p{i}", index=i)
             for i in range(3) for phase in (FIRST, AGAIN)]
    assert seed_check(short, SEM).state == INCONCLUSIVE  # 0.78^3: chance could give that


def test_the_class_seeds_each_prompt_and_moves_with_the_plan_seed():
    got = requests(["a", "b"], base=100)
    assert [r[2]["seed"] for r in got] == [4342, 4343]
    assert all(r[2]["temperature"] == 0.8 for r in got)


@pytest.mark.parametrize("fault,state", [("", PASS), ("seed_ignored_in_draft", FAIL)])
def test_the_reference_engine_passes_clean_and_fails_a_draft_that_ignores_the_seed(fault, state):
    result = probe_reference(("seed",), fault)
    (check,) = result.checks
    assert check.state == state, format_probe(result)
    assert result.classes["seed"]["state"] == "checked"
    assert {a.phase for a in result.answers} == {FIRST, AGAIN}
    assert all(a.t_sent_s is not None for a in result.answers) and len(result.answers) == 8


def test_the_class_is_sent_only_to_engines_that_promise_seeds():
    from specscope.probe.run import capabilities
    from specscope.probe.seed import not_sent
    from specscope.probe.senders import send_seed

    assert not_sent("vllm") == not_sent("llamacpp") == not_sent("specscope") == ""
    assert "--enable-deterministic-inference" in not_sent("sglang")
    got, _ = send_seed("http://x", "sglang", "m", ProbePlan(classes=("seed",)), [], 5, None,
                       None, 0.0)
    assert capabilities(got)["seed"] == {"state": "not sent", "answered": 0, "requests": 1,
                                         "refused": 0, "server_said": not_sent("sglang")}


def test_both_sendings_share_the_class_deadline():
    import httpx

    from specscope.probe.senders import send_seed

    from .test_loop import URL, Engine

    eng = Engine(delay_s=0.6)  # each request answered in 0.6 s, one in flight at a time
    with httpx.Client(transport=eng.transport) as http:
        got, _ = send_seed(URL, "vllm", "m", ProbePlan(classes=("seed",), deadline_s=1.0), [],
                           5, None, http, 0.0)
    # the first sending fits a request or two in the second the class had; the second sending
    # has none left (it once started its own from scratch)
    answered = [a for a in got if a.response is not None]
    assert 1 <= len(answered) == len(eng.received) <= 2
    assert all(a.phase == FIRST for a in answered)
    assert all(a.not_sent for a in got if a.phase == AGAIN)
