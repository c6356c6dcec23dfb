"""A Grafana dashboard over the exporter's metrics, or an engine's own (``specscope grafana
[--engine E]``). Stdlib only."""

from __future__ import annotations

import json

_BY = "algorithm, num_steps, topk, num_draft_tokens"

PANELS = [
    ("Mean acceptance length (bonus token included)",
     f"1 + sum by ({_BY}) (rate(specscope_accepted_tokens_total[5m])) / sum by ({_BY}) (rate(specscope_drafts_total[5m]))"),
    ("Acceptance rate (accepted / drafted)",
     f"sum by ({_BY}) (rate(specscope_accepted_tokens_total[5m])) / sum by ({_BY}) (rate(specscope_draft_tokens_total[5m]))"),
    ("Per-position acceptance",
     "sum by (position) (rate(specscope_accepted_tokens_per_position_total[5m])) / sum by (position) (rate(specscope_drafted_tokens_per_position_total[5m]))"),
    ("Sampling truth z-score (silent greedy above 6)",
     "(sum by (mode_requested) (increase(specscope_sampling_top1_total[10m])) - sum by (mode_requested) (increase(specscope_sampling_top1_expected_total[10m]))) / sqrt(sum by (mode_requested) (increase(specscope_sampling_top1_variance_total[10m])))"),
    ("Request-steps by requested / used sampling mode",
     "sum by (mode_requested, mode_used) (rate(specscope_request_steps_total[5m]))"),
    ("Fallbacks to argmax by reason", "sum by (reason) (rate(specscope_fallbacks_total[5m]))"),
    ("Draft top-1 probability exactly 1.0 (share)",
     "sum(rate(specscope_draft_top1_at_one_total[5m])) / sum(rate(specscope_draft_top1_probability_count[5m]))"),
    ("Active anomalies", "sum by (kind) (specscope_anomaly_active)"),
    ("Output tokens/s", f"sum by ({_BY}) (rate(specscope_output_tokens_total[1m]))"),
    ("TTFT p50 / p99 (s)",
     "histogram_quantile(0.5, sum by (le) (rate(specscope_ttft_seconds_bucket[5m])))"),
    ("TPOT p50 (s)", "histogram_quantile(0.5, sum by (le) (rate(specscope_tpot_seconds_bucket[5m])))"),
    ("ITL per token p50 (s)", "histogram_quantile(0.5, sum by (le) (rate(specscope_itl_seconds_bucket[5m])))"),
    ("Phase time share", "sum by (phase) (rate(specscope_phase_duration_seconds_sum[5m]))"),
    ("Collector and engine CPU (cores)", "sum by (role, pid) (rate(specscope_process_cpu_seconds_total[1m]))"),
]


def board_json(title: str, uid: str, panels: list[tuple[str, str]]) -> str:
    """Grafana dashboard JSON (schema 39), one time-series panel per (title, PromQL)."""
    out = []
    for i, (name, expr) in enumerate(panels):
        out.append({
            "id": i + 1, "type": "timeseries", "title": name,
            "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "targets": [{"refId": "A", "expr": expr, "legendFormat": "__auto"}],
        })
    return json.dumps({
        "title": title, "uid": uid, "schemaVersion": 39,
        "time": {"from": "now-1h", "to": "now"}, "refresh": "10s",
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
        "panels": out,
    }, indent=1)


#: over ``specscope probe --every S --metrics-port P``
PROBE_PANELS = [
    ("Probe checks failing (1 = FAIL)", 'specscope_probe_check_state{state="fail"}'),
    ("Top-1 share: observed vs allowed", "specscope_probe_observed_top1_rate or specscope_probe_expected_top1_rate"),
    ("Positions per check", "specscope_probe_positions"),
    ("Engine's own acceptance rate (accepted / drafted)", "specscope_probe_engine_acceptance_rate"),
    ("Probe rounds failed per hour", "sum by (target) (increase(specscope_probe_failures_total[1h]))"),
    ("Probe round duration (s)", "specscope_probe_duration_seconds"),
]


def dashboard_json(engine: str = "specscope") -> str:
    """The board over specscope's exporter, over an engine's own series
    (``engine_rules.panels``), or over ``specscope probe``'s exporter (``probe``)."""
    if engine == "probe":
        return board_json("specscope: probe", "specscope-probe", PROBE_PANELS)
    if engine == "fleet":
        from .fleet_rules import FLEET_PANELS

        return board_json("specscope: fleet (nodes against their fleet)", "specscope-fleet",
                          FLEET_PANELS)
    if engine != "specscope":
        from .engine_rules import TITLE, panels

        return board_json(f"specscope: {TITLE[engine]} speculative decoding",
                          f"specscope-{engine}", panels(engine))
    return board_json("specscope: speculative decoding", "specscope", PANELS)
