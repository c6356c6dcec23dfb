"""The continuous-batching loop: requests queue, join the running batch between verify steps
(up to a maximum batch size) and leave it when they finish; every step's committed tokens go to
the request's stream at once. Runs the decoder in one thread; callers never block on it.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..engine.decoder import Output, Request, SpeculativeDecoder

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The scheduler's queue is at its limit; the caller should answer 503 / retry later."""


@dataclass
class Event:
    """What a request's stream receives: ``tokens`` (one verify step's commit), then ``done``
    (with the output) or ``error`` (with a message)."""

    kind: str
    request_id: str
    tokens: list[int] | None = None
    output: Output | None = None
    error: str = ""


Listener = Callable[[Event], object]  # what it returns is dropped


class Scheduler:
    """Runs ``decoder`` over a running batch; thread-safe ``submit`` / ``cancel``."""

    def __init__(self, decoder: SpeculativeDecoder, *, max_batch: int = 8,
                 max_queue: int = 1024) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.decoder = decoder
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.batch = decoder.new_batch()
        self._queue: collections.deque[tuple[Request, Listener]] = collections.deque()
        self._listeners: dict[str, Listener] = {}
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="specscope-scheduler", daemon=True)
        #: steps, admitted, finished, cancelled, errors
        self.stats: collections.Counter = collections.Counter()
        self.batch_sizes: collections.Counter = collections.Counter()  #: batch size -> steps

    def start(self) -> "Scheduler":
        self._thread.start()
        return self

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> int:
        return len(self.batch)

    def submit(self, request: Request, listener: Listener) -> None:
        """Queue a request; ``listener`` gets its events on the scheduler thread."""
        with self._lock:
            if len(self._queue) >= self.max_queue:
                raise QueueFull(f"queue full ({self.max_queue} requests waiting)")
            if not request.arrival_ns:
                request.arrival_ns = time.time_ns()
            self._queue.append((request, listener))
        self._wake.set()

    def cancel(self, request_id: str) -> None:
        """Drop a request (its client went away); it leaves the batch before the next step."""
        with self._lock:
            self._cancelled.add(request_id)
        self._wake.set()

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # ------------------------------------------------------------------ the loop
    def _take(self) -> tuple[list[tuple[Request, Listener]], set[str]]:
        with self._lock:
            cancelled, self._cancelled = self._cancelled, set()
            kept = [(r, f) for r, f in self._queue if r.request_id not in cancelled]
            room = self.max_batch - len(self.batch)
            joining, rest = kept[:max(room, 0)], kept[max(room, 0):]
            self._queue = collections.deque(rest)
            return joining, cancelled

    def _emit(self, kind: str, request_id: str, **kw: Any) -> None:
        listener = self._listeners.get(request_id)
        if listener is None:
            return
        try:
            listener(Event(kind, request_id, **kw))
        except Exception:  # a broken listener must not stop the engine
            log.exception("stream listener for %s failed", request_id)
        if kind != "tokens":
            self._listeners.pop(request_id, None)

    def _on_chunk(self, request_id: str, tokens: list[int]) -> None:
        self._emit("tokens", request_id, tokens=list(tokens))

    def _finish(self, outputs: list[Output]) -> None:
        for out in outputs:
            self.stats["cancelled" if out.finish_reason == "abort" else "finished"] += 1
            self._emit("done", out.request_id, output=out)

    def _run(self) -> None:
        while not self._stop.is_set():
            joining, cancelled = self._take()
            if not joining and not self.batch.rows:
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            try:
                if cancelled:
                    self._finish(self.decoder.cancel(self.batch, cancelled))
                if joining:
                    for r, f in joining:
                        self._listeners[r.request_id] = f
                    self.stats["admitted"] += len(joining)
                    self._finish(self.decoder.admit(self.batch, [r for r, _ in joining],
                                                    self._on_chunk))
                if self.batch.rows:
                    self.batch_sizes[len(self.batch)] += 1
                    self._finish(self.decoder.step(self.batch, self._on_chunk))
                    self.stats["steps"] += 1
            except Exception as exc:  # fail the requests in flight, keep serving
                log.exception("decoder step failed")
                self.stats["errors"] += 1
                for rid in [row.req.request_id for row in self.batch.rows] + \
                        [r.request_id for r, _ in joining]:
                    self._emit("error", rid, error=f"engine error: {exc}")
                self.batch = self.decoder.new_batch()
        for rid in list(self._listeners):
            self._emit("error", rid, error="server shutting down")
        with self._lock:
            for r, f in self._queue:
                f(Event("error", r.request_id, error="server shutting down"))
            self._queue.clear()
