"""Sampling truth: requested vs effective mode, observed vs expected top-1 rate with its
interval, the same by batch-size class, the black-box probe's verdicts, fallback events by
reason over time."""

from __future__ import annotations

from dash import Input, Output, html

from .. import ids
from ..figures import classes
from ..figures import live as fig
from .common import card, render_table, graph, row, table, term

PATH = "/truth"
TITLE = "Sampling truth"

#: what the page shows, per component, for the selected runs it applies to: "all", the
#: "speculative" ones, every "sweep" point, or "any" (data, whichever runs). The content
#: test (tests/dashboard/test_demo_pages.py) holds every page to it over make demo.
SHOWS = {ids.TRUTH_FIGURE: "speculative", ids.TRUTH_MODES: "speculative", ids.TRUTH_BY_BATCH: "any"}


def layout() -> html.Div:
    return html.Div([
        card(term("sampling truth", "Is verify sampling what the requests asked for?"),
             graph(ids.TRUTH_FIGURE)),
        card("Requested vs effectively used mode (request-steps)", table(ids.TRUTH_MODES)),
        card("Black-box probe (specscope probe): each endpoint's verdict from its own "
             "log-probabilities", table(ids.TRUTH_PROBE)),
        card("By batch size: a fault confined to large batches is diluted in the run's figure",
             graph(ids.TRUTH_BY_BATCH)),
        row(card("Fallbacks", graph(ids.TRUTH_FALLBACKS))),
    ])


def register(app, ctx) -> None:
    @app.callback(Output(ids.TRUTH_FIGURE, "figure"), Output(ids.TRUTH_MODES, "children"), Output(ids.TRUTH_FALLBACKS, "figure"),
                  Input(ids.RUNS, "value"), Input(ids.TICK, "n_intervals"))
    def update(selected, _tick):
        views = ctx.views(selected)
        rows = fig.modes_rows(views)
        return fig.truth_figure(views), render_table(rows), fig.fallbacks_over_time(views)

    @app.callback(Output(ids.TRUTH_PROBE, "children"), Input(ids.RUNS, "value"))
    def probe(selected):
        rows = fig.probe_rows(ctx.views(selected))
        return render_table(rows) if rows else html.P(
            "No probe run selected: `specscope probe URL -o probe.jsonl` writes one.")

    @app.callback(Output(ids.TRUTH_BY_BATCH, "figure"), Input(ids.RUNS, "value"))
    def by_batch(selected):
        return classes.batch_truth_figure(ctx.views(selected))
