"""Fixtures for the real SGLang tests (imported by them; conftest.py stays the shared one): its
environment, SmolLM2 as SGLang loads it, the launcher with the sgl_kernel stand-in, and servers
started under ``specscope wrap`` and stopped by their PIDs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specscope.serving.sglang import SglangServer, sglang_checkpoint, sglang_python, speculative_args
from tests.conftest import ROOT

LAUNCHER = Path(__file__).with_name("sglang_cpu") / "launch.py"


@pytest.fixture(scope="session")
def sglang_env() -> Path:
    python = sglang_python(os.environ.get("SPECSCOPE_SGLANG_PYTHON")) or \
        sglang_python(str(ROOT / ".venv-sglang" / "bin" / "python"))
    if python is None:
        if os.environ.get("CI") or os.environ.get("SPECSCOPE_REQUIRE_ENGINES"):
            pytest.fail("SGLang's environment is missing in CI: `make test` builds .venv-sglang")
        pytest.skip("SGLang's environment is missing: `make sglang-env` builds .venv-sglang "
                    "(or set SPECSCOPE_SGLANG_PYTHON)")
    return python


@pytest.fixture(scope="session")
def sglang_model(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct, the project's converted copy, as SGLang loads it."""
    from specscope.engine.models import smollm2_dir

    return sglang_checkpoint(smollm2_dir(), tmp_path_factory.mktemp("sglang") / "smollm2")


def sglang_server(python: Path, model: Path, folder: Path, method: str | None, *,
                  repaired: bool | Path = False, wrap: bool = True) -> SglangServer:
    """A server for ``method`` (``STANDALONE``: a copy of the target drafting a chain of 3;
    ``NGRAM``: 8 draft tokens; None: no speculation) with its log, traces and files in
    ``folder``; ``repaired`` switches the stand-in's repaired CPU verify on (True) or names the
    file that switches it at run time (``1`` in it: repaired)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {"SGLANG_STANDIN_REPAIRED_VERIFY": "1" if repaired is True else str(repaired)} \
        if repaired else {}
    return SglangServer(model=model, spec=speculative_args(method, draft=model), python=python,
                        launcher=LAUNCHER, work_dir=folder, log=folder / "server.log",
                        wrap=wrap, env=env)
