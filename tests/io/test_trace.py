"""Trace files: crash safety, version checks, bad lines reported with file and line."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from specscope import schema
from specscope.io import codec
from specscope.io.trace import TraceError, TraceWriter, read_trace, write_trace


def _phase(i: int) -> schema.PhaseRecord:
    return schema.PhaseRecord(run_id="r", rank=0, step=i, phase="draft", device="cpu",
                              t_start_ns=1_700_000_000_000_000_000 + i, duration_ns=1000 + i)


WRITER = """
import sys, time
from specscope import schema
from specscope.io.trace import TraceWriter
w = TraceWriter(sys.argv[1])
i = 0
while True:
    w.write([schema.PhaseRecord(run_id="r", rank=0, step=i + j, phase="draft", device="cpu",
                                t_start_ns=i, duration_ns=1) for j in range(50)])
    i += 50
    if i == 500:
        print("ready", flush=True)
"""


def test_writer_killed_with_sigkill_leaves_a_readable_trace(tmp_path):
    path = tmp_path / "trace.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    trace = read_trace(path)
    steps = [r.step for r in trace.records]
    assert len(steps) >= 500
    assert steps == list(range(len(steps)))  # every flushed record, in order, none invented
    assert trace.truncated_tail <= 1


def test_truncated_tail_is_reported_and_dropped(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, [_phase(i) for i in range(5)])
    data = path.read_bytes()
    path.write_bytes(data[:-20])  # cut the last record mid-line
    trace = read_trace(path)
    assert [r.step for r in trace.records] == [0, 1, 2, 3]
    assert trace.truncated_tail == 1
    assert "t.jsonl:6: truncated last line" in str(trace.problems[0])


def test_bad_line_in_the_middle_is_skipped_with_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, [_phase(i) for i in range(4)])
    lines = path.read_text().splitlines()
    lines[2] = "{not json"
    lines.insert(4, json.dumps({"kind": "phase", "run_id": "r"}))
    path.write_text("\n".join(lines) + "\n")
    trace = read_trace(path)
    assert [r.step for r in trace.records] == [0, 2, 3]
    where = [f"{p.file.split('/')[-1]}:{p.line}" for p in trace.problems]
    assert where == ["t.jsonl:3", "t.jsonl:5"]


def test_unknown_schema_version_is_refused_with_what_is_readable(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"kind": "header", "schema_version": 99}) + "\n")
    with pytest.raises(TraceError, match=r"schema version 99 is not readable; .* reads schema version\(s\) 1"):
        read_trace(path)


def test_not_a_trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"hello": 1}\n')
    with pytest.raises(TraceError, match="not a specscope trace"):
        read_trace(path)


def test_parquet_version_checked(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specscope.io.trace import compact

    src = tmp_path / "t.jsonl"
    write_trace(src, [_phase(i) for i in range(3)])
    out = compact(src, tmp_path / "pq")
    assert [r.step for r in read_trace(out).records] == [0, 1, 2]
    (part,) = (out / "phase").rglob("*.parquet")
    # partitioned by the records' day, configuration, run and node
    assert part.relative_to(out).parts[:5] == ("phase", "date=2023-11-14", "config=_", "run=r", "node=_")
    table = pq.read_table(part)
    pq.write_table(table.replace_schema_metadata({b"specscope_schema_version": b"99"}), part)
    with pytest.raises(TraceError, match="version b'99' is not readable"):
        read_trace(out)
    assert pa is not None


def test_writer_is_a_recorder_sink(tmp_path, run_record):
    import torch

    from specscope.hooks import Recorder

    path = tmp_path / "t.jsonl"
    rec = Recorder(run_record, sinks=[TraceWriter(path)]).start(interval_s=0.01)
    rec.record_verify(request_ids=["a"], num_accepted=torch.tensor([2]), num_drafted=3,
                      temperature=[0.0])
    rec.close()
    kinds = [type(r).__name__ for r in read_trace(path).records]
    assert kinds == ["RunRecord", "VerifyStepRecord", "HookHealthRecord"]


def test_a_version_2_trace_reads_with_the_new_fields_unknown(tmp_path):
    """Schema 3 added per-request figures and the draft depth; a version-2 trace (written
    before them) reads with them None, never 0."""
    path = tmp_path / "v2.jsonl"
    lines = [
        {"kind": "header", "schema_version": 2},
        {"kind": "run", "run_id": "r", "config_id": "c", "algorithm": "eagle", "num_steps": 3,
         "topk": 1, "num_draft_tokens": 4, "backend": "cpu", "model": "m"},
        {"kind": "verify", "run_id": "r", "config_id": "c", "rank": 0, "step": 0, "t_ns": 1,
         "batch_size": 1, "entries": [{"request_id": "q", "num_drafted": 3,
                                       "num_draft_tokens": 3, "num_accepted": 1,
                                       "accepted_per_pos": [1, 0, 0], "temperature": 0.0}]},
        {"kind": "request", "run_id": "r", "rank": 0, "request_id": "q", "t_arrival_ns": 0,
         "t_first_token_ns": 1, "t_finish_ns": 2, "num_prompt_tokens": 3,
         "num_output_tokens": 2},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace = read_trace(path)
    assert not trace.problems
    (step,) = trace.of(schema.VerifyStepRecord)
    (req,) = trace.of(schema.RequestRecord)
    assert step.draft_depth is None and req.num_verify_steps is None
    assert req.num_accepted is None and req.acceptance_length is None
    assert req.category == ""


V7_LINES = [
    {"kind": "header", "schema_version": 7},
    {"kind": "run", "run_id": "r", "config_id": "c", "algorithm": "eagle", "num_steps": 3,
     "topk": 1, "num_draft_tokens": 4, "backend": "cpu", "model": "m"},
    {"kind": "request", "run_id": "r", "rank": 0, "request_id": "q", "t_arrival_ns": 0,
     "t_first_token_ns": 1, "t_finish_ns": 2, "num_prompt_tokens": 3, "num_output_tokens": 9,
     "num_verify_steps": 4, "num_draft_tokens": 12, "num_accepted_tokens": 5},
    {"kind": "spec_counts", "run_id": "r", "t_ns": 5, "num_drafts": 4, "draft_tokens": 12,
     "accepted_tokens": 5, "accepted_per_pos": [3, 1, 1]},
    {"kind": "engine_counts", "run_id": "r", "engine": "vllm", "num_drafts": 4,
     "draft_tokens": 12, "accepted_tokens": 5},
]


def test_a_version_7_trace_reads_under_the_schema_8_names(tmp_path):
    """Schema 8 renamed the counts that meant something else or were spelled three ways; a
    trace written before reads with each old field under its new name, figures unchanged."""
    path = tmp_path / "v7.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in V7_LINES))
    trace = read_trace(path)
    assert not trace.problems
    (run,) = trace.of(schema.RunRecord)
    (req,) = trace.of(schema.RequestRecord)
    (counts,) = trace.of(schema.SpecCountsRecord)
    (engine,) = trace.of(schema.EngineCountsRecord)
    assert run.num_verify_tokens == 4
    assert (req.num_draft_tokens, req.num_accepted, req.acceptance_length) == (12, 5, 2.25)
    assert (counts.num_draft_tokens, counts.num_accepted) == (12, 5)
    assert (engine.num_draft_tokens, engine.num_accepted) == (12, 5)
    # written again, it is a trace of today's schema (8 or later) with none of the old names
    again = tmp_path / "v8.jsonl"
    write_trace(again, trace.records)
    text = again.read_text()
    assert json.loads(text.splitlines()[0])["schema_version"] == schema.SCHEMA_VERSION >= 8
    for old in ('"num_accepted_tokens"', '"draft_tokens"', '"accepted_tokens"'):
        assert old not in text
    assert read_trace(again).records == trace.records


def test_a_name_both_old_and_new_is_never_read_twice():
    """No schema 8 field has an old field's name, so a record is renamed without its version."""
    for kind, renamed in codec.RENAMED.items():
        fields = {f.name for f in dataclasses.fields(schema.RECORD_TYPES[kind])}
        assert not fields & renamed.keys(), kind
        assert set(renamed.values()) <= fields, kind
