"""A trace's clock scaled: a short run read as a long one (``report --clock-scale``).

Acceptance that ages over hours of uptime cannot be waited for in a test or a bench; a run of
the reference decoder with a fault that ages with the steps served, read with its clock
stretched, stands in for it. Every timestamp (``t_ns``, ``t_start_ns``, ``t_arrival_ns``,
``t_first_token_ns``, ``t_finish_ns``, ``started_ns`` and streamed chunks' times) moves away from
the trace's earliest one by ``factor``; durations (phases, kernels, ``interval_s``) stay as
measured, so per-step timings still read true. Unknown times (0) stay 0. Pure.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

#: absolute times, ns since the epoch, on any record
STAMPS = ("t_ns", "t_start_ns", "t_arrival_ns", "t_first_token_ns", "t_finish_ns", "started_ns")


def _stamps(r: Any) -> Iterable[int]:
    for f in STAMPS:
        v = getattr(r, f, 0)
        if isinstance(v, int) and v > 0:
            yield v


def scale_clock(records: Iterable[Any], factor: float, to_ns: int | None = None) -> list[Any]:
    """The records with every timestamp ``origin + (t - origin) * factor`` (origin: the earliest
    timestamp among them); ``to_ns``: the origin moves there (runs laid one after another)."""
    if not factor > 0:
        raise ValueError(f"a clock scale is a positive factor, not {factor!r}")
    records = list(records)
    origin = min((v for r in records for v in _stamps(r)), default=0)
    base = origin if to_ns is None else to_ns

    def move(t: int) -> int:
        return base + round((t - origin) * factor) if t > 0 else t

    out = []
    for r in records:
        changes: dict[str, Any] = {f: move(getattr(r, f)) for f in STAMPS
                                   if isinstance(getattr(r, f, None), int)}
        chunks = getattr(r, "chunk_times_ns", None)
        if chunks:
            changes["chunk_times_ns"] = tuple(move(t) for t in chunks)
        out.append(dataclasses.replace(r, **changes) if changes else r)
    return out
