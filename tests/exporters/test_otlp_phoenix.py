"""OpenTelemetry out, into a real backend: Arize Phoenix (``.venv-phoenix``, built by
``make test``) started here on 127.0.0.1 with its OTLP receivers, read back through its own
REST API, stopped by its PID."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from specscope import schema
from specscope.io.trace import read_trace
from tests.conftest import ROOT, run_cli


def _phoenix_binary() -> Path:
    path = Path(os.environ.get("SPECSCOPE_PHOENIX") or ROOT / ".venv-phoenix" / "bin" / "phoenix")
    if not path.exists():
        why = "Phoenix's environment is missing: `make phoenix-env` builds .venv-phoenix"
        if os.environ.get("CI") or os.environ.get("SPECSCOPE_REQUIRE_ENGINES"):
            pytest.fail(f"{why} (in CI `make test` builds it)")
        pytest.skip(why)
    return path


class Phoenix:
    def __init__(self, workdir: Path) -> None:
        from specscope.serving.harness import free_port

        self.port, self.grpc_port = free_port(), free_port()
        env = dict(os.environ, PHOENIX_WORKING_DIR=str(workdir), PHOENIX_HOST="127.0.0.1",
                   PHOENIX_PORT=str(self.port), PHOENIX_GRPC_PORT=str(self.grpc_port))
        binary = _phoenix_binary()  # before the log is opened: a skip leaves no file open
        self.log = open(workdir / "phoenix.log", "w")
        self.proc = subprocess.Popen([str(binary), "serve"], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/v1/projects", timeout=2).read()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(1)
        self.stop()
        raise AssertionError("Phoenix did not start:\n" + (workdir / "phoenix.log").read_text()[-3000:])

    def spans(self) -> list[dict]:
        out, cursor = [], None
        while True:
            q = "limit=1000" + (f"&cursor={cursor}" if cursor else "")
            page = json.loads(urllib.request.urlopen(
                f"{self.url}/v1/projects/default/spans?{q}", timeout=30).read())
            out += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                return out

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    p = Phoenix(tmp_path_factory.mktemp("phoenix"))
    yield p
    p.stop()


def _wait_for(phoenix: Phoenix, run_id: str, n: int) -> list[dict]:
    deadline = time.time() + 60
    while True:
        mine = [s for s in phoenix.spans() if s["attributes"].get("specscope.run_id") == run_id
                and s["name"] == "specscope.request"]
        if len(mine) >= n or time.time() > deadline:
            return mine
        time.sleep(1)


def _close(a, b) -> bool:
    return a is None and b is None or a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9)


def test_a_recorded_runs_requests_arrive_with_every_documented_attribute(phoenix, tmp_path):
    """`record --otlp`: every request of the run (and its target-only reference) is one span
    in Phoenix whose documented attributes equal the trace's own figures; the seeded fault's
    anomaly is a span whose event carries its evidence."""
    from specscope.io.otlp import ATTRIBUTES

    trace = tmp_path / "t.jsonl"
    out = run_cli("record", "--model", "tiny", "--requests", "8", "--concurrency", "4",
                  "--max-new-tokens", "32", "--temperature", "0.7", "--fault", "silent_greedy",
                  "--quiet", "-o", str(trace), "--otlp", phoenix.url)
    assert out.returncode == 0, out.stderr
    assert "16 spans sent, 0 lost" in out.stderr or "17 spans sent, 0 lost" in out.stderr, out.stderr
    records = read_trace([trace]).records
    requests = [r for r in records if isinstance(r, schema.RequestRecord)]
    runs = {r.run_id: r for r in records if isinstance(r, schema.RunRecord)}
    got = {}
    for run_id in runs:
        for s in _wait_for(phoenix, run_id, 8):
            got[(run_id, s["attributes"]["gen_ai.response.id"])] = s
    assert len(got) == len(requests) == 16
    seen = set()
    for r in requests:
        run = runs[r.run_id]
        a = got[(r.run_id, r.request_id)]["attributes"]
        want = {"gen_ai.operation.name": "text_completion", "gen_ai.request.model": run.model,
                "gen_ai.request.temperature": r.temperature, "gen_ai.request.top_p": r.top_p,
                "gen_ai.request.top_k": r.top_k, "gen_ai.response.id": r.request_id,
                "gen_ai.response.finish_reasons": [r.finish_reason],
                "gen_ai.usage.input_tokens": r.num_prompt_tokens,
                "gen_ai.usage.output_tokens": r.num_output_tokens, "specscope.run_id": r.run_id,
                "specscope.spec.algorithm": run.algorithm if run.num_steps else "none",
                "specscope.spec.k": run.num_steps, "specscope.spec.verify_steps": r.num_verify_steps,
                "specscope.spec.draft_tokens": r.num_draft_tokens,
                "specscope.spec.accepted_tokens": r.num_accepted,
                "specscope.spec.acceptance_length": r.acceptance_length,
                "specscope.spec.acceptance_rate": (r.num_accepted / r.num_draft_tokens
                                                   if r.num_draft_tokens else None),
                "specscope.spec.mode_requested": "speculative-sampling",
                "specscope.spec.fallbacks": 0, "specscope.latency.ttft_s": r.ttft_s,
                "specscope.latency.tpot_s": r.tpot_s, "specscope.latency.e2e_s": r.e2e_s}
        for key, value in want.items():
            if isinstance(value, float) or key.endswith(("_s", "_length", "_rate")):
                assert _close(a.get(key), value), (r.request_id, key, a.get(key), value)
            else:
                assert a.get(key) == value, (r.request_id, key, a.get(key), value)
            seen.add(key)
        if run.num_steps:  # what verify used: the fault commits the argmax, reporting sampling
            assert a["specscope.spec.mode_used"] == "speculative-sampling"
    assert seen | {"specscope.spec.mode_used"} == set(ATTRIBUTES)  # every documented one
    anomalies = [s for s in phoenix.spans() if s["name"] == "specscope.anomaly"
                 and s["attributes"].get("specscope.run_id") in runs]
    assert [s["attributes"]["specscope.anomaly.kind"] for s in anomalies] == ["silent_greedy"]
    (event,) = anomalies[0]["events"]
    assert event["attributes"]["specscope.evidence.observed_top1_rate"] > \
        event["attributes"]["specscope.evidence.expected_top1_rate"]


def test_grpc_and_a_backend_killed_mid_run(tmp_path):
    """OTLP/gRPC into a Phoenix of its own; killed after the first half of a run's requests:
    the engine's writes go on, the second half is lost and counted, nothing is lost twice."""
    from specscope.io.otlp import OtlpSink

    trace = tmp_path / "t.jsonl"
    assert run_cli("record", "--model", "tiny", "--requests", "12", "--concurrency", "4",
                   "--max-new-tokens", "16", "--no-reference", "--quiet", "-o", str(trace)).returncode == 0
    records = read_trace([trace]).records
    reqs = [i for i, r in enumerate(records) if isinstance(r, schema.RequestRecord)]
    half = reqs[5] + 1  # the records up to the sixth request's
    phoenix = Phoenix(tmp_path)
    sink = OtlpSink(f"grpc://127.0.0.1:{phoenix.grpc_port}", batch=4, interval_s=0.2, timeout_s=2)
    try:
        sink.write(records[:half])
        deadline = time.time() + 30
        while sink.stats.spans_sent < 6 and time.time() < deadline:
            time.sleep(0.2)
        run_id = records[0].run_id
        assert len(_wait_for(phoenix, run_id, 6)) == 6 and sink.stats.spans_sent == 6
    finally:
        phoenix.stop(signal.SIGKILL)
    sink.write(records[half:])  # returns at once: the sender thread meets the dead backend
    sink.close(timeout_s=30)
    s = sink.stats
    assert s.spans_queued == 12 and s.spans_sent == 6
    assert s.dropped_export_failed + s.dropped_queue_full == 6 and s.export_errors >= 1
