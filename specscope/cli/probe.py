"""``specscope probe``: the black-box verify check, a thin shell over ``specscope.probe``."""

from __future__ import annotations

import argparse
import json
import sys

from .. import registry

DESCRIPTION = """\
Check verify through an OpenAI-compatible endpoint, installing nothing in the engine.

What it sends: a designed workload through /v1/chat/completions (or /v1/completions with
--endpoint completions, SGLang's native /generate with --endpoint generate) in four classes:
greedy (temperature 0), temperature (0.8) and temperature with top-p (0.9) taken in turn,
then temperature with top-k (20), last because it is the likeliest to crash an engine (vLLM
0.32's CPU build under speculation; leave it out with --classes where an engine cannot take
it). Prompts make drafts run long (copying, lists, code edits) and
open-ended text. Every request asks for logprobs with --top-logprobs alternatives (lowered to
what the server allows). Then it keeps asking: more rounds, each for the classes whose
checks more positions could settle, until every check has decided, one has failed, or
--deadline passes (default 120 s; --once sends the plan once). Top-k is sent only after the
other classes have decided. Each round is bounded by --requests, --max-tokens, --token-budget,
--concurrency and --timeout.

More classes (--classes, or --classes all): top-p/unset-t and top-k/unset-t (top-p 0.9 or
top-k 20 with the temperature left out: the engine's default applies, --default-temperature),
stops (greedy answers cut by max_tokens, stop strings and stop tokens, or held past their
end by min_tokens where the engine takes them), prefix (greedy prompts with a
long shared prefix, alone, repeated and at concurrency, against the alone answer),
penalties (greedy with presence_penalty 1.0 and frequency_penalty 0.5), min-p
(temperature 0.8 with min_p 0.1, read by the truncation check alone), seed (four
prompts at temperature 0.8, each with a seed of its own, sent alone twice; not to SGLang,
which follows seeds only under --enable-deterministic-inference), rescore
(eight greedy answers sent back whole as prompts with prompt_logprobs: vLLM and the
reference engine) and limit (eight greedy prompts sized to leave about 24 tokens of the
server's context, each asked for exactly that room with ignore_eos; sent where the server says
its context, up to 32,768 tokens). A class
whose requests the server refuses (HTTP 400) is reported as not supported, never a FAIL or an
ERROR.

What it checks, per class, from the engine's own log-probabilities:
  greedy losslessness     every committed token is its position's top-1; one that trails it
                          by more than the dtype's tie margin (--dtype) FAILS at once
  temperature honoured    committed tokens are the top-1 no more often than the requested
                          temperature (and top-p) allows: an upper bound of that share from
                          the returned alternatives, tested on that side only; restricted to
                          the tokens verify committed where the engine says which (vLLM)
  truncation honoured     no committed token lies outside its top-p nucleus (a lower bound of
                          the mass ranked above it, unknown tail bounded, in the engine's
                          sampler order), beyond its top-k, or under its min-p floor (its
                          probability against the top-1's, exact), by more than the
                          dtype's tie margin (--dtype)
  distribution honoured   where in its distribution each committed token fell (mid-rank
                          PIT: mean 0.5 under honest sampling), bounded from the returned
                          alternatives, both sides at a sequential bound: verify sharper
                          (a temperature applied twice, a residual or bonus taken as its
                          argmax) or flatter (a truncation dropped) than asked; raw figures
                          of truncating requests are not tested, processed ones are
  stops honoured          (--classes ...,stops) greedy answers cut by max_tokens and by
                          stop strings end exactly where the uncut answer says, and none
                          held by min_tokens ends before it; one that runs past its cut, or
                          ends before min_tokens, FAILs at once (a stop or an end of
                          sequence missed inside a verify step); PASS after 13 agreeing cuts
  shared prefix honoured  (--classes ...,prefix) repeated and concurrent greedy answers agree
                          with the alone one up to near-tie flips, and carry no corruption
                          signature it lacks (U+FFFD, a token repeated 16 times, a literal
                          special token, JSON that does not parse where asked for)
  seed honoured           (--classes ...,seed) the two answers to a seeded request agree;
                          two that part where the engine's log-probabilities were the same
                          up to there drew differently from one distribution: FAIL at two
                          such pairs (where the figures differed first, a parting is
                          numerical: counted, not judged); PASS once three pairs agree and
                          independent draws would have agreed so with probability at most 0.01
  log-probabilities       (--classes ...,rescore) each greedy answer's generated
  consistent              log-probabilities against the same tokens scored as a prompt; two
                          answers with two tokens 0.5 nats apart FAIL; PASS after 7 answers
                          that agree (rules out disagreeing answers in half or more)
  context limit honoured  (--classes ...,limit) no answer runs past the room its prompt leaves
                          (FAIL at once); answers ended by length all end the same distance
                          short of their rooms (the engine's reserve; distances that differ
                          FAIL: the stop follows the verify step); (vLLM, the reference
                          engine) their tokens' returned figures agree with their scoring as
                          a prompt (0.5 nats), each the scored argmax: FAIL at two faulty
                          answers; PASS after 7 answers at the end of the context
  penalties honoured      (--classes ...,penalties) every committed token is its position's
                          argmax once penalised, scored from raw log-probabilities with the
                          answer's own counts; one a penalised rival beats by more than the
                          tie margin FAILs at once (penalties skipped on drafted positions);
                          PASS after 21 positions where the penalties decided. SGLang's
                          log-probabilities are penalised already (INCONCLUSIVE: compare the
                          answers with --reference); llama.cpp counts the prompt (not scored)
  sharpness honoured      over every sampled class at once: a sequential likelihood ratio
  (sampled)               of the requested temperature against 0.5x to 2x it, read among the
                          returned tokens surely inside each distribution (exact at any
                          temperature); FAIL where one fits better beyond 1e-9, PASS where
                          0.8x and 1.25x (and beyond) are each outweighed 100 to 1
  acceptance rule         (prompt lookup, where the replay names each draft d) the drafts
  honoured (sampled)      accepted against the sum of p(d), the rule min(1, p/q) for a
                          deterministic draft, both sides at a sequential bound; PASS rules
                          out an acceptance rate 10 points off
  residual honoured       (prompt lookup) each token drawn at a rejection, its mid-rank PIT
  (sampled)               in the residual (p without the rejected draft, renormalised), both
                          sides: a residual taken as its argmax, or drawn at the wrong
                          temperature; PASS rules out a mean rank 0.1 off 0.5

Server flags, per engine:
  vLLM       log-probabilities by default (--max-logprobs caps the alternatives; the probe
             reads --logprobs-mode raw_logprobs unless told --logprobs-mode processed);
             --per-request-spec-decode-metrics detailed gives each token's role
  SGLang     logprobs per request (OpenAI API; native /generate: return_logprob and
             top_logprobs_num, read from meta_info); its log-probabilities are at the
             request's temperature (read as --logprobs-mode tempered unless told raw)
  llama.cpp  logprobs per request; under speculation it returns none after the first token
             (logprob 0.0, no alternatives: upstream #27972), which the probe counts as unknown

Prompt lookup (n-gram): most tokens come from steps without a draft, which verify never
touched. Give the engine's settings with --ngram K:MIN:MAX (num_speculative_tokens,
prompt_lookup_min, prompt_lookup_max): the probe asks vLLM for token ids, replays its n-gram
proposer over each response and tests the temperature classes on the tokens verify produced
(the replay must reproduce vLLM's own per-step figures). Without it the probe reads the
settings off vLLM's per-step figures where they fit one way only; a check that still cannot
place the tokens verify produced PASSes only if even a fault confined to them would have shown.

Verdicts and exit statuses:
  0  PASS: every check rules its fault out at the size it names
  1  FAIL: the evidence rules honest verify out
  2  the endpoint could not be probed: unreachable, no request answered, or no
     log-probabilities at all (the message says which flag enables them)
  3  ERROR: the engine failed under the probe (HTTP 5xx, a dropped connection, no answer)
     after answering earlier requests; the probe names the request and class sent, and the
     engine's own error text. The classes most likely to crash an engine (top-k) go last.
  4  INCONCLUSIVE: a check could not tell within the bounds; each says which way it leans and
     how much more traffic it needs (--inconclusive-ok: exit 0 instead, as PASS)
"""

#: the exit status of an ERROR verdict (the engine failed under the probe)
EXIT_ERROR = 3
#: the exit status of an INCONCLUSIVE verdict (a gate that passed nothing must not read as 0)
EXIT_INCONCLUSIVE = 4


def exit_status(verdict: str, inconclusive_ok: bool = False) -> int:
    """The probe's exit status for ``verdict`` (see DESCRIPTION)."""
    from ..probe import ERROR

    return {ERROR: EXIT_ERROR, "fail": 1, "pass": 0,
            "inconclusive": 0 if inconclusive_ok else EXIT_INCONCLUSIVE}.get(verdict, EXIT_ERROR)

def _cmd_probe(args: argparse.Namespace) -> int:
    from ..probe import ProbeError, ProbePlan, format_probe, probe, probe_records
    from ..probe.ngram import NgramSettings

    try:
        ngram = NgramSettings.parse(args.ngram) if args.ngram else None
    except ValueError as exc:
        print(f"specscope probe: error: {exc}", file=sys.stderr)
        return 2
    from ..probe.workload import ALL_CLASSES

    classes = tuple(c for c in args.classes.split(",") if c)
    if classes == ("all",):
        classes = ALL_CLASSES
    plan = ProbePlan(classes=classes, requests=args.requests,
                     max_tokens=args.max_tokens, concurrency=args.concurrency,
                     token_budget=args.token_budget, timeout_s=args.timeout,
                     deadline_s=args.deadline, endpoint=args.endpoint, seed=args.seed,
                     fail_fast=not args.no_fail_fast, ngram=ngram,
                     until_decided=not args.once, default_temperature=args.default_temperature)
    def once():
        return probe(args.url, plan, model=args.model, engine=args.engine,
                     logprobs_mode=args.logprobs_mode, top_logprobs=args.top_logprobs,
                     dtype=args.dtype, reference=args.reference)

    if args.every is not None:
        return _loop(args, once)
    try:
        result = once()
    except ProbeError as exc:
        print(f"specscope probe: error: {exc}", file=sys.stderr)
        return 2
    if args.output:
        from ..io.trace import write_trace

        run_id = f"probe-{result.engine}-{int(result.seconds * 1000)}-{abs(hash(args.url)) % 10**6}"
        path = write_trace(args.output, probe_records(result, run_id))
        print(f"trace written to {path}", file=sys.stderr)
    print(json.dumps(result.to_json(), indent=1, default=str) if args.json else format_probe(result))
    return exit_status(result.verdict, args.inconclusive_ok)


def _loop(args: argparse.Namespace, once) -> int:
    """``--every``: a round every so many seconds, its verdict served on ``--metrics-port``."""
    import time

    from ..exporters.http import MetricsServer
    from ..probe.exporter import ProbeLoop

    def said(result, error: str) -> None:
        line = f"probe error: {error}" if result is None else \
            f"probe {result.verdict.upper()} ({result.tokens} tokens, {result.seconds:.1f} s)"
        print(line, flush=True)

    loop = ProbeLoop(args.url, once, args.every, on_round=said)
    server = None
    if args.metrics_port is not None:
        import prometheus_client  # noqa: F401  (it writes the page: a missing extra says so now)

        server = MetricsServer(loop, host=args.metrics_host, port=args.metrics_port,
                               text=loop.render).start()
        print(f"probe metrics at {server.url}", flush=True)
    try:
        if args.rounds:
            for i in range(args.rounds):
                t0 = time.monotonic()
                loop.round()
                if i + 1 < args.rounds:
                    time.sleep(max(0.0, args.every - (time.monotonic() - t0)))
            if server is not None and args.linger:
                time.sleep(args.linger)
        else:
            loop.start()
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        loop.close()
        if server is not None:
            server.close()
    if loop.engine_errors:
        return EXIT_ERROR
    if loop.failures:
        return 1
    return 0 if args.inconclusive_ok or not loop.inconclusive else EXIT_INCONCLUSIVE


def register(sub) -> None:
    p = sub.add_parser("probe", help="check verify through an OpenAI-compatible endpoint from "
                       "the log-probabilities it returns (exit 1 on FAIL, 4 on INCONCLUSIVE)",
                       description=DESCRIPTION)
    p.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="the model name to send (default: the first of /v1/models)")
    p.add_argument("--engine", choices=(*(e.name for e in registry.ENGINES if e.owned_by),
                                        "specscope", "unknown"),
                   help="how to read its log-probabilities and which parameters it takes "
                   "(default: from /v1/models' owned_by; specscope: the reference engine, "
                   "`specscope serve-engine`)")
    p.add_argument("--classes", default="greedy,temperature,top-p,top-k",
                   help="classes to send, comma-separated, or 'all': greedy, temperature, top-p, "
                   "top-k (default: these four), top-p/unset-t and top-k/unset-t (the "
                   "temperature left out: the engine's default applies) and stops (greedy "
                   "answers cut by max_tokens, stop strings and stop tokens, or held by "
                   "min_tokens) and "
                   "prefix (a long shared prefix, alone, "
                   "repeated and at concurrency); a class whose requests the "
                   "server refuses (HTTP 400) is reported as not supported")
    p.add_argument("--default-temperature", type=float, default=None, metavar="T",
                   help="the engine's temperature where a request leaves it out, for the "
                   "unset-t classes (default: its defaults table's: vLLM and SGLang 1.0, "
                   "llama.cpp 0.8; a server whose generation config sets another must be told)")
    p.add_argument("--requests", type=int, default=24, help="requests in all (default 24)")
    p.add_argument("--max-tokens", type=int, default=64, help="output tokens per request")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--token-budget", type=int, default=4096,
                   help="stop sending once this many output tokens came back (default 4096)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument("--deadline", type=float, default=120.0,
                   help="seconds for the whole probe, every round (default 120)")
    p.add_argument("--once", action="store_true",
                   help="send the plan's requests once; by default the probe keeps asking, a "
                   "round at a time, until every check decides or the deadline passes")
    p.add_argument("--endpoint", choices=("chat", "completions", "generate"), default="chat",
                   help="/v1/chat/completions, /v1/completions, or SGLang's native /generate "
                   "(return_logprob, meta_info)")
    p.add_argument("--top-logprobs", type=int, default=20,
                   help="alternatives per position to ask for (default 20)")
    p.add_argument("--logprobs-mode", choices=("raw", "tempered", "processed"), default=None,
                   help="what the server's log-probabilities are: raw (temperature 1), tempered "
                        "(at the request's temperature, before top-k/top-p) or processed (the "
                        "distribution sampled from); default per engine: SGLang tempered, "
                        "vLLM and llama.cpp raw (vLLM --logprobs-mode says which)")
    p.add_argument("--dtype", default="",
                   help="the target's dtype, for the greedy tie margin (bfloat16 0.25, float16 "
                   "0.05, float32 0.001 nats; default: the widest)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--inconclusive-ok", action="store_true",
                   help="exit 0 on INCONCLUSIVE (by default 4: a gate that ruled nothing out "
                   "does not pass)")
    p.add_argument("--no-fail-fast", action="store_true",
                   help="send every request even after a check has failed (by default the "
                   "probe stops sending there: the verdict cannot change)")
    p.add_argument("--ngram", metavar="K:MIN:MAX",
                   help="the engine's prompt-lookup settings (num_speculative_tokens, "
                   "prompt_lookup_min, prompt_lookup_max, e.g. 4:2:5): the n-gram proposer is "
                   "replayed over vLLM's token ids to test the tokens verify produced")
    p.add_argument("--reference", help="a target-only endpoint: the greedy prompts (the "
                   "penalties class's too) are sent there too and each pair compared as "
                   "`specscope diverge` does")
    p.add_argument("--every", type=float, metavar="SECONDS",
                   help="probe periodically, every SECONDS (with --metrics-port: an exporter)")
    p.add_argument("--rounds", type=int, default=0,
                   help="with --every: stop after this many rounds (default: run until Ctrl-C)")
    p.add_argument("--metrics-port", type=int, help="serve the last verdict on /metrics "
                   "(specscope_probe_*)")
    p.add_argument("--metrics-host", default="127.0.0.1")
    p.add_argument("--linger", type=float, default=0.0,
                   help="with --rounds: keep /metrics up this many seconds after the last round")
    p.add_argument("-o", "--output", help="write the probe as a trace (report reads it)")
    p.add_argument("--json", action="store_true", help="the verdict as JSON")
    p.set_defaults(func=_cmd_probe)
