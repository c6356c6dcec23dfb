"""``specscope wrap -- CMD``: start an engine with the adapters installed in every process.

A ``sitecustomize`` shipped with specscope goes first on ``PYTHONPATH`` and ``SPECSCOPE_WRAP=1``
is set, so each Python process the command starts (tensor-parallel workers included) installs
the adapters at start-up. An existing ``sitecustomize`` elsewhere on the path is shadowed. They
all record one run (``SPECSCOPE_RUN_ID``, unless already set).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence


def wrap(command: Sequence[str], *, trace_dir: str = ".", collector: str | None = None) -> int:
    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError("nothing to run: specscope wrap -- <engine command>")
    site = Path(__file__).with_name("_site")
    env = dict(os.environ, SPECSCOPE_WRAP="1", SPECSCOPE_VLLM="1",
               SPECSCOPE_TRACE_DIR=os.path.abspath(trace_dir))
    # every process the command starts (API server, schedulers, workers) records one run
    env.setdefault("SPECSCOPE_RUN_ID", f"wrap-{os.getpid()}-{time.time_ns() // 10**6}")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    if collector:
        env["SPECSCOPE_COLLECTOR"] = collector
    proc = subprocess.Popen(command, env=env)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _f: proc.send_signal(s))
    return proc.wait()
