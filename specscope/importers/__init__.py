"""Importers: other tools' outputs into specscope records. Never imports torch or dash.

The format is detected from the content (not the file name); ``format=`` forces one. Each
parser reports lines it could not read with file and line, and keeps everything else.

``FORMATS`` says, per format, what it reads, what it gives and what it cannot know (the
import reference and ``specscope import --help`` are written from it).

Every parser also tallies the identities its source's figures must satisfy and the
definitional traps that apply (``ImportResult.identities`` / ``.traps``; ``specscope check``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from ._common import ImportResult
from . import (bench, inferencex, kineto, llamacpp, otlp, promtext, responses, sglang_log,
               specbench, trtllm, vllm_log)


def _per_request_kind(obj: object) -> str | None:
    kind = responses.shape(obj)
    if kind:
        return kind
    if specbench.sniff(obj):
        return "specbench"
    if trtllm.sniff(obj):
        return "trtllm-iteration-stats"
    return None


#: a stream's chunks before its last carry no figures: this many lines are looked at for one
LINES_LOOKED_AT = 2000


def _lines_kind(lines: list[str]) -> str | None:
    """The per-request format of the first JSON line (of the first ``LINES_LOOKED_AT``) that
    names one; a line cut at the head's end is skipped."""
    for line in lines[:LINES_LOOKED_AT]:
        try:
            kind = _per_request_kind(json.loads(line))
        except json.JSONDecodeError:
            continue
        if kind:
            return kind
    return None


def _json_kind(head: str, path: Path) -> str | None:
    text = head.lstrip()
    if text.startswith("data: "):  # a saved server-sent-event stream: its events' JSON
        return _lines_kind([line[6:] for line in text.splitlines()
                            if line.startswith("data: ") and not line.startswith("data: [DONE]")])
    if not text.startswith(("{", "[")):
        return None
    first = text.split("\n", 1)[0]
    try:
        json.loads(first)
    except json.JSONDecodeError as exc:
        # pretty-printed JSON fails only at the end of its first line; a log line that opens
        # with a bracket ("[2025-06-15 10:23:45 TP0] ...") fails inside it: not JSON, and the
        # whole file is never loaded to find out
        if exc.pos < len(first.rstrip()) - 1:
            return None
    try:
        obj = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (json.JSONDecodeError, OSError, ValueError):
        obj = None
    if obj is None:  # JSONL: the first line, or the first that says (a stream's chunks)
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            return None
        if isinstance(obj, dict) and obj.get("kind") == "header":
            return "specscope"
        if otlp.sniff(obj):
            return otlp.FORMAT
        if isinstance(obj, dict) and "metadata" in obj and "metrics" in obj:
            return "aiperf-records"
        if isinstance(obj, dict) and ("accept_length" in obj or "mean_ttft_ms" in obj):
            return "sglang-bench"
        return _lines_kind(text.splitlines())
    kind = _per_request_kind(obj)
    if kind:
        return kind
    if isinstance(obj, dict):
        if obj.get("kind") == "header":
            return "specscope"
        if otlp.sniff(obj):
            return otlp.FORMAT
        if "traceEvents" in obj:
            return "kineto"
        if "metadata" in obj and "metrics" in obj:
            return "aiperf-records"
        if "aiperf_version" in obj:
            return "aiperf"
        if "tput_per_gpu" in obj:
            return "inferencex-row"
        if "accepted_per_position" in obj or "synthetic_acceptance_rates" in obj:
            return "inferencex-acceptance"
        if isinstance(obj.get("benchmarks"), list):
            return "guidellm"
        if "mean_ttft_ms" in obj or "median_ttft_ms" in obj:
            return "sglang-bench" if obj.get("backend") == "sglang" or "accept_length" in obj else "vllm-bench"
    if isinstance(obj, list) and obj and isinstance(obj[0], dict) and "ph" in obj[0]:
        return "kineto"
    return None


def detect(path: str | os.PathLike) -> str:
    """The format of a file, from its content; raises ValueError naming the known formats."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(256 * 1024).decode("utf-8", errors="replace")
    kind = _json_kind(head, path)
    if kind:
        return kind
    if "Serving Benchmark Result" in head or bench.lone_spec_block(head):
        return "bench-console"
    if vllm_log.sniff(head):
        return "vllm-log"
    if sglang_log.sniff(head):
        return "sglang-log"
    if llamacpp.sniff(head):
        return "llamacpp-log"
    if "search-space" in head:
        return "inferencex-config"
    if "thinking_on" in head or "thinking_off" in head:
        return "inferencex-golden-al"
    if promtext.sniff(head):
        return "prometheus-text"
    if head.lstrip().startswith("data: ") and '"chat.completion.chunk"' in head:
        raise ValueError(f"{path}: a saved stream of OpenAI-compatible chunks with no speculative "
                         "figures in any of them; SGLang adds its own to the stream when the "
                         'request asks for them ("return_spec_tokens_details": true)')
    raise ValueError(f"{path}: unknown format; specscope imports: {', '.join(sorted(PARSERS))}")


def _specscope(path: Path, run_id: str) -> ImportResult:
    from ..io.trace import read_trace

    trace = read_trace(path)
    res = ImportResult("specscope", problems=trace.problems)
    res.extend(trace.records)
    res.lines_read = len(trace.records) + len(trace.problems)  #: records (and bad lines) read
    return res


PARSERS: dict[str, Callable[..., ImportResult]] = {  # streaming ones also take emit=
    "vllm-log": vllm_log.parse,
    "sglang-log": sglang_log.parse,
    "prometheus-text": promtext.parse,
    "vllm-bench": lambda p, r: bench.parse_serving_json(p, r, "vllm-bench"),
    "sglang-bench": lambda p, r: bench.parse_serving_json(p, r, "sglang-bench"),
    "bench-console": bench.parse_console,
    "aiperf": bench.parse_aiperf,
    "aiperf-records": bench.parse_aiperf_records,
    "inferencex-row": inferencex.parse_row,
    "inferencex-acceptance": inferencex.parse_acceptance,
    "inferencex-golden-al": inferencex.parse_golden,
    "inferencex-config": inferencex.parse_master_config,
    "guidellm": inferencex.parse_guidellm,
    "kineto": kineto.parse,
    **{fmt: (lambda f: lambda p, r: responses.parse(p, r, f))(fmt) for fmt in responses.EXTRACT},
    "trtllm-iteration-stats": trtllm.parse,
    "llamacpp-log": llamacpp.parse,
    "specbench": specbench.parse,
    otlp.FORMAT: otlp.parse,
    "specscope": _specscope,
}


#: format -> (what it reads, what it gives, what it cannot know): the import reference and
#: ``specscope import --help`` are written from this table
FORMATS: dict[str, tuple[str, str, str]] = {
    "vllm-log": ("vLLM server log: V0 and V1 spec-decode lines, stage times, Engine lines",
                 "SpecCounts per logging interval, Phase, Sample",
                 "per-request figures; V0's accepted counter is no prefix count"),
    "sglang-log": ("SGLang server log: Decode and Prefill batch lines",
                   "its reported accept length per line, Sample; drafts, drafted and accepted "
                   "per line where it logs every batch (--decode-log-interval 1)",
                   "per-position counts; counts at any other logging interval"),
    "prometheus-text": ("a /metrics snapshot of vLLM, SGLang, TensorRT-LLM or llama.cpp",
                        "SpecCounts per snapshot (counters) or reported gauges",
                        "anything before the first snapshot; per-request figures"),
    "vllm-bench": ("`vllm bench serve` result JSON", "Benchmark, SpecCounts from spec_decode_*",
                   "per-position counts the result does not list"),
    "sglang-bench": ("`sglang.bench_serving` result JSONL", "Benchmark (accept length as reported)",
                     "drafted and accepted counts"),
    "bench-console": ("the console block of either benchmark", "Benchmark, SpecCounts",
                      "figures the block rounds away"),
    "aiperf": ("AIPerf / genai-perf profile export JSON", "Benchmark", "speculative figures"),
    "aiperf-records": ("AIPerf per-request JSONL", "Request per record", "speculative figures"),
    "inferencex-row": ("InferenceX aggregate result row", "Benchmark with its configuration",
                       "per-request figures"),
    "inferencex-acceptance": ("InferenceX measured acceptance counts per position",
                              "SpecCounts (exact)", "latencies"),
    "inferencex-golden-al": ("InferenceX golden acceptance length per num_speculative_tokens",
                             "Benchmark per level", "counts: a golden figure is a target"),
    "inferencex-config": ("InferenceX master config search space", "Run records",
                          "any measurement"),
    "guidellm": ("GuideLLM benchmarks.json", "Benchmark per strategy", "speculative figures"),
    "kineto": ("PyTorch profiler (Kineto) Chrome trace", "Phase records",
               "acceptance (a profile has no verify outcome)"),
    "vllm-responses": ("vLLM responses with per-request spec-decode metrics (both shapes; "
                       "per-step detail when detailed)",
                       "Request per response, summed SpecCounts", "per-position counts "
                       "without the detailed level"),
    "sglang-responses": ("SGLang responses: meta_info / sglext spec details",
                         "Request per response, summed SpecCounts", "per-step detail"),
    "llamacpp-responses": ("llama.cpp responses with timings.draft_n (chat, completions, "
                           "native, a stream's last chunk)", "Request per response",
                           "verify steps (timings give no step count)"),
    "trtllm-requests": ("TensorRT-LLM per-request perf_metrics", "Request per response",
                        "per-position counts"),
    "trtllm-iteration-stats": ("TensorRT-LLM iteration stats with specDecodingStats",
                               "SpecCounts per iteration", "per-request figures"),
    "llamacpp-log": ("llama-server log (per-step, per-task and statistics lines) or the "
                     "llama-speculative summary", "Request per task, SpecCounts",
                     "per-position counts at the default log level"),
    "specbench": ("Spec-Bench model-answer JSONL", "Request per answer with its category",
                  "drafted counts (answers give steps and tokens)"),
    "otlp-json": ("OTLP JSON span exports: SGLang's speculative stage spans, vLLM's "
                  "llm_request, specscope's own", "Request per request span, SpecCounts, Phase "
                  "per stage span", "drafted counts where no span carries them"),
    "specscope": ("a specscope trace", "its records", "nothing more than the trace holds"),
}

STREAMING = {"vllm-log", "sglang-log", "llamacpp-log"}


def import_file(path: str | os.PathLike, *, format: str | None = None,
                run_id: str | None = None, emit=None) -> ImportResult:
    """Read one file into records (its own run, named after the file unless ``run_id``).

    ``emit``: a callable taking record batches; line-based formats then stream through it in
    bounded memory (others hand their records over in one batch at the end).
    """
    path = Path(path)
    fmt = format or detect(path)
    if fmt not in PARSERS:
        raise ValueError(f"unknown format {fmt!r}; specscope imports: {', '.join(sorted(PARSERS))}")
    try:
        if fmt in STREAMING:
            res = PARSERS[fmt](path, run_id or path.stem, emit=emit)
        else:
            res = PARSERS[fmt](path, run_id or path.stem)
        if emit is not None:
            res.emit = emit
            res.flush()
        else:  # callers without a sink get records, never column batches
            from ..io.columns import expand

            res.records = expand(res.records)
        return res
    except OSError:
        raise
    except Exception as exc:  # malformed structure of a whole-file format: one clear error
        raise ValueError(f"{path}: not valid {fmt}: {type(exc).__name__}: {exc}") from None


def import_files(paths: list[str | os.PathLike], out: str | os.PathLike, *,
                 format: str | None = None, run: str | None = None) -> list[ImportResult]:
    """Import several files into one trace: one run each, or all under ``run``."""
    from ..io.trace import open_writer

    results = []
    with open_writer(out) as writer:
        for p in paths:
            results.append(import_file(p, format=format, run_id=run, emit=writer.write))
    return results


__all__ = ["FORMATS", "ImportResult", "PARSERS", "detect", "import_file", "import_files"]
