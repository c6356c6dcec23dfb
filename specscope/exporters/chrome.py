"""Chrome / Perfetto trace of recorded phases (``chrome://tracing``, ui.perfetto.dev).

One complete event ("X") per PhaseRecord: process = run and rank, thread = phase, times in µs.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from .. import schema


def chrome_trace(records: Iterable[schema.Record]) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    pids: dict[tuple[str, int], int] = {}
    tids: dict[str, int] = {}
    for r in records:
        if not isinstance(r, schema.PhaseRecord):
            continue
        pid = pids.setdefault((r.run_id, r.rank), len(pids) + 1)
        tid = tids.setdefault(r.phase, len(tids) + 1)
        events.append({"name": r.phase, "ph": "X", "pid": pid, "tid": tid, "cat": "specscope",
                       "ts": r.t_start_ns / 1e3, "dur": r.duration_ns / 1e3,
                       "args": {"step": r.step, "device": r.device, "clock": r.clock}})
    for (run, rank), pid in pids.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid,
                       "args": {"name": f"{run} rank {rank}"}})
    for name, tid in tids.items():
        for pid in pids.values():
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": name}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def chrome_trace_json(records: Iterable[schema.Record]) -> str:
    return json.dumps(chrome_trace(records))
