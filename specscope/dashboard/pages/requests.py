"""Requests: acceptance length per request (request- and token-weighted means), the outliers
with their evidence, one request's verify steps on selection, and acceptance by context
length."""

from __future__ import annotations

from dash import Input, Output, dcc, html

from ...collector.requests import request_rows
from .. import ids
from ..figures import classes
from ..figures import requests as figs
from .common import card, graph, render_table, table

PATH = "/requests"
TITLE = "Requests"

#: what the page shows, per component, for the selected runs it applies to: "all", the
#: "speculative" ones, every "sweep" point, or "any" (data, whichever runs). The content
#: test (tests/dashboard/test_demo_pages.py) holds every page to it over make demo.
SHOWS = {ids.REQUESTS_FIGURE: "any", ids.REQUESTS_TABLE: "speculative",
         ids.REQUESTS_TIMELINE: "any", ids.REQUESTS_CONTEXT: "speculative"}


def layout() -> html.Div:
    return html.Div([
        card("Acceptance length per request", graph(ids.REQUESTS_FIGURE)),
        card("One request's verify steps: accepted drafts and k per step",
             dcc.Dropdown(id=ids.REQUESTS_PICK, options=[], placeholder="pick a request (flagged first)"),
             graph(ids.REQUESTS_TIMELINE)),
        card("Requests, flagged first (pinned near k+1 with repetition, or near 1)",
             table(ids.REQUESTS_TABLE, 40)),
        card("Acceptance by context length at the step", graph(ids.REQUESTS_CONTEXT)),
    ])


def _rows(ctx, selected):
    out = []
    for v in ctx.views(selected):
        if v.records is not None:
            out += [r for r in request_rows(v.records) if r.run_id == v.run_id]
    return out


def register(app, ctx) -> None:
    @app.callback(Output(ids.REQUESTS_FIGURE, "figure"), Output(ids.REQUESTS_TABLE, "children"),
                  Output(ids.REQUESTS_PICK, "options"), Output(ids.REQUESTS_PICK, "value"),
                  Input(ids.RUNS, "value"))
    def update(selected):
        rows = _rows(ctx, selected)
        table_rows = figs.request_rows(rows)
        options = [{"label": f"{r['request']} ({r['run']}) AL {r['acceptance length']}"
                    + (" ⚑" if r["flags"] != "—" else ""), "value": f"{r['run']}\x00{r['request']}"}
                   for r in table_rows[:500]]
        return (figs.distribution_figure(rows), render_table(table_rows),
                options, options[0]["value"] if options else None)

    @app.callback(Output(ids.REQUESTS_TIMELINE, "figure"), Input(ids.REQUESTS_PICK, "value"),
                  Input(ids.RUNS, "value"))
    def timeline(value, selected):
        if not value:
            return figs.figures.empty("pick a request")
        run_id, request_id = value.split("\x00", 1)
        for v in ctx.views(selected):
            if v.run_id == run_id and v.records is not None:
                return figs.timeline_figure(v.records, run_id, request_id)
        return figs.figures.empty("its records were not kept")

    @app.callback(Output(ids.REQUESTS_CONTEXT, "figure"), Input(ids.RUNS, "value"))
    def by_context(selected):
        return classes.context_figure(ctx.views(selected))
