"""Regression: the selected runs in commit/time order, each against the last good run before it;
the first bad run is marked; and acceptance that ages with uptime, restarts marked."""

from __future__ import annotations

from dash import Input, Output, html

from ...collector.compare import regression_series
from ...collector.uptime import uptime_runs
from .. import ids
from ..figures import runs
from .common import card, render_table, graph, table, term

PATH = "/regression"
TITLE = "Regression"

#: what the page shows, per component, for the selected runs it applies to: "all", the
#: "speculative" ones, every "sweep" point, or "any" (data, whichever runs). The content
#: test (tests/dashboard/test_demo_pages.py) holds every page to it over make demo.
SHOWS = {ids.REGRESSION_FIGURE: "any", ids.REGRESSION_TABLE: "all", ids.UPTIME_FIGURE: "any"}


def layout() -> html.Div:
    return html.Div([
        card("Run series (ordered by commit label, then start time)", graph(ids.REGRESSION_FIGURE)),
        card(html.Span(["The cross-run table: verdict per run against the last good one (",
                        term("eval gate"), ", detectors, ", term("Δ% CI"), ")"]),
             table(ids.REGRESSION_TABLE, 40)),
        card("Acceptance by uptime: a run's acceptance that falls between restarts is an engine "
             "that ages (report --by uptime tests it per class and position)",
             graph(ids.UPTIME_FIGURE)),
    ])


def register(app, ctx) -> None:
    @app.callback(Output(ids.UPTIME_FIGURE, "figure"), Input(ids.RUNS, "value"),
                  Input(ids.TICK, "n_intervals"))
    def uptime(selected, _tick):
        views = [v for v in ctx.views(selected) if v.records]
        return runs.uptime_figure([(v.label, u) for v in views
                                   for u in uptime_runs(v.records, judged=False)])

    @app.callback(Output(ids.REGRESSION_FIGURE, "figure"), Output(ids.REGRESSION_TABLE, "children"), Input(ids.RUNS, "value"))
    def update(selected):
        views = [v for v in ctx.views(selected) if v.sample() is not None]
        views.sort(key=lambda v: (v.run.labels.get("commit_time", "") if v.run else "",
                                  v.run.started_ns if v.run else 0))
        series = regression_series([v.sample() for v in views], n_boot=ctx.n_boot // 2)
        rows = runs.regression_rows(series)
        return runs.regression_figure(series), render_table(rows)
