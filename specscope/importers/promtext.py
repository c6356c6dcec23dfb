"""Prometheus exposition text from vLLM, SGLang, TensorRT-LLM and llama.cpp: one snapshot or
a series of snapshots.

What each engine's families mean and how they become counts is in ``importers/metrics`` (one
module per engine); this module turns pages into windows with it. Counters are differenced
between snapshots (a value that goes down is a restart: the new value is the increment);
``*_created`` series are timestamps and never read; gauges are kept as reported figures, per
label set. Snapshots are separated by ``# EOF``, a ``# TIME <unix seconds>`` comment, or a
``# TYPE`` line for a family already seen in the current snapshot.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import defaultdict
from typing import Mapping

from .. import schema
from ..io.promtext import ExpositionError, Parser
from ..schema import Problem
from . import metrics
from ._common import ImportResult, run_record

def cumulative(samples) -> list[tuple[dict[str, str], str, schema.SpecCountsRecord]]:
    """One snapshot of an engine's page: per label set (labels, engine, record) with vLLM's
    counts since the engine started and SGLang's gauges as reported."""
    found = Series("engine").feed(samples, 0)
    return [(dict(key), metrics.BY_SOURCE[rec.source].engine, rec) for key, rec in found]


def sniff(head: str) -> bool:
    return any(p in head for p in metrics.PREFIXES) or ("# TYPE " in head and "# HELP " in head)


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


def _increase(value: float, old: float) -> int:
    """A counter's increase since the previous snapshot; a value that went down is a restart
    (its new value is the increase)."""
    return int(value - old if value >= old else value)


def run_names(keys: set[tuple], run_id: str) -> dict[tuple, str]:
    """One run per label set, named by the labels that tell the sets apart (gauges of
    different label sets are never averaged into one run)."""
    if len(keys) <= 1:
        return {k: run_id for k in keys}
    varying = sorted({name for k in keys for name, v in k
                      if len({dict(x).get(name) for x in keys}) > 1})

    def name(k: tuple, keep_empty: bool) -> str:
        parts = [f"{n}={dict(k).get(n, '')}" for n in varying if keep_empty or dict(k).get(n)]
        return "/".join([run_id, ",".join(parts)]) if parts else run_id

    names = {k: name(k, False) for k in keys}  # a label a set lacks is left out of its name
    if len(set(names.values())) < len(names):
        names = {k: name(k, True) for k in keys}
    return names


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
    m = metrics.BY_NAME.get(inner.engine)
    models = {rid: metrics.where(m, dict(key))[0] if m else "" for key, rid in names.items()}
    for rid in sorted(set(names.values()) or {run_id}):
        labels = dict(inner.config)
        if rid != run_id:
            labels["label_set"] = rid[len(run_id) + 1:]
        res.add(run_record(rid, inner.engine, "prometheus-text", path, num_steps=inner.k_seen,
                           model=models.get(rid, ""), labels=labels or None))
    return res


@dataclasses.dataclass
class _Parsed:
    problems: list
    lines_read: int
    by_key: dict
    keys: set
    engine: str
    k_seen: int
    config: dict


class Series:
    """Consecutive snapshots of one source's pages into counter windows per label set, by each
    engine's mapping (``importers/metrics``): counters differenced (a value that went down is a
    restart: the new value is the increase), gauges kept as reported. With ``baseline`` the
    first snapshot of each label set only sets the starting point (a live scrape: totals are
    what was seen while recording); without it, the first snapshot's counters count from zero
    (a file of cumulative counters)."""

    def __init__(self, run_id: str, *, baseline: bool = False) -> None:
        self.run_id, self.baseline = run_id, baseline
        self.prev: dict[tuple, dict] = {}
        self.k_seen = 0
        self.config: dict[str, str] = {}  #: run labels an info family gives (spec_method, ...)
        self.samples: list[tuple[tuple, schema.SampleRecord]] = []  #: engine gauges, to drain
        self.engine = "prometheus"
        self.restarts = 0  #: counters that went down (engine restarts)

    def feed(self, samples, t_ns: int) -> list[tuple[tuple, schema.SpecCountsRecord]]:
        """(label set, record) of one snapshot's (name, labels, value) samples. A label set is
        the samples' labels less the engine's qualifiers (``EngineMetrics.qualifiers``): their
        counters are summed, a gauge is kept where every series reports the same value and is
        unknown where they differ (never averaged)."""
        now: dict[tuple, dict] = {}
        seen: set[tuple] = set()
        for name, labels, value in samples:
            m = metrics.BY_FAMILY.get(name)
            if m is None or not math.isfinite(value):  # an unknown value counts nothing
                continue
            if name in m.info:  # the configuration, in an info family's labels
                self._info(m.info[name], labels)
                continue
            series = (name, tuple(sorted(labels.items())))
            if series in seen:  # a series listed twice on one page: its first value stands
                continue
            seen.add(series)
            key = tuple(sorted((k, v) for k, v in labels.items()
                               if k != m.pos_label and k not in m.qualifiers))
            cur = now.setdefault(key, {"m": m, "c": {}, "pos": {}, "dpos": {}, "gs": {}, "s": {}})
            if name in m.samples:
                cur["s"].setdefault(m.samples[name], value)
            elif name in (m.per_pos, m.drafted_per_pos):
                if labels.get(m.pos_label, "").isdigit():
                    pos = cur["pos" if name == m.per_pos else "dpos"]
                    p = int(labels[m.pos_label])
                    pos[p] = pos.get(p, 0.0) + value
            elif name in m.counters:
                role = m.counters[name]
                cur["c"][role] = cur["c"].get(role, 0.0) + value
            else:
                cur["gs"].setdefault(m.gauges[name], set()).add(value)
        for cur in now.values():
            cur["g"] = {r: next(iter(vs)) for r, vs in cur["gs"].items() if len(vs) == 1}
            steps = cur["g"].pop(metrics.STEPS, None)  # the configured depth: the run's k
            cur["gs"].pop(metrics.STEPS, None)
            if steps is not None and steps == int(steps) and 0 < steps <= 64:
                self.k_seen = max(self.k_seen, int(steps))
        out = []
        for key, cur in now.items():
            m, c = cur["m"], cur["c"]
            if not (set(c) - {metrics.GENERATED}) and not cur["pos"] and not cur["gs"]:
                continue  # tokens generated, but nothing about speculation
            self.engine = m.engine
            first = key not in self.prev
            before = self.prev.get(key, {"c": {}, "pos": {}, "dpos": {}})
            self.prev[key] = cur
            if first and self.baseline:
                if cur["gs"]:
                    out.append((key, self._record(m, key, t_ns, {}, (), (), cur["g"])))
                continue
            self.restarts += any(v < before["c"].get(f, 0.0) for f, v in c.items())
            d = {f: _increase(v, before["c"].get(f, 0.0)) for f, v in c.items()}
            pos = _pos_delta(cur["pos"], before["pos"])
            dpos = _pos_delta(cur["dpos"], before["dpos"])
            self.k_seen = max(self.k_seen, len(pos))
            rec = self._record(m, key, t_ns, d, pos, dpos, cur["g"])
            out.append((key, rec))
            if cur["s"]:
                self.samples.append((key, schema.SampleRecord(
                    run_id=self.run_id, rank=rec.rank, t_ns=t_ns, values=dict(cur["s"]), source=m.source)))
        return out

    def _info(self, gives: Mapping[str, str], labels: dict[str, str]) -> None:
        for label, what in gives.items():
            value = labels.get(label, "")
            if what == "num_steps":
                if value.isdigit() and 0 < int(value) <= 64:
                    self.k_seen = max(self.k_seen, int(value))
            elif value:
                self.config[what] = value

    def drain_samples(self) -> list[tuple[tuple, schema.SampleRecord]]:
        """The engine gauges fed since the last drain, with their label sets."""
        out, self.samples = self.samples, []
        return out

    def _record(self, m, key, t_ns, d, pos, dpos, g) -> schema.SpecCountsRecord:
        drafts, drafted, accepted = d.get(metrics.DRAFTS), d.get(metrics.DRAFT_TOKENS), d.get(metrics.ACCEPTED)
        v0 = metrics.EMITTED in d and metrics.DRAFTS not in d
        if v0:  # V0 counts every matching draft token, also after a rejection: not a
            accepted = None  # prefix count, so no rate or length is derived from it
        if d.get(metrics.VERIFY_CALLS) is not None:  # SGLang: generated tokens per verify call
            drafts = d[metrics.VERIFY_CALLS]
            gen = d.get(metrics.GENERATED)
            accepted = gen - drafts if gen is not None and gen >= drafts else None
        if dpos and metrics.DRAFTS not in d:  # TensorRT-LLM's finished requests: one
            drafts, drafted, accepted = dpos[0], sum(dpos), sum(pos)  # population for every count
        labels = dict(key)
        rank = labels.get(m.rank_label, "0") if m.rank_label else "0"
        return schema.SpecCountsRecord(
            run_id=self.run_id, rank=int(rank) if rank.isdigit() else 0, t_ns=t_ns,
            num_drafts=drafts, num_draft_tokens=drafted, num_accepted=accepted,
            accepted_per_pos=tuple(pos), drafted_per_pos=tuple(dpos) if len(dpos) == len(pos) else (),
            reported_mean_acceptance_length=g.get(metrics.LENGTH),
            reported_acceptance_rate=g.get(metrics.V0_RATE) if v0 else g.get(metrics.RATE),
            source="vllm-v0-metrics" if v0 else m.source)


def _pos_delta(cur: dict[int, float], before: dict[int, float]) -> list[int]:
    return [_increase(cur[p], before.get(p, 0.0)) for p in sorted(cur)]


def _parse(path: str | os.PathLike, run_id: str) -> _Parsed:
    res = ImportResult("prometheus-text")
    by_key: dict[tuple, list] = defaultdict(list)
    series = Series(run_id)
    for snap in _snapshots(path, res):
        for key, rec in series.feed(snap["samples"], snap["t"]):
            by_key[key].append(rec)
        for key, sample in series.drain_samples():
            by_key[key].append(sample)
    return _Parsed(res.problems, res.lines_read, by_key, set(by_key), series.engine, series.k_seen,
                   series.config)
