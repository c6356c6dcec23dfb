"""``make demo``: the reference decoder on SmolLM2 with two configurations (one with a seeded
silent-greedy fault), an in-process collector with its /metrics, a Prometheus server scraping it
(when installed), and the dashboard over the live collector. Ctrl-C stops everything.
"""

from __future__ import annotations

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


def _configs():
    from .engine.decoder import SpecConfig

    return [SpecConfig(algorithm="eagle", num_steps=3),
            SpecConfig(algorithm="eagle", num_steps=2, fault="silent_greedy")]


def _engine_loop(opts: DemoOptions, collector: Any, stop: threading.Event,
                 status: dict[str, Any]) -> None:
    """Waves of requests, alternating configurations, until ``stop``; checks it every step."""
    from .engine.decoder import SpeculativeDecoder
    from .engine.models import load_pair
    from .engine.workload import WorkloadSpec, build_requests, run_record
    from .io.trace import TraceWriter
    from .hooks import Recorder

    pair = load_pair(opts.model)
    out = Path(opts.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = WorkloadSpec(requests=opts.requests, max_new_tokens=opts.max_new_tokens,
                        temperature=opts.temperature)
    decoders = []
    for cfg in _configs():
        name = cfg.config_id + (f"-{cfg.fault}" if cfg.fault else "")
        writer = TraceWriter(out / f"{name}.jsonl")
        rec = Recorder(run_record(f"demo-{name}", pair, cfg, "measured", {"demo": "1"}),
                       sinks=[collector, writer]).start()
        decoders.append((SpeculativeDecoder(pair.target, pair.draft, cfg, recorder=rec,
                                            eos_ids=pair.eos_ids), rec, writer))
    status["ready"] = True
    try:
        for wave in itertools.count():
            for dec, _, _ in decoders:
                reqs, _ = build_requests(pair, spec)
                for r in reqs:
                    r.request_id = f"w{wave}-{r.request_id}"
                batch = dec.new_batch()
                dec.admit(batch, reqs)
                while batch.rows and not stop.is_set():
                    dec.step(batch)
                if stop.is_set():
                    return
            status["waves"] = wave + 1
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


def run_demo(opts: DemoOptions) -> int:
    from .collector.service import Collector
    from .dashboard.app import create_app, serve
    from .dashboard.data import LiveSource
    from .exporters.http import MetricsServer

    collector = Collector(window_s=5.0, num_windows=120).start()
    metrics = MetricsServer(collector, host=opts.host, port=opts.metrics_port).start()
    app = create_app(LiveSource(collector, "demo"), title="specscope demo", refresh_s=3.0)
    dash_server = serve(app, opts.host, opts.dashboard_port)
    tmp = Path(tempfile.mkdtemp(prefix="specscope-demo-"))
    prom = _start_prometheus(opts, tmp)
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
    print(f"traces      {opts.out_dir}/ ; decoding {opts.model}: two configurations, the second "
          "with a seeded silent-greedy fault. Ctrl-C stops everything.", flush=True)
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
    if prom is not None:
        prom.send_signal(signal.SIGTERM)
        try:
            prom.wait(10)
        except subprocess.TimeoutExpired:
            prom.kill()
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"stopped after {time.monotonic() - t0:.0f} s; waves completed: "
          f"{status.get('waves', 0)}; traces in {opts.out_dir}/", flush=True)
    return 1 if "error" in status else 0
