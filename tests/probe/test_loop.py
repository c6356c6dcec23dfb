"""The probe's loop over ``httpx.MockTransport``: an OpenAI-compatible engine in the test's own
process, no socket. A healthy engine PASSes; a server that refuses the alternatives asked for is
asked again with what it allows; a check that fails stops the sending (fail-fast); an engine
that dies mid-probe (refused or dropped connections, no answer, HTTP 5xx) is an ERROR, never a
PASS; the token budget and the deadline stop the sending; an engine without
log-probabilities never PASSes; a target-only reference is asked over the same transport; a
request without a temperature is judged at the engine's default."""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import replace
from typing import Any, Callable

import httpx
import pytest

from tests.probe import honest

from specscope.probe import ERROR, ProbeError, ProbePlan, format_probe, probe

URL = "http://engine:8000"
#: every position's distribution over four tokens
LPS = [math.log(x) for x in (0.4, 0.3, 0.2, 0.1)]
#: the engine's words for a request over its --max-logprobs (vLLM's)
REFUSED = "Requested sample logprobs of {}, which is greater than max allowed: 5"


def _position(rank: int, known: bool = True) -> dict[str, Any]:
    if not known:  # llama.cpp under speculation: 0.0 and no alternatives
        return {"token": f"t{rank}", "logprob": 0.0, "top_logprobs": []}
    return {"token": f"t{rank}", "logprob": LPS[rank],
            "top_logprobs": [{"token": f"t{j}", "logprob": lp} for j, lp in enumerate(LPS)]}


class Engine:
    """Answers ``/v1/models`` and chat completions as ``owner`` serves them. Greedy requests
    commit ``greedy_rank`` (0: the top-1, honest); sampled ones a rank drawn honestly from
    what they asked for (``honest.py``). ``logprobs``: "all", "first" (none
    after the first token, llama.cpp's) or "none". ``dies_after``: requests answered before
    every later one gets ``failure(request)`` (a response, or it raises)."""

    def __init__(self, owner: str = "vllm", *, greedy_rank: int = 0, logprobs: str = "all",
                 dies_after: int | None = None,
                 failure: Callable[[httpx.Request], httpx.Response] | None = None,
                 max_logprobs: int | None = None, delay_s: float = 0.0,
                 unset_greedy: bool = False) -> None:
        self.owner, self.greedy_rank, self.logprobs = owner, greedy_rank, logprobs
        self.dies_after, self.failure = dies_after, failure
        self.max_logprobs, self.delay_s = max_logprobs, delay_s
        self.unset_greedy = unset_greedy  # a request without temperature decoded greedily
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.transport = httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            assert request.url.path == "/v1/models", request.url
            return httpx.Response(200, json={"data": [{"id": "m", "owned_by": self.owner}]})
        body = json.loads(request.content)
        with self._lock:
            self.received.append(body)
            n = len(self.received) - sum(1 for b in self.received if self._refused(b))
        if self.dies_after is not None and n > self.dies_after and not self._refused(body):
            assert self.failure is not None
            return self.failure(request)
        if self._refused(body):
            return httpx.Response(400, json={"error": {"message": REFUSED.format(
                body["top_logprobs"]), "type": "BadRequestError", "code": 400}})
        time.sleep(self.delay_s)
        greedy = body.get("temperature") == 0 or (self.unset_greedy and "temperature" not in body)
        ranks = [self.greedy_rank] * body["max_tokens"] if greedy else \
            honest.ranks(body, body["max_tokens"])
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length",
                                  "message": {"role": "assistant", "content": "x" * len(ranks)}}
        if self.logprobs != "none":
            choice["logprobs"] = {"content": [_position(r, self.logprobs == "all" or i == 0)
                                              for i, r in enumerate(ranks)]}
        return httpx.Response(200, json={
            "id": f"chatcmpl-{body['seed']}", "object": "chat.completion", "choices": [choice],
            "usage": {"prompt_tokens": 5, "completion_tokens": len(ranks)}})

    def _refused(self, body: dict[str, Any]) -> bool:
        return self.max_logprobs is not None and body["top_logprobs"] > self.max_logprobs


def _raises(exc: type[httpx.TransportError], text: str) -> Callable[[httpx.Request], Any]:
    def fail(request: httpx.Request) -> httpx.Response:
        raise exc(text, request=request)
    return fail


def _http_500(request: httpx.Request) -> httpx.Response:
    return httpx.Response(500, json={"error": {"message": "EngineCore encountered an issue."}})


#: the plan once (``until_decided=False``); ``test_rounds_until_every_check_decides`` holds the
#: probe that keeps asking
PLAN = ProbePlan(classes=("greedy", "temperature", "top-p"), requests=18, max_tokens=64,
                 concurrency=1, timeout_s=5, deadline_s=30, until_decided=False)


def test_a_healthy_engine_passes_with_every_request_answered_in_the_plans_order():
    """Asked until every check decides: the plan's 18 requests, then rounds for the sampled
    classes whose checks need more positions; PASS, each request a seed of its own."""
    eng = Engine()
    result = probe(URL, replace(PLAN, until_decided=True), transport=eng.transport)
    assert result.verdict == "pass", format_probe(result)
    assert result.engine == "vllm" and result.model == "m" and result.top_logprobs == 20
    seeds = [b["seed"] for b in eng.received]
    assert seeds[:18] == list(range(18)) and len(set(seeds)) == len(seeds) > 18
    # later rounds ask only for the classes still deciding: greedy decided in the first
    assert [b["temperature"] for b in eng.received[18:]] == [0.8] * (len(seeds) - 18)
    assert {b["top_logprobs"] for b in eng.received} == {20}
    assert result.to_json()["requests"]["answered"] == len(seeds)


def test_a_refused_count_of_alternatives_is_asked_again_with_what_the_server_allows():
    eng = Engine(max_logprobs=5)
    result = probe(URL, replace(PLAN, until_decided=True), transport=eng.transport)
    # the first request is refused once and sent again with 5; every later one asks for 5
    assert [b["top_logprobs"] for b in eng.received] == [20] + [5] * (len(eng.received) - 1)
    assert [b["seed"] for b in eng.received[:2]] == [0, 0]
    assert result.top_logprobs == 5 and result.engine_error is None
    assert result.to_json()["requests"]["failed"] == []
    assert "the server allows 5 alternatives per position (asked 20)" in result.notes
    assert result.verdict == "pass", format_probe(result)


def test_a_failed_check_stops_the_sending_unless_told_otherwise():
    broken = Engine(greedy_rank=2)  # greedy commits the third-best token: FAIL at once
    result = probe(URL, PLAN, transport=broken.transport)
    assert result.verdict == "fail", format_probe(result)
    assert len(broken.received) == 1  # the first request is greedy: nothing after it
    assert result.to_json()["requests"]["not_sent"] == [
        {"reason": "a check had failed (fail-fast)", "count": 17, "indices": list(range(1, 18))}]
    broken = Engine(greedy_rank=2)
    everything = replace(PLAN, fail_fast=False)
    assert probe(URL, everything, transport=broken.transport).verdict == "fail"
    assert len(broken.received) == 18


@pytest.mark.parametrize("failure, words", [
    (_raises(httpx.ConnectError, "[Errno 111] Connection refused"),
     "ConnectError: [Errno 111] Connection refused"),
    (_raises(httpx.RemoteProtocolError, "Server disconnected without sending a response."),
     "RemoteProtocolError: Server disconnected"),
    (_raises(httpx.ReadTimeout, "timed out"), "ReadTimeout: timed out"),
    (_http_500, "HTTP 500: EngineCore encountered an issue."),
], ids=["refused", "dropped", "no answer", "HTTP 500"])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_an_engine_that_dies_mid_probe_is_an_error_never_a_pass(failure, words, concurrency):
    eng = Engine(dies_after=7, failure=failure)
    plan = replace(PLAN, concurrency=concurrency)
    result = probe(URL, plan, transport=eng.transport)
    text = format_probe(result)
    assert result.verdict == ERROR, text
    assert "pass" not in {c.state for c in result.checks}, text
    e = result.engine_error
    # with c requests in flight, one sent earlier may reach the engine up to c - 1 places late
    assert e["first_failed"] >= 7 - (concurrency - 1) and e["error"].startswith(words), e
    assert e["status"] == (500 if "HTTP" in words else None)
    # requests in flight when it failed may be answered after that
    assert e["answered_before"] == 7 if concurrency == 1 else 0 < e["answered_before"] <= 7
    req = result.to_json()["requests"]
    assert req["answered"] == 7 and len(eng.received) == req["sent"] <= 7 + concurrency
    # nothing more goes to a failed engine, and the rest say so
    assert sum(n["count"] for n in req["not_sent"]) == 18 - req["sent"] > 0
    assert {n["reason"] for n in req["not_sent"]} == {
        "the engine had failed under an earlier request"}


def test_an_engine_down_from_the_start_cannot_be_probed():
    eng = Engine(dies_after=0, failure=_raises(httpx.ConnectError, "Connection refused"))
    with pytest.raises(ProbeError, match="no request was answered.*ConnectError"):
        probe(URL, PLAN, transport=eng.transport)
    assert len(eng.received) == 1


def test_no_v1_models_cannot_be_probed():
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="not found")

    with pytest.raises(ProbeError, match="no OpenAI-compatible /v1/models"):
        probe(URL, PLAN, transport=httpx.MockTransport(handle))


def test_the_token_budget_stops_the_sending():
    eng = Engine()
    plan = replace(PLAN, max_tokens=8, token_budget=20)
    result = probe(URL, plan, transport=eng.transport)
    assert len(eng.received) == 3  # 24 tokens back after three requests: over 20
    assert result.to_json()["requests"]["not_sent"] == [
        {"reason": "token budget or deadline spent", "count": 15, "indices": list(range(3, 18))}]
    assert result.verdict != "pass", format_probe(result)  # too few positions to rule out


def test_the_deadline_stops_the_sending():
    # (answers slower than the deadline, so a loaded machine still sends its first wave in
    # time and nothing after it)
    eng = Engine(delay_s=2.0)
    plan = replace(PLAN, deadline_s=1.0)
    t0 = time.monotonic()
    result = probe(URL, plan, transport=eng.transport)
    assert time.monotonic() - t0 < 6.0
    sent = result.to_json()["requests"]["sent"]
    assert 1 <= sent <= 4 and len(eng.received) == sent
    assert result.verdict != "pass", format_probe(result)


def test_an_engine_without_log_probabilities_never_passes():
    blind = Engine(logprobs="none")
    with pytest.raises(ProbeError, match="returned no log-probabilities: vLLM returns them "
                                         "unless started with --max-logprobs 0"):
        probe(URL, PLAN, transport=blind.transport)
    # llama.cpp under speculation: only each request's first token has log-probabilities
    partly = Engine(owner="llamacpp", logprobs="first")
    result = probe(URL, PLAN, transport=partly.transport)
    assert result.verdict == "inconclusive", format_probe(result)
    assert "pass" not in {c.state for c in result.checks}
    assert any("1134 of 1152 committed tokens came without log-probabilities" in n
               and "#27972" in n for n in result.notes), result.notes


def test_the_reference_is_asked_over_the_same_transport():
    engines = {"engine": Engine(), "reference": Engine()}

    def route(request: httpx.Request) -> httpx.Response:
        return engines[request.url.host].handle(request)

    result = probe(URL, PLAN, reference="http://reference:8000",
                   transport=httpx.MockTransport(route))
    greedy = [b["messages"] for b in engines["engine"].received if b["temperature"] == 0]
    assert [b["messages"] for b in engines["reference"].received] == greedy and len(greedy) == 6
    (check,) = [c for c in result.checks if c.check == "greedy against target-only"]
    assert check.evidence["pairs"] == 6 and check.evidence["structural"] == 0, check.evidence


@pytest.mark.parametrize("cls", ["greedy", "temperature", "top-p", "top-k"])
def test_llamacpp_requests_switch_off_every_truncation_the_class_does_not_ask_for(cls):
    """llama-server truncates by default (top-k 40, top-p 0.95, min-p 0.05): a probe request
    that did not say otherwise would test a class it never asked for."""
    from specscope import sampling
    from specscope.probe.client import body
    from specscope.probe.workload import CLASSES

    _, sent = body(ProbePlan(), "llamacpp", cls, "p", dict(CLASSES[cls]), "m", 5, 0)
    code = sampling.of_name(cls)
    assert sent["top_p"] == (CLASSES[cls]["top_p"] if code & sampling.TOP_P else 1.0)
    assert sent["top_k"] == (CLASSES[cls]["top_k"] if code & sampling.TOP_K else 0)
    assert sent["min_p"] == 0.0


def test_the_risky_class_is_sent_once_the_others_have_decided():
    """Asked until every check decides, top-k (the class that may bring an engine down) goes
    out only once the greedy and temperature checks have decided on the answers before it."""
    from specscope.probe.checks import Semantics
    from specscope.probe.run import run_checks, undecided

    eng = Engine()
    # a deadline far past what deciding takes (5 s alone, 12 s beside a busy core): top-k goes
    # out at the deadline too, which a loaded machine once reached at 30 s
    plan = replace(PLAN, classes=("greedy", "temperature", "top-k"), until_decided=True,
                   deadline_s=300)
    result = probe(URL, plan, transport=eng.transport)
    first = min(a.t_sent_s for a in result.answers if a.cls == "top-k")
    before = [a for a in result.answers if a.t_done_s is not None and a.t_done_s <= first]
    assert {a.cls for a in result.answers if a.t_sent_s >= first} == {"top-k"}
    assert not undecided(run_checks(before, Semantics("vllm")), ("greedy", "temperature"))
    assert result.verdict in ("pass", "inconclusive"), format_probe(result)


@pytest.mark.parametrize("unset_greedy", [False, True])
def test_a_request_without_temperature_is_judged_at_the_engines_default(unset_greedy):
    engine = Engine(unset_greedy=unset_greedy)
    plan = replace(PLAN, classes=("greedy", "top-p/unset-t", "top-k/unset-t"), requests=30,
                   fail_fast=False)
    result = probe(URL, plan, transport=engine.transport)
    sent = [b for b in engine.received if "top_p" in b or "top_k" in b]
    assert sent and all("temperature" not in b for b in sent)
    # top-k last: the class likeliest to crash an engine
    assert [("top_k" in b) for b in sent] == sorted("top_k" in b for b in sent)
    states = {c.check: c.state for c in result.checks}
    temperature = [states["temperature honoured (top-p/unset-t)"],
                   states["temperature honoured (top-k/unset-t)"]]
    if unset_greedy:  # the argmax every time, where temperature 1.0 allows 0.4 of it (top-k
        # 20 over the four tokens returned bounds nothing below 1: the pooled sharpness reads it)
        assert temperature == ["fail", "inconclusive"] and result.verdict == "fail", \
            format_probe(result)
        assert states["sharpness honoured (sampled)"] == "fail"
    else:
        assert "fail" not in states.values(), format_probe(result)
        assert {c.evidence.get("probe_class") for c in result.checks} >= {"top-p/unset-t",
                                                                          "top-k/unset-t"}
