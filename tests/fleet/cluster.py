"""A Spark standalone cluster on this machine for the tests and the benchmark (``make bench``
imports it from here): a master and N workers, each its own JVM process started from pyspark's
own launcher, bound to 127.0.0.1 and stopped by PID. Not part of the package: a deployment
points ``--master`` at the cluster it already has."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class LocalCluster:
    """``with LocalCluster(workers=2) as c: ... c.master ...``; ``c.pids`` are the JVMs'."""

    def __init__(self, workers: int = 2, *, cores: int = 1, memory: str = "1g",
                 work_dir: str | os.PathLike | None = None, timeout_s: float = 120.0) -> None:
        self.num_workers = workers
        self.cores, self.memory, self.timeout_s = cores, memory, timeout_s
        self.dir = Path(work_dir or tempfile.mkdtemp(prefix="specscope-spark-"))
        self.procs: list[subprocess.Popen] = []
        self._logs: list[Any] = []
        self.master = ""

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _start(self, cls: str, *args: str, log: str) -> subprocess.Popen:
        home = spark_home()
        env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=str(self.dir / "logs"), SPARK_WORKER_DIR=str(self.dir / "work"))
        # spark-class ends in exec: the PID is the JVM's
        out = open(self.dir / log, "w")
        self._logs.append(out)
        proc = subprocess.Popen([str(home / "bin" / "spark-class"), cls, *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def _wait_for(self, log: str, pattern: str, proc: subprocess.Popen) -> None:
        deadline = time.time() + self.timeout_s
        while time.time() < deadline:
            if re.search(pattern, (self.dir / log).read_text(errors="replace")):
                return
            if proc.poll() is not None:
                raise RuntimeError(f"Spark {log} exited with {proc.returncode}: "
                                   f"{(self.dir / log).read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        raise TimeoutError(f"Spark {log}: no {pattern!r} within {self.timeout_s:.0f} s")

    def start(self) -> "LocalCluster":
        port = _free_port()
        self.dir.mkdir(parents=True, exist_ok=True)
        master = self._start("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                             "--port", str(port), "--webui-port", str(_free_port()), log="master.log")
        self.master = f"spark://127.0.0.1:{port}"
        self._wait_for("master.log", r"I have been elected leader|Starting Spark master", master)
        for i in range(self.num_workers):
            w = self._start("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                            "--cores", str(self.cores), "--memory", self.memory,
                            "--webui-port", str(_free_port()), self.master, log=f"worker{i}.log")
            self._wait_for(f"worker{i}.log", r"Successfully registered with master", w)
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        for out in self._logs:
            out.close()

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()
