"""CLI commands that serve the reference decoder and sweep configurations against it."""

from __future__ import annotations

import argparse

from .. import registry
from .spec import FAULTS, add_model_flags, spec_config


def _cmd_serve_engine(args: argparse.Namespace) -> int:
    from ..serving.server import EngineOptions, serve_engine

    opts = EngineOptions(model=args.model, draft=args.draft, tokenizer=args.tokenizer,
                         config=spec_config(args), max_batch=args.max_batch,
                         max_queue=args.max_queue, seed=args.seed, stats_every=args.stats_every,
                         prefix_cache=args.prefix_cache,
                         hooks=not args.no_hooks, trace=args.trace, trace_roll_s=args.trace_roll_s, run_id=args.run_id or "",
                         collector_url=args.collector,
                         labels=dict(kv.split("=", 1) for kv in args.label))
    return serve_engine(opts, host=args.host, port=args.port)


def _cmd_client_check(args: argparse.Namespace) -> int:
    from ..collector.agreement import format_agreement
    from ..engine.models import smollm2_tokenizer_dir
    from ..serving.harness import client_check

    tok = smollm2_tokenizer_dir() if args.tokenizer == "smollm2" else args.tokenizer
    server = ["--model", args.model, "--tokenizer", str(tok), "--spec-steps", str(args.spec_steps),
              "--max-batch", str(args.max_batch)] if args.model == "tiny" else [
        "--model", args.model, "--spec-steps", str(args.spec_steps), "--max-batch",
        str(args.max_batch)]
    agreement, run = client_check(server, tokenizer=tok, out_dir=args.output,
                                  concurrency=args.concurrency, requests=args.requests,
                                  input_tokens=args.input_tokens, output_tokens=args.output_tokens)
    print(format_agreement(agreement))
    print(f"AIPerf artifacts in {run.artifact_dir}; server trace in {args.output}/server.jsonl")
    return 0 if agreement.ok else 1


def _cmd_sweep(args: argparse.Namespace) -> int:
    if args.engine != "reference":
        return _engine_sweep(args)
    from ..serving.sweep import format_sweep, plan, run_sweep

    if args.axis or args.launch or args.resume:
        raise SystemExit("--axis, --launch and --resume are for --engine vllm|sglang|llamacpp")
    points = plan(args.spec or ["3/1/4", "2/1/3"], args.temperature, args.concurrency,
                  args.lengths, args.fault or "")
    results = run_sweep(points, args.output, model=args.model or "tiny",
                        draft=args.draft or "int:4",
                        tokenizer=args.tokenizer, requests=args.requests, seed=args.seed,
                        max_batch=args.max_batch, progress=not args.quiet)
    print(format_sweep(results))
    print(f"{len(results)} runs written to {args.output} (one trace per point, sweep.json)")
    return 0


def _engine_sweep(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..serving.engines import EngineOptions, resolve_models
    from ..serving.enginesweep import plan_engine, run_engine_sweep
    from ..serving.sweep import format_engine_sweep

    if not args.spec:
        raise SystemExit(f"--spec: give {args.engine}'s speculation settings (see --help)")
    if args.fault:
        raise SystemExit("--fault seeds the reference engine only")
    draft = args.draft or ("int:4" if args.engine == "vllm" else None)
    model, draft_path = resolve_models(args.engine, args.model or "smollm2", draft)
    points = plan_engine(args.engine, args.spec, args.temperature, args.concurrency,
                         args.lengths, args.axis, args.top_k)
    options = EngineOptions(model=model, draft=draft_path,
                            python=Path(args.engine_python) if args.engine_python else None,
                            launcher=Path(args.launcher) if args.launcher else None,
                            launch=args.launch or "", hooks=not args.no_hooks,
                            dtype=args.dtype or ("float32" if args.engine == "llamacpp"
                                                 else "bfloat16"))
    results = run_engine_sweep(points, args.output, options, requests=args.requests,
                               rounds=args.rounds, seed=args.seed, resume=args.resume,
                               probe=args.probe, progress=not args.quiet)
    print(format_engine_sweep(results))
    bad = [r for r in results if r.status != "ok" or r.figures.gate.verdict == "fail"]
    print(f"{len(results)} points in {args.output} (a store: config= per point; sweep.json); "
          f"{len(bad)} failed to run or failed their gate")
    return 1 if bad else 0


def register(sub) -> None:
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
    se.add_argument("--fault", choices=FAULTS,
                    help="seed a fault that reproduces a real incident (docs/reference-decoder.md)")
    se.add_argument("--host", default="127.0.0.1")
    se.add_argument("--port", type=int, default=8000)
    se.add_argument("--max-batch", type=int, default=8, help="requests in the running batch")
    se.add_argument("--max-queue", type=int, default=1024, help="waiting requests before 503")
    se.add_argument("--prefix-cache", action="store_true", help="reuse the KV of the longest "
                    "prefix a prompt shares with a recent one (whole 16-token blocks, or the "
                    "whole prompt); default off: every prompt prefilled whole")
    se.add_argument("--seed", type=int, default=0)
    se.add_argument("--stats-every", type=int, default=8,
                    help="sampling-truth statistics on one verify step in N (default 8)")
    se.add_argument("--no-hooks", action="store_true", help="serve without the recorder "
                    "(the hooks-off baseline)")
    se.add_argument("--trace", default=None, help="write every record to this trace: a "
                    "directory of Parquet parts for a .parquet name, JSONL otherwise")
    se.add_argument("--trace-roll-s", type=float, default=10.0, metavar="S",
                    help="Parquet traces: close a part file every S seconds")
    se.add_argument("--collector", default=None, metavar="tcp://HOST:PORT",
                    help="send records to a running `specscope serve` instead of aggregating "
                    "them here (its /metrics then serves them)")
    se.add_argument("--run-id", default=None)
    se.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                    help="a label on the run record (repeatable)")
    se.set_defaults(func=_cmd_serve_engine)

    cc = sub.add_parser(
        "client-check", help="drive serve-engine with NVIDIA AIPerf and compare its timings and "
        "token counts with the server's, request by request",
        description="Needs AIPerf (make .venv-aiperf, or SPECSCOPE_AIPERF=/path/to/aiperf). "
        "Exits 1 when a figure disagrees beyond its stated tolerance or token counts differ.")
    cc.add_argument("--model", default="tiny", help="tiny (with --tokenizer) | smollm2 | PATH")
    cc.add_argument("--tokenizer", default="smollm2",
                    help="tokenizer directory for the client (and a tiny model), or 'smollm2'")
    cc.add_argument("--spec-steps", type=int, default=3)
    cc.add_argument("--max-batch", type=int, default=4)
    cc.add_argument("--concurrency", type=int, default=2)
    cc.add_argument("--requests", type=int, default=8)
    cc.add_argument("--input-tokens", type=int, default=64)
    cc.add_argument("--output-tokens", type=int, default=24)
    cc.add_argument("-o", "--output", default="specscope-client-check")
    cc.set_defaults(func=_cmd_client_check)

    sw = sub.add_parser(
        "sweep", help="one served run per grid point (speculation x engine flags x temperature x "
        "concurrency x lengths) on the reference engine, vLLM, SGLang or llama.cpp, each with "
        "its gate",
        description="For every point: a server with the point's speculation setting, the shipped "
        "prompt set through the OpenAI API (streaming) at the point's concurrency, and one run "
        "with the server's records, the client's throughput and latency, eval records and the "
        "matching target-only run as the gate's reference. Target-only points are always "
        "included. --engine reference (default) starts serve-engine per point and writes one "
        "JSONL trace per point. --engine vllm|sglang|llamacpp starts the real engine (a fresh "
        "server per speculation x flags setting, its client points in turn), writes a store "
        "(config= per point) and sweep.json, records a point whose server fails as failed and "
        "goes on, and gates each point with specscope inside where it can be (vLLM's plugin, "
        "SGLang under wrap) or the probe from outside (llama.cpp). Examples: specscope sweep "
        "--spec 3/1/4 2/1/3 --concurrency 1 4 --fault silent_greedy@3/1/4 -o sweep/; "
        "specscope sweep --engine vllm --spec '{\"method\": \"ngram\", "
        "\"num_speculative_tokens\": 4}' --axis max-num-seqs=8,32 -o sweep/")
    sw.add_argument("--engine", default="reference",
                    choices=("reference", *(e.name for e in registry.ENGINES if e.spec_syntax)),
                    help="what serves each point (default: the reference engine, serve-engine)")
    sw.add_argument("--model", default=None,
                    help="tiny | smollm2 | PATH (default: tiny for the reference engine, smollm2 "
                    "for the others: a checkpoint folder for vLLM and SGLang, a GGUF for llama.cpp)")
    sw.add_argument("--draft", default=None,
                    help="draft: int:4 (default for the reference engine and vLLM's draft_model) "
                    "or PATH (SGLang's EAGLE heads; llama.cpp's draft-simple GGUF; SGLang "
                    "STANDALONE and llama.cpp default to the model itself)")
    sw.add_argument("--tokenizer", default=None, help="tokenizer for --model tiny (or smollm2)")
    sw.add_argument("--spec", nargs="+", default=None,
                    help="speculation settings in the engine's terms; off = target-only (always "
                    "added). reference: STEPS/TOPK/DRAFT_TOKENS (default 3/1/4 2/1/3); vllm: a "
                    "--speculative-config JSON; sglang: METHOD:STEPS/TOPK/DRAFT_TOKENS or "
                    "NGRAM:DRAFT_TOKENS; llamacpp: TYPE:DEPTH (draft-simple:3)")
    sw.add_argument("--axis", action="append", default=[], metavar="FLAG=V1,V2",
                    help="an engine flag as a grid axis, its dashes left out: --axis max-num-seqs=8,32 "
                    "(on: the flag alone, off: left out); repeatable")
    sw.add_argument("--launch", default=None, metavar="TEMPLATE",
                    help="any server command line with {port}, {spec} (the engine's speculation "
                    "flags) and {model}, instead of the engine's harness")
    sw.add_argument("--engine-python", default=None,
                    help="the engine's interpreter (default: .venv-vllm / .venv-sglang)")
    sw.add_argument("--launcher", default=None,
                    help="SGLang: a script run instead of -m sglang.launch_server")
    sw.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"),
                    help="the target's compute dtype, for the tie margin of greedy comparisons "
                    "(default: bfloat16, as the vLLM and SGLang harnesses serve; float32 for "
                    "llama.cpp)")
    sw.add_argument("--no-hooks", action="store_true",
                    help="specscope not inside the engine (the probe gates from outside)")
    sw.add_argument("--probe", choices=("auto", "on", "off"), default="auto",
                    help="probe each speculative server from outside: auto = where nothing "
                    "inside recorded its verify steps")
    sw.add_argument("--rounds", type=int, default=1,
                    help="send each point's prompts this many times (2 or more: a 95%% interval "
                    "on tok/s)")
    sw.add_argument("--resume", action="store_true",
                    help="skip the points sweep.json in the output directory lists")
    sw.add_argument("--temperature", nargs="+", type=float, default=[0.0])
    sw.add_argument("--concurrency", nargs="+", type=int, default=[1, 4])
    sw.add_argument("--top-k", nargs="+", type=int, default=[0],
                    help="real engines: top_k values for the sampled points (0: not sent)")
    sw.add_argument("--lengths", nargs="+", default=["0:48"],
                    help="INPUT:OUTPUT tokens (input 0: the prompt as shipped; otherwise padded "
                    "to about INPUT tokens)")
    sw.add_argument("--fault", default=None, metavar="KIND@SETTING",
                    help="seed a fault into one setting, e.g. silent_greedy@3/1/4")
    sw.add_argument("--requests", type=int, default=12, help="prompts per point (default 12)")
    sw.add_argument("--max-batch", type=int, default=8)
    sw.add_argument("--seed", type=int, default=0)
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.add_argument("-o", "--output", default="specscope-sweep", help="the sweep directory")
    sw.set_defaults(func=_cmd_sweep)
