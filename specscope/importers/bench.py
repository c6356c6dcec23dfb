"""Benchmark results into specscope records: vLLM and SGLang serving benchmarks (JSON and
console), AIPerf exports and per-request records, GuideLLM, and InferenceX result rows,
acceptance-rate files, golden acceptance-length curves and master configs.

Metric names are canonical with their unit: ``{metric}_ms_{stat}`` for latencies (stat: mean,
p50, p90, p99, p99.9, std), ``*_tok_s`` / ``*_req_s`` for throughput. Only what a source gives
is written; nothing is derived unless said.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from .. import schema
from ..schema import Problem
from ._common import ImportResult, load_json, run_record

LAT = ("ttft", "tpot", "itl", "e2el")
STATS = {"mean": "mean", "median": "p50", "std": "std", "p90": "p90", "p95": "p95", "p99": "p99",
         "p99.9": "p99.9", "p50": "p50", "p25": "p25", "p75": "p75"}
VLLM_SCALARS = {"completed": "completed", "failed": "failed", "duration": "duration_s",
                "total_input_tokens": "total_input_tokens",
                "total_output_tokens": "total_output_tokens",
                "request_throughput": "request_throughput_req_s",
                "output_throughput": "output_throughput_tok_s",
                "total_token_throughput": "total_throughput_tok_s",
                "max_concurrency": "concurrency"}


def _frac(v: float | None) -> float | None:
    """A rate given in percent or as a fraction, as a fraction."""
    return None if v is None else (v / 100 if v > 1.0 else v)


def _counts(run_id: str, metrics: dict, source: str) -> list[schema.SpecCountsRecord]:
    """Spec-decode counters a benchmark reports, as a SpecCountsRecord (exact where counted)."""
    drafts, drafted, accepted = (metrics.get(k) for k in ("num_drafts", "draft_tokens", "accepted_tokens"))
    al, rate = metrics.get("acceptance_length"), metrics.get("acceptance_rate")
    if all(v is None for v in (drafts, drafted, accepted, al, rate)):
        return []
    per_rates = [metrics[k] for k in sorted(k for k in metrics if k.startswith("per_position_acceptance_"))]
    per_pos = tuple(round(r * drafts) for r in per_rates) if drafts and per_rates else ()
    return [schema.SpecCountsRecord(
        run_id=run_id, t_ns=0, num_drafts=int(drafts) if drafts is not None else None,
        num_draft_tokens=int(drafted) if drafted is not None else None,
        num_accepted=int(accepted) if accepted is not None else None, accepted_per_pos=per_pos,
        reported_mean_acceptance_length=al, reported_acceptance_rate=rate, source=source)]


# ---------------------------------------------------------------- vLLM / SGLang JSON
def serving_metrics(d: dict) -> dict[str, float | None]:
    """Canonical metrics from a vLLM/SGLang serving-benchmark result object."""
    out: dict[str, float | None] = {}
    for key, value in d.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        m = re.fullmatch(r"(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el|e2e_latency)_ms", key)
        if m:
            metric = "e2el" if m.group(2).startswith("e2e") else m.group(2)
            out[f"{metric}_ms_{STATS.get(m.group(1), m.group(1))}"] = float(value)
        elif key in VLLM_SCALARS:
            out[VLLM_SCALARS[key]] = float(value)
    spec = {"spec_decode_acceptance_rate": "acceptance_rate", "spec_decode_acceptance_length":
            "acceptance_length", "spec_decode_num_drafts": "num_drafts",
            "spec_decode_draft_tokens": "draft_tokens", "spec_decode_accepted_tokens": "accepted_tokens",
            "accept_length": "acceptance_length"}
    for key, name in spec.items():
        if isinstance(d.get(key), (int, float)):
            out[name] = float(d[key])
    if out.get("acceptance_rate") is not None:
        out["acceptance_rate"] = _frac(out["acceptance_rate"])
    rates = d.get("spec_decode_per_position_acceptance_rates")
    if isinstance(rates, list):
        scale = 100 if any(isinstance(r, (int, float)) and r > 1 for r in rates) else 1
        for i, r in enumerate(rates):
            if isinstance(r, (int, float)):
                out[f"per_position_acceptance_{i}"] = r / scale
    return out


def parse_serving_json(path: str | os.PathLike, run_id: str, source: str) -> ImportResult:
    res = ImportResult(source)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    res.lines_read = text.count("\n") + 1
    objs: list[tuple[int, Any]] = []
    try:
        objs = [(1, json.loads(text))]
    except json.JSONDecodeError:
        for lineno, line in enumerate(text.splitlines(), start=1):  # JSONL: one result a line
            if not line.strip():
                continue
            try:
                objs.append((lineno, json.loads(line)))
            except json.JSONDecodeError as exc:
                res.problems.append(Problem(str(path), lineno, f"not JSON: {exc.msg}"))
    model = ""
    for i, (lineno, d) in enumerate(objs):
        if not isinstance(d, dict):
            res.problems.append(Problem(str(path), lineno, "not a JSON object"))
            continue
        rid = run_id if len(objs) == 1 else f"{run_id}#{i}"
        metrics = serving_metrics(d)
        model = d.get("model_id") or d.get("model") or model
        config = {k: d[k] for k in ("backend", "model_id", "model", "max_concurrency", "num_prompts",
                                    "request_rate", "date") if k in d and not isinstance(d[k], (dict, list))}
        if len(objs) > 1:
            res.add(run_record(rid, d.get("backend", source), source, path, model=str(model)))
        res.add(schema.BenchmarkRecord(run_id=rid, source=source, metrics=metrics, config=config))
        res.extend(_counts(rid, metrics, source))
    if len(objs) == 1:
        res.add(run_record(run_id, source.split("-")[0], source, path, model=str(model)))
    return res


# ---------------------------------------------------------------- console output
CONSOLE = {
    r"Successful requests:\s+([\d.]+)": "completed", r"Failed requests:\s+([\d.]+)": "failed",
    r"Benchmark duration \(s\):\s+([\d.]+)": "duration_s",
    r"Total input tokens:\s+([\d.]+)": "total_input_tokens",
    r"Total generated tokens:\s+([\d.]+)": "total_output_tokens",
    r"Request throughput \(req/s\):\s+([\d.]+)": "request_throughput_req_s",
    r"Output token throughput \(tok/s\):\s+([\d.]+)": "output_throughput_tok_s",
    r"Total [Tt]oken throughput \(tok/s\):\s+([\d.]+)": "total_throughput_tok_s",
    r"Maximum request concurrency:\s+([\d.]+)": "concurrency",
    r"Acceptance rate \(%\):\s+([\d.]+)": "acceptance_rate",
    r"Acceptance length:\s+([\d.]+)": "acceptance_length",
    r"Accept length:\s+([\d.]+)": "acceptance_length",
    r"Drafts:\s+([\d.]+)": "num_drafts", r"Draft tokens:\s+([\d.]+)": "draft_tokens",
    r"Accepted tokens:\s+([\d.]+)": "accepted_tokens",
}
LAT_LINE = re.compile(r"(Mean|Median|P\d+(?:\.\d+)?) (TTFT|TPOT|ITL|E2EL|E2E Latency) \(ms\):\s+([\d.]+)")
POSITION = re.compile(r"Position (\d+):\s+([\d.]+)")


def lone_spec_block(text: str) -> bool:
    """A ``vllm bench serve`` "Speculative Decoding" block without the rest of the console."""
    return "Speculative Decoding" in text and "Acceptance rate (%)" in text


def parse_console(path: str | os.PathLike, run_id: str) -> ImportResult:
    res = ImportResult("bench-console")
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read().replace("\r", "\n")  # progress bars redraw with carriage returns
    source = "sglang-bench" if "sglang" in text.lower() and "vllm" not in text.lower() else "vllm-bench"
    res.lines_read = text.count("\n") + 1
    blocks = text.split("Serving Benchmark Result")[1:]
    if not blocks and lone_spec_block(text):  # the spec-decode block copied on its own
        blocks = [text[text.index("Speculative Decoding"):]]
    if not blocks:
        res.problems.append(Problem(str(path), 1, "no 'Serving Benchmark Result' block"))
    for i, block in enumerate(blocks):
        block = block.split("\n=====", 1)[0] if "\n=====" in block else block
        metrics: dict[str, float | None] = {}
        for rx, name in CONSOLE.items():
            m = re.search(rx, block)
            if m:
                metrics[name] = float(m.group(1))
        for stat, metric, value in LAT_LINE.findall(block):
            metric = {"E2E Latency": "e2el"}.get(metric, metric.lower())
            metrics[f"{metric}_ms_{STATS.get(stat.lower(), stat.lower())}"] = float(value)
        for pos, value in POSITION.findall(block):
            metrics[f"per_position_acceptance_{int(pos)}"] = float(value) / 100
        rate = metrics.get("acceptance_rate")
        if rate is not None:
            metrics["acceptance_rate"] = rate / 100
        rid = run_id if len(blocks) == 1 else f"{run_id}#{i}"
        res.add(run_record(rid, source.split("-")[0], "bench-console", path))
        res.add(schema.BenchmarkRecord(run_id=rid, source=source, metrics=metrics))
        res.extend(_counts(rid, metrics, source))
    return res


# ---------------------------------------------------------------- AIPerf
AIPERF = {"time_to_first_token": "ttft", "time_per_output_token": "tpot",
          "inter_token_latency": "itl", "request_latency": "e2el", "inter_chunk_latency": "itl_chunk",
          "time_to_second_token": "ttst"}


def parse_aiperf(path: str | os.PathLike, run_id: str) -> ImportResult:
    res = ImportResult("aiperf")
    d = load_json(path, res)
    metrics: dict[str, float | None] = {}
    for key, value in d.items():
        if not isinstance(value, dict) or "unit" not in value:
            continue
        unit = value.get("unit", "")
        base = AIPERF.get(key)
        for stat, v in value.items():
            if stat == "unit" or not isinstance(v, (int, float)):
                continue
            stat_name = {"avg": "mean"}.get(stat, stat)
            if base and unit == "ms":
                metrics[f"{base}_ms_{stat_name}"] = float(v)
            elif key == "request_throughput" and stat == "avg":
                metrics["request_throughput_req_s"] = float(v)
            elif key == "output_token_throughput" and stat == "avg":
                metrics["output_throughput_tok_s"] = float(v)
            elif key == "output_token_throughput_per_user":
                metrics[f"interactivity_tok_s_user_{stat_name}"] = float(v)
            elif key == "request_count" and stat == "avg":
                metrics["completed"] = float(v)
            elif key == "benchmark_duration" and stat == "avg":
                metrics["duration_s"] = float(v) / (1000 if unit == "ms" else 1)
    cfg = d.get("input_config") if isinstance(d.get("input_config"), dict) else {}
    model = ""
    if isinstance(cfg.get("endpoint"), dict):
        names = cfg["endpoint"].get("model_names") or []
        model = names[0] if names else ""
    res.add(run_record(run_id, "aiperf", "aiperf", path, model=model,
                                  engine_version=str(d.get("aiperf_version", ""))))
    totals = {k: _stat(d, k, "avg") for k in ("total_spec_decode_steps", "total_draft_tokens",
                                                "total_accepted_draft_tokens")}
    for key, name in (("spec_decode_acceptance_length", "acceptance_length_request_mean"),
                      ("spec_decode_token_weighted_acceptance_length", "acceptance_length"),
                      ("spec_decode_overall_draft_acceptance_rate", "acceptance_rate")):
        v = _stat(d, key, "avg")
        if v is not None:
            metrics[name] = v / 100 if name == "acceptance_rate" else v
    if totals["total_accepted_draft_tokens"] is not None:
        steps, drafted, accepted = (None if v is None else int(v) for v in totals.values())
        res.add(schema.SpecCountsRecord(
            run_id=run_id, t_ns=0, num_drafts=steps, num_draft_tokens=drafted, num_accepted=accepted,
            reported_mean_acceptance_length=metrics.get("acceptance_length"),
            reported_acceptance_rate=metrics.get("acceptance_rate"), source="aiperf"))
        if steps and accepted is not None:
            res.identity("token-weighted acceptance length = 1 + accepted / steps",
                         metrics.get("acceptance_length"), 1 + accepted / steps, file=str(path), tol=1e-3)
        res.trap("aiperf-request-mean", "AIPerf's spec_decode_acceptance_length is the mean of "
                 "per-request means (request-weighted); the pooled figure is "
                 "spec_decode_token_weighted_acceptance_length")
    res.add(schema.BenchmarkRecord(
        run_id=run_id, source="aiperf", metrics=metrics,
        config={"aiperf_version": d.get("aiperf_version"), "schema_version": d.get("schema_version")}))
    return res


def _stat(d: dict, key: str, stat: str) -> float | None:
    v = d.get(key)
    v = v.get(stat) if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _value(m: dict, key: str) -> float | None:
    v = m.get(key)
    v = v.get("value") if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def parse_aiperf_records(path: str | os.PathLike, run_id: str) -> ImportResult:
    """AIPerf per-request ``profile_export.jsonl``: each line a RequestRecord, with its
    ``spec_decode_*`` figures where the engine gave them."""
    from ._requests import Req, check_request, pooled

    res = ImportResult("aiperf-records")
    res.add(run_record(run_id, "aiperf", "aiperf-records", path))
    spec: list[Req] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            res.lines_read += 1
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                meta, m = d["metadata"], d["metrics"]
                start = int(meta["request_start_ns"])
                end = int(meta["request_end_ns"])
                ttft_ms = m.get("time_to_first_token", {}).get("value")
                first = start + int(float(ttft_ms) * 1e6) if ttft_ms is not None else 0
                gaps = m.get("inter_chunk_latency", {}).get("value") or []
                chunks = [first] if ttft_ms is not None else []
                for gap in gaps if chunks and isinstance(gaps, list) else ():
                    chunks.append(chunks[-1] + int(float(gap) * 1e6))
                rid = str(meta.get("x_request_id", lineno))
                steps, drafted, accepted = (_value(m, f"spec_decode_{k}") for k in
                                            ("steps", "draft_tokens", "accepted_draft_tokens"))
                req = Req(rid, steps=None if steps is None else int(steps),
                          drafted=None if drafted is None else int(drafted),
                          accepted=None if accepted is None else int(accepted),
                          reported_al=_value(m, "spec_decode_acceptance_length"))
                rate = _value(m, "spec_decode_draft_acceptance_rate")
                req.reported_rate = None if rate is None else rate / 100
                if req.accepted is not None:
                    check_request(res, req, "aiperf-records", str(path), lineno)
                    spec.append(req)
                res.add(schema.RequestRecord(
                    run_id=run_id, rank=0, request_id=rid,
                    t_arrival_ns=start,
                    t_first_token_ns=first, t_finish_ns=end, chunk_times_ns=tuple(chunks),
                    num_prompt_tokens=int(m.get("input_sequence_length", {}).get("value", 0)),
                    num_output_tokens=int(m.get("output_sequence_length", {}).get("value", 0)),
                    finish_reason="cancelled" if meta.get("was_cancelled") else "",
                    num_verify_steps=req.steps, num_draft_tokens=req.drafted,
                    num_accepted=req.accepted))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                res.problems.append(Problem(str(path), lineno, f"not an AIPerf record: {exc!r}"))
    summed = pooled(spec, run_id, "aiperf-records")
    if summed is not None:
        res.add(summed)
    return res
