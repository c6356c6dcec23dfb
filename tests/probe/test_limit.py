"""The probe's limit class: greedy answers asked for exactly the room their prompt leaves of the
server's context stop there, and the figures returned for their tokens agree with the same
tokens scored as a prompt. An answer past its room FAILs at once; one with two tokens off its
scoring is faulty and two such FAIL; answers ended by length all the same distance short of
their rooms are the engine's reserve, distances that differ FAIL; a PASS takes its stated count
and says how many answers had their figures compared; a class given up before any answer is
INCONCLUSIVE, saying why. The
reference engine honest and with the figures of the verify step that reaches the context's end
read one position late."""

from __future__ import annotations

import pytest

from specscope.collector.verdict import FAIL, INCONCLUSIVE, PASS
from specscope.probe import ProbePlan, format_probe
from specscope.probe.checks import Position
from specscope.probe.client import Answer
from specscope.probe.limit import (ANSWER, FAIL_ANSWERS, MEASURE, MIN_ROOM, ROOM, SCORE,
                                   Judged, answer_fields, context_of, judge, last_choice,
                                   limit_check, next_size, sized, tail_off)
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
    assert answer_fields(1024, None) is None


def test_an_answer_past_its_room_is_faulty_and_how_far_short_one_ended_is_kept():
    assert judge(_answer(5), None, None, 0.25)[:2] == ("past", "5 tokens for a room of 4")
    assert judge(_answer(3), None, None, 0.25) == Judged("pass", "", short=1)  # by length
    assert judge(_answer(4), None, None, 0.25) == Judged("pass", "", short=0)  # lengths only
    assert judge(_answer(3, finish="stop"), None, None, 0.25)[0] == "early"  # not judged
    unsaid = _answer(4)
    unsaid.response.pop("usage")
    assert judge(unsaid, None, None, 0.25)[0] == "unknown"
    assert judge(unsaid, None, (PROMPT, OUTPUT), 0.25)[0] == "pass"  # counted by its ids


def test_two_tokens_off_their_scoring_make_an_answer_faulty_one_does_not():
    ids = (PROMPT, OUTPUT)
    assert judge(_answer(4), _scored(FIGURES[:3]), ids, 0.25)[:3] == ("pass", "", 3)
    assert judge(_answer(4), _scored([-0.1, -2.0, -1.2]), ids, 0.25)[0] == "pass"  # one off
    state, what, n, gap, _ = judge(_answer(4), _scored([-0.1, -2.0, -3.2]), ids, 0.25)
    assert state == "fault" and n == 3 and gap == pytest.approx(2.0)
    assert "2 of 3 tokens off their scoring, the first at output position 1" in what
    off, _, _ = tail_off(PROMPT, OUTPUT[:-1], _answer(4).positions,
                         _scored(FIGURES[:3], [None, None, -0.2]).response["choices"][0]
                         ["prompt_logprobs"], 0.25)
    assert off == [(2, "not the argmax: 1.000 nats below it")]
    near, _, _ = tail_off(PROMPT, OUTPUT[:-1], _answer(4).positions,
                          _scored(FIGURES[:3], [None, None, -1.0]).response["choices"][0]
                          ["prompt_logprobs"], 0.25)
    assert near == []  # a near tie: the dtype's numerics could flip it


def test_the_scorings_own_greedy_token_checks_the_answers_last():
    ids = (PROMPT, OUTPUT)
    score = _scored([-0.1, -2.0, -1.2])  # one token off by its figure
    choice = score.response["choices"][0]
    choice.update(token_ids=[11], logprobs={"top_logprobs": [{"a": -0.1, "b": -2.0}]})
    assert last_choice(score.response) == (11, pytest.approx(1.9))
    state, what, n, _, _ = judge(_answer(4), score, ids, 0.25)  # the last token (10) is not 11
    assert state == "fault" and n == 4 and what.startswith("2 of 4 tokens off")
    choice["logprobs"] = {"top_logprobs": [{"a": -0.1, "b": -0.2}]}  # a near tie there
    assert judge(_answer(4), score, ids, 0.25)[0] == "pass"


def test_one_answer_past_its_room_fails_two_faulty_ones_fail_and_a_pass_takes_its_count():
    need = positions_needed(0.5)
    good = [Judged("pass", "", 3, 0.0, 0)] * need
    passed = limit_check(good, 1024)
    assert passed.state == PASS and "returned log-probabilities)" in passed.evidence["rules_out"]
    lengths = limit_check([Judged("pass", "", short=0)] * need, 1024)
    assert "lengths only" in lengths.evidence["rules_out"]
    some = limit_check(good[:2] + [Judged("pass", "", short=0)] * need, 1024)
    assert "compared in 2 of them" in some.evidence["rules_out"]
    short = limit_check(good[:-1] + [Judged("early", "ended")], 1024)
    assert short.state == INCONCLUSIVE and short.need == 1
    past = limit_check(good + [Judged("past", "5 tokens for a room of 4")], 1024)
    assert past.state == FAIL and "5 tokens for a room of 4" in past.evidence["message"]
    fault = Judged("fault", "2 of 3 tokens off their scoring", 3, 2.0, 0)
    one = limit_check(good + [fault], 1024)
    assert one.state == INCONCLUSIVE and one.evidence["lean"] == "fault"
    bad = limit_check(good[:2] + [fault] * FAIL_ANSWERS, 1024)
    assert bad.state == FAIL and "2 of 4 answers: 2 of 3 tokens off" in bad.evidence["message"]
    none = limit_check([], 1024, reason="the server does not count a prompt's tokens (usage)")
    assert none.state == INCONCLUSIVE and "usage" in none.evidence["reason"]


def test_every_answer_the_same_distance_short_is_a_reserve_distances_that_differ_fail():
    need = positions_needed(0.5)
    kept = limit_check([Judged("pass", "", short=2)] * need, 1024)  # SGLang keeps 2 tokens
    assert kept.state == PASS and kept.evidence["tokens_short"] == [2]
    assert "every answer ended by length 2 tokens short of its room: the engine's own reserve" \
        in kept.evidence["rules_out"]
    # llama.cpp under speculation: the stop follows where a verify step meets the end
    varied = limit_check([Judged("pass", "", short=s) for s in (1, 1, 3, 0, 2, 1, 1, 1)], 1024)
    assert varied.state == FAIL and varied.evidence["tokens_short"] == [0, 1, 2, 3]
    assert varied.evidence["message"].startswith("ended by length 0, 1, 2, 3 tokens short")


@pytest.mark.parametrize("fault,state", [("", PASS), ("logprobs_at_limit", FAIL)])
def test_the_reference_engine_passes_clean_and_fails_logprobs_at_limit(fault, state):
    result = probe_reference(("limit",), fault)
    (check,) = result.checks
    assert check.state == state, format_probe(result)
    assert result.classes["limit"]["state"] == "checked"
    assert {a.phase for a in result.answers} == {MEASURE, ANSWER, SCORE}
    ev = check.evidence
    assert ev["context"] == 1024 and ev["at_the_end"] == 8
    rooms = sorted(a.sampling["max_tokens"] for a in result.answers if a.phase == ANSWER)
    assert MIN_ROOM <= rooms[0] < rooms[-1] <= 2 * ROOM  # spread: the end met at other places
    assert ev["tokens_compared"] >= sum(rooms) - 8  # every token but none (the last by choice)
    if fault:  # the figures read one position late, the tokens right: the scoring finds them
        assert ev["faults"] >= FAIL_ANSWERS and "off their scoring" in ev["message"]
    else:
        assert ev["answers_scored"] == 8


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


def test_a_class_given_up_before_any_answer_is_inconclusive_saying_why():
    import httpx

    from specscope.probe.client import semantics
    from specscope.probe.run import run_checks
    from specscope.probe.senders import send_limit

    def reply(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 1024}]})
        return httpx.Response(200, json={"choices": [{  # no usage: a prompt's size unknown
            "message": {"content": "x"}, "finish_reason": "length",
            "logprobs": {"content": [{"token": "x", "logprob": -0.1, "top_logprobs": []}]}}]})

    http = httpx.Client(transport=httpx.MockTransport(reply))
    got, _ = send_limit("http://x", "vllm", "m", ProbePlan(classes=("limit",)), [], 5, None,
                        http, 0.0)
    (check,) = run_checks(got, semantics("vllm"), "")
    assert check.state == INCONCLUSIVE
    assert check.evidence["reason"] == "the server does not count a prompt's tokens (usage)"
