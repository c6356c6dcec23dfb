"""Prometheus exposition text from vLLM and SGLang: one snapshot or a series of snapshots.

vLLM counters ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
``..._num_accepted_tokens_total`` and ``..._num_accepted_tokens_per_pos_total{position}`` are
differenced between snapshots (a value that goes down is a restart: the new value is the
increment). SGLang's ``sglang:spec_accept_length`` / ``sglang:spec_accept_rate`` are gauges: kept
as reported figures. Snapshots are separated by ``# EOF``, a ``# TIME <unix seconds>`` comment,
or a ``# TYPE`` line for a family already seen in the current snapshot.
"""

from __future__ import annotations

import os
from collections import defaultdict

from .. import schema
from ..io.promtext import ExpositionError, Parser
from ..schema import Problem
from ._common import ImportResult, run_record

VLLM = "vllm:spec_decode_"
COUNTERS = {"num_drafts_total": "drafts", "num_draft_tokens_total": "draft_tokens",
            "num_accepted_tokens_total": "accepted"}


def sniff(head: str) -> bool:
    return "vllm:" in head or "sglang:" in head or ("# TYPE " in head and "# HELP " in head)


def _snapshots(path: str | os.PathLike, res: ImportResult):
    name = str(path)
    parser = Parser()
    snap: dict = {"t": 0, "samples": []}
    families: set[str] = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, raw in enumerate(f, start=1):
            res.lines_read += 1
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split()
                new = (line == "# EOF" or (len(parts) >= 3 and parts[1] == "TIME")
                       or (len(parts) >= 3 and parts[1] == "TYPE" and parts[2] in families))
                if new and snap["samples"]:
                    yield snap
                    snap, families = {"t": 0, "samples": []}, set()
                if len(parts) >= 3 and parts[1] == "TIME":
                    try:
                        snap["t"] = int(float(parts[2]) * 1e9)
                    except ValueError:
                        res.problems.append(Problem(name, lineno, "bad # TIME value"))
                elif len(parts) >= 3 and parts[1] == "TYPE":
                    families.add(parts[2])
                continue
            try:
                sample = parser.line(line)
            except ExpositionError as exc:
                res.problems.append(Problem(name, lineno, str(exc)))
                continue
            if sample is None:
                continue
            if sample.timestamp_ms is not None and not snap["t"]:
                snap["t"] = sample.timestamp_ms * 1_000_000
            snap["samples"].append((sample.name, sample.labels, sample.value))
    if snap["samples"]:
        yield snap


def _delta(cur: dict, before: dict, field: str) -> int | None:
    """Counter increase since the previous snapshot; a value that went down is a restart."""
    if field not in cur:
        return None
    old = before.get(field, 0.0)
    return int(cur[field] - old if cur[field] >= old else cur[field])


def parse(path: str | os.PathLike, run_id: str) -> ImportResult:
    res = ImportResult("prometheus-text")
    prev: dict[tuple, dict] = {}
    k_seen = 0
    engine = "prometheus"
    for snap in _snapshots(path, res):
        now: dict[tuple, dict] = defaultdict(lambda: {"per_pos": {}})
        gauges: dict[tuple, dict] = defaultdict(dict)
        for name, labels, value in snap["samples"]:
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "position"))
            if name.startswith(VLLM):
                engine = "vllm"
                short = name[len(VLLM):]
                if short == "num_accepted_tokens_per_pos_total" and "position" in labels:
                    now[key]["per_pos"][int(labels["position"])] = value
                elif short in COUNTERS:
                    now[key][COUNTERS[short]] = value
            elif name in ("sglang:spec_accept_length", "sglang:spec_accept_rate"):
                engine = "sglang"
                gauges[key][name] = value
        for key, cur in now.items():
            before = prev.get(key, {"per_pos": {}})
            drafts, drafted, accepted = (_delta(cur, before, f) for f in ("drafts", "draft_tokens", "accepted"))
            per_pos = []
            for p in sorted(cur["per_pos"]):
                old = before["per_pos"].get(p, 0.0)
                v = cur["per_pos"][p]
                per_pos.append(int(v - old if v >= old else v))
            k_seen = max(k_seen, len(per_pos))
            prev[key] = cur
            rank = int(dict(key).get("engine", "0") or 0) if dict(key).get("engine", "0").isdigit() else 0
            res.add(schema.SpecCountsRecord(
                run_id=run_id, rank=rank, t_ns=snap["t"], num_drafts=drafts, draft_tokens=drafted,
                accepted_tokens=accepted, accepted_per_pos=tuple(per_pos), source="vllm-metrics"))
        for g in gauges.values():
            res.add(schema.SpecCountsRecord(
                run_id=run_id, t_ns=snap["t"],
                reported_mean_acceptance_length=g.get("sglang:spec_accept_length"),
                reported_acceptance_rate=g.get("sglang:spec_accept_rate"), source="sglang-metrics"))
    res.add(run_record(run_id, engine, "prometheus-text", path, num_steps=k_seen))
    return res
