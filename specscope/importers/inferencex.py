"""InferenceX files: aggregate result rows, measured acceptance rates, golden acceptance-length
curves and master configs; and GuideLLM ``benchmarks.json``.

Mapping of a result row: ``tput_per_gpu`` -> ``throughput_per_gpu_tok_s`` (input + output),
``output_tput_per_gpu`` -> ``output_throughput_per_gpu_tok_s``, ``*_intvty`` -> interactivity
(tok/s/user), ``*_ttft``/``*_tpot``/``*_itl``/``*_e2el`` are seconds -> ``*_ms_*``. The
configuration (hardware, framework, precision, tp/ep, DP attention, spec decoding, isl/osl,
concurrency) lands in the run record's labels and the benchmark's config.
"""

from __future__ import annotations

import os
import re

from .. import schema
from ..schema import Problem
from ._common import ImportResult, load_json, run_record
from .bench import STATS

CONFIG_KEYS = ("hw", "conc", "image", "model", "framework", "precision", "spec_decoding", "disagg",
               "isl", "osl", "tp", "ep", "dp_attention", "is_multinode")


def parse_row(path: str | os.PathLike, run_id: str) -> ImportResult:
    res = ImportResult("inferencex-row")
    d = load_json(path, res)
    metrics: dict[str, float | None] = {}
    for key, value in d.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        m = re.fullmatch(r"(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el|intvty)", key)
        if m:
            stat = STATS.get(m.group(1), m.group(1))
            if m.group(2) == "intvty":
                metrics[f"interactivity_tok_s_user_{stat}"] = float(value)
            else:
                metrics[f"{m.group(2)}_ms_{stat}"] = float(value) * 1000
        elif key == "tput_per_gpu":
            metrics["throughput_per_gpu_tok_s"] = float(value)
        elif key == "output_tput_per_gpu":
            metrics["output_throughput_per_gpu_tok_s"] = float(value)
        elif key == "input_tput_per_gpu":
            metrics["input_throughput_per_gpu_tok_s"] = float(value)
    config = {k: d[k] for k in CONFIG_KEYS if k in d}
    spec = str(d.get("spec_decoding", "none"))
    res.add(run_record(run_id, str(d.get("framework", "")), "inferencex-row", path,
                                  algorithm=spec, model=str(d.get("model", "")),
                                  backend="hip" if str(d.get("hw", "")).lower().startswith("mi") else "cuda",
                                  labels={k: str(v) for k, v in config.items()}))
    res.add(schema.BenchmarkRecord(run_id=run_id, source="inferencex", metrics=metrics,
                                              config=config))
    return res


def parse_acceptance(path: str | os.PathLike, run_id: str) -> ImportResult:
    """``synthetic_acceptance_rates.json``: measured drafts and accepted counts per position."""
    res = ImportResult("inferencex-acceptance")
    d = load_json(path, res)
    per_pos = d.get("accepted_per_position", {})
    counts = tuple(int(per_pos[k]) for k in sorted(per_pos, key=int))
    drafts = d.get("num_drafts")
    cfg = d.get("speculative_config", {}) if isinstance(d.get("speculative_config"), dict) else {}
    k = int(cfg.get("num_speculative_tokens", len(counts)) or len(counts))
    res.add(run_record(run_id, "vllm", "inferencex-acceptance", path, num_steps=k,
                                  algorithm=str(cfg.get("method", "unknown")),
                                  labels={"draft_model": str(cfg.get("model", ""))}))
    res.add(schema.SpecCountsRecord(
        run_id=run_id, t_ns=0, num_drafts=int(drafts) if drafts is not None else None,
        num_draft_tokens=int(drafts) * k if drafts is not None else None,
        num_accepted=sum(counts) if counts else None, accepted_per_pos=counts,
        source="inferencex-acceptance"))
    return res


def _yaml(path: str | os.PathLike):
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def parse_golden(path: str | os.PathLike, run_id: str) -> ImportResult:
    """Golden acceptance length per num_speculative_tokens and thinking mode: one run each."""
    res = ImportResult("inferencex-golden-al")
    data = _yaml(path)
    res.lines_read = 1
    for model, modes in (data or {}).items():
        if not isinstance(modes, dict):
            res.problems.append(Problem(str(path), 1, f"{model}: expected a mapping of modes"))
            continue
        for mode, curve in modes.items():
            for steps, al in (curve or {}).items():
                rid = f"{run_id}/{model}/{mode}/s{steps}"
                res.add(run_record(rid, "vllm", "inferencex-golden-al", path,
                                              num_steps=int(steps), algorithm="mtp", model=str(model),
                                              labels={"mode": str(mode), "role": "golden"}))
                res.add(schema.BenchmarkRecord(
                    run_id=rid, source="inferencex-golden-al",
                    metrics={"acceptance_length": float(al)},
                    config={"model": model, "mode": mode, "num_speculative_tokens": int(steps)}))
    return res


def parse_master_config(path: str | os.PathLike, run_id: str) -> ImportResult:
    """A master-config entry: one run record per search-space point (no measurements)."""
    res = ImportResult("inferencex-config")
    data = _yaml(path)
    res.lines_read = 1
    for name, entry in (data or {}).items():
        if not isinstance(entry, dict):
            continue
        for scenario, points in (entry.get("scenarios") or {}).items():
            for block in points or []:
                for i, sp in enumerate(block.get("search-space") or []):
                    rid = f"{run_id}/{name}/{scenario}/isl{block.get('isl')}-osl{block.get('osl')}/{i}"
                    labels = {"config": str(name), "scenario": str(scenario),
                              "isl": str(block.get("isl")), "osl": str(block.get("osl")),
                              "image": str(entry.get("image", "")), "runner": str(entry.get("runner", "")),
                              **{k: str(v) for k, v in sp.items()}}
                    res.add(run_record(
                        rid, str(entry.get("framework", "")), "inferencex-config", path,
                        algorithm=str(sp.get("spec-decoding", "none")), model=str(entry.get("model", "")),
                        backend="hip" if "mi3" in str(entry.get("runner", "")) else "cuda",
                        labels=labels))
    return res


def parse_guidellm(path: str | os.PathLike, run_id: str) -> ImportResult:
    res = ImportResult("guidellm")
    d = load_json(path, res)
    names = {"time_to_first_token_ms": "ttft", "time_per_output_token_ms": "tpot",
             "inter_token_latency_ms": "itl", "request_latency": "e2el"}
    for i, b in enumerate(d.get("benchmarks", [])):
        rid = f"{run_id}#{i}"
        metrics: dict[str, float | None] = {}
        for key, short in names.items():
            dist = (b.get("metrics", {}).get(key) or {}).get("successful") or {}
            scale = 1000.0 if key == "request_latency" else 1.0  # request_latency is seconds
            for stat in ("mean", "median", "std_dev"):
                if isinstance(dist.get(stat), (int, float)):
                    metrics[f"{short}_ms_{STATS.get(stat, 'std' if stat == 'std_dev' else stat)}"] = dist[stat] * scale
            for p, v in (dist.get("percentiles") or {}).items():
                label = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p999": "p99.9"}.get(p)
                if label and isinstance(v, (int, float)):
                    metrics[f"{short}_ms_{label}"] = v * scale
        for key, name in (("requests_per_second", "request_throughput_req_s"),
                          ("output_tokens_per_second", "output_throughput_tok_s"),
                          ("tokens_per_second", "total_throughput_tok_s"),
                          ("request_concurrency", "concurrency")):
            dist = (b.get("metrics", {}).get(key) or {}).get("successful") or {}
            if isinstance(dist.get("mean"), (int, float)):
                metrics[name] = dist["mean"]
        totals = b.get("request_totals") or {}
        if isinstance(totals.get("successful"), (int, float)):
            metrics["completed"] = totals["successful"]
        strategy = ((b.get("args") or {}).get("strategy") or {}).get("type_", "")
        res.add(run_record(rid, "guidellm", "guidellm", path, labels={"strategy": str(strategy)}))
        res.add(schema.BenchmarkRecord(run_id=rid, source="guidellm", metrics=metrics,
                                                  config={"strategy": strategy}))
    return res
