"""Where the dashboard's runs come from, kept server-side: trace files and directories, a live
collector (in process), a specscope ``/metrics`` endpoint, or a Prometheus server.

Every source yields ``RunView`` objects over a typed report section (``collector.section``), so
every page and figure works on every source. Traces are
only opened under the source's configured root directories.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from .. import schema
from ..collector.report import build_sections
from ..collector.section import Breakdown, Section
from ..collector.shares import split_by
from ..collector.snapshot import snapshot_sections
from ..schema import TraceError

#: traces with more verify records than this are aggregated column-wise (no per-request samples)
RECORDS_LIMIT = 200_000


@dataclass
class RunView:
    """One run as the pages see it."""

    run_id: str
    #: the run's report section, typed: what the figures read (given a section's JSON form, as
    #: ``report --json`` writes it, it is parsed once)
    section: Section
    source: str = ""  #: the trace path or the live source's name
    records: list[Any] | None = None  #: the run's records (and its reference's), when kept
    phases: dict[str, Any] | None = None  #: phase breakdown (collector.phases), when recorded
    _sample: Any = None
    node: str = ""  #: the node of a run's share on one node ("" = the run, pooled across nodes)

    def __post_init__(self) -> None:
        if not isinstance(self.section, Section):
            self.section = Section.from_dict(self.section)

    @functools.cached_property
    def breakdown(self) -> Breakdown | None:
        """``phases`` typed (None when the phase records were not kept)."""
        return Breakdown.from_phases(self.phases)

    @property
    def run(self) -> schema.RunRecord | None:
        return self.section.run

    @property
    def label(self) -> str:
        r = self.run
        if r is None:
            return f"{self.run_id} (?)"
        fault = f" [fault {r.fault}]" if r.fault else ""
        kind = {"forced": " [forced: speed-only]", "lossy": " [lossy verification]"}.get(
            self.section.verification, "")
        if self.node:  # a run's share on one node: "nightly@gpu-05" reads as the run on gpu-05
            base = self.run_id.removesuffix(f"@{self.node}")
            return f"{base} ({r.config_id}{fault}{kind}) on node {self.node}"
        return f"{self.run_id} ({r.config_id}{fault}{kind})"

    @property
    def gate(self) -> str | None:
        return self.section.gate

    def sample(self):
        """Per-request arrays for bootstrap comparisons (None when records were not kept)."""
        if self._sample is None and self.records is not None:
            from ..collector.compare import run_sample

            self._sample = run_sample(self.records, self.run_id)
        return self._sample


class PathNotAllowed(ValueError):
    """A trace outside the dashboard's configured directories."""


def allowed(path: str | os.PathLike, roots: Sequence[Path]) -> Path:
    """``path`` resolved, if it lies under one of ``roots`` (symlinks and ``..`` resolved)."""
    p = Path(path).resolve()
    for root in roots:
        r = Path(root).resolve()
        if p == r or r in p.parents:
            return p
    raise PathNotAllowed(f"{path}: outside the dashboard's trace directories "
                         f"({', '.join(str(r) for r in roots)})")


def is_store(p: Path) -> bool:
    """A Parquet trace directory (a store's partitions or a compacted trace's files)."""
    return p.is_dir() and (any(p.glob("*/date=*")) or any(p.glob("*/config=*"))
                           or any(p.glob("config=*")) or any(p.glob("*.parquet")))


def shards(p: Path) -> list[Path]:
    """The JSONL files of a directory that is not a store, read together as one trace: the
    shards each recording process writes (an engine core's and its API server's), a sweep's
    points, a folder of nightly traces. A link that leads out of the directory is not read."""
    root = p.resolve()
    return sorted(q for q in p.glob("*.jsonl") if q.is_file() and q.resolve().parent == root)


def discover(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Traces in ``paths``: JSONL files, Parquet trace directories, and directories of JSONL
    files, each directory one trace (a run recorded by several processes is one run)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():  # read again as its shards appear: a live run's directory
            out.append(p)
        elif p.exists():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such trace")
    return out


class TraceSource:
    """Runs of trace files; loaded once, reloaded when a file changes."""

    kind = "traces"

    def __init__(self, paths: Sequence[str | os.PathLike], *,
                 roots: Sequence[str | os.PathLike] | None = None, where: Any = None) -> None:
        self.where = where  #: an io.store.Where: a store's partitions to read (None: all)
        self.roots = [Path(r).resolve() for r in (roots or [])] or sorted(
            {(Path(p).resolve() if Path(p).is_dir() else Path(p).resolve().parent) for p in paths})
        self.paths = [allowed(p, self.roots) for p in discover(paths)]
        self._lock = threading.Lock()
        self._cache: dict[Path, tuple[float, list[RunView], list[str]]] = {}
        self.problems: list[str] = []

    def open(self, path: str | os.PathLike) -> None:
        """Add a trace (it must lie under the configured directories)."""
        for p in discover([allowed(path, self.roots)]):
            if p not in self.paths:
                self.paths.append(allowed(p, self.roots))

    def runs(self) -> list[RunView]:
        out: list[RunView] = []
        problems: list[str] = []
        with self._lock:
            for p in self.paths:
                mtime = _mtime(p)
                cached = self._cache.get(p)
                if cached is None or cached[0] != mtime:
                    try:
                        cached = (mtime, *load_trace(p, self.where))
                    except (TraceError, OSError, ValueError) as exc:  # shown, never fatal
                        cached = (mtime, [], [str(exc)])
                    self._cache[p] = cached
                out.extend(cached[1])
                problems.extend(cached[2])
        self.problems = problems
        return out


def _mtime(p: Path) -> float:
    if p.is_dir():
        return max((q.stat().st_mtime for q in p.rglob("*") if q.is_file()), default=0.0)
    return p.stat().st_mtime


def load_trace(p: Path, where: Any = None) -> tuple[list[RunView], list[str]]:
    """A trace's runs: records kept for small traces, column-wise aggregates for big ones;
    ``where`` reads a store's selected partitions only."""
    from ..io.store import verify_entries

    if is_store(p) and verify_entries(p, where) > RECORDS_LIMIT:
        return aggregate_trace(p, where), []
    from ..collector.phases import phase_breakdown
    from ..io.trace import read_trace

    trace = read_trace(p if not p.is_dir() or is_store(p) else shards(p), where)
    _, sections = build_sections(trace.records)
    refs = {r.labels.get("reference_for"): r.run_id for r in trace.records
            if isinstance(r, schema.RunRecord) and r.labels.get("role") == "reference"}
    by_run: dict[str, list[Any]] = {}
    for r in trace.records:
        by_run.setdefault(getattr(r, "run_id", ""), []).append(r)
    views = []
    for sec in sections:
        rid = sec.run.run_id if sec.run else ""
        recs = by_run.get(rid, []) + by_run.get(refs.get(rid, "\0"), [])
        has_phases = any(isinstance(r, schema.PhaseRecord) for r in recs)
        views.append(RunView(rid or p.stem, sec, str(p), recs,
                             phase_breakdown(by_run.get(rid, [])) if has_phases else None))
        views.extend(_node_views(rid, by_run.get(rid, []), str(p)))
    return views, [str(x) for x in trace.problems]


def _node_views(rid: str, records: list[Any], source: str) -> list[RunView]:
    """A run recorded on several nodes: one view per node besides the pooled one (the node
    selector's), each its own report section, checked by the same detectors."""
    by_node = split_by(records, lambda r: getattr(r, "node", "") or None)
    if len(by_node) < 2:
        return []
    out = []
    for node, mine in sorted(by_node.items()):
        for sec in build_sections(mine)[1][:1]:
            out.append(RunView(f"{rid}@{node}", sec, source, mine, node=node))
    return out


def aggregate_trace(p: Path, where: Any = None) -> list[RunView]:
    """A big Parquet trace through the collector's column path; one view per label set (and
    node, where several)."""
    from ..exporters.replay import replay_sections

    return [RunView(rid, sec, str(p), node=node) for rid, node, sec in replay_sections(p, where)]


def snapshot_views(snap, source: str, max_windows: int = 240) -> list[RunView]:
    """Run views of a collector snapshot: one per label set (configuration and rank)."""
    return [RunView(rid, sec, source, node=node)
            for rid, node, sec in snapshot_sections(snap, max_windows)]


class LiveSource:
    """A collector in this process (``make demo``), polled on every refresh; with ``traces``
    (directories its runs are written to, and others such as a sweep's), what the collector does
    not keep — per-request records and latencies, phases — is read back from those traces, at
    most every ``trace_refresh_s``, and their runs the collector never saw (a sweep's points,
    references) are listed beside the live ones."""

    kind = "live"

    def __init__(self, collector: Any, name: str = "live", *,
                 traces: Sequence[str | os.PathLike] = (), trace_refresh_s: float = 30.0) -> None:
        self.collector = collector
        self.name = name
        self.problems: list[str] = []
        self.trace_dirs = [Path(t) for t in traces]
        self.trace_refresh_s = trace_refresh_s
        self._traces: TraceSource | None = None
        self._trace_views: list[RunView] = []
        self._read_at = -float("inf")
        self._lock = threading.Lock()

    def _from_traces(self) -> list[RunView]:
        with self._lock:
            if time.monotonic() - self._read_at < self.trace_refresh_s:
                return self._trace_views
            self._read_at = time.monotonic()
            found = discover([d for d in self.trace_dirs if d.is_dir()])
            if found:
                if self._traces is None:
                    self._traces = TraceSource(found, roots=self.trace_dirs)
                for p in found:  # traces written since (a sweep's next point)
                    self._traces.open(p)
                self._trace_views = self._traces.runs()
                self.problems = self._traces.problems
            return self._trace_views

    def default_runs(self) -> list[str]:
        """The runs selected when nothing is: the live ones (a sweep's points, other models
        perhaps, are there to pick)."""
        return [v.run_id for v in snapshot_views(self.collector.snapshot(), self.name)]

    def runs(self) -> list[RunView]:
        # a run without speculation first: the pages compare the others against the first run
        live = sorted(snapshot_views(self.collector.snapshot(), self.name),
                      key=lambda v: bool(v.run is None or v.run.num_steps))
        if not self.trace_dirs:
            return live
        from_traces = {v.run_id: v for v in self._from_traces()}
        out = [dataclasses.replace(v, records=from_traces[v.run_id].records,
                                   phases=from_traces[v.run_id].phases, _sample=None)
               if v.run_id in from_traces else v for v in live]
        seen = {v.run_id for v in live}
        return out + [v for rid, v in from_traces.items() if rid not in seen]


def load_accuracy(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """Scores per configuration and benchmark from a CSV (columns configuration, benchmark,
    score; or benchmark plus one column per configuration) or a JSON object
    ``{configuration: {benchmark: score}}``. Bad cells are errors naming file and line."""
    import csv
    import json

    p = Path(path)
    if p.suffix == ".json":
        data = json.loads(p.read_text("utf-8"))
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise ValueError(f"{p}: expected {{configuration: {{benchmark: score}}}}")
        return {str(c): {str(b): float(s) for b, s in v.items()} for c, v in data.items()}
    out: dict[str, dict[str, float]] = {}
    with open(p, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields = [x.strip().lower() for x in reader.fieldnames or []]
        long = {"configuration", "benchmark", "score"} <= set(fields)
        for lineno, rowd in enumerate(reader, start=2):
            rowd = {k.strip().lower() if long else k.strip(): (v or "").strip()
                    for k, v in rowd.items() if k}
            try:
                if long:
                    out.setdefault(rowd["configuration"], {})[rowd["benchmark"]] = float(rowd["score"])
                else:
                    bench = rowd.pop("benchmark", None) or rowd.pop("Benchmark")
                    for config, value in rowd.items():
                        if value:
                            out.setdefault(config, {})[bench] = float(value)
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{p}:{lineno}: not a score row ({exc})") from None
    return out
