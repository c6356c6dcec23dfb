"""Phase timing for the verify path. Imports only stdlib and torch.

On a GPU a phase is a pair of CUDA events, resolved lazily by the drain side (``query()``, never
``synchronize()`` on the hot path); on the CPU it is ``perf_counter_ns``.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Callable

import torch

from .. import schema


class _Phase:
    __slots__ = ("timer", "name", "step", "t0_wall", "t0", "ev0", "range")

    def __init__(self, timer: "PhaseTimer", name: str, step: int) -> None:
        self.timer = timer
        self.name = name
        self.step = step
        self.range: Any = None

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
                self.timer.on_error()
                self.ev0 = None
        else:
            self.t0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.timer.finish(self)
        except Exception:
            self.timer.on_error()
        if self.range is not None:
            try:
                self.range.__exit__(None, None, None)
            except Exception:
                self.timer.on_error()


class PhaseTimer:
    """Makes phase context managers for one engine rank and turns them into PhaseRecords.

    It is handed what it needs: ``emit`` takes a finished record, ``on_error`` counts a failure,
    ``is_enabled`` says whether recording is still on.
    """

    def __init__(self, *, run_id: str, rank: int, device: torch.device,
                 emit: Callable[[Any], None], on_error: Callable[[], None],
                 is_enabled: Callable[[], bool] = lambda: True, node: str = "") -> None:
        self.run_id = run_id
        self.node = node
        self.rank = rank
        self.emit = emit
        self.on_error = on_error
        self.is_enabled = is_enabled
        self.cuda = device.type == "cuda"
        self.device = str(device)
        self.annotate = False  #: also open torch.profiler ranges named after the phases
        self._pending: collections.deque[tuple] = collections.deque()

    def phase(self, name: str, step: int) -> _Phase:
        return _Phase(self, name, step)

    def finish(self, ph: _Phase) -> None:
        if not self.is_enabled():
            return
        if self.cuda:
            if ph.ev0 is None:
                return
            ev1 = torch.cuda.Event(enable_timing=True)
            ev1.record()
            self._pending.append((ph.name, ph.step, ph.t0_wall, ph.ev0, ev1))
            return
        self.emit(self._record(ph.name, ph.step, ph.t0_wall, time.perf_counter_ns() - ph.t0,
                               "perf_counter"))

    def record_host(self, name: str, step: int, t_start_ns: int, duration_ns: int) -> None:
        """A phase timed on the host clock by the caller (adapters that cannot wrap it)."""
        self.emit(self._record(name, step, t_start_ns, duration_ns, "perf_counter"))

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
            self.emit(self._record(name, step, t0_wall, duration_ns, "cuda_event"))

    def _record(self, name: str, step: int, t0_wall: int, duration_ns: int,
                clock: str) -> schema.PhaseRecord:
        return schema.PhaseRecord(run_id=self.run_id, rank=self.rank, step=step, phase=name,
                                  device=self.device, t_start_ns=t0_wall, duration_ns=duration_ns,
                                  clock=clock, node=self.node)
