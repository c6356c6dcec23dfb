"""Sweep: throughput per GPU vs interactivity per setting with its Pareto front (untrusted
points drawn hollow), and the config advisor."""

from __future__ import annotations

from dash import Input, Output, html

from ...collector.advisor import advise
from .. import ids
from ..figures import sweep as fig
from .common import card, render_table, graph, row, table, term

PATH = "/sweep"
TITLE = "Sweep"

#: what the page shows, per component, for the selected runs it applies to: "all", the
#: "speculative" ones, every "sweep" point, or "any" (data, whichever runs). The content
#: test (tests/dashboard/test_demo_pages.py) holds every page to it over make demo.
SHOWS = {ids.SWEEP_FIGURE: "any", ids.SWEEP_TABLE: "sweep", ids.ADVISOR_FIGURE: "any",
         ids.ADVISOR_TABLE: "any"}


def layout() -> html.Div:
    return html.Div([
        card(html.Span([term("throughput per GPU", "Throughput"), " vs ",
                        term("interactivity"), " (all runs with benchmark figures; the run "
                        "selector does not filter this page)"]), graph(ids.SWEEP_FIGURE)),
        card(html.Span(["Points and their ", term("eval gate")]), table(ids.SWEEP_TABLE, 30)),
        row(card("Config advisor (base: the first healthy selected run with phase timings)",
                 graph(ids.ADVISOR_FIGURE), html.P(id=ids.ADVISOR_NOTE, className="note"),
                 table(ids.ADVISOR_TABLE))),
    ])


def _workload(view) -> tuple:
    """What must match for two runs' costs to be comparable: the sweep labels but the setting."""
    labels = view.run.labels if view.run else {}
    return tuple(labels.get(k) for k in ("temperature", "concurrency", "input_len", "output_len"))


def _drafter(v) -> tuple:
    return v.run.algorithm, v.run.draft_model


def register(app, ctx) -> None:
    @app.callback(Output(ids.SWEEP_FIGURE, "figure"), Output(ids.SWEEP_TABLE, "children"), Output(ids.ADVISOR_FIGURE, "figure"),
                  Output(ids.ADVISOR_TABLE, "children"),
                  Output(ids.ADVISOR_NOTE, "children"),
                  Input(ids.RUNS, "value"), Input(ids.TICK, "n_intervals"))
    def update(selected, _tick):
        everything = ctx.views(None)
        points = fig.sweep_points(everything)
        rows = [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in p.items()}
                for p in points]
        chosen = [v for v in ctx.views(selected) if v.section.phases and v.run and v.run.num_steps]
        if not chosen:
            empty = fig.advisor_figure({"rows": []})
            return (fig.pareto_figure(points), render_table(rows), empty, render_table([]),
                    "Select a speculative run with phase timings.")
        # the base is a healthy run: no seeded fault, no active anomaly, its gate not failed
        healthy = [v for v in chosen if not v.run.fault and v.gate != "fail"
                   and not v.section.anomalies]
        base = (healthy or chosen)[0]
        # runs of the same model, drafter and workload at other depths, and without
        # speculation (k = 0): another drafter (prompt lookup beside a draft model) has
        # acceptance and costs of its own
        same = [v.section for v in everything if v.run and v.run.model == base.run.model
                and (not v.run.num_steps or (v.run.topk == 1 and _drafter(v) == _drafter(base)))
                and v.section.phases
                and not v.run.fault and _workload(v) == _workload(base)]
        advice = advise(base.section, same)
        arows = [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                 for r in advice["rows"]]
        err = ("no measured run at another depth to check against" if not advice["num_measured"]
               else f"mean absolute error on {advice['num_measured']} measured run(s): acceptance "
                    f"length {advice['mape_al_pct']:.1f}%, tokens/s "
                    f"{advice['mape_tok_s_pct'] or 0:.1f}%")
        note = (f"Base {base.label}. Verify cost model: {advice['verify_cost_model']}. {err}. "
                f"Model: {advice['model']}")
        return (fig.pareto_figure(points), render_table(rows), fig.advisor_figure(advice),
                render_table(arows), note)
