"""Prometheus exposition of a collector snapshot, built at scrape time (no global registry).

Counters, not gauges, so PromQL computes rates and ratios. Labels: the configuration
(``algorithm``, ``num_steps``, ``topk``, ``num_draft_tokens``, ``backend``, ``model``) and
``rank``; request ids are never labels, and the collector caps the number of label sets.

PromQL recipes:

- acceptance rate (accepted / drafted draft tokens)::

    sum by (algorithm, num_steps) (rate(specscope_accepted_tokens_total[5m]))
      / sum by (algorithm, num_steps) (rate(specscope_draft_tokens_total[5m]))

- mean acceptance length, bonus token INCLUDED (tokens committed per request-step)::

    1 + sum(rate(specscope_accepted_tokens_total[5m])) / sum(rate(specscope_drafts_total[5m]))

- per-position acceptance::

    sum by (position) (rate(specscope_accepted_tokens_per_position_total[5m]))
      / sum by (position) (rate(specscope_drafted_tokens_per_position_total[5m]))

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


_ESC = str.maketrans({"\\": r"\\", '"': r"\"", "\n": r"\n"})


def _labels(base: str, extra: str = "") -> str:
    inner = base + ("," + extra if base and extra else extra)
    return "{" + inner + "}" if inner else ""


def _fmt(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def _lv(**labels: Any) -> str:
    """``name="value"`` pairs, escaped."""
    return ",".join(f'{n}="{str(v).translate(_ESC)}"' for n, v in labels.items())


def _base(key: tuple, node: bool = False) -> str:
    """The label pairs of a label set; with ``node``, its node too (a collector of several)."""
    names = LABELS + (NODE,) if node else LABELS
    return ",".join(f'{n}="{str(v).translate(_ESC)}"' for n, v in zip(names, key))


def _hist(lines: list[str], name: str, base: str, h: Histogram, extra: str = "") -> None:
    cum = h.cumulative()
    sep = "," if extra else ""
    for bound, c in zip(h.bounds, cum):
        lines.append(f"{name}_bucket{_labels(base, extra + sep + _lv(le=_fmt(bound)))} {c}")
    lines.append(f"{name}_bucket{_labels(base, extra + sep + _lv(le='+Inf'))} {cum[-1]}")
    lines.append(f"{name}_sum{_labels(base, extra)} {_fmt(h.total)}")
    lines.append(f"{name}_count{_labels(base, extra)} {h.count}")


#: metrics written straight from a SpecStats field, in table order
FIELD_METRICS = [(n, m) for n, m in METRICS.items() if m.field is not None]


def _render_field(lines: list[str], name: str, m: Metric, base: str, s: Any) -> None:
    if m.field.startswith("hists."):
        h = s.hists.get(m.field[6:])
        if h is not None:
            _hist(lines, name, base, h)
    elif m.field.startswith("truth."):
        attr = m.field[6:]
        for mode, t in sorted(s.truth.items()):
            lines.append(f"{name}{_labels(base, _lv(**{m.label: mode}))} {_fmt(getattr(t, attr))}")
    elif m.label == "position":
        for pos, n in enumerate(_per_position(s, m.field)):
            lines.append(f"{name}{_labels(base, _lv(position=pos))} {n}")
    elif m.label is not None:
        for value, n in sorted(getattr(s, m.field).items()):
            lines.append(f"{name}{_labels(base, _lv(**{m.label: value}))} {n}")
    elif getattr(s, m.field) is not None:  # a gauge with nothing to say yet stays absent
        lines.append(f"{name}{_labels(base)} {getattr(s, m.field)}")


def _per_position(s: Any, field: str) -> list[int]:
    """Per-position counts over the positions both lists cover (drafted and accepted pair up)."""
    n = min(len(s.drafted_per_pos), len(s.accepted_per_pos))
    return list(getattr(s, field)[:n])


def render(snap: Snapshot) -> str:
    """The exposition text (format 0.0.4) of one snapshot."""
    out: dict[str, list[str]] = {name: [] for name in METRICS}
    for key, s in snap.totals.items():
        b = _base(key, snap.node_label)
        for (req, used), n in sorted(s.modes.items()):
            out["specscope_request_steps_total"].append(
                f"specscope_request_steps_total{_labels(b, _lv(mode_requested=req, mode_used=used))} {n}")
        for name, m in FIELD_METRICS:
            _render_field(out[name], name, m, b, s)
        out["specscope_draft_top1_at_one_total"].append(
            f"specscope_draft_top1_at_one_total{_labels(b)} {s.draft_hist[-1]}")
        dp = Histogram(DRAFT_PROB_BOUNDS, list(s.draft_hist[:-2]) + [s.draft_hist[-2] + s.draft_hist[-1]],
                       0.0, sum(s.draft_hist))
        _hist(out["specscope_draft_top1_probability"], "specscope_draft_top1_probability", b, dp)
        al = Histogram(ACCEPT_LENGTH_BUCKETS)
        for length, n in s.accept_len_hist.items():
            al.observe(float(length), n)
        _hist(out["specscope_accept_length"], "specscope_accept_length", b, al)
        for hname, h in sorted(s.hists.items()):
            if hname.startswith("phase:"):
                _hist(out["specscope_phase_duration_seconds"], "specscope_phase_duration_seconds", b, h,
                      _lv(phase=hname[6:]))
    for (key, kind), n in sorted(snap.anomaly_counts.items()):
        out["specscope_anomalies_total"].append(
            f"specscope_anomalies_total{_labels(_base(key, snap.node_label), _lv(kind=kind))} {n}")
    active = {(k, a.kind) for k, a in snap.anomalies}
    for key, kind in sorted(snap.anomaly_counts):
        out["specscope_anomaly_active"].append(
            f"specscope_anomaly_active{_labels(_base(key, snap.node_label), _lv(kind=kind))} {int((key, kind) in active)}")
    for key, states in sorted(snap.checks.items()):
        for check, state in sorted(states.items()):
            for st in STATES:
                out["specscope_check_state"].append(
                    f"specscope_check_state{_labels(_base(key, snap.node_label), _lv(check=check, state=st))} "
                    f"{int(st == state)}")
    for key, kind in sorted(snap.verification.items()):
        out["specscope_verification"].append(
            f"specscope_verification{_labels(_base(key, snap.node_label), _lv(kind=kind))} 1")
    for event, n in sorted(snap.health.items()):
        out["specscope_collector_events_total"].append(
            f"specscope_collector_events_total{{{_lv(event=event)}}} {n}")
    for p in snap.processes:
        pl = "{" + _lv(role=p["role"], pid=p["pid"]) + "}"
        out["specscope_process_cpu_seconds_total"].append(
            f"specscope_process_cpu_seconds_total{pl} {_fmt(round(p['cpu_seconds'], 3))}")
        out["specscope_process_resident_memory_bytes"].append(
            f"specscope_process_resident_memory_bytes{pl} {p['rss_bytes']}")
    lines: list[str] = []
    for name, samples in out.items():
        if not samples:
            continue
        kind, help_text = METRICS[name].kind, METRICS[name].help
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(samples)
    return "\n".join(lines) + "\n"


def metric_families(snap: Snapshot) -> Iterator[Any]:
    """The same metrics as prometheus_client families, for a user's own registry."""
    from prometheus_client.parser import text_string_to_metric_families

    yield from text_string_to_metric_families(render(snap))


class PromCollector:
    """A prometheus_client custom collector: ``registry.register(PromCollector(collector))``."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector

    def collect(self) -> Iterator[Any]:
        yield from metric_families(self.collector.snapshot())
