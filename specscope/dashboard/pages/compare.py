"""Compare: two or more runs side by side, Δ% with a bootstrap interval per metric against the
first selected run; the category matrix (speedup per workload category over the first run, with
its interval on hover); per-position acceptance and latency CDFs overlaid."""

from __future__ import annotations

from dash import Input, Output, html

from ...collector.compare import compare
from ...collector.requests import category_rows
from .. import ids
from ..figures import live, requests, runs
from .common import card, render_table, graph, row, table, term

PATH = "/compare"
TITLE = "Compare"

#: what the page shows, per component, for the selected runs it applies to: "all", the
#: "speculative" ones, every "sweep" point, or "any" (data, whichever runs). The content
#: test (tests/dashboard/test_demo_pages.py) holds every page to it over make demo.
SHOWS = {ids.COMPARE_TABLE: "speculative", ids.COMPARE_POSITION: "speculative",
         ids.COMPARE_CDF_TTFT: "all", ids.COMPARE_CDF_TPOT: "all",
         ids.COMPARE_CATEGORIES: "speculative"}


def layout() -> html.Div:
    return html.Div([
        card(html.Span(["Speed table: B vs A (the first selected run), ", term("Δ% CI"), ", ",
                        term("eval gate")]), html.P(id=ids.COMPARE_NOTE, className="note"),
             table(ids.COMPARE_TABLE, page_size=40)),
        card(html.Span(["Category matrix: ", term("speedup"), " per workload category over the "
                        "first selected run (select the target-only run first)"]),
             graph(ids.COMPARE_CATEGORIES)),
        row(card("Per-position acceptance", graph(ids.COMPARE_POSITION), width="34%"),
            card(term("TTFT", "TTFT CDF"), graph(ids.COMPARE_CDF_TTFT), width="33%"),
            card(term("TPOT", "TPOT CDF"), graph(ids.COMPARE_CDF_TPOT), width="33%")),
    ])


def register(app, ctx) -> None:
    @app.callback(Output(ids.COMPARE_TABLE, "children"),
                  Output(ids.COMPARE_NOTE, "children"), Output(ids.COMPARE_POSITION, "figure"),
                  Output(ids.COMPARE_CDF_TTFT, "figure"), Output(ids.COMPARE_CDF_TPOT, "figure"),
                  Output(ids.COMPARE_CATEGORIES, "figure"), Input(ids.RUNS, "value"))
    def update(selected):
        views = ctx.views(selected)
        samples = [(v, v.sample()) for v in views]
        samples = [(v, s) for v, s in samples if s is not None]
        rows: list = []
        note = "Select two or more runs recorded as traces (per-request data is needed)."
        if len(samples) >= 2:
            (va, a) = samples[0]
            for vb, b in samples[1:]:
                rows += [{"run B": vb.run_id, **r}
                         for r in runs.compare_rows(compare(a, b, n_boot=ctx.n_boot))]
            note = (f"A = {va.label}; {len(samples) - 1} run(s) compared against it. "
                    f"{ctx.n_boot} bootstrap resamples of requests; throughput is one wall-clock "
                    "figure per run and gets no interval.")
        cdf_views = [s for _, s in samples]
        labels = [v.label for v, _ in samples]
        return (render_table(rows), note, live.per_position(views),
                runs.latency_cdf(cdf_views, labels, "ttft_s"),
                runs.latency_cdf(cdf_views, labels, "tpot_s"), _matrix(views, ctx.n_boot))


def _matrix(views, n_boot: int):
    """Each selected run's categories against the first selected run's requests."""
    own = [(v, [r for r in v.records if getattr(r, "run_id", v.run_id) == v.run_id])
           for v in views if v.records is not None]
    if not own:
        return requests.category_heatmap([])
    base = own[0][1] if len(own) > 1 else None
    cols = [(v.label, category_rows(recs, base, n_boot=n_boot)) for v, recs in own[1:] or own]
    return requests.category_heatmap(cols)
