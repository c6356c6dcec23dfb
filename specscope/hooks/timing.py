"""Phase timing for the verify path. Imports only stdlib and torch.

On a GPU a phase is a pair of CUDA events, resolved lazily by the drain side (``query()``, never
``synchronize()`` on the hot path); on the CPU it is ``perf_counter_ns``.
"""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING, Any

import torch

from .. import schema

if TYPE_CHECKING:
    from .recorder import Recorder


class _Phase:
    __slots__ = ("timer", "name", "step", "t0_wall", "t0", "ev0", "range")

    def __init__(self, timer: "PhaseTimer", name: str, step: int) -> None:
        self.timer = timer
        self.name = name
        self.step = step
        self.range = None

    def __enter__(self) -> "_Phase":
        if self.timer.annotate:  # a named range for torch.profiler (Kineto user_annotation)
            try:
                self.range = torch.autograd.profiler.record_function(self.name)
                self.range.__enter__()
            except Exception:
                self.range = None
        self.t0_wall = time.time_ns()
        if self.timer.cuda:
            try:
                self.ev0 = torch.cuda.Event(enable_timing=True)
                self.ev0.record()
            except Exception:
                self.timer.recorder._hook_error()
                self.ev0 = None
        else:
            self.t0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.timer.finish(self)
        except Exception:
            self.timer.recorder._hook_error()
        if self.range is not None:
            try:
                self.range.__exit__(None, None, None)
            except Exception:
                self.timer.recorder._hook_error()


class PhaseTimer:
    """Makes phase context managers for one recorder and turns them into PhaseRecords."""

    def __init__(self, recorder: "Recorder") -> None:
        self.recorder = recorder
        self.cuda = recorder.device.type == "cuda"
        self.device = str(recorder.device)
        self.annotate = False  #: also open torch.profiler ranges named after the phases
        self._pending: collections.deque[tuple] = collections.deque()

    def phase(self, name: str, step: int) -> _Phase:
        return _Phase(self, name, step)

    def finish(self, ph: _Phase) -> None:
        rec = self.recorder
        if not rec.enabled:
            return
        if self.cuda:
            if ph.ev0 is None:
                return
            ev1 = torch.cuda.Event(enable_timing=True)
            ev1.record()
            self._pending.append((ph.name, ph.step, ph.t0_wall, ph.ev0, ev1))
            return
        rec._emit(self._record(ph.name, ph.step, ph.t0_wall, time.perf_counter_ns() - ph.t0,
                               "perf_counter"))

    def record_host(self, name: str, step: int, t_start_ns: int, duration_ns: int) -> None:
        """A phase timed on the host clock by the caller (adapters that cannot wrap it)."""
        self.recorder._emit(self._record(name, step, t_start_ns, duration_ns, "perf_counter"))

    def resolve(self, wait: bool) -> None:
        """Turn completed CUDA event pairs into records (drain side only)."""
        while self._pending:
            name, step, t0_wall, ev0, ev1 = self._pending[0]
            if not ev1.query():
                if not wait:
                    return
                ev1.synchronize()
            self._pending.popleft()
            duration_ns = int(ev0.elapsed_time(ev1) * 1e6)
            self.recorder._out.append(self._record(name, step, t0_wall, duration_ns, "cuda_event"))

    def _record(self, name: str, step: int, t0_wall: int, duration_ns: int,
                clock: str) -> schema.PhaseRecord:
        rec = self.recorder
        return schema.PhaseRecord(run_id=rec.run.run_id, rank=rec.rank, step=step, phase=name,
                                  device=self.device, t_start_ns=t0_wall, duration_ns=duration_ns,
                                  clock=clock)
