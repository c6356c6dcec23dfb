"""The ``specscope`` command line. Each command is a thin shell over a library call.

Imports its subsystems lazily; a missing optional extra prints a one-line hint and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

EXTRA_OF = {"torch": "engine", "transformers": "engine", "pyarrow": "parquet", "tqdm": "engine",
            "gguf": "engine", "numpy": "collector"}


def _cmd_record(args: argparse.Namespace) -> int:
    from .engine.decoder import SpecConfig
    from .engine.models import load_pair
    from .engine.workload import WorkloadSpec, run_workload

    steps = 0 if args.spec_draft_tokens == 0 else args.spec_steps
    cfg = SpecConfig(algorithm=args.spec_algorithm, num_steps=steps, topk=args.spec_topk,
                     num_draft_tokens=args.spec_draft_tokens or 0, verify_mode=args.verify_mode,
                     fault=args.fault or "")
    spec = WorkloadSpec(requests=args.requests, concurrency=args.concurrency,
                        max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                        stats_every=args.stats_every, reference=not args.no_reference)
    pair = load_pair(args.model, args.draft, seed=args.seed)
    path = run_workload(pair, cfg, spec, args.output, progress=not args.quiet)
    print(f"trace written to {path}")
    if args.report:
        return _cmd_report(argparse.Namespace(trace=[str(path)], json=False, window=None))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .collector.report import build_report, format_report
    from .exporters.trace import read_trace

    trace = read_trace(args.trace)
    report = build_report(trace.records, window_s=args.window, problems=trace.problems)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        print(format_report(report))
    for p in trace.problems[:20]:
        print(f"warning: skipped {p}", file=sys.stderr)
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    from .exporters._parquet import compact

    out = compact(args.trace, args.output)
    print(f"parquet trace written to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specscope", description="Observability and profiling for "
                                "speculative decoding (EAGLE / MTP draft-then-verify).")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("record", help="run the reference workload with hooks on; write a trace",
                       description="Decode the shipped prompt set with the reference speculative "
                       "decoder, hooks on, and write a trace (plus a reference run without "
                       "speculation, the eval gate's baseline).")
    r.add_argument("--model", default="tiny", help="tiny | smollm2 | PATH to a local HF Llama "
                   "model directory (default: tiny)")
    r.add_argument("--draft", default="int:4", help="draft for smollm2/PATH: int:N (N-bit "
                   "rounded copy), layers:K (first K layers, shared head), bf16 or none "
                   "(default: int:4)")
    r.add_argument("--spec-algorithm", default="draft-model", help="label: eagle, mtp, draft-model")
    r.add_argument("--spec-steps", type=int, default=3, help="draft depth (default 3)")
    r.add_argument("--spec-topk", type=int, default=1, help="draft branching; >1 drafts a tree")
    r.add_argument("--spec-draft-tokens", type=int, default=None, help="tokens per verify pass, "
                   "root included (steps+1 for a chain; tree budget); 0 = no speculation")
    r.add_argument("--verify-mode", default="", choices=["", "speculative-sampling",
                   "target-temperature"], help="verify for temperature > 0 requests")
    r.add_argument("--temperature", type=float, default=0.0)
    r.add_argument("--top-p", type=float, default=1.0)
    r.add_argument("--top-k", type=int, default=0)
    r.add_argument("--requests", type=int, default=16)
    r.add_argument("--concurrency", type=int, default=4, help="requests decoded as one batch")
    r.add_argument("--max-new-tokens", type=int, default=64)
    r.add_argument("--fault", choices=["silent_greedy", "topk_fallback", "draft_prob_shortcut"],
                   help="seed a fault that reproduces a real incident")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--stats-every", type=int, default=1,
                   help="sampling-truth statistics on one verify step in N (default 1)")
    r.add_argument("--no-reference", action="store_true",
                   help="skip the reference run without speculation (no eval gate baseline)")
    r.add_argument("--report", action="store_true", help="print the report afterwards")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("-o", "--output", default="specscope-trace.jsonl")
    r.set_defaults(func=_cmd_record)

    rep = sub.add_parser("report", help="figures of a trace, as text or --json",
                         description="Acceptance length and rate, per-position acceptance, "
                         "sampling truth, fallbacks, draft health, latency, phases, eval gate "
                         "and anomalies of one or more traces.")
    rep.add_argument("trace", nargs="+", help="JSONL trace file(s) or Parquet trace directories")
    rep.add_argument("--json", action="store_true", help="stable machine-readable output")
    rep.add_argument("--window", type=float, default=None,
                     help="window width in seconds for 'windows' (default: a tenth of the run)")
    rep.set_defaults(func=_cmd_report)

    c = sub.add_parser("compact", help="compact JSONL traces into a Parquet trace directory")
    c.add_argument("trace", nargs="+")
    c.add_argument("-o", "--output", required=True)
    c.set_defaults(func=_cmd_compact)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"specscope {args.command} needs {exc.name}: pip install 'specscope[{extra}]'",
              file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as exc:
        print(f"specscope {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
