"""Live overview and sampling-truth figures (from ``RunView.section``, a typed ``Section``)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import plotly.graph_objects as go

from . import COLORS, empty, short, styled


def acceptance_over_time(views: Sequence[Any]) -> go.Figure:
    """Acceptance length (bonus included) and acceptance rate per window, one line per run;
    an engine's own reported figures (its gauges) dashed beside them."""
    if not any(v.section.windows for v in views):
        return empty("no verify steps yet")
    fig = go.Figure()
    for i, v in enumerate(views):
        w = [x for x in v.section.windows if x.num_drafts]
        t = since_first(w, v.section.windows)
        c = COLORS[i % len(COLORS)]
        fig.add_scatter(x=t, y=[x.mean_acceptance_length for x in w], mode="lines+markers",
                        name=short(v.label), line={"color": c}, legendgroup=v.run_id)
        fig.add_scatter(x=t, y=[x.acceptance_rate for x in w], mode="lines+markers",
                        name=short(v.label), line={"color": c}, legendgroup=v.run_id,
                        showlegend=False, xaxis="x2", yaxis="y2")
        # the engine's own figures (SGLang's gauges), dashed: its definition, not pooled
        r = [x for x in v.section.windows if x.reported_mean_acceptance_length is not None
             or x.reported_acceptance_rate is not None]
        if r:
            tr = since_first(r, v.section.windows)
            style = {"color": c, "dash": "dash"}
            fig.add_scatter(x=tr, y=[x.reported_mean_acceptance_length for x in r],
                            mode="lines+markers", name=short(v.label, 40) + " (gauge)",
                            line=style, legendgroup=v.run_id)
            fig.add_scatter(x=tr, y=[x.reported_acceptance_rate for x in r], mode="lines+markers",
                            name=short(v.label, 40) + " (gauge)", line=style,
                            legendgroup=v.run_id, showlegend=False, xaxis="x2", yaxis="y2")
    # stacked panels sharing time, laid out by hand (make_subplots costs ~11 ms a call); the
    # draft depth k under them where the runs give it (a speculation policy moves it)
    depth = any(x.mean_draft_depth is not None for v in views for x in v.section.windows)
    if depth:
        for i, v in enumerate(views):
            w = [x for x in v.section.windows if x.mean_draft_depth is not None]
            fig.add_scatter(x=since_first(w, v.section.windows), y=[x.mean_draft_depth for x in w], mode="lines+markers",
                            name=short(v.label), line={"color": COLORS[i % len(COLORS)], "shape": "hv"},
                            legendgroup=v.run_id, showlegend=False, xaxis="x3", yaxis="y3",
                            customdata=[x.off_steps for x in w],
                            hovertemplate="k %{y:.2f}, %{customdata} steps off<extra></extra>")
    tops = (1.0, 0.66, 0.30) if depth else (1.0, 0.44, None)
    domains = ([0.72, 1.0], [0.36, 0.62], [0.0, 0.26]) if depth else ([0.56, 1.0], [0.0, 0.44], None)
    titles = ["acceptance length (bonus token included)", "acceptance rate (accepted / drafted, pooled)",
              "draft depth k, mean per window (0: speculation off)"]
    last = "x3" if depth else "x2"
    layout = {"yaxis": {"domain": domains[0]}, "yaxis2": {"domain": domains[1]},
              "xaxis": {"anchor": "y", "matches": last, "showticklabels": False},
              "xaxis2": {"anchor": "y2", **({"matches": "x3", "showticklabels": False} if depth else
                                            {"title": {"text": "seconds since the run's first window"}})}}
    if depth:
        layout["yaxis3"] = {"domain": domains[2], "rangemode": "tozero"}
        layout["xaxis3"] = {"anchor": "y3", "title": {"text": "seconds since the run's first window"}}
    fig.update_layout(**layout, annotations=[
        {"text": text, "x": 0.5, "y": top, "xref": "paper", "yref": "paper", "showarrow": False,
         "yanchor": "bottom"} for text, top in zip(titles, tops) if top is not None])
    return styled(fig, "Acceptance over time", 620 if depth else 460)


def throughput_over_time(views: Sequence[Any]) -> go.Figure:
    """Committed tokens per second (accepted + bonus, from verify steps) per window."""
    if not any(v.section.windows for v in views):
        return empty("no verify steps yet")
    fig = go.Figure()
    for i, v in enumerate(views):
        xs, ys, busy = idle_gaps([x for x in v.section.windows if x.window_s])
        name = short(v.label) + (f" ({busy:.1f} tok/s busy)" if busy is not None else "")
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, connectgaps=False,
                                 line={"color": COLORS[i % len(COLORS)]}))
    fig.update_yaxes(title_text="committed tokens/s")
    return styled(fig, "Committed tokens/s per window (a break: the run idled; legend: over "
                       "its busy windows)")


def idle_gaps(windows: Sequence[Any]) -> tuple[list[float | None], list[float | None], float | None]:
    """x (seconds since the first window), y (committed tokens/s) with a None where the run
    had no window (idle: other runs' turn), and its rate over its busy windows alone."""
    if not windows:
        return [], [], None
    t0, xs = windows[0].time, []
    ys: list[float | None] = []
    for prev, w in zip([None, *windows], windows):
        if prev is not None and w.time - prev.time > 1.5 * prev.window_s:
            xs.append(prev.time + prev.window_s - t0)
            ys.append(None)
        xs.append(w.time - t0)
        ys.append(w.committed_tokens / w.window_s)
    busy_s = sum(w.window_s for w in windows)
    return xs, ys, sum(w.committed_tokens for w in windows) / busy_s if busy_s else None


def per_position(views: Sequence[Any]) -> go.Figure:
    """Per-position acceptance: share of request-steps drafting position i that accepted it."""
    if not any(v.section.totals.per_position_acceptance for v in views):
        return empty("no drafted positions")
    fig = go.Figure()
    for i, v in enumerate(views):
        pp = v.section.totals.per_position_acceptance
        fig.add_trace(go.Scatter(x=list(range(1, len(pp) + 1)), y=list(pp), mode="lines+markers",
                                 name=short(v.label), line={"color": COLORS[i % len(COLORS)]}))
    fig.update_xaxes(title_text="draft position", dtick=1)
    fig.update_yaxes(title_text="acceptance", range=[0, 1.05])
    return styled(fig, "Per-position acceptance")


def accept_length_hist(views: Sequence[Any]) -> go.Figure:
    """Tokens committed per request-step (bonus included): share of request-steps."""
    if not any(v.section.totals.accept_length_histogram for v in views):
        return empty("no accept-length histogram (this source exports none)")
    fig = go.Figure()
    for i, v in enumerate(views):
        h = v.section.totals.accept_length_histogram
        total = sum(h.values()) or 1
        ks = sorted(h)
        fig.add_trace(go.Bar(x=ks, y=[h[k] / total for k in ks], name=short(v.label),
                             marker_color=COLORS[i % len(COLORS)]))
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="accept length (tokens per step, bonus included)", dtick=1)
    fig.update_yaxes(title_text="share of request-steps")
    return styled(fig, "Accept-length histogram")


def latency_rows(views: Sequence[Any]) -> list[dict[str, Any]]:
    """TTFT / TPOT / ITL (per chunk and per token) / E2E percentiles in ms, one row per run."""
    rows = []
    for v in views:
        lat = v.section.latency
        row: dict[str, Any] = {"run": v.label}
        for k, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_chunk_s", "ITL/chunk"),
                        ("itl_token_s", "ITL/token"), ("e2e_s", "E2E")):
            for q in ("p50", "p90", "p99"):
                val = getattr(lat[k], q) if k in lat else None
                row[f"{name} {q}"] = None if val is None else round(val * 1e3, 2)
        row["requests"] = v.section.totals.num_requests
        rows.append(row)
    return rows


def anomalies(views: Sequence[Any]) -> list[dict[str, Any]]:
    """Active anomalies with their evidence, worst first."""
    out = []
    for v in views:
        for a in v.section.anomalies:
            out.append({"run": v.label, "kind": a.kind, "severity": a.severity,
                        "message": a.message, "evidence": dict(a.evidence)})
    return sorted(out, key=lambda a: (a["severity"] != "critical", a["run"]))


def truth_figure(views: Sequence[Any]) -> go.Figure:
    """Observed rate of committed == target argmax vs its expectation under the requested
    sampling, with the band honest sampling stays inside 95% of the time."""
    rows = [(v, t) for v in views for t in v.section.sampling_truth
            if t.observed_top1_rate is not None]
    if not rows:
        return empty("no sampling-truth statistics (greedy only, or statistics off)")
    labels = [f"{short(v.run_id, 28)} · {t.mode_requested}" for v, t in rows]
    exp = [t.expected_top1_rate for _, t in rows]
    band = [t.expected_band_95 or (e, e) for (_, t), e in zip(rows, exp)]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=exp, name="expected (honest sampling)", marker_color="#9ecae1",
                         error_y={"type": "data", "symmetric": False,
                                  "array": [b[1] - e for b, e in zip(band, exp)],
                                  "arrayminus": [e - b[0] for b, e in zip(band, exp)]}))
    fig.add_trace(go.Bar(x=labels, y=[t.observed_top1_rate for _, t in rows], name="observed",
                         marker_color=["#d62728" if t.flagged else "#3182bd" for _, t in rows]))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="committed token == target argmax", range=[0, 1.05])
    return styled(fig, "Sampling truth: observed vs expected top-1 rate (95% band); red: FAIL "
                       "(binomial tail p < 1e-9)")


def modes_rows(views: Sequence[Any]) -> list[dict[str, Any]]:
    """Requested vs effectively used sampling mode, request-steps."""
    rows = []
    for v in views:
        for t in v.section.sampling_truth:
            used = t.modes_used
            total = sum(used.values()) or 1
            rows.append({"run": v.label, "requested": t.mode_requested,
                         "used": ", ".join(f"{k}: {n} ({n / total:.0%})" for k, n in used.items()),
                         "positions": t.num_positions,
                         "observed": _r(t.observed_top1_rate), "expected": _r(t.expected_top1_rate),
                         "z": _z(t.z), "p": None if t.p_value is None else f"{t.p_value:.2g}",
                         "verdict": t.state_text or "n/a (greedy)"})
    return rows


def probe_rows(views: Sequence[Any]) -> list[dict[str, Any]]:
    """The selected runs that are ``specscope probe`` rounds: endpoint, verdict, what failed."""
    rows = []
    for v in views:
        pr = v.section.probe
        if not pr:
            continue
        rows.append({"run": v.label, "endpoint": pr.url, "log-probabilities": pr.logprobs,
                     "verdict": str(pr.verdict or "n/a").upper(),
                     "failed": "; ".join(message for _, message in pr.failed) or "none"})
    return rows


def fallbacks_over_time(views: Sequence[Any]) -> go.Figure:
    series = []
    for v in views:
        w = v.section.windows
        for reason in sorted({r for x in w for r in x.fallbacks}):
            series.append((f"{short(v.run_id, 28)} · {reason}", since_first(w),
                           [x.fallbacks.get(reason, 0) for x in w]))
    if not series:
        totals = {r: n for v in views for r, n in v.section.fallbacks.items()}
        return empty(f"fallbacks: {totals}" if totals else "no fallback events")
    fig = go.Figure()
    for i, (name, x, y) in enumerate(series):
        fig.add_trace(go.Bar(x=x, y=y, name=name, marker_color=COLORS[i % len(COLORS)]))
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="seconds since the run's first window")
    fig.update_yaxes(title_text="fallback events")
    return styled(fig, "Fallback events by reason over time")


def since_first(windows: Sequence[Any], run: Sequence[Any] | None = None) -> list[float]:
    """Seconds since the first window of ``run`` (all the run's windows; ``windows`` may be
    some of them, and every panel keeps the same zero); a source without times counts its
    windows instead."""
    run = windows if run is None else run
    if any(x.time is None for x in run):
        place = {id(x): float(i) for i, x in enumerate(run)}
        return [place[id(x)] for x in windows]
    return [x.time - run[0].time for x in windows] if run else []


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def _z(z: float | None) -> float | str | None:
    """A z-score for a table cell: infinities as text (the observed rate is impossible)."""
    if z is None or math.isfinite(z):
        return _r(z, 1)
    return "inf" if z > 0 else "-inf"
