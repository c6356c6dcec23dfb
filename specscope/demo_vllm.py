"""``make demo DEMO_ARGS="--engine vllm"``: the demo on a real engine. Three vLLM servers (the
CPU build in ``.venv-vllm``, ``make vllm-env``) serve SmolLM2-135M: target-only, the 4-bit draft
with k = 3, and the same draft with k = 2 and a seeded silent-greedy verify (fault (a): the
verify commits the target's argmax for temperature requests while vLLM's sampling metadata still
says random; its own k keeps it a label set of its own in the collector's series).
specscope's plugin inside each sends its records to an in-process collector (and writes traces);
each server's own ``/metrics`` is scraped beside it (runs ``vllm-metrics-<name>``), so the
dashboard shows vLLM's acceptance figures next to specscope's verdicts: vLLM's acceptance looks
healthy on the faulted server while specscope flags its verify as greedy.

The fault, and a repair of vLLM 0.32 CPU's per-token temperature expansion (without it, batches
that mix greedy and sampled requests verify against uninitialised temperatures; specscope flags
that too), come from the vLLM plugin of the project's tests, which ``make vllm-env`` installs
into vLLM's environment. Ctrl-C stops everything (every server by its process group).
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from pathlib import Path
from typing import Any

#: (name, k (0: target-only), seeded fault)
CONFIGS = (("target-only", 0, ""), ("draft-k3", 3, ""), ("draft-k2-silent_greedy", 2, "silent_greedy"))
SAMPLING = ({"temperature": 0.7}, {"temperature": 0.7, "top_p": 0.9}, {"temperature": 1.0})


def _servers(opts: Any, endpoint: str) -> dict[str, Any]:
    from .engine.models import smollm2_dir, smollm2_draft_dir
    from .serving.vllm import VllmServer, speculative_config

    target, draft = smollm2_dir(), smollm2_draft_dir("int:4")
    out = Path(opts.out_dir)
    servers = {}
    for name, k, fault in CONFIGS:
        env = {"SPECSCOPE_RUN_ID": f"demo-vllm-{name}", "SPECSCOPE_TEST_FIX": "cpu_expand",
               "SPECSCOPE_RUN_FAULT": fault, "VLLM_LOG_STATS_INTERVAL": "5"}
        if fault:
            env["SPECSCOPE_TEST_FAULT"] = fault
        spec = speculative_config("draft_model", draft=draft, k=k) if k else None
        servers[name] = VllmServer(model=target, spec=spec, collector=endpoint,
                                   trace_dir=out / f"vllm-{name}", log=out / f"vllm-{name}.log",
                                   stats_every=8, env=env)
    return servers


def _drive_loop(name: str, server: Any, model: str, opts: Any, stop: threading.Event,
                status: dict[str, Any]) -> None:
    """Waves of the demo's prompts (temperatures 0.7, 0.7 with top-p 0.9, and 1.0; no top-k:
    it crashes vLLM 0.32's CPU engine under speculation) until ``stop``."""
    from .engine.workload import load_prompts
    from .serving.vllm import drive

    prompts = [p["prompt"] for p in load_prompts()]
    try:
        for wave in itertools.count():
            if stop.is_set():
                return
            first = (wave * opts.requests) % max(1, len(prompts) - opts.requests)
            drive(server.url, model, prompts[first:first + opts.requests], sampling=SAMPLING,
                  concurrency=4, max_tokens=opts.max_new_tokens, seed=wave * 1000)
            status[name] = wave + 1
    except Exception as exc:  # a server that went away: shown by the main thread
        if not stop.is_set():
            status["error"] = f"{name}: {exc!r}"


def run_vllm_demo(opts: Any) -> int:
    from .collector.service import Collector
    from .dashboard.app import create_app, serve
    from .dashboard.data import LiveSource
    from .exporters.http import MetricsServer
    from .io.transport import ZmqReceiver
    from .scrape import Endpoint, scrape
    from .serving.vllm import vllm_python

    if vllm_python() is None:
        print("vLLM's environment is missing: run `make vllm-env` first", flush=True)
        return 2
    out = Path(opts.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    collector = Collector(window_s=5.0, num_windows=120).start()
    receiver = ZmqReceiver(collector, f"tcp://{opts.host}:0").start()
    metrics = MetricsServer(collector, host=opts.host, port=opts.metrics_port).start()
    servers = _servers(opts, receiver.endpoint)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    threads: list[threading.Thread] = []
    status: dict[str, Any] = {}
    t0 = time.monotonic()
    try:
        print("starting three vLLM servers (about a minute each on two cores) ...", flush=True)
        for name, srv in servers.items():
            if stop.is_set():
                return 1
            srv.start()
            print(f"vLLM {name:<24} {srv.url}  (log {srv.log})", flush=True)
        app = create_app(LiveSource(collector, "demo-vllm", traces=[out],
                                      trace_refresh_s=opts.trace_refresh_s),
                         title="specscope demo on vLLM", refresh_s=3.0)
        dash_server = serve(app, opts.host, opts.dashboard_port)
        print(f"dashboard   http://{opts.host}:{dash_server.server_port}/", flush=True)
        print(f"metrics     {metrics.url}", flush=True)
        model = str(servers["target-only"].model)
        for name, srv in servers.items():
            ep = Endpoint(srv.url + "/metrics", name=f"vllm-metrics-{name}")
            threads.append(threading.Thread(
                target=scrape, args=([ep], out / f"vllm-metrics-{name}.jsonl"),
                kwargs={"interval_s": 5.0, "stop": stop, "on_records": collector.write},
                daemon=True))
            threads.append(threading.Thread(target=_drive_loop, daemon=True,
                                            args=(name, srv, model, opts, stop, status)))
        for t in threads:
            t.start()
        flagged = False
        while not stop.wait(1.0):
            if "error" in status:
                print(f"workload failed: {status['error']}", flush=True)
                break
            if not flagged and "silent_greedy" in {a.kind for _, a in
                                                   collector.snapshot().anomalies}:
                print(f"silent greedy flagged after {time.monotonic() - t0:.0f} s (vLLM's own "
                      "acceptance figures stay in range: compare the vllm-metrics-* runs)",
                      flush=True)
                flagged = True
            if opts.duration_s is not None and time.monotonic() - t0 >= opts.duration_s:
                break
        stop.set()
        dash_server.shutdown()
    finally:
        stop.set()
        for srv in servers.values():
            srv.stop()
        receiver.close()
        metrics.close()
        collector.close()
    waves = {name: status.get(name, 0) for name in servers}
    print(f"stopped after {time.monotonic() - t0:.0f} s; waves per server: {waves}; traces in "
          f"{opts.out_dir}/", flush=True)
    return 1 if "error" in status else 0
