"""Profile: phase time per step (draft, verify, sampling, extend), time per committed token,
draft overhead share; the selected runs' phases as a Chrome/Perfetto trace download."""

from __future__ import annotations

from dash import Input, Output, State, dcc, html, no_update

from ...exporters.chrome import chrome_trace_json
from .. import ids
from ..figures import runs
from .common import card, render_table, graph, table, term

PATH = "/profile"
TITLE = "Profile"

#: what the page shows, per component, for the selected runs it applies to: "all", the
#: "speculative" ones, every "sweep" point, or "any" (data, whichever runs). The content
#: test (tests/dashboard/test_demo_pages.py) holds every page to it over make demo.
SHOWS = {ids.PROFILE_FIGURE: "all", ids.PROFILE_TABLE: "all"}


def layout() -> html.Div:
    return html.Div([
        card("Phase time per verify step", graph(ids.PROFILE_FIGURE)),
        card(html.Span([term("time per committed token"), " and ", term("draft overhead share")]),
             table(ids.PROFILE_TABLE),
             html.Button("Download Chrome/Perfetto trace of the selected runs",
                         id=ids.PROFILE_BUTTON), dcc.Download(id=ids.PROFILE_DOWNLOAD)),
    ])


def register(app, ctx) -> None:
    @app.callback(Output(ids.PROFILE_FIGURE, "figure"), Output(ids.PROFILE_TABLE, "children"), Input(ids.RUNS, "value"),
                  Input(ids.TICK, "n_intervals"))
    def update(selected, _tick):
        views = ctx.views(selected)
        rows = runs.profile_rows(views)
        return runs.profile_figure(views), render_table(rows)

    @app.callback(Output(ids.PROFILE_DOWNLOAD, "data"), Input(ids.PROFILE_BUTTON, "n_clicks"),
                  State(ids.RUNS, "value"), prevent_initial_call=True)
    def download(_clicks, selected):
        records = [r for v in ctx.views(selected) for r in (v.records or [])]
        if not records:  # a live source keeps aggregates, not phase records
            return no_update
        return {"content": chrome_trace_json(records), "filename": "specscope-phases.json",
                "type": "application/json"}
