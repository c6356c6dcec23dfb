"""Layout helpers shared by the pages: cards, tables, definitions one hover away."""

from __future__ import annotations

from typing import Any, Sequence

from dash import dash_table, dcc, html

from ...collector.report import DEFINITIONS

EXTRA_DEFINITIONS = {
    "acceptance length": DEFINITIONS["mean_acceptance_length"],
    "acceptance rate": DEFINITIONS["acceptance_rate"],
    "per-position acceptance": DEFINITIONS["per_position_acceptance"],
    "TTFT": DEFINITIONS["ttft_s"], "TPOT": DEFINITIONS["tpot_s"],
    "ITL/chunk": DEFINITIONS["itl_chunk_s"], "ITL/token": DEFINITIONS["itl_token_s"],
    "sampling truth": "committed tokens equal to the target's argmax, observed vs expected "
                      "under the sampling each request asked for; far above: silent greedy",
    "interactivity": "tokens per second one user sees: median over requests of 1 / TPOT",
    "throughput per GPU": "output tokens per second of the whole run (one device here)",
    "eval gate": "greedy output == target-only output, no silent greedy, repetition and "
                 "invalid-output rates not significantly above target-only decoding",
    "Δ% CI": "95% bootstrap interval of the relative difference (requests resampled); "
             "'no significant difference' where it spans 0",
    "time per committed token": "all phase time / tokens committed (accepted + bonus)",
    "draft overhead share": "draft and draft-extend phase time / all phase time",
}


def term(name: str, label: str | None = None) -> html.Span:
    """A metric name whose definition shows on hover."""
    return html.Span(label or name, title=EXTRA_DEFINITIONS.get(name, DEFINITIONS.get(name, "")),
                     className="term")


def card(title: Any, *children: Any, width: str = "100%") -> html.Div:
    return html.Div([html.H4(title, className="card-title"), *children], className="card",
                    style={"width": width})


def graph(id_: str) -> dcc.Graph:
    return dcc.Graph(id=id_, config={"displaylogo": False}, figure={})


def table(id_: str, page_size: int = 20) -> dash_table.DataTable:
    return dash_table.DataTable(id=id_, data=[], columns=[], page_size=page_size,
                                style_table={"overflowX": "auto"},
                                style_cell={"fontFamily": "inherit", "fontSize": 13,
                                            "padding": "4px 8px", "textAlign": "left"},
                                style_header={"fontWeight": "bold"},
                                style_data_conditional=[
                                    {"if": {"filter_query": '{verdict} contains "worse" || '
                                            '{verdict} contains "BAD" || {verdict} = "fail"'},
                                     "backgroundColor": "#fde0dd"}])


def columns(rows: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"name": k, "id": k} for k in (rows[0].keys() if rows else [])]


def row(*children: Any) -> html.Div:
    return html.Div(children, className="row")
