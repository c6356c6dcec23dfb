"""A real benchmark client (NVIDIA AIPerf, its own virtual environment) drives serve-engine;
specscope's server-side timings and token counts agree with what the client measured."""

from __future__ import annotations

import json

import pytest

from specscope import schema
from specscope.collector.agreement import format_agreement
from specscope.io.trace import read_trace
from specscope.importers import import_file
from specscope.serving.harness import client_check, find_aiperf


@pytest.fixture(scope="module")
def aiperf():
    exe = find_aiperf()
    if exe is None:
        pytest.skip("aiperf is not installed (make .venv-aiperf, or set SPECSCOPE_AIPERF)")
    return exe


def test_aiperf_against_serve_engine_agrees_with_server_side_timings(aiperf, tmp_path):
    from specscope.engine.models import smollm2_tokenizer_dir

    tok = smollm2_tokenizer_dir()
    a, run = client_check(["--model", "tiny", "--tokenizer", str(tok), "--spec-steps", "3",
                           "--max-batch", "4"], tokenizer=tok, out_dir=tmp_path, concurrency=2,
                          requests=8, input_tokens=64, output_tokens=24)
    print(format_agreement(a))
    # AIPerf may send warmup requests besides the 8 it profiles; every profiled one matches
    assert a.matched == 8 and a.client_only == 0
    client = [r for r in import_file(run.records, run_id="aiperf").records
              if isinstance(r, schema.RequestRecord)]
    assert not a.token_mismatches and all(r.num_output_tokens == 24 for r in client)
    assert a.ok, format_agreement(a)
    # the client's aggregate file imports too
    summary = import_file(run.summary, run_id="aiperf-summary").records
    bench = next(r for r in summary if isinstance(r, schema.BenchmarkRecord))
    assert bench.metrics["output_throughput_tok_s"] > 0
    assert json.loads(run.summary.read_text())["request_count"]["avg"] == 8
    # the server saw speculation: verify steps recorded, several tokens per streamed chunk
    records = read_trace(tmp_path / "server.jsonl").records
    server = [r for r in records if isinstance(r, schema.RequestRecord)]
    assert [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    assert max(max(s.chunk_num_tokens) for s in server) > 1
