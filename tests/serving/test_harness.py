"""The server harness: a port taken before the server could bind it is a restart on another
port, never a five-minute wait for /health (SGLang's HTTP server binds last, after its workers
have taken ports of their own, and then hangs instead of exiting). Each start reads its own part
of the log: the server prints its port in its arguments, and an earlier start's failure must not
make every later start look failed too."""

from __future__ import annotations

import socket
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from specscope.serving.harness import ServerProcess, free_port, port_taken

#: binds its port and answers /health; where the port is taken it says so as uvicorn does and
#: hangs, as SGLang's launcher does
SERVER = """
import http.server, socket, sys, time
port = int(sys.argv[1])
print(f"server_args=ServerArgs(host='127.0.0.1', port={port})", flush=True)
if len(sys.argv) > 2:  # a bind failure the server survives, as torch's store warns of one
    print(f"[W socket.cpp:759] The server socket has failed to bind to [::]:{sys.argv[2]} "
          "(errno: 98 - Address already in use).", flush=True)
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
    other_port_warned: int | None = None

    def command(self) -> list[str]:
        warned = [] if self.other_port_warned is None else [str(self.other_port_warned)]
        return [sys.executable, "-c", SERVER, str(self.port), *warned]


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


def test_a_bind_failure_the_server_survives_is_not_a_taken_port(tmp_path: Path):
    """A failed bind on another port, printed while the server goes on (torch's store falls back
    to the other address family), leaves the server on the port it was given."""
    srv = Hanging(log=tmp_path / "server.log", other_port_warned=free_port())
    given = srv.port
    with srv:
        assert srv.port == given
        with urllib.request.urlopen(srv.url + "/health", timeout=5) as r:
            assert r.status == 200


def test_which_log_lines_say_the_port_was_taken():
    ours = ("ERROR:    [Errno 98] error while attempting to bind on address "
            "('127.0.0.1', 33101): address already in use")
    assert port_taken(f"server_args=ServerArgs(port=33101)\n{ours}", 33101, exited=False)
    assert not port_taken(ours, 3310, exited=False)  # another port's number inside ours
    other = ("The server socket has failed to bind to [::]:33811 "
             "(errno: 98 - Address already in use).")
    assert not port_taken(f"port=33101\n{other}", 33101, exited=False)
    assert port_taken(f"port=33101\n{other}", 33101, exited=True)  # it died of a port of its own
    assert not port_taken("port=33101\nTraceback: CUDA not found", 33101, exited=True)
    assert port_taken("couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080",
                      8080, exited=False)
