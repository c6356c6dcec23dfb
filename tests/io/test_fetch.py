"""The one HTTP client outside an engine's process: a page, JSON, a post, health and the served
model, each failure one ``FetchError`` (an OSError) naming the URL."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specscope.io import fetch


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "m-1"}, {"id": "m-2"}]}).encode())
        elif self.path == "/health":
            self._send(200, b"")
        elif self.path == "/big":
            self._send(200, b"x" * 5000, "text/plain")
        elif self.path == "/accept":
            self._send(200, self.headers.get("Accept", "").encode(), "text/plain")
        else:
            self._send(503, b"busy", "text/plain")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self._send(200, json.dumps({"echo": body}).encode())


@pytest.fixture(scope="module")
def url():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_reads_json_posts_and_the_first_served_model(url):
    assert fetch.served_model(url + "/") == "m-1"
    assert fetch.post_json(url + "/x", {"a": [1, 2]})["echo"] == {"a": [1, 2]}
    assert fetch.healthy(url + "/health") and not fetch.healthy(url + "/nope")
    assert fetch.get_text(url + "/accept", headers={"Accept": "text/plain"}) == "text/plain"


def test_every_failure_is_one_oserror_naming_the_url(url):
    dead = _dead_url()
    with pytest.raises(fetch.FetchError, match="503") as err:
        fetch.get_json(url + "/nope")
    assert isinstance(err.value, OSError) and url + "/nope" in str(err.value)
    with pytest.raises(OSError, match=dead):
        fetch.get_text(dead + "/metrics", timeout_s=2)
    assert not fetch.healthy(dead + "/health", timeout_s=2)
    with pytest.raises(fetch.FetchError, match="larger than the cap of 100 bytes"):
        fetch.get_text(url + "/big", max_bytes=100)
    with fetch.client(timeout_s=2) as http:  # a reused client reads the same
        assert len(fetch.get_text(url + "/big", max_bytes=5000, client=http)) == 5000
        assert not http.is_closed


def test_redirects_are_followed_and_an_error_keeps_the_servers_words(url):
    class Hop(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path == "/old":
                self.send_response(302)
                self.send_header("Location", url + "/v1/models")
                self.send_header("content-length", "0")
                self.end_headers()
            else:
                body = b'{"error": {"message": "model not loaded"}}'
                self.send_response(404)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        do_POST = do_GET

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hop)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        hop = f"http://127.0.0.1:{srv.server_address[1]}"
        assert fetch.get_json(hop + "/old")["data"][0]["id"] == "m-1"
        with pytest.raises(fetch.FetchError) as err:
            fetch.post_json(hop + "/v1/chat/completions", {"model": "x"})
        assert err.value.why.startswith("HTTP 404 Not Found") and "model not loaded" in err.value.why
        with pytest.raises(fetch.FetchError, match="model not loaded"):  # a GET's words too
            fetch.served_model(hop)
    finally:
        srv.shutdown()
        srv.server_close()
