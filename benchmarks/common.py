"""Shared helpers of the benchmarks: the table row, interleaved timing, child processes."""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from specscope import schema


@dataclass
class Row:
    figure: str
    ours: str
    peer: str
    ratio: str
    target: str
    met: str
    noise: str


def _timeit(fn: Callable[[], None], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _interleaved(fns: dict[str, Callable[[], None]], reps: int, inner: int = 1) -> dict[str, list[float]]:
    """Times each function ``reps`` times, round-robin, so drift hits all alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(reps):
        for k, fn in fns.items():
            t = time.perf_counter()
            for _ in range(inner):
                fn()
            times[k].append((time.perf_counter() - t) / inner)
    return times


def _spread(xs: list[float]) -> str:
    m = statistics.median(xs)
    return f"±{(max(xs) - min(xs)) / 2 / m * 100:.1f}%" if m else "n/a"


def paired_ratio(on: list[float], off: list[float], n_boot: int = 4000,
                 seed: int = 0) -> tuple[float, tuple[float, float]]:
    """sum(on) / sum(off) over paired measurements, with its 95% bootstrap interval
    (pairs resampled together, so drift that hits both arms of a pair cancels)."""
    import numpy as np

    a, b = np.asarray(on), np.asarray(off)
    idx = np.random.default_rng(seed).integers(0, a.size, size=(n_boot, a.size))
    boot = a[idx].sum(axis=1) / b[idx].sum(axis=1)
    return float(a.sum() / b.sum()), (float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975)))


def ratio_verdict(ci: tuple[float, float], limit: float) -> str:
    """"met" when the whole interval is within ``limit``, "not met" when none of it is, else
    "inconclusive" (the noise is wider than the margin)."""
    if ci[1] <= limit:
        return "met"
    return "not met" if ci[0] > limit else "inconclusive"


def _run_record() -> schema.RunRecord:
    return schema.RunRecord(run_id="bench", config_id="bench", algorithm="eagle", num_steps=4,
                            topk=1, num_verify_tokens=5, backend="cpu", model="bench")


# ------------------------------------------------------------------------ hooks (issue 2)


def _child(code: str) -> tuple[float, float, str]:
    """Run Python code in a fresh interpreter; (wall seconds, peak RSS MiB, stdout).

    Peak RSS is the child's own VmHWM (ru_maxrss would carry the forking parent's size).
    """
    import subprocess
    import sys

    probe = ("\nimport sys as _s\nfor _l in open('/proc/self/status'):\n"
             "    if _l.startswith('VmHWM'): print('VMHWM', int(_l.split()[1]), file=_s.stderr)\n")
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code + probe], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"child failed: {proc.stderr[-500:]}")
    kb = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("VMHWM")]
    return wall, (kb[0] / 1024 if kb else float("nan")), proc.stdout


def machine() -> str:
    try:
        import psutil

        mem = f"{psutil.virtual_memory().total / 2**30:.0f} GiB"
    except ImportError:
        mem = "?"
    return (f"{platform.machine()}, {os.cpu_count()} cores, {mem}, {platform.platform()}, "
            f"Python {platform.python_version()}, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads)")
