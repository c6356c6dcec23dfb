"""Runs from Prometheus text: a specscope ``/metrics`` endpoint, or an engine's own (vLLM's
``vllm:spec_decode_*`` counters, SGLang's ``sglang:spec_accept_*`` gauges), polled over time;
or a Prometheus server's HTTP API (``query_range``) over the same series.

Counters become SpecStats per label set; consecutive samples become windows (increases between
them). Latency percentiles come from the exported histograms' buckets.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections import defaultdict
from typing import Any, Mapping
from dataclasses import dataclass, field

from .. import schema
from ..io import fetch
from ..io import promtext
from ..collector.histogram import Histogram
from ..collector.report import stats_section, window_figures
from ..collector.service import LABELS, LabelKey
from ..collector.stats import SpecStats, TruthStats
from ..exporters.prometheus import METRICS, Metric
from ..importers import metrics as engines
from ..importers.promtext import cumulative
from .data import RunView

#: the series read from Prometheus: every counter of the exporter's table that comes from a
#: SpecStats field, and the active anomalies
COUNTERS = tuple(n for n, m in METRICS.items() if m.field is not None and m.kind == "counter") \
    + ("specscope_anomaly_active",)
#: latency histograms by the SpecStats histogram they come from (the exporter's table)
LATENCY = {name: m.field[6:] for name, m in METRICS.items()
           if m.field is not None and m.field.startswith("hists.")}

Sample = tuple[str, Mapping[str, str], float]


def parse_text(text: str) -> list[Sample]:
    """(name, labels, value) of every sample of a page; lines that do not parse are skipped."""
    return [(s.name, s.labels, s.value) for s in promtext.parse(text).samples]


def _key(labels: Mapping[str, str]) -> LabelKey:
    # a fleet's node collectors label their series with the node: a view per node then
    return LabelKey._make([*(labels.get(k, "") for k in LABELS), labels.get("node", "")])


def _read_field(s: SpecStats, m: Metric, labels: Any, v: float) -> None:
    """Add one sample back into the SpecStats field the exporter rendered it from."""
    field = m.field
    if field is None:  # the exporter renders it from no field: nothing to read back
        return
    if field.startswith("truth."):
        t = s.truth.setdefault(labels.get(m.label, ""), TruthStats())
        attr = field[6:]
        current = getattr(t, attr)
        setattr(t, attr, current + (v if isinstance(current, float) else int(v)))
    elif m.label in ("position", "row"):
        pos = int(labels.get(m.label, 0))
        arr = getattr(s, field)
        arr.extend([0] * (pos + 1 - len(arr)))
        arr[pos] += int(v)
    elif m.label is not None:
        value = labels.get(m.label, "")
        getattr(s, field)[int(value) if m.label == "k" else value] += int(v)
    elif m.kind == "gauge":  # the latest value, not a count
        setattr(s, field, int(v))
    else:
        setattr(s, field, getattr(s, field) + int(v))
    if field in ("num_drafts", "draft_tokens", "accepted_tokens"):
        s.num_counted = max(s.num_counted, 1)  # counted (perhaps 0), not unknown


def stats_from_samples(samples: list[Sample], *, sum_ranks: bool = False
                       ) -> tuple[dict[LabelKey, SpecStats], dict[LabelKey, list]]:
    """Cumulative SpecStats per label set, and the active anomalies per label set. An engine's
    data-parallel ranks are runs of their own, or one run per model with ``sum_ranks``."""
    stats: dict[LabelKey, SpecStats] = defaultdict(lambda: SpecStats(keep_samples=False))
    active: dict[LabelKey, list] = defaultdict(list)
    buckets: dict[LabelKey, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    totals: dict[tuple, float] = {}  #: (run key, histogram) -> sum of observations
    engine_samples = []
    #: (engine, model, rank, histogram) -> upper bound -> cumulative count (instances summed),
    #: and the sums of the observations
    engine_buckets: dict[tuple, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    engine_sums: dict[tuple, float] = defaultdict(float)
    for name, labels, v in samples:
        if name in engines.BY_FAMILY:
            engine_samples.append((name, labels, v))
            continue
        if name in engines.HIST_SERIES:
            fam, _, tail = name.rpartition("_")
            family, hist = engines.LATENCY[fam]
            model, rank = engines.where(family, labels)
            where = (family.engine, model, "" if sum_ranks else rank, hist)
            if tail == "sum":
                engine_sums[where] += v
            else:
                le = labels.get("le", "+Inf")
                engine_buckets[where][float("inf") if le == "+Inf" else float(le)] += v
            continue
        if not name.startswith("specscope_") or "algorithm" not in labels:
            continue
        key, s = _key(labels), stats[_key(labels)]
        m = METRICS.get(name)
        if m is not None and m.field is not None and m.kind != "histogram":
            _read_field(s, m, labels, v)
        elif name == "specscope_anomaly_active" and v > 0:
            active[key].append(labels.get("kind", ""))
        elif name.endswith("_bucket") and name[:-7] in LATENCY:
            le = labels.get("le", "+Inf")
            buckets[key][LATENCY[name[:-7]]].append((float("inf") if le == "+Inf" else float(le), v))
        elif name.endswith("_sum") and name[:-4] in LATENCY:  # the mean's numerator
            totals[(key, LATENCY[name[:-4]])] = totals.get((key, LATENCY[name[:-4]]), 0.0) + v
    for s in stats.values():
        s.accepted_with_drafts = s.accepted_tokens if s.num_drafts else 0
    # an engine's own series: one run per engine (data-parallel rank, unless summed) and model,
    # its depth k the number of per-position counters it exports
    gauged: dict[LabelKey, set] = defaultdict(set)  #: run key -> label sets with a gauge
    for labels, engine, rec in cumulative(engine_samples):
        k = len(rec.accepted_per_pos)
        model, rank = engines.where(engines.BY_NAME[engine], labels)
        rank = "" if sum_ranks else rank
        key = _key({"algorithm": engine, "num_steps": str(k) if k else "",
                    "topk": "1" if k else "", "num_draft_tokens": str(k + 1) if k else "",
                    "model": model, "rank": rank})
        stats[key].observe(rec)
        if rec.reported_mean_acceptance_length is not None or rec.reported_acceptance_rate is not None:
            gauged[key].add(tuple(sorted(labels.items())))
        for (eng, m_, r_, field_name), by_le in engine_buckets.items():
            if (eng, m_, r_) == (engine, model, rank):
                buckets[key][field_name] = sorted(by_le.items())
                totals[(key, field_name)] = engine_sums.get((eng, m_, r_, field_name), 0.0)
    for key, sets in gauged.items():  # gauges of different label sets are never averaged
        if len(sets) > 1:
            s = stats[key]
            s.reported_al_sum = s.reported_rate_sum = 0.0
            s.reported_al_n = s.reported_rate_n = 0
    for key, hists in buckets.items():
        for field_name, pairs in hists.items():
            pairs.sort()
            bounds = tuple(b for b, _ in pairs if b != float("inf"))
            cum = [c for _, c in pairs]
            counts = [int(c - (cum[i - 1] if i else 0)) for i, c in enumerate(cum)]
            stats[key].hists[field_name] = Histogram(bounds, counts, totals.get((key, field_name), 0.0),
                                                     int(cum[-1]) if cum else 0)
    return dict(stats), dict(active)


def _minus(a: SpecStats, b: SpecStats) -> SpecStats:
    """The increase between two cumulative snapshots (a restart counts from zero)."""
    d = SpecStats(keep_samples=False)
    # accepted_with_drafts apart from accepted_tokens: SGLang's verify calls give accepted
    # tokens per draft without a drafted-token count
    for f in ("num_drafts", "draft_tokens", "accepted_tokens", "accepted_with_drafts",
              "num_steps", "num_requests", "output_tokens"):
        x, y = getattr(a, f), getattr(b, f)
        setattr(d, f, x - y if x >= y else x)
    # a gauge is not differenced: the window holds the engine's current value
    d.reported_al_sum, d.reported_al_n = a.reported_al_sum, a.reported_al_n
    d.reported_rate_sum, d.reported_rate_n = a.reported_rate_sum, a.reported_rate_n
    d.num_counted = a.num_counted
    d.drafted_per_pos = [x - (b.drafted_per_pos[i] if i < len(b.drafted_per_pos) else 0)
                         for i, x in enumerate(a.drafted_per_pos)]
    d.accepted_per_pos = [x - (b.accepted_per_pos[i] if i < len(b.accepted_per_pos) else 0)
                          for i, x in enumerate(a.accepted_per_pos)]
    for reason, n in a.fallbacks.items():
        d.fallbacks[reason] = max(0, n - b.fallbacks.get(reason, 0))
    return d


def _views(history: list[tuple[float, dict[LabelKey, SpecStats], dict]], source: str) -> list[RunView]:
    if not history:
        return []
    _, last, active = history[-1]
    views = []
    for key, s in sorted(last.items()):
        windows = []
        for (t0, prev, _), (t1, cur, _) in zip(history, history[1:]):
            if key in cur:
                windows.append(window_figures(t0, t1 - t0, _minus(cur[key], prev.get(key, SpecStats()))))
        labels = key.labels()
        kinds = active.get(key, [])
        anomalies = [schema.AnomalyRecord(run_id="", kind=k, severity="critical",
                                          message=f"{k} active (from {source})") for k in kinds]
        run = _run_of(labels)
        node = key.node
        views.append(RunView(f"{run.run_id}@{node}" if node else run.run_id,
                             stats_section(s, run, windows, anomalies=anomalies), source,
                             node=node))
    return views


def _run_of(labels: dict[str, str]) -> schema.RunRecord:
    """What a metrics page says of a run: its configuration labels (nothing else is exported)."""
    def num(key: str) -> int:
        return int(labels[key]) if labels.get(key, "").isdigit() else 0

    return schema.RunRecord(
        run_id="/".join(f"{k}={v}" for k, v in labels.items() if v),
        config_id=(f"{labels['algorithm']}-s{labels['num_steps']}-k{labels['topk']}-"
                   f"d{labels['num_draft_tokens']}" if labels["num_steps"] else labels["algorithm"]),
        algorithm=labels["algorithm"], num_steps=num("num_steps"), topk=num("topk") or 1,
        num_verify_tokens=num("num_draft_tokens"), backend=labels["backend"], model=labels["model"])


def _is_counter(name: str) -> bool:
    return name.endswith(("_total", "_bucket", "_sum", "_count"))


class Monotone:
    """Each counter series made monotone before series are summed: a value below the series'
    last one is a restart of that series (its new value is the increase), so one instance's
    restart never turns a sum of instances into a false drop or a false jump."""

    def __init__(self) -> None:
        self.last: dict[tuple, float] = {}
        self.offset: dict[tuple, float] = {}

    def __call__(self, samples: list[Sample]) -> list[Sample]:
        out = []
        for name, labels, v in samples:
            if _is_counter(name):
                sid = (name, tuple(sorted(labels.items())))
                last = self.last.get(sid)
                if last is not None and v < last:
                    self.offset[sid] = self.offset.get(sid, 0.0) + last
                self.last[sid] = v
                v += self.offset.get(sid, 0.0)
            out.append((name, labels, v))
        return out


class MetricsPoller:
    """The polls of one specscope or engine ``/metrics`` endpoint: each counter series made
    monotone, and the last ``keep`` polls kept (apart for each ranks view) as the windows."""

    def __init__(self, url: str, keep: int = 360) -> None:
        self.url, self.keep = url, keep
        self._monotone = Monotone()
        self._history: dict[bool, list] = {}
        self._lock = threading.Lock()

    def views(self, *, sum_ranks: bool = False) -> list[RunView]:
        """Poll once; the polls so far become the windows."""
        text = fetch.get_text(self.url, timeout_s=5)
        with self._lock:
            samples = self._monotone(parse_text(text))
            stats, active = stats_from_samples(samples, sum_ranks=sum_ranks)
            hist = self._history.setdefault(sum_ranks, [])
            hist.append((time.time(), stats, active))
            del hist[:-self.keep]
            return _views(list(hist), self.url)


def _query_range(base: str, query: str, start: float, end: float, step: float) -> list[dict]:
    qs = urllib.parse.urlencode({"query": query, "start": start, "end": end, "step": step})
    body = fetch.get_json(f"{base.rstrip('/')}/api/v1/query_range?{qs}", timeout_s=10)
    if body.get("status") != "success":
        raise OSError(f"Prometheus query failed: {body.get('error', body)}")
    return body["data"]["result"]


def views_from_prometheus(url: str, minutes: float = 30, points: int = 120, *,
                          sum_ranks: bool = False) -> list[RunView]:
    """The same counters from a Prometheus server over the last ``minutes``: each series' raw
    values at the step (``query_range``), made monotone per series before any sum (PromQL's
    ``increase()`` would extrapolate to the step's edges and give fractional counts)."""
    end = time.time()
    start = end - minutes * 60
    step = max(1.0, (end - start) / points)
    by_time: dict[float, list[Sample]] = defaultdict(list)
    names = (COUNTERS + tuple(f"{n}_{tail}" for n in LATENCY for tail in ("bucket", "sum"))
             + engines.FAMILIES + engines.HIST_SERIES)
    for name in names:
        for series in _query_range(url, name, start, end, step):
            # an engine's series keep their target apart (two servers of one model are two
            # label sets, summed into the model's run); specscope's carry their own labels
            drop = () if name in engines.FAMILIES + engines.HIST_SERIES else ("job", "instance")
            labels = {k: v for k, v in series["metric"].items() if k not in drop}
            labels.pop("__name__", None)
            mono = Monotone()
            for t, v in series["values"]:
                by_time[float(t)] += mono([(name, labels, float(v))])
    history = []
    for t in sorted(by_time):
        stats, active = stats_from_samples(by_time[t], sum_ranks=sum_ranks)
        history.append((t, stats, active))
    return _views(history, url)


@dataclass
class MetricsSource:
    """A specscope ``/metrics`` endpoint (a collector over HTTP), polled; or a Prometheus server
    (``prometheus=True``) asked for the same counters through its HTTP API."""

    url: str
    prometheus: bool = False
    problems: list[str] = field(default_factory=list)
    kind: str = "metrics"
    sum_ranks: bool = False  #: an engine's data-parallel ranks summed per model (the header's selector)
    minutes: float = 30.0  #: how far back a Prometheus server is asked (120 points over it)
    poller: MetricsPoller | None = field(default=None, repr=False)  #: a /metrics endpoint's polls

    def __post_init__(self) -> None:
        if not self.prometheus and self.poller is None:  # (made once: callbacks run in threads)
            self.poller = MetricsPoller(self.url)

    def runs(self) -> list[RunView]:
        try:
            if self.prometheus:
                return views_from_prometheus(self.url, self.minutes, sum_ranks=self.sum_ranks)
            assert self.poller is not None
            return self.poller.views(sum_ranks=self.sum_ranks)
        except OSError as exc:
            self.problems = [f"{self.url}: {exc}"]
            return []
