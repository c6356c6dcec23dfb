"""Commands over traces and a fleet's store: ``report``, ``compare``, ``regress``, ``compact``
and ``fleet``. Each one reads through ``io.trace.read_trace`` (or the fleet query), so the
partition filters (--since/--until/--config/--node/--run, or ``STORE#node=n3``) mean the same
everywhere."""

from __future__ import annotations

import argparse
import json
import sys


def add_where_flags(p: argparse.ArgumentParser) -> None:
    """The partition filters of a Parquet store (JSONL traces: the same over their records)."""
    g = p.add_argument_group("selection (a store reads only the partitions selected)")
    g.add_argument("--since", default=None, metavar="YYYY-MM-DD", help="first UTC day")
    g.add_argument("--until", default=None, metavar="YYYY-MM-DD", help="last UTC day")
    g.add_argument("--config", action="append", default=[], metavar="ID",
                   help="a configuration id (repeat for several)")
    g.add_argument("--node", action="append", default=[], metavar="NODE",
                   help="a node name (repeat for several)")
    g.add_argument("--run", dest="run_filter", action="append", default=[], metavar="ID",
                   help="a run id (repeat for several)")


def where_of(args: argparse.Namespace):
    """The selection the flags make (an ``io.store.Where``), or None where they make none."""
    from ..io.store import Where, check_date

    since, until = getattr(args, "since", None), getattr(args, "until", None)
    for day in filter(None, (since, until)):
        check_date(day)
    return Where(since=since, until=until, configs=tuple(getattr(args, "config", ())),
                 nodes=tuple(getattr(args, "node", ())),
                 runs=tuple(getattr(args, "run_filter", ()))) or None


def report_nodes(args: argparse.Namespace, where) -> int:
    """``report --by node``: every run's records per node, each share checked; exit 1 on FAIL."""
    from ..collector.nodes import format_shares, share_dict
    from ..fleet.nodes import node_report

    shares = node_report(args.trace, where)
    if args.json:
        print(json.dumps({"nodes": [share_dict(s) for s in shares]}, indent=1, default=str))
    else:
        print(format_shares(shares))
    return 1 if any(s.failed for s in shares) else 0


#: stores with more verify entries than this (in the partitions selected) are reported through
#: the collector's column path, one row group at a time: bounded memory, no per-request figures
STREAM_ENTRIES = 5_000_000


def _streamed(paths: list[str], where) -> int:
    """The verify entries of ``paths`` when they are all stores and too many to hold as
    records; 0 otherwise."""
    from pathlib import Path

    from ..io.store import verify_entries
    from ..io.trace import split_selection

    n = 0
    for p in paths:
        text, sel = split_selection(p)
        if not Path(text).is_dir():
            return 0
        n += verify_entries(Path(text), where.merge(sel) if where and sel else (sel or where))
    return n if n > STREAM_ENTRIES else 0


def _report_streamed(args: argparse.Namespace, where) -> int:
    """``report`` over a big store: one section per configuration, rank and node, from the
    collector's column path (what the dashboard shows for a big trace)."""
    from pathlib import Path

    from ..collector.report import report_dict, report_json
    from ..collector.text import format_sections
    from ..exporters.replay import replay_sections
    from ..io.trace import split_selection

    sections = []
    for p in args.trace:
        text, sel = split_selection(p)
        sections += [sec.with_node(node) if node else sec for _, node, sec in replay_sections(
            Path(text), where.merge(sel) if where and sel else (sel or where))]
    report = report_dict(None, sections, streamed="verify entries over the record limit: "
                         "figures per configuration, rank and node from counters; per-request "
                         "figures and the eval gate left out")
    if len(sections) == 1:
        report["totals"] = sections[0].totals.as_dict()
    if args.json:
        print(report_json(report), end="")
    else:
        print(f"(streamed: {report['streamed']})")
        print(format_sections(sections))
    return 0


def _measured_runs(path: str, where=None) -> list:
    from ..collector.compare import run_sample
    from ..io.trace import read_trace
    from .. import schema

    records = read_trace(path, where).records
    runs = [r for r in records if isinstance(r, schema.RunRecord) and r.labels.get("role") != "reference"]
    if not runs:
        raise ValueError(f"{path}: no measured run in this trace")
    return [run_sample(records, r.run_id) for r in runs]


def _fmt(v, spec: str = ".3f") -> str:
    return "n/a" if v is None else (v if isinstance(v, str) else format(v, spec))


def _cmd_compare(args: argparse.Namespace) -> int:
    from ..collector.compare import compare

    a, b = _measured_runs(args.a, where_of(args))[0], _measured_runs(args.b, where_of(args))[0]
    rows = compare(a, b, n_boot=args.bootstrap)
    if args.json:
        print(json.dumps({"a": a.run_id, "b": b.run_id, "rows": rows}, indent=1))
        return 0
    print(f"A = {a.run_id}\nB = {b.run_id}   (delta = B vs A, {int(rows[0]['level'] * 100)}% "
          "bootstrap interval over requests)")
    print(f"{'metric':<34} {'A':>10} {'B':>10} {'delta %':>9} {'interval %':>19}  verdict")
    for r in rows:
        ci = "" if not r["ci_pct"] else f"[{r['ci_pct'][0]:+.1f}, {r['ci_pct'][1]:+.1f}]"
        delta = "" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f}"
        print(f"{r['label']:<34} {_fmt(r['a']):>10} {_fmt(r['b']):>10} {delta:>9} {ci:>19}  {r['verdict']}")
    return 0


def _cmd_regress(args: argparse.Namespace) -> int:
    from ..collector.compare import regression_series

    samples = [s for path in args.trace for s in _measured_runs(path, where_of(args))]
    if args.sort == "time":
        samples.sort(key=lambda s: s.run.started_ns if s.run else 0)
    series = regression_series(samples, n_boot=args.bootstrap)
    if args.json:
        print(json.dumps(series, indent=1))
        return 0
    groups: dict[str, list] = {}
    for e in series:
        groups.setdefault(e["group"], []).append(e)
    for group, entries in groups.items():
        print(f"[{group}] {len(entries)} run(s)" + (f": {entries[0]['note']}" if entries[0]["note"] else ""))
    print(f"{'run':<40} {'AL':>6} {'rate':>6} {'tok/s':>8} {'gate':>12}  verdict")
    for e in series:
        f = e["figures"]
        mark = "  <- first bad" if e["first_bad"] else ""
        why = ", ".join(e["anomalies"] + [f"{w} worse" for w in e["worse"]])
        print(f"{e['label'][:40]:<40} {_fmt(f['mean_acceptance_length'], '.2f'):>6} "
              f"{_fmt(f['acceptance_rate'], '.2f'):>6} {_fmt(f['output_tok_s'], '.1f'):>8} "
              f"{_fmt(e['gate']):>12}  {e['verdict']}{' (' + why + ')' if why else ''}{mark}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from ..collector.report import build_report, report_json
    from ..collector.text import format_report
    from ..io.trace import read_trace

    where = where_of(args)
    if getattr(args, "by", "run") == "node":
        return report_nodes(args, where)
    scale = getattr(args, "clock_scale", None)
    if getattr(args, "by", "run") == "run" and not args.baseline and not scale and \
            _streamed(args.trace, where):
        return _report_streamed(args, where)
    trace = read_trace(args.trace, where)
    if scale:
        from ..io.clock import scale_clock

        trace.records = scale_clock(trace.records, scale)
    baseline = read_trace(args.baseline).records if args.baseline else None
    if getattr(args, "by", "run") != "run":
        from .analysis import report_by

        return report_by(args, trace.records, baseline)
    report = build_report(trace.records, window_s=args.window, problems=trace.problems,
                          baseline=baseline)
    if args.json:
        print(report_json(report), end="")
    else:
        print(format_report(report))
    for p in trace.problems[:20]:
        print(f"warning: skipped {p}", file=sys.stderr)
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    if args.output is None:
        from ..io.store import compact_store, open_store

        if len(args.trace) != 1:
            raise ValueError("compact in place takes one store (or give -o)")
        counts = compact_store(open_store(args.trace[0]), where=where_of(args))
        print(f"{args.trace[0]}: {counts['partitions']} partition(s) compacted, "
              f"{counts['parts_read']} parts into {counts['parts_written']}")
        return 0
    from ..io.trace import compact

    out = compact(args.trace, args.output, where_of(args))
    print(f"parquet trace written to {out}")
    return 0


def _cmd_fleet(args: argparse.Namespace) -> int:
    from ..fleet import GROUPS, Where, fleet_figures, format_figures

    by = tuple(b for b in args.by.split(",") if b)
    unknown = [b for b in by if b not in GROUPS]
    if unknown or not by:
        raise ValueError(f"--by {args.by!r}: groups are {', '.join(GROUPS)}")
    if getattr(args, "aging", False):
        from ..fleet.aging import fleet_aging, format_aging

        aged = fleet_aging(args.store, where_of(args) or Where(), engine=args.engine,
                           master=args.master)
        print(json.dumps({"engine": args.engine, "aging": [a.to_dict() for a in aged]}, indent=1)
              if args.json else format_aging(aged))
        return 0
    rows = fleet_figures(args.store, by, where_of(args) or Where(), engine=args.engine,
                         master=args.master)
    if args.json:
        print(json.dumps({"by": by, "engine": args.engine, "rows": [r.to_dict() for r in rows]},
                         indent=1))
    else:
        print(format_figures(rows, by, args.engine))
    return 0


def register(sub) -> None:
    rep = sub.add_parser("report", help="figures of a trace, as text or --json",
                         description="Acceptance length and rate, per-position acceptance, "
                         "sampling truth, fallbacks, draft health, latency, phases, eval gate "
                         "and anomalies of one or more traces.")
    rep.add_argument("trace", nargs="+", help="JSONL trace file(s), Parquet trace directories or stores "
                     "(a path or URI; STORE#node=n3,since=2026-12-01 selects partitions)")
    rep.add_argument("--json", action="store_true", help="stable machine-readable output")
    rep.add_argument("--window", type=float, default=None,
                     help="window width in seconds for 'windows' (default: a tenth of the run)")
    rep.add_argument("--baseline", nargs="+", default=None, metavar="TRACE",
                     help="an earlier run: flag acceptance regressions and worse output quality; "
                     "with --by category, the run without speculation of the same prompts "
                     "(speedup per category, with a bootstrap interval; default: the trace's "
                     "own reference run, where it has one)")
    rep.add_argument("--by", choices=("run", "request", "category", "batch", "context", "uptime", "node"),
                     default="run",
                     help="run: the figures per run (default); request: every request's steps, "
                     "drafted, accepted, acceptance length and flags, with request- and "
                     "token-weighted means; category: per workload category; batch: sampling "
                     "truth, draft health and acceptance per batch-size class, each checked; "
                     "context: acceptance by context length at the step, with intervals; "
                     "uptime: acceptance by uptime and tokens served between restarts, and the "
                     "drift test per class and position; node: "
                     "the same per node (a Parquet store is read one node at a time)")
    rep.add_argument("--clock-scale", type=float, default=None, metavar="F",
                     help="read the trace's clock F times slower: a short run as a long one "
                     "(uptime, windows and the drift test see the stretched times; durations "
                     "stay as measured, so throughput from timestamps reads F times lower)")
    add_where_flags(rep)
    rep.set_defaults(func=_cmd_report)

    cm = sub.add_parser("compare", help="two runs side by side: delta and bootstrap interval per "
                        "metric, 'no significant difference' where the interval spans 0")
    cm.add_argument("a", help="trace of run A (the baseline); STORE#node=n1 selects partitions")
    cm.add_argument("b", help="trace of run B; STORE#node=n3 selects partitions")
    cm.add_argument("--bootstrap", type=int, default=2000, help="resamples (default 2000)")
    cm.add_argument("--json", action="store_true")
    add_where_flags(cm)
    cm.set_defaults(func=_cmd_compare)

    rg = sub.add_parser("regress", help="a series of runs (by commit or time), each against the "
                        "last good run of its configuration and workload; the first bad run is "
                        "marked")
    rg.add_argument("trace", nargs="+", help="traces in order (oldest first), or --sort time")
    rg.add_argument("--sort", choices=["given", "time"], default="given")
    rg.add_argument("--bootstrap", type=int, default=1000)
    rg.add_argument("--json", action="store_true")
    add_where_flags(rg)
    rg.set_defaults(func=_cmd_regress)

    c = sub.add_parser("compact", help="compact traces into a Parquet store (-o), or merge a "
                       "store's small parts per partition in place (no -o)",
                       description="With -o: JSONL or Parquet traces into a Parquet store. "
                       "Without: each partition (date/config/run/node) of one store with two or "
                       "more parts gets one merged part; the merged part is in place before the "
                       "parts it replaces are deleted.")
    c.add_argument("trace", nargs="+")
    c.add_argument("-o", "--output", default=None)
    add_where_flags(c)
    c.set_defaults(func=_cmd_compact)

    fl = sub.add_parser("fleet", help="per-configuration and per-node figures over a fleet's "
                        "store, on DuckDB (embedded) or a Spark cluster",
                        description="Drafted and accepted tokens (also per position), "
                        "acceptance length (bonus token included) and rate per group, over every "
                        "verify entry of the partitions selected; the same SQL on either engine, "
                        "only the (drafted, accepted) histogram leaves it.")
    fl.add_argument("store", help="a store: a path or URI (s3://, gs://, memory://, ...)")
    fl.add_argument("--by", default="config,node",
                    help="groups, comma-separated: config, node, run, date (default config,node)")
    fl.add_argument("--engine", choices=("duckdb", "spark"), default="duckdb")
    fl.add_argument("--master", default="local[2]",
                    help="Spark master URL for --engine spark (default local[2])")
    fl.add_argument("--aging", action="store_true",
                    help="acceptance rate against node uptime per configuration, fitted across "
                    "nodes started at different times, with a 95%% interval across nodes (a "
                    "decay shows without waiting a day on one node)")
    fl.add_argument("--json", action="store_true")
    add_where_flags(fl)
    fl.set_defaults(func=_cmd_fleet)
