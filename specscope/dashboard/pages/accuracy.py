"""Accuracy table: benchmark scores per configuration with the gap to a reference column, from
the runs' own eval records and any accuracy file given to the dashboard (CSV or JSON)."""

from __future__ import annotations

from dash import Input, Output, dcc, html

from .. import ids
from ..figures import classes, runs
from .common import card, graph, render_table, table

PATH = "/accuracy"
TITLE = "Accuracy"

#: what the page shows, per component, for the selected runs it applies to: "all", the
#: "speculative" ones, every "sweep" point, or "any" (data, whichever runs). The content
#: test (tests/dashboard/test_demo_pages.py) holds every page to it over make demo.
SHOWS = {ids.ACCURACY_TABLE: "all", ids.ACCURACY_GATES: "all", ids.ACCURACY_DIVERGE: "any",
         ids.ACCURACY_WORST: "any"}


def layout() -> html.Div:
    return html.Div([
        card("Accuracy by configuration (gap to the reference column in points)",
             html.Label(["reference column ", dcc.Dropdown(id=ids.ACCURACY_REFERENCE,
                                                          clearable=True, style={"width": "420px"})]),
             table(ids.ACCURACY_TABLE, 40),
             html.P("Scores: the accuracy file's rows (configuration, benchmark, score), and "
                    "for each run its eval records: 'correct' (expected answer in the output), "
                    "'exact_match' (greedy output == target-only), 1 - 'invalid', 1 - 'repetition_loop' "
                    "(an output that repeats its own n-grams).",
                    className="note")),
        card("Eval gates: each selected run's checks (PASS only where the data could have "
             "failed)", table(ids.ACCURACY_GATES, 40)),
        card("Where greedy output first differs from target-only decoding (specscope diverge)",
             graph(ids.ACCURACY_DIVERGE), table(ids.ACCURACY_DIVERGE_TABLE, 40),
             html.H4("The worst diverging request of each run, its two outputs from the divergence on"),
             table(ids.ACCURACY_WORST, 10),
             html.P("Per diverging request: the first differing output index, the target-only "
                    "run's top-1 minus top-2 logit there, whether the committed token was its "
                    "second choice, and after it the LCS ratio of the two continuations and "
                    "the share of repeated 4-grams (a loop is near 1).", className="note")),
    ])


def scores(ctx, selected) -> dict[str, dict[str, float]]:
    out = {k: dict(v) for k, v in ctx.accuracy.items()}
    for v in ctx.views(selected):
        rates = v.section.eval_rates
        col = out.setdefault(v.label, {})
        for name, bench in (("correct", "prompt set: correct"),
                            ("exact_match", "prompt set: greedy exact match")):
            if rates.get(name) is not None:
                col[bench] = rates[name]
        if rates.get("invalid") is not None:
            col["prompt set: valid format"] = 1 - rates["invalid"]
        if rates.get("repetition_loop") is not None:
            col["prompt set: no repetition loop"] = 1 - rates["repetition_loop"]
    return {k: v for k, v in out.items() if v}


def gate_rows(ctx, selected) -> list[dict[str, str]]:
    """One row per selected run: its gate's verdict and every check with its state and value."""
    rows = []
    for v in ctx.views(selected):
        checks = v.section.gate_checks
        rows.append({"run": v.label,
                     "gate": v.section.gate_text if v.section.gate is not None else "no checks",
                     "checks": "; ".join(
                         f"{c.check}: {str(c.state).upper()}"
                         + (f" ({c.value:.3f})" if isinstance(c.value, float) else "")
                         for c in checks) or "—"})
    return rows


def register(app, ctx) -> None:
    @app.callback(Output(ids.ACCURACY_TABLE, "children"),
                  Output(ids.ACCURACY_REFERENCE, "options"), Output(ids.ACCURACY_GATES, "children"),
                  Input(ids.RUNS, "value"), Input(ids.ACCURACY_REFERENCE, "value"))
    def update(selected, reference):
        table_scores = scores(ctx, selected)
        rows = runs.accuracy_rows(table_scores, reference)
        return (render_table(rows), [{"label": k, "value": k} for k in table_scores],
                render_table(gate_rows(ctx, selected)))

    @app.callback(Output(ids.ACCURACY_DIVERGE, "figure"), Output(ids.ACCURACY_DIVERGE_TABLE, "children"),
                  Output(ids.ACCURACY_WORST, "children"), Input(ids.RUNS, "value"))
    def diverging(selected):
        views = ctx.views(selected)
        worst = classes.worst_rows(views)
        return (classes.divergence_figure(views), render_table(classes.divergence_rows(views)),
                render_table(worst) if worst else html.P("no greedy request diverged from "
                                                         "target-only decoding", className="note"))
