"""The probe's limit class: greedy answers asked for exactly the room their prompt leaves of the
server's context stop there, and the figures returned for their last tokens agree with the
same tokens scored as a prompt. An answer past its room, one ended by length short of it, or
one with a token off its scoring is faulty; two FAIL; a PASS takes its stated count and says
whether the figures were scored. The reference engine honest and with the figures of the
verify step that reaches the context's end read one position late."""

from __future__ import annotations

import pytest

from specscope.collector.verdict import FAIL, INCONCLUSIVE, PASS
from specscope.probe import ProbePlan, format_probe
from specscope.probe.checks import Position
from specscope.probe.client import Answer
from specscope.probe.limit import (ANSWER, FAIL_ANSWERS, MEASURE, MIN_ROOM, ROOM, SCORE,
                                   answer_fields, context_of, judge, limit_check, next_size,
                                   sized, tail_off)
from specscope.probe.stops import positions_needed

from .reference import probe_reference

PROMPT, OUTPUT = [1, 2, 3], [7, 8, 9, 10]
FIGURES = [-0.1, -0.5, -1.2, -0.3]


def _answer(count: int, room: int = 4, finish: str = "length") -> Answer:
    return Answer("limit", "p", {"temperature": 0.0, "max_tokens": room, "ignore_eos": True},
                  response={"choices": [{"finish_reason": finish}],
                            "usage": {"prompt_tokens": 20, "completion_tokens": count}},
                  positions=[Position("r", j, str(t), lp)
                             for j, (t, lp) in enumerate(zip(OUTPUT * 3, FIGURES * 3))][:count])


def _scored(figures: list[float], best: list[float] | None = None) -> Answer:
    """A scoring of PROMPT + OUTPUT[:-1]: each token's figure and, where ``best`` says, a
    better token beside it."""
    entries: list = [None, {"2": -1.0}, {"3": -2.0}]
    for j, (t, s) in enumerate(zip(OUTPUT[:-1], figures)):
        entry = {str(t): {"logprob": s}}
        if best and best[j] is not None:
            entry["99"] = {"logprob": best[j]}
        entries.append(entry)
    return Answer("limit", "p", {}, response={"choices": [{"prompt_logprobs": entries}]})


def test_the_context_is_read_where_each_engine_says_it():
    assert context_of({"data": [{"id": "m", "max_model_len": 1024}]}, {}) == 1024
    assert context_of({"data": [{"id": "m"}]},
                      {"default_generation_settings": {"n_ctx": 2048}}) == 2048
    assert context_of({}, {}) is None and context_of([], "") is None
    assert answer_fields(1024, 1024 - ROOM)["max_tokens"] == ROOM
    assert answer_fields(1024, 1024 - MIN_ROOM + 1) is None  # one verify step could fill it


def test_an_answer_past_its_room_is_faulty_and_one_short_of_it_is_said_not_judged():
    assert judge(_answer(5), None, None, 0.25)[:2] == ("fault", "5 tokens for a room of 4")
    # ended by length before its room: the engine keeps tokens of its context (llama.cpp one)
    assert judge(_answer(3), None, None, 0.25)[:2] == (
        "short", "ended by length 1 short of its room of 4")
    assert judge(_answer(3, finish="stop"), None, None, 0.25)[0] == "early"  # not judged
    assert judge(_answer(4), None, None, 0.25)[0] == "pass"  # lengths only: no scoring


def test_a_token_off_its_scoring_or_not_its_argmax_makes_the_answer_faulty():
    ids = (PROMPT, OUTPUT)
    assert judge(_answer(4), _scored(FIGURES[:3]), ids, 0.25)[:3] == ("pass", "", 3)
    state, what, n, gap = judge(_answer(4), _scored([-0.1, -2.0, -1.2]), ids, 0.25)
    assert state == "fault" and n == 3 and gap == pytest.approx(1.5)
    assert "1 of 3 tokens off their scoring, the first at output position 1" in what
    off, _, _ = tail_off(PROMPT, OUTPUT[:-1], _answer(4).positions,
                         _scored(FIGURES[:3], [None, None, -0.2]).response["choices"][0]
                         ["prompt_logprobs"], 0.25)
    assert off == [(2, "not the argmax: 1.000 nats below it")]
    near, _, _ = tail_off(PROMPT, OUTPUT[:-1], _answer(4).positions,
                          _scored(FIGURES[:3], [None, None, -1.0]).response["choices"][0]
                          ["prompt_logprobs"], 0.25)
    assert near == []  # a near tie: the dtype's numerics could flip it


def test_two_faulty_answers_fail_one_leans_and_a_pass_takes_its_count():
    need = positions_needed(0.5)
    good = [("pass", "", 3, 0.0)] * need
    passed = limit_check(good, 1024, scored=True)
    assert passed.state == PASS and "returned log-probabilities" in passed.evidence["rules_out"]
    assert "not scored" in limit_check(good, 1024, scored=False).evidence["rules_out"]
    short = limit_check(good[:-1] + [("early", "ended", 0, 0.0)], 1024, scored=True)
    assert short.state == INCONCLUSIVE and short.need == 1
    kept = limit_check([("short", "ended by length 1 short of its room of 4", 0, 0.0)] * need,
                       1024, scored=False)
    assert kept.state == PASS and kept.evidence["short_of_room"] == need
    assert ("the first by length 1 short of its room of 4 (the engine's own reserve, not judged)"
            in kept.evidence["rules_out"])
    fault = ("fault", "5 tokens for a room of 4", 0, 0.0)
    one = limit_check(good + [fault], 1024, scored=True)
    assert one.state == INCONCLUSIVE and one.evidence["lean"] == "fault"
    bad = limit_check(good[:2] + [fault] * FAIL_ANSWERS, 1024, scored=True)
    assert bad.state == FAIL and "2 of 4 answers: 5 tokens for a room of 4" in bad.evidence["message"]


@pytest.mark.parametrize("fault,state", [("", PASS), ("logprobs_at_limit", FAIL)])
def test_the_reference_engine_passes_clean_and_fails_logprobs_at_limit(fault, state):
    result = probe_reference(("limit",), fault)
    (check,) = result.checks
    assert check.state == state, format_probe(result)
    assert result.classes["limit"]["state"] == "checked"
    assert {a.phase for a in result.answers} == {MEASURE, ANSWER, SCORE}
    ev = check.evidence
    assert ev["context"] == 1024 and ev["at_the_end"] == 8 and ev["tails_scored"]
    ends = [a for a in result.answers if a.phase == ANSWER]
    assert all(MIN_ROOM <= a.sampling["max_tokens"] <= 2 * ROOM for a in ends)
    if fault:  # the figures read one position late, the tokens right: the scoring finds them
        assert ev["faults"] == 8 and "off their scoring" in ev["message"]


def test_a_server_that_does_not_say_its_context_is_not_sent_the_class():
    import httpx

    from specscope.probe.run import capabilities
    from specscope.probe.senders import send_limit

    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json={})))
    got, _ = send_limit("http://x", "unknown", "m", ProbePlan(classes=("limit",)), [], 5, None,
                        http, 0.0)
    assert [a.t_sent_s for a in got] == [None]
    caps = capabilities(got)["limit"]
    assert caps["state"] == "not sent" and "does not say its context" in caps["server_said"]


def test_the_document_is_sized_along_the_measured_line_and_below_a_refused_size():
    # a template of 30 tokens and 4 characters a token: the line through two sizes finds it
    assert next_size(1024, [(400, 130), (800, 230)], None) == 4 * (1024 - ROOM - 30)
    assert next_size(1024, [(400, 130)], None) == 400 + (1024 - ROOM - 130) * 400 // 130
    assert next_size(1024, [(400, 130), (800, 230)], 3000) == (800 + 3000) // 2  # refused
    assert sized(1024, 1024 - ROOM) and not sized(1024, 1024 - MIN_ROOM + 1)
    assert not sized(1024, 1024 - 3 * ROOM)
