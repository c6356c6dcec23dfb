"""Fault injection: the engine side never blocks or raises, drops are counted, and nothing
already written is lost (a collector that is down, slow, restarted or killed; a full disk)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from specscope import schema
from specscope.collector.service import Collector
from specscope.io.transport import ZmqReceiver, ZmqSink
from specscope.engine.decoder import Request, SpecConfig, SpeculativeDecoder
from specscope.io.trace import read_trace
from specscope.hooks import Recorder
from tests.conftest import ROOT

pytest.importorskip("zmq")


def _requests(n=6, max_new=30):
    return [Request(f"r{i}", [3 + i, 9, 27], max_new_tokens=max_new, temperature=0.7)
            for i in range(n)]


def _steps(records):
    return [r for r in records if isinstance(r, schema.VerifyStepRecord)]


def test_collector_down_engine_finishes_and_counts_drops(tiny, run_record, free_port, figure):
    sink = ZmqSink(f"tcp://127.0.0.1:{free_port}", high_water_mark=2)  # nobody listening
    local = Collector()
    rec = Recorder(run_record, sinks=[sink, local])
    dec = SpeculativeDecoder(tiny.target, tiny.draft, SpecConfig(num_steps=3), recorder=rec)
    outs = []
    for _ in range(6):  # six waves, each flushed as one batch (the drain thread's job)
        outs += dec.generate(_requests(n=2))
        rec.flush()
    rec.close()
    assert all(len(o.token_ids) == 30 for o in outs) and rec.num_hook_errors == 0
    assert sink.num_dropped > 0 and rec.num_sink_errors == 0  # dropped and counted, not raised
    # the other sink saw every step regardless
    assert sum(s.num_steps for s in local.snapshot().totals.values()) == dec.step_index
    figure("collector down", survived=True, records_dropped_and_counted=sink.num_dropped,
           engine_errors=rec.num_hook_errors)


def test_slow_collector_never_blocks_the_sender(free_port, figure):
    class Slow(Collector):
        def observe(self, records):
            time.sleep(0.05)
            super().observe(records)

    slow = Slow()
    receiver = ZmqReceiver(slow, f"tcp://127.0.0.1:{free_port}").start()
    sink = ZmqSink(f"tcp://127.0.0.1:{free_port}", high_water_mark=5)
    rec = schema.RunRecord(run_id="slow", config_id="c", algorithm="a", num_steps=1, topk=1,
                           num_verify_tokens=2, backend="cpu", model="m")
    for _ in range(2000):
        sink.write([rec])  # 2000 batches against a collector that takes 50 ms each
    assert sink.num_dropped > 0 and sink.num_sent + sink.num_dropped == 2000
    figure("collector slow (50 ms per batch)", survived=True, batches=2000,
           dropped_and_counted=sink.num_dropped)
    sink.close()
    receiver.close()


def test_collector_restarted_mid_run_receives_again(free_port, figure):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    sink = ZmqSink(endpoint, high_water_mark=1000)
    runs = [schema.RunRecord(run_id=f"run{i}", config_id="c", algorithm="a", num_steps=1, topk=1,
                             num_verify_tokens=2, backend="cpu", model="m") for i in range(40)]
    first = Collector()
    r1 = ZmqReceiver(first, endpoint).start()
    r2 = None
    try:
        for r in runs[:20]:
            sink.write([r])
        _wait(lambda: len(first.snapshot().runs) == 20)
        r1.close()  # the collector goes away; the sender keeps going
        for r in runs[20:30]:
            sink.write([r])
        second = Collector()
        r2 = ZmqReceiver(second, endpoint).start()  # and comes back on the same endpoint
        for r in runs[30:]:
            sink.write([r])
        # ZeroMQ reconnects on its own schedule; on a loaded machine that has taken over 20 s
        _wait(lambda: len(second.snapshot().runs) >= 10, timeout=90.0)
        got = set(first.snapshot().runs) | set(second.snapshot().runs)
        lost = 40 - len(got)
        assert {f"run{i}" for i in range(30, 40)} <= got  # everything after the restart arrives
        assert lost <= 10 and sink.num_dropped == 0  # only batches sent while down may be lost
        figure("collector restarted mid-run", survived=True, sent=40, received=len(got),
               lost_while_down=lost)
    finally:  # a failure here must not leave open sockets to the tests after it
        sink.close()
        r1.close()
        if r2 is not None:
            r2.close()


def _wait(cond, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_collector_killed_with_sigkill_keeps_its_trace(tmp_path, free_port, figure):
    from specscope.serving.harness import free_port as pick

    mport = pick()
    trace = tmp_path / "collector.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "specscope", "serve", "--listen",
                             f"tcp://127.0.0.1:{free_port}", "--metrics-port", str(mport),
                             "--trace", str(trace)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _up(f"http://127.0.0.1:{mport}/metrics"), 60)
        sink = ZmqSink(f"tcp://127.0.0.1:{free_port}")
        sent = 0
        for i in range(300):
            sink.write([schema.RequestRecord(run_id="k", rank=0, request_id=f"q{i}",
                                             t_arrival_ns=1, t_first_token_ns=2, t_finish_ns=3,
                                             num_prompt_tokens=1, num_output_tokens=1)])
            sent += 1
        _wait(lambda: _observed(mport) >= 100, 30)
        observed = _observed(mport)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        sink.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    t = read_trace(trace)
    kept = [r for r in t.records if isinstance(r, schema.RequestRecord)]
    assert len(t.problems) <= 1  # at most the line being written at the kill
    assert len(kept) >= observed  # everything the collector had observed was on disk
    figure("collector killed with SIGKILL", survived=True, sent=sent,
           observed_before_kill=int(observed), in_trace=len(kept), lost=sent - len(kept),
           unreadable_lines=len(t.problems))


def _up(url):
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def _observed(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('specscope_collector_events_total{event="records_observed"}'):
                return float(line.split()[-1])
    return 0.0


FULL_DISK = r'''
import json, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from specscope import schema
from specscope.collector.service import Collector
from specscope.engine.decoder import Request, SpecConfig, SpeculativeDecoder
from specscope.engine.models import tiny_pair
from specscope.io.trace import TraceWriter
from specscope.hooks import Recorder
pair = tiny_pair()
run = schema.RunRecord(run_id="full", config_id="c", algorithm="a", num_steps=3, topk=1,
                       num_verify_tokens=4, backend="cpu", model="m")
writer = TraceWriter(sys.argv[1])
collector = Collector()
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))  # the disk fills
rec = Recorder(run, sinks=[writer, collector]).start()
dec = SpeculativeDecoder(pair.target, pair.draft, SpecConfig(num_steps=3), recorder=rec)
outs = dec.generate([Request(f"r{i}", [3 + i, 5], 60, 0.7) for i in range(8)])
rec.close()
snap = collector.snapshot()
print(json.dumps({"tokens": sum(len(o.token_ids) for o in outs), "steps": dec.step_index,
                  "sink_errors": rec.num_sink_errors, "hook_errors": rec.num_hook_errors,
                  "collector_steps": sum(s.num_steps for s in snap.totals.values())}))
'''


def test_a_full_disk_loses_only_what_did_not_fit(tmp_path, figure):
    path, limit = tmp_path / "trace.jsonl", 20_000
    out = subprocess.run([sys.executable, "-c", FULL_DISK, str(path), str(limit)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["tokens"] == 8 * 60 and res["hook_errors"] == 0  # the engine never noticed
    assert res["sink_errors"] > 0  # the failing writes were counted
    assert res["collector_steps"] == res["steps"]  # the other sink got every step
    assert path.stat().st_size <= limit
    t = read_trace(path)  # what fit is readable; at most the cut line is reported
    assert len(t.problems) <= 1 and _steps(t.records)
    figure("trace disk full (20 kB limit)", survived=True, sink_write_errors=res["sink_errors"],
           steps_in_trace=len(_steps(t.records)), steps_decoded=res["steps"],
           collector_steps=res["collector_steps"])
