"""The /metrics endpoint: a small threaded HTTP server over a Collector. Stdlib only.

Binds 127.0.0.1 unless told otherwise; optional basic auth and TLS.
"""

from __future__ import annotations

import base64
import hmac
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .prometheus import render

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: a scraper that goes away mid-response: counted, never a traceback on the console
DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    disconnects = 0  #: responses a client did not wait for

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], DISCONNECTS):
            self.disconnects += 1
            return
        super().handle_error(request, client_address)


class MetricsServer:
    """Serves ``/metrics`` (Prometheus text) and ``/health`` for one collector (or any source
    of exposition text)."""

    def __init__(self, collector: Any, *, host: str = "127.0.0.1", port: int = 0,
                 basic_auth: tuple[str, str] | None = None,
                 tls: tuple[str, str] | None = None, text: Any = None) -> None:
        """``text``: a function returning the exposition text, for a source that renders its
        own (the probe's exporter); by default the collector's snapshot, rendered."""
        self.collector = collector
        self.text = text or (lambda: render(collector.snapshot()))
        expected = None
        if basic_auth:
            expected = "Basic " + base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode()).decode()
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if expected and not hmac.compare_digest(self.headers.get("Authorization", ""), expected):
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="specscope"')
                    self.end_headers()
                    return
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype = server_self.text().encode(), CONTENT_TYPE
                elif path == "/health":
                    body, ctype = b"ok\n", "text/plain"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                try:
                    self.end_headers()
                    self.wfile.write(body)
                except DISCONNECTS:
                    self.server.disconnects += 1  # type: ignore[attr-defined]  # a _Server
                    self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = _Server((host, port), Handler)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls[0], tls[1])
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self._thread: threading.Thread | None = None

    @property
    def disconnects(self) -> int:
        """Clients that went away before their response was written (counted, not logged)."""
        return self.httpd.disconnects

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        host = str(self.httpd.server_address[0])  # an IPv4/IPv6 server's: a str
        return f"{self.scheme}://{host}:{self.port}/metrics"

    def start(self) -> "MetricsServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="specscope-metrics",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
