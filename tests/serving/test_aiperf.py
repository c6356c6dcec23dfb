"""A real benchmark client (NVIDIA AIPerf, its own virtual environment) drives serve-engine;
specscope's server-side timings and token counts agree with what the client measured."""

from __future__ import annotations

import json

import pytest

from specscope import schema
from specscope.collector.agreement import client_agreement, format_agreement
from specscope.exporters.trace import read_trace
from specscope.importers import import_file
from specscope.serving.harness import ServerProcess, find_aiperf, run_aiperf


@pytest.fixture(scope="module")
def aiperf():
    exe = find_aiperf()
    if exe is None:
        pytest.skip("aiperf is not installed (make .venv-aiperf, or set SPECSCOPE_AIPERF)")
    return exe


def test_aiperf_against_serve_engine_agrees_with_server_side_timings(aiperf, tmp_path):
    from specscope.engine.models import smollm2_tokenizer_dir

    tok = smollm2_tokenizer_dir()
    trace = tmp_path / "server.jsonl"
    with ServerProcess(["--model", "tiny", "--tokenizer", str(tok), "--spec-steps", "3",
                        "--max-batch", "4"], trace, log=tmp_path / "server.log") as srv:
        run = run_aiperf(srv.url, model="tiny", tokenizer=tok, artifact_dir=tmp_path / "aiperf",
                         concurrency=2, requests=8, input_tokens=64, output_tokens=24,
                         aiperf=aiperf)
    server = [r for r in read_trace(trace).records if isinstance(r, schema.RequestRecord)]
    client = [r for r in import_file(run.records, run_id="aiperf").records
              if isinstance(r, schema.RequestRecord)]
    a = client_agreement(server, client)
    print(format_agreement(a))
    # AIPerf sends a warmup request or more besides the 8 it profiles; every profiled one matches
    assert a.matched == 8 and a.client_only == 0
    assert not a.token_mismatches and all(r.num_output_tokens == 24 for r in client)
    assert a.ok, format_agreement(a)
    # the client's aggregate file imports too, and its throughput counts the same tokens
    summary = import_file(run.summary, run_id="aiperf-summary").records
    bench = next(r for r in summary if isinstance(r, schema.BenchmarkRecord))
    assert bench.metrics["output_throughput_tok_s"] > 0
    assert json.loads(run.summary.read_text())["request_count"]["avg"] == 8
    # the server saw speculation: verify steps recorded, several tokens per streamed chunk
    steps = [r for r in read_trace(trace).records if isinstance(r, schema.VerifyStepRecord)]
    assert steps and max(max(s.chunk_num_tokens) for s in server) > 1
