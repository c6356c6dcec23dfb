"""The real vLLM (CPU build) for the engine tests: its environment, SmolLM2 and a draft that is
not the target, prompts, and reading a server's trace. Each test starts its own server on
127.0.0.1 and stops it by its PID (with every process it spawned)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specscope.serving.vllm import vllm_python
from tests.conftest import ROOT


@pytest.fixture(scope="session")
def vllm_env() -> Path:
    python = vllm_python(os.environ.get("SPECSCOPE_VLLM_PYTHON")) or \
        vllm_python(str(ROOT / ".venv-vllm" / "bin" / "python"))
    if python is None:
        if os.environ.get("CI") or os.environ.get("SPECSCOPE_REQUIRE_ENGINES"):
            pytest.fail("vLLM's environment is missing in CI: `make test` builds .venv-vllm")
        pytest.skip("vLLM's environment is missing: `make vllm-env` builds .venv-vllm")
    return python


@pytest.fixture(scope="session")
def smollm2_checkpoints() -> tuple[Path, Path]:
    """(target, draft): SmolLM2-135M-Instruct and its 4-bit copy, as HF checkpoints."""
    from specscope.engine.models import smollm2_dir, smollm2_draft_dir

    return smollm2_dir(), smollm2_draft_dir("int:4")


@pytest.fixture(scope="session")
def prompts() -> list[str]:
    from specscope.engine.workload import load_prompts

    return [p["prompt"] for p in load_prompts()]


@pytest.fixture(scope="session")
def llama_server() -> Path:
    """The llama-server binary built into .venv-llamacpp (``make llamacpp-env``)."""
    from specscope.serving.llamacpp import llama_server_binary

    try:
        binary = llama_server_binary(os.environ.get("SPECSCOPE_LLAMACPP_PYTHON")
                                     or (ROOT / ".venv-llamacpp" / "bin" / "python"))
    except FileNotFoundError as exc:
        binary, why = None, str(exc)
    else:
        why = "llama.cpp's environment is missing: `make llamacpp-env` builds .venv-llamacpp"
    if binary is None:
        if os.environ.get("CI") or os.environ.get("SPECSCOPE_REQUIRE_ENGINES"):
            pytest.fail(f"{why} (in CI `make test` builds it)")
        pytest.skip(why)
    return binary


@pytest.fixture(scope="session")
def smollm2_gguf_file() -> Path:
    from specscope.engine.models import smollm2_gguf

    return smollm2_gguf()
