"""Commands that make records and serve their metrics: ``record`` and ``profile`` (the reference
workload), ``wrap`` (an engine with hooks inside), ``serve`` (a collector), ``import`` and
``replay`` (traces in), ``rules`` and ``grafana`` (what Prometheus and Grafana read)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .otlp import add_otlp_flags, otlp_sink, report_otlp
from .spec import FAULTS, add_model_flags, spec_config


def _cmd_record(args: argparse.Namespace) -> int:
    from ..engine.models import load_pair
    from ..engine.workload import WorkloadSpec, run_workload

    cfg = spec_config(args)
    spec = WorkloadSpec(requests=args.requests, concurrency=args.concurrency,
                        max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                        stats_every=args.stats_every, reference=not args.no_reference,
                        categories=tuple(c for c in args.categories.split(",") if c))
    pair = load_pair(args.model, args.draft, seed=args.seed)
    sinks: list[Any] = []
    server, otlp = None, otlp_sink(args)
    if args.collector:
        from ..io.transport import ZmqSink

        sinks.append(ZmqSink(args.collector))
    if args.metrics_port is not None or otlp is not None:
        from ..collector.service import Collector

        collector = Collector(sinks=[otlp] if otlp else (), node_label=args.node_label).start()
        sinks.append(collector)
        if args.metrics_port is not None:
            from ..exporters.http import MetricsServer

            server = MetricsServer(collector, host=args.metrics_host, port=args.metrics_port).start()
            print(f"metrics at {server.url}", flush=True)
    path = run_workload(pair, cfg, spec, args.output, progress=not args.quiet, sinks=sinks)
    for sink in sinks:
        if hasattr(sink, "tick"):
            sink.tick()  # the run's findings reach OTLP before it closes
        sink.close()
    report_otlp(otlp)
    print(f"trace written to {path}", flush=True)
    if server is not None:
        import time

        time.sleep(args.linger)
        server.close()
    if args.report:
        from ..collector.report import build_report
        from ..collector.text import format_report
        from ..io.trace import read_trace

        trace = read_trace(path)
        print(format_report(build_report(trace.records, problems=trace.problems)))
        for p in trace.problems[:20]:
            print(f"warning: skipped {p}", file=sys.stderr)
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    from ..collector.phases import format_breakdown
    from ..engine.decoder import SpecConfig
    from ..engine.models import load_pair
    from ..engine.profile import profile_workload
    from ..engine.workload import WorkloadSpec

    cfg = SpecConfig(algorithm=args.spec_algorithm, num_steps=args.spec_steps, topk=args.spec_topk,
                     num_draft_tokens=args.spec_draft_tokens or 0, fault=args.fault or "",
                     policy=args.spec_policy)
    spec = WorkloadSpec(requests=args.requests, concurrency=args.concurrency,
                        max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        seed=args.seed, reference=False)
    pair = load_pair(args.model, args.draft, seed=args.seed)
    breakdown, records = profile_workload(pair, cfg, spec, args.output)
    if args.record:
        from ..io.trace import write_trace

        write_trace(args.record, records)
    print(format_breakdown(breakdown))
    print(f"chrome/perfetto trace written to {args.output}")
    return 0


def _cmd_wrap(args: argparse.Namespace) -> int:
    from ..hooks.engines.wrap import wrap

    return wrap(args.command_line, trace_dir=args.trace_dir, collector=args.collector)


def _cmd_serve(args: argparse.Namespace) -> int:
    from ..exporters.serve import serve

    otlp = otlp_sink(args)
    try:
        return serve(listen=args.listen, metrics_host=args.metrics_host,
                     metrics_port=args.metrics_port, trace=args.trace, trace_roll_s=args.trace_roll_s,
                     basic_auth=tuple(args.basic_auth.split(":", 1)) if args.basic_auth else None,
                     tls=(args.tls_cert, args.tls_key) if args.tls_cert else None,
                     max_label_sets=args.max_label_sets, sinks=[otlp] if otlp else (),
                     node_label=args.node_label)
    finally:
        report_otlp(otlp)


def _cmd_rules(args: argparse.Namespace) -> int:
    from ..exporters.rules import alert_rules

    _write_or_print(args.output, alert_rules(args.engine))
    return 0


def _cmd_grafana(args: argparse.Namespace) -> int:
    from ..exporters.grafana import dashboard_json

    _write_or_print(args.output, dashboard_json(args.engine))
    return 0


def _write_or_print(path: str | None, text: str) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"written to {path}")
    else:
        print(text)


def _cmd_import(args: argparse.Namespace) -> int:
    from ..importers import import_files
    from ..importers.check import warnings

    results = import_files(args.files, args.output, format=args.format, run=args.run)
    for path, res in zip(args.files, results):
        kinds = res.counts
        summary = ", ".join(f"{n} {k.replace('Record', '').lower()}" for k, n in kinds.items())
        print(f"{path}: {res.format}: {summary or 'no records'}; {len(res.problems)} skipped")
        for w in warnings(res):
            print(f"  {w}", file=sys.stderr)
        for p in res.problems[:20]:
            print(f"  skipped {p}", file=sys.stderr)
        if len(res.problems) > 20:
            print(f"  ... and {len(res.problems) - 20} more", file=sys.stderr)
    print(f"trace written to {args.output}")
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    import time

    from ..collector.service import Collector
    from ..exporters.replay import replay

    speed = None if args.speed == "max" else float(args.speed)
    otlp = otlp_sink(args)
    collector = Collector(sinks=[otlp] if otlp else ()).start()
    server = None
    if args.metrics_port is not None:
        from ..exporters.http import MetricsServer

        server = MetricsServer(collector, host=args.metrics_host, port=args.metrics_port).start()
        print(f"metrics at {server.url}", flush=True)
    stats = replay(args.trace, collector, speed=speed, progress=not args.quiet)
    collector.tick()
    rate = stats.records / stats.seconds if stats.seconds else float("inf")
    print(f"replayed {stats.records} records ({stats.entries} verify entries) in "
          f"{stats.seconds:.2f} s, {rate:,.0f} records/s; {stats.problems} unreadable", flush=True)
    if server is not None:
        time.sleep(args.linger)
        server.close()
    collector.close()
    report_otlp(otlp)
    return 0


def register(sub) -> None:
    r = sub.add_parser("record", help="run the reference workload with hooks on; write a trace",
                       description="Decode the shipped prompt set with the reference speculative "
                       "decoder, hooks on, and write a trace (plus a reference run without "
                       "speculation, the eval gate's baseline).")
    add_otlp_flags(r)
    add_model_flags(r)
    r.add_argument("--verify-mode", default="", choices=["", "speculative-sampling",
                   "target-temperature"], help="verify for temperature > 0 requests")
    r.add_argument("--temperature", type=float, default=0.0)
    r.add_argument("--top-p", type=float, default=1.0)
    r.add_argument("--top-k", type=int, default=0)
    r.add_argument("--requests", type=int, default=16)
    r.add_argument("--categories", default="", metavar="A,B,...",
                   help="only these prompt categories, taken round-robin in this order (e.g. "
                   "copy,edit,refactor,math); default: every prompt in file order")
    r.add_argument("--concurrency", type=int, default=4, help="requests decoded as one batch")
    r.add_argument("--max-new-tokens", type=int, default=64)
    r.add_argument("--fault", choices=FAULTS,
                   help="seed a fault that reproduces a real incident (docs/reference-decoder.md)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--stats-every", type=int, default=1,
                   help="sampling-truth statistics on one verify step in N (default 1)")
    r.add_argument("--no-reference", action="store_true",
                   help="skip the reference run without speculation (no eval gate baseline)")
    r.add_argument("--report", action="store_true", help="print the report afterwards")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus /metrics from an in-process collector on this port")
    r.add_argument("--metrics-host", default="127.0.0.1")
    r.add_argument("--node-label", action="store_true", default=None,
                   help="label /metrics series with the node even with one node (a fleet's "
                   "node collectors; default: only once a second node's records arrive)")
    r.add_argument("--linger", type=float, default=0.0,
                   help="keep /metrics up this many seconds after the run (for a final scrape)")
    r.add_argument("--collector", default=None,
                   help="also send records to a running `specscope serve` (tcp://HOST:PORT)")
    r.add_argument("-o", "--output", default="specscope-trace.jsonl",
                   help="the trace: Parquet (a directory) for a .parquet name, JSONL otherwise")
    r.set_defaults(func=_cmd_record)

    sv = sub.add_parser("serve", help="run a collector: receive records, serve /metrics",
                        description="Receive record batches from engine processes over ZeroMQ, "
                        "aggregate them, run detectors and serve Prometheus /metrics. Stops on "
                        "Ctrl-C or SIGTERM.")
    add_otlp_flags(sv)
    sv.add_argument("--listen", default="tcp://127.0.0.1:5557", help="ZeroMQ PULL endpoint")
    sv.add_argument("--metrics-host", default="127.0.0.1")
    sv.add_argument("--metrics-port", type=int, default=9400)
    sv.add_argument("--node-label", action="store_true", default=None,
                    help="label /metrics series with the node even while one node sends "
                    "(default: once a second node's records arrive)")
    sv.add_argument("--trace", default=None, help="also write every record to this trace: a "
                    "directory of Parquet parts for a .parquet name, JSONL otherwise")
    sv.add_argument("--trace-roll-s", type=float, default=10.0, metavar="S",
                    help="Parquet traces: close a part file every S seconds (a killed collector "
                    "loses at most the open part)")
    sv.add_argument("--basic-auth", default=None, metavar="USER:PASSWORD")
    sv.add_argument("--tls-cert", default=None)
    sv.add_argument("--tls-key", default=None)
    sv.add_argument("--max-label-sets", type=int, default=64,
                    help="label sets beyond this fold into 'other' (counted)")
    sv.set_defaults(func=_cmd_serve)

    ru = sub.add_parser("rules", help="write Prometheus alerting and recording rules")
    from ..exporters.rules import ENGINES as engines
    ru.add_argument("--engine", default="specscope", choices=engines,
                    help="the series the rules read: specscope's exporter (also what `scrape "
                    "--metrics-port` serves for any engine), an engine's own, `probe "
                    "--metrics-port`'s, or a fleet's node collectors (fleet: per configuration "
                    "across nodes, each node against its fleet; default: specscope)")
    ru.add_argument("-o", "--output", default=None)
    ru.set_defaults(func=_cmd_rules)
    gr = sub.add_parser("grafana", help="write a Grafana dashboard JSON over the exporter's "
                        "metrics or an engine's own")
    gr.add_argument("--engine", default="specscope", choices=engines,
                    help="the series the board reads (default: specscope)")
    gr.add_argument("-o", "--output", default=None)
    gr.set_defaults(func=_cmd_grafana)

    pf = sub.add_parser("profile", help="the reference workload under torch.profiler: phase "
                        "breakdown and a Chrome/Perfetto trace")
    add_model_flags(pf)
    pf.add_argument("--temperature", type=float, default=0.0)
    pf.add_argument("--requests", type=int, default=4)
    pf.add_argument("--concurrency", type=int, default=4)
    pf.add_argument("--max-new-tokens", type=int, default=32)
    pf.add_argument("--fault", choices=FAULTS)
    pf.add_argument("--seed", type=int, default=0)
    pf.add_argument("--record", default=None, help="also write the specscope records (JSONL)")
    pf.add_argument("-o", "--output", default="specscope-profile.json",
                    help="Chrome/Perfetto trace (JSON)")
    pf.set_defaults(func=_cmd_profile)

    wr = sub.add_parser("wrap", help="run an engine command with specscope's hooks in every "
                        "Python process it starts (SGLang, vLLM)",
                        description="specscope wrap [--trace-dir DIR | --collector URL] -- "
                        "python -m sglang.launch_server ...")
    wr.add_argument("--trace-dir", default=".", help="one JSONL trace per engine process")
    wr.add_argument("--collector", default=None, help="send records to `specscope serve` instead")
    wr.add_argument("command_line", nargs=argparse.REMAINDER, help="-- the engine command")
    wr.set_defaults(func=_cmd_wrap)

    im = sub.add_parser("import", help="other tools' outputs (logs, /metrics, benchmarks, "
                        "profiler traces) into a specscope trace",
                        description="Import files into one trace, each its own run (or all "
                        "under --run). The format is detected from the content; --format "
                        "forces one. Lines that do not parse are reported with file and line "
                        "and skipped.")
    im.add_argument("files", nargs="+")
    im.add_argument("-o", "--output", required=True,
                    help="the trace: Parquet (a directory) for a .parquet name, JSONL otherwise")
    im.add_argument("--format", default=None, help="force a format (listed below)")
    im.add_argument("--run", default=None, help="put every file's records under this run id")
    im.set_defaults(func=_cmd_import)

    rp = sub.add_parser("replay", help="feed a trace through the collector as if live",
                        description="Replay traces (JSONL or Parquet) through a collector at the "
                        "recorded pace times --speed, or as fast as possible (--speed max), "
                        "serving /metrics as a live run would.")
    add_otlp_flags(rp)
    rp.add_argument("trace", nargs="+")
    rp.add_argument("--speed", default="max", help="pace multiplier, or 'max' (default)")
    rp.add_argument("--metrics-port", type=int, default=None)
    rp.add_argument("--metrics-host", default="127.0.0.1")
    rp.add_argument("--linger", type=float, default=0.0,
                    help="keep /metrics up this many seconds after the replay")
    rp.add_argument("--quiet", action="store_true")
    rp.set_defaults(func=_cmd_replay)
