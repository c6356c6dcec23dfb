"""``make demo``: the reference decoder on SmolLM2 with four configurations (EAGLE-style
k = 3 with k = 2 at a full batch, k = 2 with a seeded silent-greedy fault that fires only when
more than two requests verify together, target-only, and
prompt lookup (n-gram, k up to 4), the cheap drafter that wins on the copy, edit and refactor
prompts), an
in-process collector with its /metrics, a Prometheus server scraping it (when installed), a
small sweep of the ``tiny`` model in a background process (niced by 5: the Sweep page, the
config advisor and ``explain`` fill from it), and the dashboard over the live collector, which
reads the demo's own traces for what the collector does not keep (per-request records and
latencies, phases). Ctrl-C stops everything.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class DemoOptions:
    model: str = "smollm2"
    out_dir: str = "demo"
    host: str = "127.0.0.1"
    dashboard_port: int = 8050
    metrics_port: int = 9400
    prometheus_port: int = 9090
    prometheus: bool = True
    duration_s: float | None = None
    requests: int = 8
    max_new_tokens: int = 48
    temperature: float = 0.7
    sweep: bool = True  #: run the tiny-model sweep in the background
    engine: str = "reference"  #: "reference" (the embedded decoder) or "vllm" (demo_vllm)
    waves: int | None = None  #: stop decoding after this many waves (the servers stay up)
    trace_refresh_s: float = 30.0  #: how often the dashboard re-reads the traces (requests, sweep)


#: the long-context prompts (384 to 3,072 tokens) come last: one in about every wave from the
#: second on, so acceptance by context length grows a bucket at a time
DEMO_CATEGORIES = ("copy", "edit", "refactor", "math", "qa", "chat", "translation",
                   "summarization", "code", "rag", "long")


def _configs():
    from .engine.decoder import SpecConfig

    # k by running batch, as vLLM's per-batch-size speculative tokens: 2 at a full wave of 8,
    # 3 once requests finish (the Live page draws k over time under acceptance)
    return [SpecConfig(algorithm="eagle", num_steps=3, policy="batch:1=3,8=2"),
            # silent greedy only while more than two requests verify together: the by-batch
            # figures fail its large classes and pass its small ones
            SpecConfig(algorithm="eagle", num_steps=2, fault="silent_greedy_batch_gt2"),
            SpecConfig(num_steps=0),  # target-only: the baseline of speedups and categories
            # no draft model: drafting costs a lookup, so speculation pays where text repeats
            SpecConfig(algorithm="ngram", num_steps=4)]


def _engine_loop(opts: DemoOptions, collector: Any, stop: threading.Event,
                 status: dict[str, Any]) -> None:
    """Waves of requests, alternating configurations, until ``stop``; checks it every step."""
    from .engine.decoder import SpeculativeDecoder
    from .engine.models import load_pair
    from .engine.workload import WorkloadSpec, build_requests, detokenizer, eval_records, run_record
    from .io.trace import TraceWriter
    from .hooks import Recorder

    pair = load_pair(opts.model)
    out = Path(opts.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # every category in turn, the repetitive ones (where prompt lookup pays) first, so that
    # each of them has two requests to compare after two waves
    spec = WorkloadSpec(requests=opts.requests, max_new_tokens=opts.max_new_tokens,
                        temperature=opts.temperature, mix=True, categories=DEMO_CATEGORIES)
    decoders = []
    for cfg in _configs():
        name = cfg.config_id + (f"-{cfg.fault}" if cfg.fault else "")
        writer = TraceWriter(out / f"{name}.jsonl")
        rec = Recorder(run_record(f"demo-{name}", pair, cfg, "measured", {"demo": "1"}),
                       sinks=[collector, writer]).start()
        decoders.append((SpeculativeDecoder(pair.target, pair.draft, cfg, recorder=rec,
                                            eos_ids=pair.eos_ids, detokenize=detokenizer(pair)),
                         rec, writer))
    status["ready"] = True
    try:
        for wave in itertools.count():
            outs = []
            for dec, _, _ in decoders:  # each wave: the next prompts, every category in turn
                reqs, prompts = build_requests(pair, dataclasses.replace(spec, first=wave * spec.requests))
                for r in reqs:
                    r.request_id = f"w{wave}-{r.request_id}"
                batch = dec.new_batch()
                done = {o.request_id: o for o in dec.admit(batch, reqs)}
                while batch.rows and not stop.is_set():
                    done.update((o.request_id, o) for o in dec.step(batch))
                if stop.is_set():
                    return
                outs.append([done[r.request_id] for r in reqs])
            # the wave's eval records: format, answer and repetition per request; greedy
            # requests' exact match against the target-only run's output of the same prompt
            ref = next(o for (dec, _, _), o in zip(decoders, outs) if not dec.cfg.num_steps)
            for (dec, rec, writer), o in zip(decoders, outs):
                evals = eval_records(rec.run.run_id, pair, o, prompts, reqs,
                                     ref if dec.cfg.num_steps else None)
                for sink in (collector, writer):
                    sink.write(evals)
            status["waves"] = wave + 1
            if opts.waves is not None and wave + 1 >= opts.waves:
                print(f"decoded {wave + 1} waves; the dashboard stays up (Ctrl-C stops it)",
                      flush=True)
                return
    except Exception as exc:  # shown by the main thread
        status["error"] = repr(exc)
    finally:
        for _, rec, _ in decoders:
            rec.close()


def _start_prometheus(opts: DemoOptions, tmp: Path) -> subprocess.Popen | None:
    exe = shutil.which("prometheus")
    if not opts.prometheus or exe is None:
        return None
    cfg = tmp / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 2s\nscrape_configs:\n  - job_name: specscope\n"
                   f"    static_configs:\n      - targets: ['127.0.0.1:{opts.metrics_port}']\n")
    return subprocess.Popen([exe, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address={opts.host}:{opts.prometheus_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


#: the background sweep: the tiny model (labelled so in its run ids), target-only and three
#: chain depths at concurrency 4, short outputs: four points, each a serve-engine process of
#: its own (~1 minute a point beside the live decoding on two cores)
SWEEP_ARGS = ("--model", "tiny", "--spec", "3/1/4", "2/1/3", "1/1/2", "--concurrency", "4",
              "--requests", "8", "--lengths", "0:32", "--quiet")


def _start_sweep(opts: DemoOptions) -> subprocess.Popen | None:
    if not opts.sweep:
        return None
    import os
    import sys

    out = Path(opts.out_dir) / "sweep"
    out.mkdir(parents=True, exist_ok=True)
    with open(Path(opts.out_dir) / "sweep.log", "w", encoding="utf-8") as log:
        # its own session: stopping the demo stops the sweep's serve-engine children with it
        return subprocess.Popen([sys.executable, "-m", "specscope", "sweep", *SWEEP_ARGS,
                                 "-o", str(out)], stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: os.nice(5), start_new_session=True)


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to a process and everything it started (its session); SIGKILL after 10 s."""
    import os

    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, so only live members keep the group
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_demo(opts: DemoOptions) -> int:
    if opts.engine == "vllm":
        from .demo_vllm import run_vllm_demo

        return run_vllm_demo(opts)
    from .collector.service import Collector
    from .dashboard.app import create_app, serve
    from .dashboard.data import LiveSource
    from .exporters.http import MetricsServer

    collector = Collector(window_s=5.0, num_windows=120).start()
    metrics = MetricsServer(collector, host=opts.host, port=opts.metrics_port).start()
    out = Path(opts.out_dir)
    app = create_app(LiveSource(collector, "demo", traces=[out, out / "sweep"],
                                    trace_refresh_s=opts.trace_refresh_s),
                     title="specscope demo", refresh_s=3.0)
    dash_server = serve(app, opts.host, opts.dashboard_port)
    tmp = Path(tempfile.mkdtemp(prefix="specscope-demo-"))
    prom = _start_prometheus(opts, tmp)
    sweep = _start_sweep(opts)
    stop = threading.Event()
    status: dict[str, Any] = {}
    engine = threading.Thread(target=_engine_loop, args=(opts, collector, stop, status),
                              name="specscope-demo-engine", daemon=True)
    engine.start()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"dashboard   http://{opts.host}:{dash_server.server_port}/", flush=True)
    print(f"metrics     {metrics.url}", flush=True)
    print(f"prometheus  http://{opts.host}:{opts.prometheus_port}/" if prom else
          "prometheus  not started (not installed, or --no-prometheus)", flush=True)
    swept = f"; a tiny-model sweep into {opts.out_dir}/sweep/" if sweep else ""
    print(f"traces      {opts.out_dir}/ ; decoding {opts.model}: k = 3 (2 at a full batch), k = 2 "
          f"with a seeded silent-greedy fault in batches over 2, target-only, and n-gram prompt lookup (k <= 4){swept}. Ctrl-C stops everything.",
          flush=True)
    t0 = time.monotonic()
    flagged = False
    while not stop.wait(1.0):
        if "error" in status:
            print(f"engine failed: {status['error']}", flush=True)
            break
        if not flagged:
            active = {a.kind for _, a in collector.snapshot().anomalies}
            if "silent_greedy" in active:
                print(f"silent greedy flagged after {time.monotonic() - t0:.0f} s", flush=True)
                flagged = True
        if opts.duration_s is not None and time.monotonic() - t0 >= opts.duration_s:
            break
    stop.set()
    engine.join(timeout=60)
    dash_server.shutdown()
    metrics.close()
    if sweep is not None:
        _stop_group(sweep)
    if prom is not None and prom.poll() is None:
        prom.send_signal(signal.SIGTERM)
        try:
            prom.wait(10)
        except subprocess.TimeoutExpired:
            prom.kill()
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"stopped after {time.monotonic() - t0:.0f} s; waves completed: "
          f"{status.get('waves', 0)}; traces in {opts.out_dir}/", flush=True)
    return 1 if "error" in status else 0
