"""The server harness: a port taken before the server could bind it is a restart on another
port, never a five-minute wait for /health (SGLang's HTTP server binds last, after its workers
have taken ports of their own, and then hangs instead of exiting)."""

from __future__ import annotations

import socket
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from specscope.serving.harness import ServerProcess

#: binds its port and answers /health; where the port is taken it says so as uvicorn does and
#: hangs, as SGLang's launcher does
SERVER = """
import http.server, socket, sys, time
port = int(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
try:
    srv = http.server.HTTPServer(("127.0.0.1", port), H)
except OSError as e:
    print(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address "
          f"('127.0.0.1', {port}): address already in use", flush=True)
    time.sleep(3600)
print("serving", flush=True)
srv.serve_forever()
"""


@dataclass
class Hanging(ServerProcess):
    label = "hanging server"

    def command(self) -> list[str]:
        return [sys.executable, "-c", SERVER, str(self.port)]


def test_a_taken_port_starts_the_server_again_on_another(tmp_path: Path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        srv = Hanging(port=taken, log=tmp_path / "server.log")
        with srv:
            assert srv.port != taken
            with urllib.request.urlopen(srv.url + "/health", timeout=5) as r:
                assert r.status == 200
        log = srv.log.read_text()
        assert f"'127.0.0.1', {taken}): address already in use" in log and "serving" in log
        assert srv.proc is not None and srv.proc.poll() is not None  # stopped by its PID
