"""Prometheus exposition text from vLLM and SGLang: one snapshot or a series of snapshots.

vLLM counters ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
``..._num_accepted_tokens_total`` and ``..._num_accepted_tokens_per_pos_total{position}`` are
differenced between snapshots (a value that goes down is a restart: the new value is the
increment); ``*_created`` series are timestamps and never read. A V0 page (an
``..._num_emitted_tokens_total`` counter and no drafts counter) keeps its draft tokens and its own
``..._draft_acceptance_rate`` gauge as reported; its accepted counter is not a prefix count (see
the V0 log import), so no acceptance length or rate is derived from it. SGLang's ``sglang:spec_accept_length`` / ``sglang:spec_accept_rate`` are gauges: kept
as reported figures. Snapshots are separated by ``# EOF``, a ``# TIME <unix seconds>`` comment,
or a ``# TYPE`` line for a family already seen in the current snapshot.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict

from .. import schema
from ..io.promtext import ExpositionError, Parser
from ..schema import Problem
from ._common import ImportResult, run_record

VLLM = "vllm:spec_decode_"
COUNTERS = {"num_drafts_total": "drafts", "num_draft_tokens_total": "draft_tokens",
            "num_accepted_tokens_total": "accepted", "num_emitted_tokens_total": "emitted"}
#: vLLM V0's gauges: its own acceptance rate (kept as reported) and system efficiency
V0_RATE, V0_EFFICIENCY = VLLM + "draft_acceptance_rate", VLLM + "efficiency"


#: the engine families read (a Prometheus source asks for exactly these)
ENGINE_FAMILIES = tuple(VLLM + n for n in (*COUNTERS, "num_accepted_tokens_per_pos_total")) + (
    V0_RATE, "sglang:spec_accept_length", "sglang:spec_accept_rate")


def cumulative(samples) -> list[tuple[dict[str, str], str, schema.SpecCountsRecord]]:
    """One snapshot of an engine's page: per label set (labels, engine, record) with vLLM's
    counts since the engine started and SGLang's gauges as reported."""
    series = Series("engine")
    found = series.feed(samples, 0)
    return [(dict(key), series.engine, rec) for key, rec in found]


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


def run_names(keys: set[tuple], run_id: str) -> dict[tuple, str]:
    """One run per label set, named by the labels that tell the sets apart (gauges of
    different label sets are never averaged into one run)."""
    if len(keys) <= 1:
        return {k: run_id for k in keys}
    varying = sorted({name for k in keys for name, v in k
                      if len({dict(x).get(name) for x in keys}) > 1})
    return {k: run_id + "/" + ",".join(f"{n}={dict(k).get(n, '')}" for n in varying) for k in keys}


def parse(path: str | os.PathLike, run_id: str) -> ImportResult:
    """Counters and gauges per label set; with several label sets (engines of a data-parallel
    deployment, models) each becomes its own run, ``RUN/engine=1`` and so on."""
    inner = _parse(path, run_id)
    keys = {k for k in inner.keys}
    names = run_names(keys, run_id)
    res = ImportResult("prometheus-text", problems=inner.problems, lines_read=inner.lines_read)
    for key, recs in inner.by_key.items():
        rid = names.get(key, run_id)
        res.extend(dataclasses.replace(r, run_id=rid) for r in recs)
    for rid in sorted(set(names.values()) or {run_id}):
        res.add(run_record(rid, inner.engine, "prometheus-text", path, num_steps=inner.k_seen,
                           labels={"label_set": rid[len(run_id) + 1:]} if rid != run_id else None))
    return res


@dataclasses.dataclass
class _Parsed:
    problems: list
    lines_read: int
    by_key: dict
    keys: set
    engine: str
    k_seen: int


class Series:
    """Consecutive snapshots of one source's pages into counter windows per label set: vLLM's
    counters differenced (a value that went down is a restart: the new value is the increase),
    SGLang's gauges kept as reported. With ``baseline`` the first snapshot of each label set only
    sets the starting point (a live scrape: totals are what was seen while recording); without
    it, the first snapshot's counters count from zero (a file of cumulative counters)."""

    def __init__(self, run_id: str, *, baseline: bool = False) -> None:
        self.run_id, self.baseline = run_id, baseline
        self.prev: dict[tuple, dict] = {}
        self.k_seen = 0
        self.engine = "prometheus"
        self.restarts = 0  #: counters that went down (engine restarts)

    def feed(self, samples, t_ns: int) -> list[tuple[tuple, schema.SpecCountsRecord]]:
        """(label set, record) of one snapshot's (name, labels, value) samples."""
        out = []
        now: dict[tuple, dict] = defaultdict(lambda: {"per_pos": {}})
        gauges: dict[tuple, dict] = defaultdict(dict)
        for name, labels, value in samples:
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "position"))
            if name.startswith(VLLM):
                self.engine = "vllm"
                short = name[len(VLLM):]
                if short == "num_accepted_tokens_per_pos_total" and "position" in labels:
                    now[key]["per_pos"][int(labels["position"])] = value
                elif short in COUNTERS:
                    now[key][COUNTERS[short]] = value
                elif name == V0_RATE:
                    now[key]["v0_rate"] = value
            elif name in ("sglang:spec_accept_length", "sglang:spec_accept_rate"):
                self.engine = "sglang"
                gauges[key][name] = value
        for key, cur in now.items():
            first = key not in self.prev
            before = self.prev.get(key, {"per_pos": {}})
            self.prev[key] = cur
            if first and self.baseline:
                continue
            drafts, drafted, accepted = (_delta(cur, before, f) for f in ("drafts", "draft_tokens", "accepted"))
            v0 = "emitted" in cur and "drafts" not in cur
            if v0:  # V0 counts every matching draft token, also after a rejection: not a
                accepted = None  # prefix count, so no rate or length is derived from it
            self.restarts += any(f in cur and cur[f] < before.get(f, 0.0)
                                 for f in ("drafts", "draft_tokens", "accepted"))
            per_pos = []
            for p in sorted(cur["per_pos"]):
                old = before["per_pos"].get(p, 0.0)
                v = cur["per_pos"][p]
                per_pos.append(int(v - old if v >= old else v))
            self.k_seen = max(self.k_seen, len(per_pos))
            engine_label = dict(key).get("engine", "0")
            rank = int(engine_label) if engine_label.isdigit() else 0
            out.append((key, schema.SpecCountsRecord(
                run_id=self.run_id, rank=rank, t_ns=t_ns, num_drafts=drafts, draft_tokens=drafted,
                accepted_tokens=accepted, accepted_per_pos=tuple(per_pos),
                reported_acceptance_rate=cur.get("v0_rate") if v0 else None,
                source="vllm-v0-metrics" if v0 else "vllm-metrics")))
        for key, g in gauges.items():
            out.append((key, schema.SpecCountsRecord(
                run_id=self.run_id, t_ns=t_ns,
                reported_mean_acceptance_length=g.get("sglang:spec_accept_length"),
                reported_acceptance_rate=g.get("sglang:spec_accept_rate"), source="sglang-metrics")))
        return out


def _parse(path: str | os.PathLike, run_id: str) -> _Parsed:
    res = ImportResult("prometheus-text")
    by_key: dict[tuple, list] = defaultdict(list)
    series = Series(run_id)
    for snap in _snapshots(path, res):
        for key, rec in series.feed(snap["samples"], snap["t"]):
            by_key[key].append(rec)
    return _Parsed(res.problems, res.lines_read, by_key, set(by_key), series.engine, series.k_seen)
