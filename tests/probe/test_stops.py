"""The probe's stops class: greedy answers cut by max_tokens and by stop strings end exactly where
the uncut answer says, judged against the reference engine honest and with a verify step's
stop or length checked once per step."""

from __future__ import annotations

import collections

import httpx
import pytest

from specscope.collector.verdict import FAIL, INCONCLUSIVE, PASS
from specscope.probe import ProbePlan, probe
from specscope.probe.client import Answer
from specscope.probe.stops import Base, cuts, judge, positions_needed, stops_check

BASE = Base("p", "The committee met on Tuesday to review the budget for the library.", 16, "length")


def _answer(fields, text, tokens, index=0):
    return Answer("stops", "p", fields, response={"usage": {"completion_tokens": tokens}},
                  text=text, index=index)


def test_a_cut_answer_is_judged_exactly_against_its_uncut_one():
    at = BASE.text.find("budget")
    stop = {"temperature": 0.0, "stop": ["budget"]}
    assert judge(BASE, stop, BASE.text[:at], 9)[0] == "pass"
    state, said = judge(BASE, stop, BASE.text[:at + 10], 11)
    assert state == "fault" and "ran on 10 characters past it" in said
    assert judge(BASE, stop, BASE.text[:at - 4] + "plan", 9)[0] == "parted"  # a greedy flip
    # seen on llama.cpp: a newline where the uncut answer has its stop string, the string next
    # and the answer cut there, as it must be: a flip, not a run-on past the stop
    assert judge(BASE, stop, BASE.text[:at] + "\n", 10)[0] == "parted"
    length = {"temperature": 0.0, "max_tokens": 6}
    assert judge(BASE, length, BASE.text[:30], 6)[0] == "pass"
    assert judge(BASE, length, BASE.text[:36], 8)[0] == "fault"
    assert judge(BASE, length, "Another answer", 8)[0] == "parted"


def test_cuts_fall_inside_the_answer_and_their_stop_strings_begin_past_its_start():
    fields = cuts(BASE, seed=3)
    lengths = [f["max_tokens"] for f in fields if "max_tokens" in f]
    stops = [f["stop"][0] for f in fields if "stop" in f]
    assert len(lengths) == 2 and all(2 <= n < BASE.tokens for n in lengths)
    assert stops and all(BASE.text.find(s) >= len(BASE.text) // 8 for s in stops)
    assert cuts(BASE, seed=3) == fields  # the same plan, the same cuts


def test_the_check_fails_on_one_fault_and_passes_only_past_its_stated_size():
    bases = {"p": BASE}
    at = BASE.text.find("budget")
    good = [_answer({"stop": ["budget"]}, BASE.text[:at], 9, i) for i in range(positions_needed())]
    assert stops_check(bases, good).state == PASS
    short = stops_check(bases, good[:-1])
    assert short.state == INCONCLUSIVE and short.need == 1
    bad = stops_check(bases, good[:3] + [_answer({"stop": ["budget"]}, BASE.text, 16, 9)])
    assert bad.state == FAIL and "request 9" in bad.evidence["message"]
    parted = [_answer({"stop": ["budget"]}, "Something else", 3, i) for i in range(20)]
    assert stops_check(bases, parted).state == INCONCLUSIVE  # never judged, never passed


@pytest.fixture(scope="module")
def reference():
    """The reference engine (tiny model, chain of 3), one per seeded fault, behind the probe's
    transport seam (no port)."""
    pytest.importorskip("fastapi")
    from specscope.engine.decoder import SpecConfig
    from specscope.serving.inprocess import InProcess
    from specscope.serving.server import Engine, EngineOptions

    made = []

    def serve(fault: str = "", eos: bool = False):
        """``eos``: the tiny model (which has no end-of-sequence token of its own) given one, a
        token its greedy answers reach within a few tokens, so that answers end on their own."""
        eng = Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=3, fault=fault),
                                   max_batch=4, hooks=False))
        transport = InProcess(eng.app()).start()
        made.append((eng, transport))
        if eos:
            with httpx.Client(transport=transport, base_url="http://testserver") as http:
                got = http.post("/v1/completions", json={
                    "prompt": "Describe a walk through a busy market on a summer morning.",
                    "max_tokens": 40, "temperature": 0.0, "logprobs": 0,
                    "return_tokens_as_token_ids": True}).json()
            ids = [int(t.split(":")[1]) for t in got["choices"][0]["logprobs"]["tokens"]]
            # the commonest: one of the loop greedy answers of a random model fall into
            eng.scheduler.decoder.eos = {collections.Counter(ids).most_common(1)[0][0]}
        return transport

    yield serve
    for eng, transport in made:
        transport.stop()
        eng.close()


@pytest.mark.parametrize("fault,state", [("", PASS), ("length_past_step", FAIL), ("stop_past_step", FAIL),
                                         ("stop_token_past_step", FAIL)])
def test_the_probe_passes_the_honest_reference_and_fails_its_step_faults(reference, fault, state):
    result = probe("http://testserver", ProbePlan(classes=("stops",)), transport=reference(fault))
    (check,) = result.checks
    assert check.check == "stops honoured" and check.state == state, check.evidence
    assert check.evidence["by_kind"]["stop_token_ids"] > 0  # the reference returns token ids
    assert result.classes["stops"]["state"] == "checked"
    if state == FAIL:
        said = "returned" if fault == "length_past_step" else "past it"
        assert said in check.evidence["message"], check.evidence["message"]


@pytest.mark.parametrize("fault,state", [("", PASS), ("min_tokens_first_only", FAIL)])
def test_answers_held_past_their_end_by_min_tokens_never_end_before_it(reference, fault, state):
    """Answers that end on their own, asked again with min_tokens past that end: the honest
    reference holds its end-of-sequence token back at every position; with the mask at each
    verify pass's first position only, a drafted one is accepted early and the class FAILs."""
    result = probe("http://testserver", ProbePlan(classes=("stops",)),
                   transport=reference(fault, eos=True))
    (check,) = result.checks
    assert check.evidence["by_kind"]["min_tokens"] > 0, check.evidence
    assert check.state == state, check.evidence
    if state == FAIL:
        assert "min_tokens" in check.evidence["message"] and "ending on its own" in \
            check.evidence["message"], check.evidence["message"]


def test_stop_tokens_are_judged_by_token_ids_and_an_answer_holding_one_before_its_end_fails():
    ids = (5, 9, 5, 7, 11, 13, 9, 17, 19, 23)
    base = Base("p", "ten tokens of text", 10, "length", ids)
    picked = [f["stop_token_ids"][0] for f in cuts(base, seed=1) if "stop_token_ids" in f]
    assert picked == [7, 17]  # first seen from a third on, and from two thirds (9 seen before)
    assert not [f for f in cuts(base, seed=1, stop_tokens=False) if "stop_token_ids" in f]
    assert not [f for f in cuts(BASE, seed=1) if "stop_token_ids" in f]  # no ids: none
    held = {"temperature": 0.0, "stop_token_ids": [7]}
    assert judge(base, held, "", 3, "stop", ids[:3])[0] == "pass"  # the token left out
    assert judge(base, held, "", 4, "stop", ids[:4])[0] == "pass"  # or returned last
    state, said = judge(base, held, "", 6, "stop", ids[:6])
    assert state == "fault" and "ran on 2 tokens past it" in said
    assert judge(base, held, "", 3, "stop", (5, 9, 6))[0] == "parted"
    assert judge(base, held, "", 3, "stop", ())[0] == "parted"  # ids not returned: not judged


def test_min_tokens_is_judged_by_the_answers_own_end_and_never_sent_to_llamacpp():
    ended = Base("p", "A short answer.", 9, "stop")
    (held,) = [f for f in cuts(ended, seed=1) if "min_tokens" in f]
    assert held["min_tokens"] == 12 and held["max_tokens"] > held["min_tokens"]
    assert not [f for f in cuts(ended, seed=1, min_tokens=False) if "min_tokens" in f]
    assert not [f for f in cuts(BASE, seed=1) if "min_tokens" in f]  # cut by length: no end
    assert judge(ended, held, ended.text + " More of it.", 12, "stop")[0] == "pass"
    state, said = judge(ended, held, ended.text, 9, "stop")
    assert state == "fault" and "min_tokens 12 returned 9 tokens" in said
    assert judge(ended, held, ended.text, 9, "")[0] == "parted"  # no end said: not judged


class _Refusing(httpx.BaseTransport):
    """A server that does not take ``stop`` nor ``stop_token_ids`` (HTTP 400, its words) or,
    with ``everything``, any request of the class."""

    def __init__(self, inner: httpx.BaseTransport, everything: bool = False) -> None:
        self.inner, self.everything = inner, everything

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        cut = b'"stop' in body or (self.everything and request.method == "POST"
                                     and b'"max_tokens": 64' not in body)
        if cut:
            return httpx.Response(400, json={"error": {"message": "unsupported parameter"}})
        return self.inner.handle_request(request)


@pytest.mark.parametrize("everything", [False, True])
def test_a_refused_parameter_is_reported_as_not_supported_never_a_fail_or_an_error(
        reference, everything):
    transport = reference("")
    refusing = _Refusing(transport, everything)
    result = probe("http://testserver", ProbePlan(classes=("stops",)), transport=refusing)
    said = result.classes["stops"]
    assert said["refused"] > 0 and said["server_said"] == "HTTP 400: unsupported parameter"
    if everything:  # every cut refused: no check, the class not supported
        assert said["state"] == "not supported" and not result.checks
        assert result.verdict == INCONCLUSIVE
    else:  # the max_tokens cuts still judged
        assert said["state"] == "checked"
        (check,) = result.checks
        assert check.evidence["by_kind"]["stop"] == 0 and check.evidence["by_kind"]["max_tokens"]
    assert result.engine_error is None
