"""Figures over a run's verify steps split another way: sampling truth by batch-size class
(collector/batches.py) and acceptance by context length (collector/context.py). Both need the
run's records (a trace source keeps them; a live source does not)."""

from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go

from . import COLORS, empty, short, styled


def _records(views: Sequence[Any]) -> list[tuple[Any, list]]:
    return [(v, v.records) for v in views if v.records]


def batch_truth_figure(views: Sequence[Any]) -> go.Figure:
    """Per run, requested mode and batch-size class: observed minus expected rate of
    committed == target argmax (percentage points); greedy requests' exact match against
    target-only minus 100% beside them; a FAIL in red."""
    from ...collector.batches import batch_classes

    fig = go.Figure()
    for i, (v, records) in enumerate(_records(views)):
        classes = [c for c in batch_classes(records) if c.run_id == v.run_id]
        by_mode: dict[str, list[tuple[str, float, str]]] = {}
        for c in classes:
            for a in c.checks:
                obs, exp = a.evidence.get("observed_top1_rate"), a.evidence.get("expected_top1_rate")
                if a.check.startswith("sampling truth") and obs is not None and exp is not None:
                    mode = a.evidence.get("mode_requested", a.check)
                    by_mode.setdefault(mode, []).append((f"batch {c.label}", (obs - exp) * 100, a.state))
                elif a.evidence.get("exact_match") is not None:
                    by_mode.setdefault("exact match", []).append(
                        (f"batch {c.label}", (a.evidence["exact_match"] - 1) * 100, a.state))
        for mode, points in by_mode.items():
            fig.add_trace(go.Bar(
                x=[p[0] for p in points], y=[p[1] for p in points], name=f"{short(v.label)} · {mode}",
                marker_color=["#d62728" if p[2] == "fail" else COLORS[i % len(COLORS)] for p in points],
                hovertext=[p[2].upper() for p in points]))
    if not fig.data:
        return empty("no sampling-truth statistics by batch size (greedy only, statistics off, "
                     "or a live source without records)")
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="observed - expected (points)")
    return styled(fig, "Sampling truth and exact match by batch-size class (requests verifying "
                       "together; top-1 rate, exact match vs 100%); red: FAIL in that class")


def context_figure(views: Sequence[Any]) -> go.Figure:
    """Per run, acceptance length by context length at the step, with the bootstrap 95%
    interval over requests; hover gives the requests and prompts per bucket."""
    from ...collector.context import context_buckets

    fig = go.Figure()
    for i, (v, records) in enumerate(_records(views)):
        known = [(b, b.acceptance_length) for b in context_buckets(records)
                 if b.run_id == v.run_id and b.acceptance_length is not None]
        if not known:
            continue
        buckets = [b for b, _ in known]
        fig.add_trace(go.Scatter(
            x=[f"{b.lo}-{b.hi - 1}" for b in buckets], y=[al for _, al in known],
            mode="lines+markers", name=short(v.label), line={"color": COLORS[i % len(COLORS)]},
            error_y={"type": "data", "symmetric": False,
                     "array": [(b.ci[1] - al) if b.ci else 0 for b, al in known],
                     "arrayminus": [(al - b.ci[0]) if b.ci else 0 for b, al in known]},
            hovertext=[f"{b.requests} requests, {b.prompts} prompts, {b.request_steps} request-steps"
                       for b in buckets]))
    if not fig.data:
        return empty("no verify steps with a known context (a live source keeps no records)")
    fig.update_xaxes(title_text="context at the step (prompt + tokens so far)", type="category")
    fig.update_yaxes(title_text="acceptance length (bonus incl.)")
    return styled(fig, "Acceptance by context length (95% bootstrap interval over requests)")


def divergences(views: Sequence[Any]) -> list[tuple[Any, Any]]:
    """(view, DivergeResult) for each speculative view with greedy requests: against its own
    reference run where the trace has one, else the first selected target-only run."""
    from ...collector.diverge import diverge

    base = next((v.records for v in views if v.records and v.run is not None
                 and not v.run.num_steps), None)
    out = []
    for v, records in _records(views):
        if v.run is None or not v.run.num_steps:
            continue
        found = diverge(records, run_id=v.run_id)
        if not (found and found[0].pairs) and base is not None:
            found = diverge(records, base, run_id=v.run_id)
        if found and found[0].pairs:
            out.append((v, found[0]))
    return out


def worst_rows(views: Sequence[Any]) -> list[dict[str, Any]]:
    """Per run, its worst diverging request (structural first, then the lowest LCS after it):
    the shared text before the divergence, then this run's and the reference's continuations
    side by side (token ids where the records carry no text)."""
    from ...collector.diverge import side_by_side, worst

    from ... import schema

    pool = [r for _, records in _records(views) for r in records if isinstance(r, schema.RequestRecord)]
    rows = []
    for v, res in divergences(views):
        p = worst(res)
        if p is None or p.first_index is None:  # worst() gives a diverged pair: it has one
            continue
        key = p.prompt_id or p.request_id
        req = next((r for r in pool if r.run_id == v.run_id and r.request_id == p.request_id), None)
        ref = next((r for r in pool if r.run_id == res.reference_id
                    and (r.prompt_id or r.request_id) == key and r.temperature == 0), None)
        if req is None or ref is None:
            continue
        lead, mine, theirs = side_by_side(req, ref, p.first_index)
        rows.append({"run": v.label, "request": f"{p.request_id} ({p.verdict}, token {p.first_index})",
                     "before the divergence": lead, "this run": mine, "target-only": theirs})
    return rows


def divergence_figure(views: Sequence[Any]) -> go.Figure:
    """Per run, its greedy requests: identical to target-only, diverging by a tie-flip, or
    diverging structurally (stacked)."""
    found = divergences(views)
    if not found:
        return empty("no greedy request with a target-only output to compare")
    fig = go.Figure()
    labels = [short(v.label) for v, _ in found]
    for verdict, color in (("identical", "#31a354"), ("tie-flip", "#fdae6b"),
                           ("structural", "#d62728"), ("unknown", "#bdbdbd")):
        counts = [sum(p.verdict == verdict for p in res.pairs) for _, res in found]
        if any(counts):
            fig.add_trace(go.Bar(x=labels, y=counts, name=verdict, marker_color=color))
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="greedy requests")
    return styled(fig, "Greedy output vs target-only decoding: identical, tie-flip (second "
                       "choice within the dtype's tie margin), structural")


def divergence_rows(views: Sequence[Any], limit: int = 40) -> list[dict[str, Any]]:
    """The diverging requests, structural first, earliest divergence first; a run none of
    whose greedy requests diverged is one row saying so."""
    rows = []
    found = divergences(views)
    for v, res in found:
        if not res.diverged:
            rows.append({"run": v.label, "request": f"all {len(res.pairs)} greedy requests",
                         "first index": None, "reference margin": None, "committed": "—",
                         "verdict": "identical", "LCS after": None, "repetition after": None,
                         "committed / reference token": "—"})
        for p in res.diverged:
            rows.append({"run": v.label, "request": p.request_id, "first index": p.first_index,
                         "reference margin": None if p.margin is None else round(p.margin, 4),
                         "committed": {1: "1st", 2: "2nd", None: ">2nd"}[p.rank],
                         "verdict": p.verdict,
                         "LCS after": None if p.lcs_ratio is None else round(p.lcs_ratio, 2),
                         "repetition after": None if p.repetition is None else round(p.repetition, 2),
                         "committed / reference token": f"{p.committed_token} / {p.reference_token}"})
    rows.sort(key=lambda r: (r["verdict"] != "structural", r["first index"] is None,
                             r["first index"] or 0))
    return rows[:limit]
