"""Commands that explain what a source says: ``explain``, ``check`` and ``report --by``."""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_explain(args: argparse.Namespace) -> int:
    from ..collector.explain import explain_all, format_explain
    from ..io.trace import read_trace

    baseline = read_trace(args.baseline).records if args.baseline else None
    out = explain_all(read_trace(args.trace).records, baseline, tpot_ms=args.tpot_ms)
    if not out["runs"]:
        print("no speculative run with a baseline: record with a reference run (the default of "
              "`specscope record`) or give --baseline", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return 0
    for rid, e in out["runs"].items():
        print(format_explain(rid, e))
    configs = out["engine_configs"]
    if configs:
        print(f"as engine settings (k per batch size, 0 = off): {json.dumps(configs['k_by_batch_size'])}")
        print(f"  vLLM speculative_config: {json.dumps(configs['vllm']['speculative_config'])}")
        print(f"  SGLang steps by batch size: {json.dumps(configs['sglang']['speculative_num_steps_by_batch_size'])}")
    return 0


def report_by(args: argparse.Namespace, records: list, baseline: list | None) -> int:
    """``report --by request|category|batch``."""
    from ..collector import requests as rq

    if args.by == "batch":
        from ..collector.batches import batch_classes, class_dict, format_classes

        classes = batch_classes(records)
        if args.json:
            print(json.dumps({"classes": [class_dict(c) for c in classes]}, indent=1, default=str))
        else:
            print(format_classes(classes))
        return 0
    if args.by == "request":
        rows = rq.request_rows(records)
        if args.json:
            print(json.dumps({"definitions": rq.__doc__, "distribution": rq.distribution(rows),
                              "requests": [rq.row_dict(r) for r in rows]}, indent=1, default=str))
        else:
            print(rq.format_requests(rows))
        return 0
    if baseline is None:  # a trace with its own reference run compares against it
        records, baseline = rq.own_reference(records)
    cats = rq.category_rows(records, baseline)
    if args.json:
        print(json.dumps({"baseline": bool(baseline), "categories": [rq.cat_dict(c) for c in cats]},
                         indent=1, default=str))
    else:
        print(rq.format_categories(cats, baseline is not None))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from ..importers.check import check_file, format_check

    ok = True
    for path in args.files:
        result = check_file(path, format=args.format)
        print(format_check(result))
        ok = ok and result.ok
    return 0 if ok else 1


def add_parsers(sub) -> None:
    ex = sub.add_parser("explain", help="why speculation is faster or slower: the speedup "
                        "decomposed into measured factors, with a verdict per batch size",
                        description="For each speculative run and its baseline (its reference "
                        "run in the trace, or --baseline): acceptance length, the target-only "
                        "step, the speculative step by phase (draft_extend, draft, verify_forward, "
                        "verify_sample, idle), prefill; the predicted speedup beside the one "
                        "measured from wall-clock throughput; modelled k = 1..k with break-even "
                        "acceptance lengths; a verdict for throughput and --tpot-ms, and the "
                        "engines' settings. Factors a trace does not give are named.")
    ex.add_argument("trace", nargs="+")
    ex.add_argument("--baseline", nargs="+", default=None, metavar="TRACE",
                    help="a run without speculation of the same workload")
    ex.add_argument("--tpot-ms", type=float, default=None, help="a latency target per token")
    ex.add_argument("--json", action="store_true")
    ex.set_defaults(func=_cmd_explain)

    ck = sub.add_parser("check", help="check a source's definitions: which identities between "
                        "its figures hold, which fail, and the traps that apply",
                        description="For each file (any importable format or a trace), one line "
                        "per identity: histogram sum = steps, sum of j x hist(j) = accepted, "
                        "acceptance length = 1 + accepted / steps, rate = accepted / drafted, "
                        "per-position acceptance non-increasing, per-request sums = the run's "
                        "counters; then the source's definitional traps. Exit status 1 when an "
                        "identity fails.")
    ck.add_argument("files", nargs="+")
    ck.add_argument("--format", default=None, help="force a format (see specscope.importers)")
    ck.set_defaults(func=_cmd_check)
