"""Requests page figures: acceptance length over requests, and one request's step timeline."""

from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go

from ... import schema
from ...collector.requests import RequestRow, distribution
from .. import figures


def request_rows(rows: Sequence[RequestRow]) -> list[dict[str, Any]]:
    """The table: flagged requests first, then speculative ones by acceptance length (lowest
    first), then requests without one (target-only runs)."""
    ordered = sorted(rows, key=lambda r: (not r.flags, r.acceptance_length is None,
                                          r.acceptance_length or 0))
    return [{"run": r.run_id, "request": r.request_id, "category": r.category or "—",
             "steps": r.steps, "drafted": r.drafted, "accepted": r.accepted,
             "acceptance length": None if r.acceptance_length is None else round(r.acceptance_length, 2),
             "output tokens": r.output_tokens,
             "flags": "; ".join(f"{f['flag']}: {f['evidence']}" for f in r.flags) or "—"}
            for r in ordered]


def distribution_figure(rows: Sequence[RequestRow]) -> go.Figure:
    known = [r.acceptance_length for r in rows if r.acceptance_length is not None]
    if not known:
        return figures.empty("no per-request speculative figures in the selected runs")
    d = distribution(rows)
    fig = go.Figure(go.Histogram(x=known, nbinsx=30, name="requests",
                                 marker={"color": figures.COLORS[0]}))
    for key, label, dash, where, shift in (
            ("request_weighted_mean_acceptance_length", "request-weighted mean", "dot",
             "top left", 0),
            ("token_weighted_mean_acceptance_length", "token-weighted mean", "dash", "top right",
             -18)):  # one line below the other: the two means are often close
        if d[key] is not None:
            fig.add_vline(x=d[key], line={"dash": dash}, annotation_text=f"{label} {d[key]:.2f}",
                          annotation_position=where, annotation_yshift=shift)
    fig.update_xaxes(title_text="acceptance length per request (bonus token included)")
    fig.update_yaxes(title_text="requests")
    return figures.styled(fig, f"{len(known)} requests; flagged: {d['num_flagged']}")


def timeline_figure(records: Sequence[Any], run_id: str, request_id: str) -> go.Figure:
    """Accepted drafts and k per verify step of one request (step time on the x axis)."""
    xs, acc, k = [], [], []
    for r in records:
        if isinstance(r, schema.VerifyStepRecord) and r.run_id == run_id:
            for e in r.entries:
                if e.request_id == request_id:
                    xs.append(r.t_ns / 1e9)
                    acc.append(e.num_accepted)
                    k.append(e.num_drafted)
    if not xs:
        return figures.empty(f"no verify steps recorded for {request_id}")
    t0 = xs[0]
    x = [t - t0 for t in xs]
    fig = go.Figure([go.Bar(x=x, y=acc, name="accepted drafts", marker={"color": figures.COLORS[0]}),
                     go.Scatter(x=x, y=k, name="k (drafted)", mode="lines",
                                line={"shape": "hv", "color": figures.COLORS[1]})])
    fig.update_xaxes(title_text="seconds since the request's first verify step")
    fig.update_yaxes(title_text="tokens")
    return figures.styled(fig, f"{request_id}: {len(x)} verify steps")


def category_heatmap(columns: Sequence[tuple[str, Sequence[Any]]]) -> go.Figure:
    """The category matrix: one column per run, one row per workload category, each cell the
    run's speedup over the baseline on the same prompts (tokens/s of matched requests), the
    95% bootstrap interval and acceptance length on hover; a run without a matched baseline
    shows its acceptance length instead (a column says which). ``columns``: (run label,
    ``collector.requests.category_rows`` of that run)."""
    columns = [(label, rows) for label, rows in columns if rows]
    if not columns:
        return figures.empty("no requests with categories in the selected runs")
    cats = sorted({r.category for _, rows in columns for r in rows})
    speed = any(r.speedup is not None for _, rows in columns for r in rows)
    z, text, hover = [], [], []
    for cat in cats:
        zr, tr, hr = [], [], []
        for label, rows in columns:
            r = next((x for x in rows if x.category == cat), None)
            value = None if r is None else (r.speedup if speed else r.acceptance_length)
            zr.append(value)
            tr.append("" if value is None else (f"{value:.2f}x" if speed else f"{value:.2f}")
                      + (f"<br>[{r.ci[0]:.2f}, {r.ci[1]:.2f}]" if speed and r is not None and r.ci
                         and value is not None else ""))
            if r is None:
                hr.append(f"{cat or '(none)'} · {label}: no requests")
                continue
            ci = f" [{r.ci[0]:.2f}, {r.ci[1]:.2f}]" if r.ci else " (no interval: too few matched)"
            al = "—" if r.acceptance_length is None else f"{r.acceptance_length:.2f}"
            hr.append(f"{cat or '(none)'} · {label}<br>" + (
                f"speedup {r.speedup:.2f}x{ci} over {r.matched} matched request(s)<br>"
                if r.speedup is not None else "no baseline match<br>")
                + f"acceptance length {al} (bonus incl.), {r.requests} request(s)")
        z.append(zr)
        text.append(tr)
        hover.append(hr)
    fig = go.Figure(go.Heatmap(
        z=z, x=[label for label, _ in columns], y=[c or "(none)" for c in cats], text=text,
        texttemplate="%{text}", hovertext=hover, hoverinfo="text",
        colorscale="RdBu", zmid=1.0 if speed else None,
        colorbar={"title": {"text": "speedup" if speed else "AL"}}))
    title = ("Speedup over the first selected run by category (tokens/s on the same prompts)"
             if speed else "Acceptance length by category (bonus included; no baseline matched)")
    return figures.styled(fig, title, 140 + 40 * len(cats))
