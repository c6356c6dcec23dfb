"""CLI commands that serve the reference decoder and sweep configurations against it."""

from __future__ import annotations

import argparse


def _spec_config(args: argparse.Namespace):
    from ..engine.decoder import SpecConfig

    steps = 0 if args.spec_draft_tokens == 0 else args.spec_steps
    return SpecConfig(algorithm=args.spec_algorithm, num_steps=steps, topk=args.spec_topk,
                      num_draft_tokens=args.spec_draft_tokens or 0,
                      verify_mode=args.verify_mode, fault=args.fault or "")


def _cmd_serve_engine(args: argparse.Namespace) -> int:
    from ..serving.server import EngineOptions, serve_engine

    opts = EngineOptions(model=args.model, draft=args.draft, tokenizer=args.tokenizer,
                         config=_spec_config(args), max_batch=args.max_batch,
                         max_queue=args.max_queue, seed=args.seed, stats_every=args.stats_every,
                         hooks=not args.no_hooks, trace=args.trace, run_id=args.run_id or "",
                         labels=dict(kv.split("=", 1) for kv in args.label))
    return serve_engine(opts, host=args.host, port=args.port)


def add_parsers(sub, add_model_flags) -> None:
    se = sub.add_parser(
        "serve-engine", help="the reference decoder behind an OpenAI-compatible streaming API",
        description="Serve /v1/completions and /v1/chat/completions (SSE streaming, "
        "stream_options.include_usage), /v1/models, /health and the collector's /metrics. "
        "Continuous batching: requests join and leave the running batch between verify steps. "
        "Stops on Ctrl-C or SIGTERM.")
    add_model_flags(se)
    se.add_argument("--tokenizer", default=None, help="tokenizer directory for --model tiny, or "
                    "'smollm2' (built from the GGUF): real text in and out")
    se.add_argument("--verify-mode", default="", choices=["", "speculative-sampling",
                    "target-temperature"], help="verify for temperature > 0 requests")
    se.add_argument("--fault", choices=["silent_greedy", "topk_fallback", "draft_prob_shortcut"],
                    help="seed a fault that reproduces a real incident")
    se.add_argument("--host", default="127.0.0.1")
    se.add_argument("--port", type=int, default=8000)
    se.add_argument("--max-batch", type=int, default=8, help="requests in the running batch")
    se.add_argument("--max-queue", type=int, default=1024, help="waiting requests before 503")
    se.add_argument("--seed", type=int, default=0)
    se.add_argument("--stats-every", type=int, default=8,
                    help="sampling-truth statistics on one verify step in N (default 8)")
    se.add_argument("--no-hooks", action="store_true", help="serve without the recorder "
                    "(the hooks-off baseline)")
    se.add_argument("--trace", default=None, help="write every record to this JSONL trace")
    se.add_argument("--run-id", default=None)
    se.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                    help="a label on the run record (repeatable)")
    se.set_defaults(func=_cmd_serve_engine)
