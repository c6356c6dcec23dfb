"""The wire between processes, measured the way an engine produces data.

One process holds a ``Recorder`` recording verify steps of batch 256 (one request leaving and
one joining per step; sampling parameters in host numpy arrays, as vLLM keeps them) and
draining them through its wire sink on the drain thread; ZeroMQ carries them to ``specscope serve`` in another
process, which aggregates them. The figure is verify entries per second end to end (first
record to the collector having observed the last entry), columnar vs the previous JSON format
in the same run, arms interleaved. Beside it, the engine-side cost per verify step: the hot
path (``record_verify``) and the drain thread's CPU time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

from .common import Row, _spread

BATCH = 256

ENGINE = r"""
import json, sys, time
import numpy as np
import torch
from specscope import schema
from specscope.hooks import Recorder
from specscope.io.transport import ZmqSink

endpoint, fmt, steps, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
run = schema.RunRecord(run_id=f"wire-{fmt}-{time.time_ns()}", config_id=f"wire-{fmt}",
                       algorithm="eagle", num_steps=3, topk=1, num_verify_tokens=4,
                       backend="cpu", model="bench", verify_mode=schema.SPECULATIVE_SAMPLING)
drain_ns = [0]


class Timed(Recorder):
    def flush(self, wait=False):
        t = time.thread_time_ns()
        try:
            return super().flush(wait)
        finally:
            drain_ns[0] += time.thread_time_ns() - t


sink = ZmqSink(endpoint, format=fmt, high_water_mark=1_000_000, linger_s=600)
rec = Timed(run, max_batch=batch, ring_slots=2048, sinks=[sink],
            stats_policy=lambda step: False).start()
ids = [f"cmpl-{i:08x}" for i in range(batch)]
temps = np.full(batch, 0.7)
top_p = np.ones(batch)
top_k = np.zeros(batch, dtype=np.int64)
g = torch.Generator().manual_seed(0)
accepted = [torch.randint(0, 4, (batch,), generator=g) for _ in range(16)]
hot_ns = 0
t0 = time.time_ns()
for s in range(steps):
    # continuous batching: a request leaves and another joins every step
    ids[s % batch] = f"cmpl-{s + batch:08x}"
    temps[s % batch] = 0.1 * (s % 10)
    a = time.perf_counter_ns()
    rec.record_verify(request_ids=ids, num_accepted=accepted[s % 16], num_drafted=3,
                      temperature=temps, top_p=top_p, top_k=top_k, draft_depth=3)
    hot_ns += time.perf_counter_ns() - a
    while len(rec._free) < 64:  # a full ring: wait as an engine waits on its GPU, not drop
        time.sleep(0.0005)
t1 = time.time_ns()
rec.close()
print(json.dumps({"t0_ns": t0, "t1_ns": t1, "hot_us": hot_ns / steps / 1e3,
                  "drain_us": drain_ns[0] / steps / 1e3, "dropped": sink.num_dropped,
                  "ring_full": rec.num_dropped_ring_full, "errors": rec.num_hook_errors,
                  "sink_errors": rec.num_sink_errors}), flush=True)
"""


def _observed(url: str) -> int:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    m = re.search(r'specscope_collector_events_total\{event="verify_entries_observed"\} (\S+)', text)
    return int(float(m.group(1))) if m else 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _arm(fmt: str, steps: int, endpoint: str, metrics: str) -> dict:
    base = _observed(metrics)
    n = steps * BATCH
    # the engine prints its figures once its recorder has closed; the collector is watched from
    # then on (not after the engine's interpreter has torn down)
    proc = subprocess.Popen([sys.executable, "-c", ENGINE, endpoint, fmt, str(steps), str(BATCH)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=60)
        raise RuntimeError(proc.stderr.read()[-2000:])
    out = json.loads(line)
    expected = (steps - out["ring_full"]) * BATCH - out["dropped"]
    last, t_last = -1, time.time()
    while True:  # until the collector has all of it, or nothing arrived for 5 s
        got = _observed(metrics) - base
        if got >= expected:
            break
        if got != last:
            last, t_last = got, time.time()
        elif time.time() - t_last > 5:
            break
        time.sleep(0.01)
    t_end = time.time_ns()
    proc.wait(timeout=120)
    out["entries_per_s"] = got / ((t_end - out["t0_ns"]) / 1e9)
    out["engine_s"] = (out["t1_ns"] - out["t0_ns"]) / 1e9
    out["total_s"] = (t_end - out["t0_ns"]) / 1e9
    out["observed"] = got
    out["sent"] = n
    return out


def bench_wire(reps: int) -> list[Row]:
    port, mport = _free_port(), _free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    metrics = f"http://127.0.0.1:{mport}/metrics"
    serve = subprocess.Popen([sys.executable, "-m", "specscope", "serve", "--listen", endpoint,
                              "--metrics-port", str(mport)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                _observed(metrics)
                break
            except OSError:
                time.sleep(0.1)
        steps = {"columnar": 20_000, "json": 400}  # the JSON arm is ~100x slower: fewer steps
        _arm("columnar", 500, endpoint, metrics)  # warm-up
        results: dict[str, list[dict]] = {"columnar": [], "json": []}
        for _ in range(max(3, reps)):
            for fmt in ("columnar", "json"):
                results[fmt].append(_arm(fmt, steps[fmt], endpoint, metrics))
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(serve.pid, signal.SIGKILL)
    col = [r["entries_per_s"] for r in results["columnar"]]
    js = [r["entries_per_s"] for r in results["json"]]
    c, j = statistics.median(col), statistics.median(js)
    lost = {fmt: sum(r["sent"] - r["observed"] for r in rs) for fmt, rs in results.items()}
    hot = statistics.median(r["hot_us"] for r in results["columnar"])
    drain = statistics.median(r["drain_us"] for r in results["columnar"])
    hot_j = statistics.median(r["hot_us"] for r in results["json"])
    drain_j = statistics.median(r["drain_us"] for r in results["json"])
    rows = [
        Row(f"wire end to end: Recorder (batch {BATCH}) -> wire sink on the drain thread -> "
            "ZeroMQ -> `specscope serve` aggregating, verify entries/s, columnar vs the JSON "
            f"format (entries lost: {lost['columnar']} / {lost['json']})",
            f"{c / 1e6:.2f} M/s", f"{j / 1e3:.0f} k/s", f"{c / j:.1f}x", "≥ 2 M/s and ≥ 8x",
            "met" if c >= 2e6 and c / j >= 8 and not any(lost.values()) else "not met",
            f"{_spread(col)} / {_spread(js)}"),
        Row(f"engine-side cost per verify step of batch {BATCH} (CPU tensors): hot path "
            "record_verify + drain thread CPU, columnar vs JSON",
            f"{hot:.1f} + {drain:.1f} µs", f"{hot_j:.1f} + {drain_j:.1f} µs",
            f"{(hot + drain) / (hot_j + drain_j):.2f}x", "(reported)", "—",
            _spread([r["hot_us"] + r["drain_us"] for r in results["columnar"]])),
    ]
    return rows
