"""PyTorch profiler (Kineto) Chrome traces: annotated ranges and device activity into phases.

``user_annotation`` / ``gpu_user_annotation`` ranges become PhaseRecords named by the range
(specscope's own phase names, as ``specscope profile`` writes them, or any other); kernels,
memcpys and memsets become phases ``gpu_kernel``, ``gpu_memcpy``, ``gpu_memset`` on their
device. Times: microseconds in the trace, nanoseconds in the records.
"""

from __future__ import annotations

import os

from .. import schema
from ..schema import Problem
from ._common import ImportResult, load_json, run_record

DEVICE_CATS = {"kernel": "gpu_kernel", "gpu_memcpy": "gpu_memcpy", "gpu_memset": "gpu_memset"}
ANNOTATION_CATS = ("user_annotation", "gpu_user_annotation")


def parse(path: str | os.PathLike, run_id: str) -> ImportResult:
    res = ImportResult("kineto")
    d = load_json(path, res)
    events = d.get("traceEvents") if isinstance(d, dict) else d
    if not isinstance(events, list):
        res.problems.append(Problem(str(path), 1, "no traceEvents list"))
        return res
    base_us = d.get("baseTimeNanoseconds", 0) / 1000 if isinstance(d, dict) else 0
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = ev.get("cat", "")
        if cat in ANNOTATION_CATS:
            phase = str(ev.get("name", ""))
        elif cat in DEVICE_CATS:
            phase = DEVICE_CATS[cat]
        else:
            continue
        try:
            ts, dur = float(ev["ts"]), float(ev.get("dur", 0))
        except (KeyError, TypeError, ValueError):
            res.problems.append(Problem(str(path), i + 1, f"event {i} without numeric ts/dur"))
            continue
        args = ev.get("args") or {}
        device = f"cuda:{args['device']}" if "device" in args else (
            "cpu" if cat == "user_annotation" else f"gpu:{ev.get('pid', '')}")
        res.add(schema.PhaseRecord(
            run_id=run_id, rank=0, step=int(args.get("step", -1)) if str(args.get("step", "-1")).lstrip("-").isdigit() else -1,
            phase=phase, device=device, t_start_ns=int((ts + base_us) * 1000),
            duration_ns=int(dur * 1000), clock="kineto"))
    res.add(run_record(run_id, "pytorch-profiler", "kineto", path))
    return res
