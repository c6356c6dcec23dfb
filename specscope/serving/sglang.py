"""A real SGLang server on 127.0.0.1, from SGLang's own virtual environment (``make sglang-env``
builds ``.venv-sglang``: its pins never touch ours), stopped by its PID with every process it
spawned.

SGLang serves on a CPU with ``SGLANG_USE_CPU_ENGINE=1`` and the flags in ``CPU_FLAGS``: the
``intel_amx`` attention backend is the only CPU backend with a speculative verify, and
``--decode-log-interval 1`` refreshes its gauges every decode step (every 40 otherwise);
``--sleep-on-idle`` parks an idle scheduler on its sockets (otherwise its loop spins a whole
core between requests, taking it from the clients and tools beside it). Its
caches and IPC files go into the server's own folder (``TMPDIR``, ``SGLANG_JIT_CACHE_DIR``;
IPC files into a short temporary folder, removed on stop, where that folder's path is too long
for a Unix socket); the
``/dev/shm/sglang_loads_*`` segment each start leaves behind is removed on stop. ``launcher``
replaces ``-m sglang.launch_server`` with a script taking the same arguments (the tests'
launcher keeps ``intel_amx`` on CPUs without AMX); ``wrap`` starts it under ``specscope wrap``.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .harness import ServerProcess

DEFAULT_VENV = ".venv-sglang"

#: what SGLang needs to serve on a CPU with speculative decoding
CPU_FLAGS = ("--device", "cpu", "--sampling-backend", "pytorch", "--disable-overlap-schedule",
             "--attention-backend", "intel_amx", "--enable-metrics", "--decode-log-interval", "1",
             "--sleep-on-idle")

_SHM = "/dev/shm/sglang_loads_*"


def sglang_python(explicit: str | None = None) -> Path | None:
    """The interpreter of SGLang's environment: ``explicit``, ``$SPECSCOPE_SGLANG_PYTHON``, or
    the project's ``.venv-sglang``; None when there is none."""
    for candidate in (explicit, os.environ.get("SPECSCOPE_SGLANG_PYTHON"),
                      os.path.join(DEFAULT_VENV, "bin", "python")):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def sglang_checkpoint(source: str | Path, folder: str | Path) -> Path:
    """``source`` as SGLang loads it: a folder of links to its files with a ``config.json``
    that names the architecture (SGLang reads ``architectures[0]``; a checkpoint converted from
    GGUF has none). Written once into ``folder``."""
    source, folder = Path(source), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name != "config.json" and not (folder / item.name).exists():
            (folder / item.name).symlink_to(item.resolve())
    config = json.loads((source / "config.json").read_text())
    if not config.get("architectures"):
        arch = {"llama": "LlamaForCausalLM"}.get(config.get("model_type", ""), "")
        if not arch:
            raise ValueError(f"{source}/config.json names no architecture and its model_type "
                             f"{config.get('model_type')!r} is not one this helper knows")
        config["architectures"] = [arch]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def speculative_args(method: str | None, *, draft: str | Path | None = None, steps: int = 3,
                     draft_tokens: int | None = None) -> list[str]:
    """SGLang's flags for ``method``: ``STANDALONE``/``EAGLE``/``EAGLE3`` (a chain of ``steps``
    from ``draft``), ``NGRAM`` (``draft_tokens`` per step, 8 by default), None (target only)."""
    if method is None:
        return []
    args = ["--speculative-algorithm", method]
    if method == "NGRAM":
        return args + ["--speculative-num-draft-tokens", str(draft_tokens or 8)]
    if draft is None:
        raise ValueError(f"{method} needs a draft checkpoint")
    return args + ["--speculative-draft-model-path", str(draft), "--speculative-num-steps",
                   str(steps), "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
                   str(draft_tokens or steps + 1)]


@dataclass
class SglangServer(ServerProcess):
    """SGLang's HTTP server for ``model`` (a folder from ``sglang_checkpoint``) with ``spec``
    (``speculative_args``), its output in ``log`` and its files in ``work_dir``."""

    model: Path = Path()
    spec: list[str] = field(default_factory=list)
    python: Path | None = None
    launcher: Path | None = None  #: a script run instead of ``-m sglang.launch_server``
    work_dir: Path = Path("sglang-server")
    wrap: bool = False  #: under ``specscope wrap``, its traces in ``work_dir/traces``
    dtype: str = "bfloat16"
    #: of the memory free at start, for weights and KV cache: SGLang refuses to start when the
    #: weights leave no room in it, which other processes' use can cause at a small fraction
    mem_fraction: float = 0.8  #: 0.3 failed with four servers loading at once (0.306 needed)
    max_total_tokens: int = 16384  #: the KV cache's size, whatever the fraction allows
    env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    label = "SGLang"

    @property
    def trace_dir(self) -> Path:
        return Path(self.work_dir) / "traces"

    def command(self) -> list[str]:
        python = self.python or sglang_python()
        if python is None:
            raise FileNotFoundError("SGLang's environment is missing: run `make sglang-env` (or "
                                    "set SPECSCOPE_SGLANG_PYTHON)")
        entry = [str(self.launcher)] if self.launcher else ["-m", "sglang.launch_server"]
        cmd = [str(python), *entry, "--model-path", str(self.model), *CPU_FLAGS, "--dtype",
               self.dtype, "--mem-fraction-static", str(self.mem_fraction),
               "--max-total-tokens", str(self.max_total_tokens), "--host",
               "127.0.0.1", "--port", str(self.port), *self.spec, *self.extra_args]
        if self.wrap:
            cmd = [sys.executable, "-m", "specscope", "wrap", "--trace-dir",
                   str(self.trace_dir), "--", *cmd]
        return cmd

    def environment(self) -> dict[str, str]:
        work = Path(self.work_dir).resolve()
        tmp = work / "tmp"
        if len(str(tmp)) > 60:  # SGLang binds Unix sockets under TMPDIR: a path holds 107 bytes
            import tempfile

            tmp = Path(tempfile.mkdtemp(prefix="sglang-"))
            self._own_tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", TMPDIR=str(tmp),
                   SGLANG_JIT_CACHE_DIR=str(work / "jit"), HF_HUB_OFFLINE="1")
        env.pop("SPECSCOPE_RUN_ID", None)  # each server names its own run
        if self.wrap:
            self.trace_dir.mkdir(parents=True, exist_ok=True)
        env.update(self.env)
        return env

    def start(self, timeout_s: float = 300.0, env: dict[str, str] | None = None,
              new_session: bool = True) -> "SglangServer":
        self._shm_before = set(glob.glob(_SHM))
        super().start(timeout_s, env=env or self.environment(), new_session=new_session)
        return self

    def stop(self, timeout_s: float = 30.0, drain_s: float = 0.0) -> int:
        """Stop the server by its PID, at once by default. SGLang's launcher kills its
        scheduler at once when it is stopped (SIGKILL, whatever the signal it got): what the
        scheduler's recorder holds then is what it loses. It hands each verify step to its
        sinks within 20 ms (``hooks.recorder.BUSY_INTERVAL_S``) and the health snapshot that
        counts the last one within 45 ms (``IDLE_S``; with the step itself on an engine slower
        than one step per 100 ms); ``drain_s`` leaves the server quiet that long first."""
        if drain_s > 0 and self.wrap and self.proc is not None and self.proc.poll() is None:
            time.sleep(drain_s)
        try:
            return super().stop(timeout_s)
        finally:
            if getattr(self, "_own_tmp", None) is not None:
                import shutil

                shutil.rmtree(self._own_tmp, ignore_errors=True)
            for segment in set(glob.glob(_SHM)) - getattr(self, "_shm_before", set()):
                try:
                    os.unlink(segment)
                except OSError:
                    pass

    def __enter__(self) -> "SglangServer":
        return self.start()


def generate(url: str, text: str, sampling: dict[str, Any], *, timeout_s: float = 600.0,
             **extra: Any) -> dict[str, Any]:
    """One request to SGLang's native ``/generate``; returns its JSON (``meta_info`` included)."""
    from ..io import fetch

    return fetch.post_json(url + "/generate", {"text": text, "sampling_params": sampling, **extra},
                           timeout_s=timeout_s)
