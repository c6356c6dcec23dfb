"""The probe's stops class: greedy answers cut by max_tokens and by stop strings end exactly where
the uncut answer says, judged against the reference engine honest and with a verify step's
stop or length checked once per step."""

from __future__ import annotations

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

    def serve(fault: str = ""):
        eng = Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=3, fault=fault),
                                   max_batch=4, hooks=False))
        transport = InProcess(eng.app()).start()
        made.append((eng, transport))
        return transport

    yield serve
    for eng, transport in made:
        transport.stop()
        eng.close()


@pytest.mark.parametrize("fault,state", [("", PASS), ("length_past_step", FAIL), ("stop_past_step", FAIL)])
def test_the_probe_passes_the_honest_reference_and_fails_its_step_faults(reference, fault, state):
    result = probe("http://testserver", ProbePlan(classes=("stops",)), transport=reference(fault))
    (check,) = result.checks
    assert check.check == "stops honoured" and check.state == state, check.evidence
    assert result.classes["stops"]["state"] == "checked"
    if state == FAIL:
        said = "returned" if fault == "length_past_step" else "past it"
        assert said in check.evidence["message"], check.evidence["message"]


class _Refusing(httpx.BaseTransport):
    """A server that does not take ``stop`` (HTTP 400, its words) or, with ``everything``,
    any request of the class."""

    def __init__(self, inner: httpx.BaseTransport, everything: bool = False) -> None:
        self.inner, self.everything = inner, everything

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        cut = b'"stop"' in body or (self.everything and request.method == "POST"
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
