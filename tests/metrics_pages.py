"""Engine /metrics pages served for tests: a real page whose spec-decode counters advance as
each test says, on 127.0.0.1, started and stopped by the test."""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from specscope.serving.harness import free_port

TOTAL = re.compile(r"^(vllm:spec_decode_\w+_total\{[^}]*\}) (\S+)$", re.M)


@contextlib.contextmanager
def serving(page_of):
    """A /metrics server on 127.0.0.1 whose n-th page (from 0) is ``page_of(n)``; its URL."""
    pages = itertools.count()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = page_of(next(pages)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/metrics"
    finally:
        srv.shutdown()
        srv.server_close()


def scaled(page: str, factor) -> str:
    """The page with every spec-decode counter times ``factor(name)``."""
    return TOTAL.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * factor(m.group(1))}", page)
