"""The probe's penalties class: each committed token of a greedy request with presence and
frequency penalties against its position's penalised argmax, scored from raw log-probabilities
(or read from penalised ones), judged against the reference engine honest and with penalties
applied at each verify pass's first position only."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from specscope.collector.verdict import FAIL, INCONCLUSIVE, PASS
from specscope.probe import ProbePlan, format_probe, probe
from specscope.probe.checks import Position
from specscope.probe.client import Answer, semantics
from specscope.probe.penalties import decisive_needed, judge, penalty_check, rescored

FIELDS = {"temperature": 0.0, "presence_penalty": 1.0, "frequency_penalty": 0.5}


def _pos(i, token, top):
    lp = dict(top)[token]
    return Position("r", i, token, lp, tuple(sorted(top, key=lambda x: -x[1])))


def _answer(positions, fields=FIELDS, index=0):
    return Answer("penalties", "p", fields, response={}, positions=positions, index=index)


#: "a" committed first; then the raw top-1 is "a" again, 0.8 nats above "b": penalised by
#: 1.0 + 0.5, "a" scores 0.7 below "b", so "b" must be committed
FIRST = _pos(0, "a", [("a", -0.2), ("b", -2.0), ("c", -4.0)])
HONEST = _pos(1, "b", [("a", -0.5), ("b", -1.3), ("c", -5.0)])
IGNORED = _pos(1, "a", [("a", -0.5), ("b", -1.3), ("c", -5.0)])


def test_a_committed_token_is_scored_with_the_answers_own_counts():
    p0, p1 = rescored([FIRST, HONEST], 1.0, 0.5)
    assert p0.top == FIRST.top  # nothing committed before: nothing penalised
    assert p1.top[0] == ("b", -1.3) and p1.top[1] == pytest.approx(("a", -2.0))
    verdicts = [v for v, _, _ in judge([FIRST, HONEST], 1.0, 0.5, tie_margin=0.25)]
    assert verdicts == ["", "decisive"]  # the raw top-1 lost to its penalty, as it must
    (_, (state, p, gap)) = judge([FIRST, IGNORED], 1.0, 0.5, tie_margin=0.25)
    assert state == "fault" and p.token == "a" and gap == pytest.approx(0.7)
    # a near tie once penalised is neither: the dtype's arithmetic could flip it
    assert judge([FIRST, IGNORED], 1.0, 0.5, tie_margin=1.0)[1][0] == ""


def test_penalised_log_probabilities_are_read_as_returned_and_never_decide():
    # as an engine returns them already penalised: the committed token must be their top-1
    penalised = _pos(1, "b", [("a", -2.0), ("b", -1.3), ("c", -5.0)])
    assert judge([FIRST, penalised], 1.0, 0.5, 0.25, penalised=True)[1][0] == ""
    wrong = _pos(1, "a", [("a", -2.0), ("b", -1.3), ("c", -5.0)])
    assert judge([FIRST, wrong], 1.0, 0.5, 0.25, penalised=True)[1][0] == "fault"
    c = penalty_check([_answer([FIRST, penalised])], 0.25, penalised=True)
    assert c.state == INCONCLUSIVE and "--reference" in c.evidence["reason"] and c.need is None


def test_an_undecodable_fragment_leaves_its_position_unjudged():
    # two byte fragments print alike: their counts cannot be told apart
    first = _pos(0, "\ufffd", [("\ufffd", -0.2), ("b", -2.0)])
    second = _pos(1, "\ufffd", [("\ufffd", -0.5), ("b", -1.3)])
    assert [v for v, _, _ in judge([first, second], 1.0, 0.5, 0.25)] == ["", ""]


def test_the_check_passes_only_past_its_stated_size_and_fails_on_one_fault():
    need = decisive_needed()
    good = [_answer([FIRST, HONEST], index=i) for i in range(need)]
    assert penalty_check(good, 0.25).state == PASS
    short = penalty_check(good[:-1], 0.25)
    assert short.state == INCONCLUSIVE and short.need == 1
    bad = penalty_check(good[:3] + [_answer([FIRST, IGNORED], index=7)], 0.25)
    assert bad.state == FAIL and "request 7" in bad.evidence["message"]
    # where the engine says which tokens verify produced, only those decide: a fault confined
    # to verify never reaches a token decoded without a draft
    undrafted = [_answer([FIRST, replace(HONEST, role="undrafted")], index=i) for i in range(need)]
    for a in undrafted:
        a.roles_by = "replay"
    placed = penalty_check(undrafted, 0.25)
    assert placed.state == INCONCLUSIVE and placed.evidence["decisive"] == 0
    for a in undrafted:
        a.positions = [FIRST, replace(HONEST, role="accepted")]
    assert penalty_check(undrafted, 0.25).state == PASS
    said = penalty_check(good, 0.25, unscorable="counts the prompt too")
    assert said.state == INCONCLUSIVE and "counts the prompt too" in said.evidence["reason"]


def test_each_engine_is_read_as_its_log_probabilities_are():
    assert semantics("sglang").penalised and semantics("vllm", "processed_logprobs").penalised
    assert not semantics("vllm").penalised and not semantics("unknown").penalised


def test_the_reference_engine_penalises_every_verified_position_with_the_drafts_before_it():
    torch = pytest.importorskip("torch")
    from specscope.engine.kv import causal
    from specscope.engine.sampling import penalize

    logits = torch.zeros(1, 3, 5)
    tokens = torch.tensor([[1, 2, 2]])  # the last committed token, then two drafts
    out = penalize(logits, [[1]], [1.0], [0.5], tokens, causal(3, logits.device))
    # node 0 after the output [1]; node 1 after one draft 2; node 2 after two
    assert out[0, :, 1].tolist() == [-1.5, -1.5, -1.5]
    assert out[0, :, 2].tolist() == [0.0, -1.5, -2.0]
    first = penalize(logits, [[1]], [1.0], [0.5], tokens, causal(3, logits.device),
                     first_only=True)
    assert first[0, 0, 1] == -1.5 and first[0, 1:].abs().sum() == 0
    assert torch.equal(penalize(logits[:, 0], [[1]], [0.0], [0.0]), logits[:, 0])  # none asked


class _Hosts(httpx.BaseTransport):
    """Requests routed by host to transports of their own (two engines in this process)."""

    def __init__(self, routes):
        self.routes = routes

    def handle_request(self, request):
        return self.routes[request.url.host].handle_request(request)


def _engine(fault="", steps=3):
    from specscope.engine.decoder import SpecConfig
    from specscope.serving.server import Engine, EngineOptions

    return Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=steps, fault=fault),
                                max_batch=4, hooks=False))


@pytest.mark.parametrize("fault,state", [("", PASS), ("penalty_first_only", FAIL)])
def test_the_probe_passes_the_honest_reference_engine_and_fails_penalties_skipped_on_drafts(
        fault, state):
    pytest.importorskip("fastapi")
    from specscope.serving.inprocess import in_process

    spec, target = _engine(fault), _engine(steps=0)
    try:
        with in_process(spec.app()) as a, in_process(target.app()) as b:
            result = probe("http://spec", ProbePlan(classes=("penalties",), requests=8,
                                                    max_tokens=48),
                           reference="http://target", transport=_Hosts({"spec": a, "target": b}))
    finally:
        spec.close()
        target.close()
    checks = {c.check: c for c in result.checks}
    assert checks["penalties honoured"].state == state, format_probe(result)
    # the answers themselves against the same requests without speculation: FAIL on the fault
    # alone (8 pairs are too few for a PASS there); every answered request paired
    said = checks["greedy against target-only"]
    assert (said.state == FAIL) == (state == FAIL), format_probe(result)
    assert said.evidence["pairs"] == sum(a.response is not None for a in result.answers) >= 4
    assert result.classes["penalties"]["state"] == "checked"


def test_a_penalty_the_engine_does_not_take_is_reported_not_supported():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    eng = _engine()
    try:
        with TestClient(eng.app()) as http:
            r = http.post("/v1/completions", json={"prompt": "hi", "repetition_penalty": 1.2})
            assert r.status_code == 400 and "not supported" in r.json()["error"]["message"]
            r = http.post("/v1/completions", json={"prompt": "hi", "presence_penalty": 3})
            assert r.status_code == 400
    finally:
        eng.close()


def test_a_class_the_server_refuses_outright_is_not_supported_and_never_an_error():
    """The reference engine refuses min_p (as vLLM 0.32 does under speculation): a probe of
    that class alone answers with the capability table and INCONCLUSIVE, not exit 2."""
    pytest.importorskip("fastapi")
    from specscope.serving.inprocess import in_process

    eng = _engine()
    try:
        with in_process(eng.app()) as transport:
            alone = probe("http://spec", ProbePlan(classes=("min-p",), requests=4,
                                                   max_tokens=16), transport=transport)
            beside = probe("http://spec", ProbePlan(classes=("min-p", "greedy"), requests=4,
                                                    max_tokens=16), transport=transport)
    finally:
        eng.close()
    assert alone.classes["min-p"]["state"] == "not supported" and not alone.checks
    assert alone.verdict == INCONCLUSIVE and "refused every request" in " ".join(alone.notes)
    assert beside.classes["min-p"]["state"] == "not supported"
    assert [c.check for c in beside.checks] == ["greedy losslessness"]
