"""The probe's rescore class: the log-probabilities an engine returned for the tokens it generated
agree with the ones it returns for the same tokens scored as a prompt; an answer with two tokens
off by more than the tolerance FAILs, a PASS rules out disagreeing answers at its stated size,
an engine not known to take prompt_logprobs is not sent the class. The reference engine honest
and with its prompt log-probabilities scored one position late."""

from __future__ import annotations

import pytest

from specscope.collector.verdict import FAIL, INCONCLUSIVE, PASS
from specscope.probe import ProbePlan, format_probe, probe
from specscope.probe.checks import Position, Semantics
from specscope.probe.client import Answer
from specscope.probe.rescore import (BASE, SCORE, TOLERANCE_NATS, compare, not_sent,
                                     rescore_check, scoring)
from specscope.probe.stops import positions_needed

from .reference import probe_reference

PROMPT, OUTPUT = [1, 2, 3], [7, 8, 9, 10]
GENERATED = [-0.1, -0.5, -1.2, -0.3]


def _pair(scored: list[float | None], index: int = 0):
    answer = Answer("greedy", "p", {"temperature": 0.0}, response={}, index=index,
                    positions=[Position("r", j, str(t), lp) for j, (t, lp)
                               in enumerate(zip(OUTPUT, GENERATED))])
    entries = [None, {"2": -1.0}, {"3": -2.0}] + [
        None if s is None else {str(t): {"logprob": s, "decoded_token": "x"}}
        for t, s in zip(OUTPUT, scored)]
    score = Answer("rescore", "p", scoring(PROMPT, OUTPUT), index=100 + index,
                   response={"choices": [{"prompt_logprobs": entries}]})
    return answer, score, PROMPT, OUTPUT


def test_the_scoring_request_sends_the_answer_back_whole_as_a_prompt():
    assert scoring(PROMPT, OUTPUT)["prompt_ids"] == [1, 2, 3, 7, 8, 9, 10]
    assert not_sent("vllm") == "" and not_sent("specscope") == ""
    assert "prompt_logprobs" in not_sent("llamacpp")


def test_tokens_off_by_more_than_the_tolerance_are_named_and_unknown_ones_skipped():
    answer, score, p, o = _pair([-0.1, -0.5 - TOLERANCE_NATS / 2, -4.0, None])
    off, n, largest = compare(p, o, answer.positions,
                              score.response["choices"][0]["prompt_logprobs"])
    assert n == 3 and off == [(2, -1.2, -4.0)] and largest == pytest.approx(2.8)


def test_two_tokens_off_in_one_answer_fail_one_does_not_and_a_pass_takes_its_count():
    good = [_pair(GENERATED, i) for i in range(positions_needed(0.5))]
    assert rescore_check(good).state == PASS
    short = rescore_check(good[:-1])
    assert short.state == INCONCLUSIVE and short.need == 1
    one_off = _pair([-0.1, -0.5, -5.0, -0.3], 50)
    assert rescore_check(good[:-1] + [one_off]).state == INCONCLUSIVE  # one token: not enough
    faulty = [_pair([-0.1, -3.0, -5.0, -0.3], 60 + i) for i in range(2)]
    one = rescore_check(good + faulty[:1])  # one faulty answer: a lean, never a PASS
    assert one.state == INCONCLUSIVE and one.evidence["lean"] == "fault"
    bad = rescore_check(good[:2] + faulty)
    assert bad.state == FAIL and "request 60: 2 of 4 tokens disagree" in bad.evidence["message"]
    assert rescore_check(good, processed=True).state == INCONCLUSIVE  # not the log-softmax


@pytest.mark.parametrize("fault,state", [("", PASS), ("prompt_logprobs_shifted", FAIL)])
def test_the_reference_engine_passes_clean_and_fails_prompt_logprobs_shifted(fault, state):
    result = probe_reference(("rescore",), fault)
    (check,) = result.checks
    assert check.state == state, format_probe(result)
    assert result.classes["rescore"]["state"] == "checked"
    assert {a.phase for a in result.answers} == {BASE, SCORE}
    assert check.evidence["answers"] == 8 and check.evidence["tokens_compared"] > 100


def test_an_engine_not_known_to_take_prompt_logprobs_is_not_sent_the_class():
    from specscope.probe.run import capabilities, run_checks
    from specscope.probe.senders import send_rescore

    got, _ = send_rescore("http://x", "llamacpp", "m", ProbePlan(classes=("rescore",)), [], 5,
                          None, None, 0.0)
    assert [a.not_sent for a in got] == [not_sent("llamacpp")]
    assert capabilities(got)["rescore"]["state"] == "not sent"
    assert run_checks(got, Semantics("llamacpp")) == []


def test_asking_only_for_a_class_the_engine_is_not_sent_says_so_and_raises_nothing():
    from .test_loop import URL, Engine

    eng = Engine(owner="llamacpp")
    result = probe(URL, ProbePlan(classes=("rescore",)), transport=eng.transport)
    assert not eng.received and result.checks == []
    assert result.classes["rescore"]["state"] == "not sent"
    assert any("nothing checked" in n for n in result.notes), result.notes
