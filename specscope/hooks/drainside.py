"""The Recorder's drain side: what leaves the ring for the sinks, the thread that drains it, the
hook-health snapshots, the hand-over at a stop, and the close. Imports only stdlib and torch.

An engine killed at once (SIGKILL) loses only what this side had not handed over: a verify step
reaches the sinks within ``BUSY_INTERVAL_S`` of being recorded, and the health snapshot that
counts the last step follows within ``IDLE_S + BUSY_INTERVAL_S`` (with the step itself on an
engine slower than one step per ``HEALTH_BUSY_S``).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any, Callable, TypeVar

from .. import schema
from ..io.columns import VerifyColumns
from . import drain as _drain

T = TypeVar("T", bound="DrainSide")
#: the drain thread's interval while records keep coming (seconds): the most a verify step
#: waits to reach the sinks once it is recorded (the first after a quiet spell wakes it at once)
BUSY_INTERVAL_S = 0.02
#: no verify step for this long and the engine is idle: the health snapshot that counts the
#: last step follows it to the sinks (at the drain's next wake: at most 45 ms after the step)
IDLE_S = 0.025
#: while steps keep coming, a drain that has caught up writes a health snapshot at most this
#: often (an engine slower than one step per 100 ms has one with every step)
HEALTH_BUSY_S = 0.1

class DrainSide:
    """The drain side of ``Recorder`` (its state is set in ``Recorder.__init__``)."""

    run: schema.RunRecord
    rank: int
    node: str
    sinks: list[Any]
    enabled: bool
    clock_ns: Callable[[], int]
    max_columns_entries: int
    phases: Any
    num_recorded: int
    num_dropped_ring_full: int
    num_dropped_batch_too_large: int
    num_dropped_out_full: int
    num_hook_errors: int
    num_sink_errors: int
    _drain_lock: threading.Lock
    _pending: collections.deque
    _free: collections.deque
    _out: collections.deque
    _beside: list[Any]
    _thread: threading.Thread | None
    _stop: threading.Event
    _wake: threading.Event
    _quiet: bool
    _last_ns: int
    _closed: bool
    _health_state: tuple | None
    _health_at: float

    def count_error(self) -> None:
        raise NotImplementedError

    def _tell_policy(self, cols: list[VerifyColumns]) -> None:
        raise NotImplementedError

    def drain_columns(self, wait: bool = False) -> tuple[list[Any], list[VerifyColumns]]:
        """Records ready so far, and the verify steps among them as VerifyColumns (one per
        ``max_columns_entries`` entries, in the compact step-level form).

        Polls device events; ``wait`` blocks until all are complete. Nothing here builds a
        Python object per request entry.
        """
        with self._drain_lock:
            ready = []
            while self._pending:
                idx, batch, event, meta = self._pending[0]
                if event is not None and not event.query():
                    if not wait:
                        break
                    event.synchronize()
                ready.append(self._pending.popleft())
            if ready:  # for telling the engine idle
                self._last_ns = ready[-1][3].t_ns
            try:
                cols = [_drain.columns(self, part)
                        for part in _drain.parts(ready, self.max_columns_entries)]
                if cols:
                    try:
                        self._tell_policy(cols)
                    except (Exception, SystemExit):
                        self.count_error()
            finally:  # the slots are free once their contents are copied out
                self._free.extend(idx for idx, _, _, _ in ready)
                self.num_recorded += len(ready)
            self.phases.resolve(wait)
            out = []
            while self._out:
                out.append(self._out.popleft())
        return out, cols

    def drain(self, wait: bool = False) -> list[Any]:
        """Records ready so far, verify steps as VerifyStepRecords (see ``drain_columns``)."""
        out, cols = self.drain_columns(wait)
        for c in cols:
            out.extend(c.to_records())
        return out

    def flush(self, wait: bool = False) -> int:
        """Drain into every sink; returns the number of records and verify steps handed over."""
        out, cols = self.drain_columns(wait=wait)
        if not out and not cols:
            return 0
        # run records, then the verify steps, then the rest (phases, requests): a sink that can
        # take only part of a batch (a full disk) keeps the steps rather than a run of phases
        runs = [r for r in out if isinstance(r, schema.RunRecord)]
        rest = [r for r in out if not isinstance(r, schema.RunRecord)]
        columnar = runs + cols + rest
        expanded = None
        for sink in self.sinks:
            try:
                if getattr(sink, "accepts_columns", False):
                    sink.write(columnar)
                else:
                    if expanded is None:
                        expanded = runs + [r for c in cols for r in c.to_records()] + rest
                    sink.write(expanded)
            except (Exception, SystemExit):
                self.num_sink_errors += 1
        return len(out) + sum(c.num_steps for c in cols)

    def start(self: T, interval_s: float = 0.25, busy_interval_s: float = BUSY_INTERVAL_S) -> T:
        """Start a daemon thread that flushes to the sinks every ``interval_s`` while the
        engine is idle, every ``busy_interval_s`` after a flush that handed records over, at
        once for the first step after a quiet spell, and as soon as half the ring is waiting
        (a fast engine never waits on the interval). An engine that is killed right after its
        last verify step has that step on disk within ``busy_interval_s`` (plus the write); the
        health snapshot that counts it follows once no step has come for ``IDLE_S`` (at most
        ``IDLE_S + busy_interval_s`` after the step), or with the step itself where the last
        snapshot is ``HEALTH_BUSY_S`` old."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, args=(interval_s, busy_interval_s),
                                            name="specscope-drain", daemon=True)
            self._thread.start()
        return self

    def _loop(self, interval_s: float, busy_interval_s: float) -> None:
        while not self._stop.is_set():
            self._wake.wait(interval_s if self._quiet else busy_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                handed = self.flush()
                since = self.clock_ns() - self._last_ns
                idle = handed == 0 and not self._pending and since >= IDLE_S * 1e9
                caught_up = handed > 0 and not self._pending
                self._snapshot(0.0 if idle else HEALTH_BUSY_S if caught_up
                               else schema.HEALTH_EVERY_S)
            except (Exception, SystemExit):
                self.num_sink_errors += 1
                idle = True
            self._quiet = idle

    def hand_over(self, timeout_s: float) -> bool:
        """Hand everything recorded so far to the sinks, then a health snapshot that counts
        it, waiting at most ``timeout_s`` (a stop the process can see: ``hooks.stop``). The
        work runs on a thread of its own, so a drain lock held elsewhere costs the wait and
        nothing more; True when it finished in time. Never raises."""
        def work() -> None:
            try:
                self.flush()
                self._snapshot(0.0)
            except (Exception, SystemExit):
                self.num_sink_errors += 1

        try:
            t = threading.Thread(target=work, name="specscope-hand-over", daemon=True)
            t.start()
            t.join(timeout_s)
            return not t.is_alive()
        except (Exception, SystemExit):
            return False

    def attach(self, source: Any) -> None:
        """Write ``source``'s cumulative figure with each health record: ``source.state()`` (a
        tuple; a change calls for a new snapshot) and ``source.record(recorder, final)`` (the
        record, e.g. an EngineCountsRecord of the engine's own counts)."""
        self._beside.append(source)

    def _counters(self) -> tuple:
        """What a new health snapshot waits for. Sink errors are left out: a sink that fails
        every write would otherwise make each snapshot the trigger of the next (they are in
        every record written, and in the final one)."""
        return (self.num_recorded, self.num_dropped_ring_full, self.num_dropped_batch_too_large,
                self.num_dropped_out_full, self.num_hook_errors, self.enabled,
                tuple(s.state() for s in self._beside))

    def _write_health(self, final: bool) -> None:
        self._out.append(self.health(final=final))
        for source in self._beside:
            try:
                self._out.append(source.record(self, final))
            except (Exception, SystemExit):
                self.num_hook_errors += 1

    def _snapshot(self, min_gap_s: float) -> None:
        """Write the cumulative health record when it changed and the last one is at least
        ``min_gap_s`` old (0 when the engine is idle, ``HEALTH_BUSY_S`` while a drain keeps up
        with its steps, ``HEALTH_EVERY_S`` while it does not): an engine that kills this
        process at shutdown (vLLM's workers at its default ``--shutdown-timeout 0``, SGLang's
        scheduler always) still leaves its accounting as of its last step."""
        state = self._counters()
        if state == self._health_state:
            return
        if time.monotonic() - self._health_at < min_gap_s:
            return
        self._health_state, self._health_at = state, time.monotonic()
        self._write_health(final=False)
        self.flush()

    def health(self, final: bool = False) -> schema.HookHealthRecord:
        """The recorder's own accounting so far (cumulative)."""
        return schema.HookHealthRecord(
            run_id=self.run.run_id, rank=self.rank, node=self.node, num_recorded=self.num_recorded,
            num_dropped_ring_full=self.num_dropped_ring_full,
            num_dropped_batch_too_large=self.num_dropped_batch_too_large,
            num_dropped_queue_full=self.num_dropped_out_full,
            num_hook_errors=self.num_hook_errors, num_sink_errors=self.num_sink_errors,
            disabled=not self.enabled, pid=os.getpid(), t_ns=time.time_ns(), final=final)

    def close(self, close_sinks: bool = True) -> None:
        """Stop the drain thread, flush everything (waiting for the device), close the sinks."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush(wait=True)
        self._write_health(final=True)
        self.flush(wait=True)
        for sink in self.sinks if close_sinks else ():
            try:
                sink.close()
            except (Exception, SystemExit):
                self.num_sink_errors += 1
