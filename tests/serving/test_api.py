"""The OpenAI-compatible API over the reference decoder: streaming, batching, errors."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from specscope.engine.decoder import Request, SpecConfig, SpeculativeDecoder  # noqa: E402
from specscope.serving.server import Engine, EngineOptions  # noqa: E402

PROMPT = [5, 17, 33, 2, 90, 41]


@pytest.fixture(scope="module")
def engine():
    eng = Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=3), max_batch=4,
                               stats_every=1))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(engine.app()) as c:
        yield c


def _sse(client, path, body):
    chunks = []
    with client.stream("POST", path, json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                chunks.append(line[6:])
    assert chunks[-1] == "[DONE]"
    return [json.loads(c) for c in chunks[:-1]], r.headers["x-request-id"]


def test_stream_carries_each_verify_step_and_equals_target_only_greedy(engine, client):
    body = {"prompt": PROMPT, "max_tokens": 20, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    chunks, _ = _sse(client, "/v1/completions", body)
    *content, final, usage = chunks
    assert final["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 20
    text = "".join(c["choices"][0]["text"] for c in content)
    tokens = [int(t) for t in text.split()]
    ref = SpeculativeDecoder(engine.scheduler.decoder.target, None, SpecConfig(num_steps=0)) \
        .generate([Request("ref", PROMPT, 20)])[0].token_ids
    assert tokens == ref  # lossless greedy speculation, streamed
    whole = client.post("/v1/completions", json={**body, "stream": False}).json()
    assert whole["choices"][0]["text"] == text and whole["usage"]["completion_tokens"] == 20
    # one SSE chunk per commit: more tokens than chunks means verify steps accepted drafts
    sizes = [len(c["choices"][0]["text"].split()) for c in content]
    assert sum(sizes) == 20 and max(sizes) > 1 and len(content) < 20


def test_chat_accepts_parts_health_models_and_metrics(client):
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/v1/models").json()["data"][0]["id"] == "tiny-llama-v256"
    body = {"model": "tiny", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]}],
        "max_completion_tokens": 8, "stream": True, "ignore_eos": True}
    chunks, _ = _sse(client, "/v1/chat/completions", body)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    got = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert len(got.split()) == 8
    # the recorder flushes every 0.25 s off the engine's thread: a scrape sees the request's
    # counters within a few flushes, however loaded the machine (as a scraper's next interval)
    deadline = time.monotonic() + 20
    while "specscope_accepted_tokens_total{" not in (metrics := client.get("/metrics").text):
        assert time.monotonic() < deadline, metrics[-2000:]
        time.sleep(0.1)


@pytest.mark.parametrize("body,message", [
    ({"prompt": "x", "stop": [""]}, "stop must be"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": [1, 99999]}, "outside the vocabulary"),
    ({"prompt": "x", "temperature": -1}, "temperature"),
    ({"prompt": {"a": 1}}, "prompt must be"),
])
def test_bad_requests_get_a_400_that_says_why(client, body, message):
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 400 and message in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "x"}}]}]})
    assert r.status_code == 400 and "text only" in r.json()["error"]["message"]
    r = client.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400


def _mid_step_stop(steps: list[str]) -> tuple[str, str]:
    """A stop string completed by the first token of a multi-token step (first found there),
    and the answer's text before it."""
    text = "".join(steps)
    for i, step in enumerate(steps):
        start = sum(map(len, steps[:i]))
        stop = " " + step.split()[0] + " "  # completed by the next token's leading space
        if i and len(step.split()) > 2 and text.find(stop) == start:
            return stop, text[:start]
    raise AssertionError(f"no multi-token step to stop inside: {steps}")


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_inside_a_verify_step_ends_the_answer_where_it_begins(engine, client,
                                                                           stream):
    body = {"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "stream": True,
            "ignore_eos": True}
    chunks, _ = _sse(client, "/v1/completions", body)
    stop, expected = _mid_step_stop([c["choices"][0]["text"] for c in chunks
                                     if c["choices"][0]["text"]])
    body.update(stop=stop, stream=stream)
    if stream:
        chunks, _ = _sse(client, "/v1/completions", body)
        text = "".join(c["choices"][0]["text"] for c in chunks)
        finish = chunks[-1]["choices"][0]["finish_reason"]
    else:
        choice = client.post("/v1/completions", json=body).json()["choices"][0]
        text, finish = choice["text"], choice["finish_reason"]
    assert (text, finish) == (expected, "stop")
    # seeded: stop strings looked for at each step's end only; max_tokens once per step
    eng = Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=3, fault="stop_past_step"),
                               max_batch=4, hooks=False))
    try:
        with TestClient(eng.app()) as c:
            ran_on = c.post("/v1/completions", json={**body, "stream": False}).json()["choices"][0]
    finally:
        eng.close()
    assert ran_on["text"].startswith(expected + stop) and ran_on["finish_reason"] == "length"


def test_max_tokens_checked_once_per_step_overshoots(engine, client):
    eng = Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=3, fault="length_past_step"),
                               max_batch=4, hooks=False))
    body = {"prompt": PROMPT, "temperature": 0, "ignore_eos": True}
    try:
        with TestClient(eng.app()) as c:
            got = [c.post("/v1/completions", json={**body, "max_tokens": n}).json()["usage"]
                   ["completion_tokens"] for n in range(5, 12)]
    finally:
        eng.close()
    assert any(g > n for g, n in zip(got, range(5, 12))) and all(g <= n + 3 for g, n in
                                                                 zip(got, range(5, 12)))
    honest = [client.post("/v1/completions", json={**body, "max_tokens": n}).json()["usage"]
              ["completion_tokens"] for n in range(5, 12)]
    assert honest == list(range(5, 12))


def test_requests_share_the_running_batch_up_to_its_limit(engine, client):
    before = dict(engine.scheduler.batch_sizes)
    results = []

    def one(i):
        r = client.post("/v1/completions", json={"prompt": [i + 1, 7, 9], "max_tokens": 24 + i,
                                                 "ignore_eos": True, "temperature": 0.8})
        results.append(r.json()["usage"]["completion_tokens"] == 24 + i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [True] * 7
    sizes = {k: v - before.get(k, 0) for k, v in engine.scheduler.batch_sizes.items()}
    used = [k for k, v in sizes.items() if v > 0]
    assert max(used) > 1 and max(used) <= 4  # batched, never beyond --max-batch


def test_a_full_queue_answers_503():
    eng = Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=2), max_queue=0))
    try:
        with TestClient(eng.app()) as c:
            r = c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4})
            assert r.status_code == 503 and "queue full" in r.json()["error"]["message"]
    finally:
        eng.close()


def test_records_can_go_to_an_external_collector():
    pytest.importorskip("zmq")
    from specscope.collector.service import Collector
    from specscope.io.transport import ZmqReceiver

    collector = Collector()
    receiver = ZmqReceiver(collector, "tcp://127.0.0.1:0").start()
    eng = Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=3),
                               collector_url=receiver.endpoint))
    try:
        with TestClient(eng.app()) as c:
            r = c.post("/v1/completions", json={"prompt": [3, 4, 5], "max_tokens": 12,
                                                "ignore_eos": True})
            assert r.json()["usage"]["completion_tokens"] == 12
            assert c.get("/metrics").status_code == 404  # served by the external collector
    finally:
        eng.close()  # flushes the recorder into the sink
    import time

    def requests_seen():
        return sum(s.num_requests for s in collector.snapshot().totals.values())

    deadline = time.time() + 15  # batches arrive in their own time; wait for the last one
    while time.time() < deadline and requests_seen() < 1:
        time.sleep(0.05)
    receiver.close()
    (stats,) = collector.snapshot().totals.values()
    assert stats.num_requests == 1 and stats.output_tokens == 12 and stats.num_steps > 0


def test_log_probabilities_are_the_targets_raw_ones_in_either_apis_layout(engine, client):
    """Greedy: each committed token is its position's top-1, its log-probability the first
    alternative's; the chat and completions layouts carry the same figures."""
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    comp = client.post("/v1/completions", json={**body, "logprobs": 3}).json()["choices"][0]
    lp = comp["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 12
    for tok, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert len(top) == 3 and max(top.values()) == pytest.approx(v) and top[tok] == v
        assert v <= 0 and sum(math.exp(x) for x in top.values()) <= 1 + 1e-6
    chat = client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "temperature": 0,
        "ignore_eos": True, "logprobs": True, "top_logprobs": 2,
        "return_tokens_as_token_ids": True}).json()["choices"][0]
    content = chat["logprobs"]["content"]
    assert len(content) == 12 and all(c["token"].startswith("token_id:") for c in content)
    assert all(c["top_logprobs"][0]["token"] == c["token"] for c in content)
    plain = client.post("/v1/completions", json=body).json()["choices"][0]
    assert "logprobs" not in plain  # only where asked
    assert client.post("/v1/completions", json={**body, "logprobs": 21}).status_code == 400
