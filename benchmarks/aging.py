"""Acceptance that ages: how soon the drift test flags the reference decoder's
``acceptance_decay`` (a tenth of the rows' drafts rejected per thousand steps) read as 10% an
hour (the clock scaled so that 1,000 verify steps are an hour of uptime), and its false alarms
over 24 clean simulated hours, the engine restarted every hour (24 clean runs laid end to end,
each with its own start), checked at every hour."""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time

import torch

from specscope import schema
from specscope.collector.detectors import DriftDetector
from specscope.io.clock import scale_clock
from specscope.io.trace import read_trace

from .common import Row

STEPS_PER_HOUR = 1000
HOUR = 3_600_000_000_000


def _run(pair, seed: int, fault: str, requests: int) -> list:
    from specscope.engine.decoder import SpecConfig
    from specscope.engine.workload import WorkloadSpec, run_workload

    spec = WorkloadSpec(requests=requests, concurrency=32, max_new_tokens=128, temperature=0.7,
                        seed=seed, reference=False, categories=("math",))
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(seed)
        path = run_workload(pair, SpecConfig(fault=fault), spec, f"{tmp}/r.jsonl", progress=False)
        return list(read_trace(path).records)


def _as_hours(records: list, to_ns: int | None = None) -> list:
    """The run with its clock scaled so that ``STEPS_PER_HOUR`` verify steps take an hour."""
    steps = sorted(r.t_ns for r in records if isinstance(r, schema.VerifyStepRecord))
    factor = len(steps) / STEPS_PER_HOUR * HOUR / max(steps[-1] - steps[0], 1)
    return scale_clock(records, factor, to_ns)


def _flagged_by(records: list, until_ns: int) -> bool:
    seen = [r for r in records if not isinstance(r, schema.VerifyStepRecord) or r.t_ns <= until_ns]
    return bool(DriftDetector().check(seen))


def bench_aging(reps: int) -> list[Row]:
    from specscope.engine.models import tiny_pair

    pair = tiny_pair()
    seeds = max(3, reps // 2)
    times, t0 = [], time.perf_counter()
    for seed in range(seeds):
        records = _as_hours(_run(pair, seed, "acceptance_decay", 960))
        steps = [r.t_ns for r in records if isinstance(r, schema.VerifyStepRecord)]
        first = min(steps)
        at = next((m for m in range(15, int((max(steps) - first) / 6e10) + 1, 5)
                   if _flagged_by(records, first + m * 60_000_000_000)), None)
        times.append(at)
    decided = [t for t in times if t is not None]
    med = statistics.median(decided) if decided else None
    rows = [Row(f"acceptance decaying 10% an hour (reference decoder's acceptance_decay, "
                f"{STEPS_PER_HOUR} steps read as an hour): simulated uptime until the drift test "
                f"flags it, checked every 5 minutes ({seeds} seeds)",
                f"median {med} min ({', '.join(str(t) for t in times)})" if med is not None
                else "not flagged", "-", "-", "<= 60 min",
                "yes" if decided and max(decided) <= 60 else "no",
                f"{time.perf_counter() - t0:.0f} s of decoding")]
    # 24 clean hours: 24 runs laid end to end, each its own engine start (a restart an hour or
    # so: each run is as long as its steps make it), one run id
    clean: list = []
    t, ends = 1_790_000_000_000_000_000, []
    for h in range(24):
        one = _as_hours(_run(pair, 100 + h, "", 640), to_ns=t)
        clean += [dataclasses.replace(r, run_id="clean") if hasattr(r, "run_id") else r for r in one]
        t = max(getattr(r, "t_ns", 0) for r in one) + 60_000_000_000
        ends.append(t)
    alarms = sum(_flagged_by(clean, end) for end in ends[1:])
    rows.append(Row("false alarms of the drift test over a day of clean simulated uptime (24 clean "
                    "reference runs, one run id, a restart at each), checked at the end of each run "
                    f"from the second ({(t - 1_790_000_000_000_000_000) / HOUR:.1f} h in all)",
                    f"{alarms} of 23 checks", "-", "-", "0",
                    "yes" if alarms == 0 else "no", "alpha 1e-4 a check"))
    return rows
