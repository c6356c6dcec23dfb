"""Trace files: crash safety, version checks, bad lines reported with file and line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from specscope import schema
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
    assert req.num_accepted_tokens is None and req.acceptance_length is None
    assert req.category == ""
