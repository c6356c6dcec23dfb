"""Engine /metrics pages served for tests: a real page whose spec-decode counters advance as
each test says, on 127.0.0.1, started and stopped by the test."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from specscope.serving.harness import free_port

TOTAL = re.compile(r"^(vllm:spec_decode_\w+_total\{[^}]*\}) (\S+)$", re.M)


@contextlib.contextmanager
def serving(page_of):
    """A /metrics server on 127.0.0.1 whose n-th page (from 0) is ``page_of(n)``; its URL."""
    pages = itertools.count()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = page_of(next(pages)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/metrics"
    finally:
        srv.shutdown()
        srv.server_close()


def scaled(page: str, factor) -> str:
    """The page with every spec-decode counter times ``factor(name)``."""
    return TOTAL.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * factor(m.group(1))}", page)


COUNTER_LINE = re.compile(r"^(\S+?(?:_total|_bucket|_sum|_count)(?:\{[^}]*\})?) (\S+)$", re.M)


def advanced(page: str, factor: float) -> str:
    """The page with every counter and histogram series (not gauges, not ``*_created``) times
    ``factor``: an engine that did ``factor`` times the page's work."""
    return COUNTER_LINE.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * factor}", page)


def trtllm_page(drafted, accepted, acceptance_length, per_pos=None, overhead=None,
                spec_config=None) -> str:
    """A TensorRT-LLM ``/prometheus/metrics`` page as prometheus_client renders the families
    its collector registers (``tensorrt_llm/metrics/collector.py``: names, ``model_name`` /
    ``engine_type`` labels, ``token_position``, its TTFT buckets)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    reg = CollectorRegistry()
    labels = {"model_name": "nemotron-nano", "engine_type": "trtllm"}
    Counter("trtllm_spec_decode_num_draft_tokens", "d", list(labels), registry=reg
            ).labels(**labels).inc(drafted)
    Counter("trtllm_spec_decode_num_accepted_tokens", "a", list(labels), registry=reg
            ).labels(**labels).inc(accepted)
    Gauge("trtllm_spec_decode_acceptance_length", "l", list(labels), registry=reg
          ).labels(**labels).set(acceptance_length)
    if overhead is not None:
        Gauge("trtllm_spec_decode_draft_overhead", "o", list(labels), registry=reg
              ).labels(**labels).set(overhead)
    if spec_config is not None:  # an info gauge: the configuration in its labels, value 1
        info = {**labels, **spec_config}
        Gauge("trtllm_speculative_config_info", "i", list(info), registry=reg).labels(**info).set(1)
    for name, xs in (("time_to_first_token_seconds", (0.03, 0.05, 0.07, 0.2)),
                     ("time_per_output_token_seconds", (0.012, 0.02, 0.03)),
                     ("e2e_request_latency_seconds", (0.9, 1.7, 2.2))):
        h = Histogram("trtllm_" + name, "t", list(labels), registry=reg,
                      buckets=[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0])
        for x in xs:
            h.labels(**labels).observe(x)
    if per_pos:
        dr = Counter("trtllm_spec_decode_drafted_tokens", "d", [*labels, "token_position"], registry=reg)
        ac = Counter("trtllm_spec_decode_accepted_tokens", "a", [*labels, "token_position"], registry=reg)
        for pos, (d, a) in enumerate(per_pos):
            dr.labels(**labels, token_position=str(pos)).inc(d)
            ac.labels(**labels, token_position=str(pos)).inc(a)
    return generate_latest(reg).decode()


def llamacpp_page(drafts, drafted, accepted, per_pos=()) -> str:
    """A llama.cpp server page as its ``/metrics`` handler prints it: HELP, TYPE and value per
    family, the spec-decode counters of ggml-org/llama.cpp pull 26389 (vLLM's names under
    ``llamacpp:``), no labels but the zero-based ``position`` of the per-position counter."""
    out = []
    for name, v in (("prompt_tokens_total", 512), ("tokens_predicted_total", 2048),
                    ("spec_decode_num_draft_tokens_total", drafted),
                    ("spec_decode_num_accepted_tokens_total", accepted),
                    ("spec_decode_num_drafts_total", drafts)):
        out += [f"# HELP llamacpp:{name} x", f"# TYPE llamacpp:{name} counter", f"llamacpp:{name} {v}"]
    out += ["# HELP llamacpp:requests_processing x", "# TYPE llamacpp:requests_processing gauge",
            "llamacpp:requests_processing 1"]
    if per_pos:
        out += ["# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total x",
                "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter"]
        out += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
                for i, v in enumerate(per_pos)]
    return "\n".join(out) + "\n"


def sglang_spec(verify, generated_stream, generated_batch, length, rate, steps=None,
                dp_lengths=None, cap=None) -> str:
    """SGLang's spec-decode families as prometheus_client renders them, with the labels its
    collectors are given (``python/sglang/srt/metrics/collector.py`` and the scheduler that
    builds its labels): the tokenizer's counters and histograms under ``model_name`` (the
    generated-token counter split by ``is_streaming``; the per-token inter-token latency
    histogram), the scheduler's gauges under ``model_name``, ``engine_type``, ``tp_rank``,
    ``pp_rank`` and ``moe_ep_rank``. With ``dp_lengths`` (data-parallel attention) each rank's
    scheduler reports its own acceptance length under ``dp_rank`` (and its own ``tp_rank``)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    reg = CollectorRegistry()
    m = {"model_name": "meta-llama/Llama-3.1-8B-Instruct"}
    Counter("sglang:spec_verify_calls", "v", list(m), registry=reg).labels(**m).inc(verify)
    gen = Counter("sglang:generation_tokens", "g", [*m, "is_streaming"], registry=reg)
    gen.labels(**m, is_streaming="true").inc(generated_stream)
    gen.labels(**m, is_streaming="false").inc(generated_batch)
    sched = {**m, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    ranks = [dict(sched)] if dp_lengths is None else [
        {**sched, "tp_rank": str(r), "moe_ep_rank": str(r), "dp_rank": str(r)} for r in range(len(dp_lengths))]
    lengths = [length] if dp_lengths is None else list(dp_lengths)
    g_len = Gauge("sglang:spec_accept_length", "l", list(ranks[0]), registry=reg)
    g_rate = Gauge("sglang:spec_accept_rate", "r", list(ranks[0]), registry=reg)
    for labels, x in zip(ranks, lengths):
        g_len.labels(**labels).set(x)
        g_rate.labels(**labels).set(rate)
    itl = Histogram("sglang:inter_token_latency_seconds", "i", list(m), registry=reg,
                    buckets=[0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03])
    for x in (0.005, 0.007, 0.009):
        itl.labels(**m).observe(x)
    if steps is not None:
        g_steps = Gauge("sglang:spec_num_steps", "s", list(ranks[0]), registry=reg)
        for labels in ranks:
            g_steps.labels(**labels).set(steps)
    if cap is not None:  # (cap length, block accept length): DSpark's confidence-scheduled window
        for name, x in zip(("sglang:spec_cap_length", "sglang:spec_block_accept_length"), cap):
            g = Gauge(name, "c", list(ranks[0]), registry=reg)
            for labels in ranks:
                g.labels(**labels).set(x)
    return generate_latest(reg).decode()


PROMETHEUS = shutil.which("prometheus")


def query(port: int, expr: str) -> list[dict]:
    """An instant PromQL query against the Prometheus on 127.0.0.1:``port``."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        data = json.loads(r.read())
    assert data["status"] == "success", data
    return data["data"]["result"]


def stop(proc: subprocess.Popen) -> None:
    """Stop a process started by a test, by its PID."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


@contextlib.contextmanager
def prometheus_scraping(tmp_path, urls, samples_each: int = 4, job: str = "engines"):
    """Debian's Prometheus on 127.0.0.1 scraping ``urls`` every second, until each target has
    ``samples_each`` scrapes; its port. Stopped by its PID on exit."""
    port = free_port()
    targets = ", ".join(f"'{urllib.parse.urlsplit(u).netloc}'" for u in urls)
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n"
                      f"  - job_name: {job}\n    static_configs:\n      - targets: [{targets}]\n")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if len(query(port, f"count_over_time(up[1m]) >= {samples_each}")) >= len(urls):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        yield port
    finally:
        stop(proc)
