"""The ``scrape`` command: a thin shell over ``specscope.scrape``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any


def _cmd_scrape(args: argparse.Namespace) -> int:
    from ..scrape import Endpoint, baseline_stats, scrape, targets_from_file

    endpoints = [Endpoint(u) for u in args.urls]
    if args.targets:
        endpoints += targets_from_file(args.targets)
    headers = {}
    for h in args.header:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            print(f"--header {h!r}: expected NAME: VALUE", file=sys.stderr)
            return 2
        headers[name.strip()] = value.strip()
    from ..collector.detectors import (DEFAULT_DETECTORS, AcceptanceLengthBoundsDetector,
                                       AcceptanceRegressionDetector)
    from ..collector.service import Collector

    detectors: tuple[Any, ...] = DEFAULT_DETECTORS
    if args.baseline:
        try:
            name, base = baseline_stats(args.baseline, args.baseline_run)
        except (OSError, ValueError) as exc:
            print(f"specscope scrape: --baseline {exc}", file=sys.stderr)
            return 2
        print(f"baseline: run {name} of {args.baseline} ({base.num_drafts} drafts)", file=sys.stderr)
        detectors = DEFAULT_DETECTORS + (AcceptanceRegressionDetector(baseline=base, min_drafts=200),)
    # the detectors the counters allow run live on every round (acceptance against the run's
    # trailing windows and the baseline, per-position collapse, acceptance length pinned near 1
    # or near k + 1); a new finding is printed once, when it starts
    from .otlp import otlp_sink, report_otlp

    otlp = otlp_sink(args)
    collector = Collector(window_s=max(args.interval, 1.0), detectors=detectors,
                          bounds=AcceptanceLengthBoundsDetector(), sinks=[otlp] if otlp else ())
    server, seen = None, set()

    def on_records(records: list) -> None:
        collector.observe(records)
        for key, a in collector.tick():
            if (key, a.kind) not in seen:
                seen.add((key, a.kind))
                print(f"anomaly {a.kind} ({a.severity}) in {a.run_id or key.model or 'run'}: "
                      f"{a.message}", file=sys.stderr)

    if args.metrics_port is not None:
        from ..exporters.http import MetricsServer

        server = MetricsServer(collector, host=args.metrics_host, port=args.metrics_port).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        res = scrape(endpoints, args.output, interval_s=args.interval, duration_s=args.duration,
                     timeout_s=args.timeout, max_bytes=args.max_bytes, headers=headers,
                     verify_tls=not args.insecure, ca_file=args.ca_file, on_records=on_records,
                     stop=stop)
    except KeyboardInterrupt:
        return 130
    except ValueError as exc:
        print(f"specscope scrape: {exc}", file=sys.stderr)
        return 2
    finally:
        if server is not None:
            server.close()
        collector.close()
        report_otlp(otlp)
    for ep in res.endpoints:
        runs = ", ".join(sorted(ep.runs.values())) or "no spec-decode series"
        print(f"{ep.url}: {ep.scrapes} scrapes, {ep.failures} failed; runs: {runs}")
    print(f"{res.rounds} rounds, {res.records} records written to {args.output}")
    return 0 if any(ep.scrapes > ep.failures for ep in res.endpoints) else 1


def register(sub) -> None:
    p = sub.add_parser(
        "scrape", help="poll running engines' Prometheus /metrics pages and record a trace",
        description="Poll engines' Prometheus pages (vLLM and SGLang /metrics, TensorRT-LLM "
        "/prometheus/metrics, llama.cpp /metrics; concurrently, every --interval seconds) and "
        "record their spec-decode counters as windows: the first scrape is the baseline, a "
        "counter that goes down is a restart, SGLang's gauges are kept as reported. Each "
        "endpoint x label set (vLLM engine, SGLang dp_rank, model; a llama.cpp router's "
        "?model= page) is its own run. The trace is written as it goes; report, compare, "
        "regress and the dashboard read it. Live, a new finding is printed once: acceptance "
        "against the run's trailing windows (and --baseline), per-position collapse, "
        "acceptance length pinned near 1 or near k+1 (a sign of looping output). Stops after "
        "--duration, or on Ctrl-C / SIGTERM.")
    p.add_argument("urls", nargs="*", help="endpoints, e.g. http://vllm:8000/metrics")
    from .otlp import add_otlp_flags

    add_otlp_flags(p)
    p.add_argument("--targets", default=None, help="a Prometheus file-discovery targets file "
                   "(JSON or YAML list of {targets: [host:port], labels: {...}})")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between scrapes (default 5)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--timeout", type=float, default=3.0, help="per-endpoint timeout, seconds")
    p.add_argument("--max-bytes", type=int, default=8 << 20, help="cap on one page (default 8 MiB)")
    p.add_argument("--header", action="append", default=[], metavar="NAME: VALUE",
                   help="a request header, e.g. 'Authorization: Bearer TOKEN' (repeatable)")
    p.add_argument("--insecure", action="store_true", help="https without verifying the certificate")
    p.add_argument("--ca-file", default=None, help="CA bundle for https endpoints")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="re-export what is scraped under specscope's names on this port")
    p.add_argument("--metrics-host", default="127.0.0.1")
    p.add_argument("--baseline", default=None, metavar="TRACE",
                   help="a trace whose run is the baseline: acceptance (per position where the "
                   "engine counts it) falling against it is flagged live")
    p.add_argument("--baseline-run", default=None, metavar="RUN",
                   help="the baseline run, where the trace holds several")
    p.add_argument("-o", "--output", default="specscope-scrape.jsonl",
                   help="the trace: Parquet (a directory) for a .parquet name, JSONL otherwise")
    p.set_defaults(func=_cmd_scrape)
