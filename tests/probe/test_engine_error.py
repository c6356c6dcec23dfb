"""An engine that fails under the probe is a finding: a fake OpenAI-compatible server on
127.0.0.1 that answers a number of requests and then fails (HTTP 500 with the engine's message,
a dropped connection, or a crash on top-k requests only). The probe ends with verdict ERROR
and exit status 3, names the request, its class and the engine's words, keeps the requests
not sent apart from those that failed, passes no check on a class that did not complete, and
the exporter says success 0 and counts the engine error."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specscope.cli import main
from specscope.collector.report import build_report
from specscope.probe import ERROR, ProbeError, ProbePlan, format_probe, probe, probe_records
from specscope.probe.exporter import ProbeLoop
from specscope.probe.workload import RISKY
from tests.probe import honest

CRASH = ("EngineCore encountered an issue. See stack trace (above) for the root cause. "
         "RuntimeError: max(): Expected reduction dim to be specified for input.numel() == 0.")


def _response(body: dict) -> dict:
    """A chat completion with log-probabilities: each position's distribution over four
    tokens, the committed token drawn honestly from what the request asked for."""
    n_tokens, seed = body["max_tokens"], body["seed"]
    lps = [math.log(x) for x in honest.PROBS]
    content = []
    for rank in honest.ranks(body, n_tokens):
        top = [{"token": f"t{j}", "logprob": lp} for j, lp in enumerate(lps)]
        content.append({"token": f"t{rank}", "logprob": lps[rank], "top_logprobs": top})
    return {"id": f"chatcmpl-{seed}", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * n_tokens},
                         "logprobs": {"content": content}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": n_tokens}}


class FakeEngine:
    """Answers ``answer`` chat requests, then fails every later one as ``mode`` says:
    "500" (HTTP 500 with ``CRASH``), "drop" (closes the connection without a reply); or
    "top-k": every request with top_k crashes it, and every request after that gets 500."""

    def __init__(self, answer: int = 1000, mode: str = "500") -> None:
        self.answer, self.mode = answer, mode
        self.received: list[dict] = []
        self.dead = False
        lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self._json(200, {"data": [{"id": "m", "owned_by": "vllm"}]})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    engine.received.append(body)
                    n = len(engine.received)
                    if engine.mode == "top-k" and body.get("top_k"):
                        engine.dead = True
                    fail = engine.dead or n > engine.answer
                if not fail:
                    return self._json(200, _response(body))
                if engine.mode == "drop":
                    self.close_connection = True
                    return  # no status line at all: the client sees the connection dropped
                self._json(500, {"error": {"message": CRASH, "type": "InternalServerError",
                                           "code": 500}})

            def _json(self, status: int, doc: dict) -> None:
                out = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeEngine":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


#: the plan sent once (``until_decided=False``): these tests attribute an engine's failure
#: within one plan; ``test_loop`` holds the rounds
PLAN = ProbePlan(requests=16, max_tokens=8, concurrency=1, timeout_s=10, deadline_s=60,
                 fail_fast=False, until_decided=False)


def test_a_500_after_answers_is_an_error_naming_the_request_and_the_engines_words():
    with FakeEngine(answer=5) as eng:
        result = probe(eng.url, PLAN)
    text = format_probe(result)
    print(text)
    assert result.verdict == ERROR, text
    e = result.engine_error
    sent = PLAN.requests_to_send()
    assert e["index"] == e["first_failed"] == 5 and e["class"] == sent[5][0]
    assert e["status"] == 500 and [x["index"] for x in e["in_flight"]] == [5]
    assert e["error"] == f"HTTP 500: {CRASH}" and e["answered_before"] == 5
    assert "ENGINE FAILED" in text and CRASH in text and "VERDICT ERROR" in text
    # nothing more was sent to a failed engine: one request failed, the rest not sent
    assert len(eng.received) == 6
    doc = result.to_json()
    req = doc["requests"]
    assert (req["planned"], req["sent"], req["answered"]) == (16, 6, 5)
    assert [f["index"] for f in req["failed"]] == [5] and req["failed"][0]["engine_failed"]
    assert req["not_sent"] == [{"reason": "the engine had failed under an earlier request",
                                "count": 10, "indices": list(range(6, 16))}]
    assert doc["verdict"] == "error" and doc["engine_error"]["class"] == sent[5][0]
    # no check on a class whose requests did not all complete can PASS
    assert "pass" not in {c.state for c in result.checks}
    # the trace says so too: its run's verdict and an anomaly with the engine's words
    records = probe_records(result, "probe-x")
    assert records[0].labels["probe_verdict"] == "error"
    assert any(getattr(r, "kind", "") == "probe_engine_error" and CRASH in r.message
               for r in records)
    (sec,) = build_report(records)["runs"]  # and `report` reads it so
    assert sec["probe"]["verdict"] == "error"
    assert "probe_engine_error" in {f["check"] for f in sec["probe"]["failed"]}


def test_a_dropped_connection_is_an_engine_error_too():
    with FakeEngine(answer=3, mode="drop") as eng:
        result = probe(eng.url, PLAN)
    assert result.verdict == ERROR, format_probe(result)
    assert result.engine_error["index"] == 3 and result.engine_error["status"] is None
    # the HTTP library's words for it
    assert "disconnected" in result.engine_error["error"], result.engine_error


def test_top_k_goes_last_and_its_crash_is_named():
    plan = ProbePlan(requests=16, max_tokens=8, concurrency=1, timeout_s=10, deadline_s=60,
                     until_decided=False)
    order = [cls for cls, _, _ in plan.requests_to_send()]
    first = order.index(RISKY[0])
    assert set(order[first:]) == {"top-k"} and order[:first].count("greedy") == 4
    with FakeEngine(mode="top-k") as eng:
        result = probe(eng.url, plan)
    print(format_probe(result))
    assert result.verdict == ERROR and result.engine_error["class"] == "top-k"
    assert result.engine_error["answered_before"] == 12  # every other class answered first
    states = {c.check: c.state for c in result.checks}
    assert states["temperature honoured (top-k)"] != "pass"
    assert states["truncation honoured (top-k)"] != "pass"


def test_cli_exit_status_3_on_error_2_when_nothing_was_answered(capsys):
    with FakeEngine(answer=4) as eng:
        rc = main(["probe", eng.url, "--requests", "8", "--max-tokens", "8", "--concurrency", "1",
                   "--once", "--json"])
        out = json.loads(capsys.readouterr().out)
        assert rc == 3 and out["verdict"] == "error" and out["engine_error"]["index"] == 4
        with pytest.raises(ProbeError, match="no request was answered"):
            probe(eng.url, PLAN)  # the engine is down from the start: not an ERROR verdict
        assert main(["probe", eng.url, "--requests", "4", "--max-tokens", "8"]) == 2
        assert main(["probe", eng.url, "--ngram", "4:2"]) == 2  # K:MIN:MAX or nothing
        assert "K:MIN:MAX" in capsys.readouterr().err
    with FakeEngine(answer=4) as eng:  # as an exporter's rounds: 3 once the engine failed
        rc = main(["probe", eng.url, "--requests", "8", "--max-tokens", "8", "--concurrency", "1",
                   "--once", "--every", "0.01", "--rounds", "1"])
        assert rc == 3 and "probe ERROR" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    help_text = capsys.readouterr().out
    assert "3  ERROR" in help_text and "--ngram" in help_text


def test_cli_exit_status_4_on_inconclusive_unless_told_it_is_ok(capsys):
    """A gate that ruled nothing out does not pass: INCONCLUSIVE exits 4, and 0 only with
    --inconclusive-ok; the exporter counts such rounds and says passed 0."""
    args = ["--requests", "8", "--max-tokens", "8", "--concurrency", "1", "--once", "--json"]
    with FakeEngine() as eng:  # honest, but 8 short answers cannot rule a fault out
        rc = main(["probe", eng.url, *args])
        out = json.loads(capsys.readouterr().out)
        assert out["verdict"] == "inconclusive" and rc == 4, (rc, out["verdict"])
        assert main(["probe", eng.url, *args, "--inconclusive-ok"]) == 0
        capsys.readouterr()
        loop = ProbeLoop(eng.url, lambda: probe(eng.url, ProbePlan(requests=8, max_tokens=8,
                                                                    until_decided=False)),
                         every_s=600)
        loop.round()
    fams = {f.name: f for f in text_string_to_metric_families(loop.render())}
    assert fams["specscope_probe_inconclusive"].samples[0].value == 1
    assert fams["specscope_probe_passed"].samples[0].value == 0
    assert fams["specscope_probe_success"].samples[0].value == 1  # neither FAIL nor ERROR


def test_the_exporter_says_success_0_and_counts_the_engine_error():
    with FakeEngine(answer=3) as eng:
        loop = ProbeLoop(eng.url, lambda: probe(eng.url, PLAN), every_s=600)
        loop.round()
    fams = {f.name: f for f in text_string_to_metric_families(loop.render())}
    assert fams["specscope_probe_success"].samples[0].value == 0
    assert fams["specscope_probe_engine_errors"].samples[0].value == 1
    assert fams["specscope_probe_failures"].samples[0].value == 0


def test_requests_go_out_in_the_plans_order_at_any_concurrency():
    plan = ProbePlan(requests=24, max_tokens=8, concurrency=4, timeout_s=10, deadline_s=60,
                     until_decided=False)
    with FakeEngine() as eng:
        result = probe(eng.url, plan)
    sent = sorted((a for a in result.answers if a.t_sent_s is not None), key=lambda a: a.t_sent_s)
    assert [a.index for a in sent] == list(range(24))
    assert [a.cls for a in sent][-6:] == ["top-k"] * 6
