"""A trace's format follows its name, from every command that writes one: Parquet for
``.parquet``, JSONL otherwise; every reader opens both, and says so when a file's content
does not match its name. A streaming Parquet trace killed with SIGKILL keeps its closed parts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from specscope import schema
from specscope.io.trace import TraceError, read_trace, write_trace
from tests.conftest import ROOT, run_cli

pytest.importorskip("pyarrow")


def _report(path) -> dict:
    res = run_cli("report", str(path), "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _is_parquet_dataset(path) -> bool:
    return path.is_dir() and any(path.rglob("part-*.parquet")) and not any(path.rglob("*.jsonl"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("rec")
    paths = {}
    for name in ("a.parquet", "a.jsonl", "b.parquet"):
        seed = "2" if name.startswith("b") else "1"
        res = run_cli("record", "--model", "tiny", "--requests", "3", "--max-new-tokens", "12",
                      "--temperature", "0.7", "--seed", seed, "--quiet", "-o", str(out / name))
        assert res.returncode == 0, res.stderr
        paths[name] = out / name
    return paths


def test_record_writes_parquet_for_a_parquet_name_and_it_reports_like_jsonl(recorded):
    assert _is_parquet_dataset(recorded["a.parquet"])
    assert recorded["a.jsonl"].is_file()
    p, j = _report(recorded["a.parquet"]), _report(recorded["a.jsonl"])
    for key in ("draft_tokens", "accepted_tokens", "num_drafts"):
        assert p["totals"][key] == j["totals"][key] > 0  # same seed: the same decoding


def test_compare_and_dashboard_read_parquet_traces(recorded):
    from specscope.dashboard.data import TraceSource

    res = run_cli("compare", str(recorded["a.parquet"]), str(recorded["b.parquet"]))
    assert res.returncode == 0, res.stderr
    assert "acceptance" in res.stdout
    src = TraceSource([recorded["a.parquet"], recorded["b.parquet"]])
    runs = src.runs()
    assert not src.problems and len(runs) >= 2
    assert all(v.section.as_dict()["totals"]["draft_tokens"] > 0 for v in runs
               if v.run.labels.get("role") != "reference")


def test_import_writes_parquet_for_a_parquet_name(samples, tmp_path):
    src = samples / "vllm_server_specdecode_log_1.txt"
    for name in ("i.parquet", "i.jsonl"):
        res = run_cli("import", str(src), "-o", str(tmp_path / name))
        assert res.returncode == 0, res.stderr
    assert _is_parquet_dataset(tmp_path / "i.parquet")
    assert _report(tmp_path / "i.parquet")["totals"] == _report(tmp_path / "i.jsonl")["totals"]


def test_a_name_that_lies_about_the_content_is_an_error_naming_the_file(tmp_path):
    run = schema.RunRecord(run_id="r", config_id="c", algorithm="eagle", num_steps=1, topk=1,
                           num_verify_tokens=2, backend="cpu", model="m")
    write_trace(tmp_path / "real.jsonl", [run])
    (tmp_path / "fake.parquet").write_bytes((tmp_path / "real.jsonl").read_bytes())
    with pytest.raises(TraceError, match="fake.parquet: named .parquet but it is not a Parquet"):
        read_trace(tmp_path / "fake.parquet")
    write_trace(tmp_path / "ds.parquet", [run])
    part = next((tmp_path / "ds.parquet").rglob("part-*.parquet"))
    (tmp_path / "wrong.jsonl").write_bytes(part.read_bytes())
    with pytest.raises(TraceError, match="wrong.jsonl: named .jsonl but it is a Parquet file"):
        read_trace(tmp_path / "wrong.jsonl")
    res = run_cli("report", str(tmp_path / "fake.parquet"))
    assert res.returncode != 0 and "fake.parquet" in res.stderr and "Traceback" not in res.stderr


WRITER = r"""
import sys, time
from specscope import schema
from specscope.io.parquet import ParquetTraceWriter
w = ParquetTraceWriter(sys.argv[1], roll_records=50, roll_s=3600)
run = schema.RunRecord(run_id="k", config_id="c", algorithm="eagle", num_steps=1, topk=1,
                       num_verify_tokens=2, backend="cpu", model="m")
w.write([run])
i = 0
while True:
    w.write([schema.FallbackRecord(run_id="k", rank=0, step=i, t_ns=i + 1, reason="r")])
    i += 1
    if i % 50 == 0:
        print(w.num_parts, flush=True)
    time.sleep(0.001)
"""


def test_a_killed_streaming_parquet_writer_keeps_every_closed_part(tmp_path):
    out = tmp_path / "stream.parquet"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)], stdout=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        while int(proc.stdout.readline() or -1) < 4:
            assert proc.poll() is None
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    records = read_trace(out).records
    fallbacks = [r for r in records if isinstance(r, schema.FallbackRecord)]
    assert len(fallbacks) >= 4 * 50 - 1 and len(fallbacks) % 50 in (0, 49)
    assert sorted(r.step for r in fallbacks) == list(range(len(fallbacks)))  # no gap, no dup


def test_serve_and_serve_engine_stream_parquet_traces(tmp_path, free_port):
    from specscope.hooks import Recorder
    from specscope.io.transport import ZmqSink
    from specscope.serving.harness import ServerProcess, free_port as pick

    # the collector service, killed with SIGKILL after a part has closed
    trace = tmp_path / "collector.parquet"
    mport = pick()
    proc = subprocess.Popen([sys.executable, "-m", "specscope", "serve", "--listen",
                             f"tcp://127.0.0.1:{free_port}", "--metrics-port", str(mport),
                             "--trace", str(trace), "--trace-roll-s", "0.2"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        run = schema.RunRecord(run_id="s", config_id="c", algorithm="eagle", num_steps=3,
                               topk=1, num_verify_tokens=4, backend="cpu", model="m")
        sink = ZmqSink(f"tcp://127.0.0.1:{free_port}")
        rec = Recorder(run, sinks=[sink])
        import torch

        deadline = time.time() + 30
        while time.time() < deadline and not list(trace.rglob("verify/**/part-*.parquet")):
            for _ in range(20):
                rec.record_verify(request_ids=["a", "b"], num_accepted=torch.tensor([1, 2]),
                                  num_drafted=3, temperature=[0.0, 0.0])
            rec.flush()
            time.sleep(0.3)
        rec.close()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    steps = [r for r in read_trace(trace).records if isinstance(r, schema.VerifyStepRecord)]
    assert steps and all(len(s.entries) == 2 for s in steps)
    assert _report(trace)["totals"]["draft_tokens"] == 6 * len(steps)

    # the served decoder
    served = tmp_path / "served.parquet"
    with ServerProcess(["--model", "tiny", "--trace-roll-s", "0.5"], served) as srv:
        body = json.dumps({"model": "x", "prompt": "hello", "max_tokens": 8}).encode()
        import urllib.request

        req = urllib.request.Request(srv.url + "/v1/completions", body,
                                     {"Content-Type": "application/json"})
        assert json.loads(urllib.request.urlopen(req, timeout=120).read())["choices"]
    assert _is_parquet_dataset(served)
    rep = _report(served)
    assert rep["totals"]["draft_tokens"] > 0
