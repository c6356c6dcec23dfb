"""Prometheus exposition of a collector snapshot, built at scrape time (no global registry):
the /metrics page, and prometheus_client families for a registry of the user's. Never imports
torch or dash; prometheus_client only when families are asked for.

Counters, not gauges, so PromQL computes rates and ratios. Labels: the configuration
(``algorithm``, ``num_steps``, ``topk``, ``num_draft_tokens``, ``backend``, ``model``) and
``rank`` (``num_draft_tokens``: the run's ``num_verify_tokens``, under SGLang's name for it);
request ids are never labels, and the collector caps the number of label sets.

PromQL recipes:

- acceptance rate (accepted / drafted draft tokens)::

    sum by (algorithm, num_steps) (rate(specscope_accepted_tokens_total[5m]))
      / sum by (algorithm, num_steps) (rate(specscope_draft_tokens_total[5m]))

- mean acceptance length, bonus token INCLUDED (tokens committed per request-step)::

    1 + sum(rate(specscope_accepted_tokens_total[5m])) / sum(rate(specscope_drafts_total[5m]))

- per-position acceptance::

    sum by (position) (rate(specscope_accepted_tokens_per_position_total[5m]))
      / sum by (position) (rate(specscope_drafted_tokens_per_position_total[5m]))

- acceptance by batch row (one row far below the others: a row at zero)::

    sum by (row) (rate(specscope_row_accepted_tokens_total[5m]))
      / sum by (row) (rate(specscope_row_draft_tokens_total[5m]))

- sampling truth z-score (silent greedy when > 6)::

    (sum by (mode_requested) (increase(specscope_sampling_top1_total[10m]))
      - sum by (mode_requested) (increase(specscope_sampling_top1_expected_total[10m])))
      / sqrt(sum by (mode_requested) (increase(specscope_sampling_top1_variance_total[10m])))
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple

from ..collector.histogram import Histogram
from ..collector.service import LABELS, NODE, Snapshot
from ..collector.verdict import STATES

ACCEPT_LENGTH_BUCKETS = tuple(float(i) for i in range(1, 17))
DRAFT_PROB_BOUNDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

class Metric(NamedTuple):
    """One exported metric: its type and help text, and the SpecStats field it comes from.

    ``field`` is a SpecStats attribute (``"draft_tokens"``), a list indexed by ``label``
    (``"accepted_per_pos"`` by ``position``), a dict keyed by ``label`` (``"fallbacks"`` by
    ``reason``), a TruthStats attribute per ``label`` (``"truth.num_top1"`` by
    ``mode_requested``) or a latency histogram (``"hists.ttft_s"``); None for metrics that are
    not a SpecStats figure. The renderer writes from it and the dashboard's /metrics reader
    reads back into it, so the two cannot drift apart.
    """

    kind: str
    help: str
    field: str | None = None
    label: str | None = None


#: Every metric the exporter can emit (tests hold Grafana and the rules to it).
METRICS: dict[str, Metric] = {
    "specscope_verify_steps_total": Metric("counter", "Verify-step records (one per engine step and rank).", "num_steps"),
    "specscope_request_steps_total": Metric("counter", "Request-steps by requested and effectively used sampling mode."),
    "specscope_drafts_total": Metric("counter", "Request-steps that drafted at least one token.", "num_drafts"),
    "specscope_draft_tokens_total": Metric("counter", "Drafted tokens (chain length / tree depth per request-step).", "draft_tokens"),
    "specscope_accepted_tokens_total": Metric("counter", "Accepted draft tokens, bonus token excluded.", "accepted_tokens"),
    "specscope_drafted_tokens_per_position_total": Metric("counter", "Request-steps that drafted position N.", "drafted_per_pos", "position"),
    "specscope_accepted_tokens_per_position_total": Metric("counter", "Request-steps whose draft token at position N was accepted.", "accepted_per_pos", "position"),
    "specscope_row_draft_tokens_total": Metric("counter", "Draft tokens by batch row (a request's place in its verify step; the first 64 rows, later ones pooled into the last).", "row_draft_tokens", "row"),
    "specscope_row_accepted_tokens_total": Metric("counter", "Accepted draft tokens by batch row (bonus token excluded): one row far below the others is a row at zero.", "row_accepted", "row"),
    "specscope_sampling_verified_positions_total": Metric("counter", "Verified positions with sampling-truth statistics.", "truth.num_verified", "mode_requested"),
    "specscope_sampling_top1_total": Metric("counter", "Committed tokens equal to the target argmax.", "truth.num_top1", "mode_requested"),
    "specscope_sampling_top1_expected_total": Metric("counter", "Expected count of the above under the requested sampling (sum of p_max).", "truth.expected_top1", "mode_requested"),
    "specscope_sampling_top1_variance_total": Metric("counter", "Variance of that count (sum of p_max * (1 - p_max)).", "truth.var_top1", "mode_requested"),
    "specscope_draft_top1_at_one_total": Metric("counter", "Drafted positions whose draft top-1 probability is exactly 1.0."),
    "specscope_fallbacks_total": Metric("counter", "Verify fell back from the requested mode to argmax, by reason.", "fallbacks", "reason"),
    "specscope_anomalies_total": Metric("counter", "Times a detector started firing, by kind."),
    "specscope_anomaly_active": Metric("gauge", "1 while a detector fires, by kind."),
    "specscope_check_state": Metric("gauge", "1 for the state a detector's check is in, by check: pass, fail, or inconclusive (too little data to fail yet)."),
    "specscope_verification": Metric("gauge", "1 for how the label set's acceptance was obtained, by kind: measured (drafts verified against the target), forced (set by a benchmarking configuration: a speed-only run, its acceptance is not a measurement) or lossy (verification not per-token lossless by configuration)."),
    "specscope_engine_start_time_seconds": Metric("gauge", "Start of the engine the label set's latest run came from, seconds since the epoch (the hooks' process start, or scrape's process_start_time_seconds or counter reset); a restart moves it, absent where unknown."),
    "specscope_draft_depth": Metric("gauge", "Draft depth k of the latest step (0: speculation off, as a speculation policy chose).", "last_depth"),
    "specscope_draft_depth_steps_total": Metric("counter", "Steps by the draft depth k they ran with (k = 0: speculation off).", "depth_steps", "k"),
    "specscope_draft_depth_changes_total": Metric("counter", "Steps where a speculation policy changed k (or confirmed it after a probe), with a reason in the trace.", "depth_changes"),
    "specscope_speculation_off_periods_total": Metric("counter", "Times speculation was turned off (k = 0) by a speculation policy.", "off_periods"),
    "specscope_requests_total": Metric("counter", "Finished requests.", "num_requests"),
    "specscope_output_tokens_total": Metric("counter", "Output tokens of finished requests.", "output_tokens"),
    "specscope_clamped_entries_total": Metric("counter", "Impossible verify entries (accepted > drafted, negative) clamped.", "num_clamped"),
    "specscope_accept_length": Metric("histogram", "Tokens committed per request-step, bonus token included."),
    "specscope_draft_top1_probability": Metric("histogram", "Draft top-1 probability per drafted position."),
    "specscope_ttft_seconds": Metric("histogram", "Time to first token.", "hists.ttft_s"),
    "specscope_tpot_seconds": Metric("histogram", "Time per output token after the first, per request.", "hists.tpot_s"),
    "specscope_itl_seconds": Metric("histogram", "Inter-token latency per token (chunk gap over the tokens it carries).", "hists.itl_token_s"),
    "specscope_itl_chunk_seconds": Metric("histogram", "Gap between streamed chunks (one per verify step).", "hists.itl_chunk_s"),
    "specscope_e2e_seconds": Metric("histogram", "Request end-to-end latency.", "hists.e2e_s"),
    "specscope_phase_duration_seconds": Metric("histogram", "Duration of a verify-path phase."),
    "specscope_collector_events_total": Metric("counter", "The collector's own accounting, by event."),
    "specscope_process_cpu_seconds_total": Metric("counter", "CPU time of the collector and the engine processes it serves."),
    "specscope_process_resident_memory_bytes": Metric("gauge", "Resident memory of those processes."),
}


#: label names a family adds to its label set's (``LABELS``, and ``node`` where the snapshot
#: shows it)
EXTRA_LABELS: dict[str, tuple[str, ...]] = {
    "specscope_request_steps_total": ("mode_requested", "mode_used"),
    "specscope_phase_duration_seconds": ("phase",),
    "specscope_anomalies_total": ("kind",),
    "specscope_anomaly_active": ("kind",),
    "specscope_check_state": ("check", "state"),
    "specscope_verification": ("kind",),
    **{n: (m.label,) for n, m in METRICS.items() if m.label is not None},
}
#: the collector's own figures: their labels only, no label set
OWN_LABELS: dict[str, tuple[str, ...]] = {
    "specscope_collector_events_total": ("event",),
    "specscope_process_cpu_seconds_total": ("role", "pid"),
    "specscope_process_resident_memory_bytes": ("role", "pid"),
}

#: metrics written straight from a SpecStats field, in table order
FIELD_METRICS = [(n, m) for n, m in METRICS.items() if m.field is not None]


class _Sample(NamedTuple):
    key: tuple  #: the label set (``()`` for the collector's own figures)
    extra: tuple  #: values of the family's own labels
    value: Any  #: a number, or a Histogram for a histogram family


def _samples(snap: Snapshot) -> dict[str, list[_Sample]]:
    """Every sample of the snapshot by metric name, in exposition order: the one reading of a
    snapshot that both writers (the text and the prometheus_client families) share."""
    out: dict[str, list[_Sample]] = {name: [] for name in METRICS}
    for key, s in snap.totals.items():
        steps = out["specscope_request_steps_total"]
        for (req, used), n in sorted(s.modes.items()):
            steps.append(_Sample(key, (req, used), n))
        for name, m in FIELD_METRICS:
            _field_samples(out[name], m, key, s)
        out["specscope_draft_top1_at_one_total"].append(_Sample(key, (), s.draft_hist[-1]))
        dp = Histogram(DRAFT_PROB_BOUNDS, list(s.draft_hist[:-2]) + [s.draft_hist[-2] + s.draft_hist[-1]],
                       0.0, sum(s.draft_hist))
        out["specscope_draft_top1_probability"].append(_Sample(key, (), dp))
        al = Histogram(ACCEPT_LENGTH_BUCKETS)
        for length, n in s.accept_len_hist.items():
            al.observe(float(length), n)
        out["specscope_accept_length"].append(_Sample(key, (), al))
        for hname, h in sorted(s.hists.items()):
            if hname.startswith("phase:"):
                out["specscope_phase_duration_seconds"].append(_Sample(key, (hname[6:],), h))
    for (key, kind), n in sorted(snap.anomaly_counts.items()):
        out["specscope_anomalies_total"].append(_Sample(key, (kind,), n))
    active = {(k, a.kind) for k, a in snap.anomalies}
    for key, kind in sorted(snap.anomaly_counts):
        out["specscope_anomaly_active"].append(_Sample(key, (kind,), int((key, kind) in active)))
    for key, states in sorted(snap.checks.items()):
        for check, state in sorted(states.items()):
            for st in STATES:
                out["specscope_check_state"].append(_Sample(key, (check, st), int(st == state)))
    for key, kind in sorted(snap.verification.items()):
        out["specscope_verification"].append(_Sample(key, (kind,), 1))
    for key, ns in sorted(snap.started.items()):
        out["specscope_engine_start_time_seconds"].append(_Sample(key, (), ns / 1e9))
    for event, n in sorted(snap.health.items()):
        out["specscope_collector_events_total"].append(_Sample((), (event,), n))
    for p in snap.processes:
        pl = (p["role"], p["pid"])
        out["specscope_process_cpu_seconds_total"].append(_Sample((), pl, round(p["cpu_seconds"], 3)))
        out["specscope_process_resident_memory_bytes"].append(_Sample((), pl, p["rss_bytes"]))
    return out


def _field_samples(out: list[_Sample], m: Metric, key: tuple, s: Any) -> None:
    name = m.field
    if name is None:  # a metric computed elsewhere (process, collector figures)
        return
    if name.startswith("hists."):
        h = s.hists.get(name[6:])
        if h is not None:
            out.append(_Sample(key, (), h))
    elif name.startswith("truth."):
        attr = name[6:]
        out.extend(_Sample(key, (mode,), getattr(t, attr)) for mode, t in sorted(s.truth.items()))
    elif m.label in ("position", "row"):
        out.extend(_Sample(key, (pos,), n) for pos, n in enumerate(_per_position(s, name)))
    elif m.label is not None:
        out.extend(_Sample(key, (value,), n) for value, n in sorted(getattr(s, name).items()))
    elif getattr(s, name) is not None:  # a gauge with nothing to say yet stays absent
        out.append(_Sample(key, (), getattr(s, name)))


def _per_position(s: Any, field: str) -> list[int]:
    """Per-position (or per-row) counts over the positions both lists cover (drafted and
    accepted pair up)."""
    pair = ((s.row_draft_tokens, s.row_accepted) if field.startswith("row_")
            else (s.drafted_per_pos, s.accepted_per_pos))
    return list(getattr(s, field)[:min(map(len, pair))])


def _label_names(name: str, node: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A family's label names: those of its label set, and its own."""
    if name in OWN_LABELS:
        return (), OWN_LABELS[name]
    return (LABELS + (NODE,) if node else LABELS), EXTRA_LABELS.get(name, ())


_ESC = str.maketrans({"\\": r"\\", '"': r"\"", "\n": r"\n"})


def _fmt(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def _pairs(names: tuple[str, ...], values: tuple) -> str:
    """``name="value"`` pairs, escaped."""
    return ",".join(f'{n}="{str(v).translate(_ESC)}"' for n, v in zip(names, values))


def render(snap: Snapshot) -> str:
    """The exposition text (format 0.0.4) of one snapshot: what ``/metrics`` serves.

    Written here rather than by ``prometheus_client.generate_latest`` for its cost: on a
    3,800-line page (BENCHMARKS.md) generate_latest over the same families takes about six times
    as long, beyond the page's 20 ms target. It writes the same series as
    :func:`metric_families` (a test holds the two equal); values are written as integers where
    they are whole (``2`` where prometheus_client writes ``2.0``), labels in the table's order.
    """
    bases: dict[tuple, str] = {}
    lines: list[str] = []
    for name, samples in _samples(snap).items():
        if not samples:
            continue
        m = METRICS[name]
        set_names, own = _label_names(name, snap.node_label)
        lines.append(f"# HELP {name} {m.help}")
        lines.append(f"# TYPE {name} {m.kind}")
        for key, extra, value in samples:
            base = bases.get(key)
            if base is None:
                base = bases[key] = _pairs(set_names, key)
            labels = base + ("," if base and extra else "") + _pairs(own, extra)
            if m.kind == "histogram":
                _hist_lines(lines, name, labels, value)
            else:
                lines.append(f"{name}{{{labels}}} {_fmt(value)}" if labels else f"{name} {_fmt(value)}")
    return "\n".join(lines) + "\n"


def _hist_lines(lines: list[str], name: str, labels: str, h: Histogram) -> None:
    cum = h.cumulative()
    pre = f"{name}_bucket{{{labels}{',' if labels else ''}le=\""
    for bound, c in zip(h.bounds, cum):
        lines.append(f'{pre}{_fmt(bound)}"}} {c}')
    lines.append(f'{pre}+Inf"}} {cum[-1]}')
    tail = f"{{{labels}}}" if labels else ""
    lines.append(f"{name}_sum{tail} {_fmt(h.total)}")
    lines.append(f"{name}_count{tail} {h.count}")


def metric_families(snap: Snapshot) -> list[Any]:
    """The snapshot's metrics as prometheus_client families (``CounterMetricFamily`` and its
    kin), in ``METRICS`` order; a family without samples is left out. Counter families are
    named without ``_total`` and carry no ``_created`` series, so the names they expose are
    the table's."""
    from prometheus_client import core

    make = {"counter": core.CounterMetricFamily, "gauge": core.GaugeMetricFamily,
            "histogram": core.HistogramMetricFamily}
    out = []
    for name, samples in _samples(snap).items():
        if not samples:
            continue
        m = METRICS[name]
        set_names, own = _label_names(name, snap.node_label)
        fam = make[m.kind](name, m.help, labels=set_names + own)
        for key, extra, value in samples:
            labels = [str(v) for v in key[:len(set_names)] + extra]
            if m.kind == "histogram":
                cum = value.cumulative()
                buckets = [(_fmt(b), c) for b, c in zip(value.bounds, cum)] + [("+Inf", cum[-1])]
                fam.add_metric(labels, buckets, value.total)
            else:
                fam.add_metric(labels, value)
        out.append(fam)
    return out


class PromCollector:
    """A prometheus_client custom collector over a collector, its families built from a snapshot
    at scrape time: ``registry.register(PromCollector(collector))``."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector

    def describe(self) -> list[Any]:
        """The families without samples, so registering takes no snapshot."""
        from prometheus_client.core import Metric as Family

        return [Family(name[:-6] if m.kind == "counter" else name, m.help, m.kind)
                for name, m in METRICS.items()]

    def collect(self) -> Iterator[Any]:
        yield from metric_families(self.collector.snapshot())
