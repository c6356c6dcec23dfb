"""Shared fixtures: a run record, tiny models, the shared samples folder, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import settings

# A loaded 2-core CI machine must not turn slow examples into failures: no per-example deadline.
settings.register_profile("specscope", deadline=None)
settings.load_profile("specscope")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT.parent / "shared" / "samples"


@pytest.fixture
def run_record():
    from specscope import schema

    return schema.RunRecord(run_id="run-1", config_id="eagle-s3-k1-d4", algorithm="eagle",
                            num_steps=3, topk=1, num_verify_tokens=4, backend="cpu", model="m",
                            verify_mode=schema.SPECULATIVE_SAMPLING)


@pytest.fixture(scope="session")
def tiny():
    from specscope.engine.models import tiny_pair

    return tiny_pair()


@pytest.fixture
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.skip("../shared/samples is absent (only present beside the development checkout)")
    return SAMPLES


def run_cli(*args: str, timeout: float = 600, fresh: bool = False) -> subprocess.CompletedProcess:
    """Run ``specscope ARGS`` as a user would; returns the completed process. In this process
    (``specscope.cli.main`` with stdout and stderr captured, an uncaught exception a traceback
    and status 1, as the interpreter gives) unless ``fresh``: then ``python -m specscope`` in a
    new interpreter (each costs seconds of torch and transformers imports)."""
    if fresh:
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        return subprocess.run([sys.executable, "-m", "specscope", *args], capture_output=True,
                              text=True, timeout=timeout, env=env, cwd=ROOT)
    import contextlib
    import io
    import traceback
    import warnings

    from specscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rc = main(list(args))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:
            traceback.print_exc()
            rc = 1
    return subprocess.CompletedProcess(["specscope", *args], rc, out.getvalue(), err.getvalue())


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite golden files from the current output")


@pytest.fixture
def golden(request):
    """golden(name, text): compare with tests/golden/NAME, or rewrite it with --update-golden."""
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str) -> None:
        path = ROOT / "tests" / "golden" / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        if not path.exists():  # a missing file passes nothing: it is written on purpose only
            pytest.fail(f"{path} is missing (write it with --update-golden)")
        assert text == path.read_text(), f"differs from {path} (rerun with --update-golden)"

    return check


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    from specscope.serving.harness import free_port as pick

    return pick()


# ------------------------------------------------------------------ reliability figures
# The reliability suite writes its figures (faults survived, inputs fuzzed, records lost) to
# test-artifacts/reliability/figures.json; `make bench` runs the suite and tabulates them.
FIGURES = ROOT / "test-artifacts" / "reliability" / "figures.json"
_LOCK = threading.Lock()

#: examples per fuzz target: small in `make test`, large when `make bench` runs the suite
FUZZ_EXAMPLES = int(os.environ.get("SPECSCOPE_FUZZ_EXAMPLES", "300"))


@pytest.fixture
def figure():
    """figure(name, **values): record one reliability figure."""
    def put(name: str, **values):
        with _LOCK:
            FIGURES.parent.mkdir(parents=True, exist_ok=True)
            data = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
            data[name] = values
            FIGURES.write_text(json.dumps(data, indent=1, sort_keys=True))
    return put


#: every engine or reference server a test started: (kind, seconds to /health, test)
SERVER_STARTS: list[tuple[str, float, str]] = []


@pytest.fixture(scope="session", autouse=True)
def _server_starts():
    """Time each server start (``ServerProcess.start``, which every server's start reaches
    once), for the list at the end of the run: how much of the suite is start-up."""
    import time

    from specscope.serving.harness import ServerProcess

    original = ServerProcess.start

    def timed(self, *args, **kwargs):
        t0 = time.monotonic()
        try:
            return original(self, *args, **kwargs)
        finally:
            test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
            SERVER_STARTS.append((type(self).__name__, time.monotonic() - t0, test))

    ServerProcess.start = timed  # type: ignore[method-assign]
    yield
    ServerProcess.start = original  # type: ignore[method-assign]


def pytest_terminal_summary(terminalreporter):
    if not SERVER_STARTS:
        return
    terminalreporter.section("server starts")
    kinds: dict[str, list[float]] = {}
    for kind, seconds, _ in SERVER_STARTS:
        kinds.setdefault(kind, []).append(seconds)
    for kind, times in sorted(kinds.items()):
        terminalreporter.write_line(f"{kind}: {len(times)} starts, {sum(times):.0f} s in all "
                                    f"(each {min(times):.0f}-{max(times):.0f} s)")
    terminalreporter.write_line(f"all: {len(SERVER_STARTS)} starts, "
                                f"{sum(s for _, s, _ in SERVER_STARTS):.0f} s")
    for kind, seconds, test in SERVER_STARTS:
        terminalreporter.write_line(f"  {seconds:5.1f} s  {kind:<16} {test}")
