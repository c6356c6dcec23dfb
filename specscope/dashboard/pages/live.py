"""Live overview: acceptance over time, per position, accept-length histogram, throughput,
latency percentiles (the anomaly banner sits above every page)."""

from __future__ import annotations

from dash import Input, Output, html

from .. import ids
from ..figures import live as fig
from .common import card, render_table, graph, row, table, term

PATH = "/"
TITLE = "Live overview"

#: what the page shows, per component, for the selected runs it applies to: "all", the
#: "speculative" ones, every "sweep" point, or "any" (data, whichever runs). The content
#: test (tests/dashboard/test_demo_pages.py) holds every page to it over make demo.
SHOWS = {ids.LIVE_ACCEPTANCE: "speculative", ids.LIVE_POSITION: "speculative",
         ids.LIVE_HIST: "speculative", ids.LIVE_THROUGHPUT: "all", ids.LIVE_LATENCY: "all"}


def layout() -> html.Div:
    return html.Div([
        row(card(term("acceptance length", "Acceptance over time"), graph(ids.LIVE_ACCEPTANCE),
                 width="60%"),
            card(term("per-position acceptance", "Per-position acceptance"),
                 graph(ids.LIVE_POSITION), width="40%")),
        row(card(term("acceptance length", "Accept-length histogram"), graph(ids.LIVE_HIST),
                 width="40%"),
            card("Throughput (accepted + bonus tokens, verify steps and steps with speculation off)",
                 graph(ids.LIVE_THROUGHPUT), width="60%")),
        card(html.Span(["Latency percentiles (ms): ", term("TTFT"), ", ", term("TPOT"), ", ",
                        term("ITL/chunk"), ", ", term("ITL/token")]), table(ids.LIVE_LATENCY)),
    ])


def register(app, ctx) -> None:
    @app.callback(Output(ids.LIVE_ACCEPTANCE, "figure"), Output(ids.LIVE_POSITION, "figure"),
                  Output(ids.LIVE_HIST, "figure"), Output(ids.LIVE_THROUGHPUT, "figure"),
                  Output(ids.LIVE_LATENCY, "children"),
                  Input(ids.RUNS, "value"), Input(ids.TICK, "n_intervals"))
    def update(selected, _tick):
        views = ctx.views(selected)
        rows = fig.latency_rows(views)
        return (fig.acceptance_over_time(views), fig.per_position(views),
                fig.accept_length_hist(views), fig.throughput_over_time(views),
                render_table(rows))
