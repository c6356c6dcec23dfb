"""Sweep figures: throughput per GPU vs interactivity with the Pareto front per setting."""

from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go

from . import COLORS, empty, styled

X_KEYS = ("interactivity_tok_s_user_median", "interactivity_tok_s_user_mean",
          "interactivity_tok_s_user_p50", "output_token_throughput_per_user")
Y_KEYS = ("output_throughput_per_gpu_tok_s", "output_throughput_tok_s")


def sweep_points(views: Sequence[Any]) -> list[dict[str, Any]]:
    """One point per benchmark record: setting, concurrency, x, y, and whether to trust it."""
    points = []
    for v in views:
        run = v.run
        for b in v.section.benchmarks:
            m, cfg = b.metrics, b.config
            x = next((m[k] for k in X_KEYS if m.get(k) is not None), None)
            y = next((m[k] for k in Y_KEYS if m.get(k) is not None), None)
            if x is None or y is None:
                continue
            spec = cfg.get("spec") or (run.config_id if run else None) or "?"
            off = spec in ("off", "no-spec") or (run is not None and run.num_steps == 0)
            # an engine sweep's point carries its gate (the eval gate with the probe's verdict)
            gate = (run.labels.get("sweep_gate") if run else None) or v.gate
            points.append({"run": v.run_id, "setting": spec, "x": x, "y": y,
                           "concurrency": cfg.get("concurrency", ""),
                           "temperature": cfg.get("temperature", ""),
                           "lengths": f"{cfg.get('input_len', '?')}:{cfg.get('output_len', '?')}",
                           # target-only decoding is the reference itself: nothing to gate
                           "gate": gate or ("n/a: target-only" if off else "missing"),
                           "fault": cfg.get("fault", ""),
                           "trusted": off or gate == "pass",
                           "inconclusive": not off and gate == "inconclusive"})
    return points


def pareto_front(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Points no other point beats on both interactivity and throughput, by interactivity."""
    front = [p for p in points if not any(q["x"] >= p["x"] and q["y"] >= p["y"] and
                                          (q["x"] > p["x"] or q["y"] > p["y"]) for q in points)]
    return sorted(front, key=lambda p: p["x"])


#: how each kind of point is drawn: marker symbol and legend suffix
_STYLE = {"trusted": ("circle", ""),
          "inconclusive": ("circle-open",
                           " INCONCLUSIVE (gate: too little data to fail; off the front)"),
          "untrusted": ("x-open", " UNTRUSTED (gate failed or missing)")}


def _status(p: dict[str, Any]) -> str:
    return "trusted" if p["trusted"] else "inconclusive" if p["inconclusive"] else "untrusted"


def pareto_figure(points: Sequence[dict[str, Any]]) -> go.Figure:
    if not points:
        return empty("no sweep points (benchmark records with throughput and tok/s/user)")
    fig = go.Figure()
    settings = sorted({p["setting"] for p in points})
    for i, s in enumerate(settings):
        pts = [p for p in points if p["setting"] == s]
        color = COLORS[i % len(COLORS)]
        trusted = [p for p in pts if p["trusted"]]
        front = pareto_front(trusted)
        if front:
            fig.add_trace(go.Scatter(x=[p["x"] for p in front], y=[p["y"] for p in front],
                                     mode="lines", line={"color": color, "dash": "dot"},
                                     name=f"{s} Pareto front", legendgroup=s))
        for status, (symbol, suffix) in _STYLE.items():
            group = [p for p in pts if _status(p) == status]
            if not group:
                continue
            ok = status == "trusted"
            fig.add_trace(go.Scatter(
                x=[p["x"] for p in group], y=[p["y"] for p in group], mode="markers+text",
                text=[f"c{p['concurrency']}" for p in group], textposition="top center",
                marker={"color": color, "size": 12 if ok else 14,
                        "symbol": symbol, "line": {"color": color, "width": 2}},
                name=f"{s}{suffix}",
                legendgroup=s,
                customdata=[[p["run"], p["gate"], p["temperature"], p["lengths"], p["fault"]]
                            for p in group],
                hovertemplate="%{customdata[0]}<br>gate %{customdata[1]}, temperature "
                              "%{customdata[2]}, in:out %{customdata[3]} %{customdata[4]}"
                              "<br>%{x:.1f} tok/s/user, %{y:.1f} tok/s<extra></extra>"))
    fig.update_xaxes(title_text="interactivity (tok/s per user, median of 1 / TPOT)")
    fig.update_yaxes(title_text="throughput per GPU (output tok/s)")
    return styled(fig, "Throughput vs interactivity; hollow x: untrusted (eval gate failed or "
                       "missing); hollow circle: gate inconclusive", 460)


def advisor_figure(advice: dict[str, Any]) -> go.Figure:
    rows = advice["rows"]
    if not rows or rows[0]["predicted_al"] is None:
        return empty("the advisor needs a run with per-position acceptance")
    k = [r["num_steps"] for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=k, y=[r["predicted_tok_s"] for r in rows], mode="lines+markers",
                             name="predicted tok/s per request"))
    fig.add_trace(go.Scatter(x=k, y=[r["measured_tok_s"] for r in rows], mode="markers",
                             marker={"size": 13, "symbol": "diamond"}, name="measured"))
    fig.add_trace(go.Scatter(x=k, y=[r["predicted_al"] for r in rows], mode="lines", yaxis="y2",
                             line={"dash": "dot"}, name="predicted acceptance length"))
    fig.update_layout(yaxis={"title": {"text": "tokens/s per request (phase time)"}},
                      yaxis2={"overlaying": "y", "side": "right",
                              "title": {"text": "acceptance length"}})
    fig.update_xaxes(title_text="num_steps (draft depth; num_draft_tokens = steps + 1)", dtick=1)
    return styled(fig, "Config advisor: predicted vs measured", 380)
