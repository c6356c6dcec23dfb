"""Compare, regression, profile and accuracy figures and tables."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go

from . import COLORS, empty, short, styled


def compare_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """An engine PR's speed table: A, B, delta % and its bootstrap interval, the verdict."""
    out = []
    for r in rows:
        def fmt(v):
            return v if isinstance(v, str) or v is None else round(v, 4)

        ci = r["ci_pct"]
        out.append({"metric": r["label"], "A": fmt(r["a"]), "B": fmt(r["b"]),
                     "Δ%": None if r["delta_pct"] is None else round(r["delta_pct"], 2),
                     f"{int(r['level'] * 100)}% CI of Δ%": None if ci is None else
                     f"[{ci[0]:+.2f}, {ci[1]:+.2f}]", "verdict": r["verdict"]})
    return out


def latency_cdf(samples: Sequence[Any], labels: Sequence[str], metric: str = "ttft_s") -> go.Figure:
    """Empirical CDFs of a per-request latency, overlaid."""
    fig = go.Figure()
    for i, (s, label) in enumerate(zip(samples, labels)):
        x = np.sort(getattr(s, metric)[~np.isnan(getattr(s, metric))]) * 1e3
        if x.size:
            fig.add_trace(go.Scatter(x=x, y=np.arange(1, x.size + 1) / x.size, mode="lines",
                                     line={"shape": "hv", "color": COLORS[i % len(COLORS)]},
                                     name=short(label)))
    if not fig.data:
        return empty(f"no per-request {metric} in these runs")
    fig.update_xaxes(title_text=f"{metric[:-2].upper()} per request (ms)")
    fig.update_yaxes(title_text="share of requests", range=[0, 1.02])
    return styled(fig, f"{metric[:-2].upper()} distribution (CDF)")


def regression_rows(series: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for e in series:
        f = e["figures"]
        rows.append({"run": e["label"], "group": e.get("group", ""),
                     "vs last good": e["baseline"] or (e.get("note") or "—"),
                     "acceptance length": _r(f.get("mean_acceptance_length")),
                     "acceptance rate": _r(f.get("acceptance_rate")),
                     "tok/s": _r(f.get("output_tok_s"), 1), "TTFT ms": _r(f.get("ttft_ms"), 1),
                     "TPOT ms": _r(f.get("tpot_ms"), 2), "gate": e.get("gate_text") or e["gate"] or "n/a",
                     "anomalies": ", ".join(e["anomalies"]) or "—",
                     "significantly worse": ", ".join(e["worse"]) or "—",
                     "verdict": ("FIRST BAD" if e["first_bad"] else e["verdict"])})
    return rows


def regression_figure(series: Sequence[dict[str, Any]]) -> go.Figure:
    if not series:
        return empty("no runs")
    x = [e["label"] for e in series]
    y = [e["figures"].get("mean_acceptance_length") for e in series]
    color = [{"bad": "#d62728", "inconclusive": "#d4a000"}.get(e["verdict"], "#2ca02c")
             for e in series]
    fig = go.Figure(go.Scatter(x=x, y=y, mode="lines+markers", marker={"color": color, "size": 11},
                               line={"color": "#999"}, name="acceptance length"))
    for e in series:
        if e["first_bad"]:
            fig.add_annotation(x=e["label"], y=e["figures"].get("mean_acceptance_length"),
                               text="first bad run", showarrow=True, arrowhead=2)
    fig.update_yaxes(title_text="acceptance length (bonus incl.)")
    return styled(fig, "Run series (green good, red bad, amber gate inconclusive)")


def uptime_figure(runs: Sequence[tuple[str, Any]]) -> go.Figure:
    """Acceptance length (bonus token included) against uptime, one line per run and segment
    between restarts (``collector/uptime.py``'s spans, every class pooled)."""
    from ...collector.drift import ALL

    fig = go.Figure()
    for i, (label, u) in enumerate(runs):
        spans = u.pooled.bins.get(("", ALL), [])
        for seg in sorted({b.segment for b in spans}):
            pts = [b for b in spans if b.segment == seg and b.acceptance_length is not None]
            name = label if not seg else f"{label} · after restart {seg}"
            fig.add_trace(go.Scatter(
                x=[b.uptime_h for b in pts], y=[b.acceptance_length for b in pts],
                mode="lines+markers", name=name,
                line={"color": COLORS[i % len(COLORS)], "dash": "solid" if not seg else "dot"},
                customdata=[[b.served, b.drafts] for b in pts],
                hovertemplate="uptime %{x:.3f} h<br>AL %{y:.3f}<br>served %{customdata[0]} "
                              "tokens<br>%{customdata[1]} drafts"))
    if not fig.data:
        return empty("no verify steps or counter windows with times in these runs")
    fig.update_xaxes(title_text="uptime (h since the engine's start)")
    fig.update_yaxes(title_text="acceptance length (bonus incl.)")
    return styled(fig, "Acceptance length by uptime (a restart starts a new, dotted line)")


def profile_figure(views: Sequence[Any]) -> go.Figure:
    """Mean time per step by phase, stacked, one bar per run: per verify step, and for a
    target-only run per decode step (beside them: what a speculative step costs over one)."""
    rows = [(v, v.section.phases, v.section.totals.num_verify_steps
             or (v.section.phases["decode"].n if "decode" in v.section.phases else 0)) for v in views]
    rows = [r for r in rows if r[1] and r[2]]
    if not rows:
        return empty("no phase timings in these runs (record with the phase timer on)")
    names = sorted({n for _, ph, _ in rows for n in ph if n != "prefill"})
    fig = go.Figure()
    for i, n in enumerate(names):
        fig.add_trace(go.Bar(x=[short(v.run_id, 36) for v, _, _ in rows],
                             y=[(ph[n].total_s or 0) / steps * 1e3 if n in ph else 0
                                for _, ph, steps in rows],
                             name=n, marker_color=COLORS[i % len(COLORS)]))
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="ms per step (verify; target-only: decode)")
    return styled(fig, "Where a step's time goes (mean per step, prefill excluded)")


def profile_rows(views: Sequence[Any]) -> list[dict[str, Any]]:
    """Per run: time per committed token, draft overhead share, idle gaps (when the phase
    records themselves were kept; a live source has only per-phase totals)."""
    out = []
    for v in views:
        b = v.breakdown
        if b:
            out.append({"run": v.label, "steps": b.steps,
                        "time per committed token (ms)": _r(b.time_per_committed_token_ms, 2),
                        "draft overhead share": _pct(b.draft_overhead_share),
                        "idle gaps (s)": _r(b.idle_gap_s, 3),
                        "phase time (s)": _r(b.total_phase_s, 3)})
            continue
        ph, t = v.section.phases, v.section.totals
        total = sum(p.total_s or 0.0 for name, p in ph.items() if name != "prefill")
        committed = (t.accepted_tokens or 0) + t.num_drafts or t.output_tokens  # target-only
        if not total or not committed:
            continue
        draft = sum(ph[n].total_s or 0.0 for n in ("draft", "draft_extend") if n in ph)
        out.append({"run": v.label, "steps": t.num_verify_steps,
                    "time per committed token (ms)": _r(total / committed * 1e3, 2),
                    "draft overhead share": _pct(draft / total),
                    "idle gaps (s)": "n/a (live: phase totals only)",
                    "phase time (s)": _r(total, 3)})
    return out


def accuracy_rows(scores: dict[str, dict[str, float]], reference: str | None) -> list[dict[str, Any]]:
    """Benchmarks as rows, configurations as columns, each with its gap to ``reference``."""
    configs = list(scores)
    benches = sorted({b for c in scores.values() for b in c})
    rows = []
    for b in benches:
        row: dict[str, Any] = {"benchmark": b}
        ref = scores.get(reference, {}).get(b) if reference else None
        for c in configs:
            v = scores[c].get(b)
            cell = "—" if v is None else f"{v:.3f}"
            if v is not None and ref is not None and c != reference:
                cell += f" ({(v - ref) * 100:+.2f} pts)"
            row[c] = cell
        rows.append(row)
    return rows


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(v, nd)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"
