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

from typing import Any, Iterator

from ..collector.histogram import Histogram
from ..collector.service import LABELS, Snapshot

ACCEPT_LENGTH_BUCKETS = tuple(float(i) for i in range(1, 17))
DRAFT_PROB_BOUNDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

#: name -> (type, help). Every metric the exporter can emit (tests hold Grafana and rules to it).
METRICS = {
    "specscope_verify_steps_total": ("counter", "Verify-step records (one per engine step and rank)."),
    "specscope_request_steps_total": ("counter", "Request-steps by requested and effectively used sampling mode."),
    "specscope_drafts_total": ("counter", "Request-steps that drafted at least one token."),
    "specscope_draft_tokens_total": ("counter", "Drafted tokens (chain length / tree depth per request-step)."),
    "specscope_accepted_tokens_total": ("counter", "Accepted draft tokens, bonus token excluded."),
    "specscope_drafted_tokens_per_position_total": ("counter", "Request-steps that drafted position N."),
    "specscope_accepted_tokens_per_position_total": ("counter", "Request-steps whose draft token at position N was accepted."),
    "specscope_sampling_verified_positions_total": ("counter", "Verified positions with sampling-truth statistics."),
    "specscope_sampling_top1_total": ("counter", "Committed tokens equal to the target argmax."),
    "specscope_sampling_top1_expected_total": ("counter", "Expected count of the above under the requested sampling (sum of p_max)."),
    "specscope_sampling_top1_variance_total": ("counter", "Variance of that count (sum of p_max * (1 - p_max))."),
    "specscope_draft_top1_at_one_total": ("counter", "Drafted positions whose draft top-1 probability is exactly 1.0."),
    "specscope_fallbacks_total": ("counter", "Verify fell back from the requested mode to argmax, by reason."),
    "specscope_anomalies_total": ("counter", "Times a detector started firing, by kind."),
    "specscope_anomaly_active": ("gauge", "1 while a detector fires, by kind."),
    "specscope_requests_total": ("counter", "Finished requests."),
    "specscope_output_tokens_total": ("counter", "Output tokens of finished requests."),
    "specscope_clamped_entries_total": ("counter", "Impossible verify entries (accepted > drafted, negative) clamped."),
    "specscope_accept_length": ("histogram", "Tokens committed per request-step, bonus token included."),
    "specscope_draft_top1_probability": ("histogram", "Draft top-1 probability per drafted position."),
    "specscope_ttft_seconds": ("histogram", "Time to first token."),
    "specscope_tpot_seconds": ("histogram", "Time per output token after the first, per request."),
    "specscope_itl_seconds": ("histogram", "Inter-token latency per token (chunk gap over the tokens it carries)."),
    "specscope_itl_chunk_seconds": ("histogram", "Gap between streamed chunks (one per verify step)."),
    "specscope_e2e_seconds": ("histogram", "Request end-to-end latency."),
    "specscope_phase_duration_seconds": ("histogram", "Duration of a verify-path phase."),
    "specscope_collector_events_total": ("counter", "The collector's own accounting, by event."),
    "specscope_process_cpu_seconds_total": ("counter", "CPU time of the collector and the engine processes it serves."),
    "specscope_process_resident_memory_bytes": ("gauge", "Resident memory of those processes."),
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


def _base(key: tuple) -> str:
    return ",".join(f'{n}="{str(v).translate(_ESC)}"' for n, v in zip(LABELS, key))


def _hist(lines: list[str], name: str, base: str, h: Histogram, extra: str = "") -> None:
    cum = h.cumulative()
    sep = "," if extra else ""
    for bound, c in zip(h.bounds, cum):
        lines.append(f"{name}_bucket{_labels(base, extra + sep + _lv(le=_fmt(bound)))} {c}")
    lines.append(f"{name}_bucket{_labels(base, extra + sep + _lv(le='+Inf'))} {cum[-1]}")
    lines.append(f"{name}_sum{_labels(base, extra)} {_fmt(h.total)}")
    lines.append(f"{name}_count{_labels(base, extra)} {h.count}")


def render(snap: Snapshot) -> str:
    """The exposition text (format 0.0.4) of one snapshot."""
    out: dict[str, list[str]] = {name: [] for name in METRICS}
    for key, s in snap.totals.items():
        b = _base(key)
        out["specscope_verify_steps_total"].append(f"specscope_verify_steps_total{_labels(b)} {s.num_steps}")
        for (req, used), n in sorted(s.modes.items()):
            out["specscope_request_steps_total"].append(
                f"specscope_request_steps_total{_labels(b, _lv(mode_requested=req, mode_used=used))} {n}")
        out["specscope_drafts_total"].append(f"specscope_drafts_total{_labels(b)} {s.num_drafts}")
        out["specscope_draft_tokens_total"].append(f"specscope_draft_tokens_total{_labels(b)} {s.draft_tokens}")
        out["specscope_accepted_tokens_total"].append(f"specscope_accepted_tokens_total{_labels(b)} {s.accepted_tokens}")
        for pos, (dn, an) in enumerate(zip(s.drafted_per_pos, s.accepted_per_pos)):
            pl = _labels(b, _lv(position=pos))
            out["specscope_drafted_tokens_per_position_total"].append(
                f"specscope_drafted_tokens_per_position_total{pl} {dn}")
            out["specscope_accepted_tokens_per_position_total"].append(
                f"specscope_accepted_tokens_per_position_total{pl} {an}")
        for mode, t in sorted(s.truth.items()):
            ml = _labels(b, _lv(mode_requested=mode))
            out["specscope_sampling_verified_positions_total"].append(
                f"specscope_sampling_verified_positions_total{ml} {t.num_verified}")
            out["specscope_sampling_top1_total"].append(f"specscope_sampling_top1_total{ml} {t.num_top1}")
            out["specscope_sampling_top1_expected_total"].append(
                f"specscope_sampling_top1_expected_total{ml} {_fmt(t.expected_top1)}")
            out["specscope_sampling_top1_variance_total"].append(
                f"specscope_sampling_top1_variance_total{ml} {_fmt(t.var_top1)}")
        out["specscope_draft_top1_at_one_total"].append(
            f"specscope_draft_top1_at_one_total{_labels(b)} {s.draft_hist[-1]}")
        dp = Histogram(DRAFT_PROB_BOUNDS, list(s.draft_hist[:-2]) + [s.draft_hist[-2] + s.draft_hist[-1]],
                       0.0, sum(s.draft_hist))
        _hist(out["specscope_draft_top1_probability"], "specscope_draft_top1_probability", b, dp)
        for reason, n in sorted(s.fallbacks.items()):
            out["specscope_fallbacks_total"].append(
                f"specscope_fallbacks_total{_labels(b, _lv(reason=reason))} {n}")
        out["specscope_requests_total"].append(f"specscope_requests_total{_labels(b)} {s.num_requests}")
        out["specscope_output_tokens_total"].append(f"specscope_output_tokens_total{_labels(b)} {s.output_tokens}")
        out["specscope_clamped_entries_total"].append(f"specscope_clamped_entries_total{_labels(b)} {s.num_clamped}")
        al = Histogram(ACCEPT_LENGTH_BUCKETS)
        for length, n in s.accept_len_hist.items():
            al.observe(float(length), n)
        _hist(out["specscope_accept_length"], "specscope_accept_length", b, al)
        for src, name in (("ttft_s", "specscope_ttft_seconds"), ("tpot_s", "specscope_tpot_seconds"),
                          ("itl_token_s", "specscope_itl_seconds"),
                          ("itl_chunk_s", "specscope_itl_chunk_seconds"), ("e2e_s", "specscope_e2e_seconds")):
            if src in s.hists:
                _hist(out[name], name, b, s.hists[src])
        for hname, h in sorted(s.hists.items()):
            if hname.startswith("phase:"):
                _hist(out["specscope_phase_duration_seconds"], "specscope_phase_duration_seconds", b, h,
                      _lv(phase=hname[6:]))
    for (key, kind), n in sorted(snap.anomaly_counts.items()):
        out["specscope_anomalies_total"].append(
            f"specscope_anomalies_total{_labels(_base(key), _lv(kind=kind))} {n}")
    active = {(k, a.kind) for k, a in snap.anomalies}
    for key, kind in sorted(snap.anomaly_counts):
        out["specscope_anomaly_active"].append(
            f"specscope_anomaly_active{_labels(_base(key), _lv(kind=kind))} {int((key, kind) in active)}")
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
        kind, help_text = METRICS[name]
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
