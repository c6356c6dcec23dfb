"""Commands that explain what a source says: ``explain``, ``check`` and ``report --by``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable


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


def _emit(args: argparse.Namespace, payload: Any, text: Callable[[], str]) -> int:
    """A command's result: ``payload`` as JSON with ``--json``, else ``text()``."""
    print(json.dumps(payload, indent=1, default=str) if args.json else text())
    return 0


def report_by(args: argparse.Namespace, records: list, baseline: list | None) -> int:
    """``report --by request|category|batch|context|uptime``."""
    from ..collector import requests as rq

    if args.by == "context":
        from ..collector.context import bucket_dict, context_buckets, format_buckets

        buckets = context_buckets(records)
        return _emit(args, {"buckets": [bucket_dict(b) for b in buckets]}, lambda: format_buckets(buckets))
    if args.by == "uptime":
        from ..collector.uptime import format_uptime, uptime_dict, uptime_runs

        runs = uptime_runs(records)
        return _emit(args, {"runs": [uptime_dict(u) for u in runs]}, lambda: format_uptime(runs))
    if args.by == "batch":
        from ..collector.batches import batch_classes, class_dict, format_classes

        classes = batch_classes(records)
        return _emit(args, {"classes": [class_dict(c) for c in classes]}, lambda: format_classes(classes))
    if args.by == "request":
        rows = rq.request_rows(records)
        return _emit(args, {"definitions": rq.__doc__, "distribution": rq.distribution(rows),
                            "requests": [rq.row_dict(r) for r in rows]}, lambda: rq.format_requests(rows))
    if baseline is None:  # a trace with its own reference run compares against it
        records, baseline = rq.own_reference(records)
    cats = rq.category_rows(records, baseline)
    return _emit(args, {"baseline": bool(baseline), "categories": [rq.cat_dict(c) for c in cats]},
                 lambda: rq.format_categories(cats, baseline is not None))


def _cmd_diverge(args: argparse.Namespace) -> int:
    from ..collector.diverge import diverge, format_diverge
    from ..io.trace import read_trace

    records = read_trace(args.trace).records
    reference = read_trace(args.reference).records if args.reference else None
    if args.recompute:
        records, reference = _recompute(args.recompute, records, reference)
    results = diverge(records, reference, run_id=args.run, dtype=args.dtype)
    _emit(args, [r.to_dict() for r in results], lambda: format_diverge(results))
    return 1 if any(r.verdict == "FAIL" for r in results) else 0


def _recompute(model: str, records: list, reference: list | None) -> tuple[list, list | None]:
    """The reference's margins from the target model (stderr says how many, and why not)."""
    from .. import schema
    from ..engine.margins import recompute
    from ..engine.models import load_pair

    pair = load_pair(model)
    if reference is not None:
        done = recompute(reference, pair)
        reference = done.records
    else:
        refs = {r.run_id for r in records if isinstance(r, schema.RunRecord)
                and r.labels.get("role") == "reference"}
        done = recompute(records, pair, refs)
        records = done.records
    skipped = "; ".join(f"{n} skipped: {why}" for why, n in done.skipped.items())
    print(f"margins recomputed with {model} for {done.recomputed} reference requests"
          + (f" ({skipped})" if skipped else ""), file=sys.stderr)
    return records, reference


def _cmd_check(args: argparse.Namespace) -> int:
    from ..importers.check import check_file, format_check

    ok = True
    for path in args.files:
        result = check_file(path, format=args.format)
        print(format_check(result))
        ok = ok and result.ok
    return 0 if ok else 1


def register(sub) -> None:
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

    dv = sub.add_parser("diverge", help="where greedy output first differs from target-only "
                        "decoding: tie-flip (numerics) or structural (a fault), per request",
                        description="Pairs each greedy request of a speculative run with the "
                        "same prompt decoded without speculation (the trace's own reference run, "
                        "or --reference) and reports the first divergent output index, the "
                        "reference's top-2 logit margin there and the committed token's rank, a "
                        "verdict (identical, tie-flip below the dtype's tie margin, structural), "
                        "and after it the LCS ratio of the two continuations and a repetition "
                        "score. FAIL (exit status 1) on any structural divergence.")
    dv.add_argument("trace", nargs="+")
    dv.add_argument("--reference", nargs="+", default=None, metavar="TRACE",
                    help="a target-only greedy run of the same prompts (default: the trace's own)")
    dv.add_argument("--run", default=None, help="only this run")
    dv.add_argument("--recompute", metavar="MODEL", default=None,
                    help="where the reference's greedy requests carry no top-2 margins, run this "
                    "target model (tiny, smollm2 or a Hugging Face directory) over each one's "
                    "prompt (from the shipped prompt set, by prompt id) and output to get them")
    dv.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default=None,
                    help="the target's dtype, for the tie margin, where the trace does not say "
                    "(default: the run record's, else float32)")
    dv.add_argument("--json", action="store_true")
    dv.set_defaults(func=_cmd_diverge)
