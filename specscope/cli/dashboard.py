"""``specscope dashboard`` and ``specscope demo``."""

from __future__ import annotations

import argparse


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from ..dashboard import MetricsSource, TraceSource, run_dashboard
    from ..dashboard.data import load_accuracy

    if sum(bool(x) for x in (args.trace, args.live, args.prometheus)) != 1:
        raise ValueError("give trace files/directories, or --live URL, or --prometheus URL")
    source: MetricsSource | TraceSource
    if args.live:
        source = MetricsSource(args.live)
    elif args.prometheus:
        source = MetricsSource(args.prometheus, prometheus=True)
    else:
        from .traces import where_of

        source = TraceSource(args.trace, roots=args.trace_root or None, where=where_of(args))
    auth = tuple(args.basic_auth.split(":", 1)) if args.basic_auth else None
    accuracy = {}
    for path in args.accuracy or []:
        accuracy.update(load_accuracy(path))
    return run_dashboard(source, host=args.host, port=args.port, accuracy=accuracy,
                         basic_auth=auth, n_boot=args.bootstrap)


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import DemoOptions, run_demo

    return run_demo(DemoOptions(model=args.model, out_dir=args.output, host=args.host,
                                dashboard_port=args.port, metrics_port=args.metrics_port,
                                duration_s=args.duration, requests=args.requests,
                                max_new_tokens=args.max_new_tokens, prometheus=not args.no_prometheus,
                                sweep=not args.no_sweep, engine=args.engine, waves=args.waves,
                                trace_refresh_s=args.trace_refresh))


def register(sub) -> None:
    d = sub.add_parser("dashboard", help="the Dash dashboard over traces, a live /metrics "
                       "endpoint or a Prometheus server",
                       description="Pages: live overview, sampling truth, compare (bootstrap "
                       "intervals), sweep (Pareto fronts, eval gates, config advisor), "
                       "regression, profile, accuracy. Binds 127.0.0.1 unless --host is given.")
    d.add_argument("trace", nargs="*", help="JSONL traces, Parquet trace directories, or "
                   "directories of traces (a sweep directory)")
    d.add_argument("--live", default=None, metavar="URL", help="a /metrics URL, polled: specscope's own, or an engine's (vLLM, SGLang, "
                   "TensorRT-LLM, llama.cpp)")
    d.add_argument("--prometheus", default=None, metavar="URL",
                   help="a Prometheus server (its HTTP API is queried for specscope_* series and "
                   "the engines' own)")
    d.add_argument("--trace-root", action="append", default=None, metavar="DIR",
                   help="directories traces may be opened from (default: those of the traces "
                   "given); anything outside is refused")
    d.add_argument("--accuracy", action="append", default=None, metavar="FILE",
                   help="benchmark scores per configuration (CSV or JSON) for the accuracy page")
    d.add_argument("--basic-auth", default=None, metavar="USER:PASSWORD")
    d.add_argument("--bootstrap", type=int, default=1000, help="resamples for intervals")
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument("--port", type=int, default=8050)
    from .traces import add_where_flags

    add_where_flags(d)
    d.set_defaults(func=_cmd_dashboard)

    m = sub.add_parser("demo", help="everything at once: the reference decoder on SmolLM2 with "
                       "three configurations (one with a seeded fault, one target-only), a "
                       "background tiny-model sweep, the collector, /metrics, Prometheus and "
                       "the dashboard",
                       description="Runs until Ctrl-C (or --duration seconds) and prints the "
                       "URLs; the faulted configuration is flagged on the dashboard.")
    m.add_argument("--model", default="smollm2")
    m.add_argument("--engine", choices=("reference", "vllm"), default="reference",
                   help="reference: specscope's own decoder (embedded, the default); vllm: three "
                   "real vLLM servers (target-only, 4-bit draft k = 3, the draft at k = 2 with a "
                   "seeded silent-greedy verify) with specscope's plugin inside; needs `make "
                   "vllm-env`")
    m.add_argument("--host", default="127.0.0.1")
    m.add_argument("--port", type=int, default=8050, help="dashboard port")
    m.add_argument("--metrics-port", type=int, default=9400)
    m.add_argument("--no-sweep", action="store_true",
                   help="do not run the background tiny-model sweep (the Sweep page stays empty)")
    m.add_argument("--no-prometheus", action="store_true",
                   help="do not start a Prometheus server even if one is installed")
    m.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    m.add_argument("--requests", type=int, default=8, help="requests per wave")
    m.add_argument("--waves", type=int, default=None,
                   help="stop decoding after this many waves; the dashboard, /metrics and "
                   "Prometheus stay up until --duration or Ctrl-C")
    m.add_argument("--max-new-tokens", type=int, default=48)
    m.add_argument("--trace-refresh", type=float, default=30.0, metavar="SECONDS",
                   help="how often the dashboard re-reads the traces for what the live "
                   "collector does not keep (requests, phases, the sweep's runs)")
    m.add_argument("-o", "--output", default="demo", help="traces are written here")
    m.set_defaults(func=_cmd_demo)
