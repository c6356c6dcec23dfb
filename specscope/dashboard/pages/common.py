"""Layout helpers shared by the pages: cards, tables, definitions one hover away."""

from __future__ import annotations

from typing import Any, Sequence

from dash import dcc, html

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
    "speedup": "output tokens/s of a category's requests over the first selected run's on the "
               "same prompts (matched by prompt id); 95% bootstrap interval over matched prompts "
               "on hover",
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


def table(id_: str, page_size: int = 20) -> html.Div:
    """A placeholder that callbacks fill with ``render_table(rows)``."""
    return html.Div(id=id_, className="table-wrap")


BAD = ("worse", "BAD", "fail", "FAIL", "UNTRUSTED", "False")


def render_table(rows: Sequence[dict[str, Any]], limit: int = 500) -> Any:
    """Rows of dicts as an HTML table; rows whose verdict/gate says bad are tinted."""
    if not rows:
        return html.P("nothing to show for the selected runs", className="note")
    keys = list(rows[0].keys())
    body = []
    for r in rows[:limit]:
        bad = any(isinstance(r.get(k), str) and any(b in r[k] for b in BAD)
                  for k in ("verdict", "gate", "trusted")) or r.get("trusted") is False
        unsure = r.get("inconclusive") is True or any(
            isinstance(r.get(k), str) and "inconclusive" in r[k].lower() for k in ("verdict", "gate"))
        body.append(html.Tr([html.Td("" if r.get(k) is None else str(r.get(k))) for k in keys],
                            className="unsure" if unsure else "bad" if bad else None))
    note = [html.P(f"first {limit} of {len(rows)} rows", className="note")] if len(rows) > limit else []
    return html.Div([html.Table([html.Thead(html.Tr([html.Th(k) for k in keys])),
                                 html.Tbody(body)], className="table"), *note])


def row(*children: Any) -> html.Div:
    return html.Div(children, className="row")
