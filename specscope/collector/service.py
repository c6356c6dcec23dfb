"""The Collector: aggregates records from many engine processes; never imports torch or dash.

Totals are cumulative counters per label set (the run's configuration and the engine rank);
sliding windows, bucketed by the records' own time, serve live views. Detectors run on the
collector's own tick (``tick()``, every ``tick_s`` once ``start()`` is called), never per batch
or per scrape, so what ``/metrics`` says does not depend on how often it is read:
``snapshot()`` has no side effects. Impossible inputs are clamped and counted; too many label sets fold into one
``other`` set and are counted. The Collector is a Recorder sink (``write``), so it runs in
process, or behind the ZeroMQ receiver as ``specscope serve``.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, NamedTuple, Sequence

from .. import schema
from .columns import VerifyColumns, observe_columns
from .configured import kind_of
from .detectors import (DEFAULT_DETECTORS, AcceptanceLengthBoundsDetector,
                        AcceptanceRegressionDetector, detectors_for, evaluate)
from .stats import SpecStats, token_times

class LabelKey(NamedTuple):
    """A label set: ``LABELS``' values, then the node (a tuple, so it sorts and compares as one);
    the node becomes a label on /metrics where the collector serves several nodes
    (``Snapshot.node_label``)."""

    algorithm: str
    num_steps: str
    topk: str
    num_draft_tokens: str
    backend: str
    model: str
    rank: str
    node: str = ""

    def labels(self) -> dict[str, str]:
        """``LABELS``' names and values, the node left out."""
        return dict(zip(LABELS, self[:len(LABELS)]))

    def config(self) -> tuple[str, ...]:
        """The configuration a run record gives (algorithm to model): rank and node left out."""
        return tuple(self[:6])


LABELS: tuple[str, ...] = LabelKey._fields[:-1]  #: the label names of a set (the node apart)
NODE = "node"
OTHER = LabelKey("other", "other", "other", "other", "other", "other", "")


@dataclass
class Snapshot:
    """A consistent copy of the collector's state at one moment, for exporters and views."""

    t_ns: int
    totals: dict[LabelKey, SpecStats]  #: label set -> cumulative stats
    windows: dict[LabelKey, list[tuple[int, SpecStats]]]  #: label set -> (bucket start ns, stats)
    runs: dict[str, schema.RunRecord]
    anomalies: list[tuple[LabelKey, schema.AnomalyRecord]]  #: active now
    anomaly_counts: dict[tuple[LabelKey, str], int]  #: (label set, kind) -> times it started firing
    health: dict[str, int] = field(default_factory=dict)  #: the collector's own counters
    processes: list[dict[str, Any]] = field(default_factory=list)  #: pid, role, cpu_s, rss
    #: label values -> check -> "pass" / "fail" / "inconclusive", as of the last tick
    checks: dict[LabelKey, dict[str, str]] = field(default_factory=dict)
    window_s: float | None = None  #: the width of the windows' buckets
    #: label values -> how acceptance was obtained: "measured", "forced" (speed-only) or
    #: "lossy", by the run's configuration or the forced fingerprint
    verification: dict[LabelKey, str] = field(default_factory=dict)
    #: whether exporters label series with the node: the collector serves several nodes (or
    #: was told to)
    node_label: bool = False
    #: label values -> the engine start (ns since the epoch) of the label set's latest run,
    #: where the run says it (restarts move it)
    started: dict[LabelKey, int] = field(default_factory=dict)


class Collector:
    """Aggregates records per label set; thread-safe."""

    def __init__(self, *, window_s: float = 10.0, num_windows: int = 60,
                 max_label_sets: int = 64, detectors: Sequence[Any] = DEFAULT_DETECTORS,
                 sinks: Iterable[Any] = (), keep_samples: bool = False,
                 tick_s: float = 1.0, clock_ns: Any = time.time_ns, node_label: bool | None = None,
                 bounds: AcceptanceLengthBoundsDetector | None = None) -> None:
        self.window_ns = int(window_s * 1e9)
        #: label series with the node: None = once records of a second node arrive
        self.node_label = node_label
        self.num_windows = num_windows
        self.max_label_sets = max_label_sets
        self.detectors = detectors
        self.sinks = list(sinks)
        self.keep_samples = keep_samples
        self._lock = threading.Lock()
        self._runs: dict[str, schema.RunRecord] = {}
        self._totals: dict[LabelKey, SpecStats] = {}
        self._windows: dict[LabelKey, collections.OrderedDict[int, SpecStats]] = {}
        self._active: set[tuple] = set()
        self._anomaly_counts: collections.Counter = collections.Counter()
        self.health: collections.Counter = collections.Counter()
        #: each recording process's latest (cumulative) hook-health counts
        self._hook_health: dict[tuple, tuple[int, int]] = {}
        self._pids: dict[int, str] = {os.getpid(): "collector"}
        #: the latest window against the ones before it; windows are short and their steps
        #: correlated, so this one keeps a floor of 200 drafts per side
        self.trailing = AcceptanceRegressionDetector(min_drafts=200)
        #: acceptance length pinned near 1 or near k + 1 over the recent windows (engines'
        #: counters: ``specscope scrape`` turns it on)
        self.bounds = bounds
        self.tick_s = tick_s
        self.clock_ns = clock_ns
        self._anomalies: list[tuple[LabelKey, schema.AnomalyRecord]] = []
        self._checks: dict[LabelKey, dict[str, str]] = {}
        self.num_ticks = 0
        self._tick_stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # ------------------------------------------------------------------ ingest
    accepts_columns = True  #: a Recorder hands it VerifyColumns, not per-entry records

    def write(self, records: Sequence[Any]) -> None:
        """Sink interface: observe a batch of records."""
        self.observe(records)

    def observe(self, records: Iterable[Any]) -> None:
        """Fold records (and VerifyColumns) in."""
        records = list(records)
        verify = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
        columns = [r for r in records if isinstance(r, VerifyColumns)]
        with self._lock:
            for r in records:
                if isinstance(r, schema.RunRecord):
                    self._runs[r.run_id] = r
            for cols in VerifyColumns.from_records(verify) + columns:
                self._observe_columns(cols)
                self.health["verify_entries_observed"] += len(cols)
            for r in records:
                if isinstance(r, (schema.VerifyStepRecord, schema.RunRecord, VerifyColumns)):
                    continue
                if isinstance(r, schema.HookHealthRecord):
                    self._observe_hook_health(r)
                    continue
                run_id = getattr(r, "run_id", "")
                node = schema.node_of(r, self._runs)
                stats = self._stats_for(self._key(run_id, getattr(r, "rank", 0), node))
                stats.observe(r)
                t_ns = schema.time_ns(r, end=True)
                if t_ns:
                    self._window(self._key(run_id, getattr(r, "rank", 0), node), t_ns).observe(r)
                run = self._runs.get(run_id)
                if isinstance(r, schema.RequestRecord) and run is not None and not run.num_steps:
                    # target-only: no verify steps; its tokens count when they were emitted
                    key = self._key(run_id, r.rank, node)
                    for t, n in token_times(r):
                        self._window(key, t).undrafted_request_steps += n
        for sink in self.sinks:
            try:
                sink.write(records)
            except Exception:
                self.health["sink_errors"] += 1
        with self._lock:  # counted once the sinks have them: a record counted is on disk
            self.health["records_observed"] += len(records) - len(columns)

    def observe_columns(self, cols: VerifyColumns) -> None:
        """Fast path: fold columnar verify entries in."""
        with self._lock:
            self._observe_columns(cols)

    def _observe_columns(self, cols: VerifyColumns) -> None:
        key = self._key(cols.run_id, cols.rank, cols.node)
        batch = SpecStats(keep_samples=False)
        observe_columns(batch, cols)
        self.health["entries_clamped"] += batch.num_clamped
        self._totals[key] = self._stats_for(key).merge(batch)
        if not len(cols):
            return
        buckets = cols.t_ns // self.window_ns  # per step or per entry: the same buckets
        if buckets.min() == buckets.max():
            self._merge_window(key, int(cols.t_ns[0]), batch)
            return
        import numpy as np

        cols = cols.per_entry()
        buckets = cols.t_ns // self.window_ns
        for b in np.unique(buckets).tolist():
            part = SpecStats(keep_samples=False)
            observe_columns(part, cols.select(buckets == b))
            self._merge_window(key, b * self.window_ns, part)

    def _merge_window(self, key: LabelKey, t_ns: int, stats: SpecStats) -> None:
        window = self._window(key, t_ns)
        start = (t_ns // self.window_ns) * self.window_ns
        self._windows[key][start] = window.merge(stats)

    def note_process(self, pid: int, role: str = "engine") -> None:
        """An engine process whose CPU and RSS the exporter should show."""
        self._pids.setdefault(pid, role)

    # ------------------------------------------------------------------ keys, windows
    def _key(self, run_id: str, rank: int, node: str = "") -> LabelKey:
        run = self._runs.get(run_id)
        if run is None:
            values = LabelKey("unknown", "", "", "", "", "", str(rank), node)
        else:
            values = LabelKey(run.algorithm, str(run.num_steps), str(run.topk),
                              str(run.num_verify_tokens), run.backend, run.model, str(rank), node)
        if values not in self._totals and len(self._totals) >= self.max_label_sets:
            self.health["label_sets_overflowed"] += 1
            return OTHER
        return values

    def _observe_hook_health(self, r: schema.HookHealthRecord) -> None:
        """Hook-health records are cumulative per process: count what each adds since the
        last one from its process (a record without a pid stands alone)."""
        now = (r.num_dropped_ring_full + r.num_dropped_batch_too_large + r.num_dropped_queue_full,
               r.num_hook_errors)
        key = (r.run_id, r.node, r.rank, r.pid)
        before = self._hook_health.get(key, (0, 0)) if r.pid else (0, 0)
        if r.pid:
            self._hook_health[key] = (max(now[0], before[0]), max(now[1], before[1]))
        self.health["hook_records_dropped"] += max(0, now[0] - before[0])
        self.health["hook_errors"] += max(0, now[1] - before[1])

    def _stats_for(self, key: LabelKey) -> SpecStats:
        stats = self._totals.get(key)
        if stats is None:
            stats = self._totals[key] = SpecStats(keep_samples=self.keep_samples)
        return stats

    def _window(self, key: LabelKey, t_ns: int) -> SpecStats:
        buckets = self._windows.setdefault(key, collections.OrderedDict())
        start = (t_ns // self.window_ns) * self.window_ns
        stats = buckets.get(start)
        if stats is None:
            stats = buckets[start] = SpecStats(keep_samples=False)
            if len(buckets) > self.num_windows:
                for old in sorted(buckets)[:len(buckets) - self.num_windows]:
                    del buckets[old]
        return stats

    # ------------------------------------------------------------------ views
    def tick(self) -> list[tuple[LabelKey, schema.AnomalyRecord]]:
        """Run the detectors once over the current state and count anomalies that started.

        Called by the collector's own ticker (``start()``) at a fixed interval; tests and
        offline tools call it directly.
        """
        with self._lock:
            totals = {k: SpecStats(keep_samples=self.keep_samples).merge(v)
                      for k, v in self._totals.items()}
            windows = {k: [s for _, s in sorted(b.items())] for k, b in self._windows.items()}
        active: list[Any] = []
        checks: dict[Any, Any] = {}
        for key, stats in totals.items():
            run = self._run_of(key)
            # (not the batch-row test: over cumulative counts it would wait for a fault to
            # outweigh all the clean traffic before it, and never clear; `report` runs it)
            detectors = (detectors_for(run, rows=False) if self.detectors is DEFAULT_DETECTORS
                         else self.detectors)
            found, raised = evaluate(stats, detectors=detectors)
            checks[key] = {a.check: a.state for a in found}
            active.extend((key, a) for a in raised)
            if kind_of(run, stats)[0] == "forced":  # its acceptance is a setting: no alarm on it
                continue
            # the latest window against the windows before it
            for a in self.trailing.check_windows(windows.get(key, [])):
                active.append((key, a))
            if self.bounds is not None and windows.get(key):
                k = int(key.num_steps) if key.num_steps.isdigit() else None
                for a in self.bounds.check(self.bounds.recent(windows[key]), k=k):
                    active.append((key, a))
        with self._lock:
            now = {(k, a.kind) for k, a in active}
            for started in now - self._active:
                self._anomaly_counts[started] += 1
            fresh = [(k, a) for k, a in active if (k, a.kind) not in self._active]
            self._active = now
            self._anomalies = active
            self._checks = checks
            self.num_ticks += 1
        # sinks that export findings (OTLP) get each anomaly once, when it starts, named by
        # the latest run of its label set
        takers = [sink for sink in self.sinks if getattr(sink, "takes_anomalies", False)]
        if fresh and takers:
            named = [a if a.run_id else replace(a, run_id=getattr(self._run_of(k), "run_id", ""))
                     for k, a in fresh]
            for sink in takers:
                try:
                    sink.write(named)
                except Exception:
                    self.health["sink_errors"] += 1
        return active

    def _run_of(self, key: LabelKey) -> schema.RunRecord | None:
        """The latest run whose configuration a label set names."""
        with self._lock:
            runs = list(self._runs.values())
        match = [r for r in runs if (r.algorithm, str(r.num_steps), str(r.topk),
                                     str(r.num_verify_tokens), r.backend, r.model) == key.config()]
        return max(match, key=lambda r: r.started_ns) if match else None

    def start(self) -> "Collector":
        """Run ``tick()`` every ``tick_s`` seconds on a daemon thread."""
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick_loop, name="specscope-detectors",
                                            daemon=True)
            self._ticker.start()
        return self

    def _tick_loop(self) -> None:
        while not self._tick_stop.wait(self.tick_s):
            try:
                self.tick()
            except Exception:
                self.health["detector_errors"] += 1

    def snapshot(self) -> Snapshot:
        """Copies of the state and of the anomalies found at the last tick; no side effects."""
        with self._lock:
            totals = {k: SpecStats(keep_samples=self.keep_samples).merge(v)
                      for k, v in self._totals.items()}
            windows = {k: [(t, SpecStats(keep_samples=False).merge(s)) for t, s in sorted(b.items())]
                       for k, b in self._windows.items()}
            runs = dict(self._runs)
            active = list(self._anomalies)
            checks = {k: dict(v) for k, v in self._checks.items()}
            counts = dict(self._anomaly_counts)
            health = dict(self.health)
            pids = dict(self._pids)
        of = {key: self._run_of(key) for key in totals}
        kinds = {key: kind_of(of[key], stats)[0] or "measured" for key, stats in totals.items()}
        started = {key: r.started_ns for key, r in of.items() if r is not None and r.started_ns > 0}
        nodes = {k[-1] for k in totals}
        label = self.node_label if self.node_label is not None else len(nodes) > 1
        return Snapshot(t_ns=self.clock_ns(), totals=totals, windows=windows, runs=runs,
                        anomalies=active, anomaly_counts=counts, health=health,
                        processes=_process_facts(pids), checks=checks,
                        window_s=self.window_ns / 1e9, verification=kinds, node_label=label,
                        started=started)

    def close(self) -> None:
        self._tick_stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                self.health["sink_errors"] += 1


def _process_facts(pids: dict[int, str]) -> list[dict[str, Any]]:
    try:
        import psutil
    except ImportError:
        return []
    out = []
    for pid, role in pids.items():
        try:
            p = psutil.Process(pid)
            cpu = p.cpu_times()
            out.append({"pid": pid, "role": role, "cpu_seconds": cpu.user + cpu.system,
                        "rss_bytes": p.memory_info().rss})
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out
