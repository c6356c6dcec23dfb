"""The Dash application: ``create_app(source)`` with explicitly registered pages.

Data stays server-side (the source object); callbacks are thin shells over the figure
functions. ``run_dashboard`` serves it on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import base64
import hmac
from dataclasses import dataclass, field
from typing import Any, Sequence

from dash import Dash, Input, Output, State, callback_context, dcc, html, no_update

from . import ids
from .data import PathNotAllowed, RunView
from .pages import PAGES

CSS = """
body { font-family: -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 0; background: #f5f6f8; }
.header { background: #1d2733; color: white; padding: 10px 20px; }
.header a { color: #cfe3ff; margin-right: 16px; text-decoration: none; font-weight: 500; }
.header a:hover { text-decoration: underline; }
.header h2 { margin: 0 0 6px 0; font-size: 20px; }
.content { padding: 12px 20px; }
.row { display: flex; gap: 12px; }
.card { background: white; border-radius: 6px; padding: 10px 14px; margin-bottom: 12px;
        box-shadow: 0 1px 2px rgba(0,0,0,.1); box-sizing: border-box; }
.card-title { margin: 0 0 6px 0; font-size: 15px; }
.term { border-bottom: 1px dotted #555; cursor: help; }
.note { color: #555; font-size: 13px; }
.banner { background: #b71c1c; color: white; padding: 8px 20px; }
.banner.ok { background: #2e7d32; }
.banner.unsure { background: #8d6e00; }
.banner li { margin: 2px 0; }
.selector { color: #111; margin-top: 8px; }
.table { border-collapse: collapse; font-size: 13px; width: 100%; }
.table th, .table td { border-bottom: 1px solid #e3e3e3; padding: 4px 8px; text-align: left; }
.table th { background: #fafafa; }
.table tr.bad td { background: #fde0dd; }
.table tr.unsure td { background: #fff3c4; }
.table-wrap { overflow-x: auto; }
"""


@dataclass
class Context:
    """What callbacks share: the source, the bootstrap size, accuracy scores."""

    source: Any
    n_boot: int = 1000
    accuracy: dict[str, dict[str, float]] = field(default_factory=dict)

    def all_views(self) -> list[RunView]:
        return self.source.runs()

    def views(self, selected: Sequence[str] | None) -> list[RunView]:
        views = self.all_views()
        if selected is None:
            return views
        by_id = {v.run_id: v for v in views}
        return [by_id[s] for s in selected if s in by_id]


def selection_from_search(search: str | None) -> list[str]:
    """The runs a URL's query string names (``?run=A&run=B``), in order."""
    from urllib.parse import parse_qs

    return parse_qs((search or "").lstrip("?")).get("run", [])


def search_for_selection(runs: Sequence[str]) -> str:
    """The query string that names ``runs``."""
    from urllib.parse import urlencode

    return "?" + urlencode([("run", r) for r in runs]) if runs else ""


def _banner(views: Sequence[RunView]) -> Any:
    """Active anomalies (red), else the eval gates that could not tell yet (amber), else green.
    Every gate state is named: PASS only where the data rule the fault out."""
    from .figures.live import anomalies

    found = anomalies(views)
    if not views:
        return html.Div("no runs yet", className="banner ok")
    gates = [html.Li([html.B(v.section.gate_text), f" eval gate of {v.label}"]) for v in views
             if v.gate in ("fail", "inconclusive")]
    if not found and not gates:
        passed = sum(v.gate == "pass" for v in views)
        return html.Div(f"no active anomalies in the {len(views)} selected run(s); eval gate "
                        f"PASS in {passed}, nothing to check in {len(views) - passed}",
                        className="banner ok", id="banner-ok")
    if not found:
        return html.Div([html.B("no active anomalies, but too little data to pass"),
                         html.Ul(gates, style={"margin": "4px 0"})],
                        className="banner unsure", id="banner-inconclusive")
    items = []
    for a in found:  # the message is the sentence; the evidence a table, folded
        rows = [html.Tr([html.Td(k.replace("_", " ")),
                         html.Td(f"{v:.4g}" if isinstance(v, float) else str(v))])
                for k, v in a["evidence"].items()]
        details = html.Details([html.Summary("evidence"), html.Table(rows, className="ev")],
                               style={"display": "inline-block", "marginLeft": "6px"}) \
            if rows else ""
        items.append(html.Li([html.B(f"{a['kind']} ({a['severity']})"), f" in {a['run']}: ",
                              a["message"], details]))
    return html.Div([html.B(f"{len(found)} active anomal{'y' if len(found) == 1 else 'ies'}"),
                     html.Ul(items + gates, style={"margin": "4px 0"})], className="banner",
                    id="banner-anomalies")


def create_app(source: Any, *, title: str = "specscope", refresh_s: float = 2.0,
               n_boot: int = 1000, accuracy: dict[str, dict[str, float]] | None = None,
               basic_auth: tuple[str, str] | None = None, max_selected: int = 6) -> Dash:
    """The dashboard over ``source`` (TraceSource, LiveSource or MetricsSource)."""
    ctx = Context(source, n_boot, accuracy or {})
    app = Dash(__name__, title=title, suppress_callback_exceptions=True,
               update_title=None, serve_locally=True)
    app.index_string = app.index_string.replace("{%css%}", "{%css%}<style>" + CSS + "</style>")
    live = getattr(source, "kind", "") in ("live", "metrics")
    nav = [dcc.Link(p.TITLE, href=p.PATH, id=f"nav-{p.__name__.rsplit('.', 1)[1]}") for p in PAGES]
    opener = [] if getattr(source, "kind", "") != "traces" else [html.Div([
        dcc.Input(id=ids.OPEN_PATH, placeholder="open a trace under the trace directories",
                  style={"width": "380px"}),
        html.Button("open", id=ids.OPEN_BUTTON),
        html.Span(id=ids.OPEN_STATUS, style={"marginLeft": "8px"})], className="selector")]
    # an engine's data-parallel ranks: each its own run, or summed per model
    ranks = [] if not hasattr(source, "sum_ranks") else [html.Div([
        html.Span("data-parallel ranks: ", style={"color": "#cfd8dc"}),
        dcc.RadioItems(id=ids.RANKS, value="summed" if source.sum_ranks else "apart", inline=True,
                       options=[{"label": " apart ", "value": "apart"},
                                {"label": " summed per model", "value": "summed"}],
                       style={"display": "inline-block"})], className="selector")]
    app.layout = html.Div([
        dcc.Location(id=ids.URL, refresh="callback-nav"),
        dcc.Interval(id=ids.TICK, interval=int(refresh_s * 1000), disabled=not live),
        html.Div([html.H2(title), html.Nav(nav),
                  html.Div(dcc.Dropdown(id=ids.RUNS, multi=True, placeholder="select runs"),
                           className="selector"),
                  html.Div(dcc.Dropdown(id=ids.NODES, multi=True, options=[],
                                        placeholder="all nodes (runs pooled across nodes)"),
                           className="selector", id="node-selector"),
                  *opener, *ranks, html.Div(id=ids.SOURCE_INFO, className="note",
                                    style={"color": "#cfd8dc"})], className="header"),
        html.Div(id=ids.BANNER),
        html.Div(id=ids.PAGE, className="content"),
    ])
    layouts = {p.PATH: p.layout for p in PAGES}

    @app.callback(Output(ids.PAGE, "children"), Input(ids.URL, "pathname"))
    def route(path):
        page = layouts.get(path or "/")
        return page() if page else html.Div(f"no page at {path}", className="card")

    inputs = [Input(ids.TICK, "n_intervals"), Input(ids.URL, "search"), Input(ids.RUNS, "value"),
              Input(ids.NODES, "value")]
    if opener:
        inputs.append(Input(ids.OPEN_STATUS, "children"))
    if ranks:
        inputs.append(Input(ids.RANKS, "value"))

    @app.callback(Output(ids.RUNS, "options"), Output(ids.RUNS, "value"),
                  Output(ids.SOURCE_INFO, "children"), Output(ids.URL, "search"),
                  Output(ids.NODES, "options"), *inputs)
    def runs(_tick, search, value, nodes, *extra):
        if ranks:
            source.sum_ranks = extra[-1] == "summed"
        # the selection lives in the URL (?run=A&run=B), so a link reproduces the view: a URL
        # that names runs wins when it changes; a change of the selector rewrites the URL
        views = ctx.all_views()
        node_options = [{"label": n, "value": n} for n in sorted({v.node for v in views if v.node})]
        if nodes:  # a fleet's runs on the nodes picked; none picked: every run, pooled first
            views = [v for v in views if v.node in nodes]
        options = [{"label": v.label, "value": v.run_id} for v in views]
        known = {o["value"] for o in options}
        from_url = selection_from_search(search)
        trigger = callback_context.triggered_id
        if trigger in (ids.URL, None) and from_url:
            value = from_url
        value = [v for v in (value or []) if v in known]
        if trigger == ids.NODES:
            value = []
        if not value and trigger != ids.RUNS:  # the user's own empty selection stays empty
            preferred = [r for r in getattr(source, "default_runs", list)() if r in known]
            if not preferred and not nodes and any(v.node for v in views):
                preferred = [v.run_id for v in views if not v.node]  # pooled across nodes
            value = [o["value"] for o in options
                     if o["value"] in preferred or not preferred][:max_selected]
        problems = getattr(source, "problems", [])
        info = f"{len(views)} run(s) from {getattr(source, 'kind', 'source')}" + (
            f"; {len(problems)} unreadable line(s) skipped, first: {problems[0]}" if problems else "")
        wanted = search_for_selection(value) if known else no_update
        return (options, value, info, (no_update if wanted == (search or "") else wanted),
                node_options)

    @app.callback(Output(ids.BANNER, "children"), Input(ids.RUNS, "value"),
                  Input(ids.TICK, "n_intervals"))
    def banner(selected, _tick):
        return _banner(ctx.views(selected))

    if opener:
        @app.callback(Output(ids.OPEN_STATUS, "children"), Input(ids.OPEN_BUTTON, "n_clicks"),
                      State(ids.OPEN_PATH, "value"), prevent_initial_call=True)
        def open_trace(_n, path):
            try:
                source.open(path or "")
            except (PathNotAllowed, FileNotFoundError) as exc:
                return f"refused: {exc}"
            return f"opened {path}"

    for page in PAGES:
        page.register(app, ctx)
    if basic_auth:
        _require_auth(app, *basic_auth)
    return app


def _require_auth(app: Dash, user: str, password: str) -> None:
    from flask import Response, request

    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    @app.server.before_request
    def check():
        if not hmac.compare_digest(request.headers.get("Authorization", ""), expected):
            return Response("authentication required", 401,
                            {"WWW-Authenticate": 'Basic realm="specscope"'})
        return None


def serve(app: Dash, host: str = "127.0.0.1", port: int = 8050):
    """A werkzeug server for ``app`` in a thread; returns it (``shutdown()`` stops it)."""
    import logging
    import threading

    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server(host, port, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, name="specscope-dashboard", daemon=True).start()
    return server


def run_dashboard(source: Any, *, host: str = "127.0.0.1", port: int = 8050,
                  **kw: Any) -> int:
    """Serve until Ctrl-C; prints the URL."""
    import signal
    import threading

    app = create_app(source, **kw)
    server = serve(app, host, port)
    print(f"dashboard at http://{host}:{server.server_port}/", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    return 0


__all__ = ["create_app", "run_dashboard", "serve"]
