"""Start ``specscope serve-engine`` as its own process, drive it with a real benchmark client
(NVIDIA AIPerf, installed in a virtual environment of its own), and compare the two sides."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..io import fetch

AIPERF_VERSION = "0.13.0"
#: starts on a fresh port after the chosen one was taken before the server could bind it
PORT_TRIES = 3
#: what a server's log says when a port it binds is taken (uvicorn for vLLM, SGLang and
#: serve-engine; torch's stores; llama.cpp's own words), read lower-cased
BIND_FAILED = ("address already in use", "couldn't bind http server socket")


class PortTaken(Exception):
    """The server could not bind the port chosen for it."""


def port_taken(log_text: str, port: int, exited: bool) -> bool:
    """Whether ``log_text`` (one start's log) shows a bind that failed on a taken port: a line
    naming ``port`` while the server runs, any such line once it has exited."""
    failed = [line for line in log_text.lower().splitlines()
              if any(m in line for m in BIND_FAILED)]
    return bool(failed) and (exited or any(
        re.search(rf"(?<!\d){port}(?!\d)", line) for line in failed))


def read_from(path: Path, offset: int, most: int = 1 << 20) -> str:
    """The text of ``path`` from byte ``offset`` on (its last ``most`` bytes at most)."""
    with open(path, "rb") as f:
        f.seek(max(offset, path.stat().st_size - most))
        return f.read().decode("utf-8", "replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    """``specscope serve-engine ARGS`` on 127.0.0.1; stopped by its PID (SIGINT, then SIGKILL)."""

    args: list[str] = field(default_factory=list)
    trace: Path = Path("server.jsonl")
    port: int = field(default_factory=free_port)
    log: Path | None = None
    proc: subprocess.Popen | None = None
    _out: object = None
    _log_from: int = 0  #: where this start's part of the log begins
    label = "serve-engine"  #: what error messages call the server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "specscope", "serve-engine", *self.args, "--host",
                "127.0.0.1", "--port", str(self.port), "--trace", str(self.trace)]

    def start(self, timeout_s: float = 180.0, env: dict[str, str] | None = None,
              new_session: bool = False) -> "ServerProcess":
        """Start ``command()`` and wait for ``/health``. ``new_session``: the server and every
        process it spawns form one process group, which ``stop`` ends as a whole. A port taken
        between choosing it and the server's bind (the server's own workers take ports of
        their own while it starts; seen on a loaded machine) is not a failure of the server:
        its log says so, and it starts again on another port, at most ``PORT_TRIES`` times."""
        for attempt in range(PORT_TRIES):
            try:
                return self._start_once(timeout_s, env, new_session, append=attempt > 0)
            except PortTaken:
                self.port = free_port()
        raise RuntimeError(f"{self.label}: its port was taken {PORT_TRIES} times in a row"
                           + (f"; see {self.log}" if self.log else ""))

    def _start_once(self, timeout_s: float, env: dict[str, str] | None, new_session: bool,
                    append: bool) -> "ServerProcess":
        name = self.label
        self._out = open(self.log, "a" if append else "w") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self._log_from = self.log.stat().st_size if append and self.log else 0
        self.proc = subprocess.Popen(self.command(), stdout=self._out, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=new_session)
        self._group = new_session
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            exited = self.proc.poll() is not None
            if self._port_taken(exited):
                self.stop()
                raise PortTaken(self.port)
            if exited:
                self.stop()
                raise RuntimeError(f"{name} exited with {self.proc.returncode}"
                                   + (f"; see {self.log}" if self.log else ""))
            if fetch.healthy(self.url + "/health", timeout_s=2):
                return self
            time.sleep(0.3)
        self.stop()
        raise TimeoutError(f"{name} did not answer /health within {timeout_s:.0f} s"
                           + (f"; see {self.log}" if self.log else ""))

    def _port_taken(self, exited: bool) -> bool:
        """Whether this start's part of the log (an earlier start's is left out) says a port
        was taken: one naming the server's HTTP port, or any once the server has exited (an
        internal port the server chose beside it). A bind failure the server survives (torch
        warns when one address family's bind fails, then binds the other) is not one."""
        if self.log is None or not self.log.exists():
            return False
        return port_taken(read_from(self.log, self._log_from), self.port, exited)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGINT to the server's PID, SIGKILL after ``timeout_s``; a server started in its
        own session has its whole process group ended too (its spawned workers get
        ``timeout_s`` to flush and exit, then SIGKILL)."""
        try:
            if self.proc is None:
                return 0
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGINT)
                try:
                    self.proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
            if getattr(self, "_group", False):  # the spawned processes flush and exit too
                deadline = time.monotonic() + timeout_s
                try:
                    while time.monotonic() < deadline:
                        os.killpg(self.proc.pid, 0)  # raises once the group is empty
                        time.sleep(0.2)
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
            return self.proc.returncode
        finally:
            if hasattr(self._out, "close"):
                self._out.close()

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def find_aiperf() -> str | None:
    """``$SPECSCOPE_AIPERF``, the project's ``.venv-aiperf``, or ``aiperf`` on PATH."""
    candidates = [os.environ.get("SPECSCOPE_AIPERF"), ".venv-aiperf/bin/aiperf",
                  shutil.which("aiperf")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@dataclass
class ClientRun:
    artifact_dir: Path
    records: Path  #: per-request JSONL
    summary: Path  #: aggregate JSON
    seconds: float


def run_aiperf(url: str, *, model: str, tokenizer: str | Path, artifact_dir: str | Path,
               concurrency: int = 2, requests: int = 8, input_tokens: int = 64,
               output_tokens: int = 24, seed: int = 1, aiperf: str | None = None,
               extra: dict[str, object] | None = None, server_metrics: bool = True,
               timeout_s: float = 600) -> ClientRun:
    """One ``aiperf profile`` run: chat endpoint, streaming, fixed input and output lengths,
    ``ignore_eos`` so every request decodes its full length, server-reported token counts.
    ``server_metrics`` False stops AIPerf scraping the server's /metrics while it measures."""
    exe = aiperf or find_aiperf()
    if exe is None:
        raise FileNotFoundError("aiperf not found: make .venv-aiperf, or set SPECSCOPE_AIPERF")
    out = Path(artifact_dir)
    inputs = ["ignore_eos:true", *(f"{k}:{v}" for k, v in (extra or {}).items())]
    cmd = [exe, "profile", "--model", model, "--url", url, "--endpoint-type", "chat",
           "--streaming", "--tokenizer", str(tokenizer), "--concurrency", str(concurrency),
           "--request-count", str(requests), "--prompt-input-tokens-mean", str(input_tokens),
           "--prompt-input-tokens-stddev", "0", "--output-tokens-mean", str(output_tokens),
           "--output-tokens-stddev", "0", "--extra-inputs", *inputs, "--use-server-token-count",
           "--random-seed", str(seed), "--ui-type", "none", "--artifact-dir", str(out)]
    cmd += [] if server_metrics else ["--no-server-metrics"]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"aiperf failed ({proc.returncode}):\n{proc.stdout[-3000:]}"
                           f"\n{proc.stderr[-3000:]}")
    return ClientRun(out, out / "profile_export.jsonl", out / "profile_export_aiperf.json",
                     time.monotonic() - t0)


def client_check(server_args: list[str], *, tokenizer: str | Path, out_dir: str | Path,
                 concurrency: int = 2, requests: int = 8, input_tokens: int = 64,
                 output_tokens: int = 24, model: str = "served"):
    """Start serve-engine, drive it with AIPerf, and compare the two sides request by request.

    Returns (Agreement, ClientRun); the server's trace is ``out_dir/server.jsonl``.
    """
    from .. import schema
    from ..collector.agreement import client_agreement
    from ..io.trace import read_trace
    from ..importers import import_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "server.jsonl"
    with ServerProcess(server_args, trace, log=out / "server.log") as srv:
        run = run_aiperf(srv.url, model=model, tokenizer=tokenizer, artifact_dir=out / "aiperf",
                         concurrency=concurrency, requests=requests, input_tokens=input_tokens,
                         output_tokens=output_tokens)
    server = [r for r in read_trace(trace).records if isinstance(r, schema.RequestRecord)]
    client = [r for r in import_file(run.records, run_id="aiperf").records
              if isinstance(r, schema.RequestRecord)]
    return client_agreement(server, client), run
