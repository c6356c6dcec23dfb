"""Record batches between engine processes and a collector over ZeroMQ (PUSH -> PULL).

Imports stdlib and the wire format; pyzmq when a socket is made. Never torch or dash. The
engine side never blocks: a full send queue drops the message and counts its records and
verify entries. The receiver rejects oversized, malformed or unknown-version messages, counts
them by reason (and the entries they held, where the header says), and goes on.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from .wire import MAX_MESSAGE_BYTES, WireError, _json_messages, decode_batch, messages


def _zmq():
    try:
        import zmq
    except ImportError as exc:
        raise ModuleNotFoundError(
            "the collector transport needs pyzmq: pip install 'specscope[collector]'",
            name=exc.name) from None
    return zmq


class ZmqSink:
    """Recorder sink that pushes records to a collector; never blocks, drops and counts.

    ``format="json"`` sends the previous JSON format (for a collector not yet upgraded).
    ``linger_s`` bounds how long ``close()`` waits for queued messages to reach the collector,
    so an engine never hangs at exit; what is still queued then is lost (ZeroMQ does not say
    how much).
    """

    accepts_columns = True

    def __init__(self, endpoint: str, *, high_water_mark: int = 1000,
                 format: str = "columnar", linger_s: float = 2.0) -> None:
        if format not in ("columnar", "json"):
            raise ValueError(f"unknown wire format {format!r}: columnar or json")
        zmq = _zmq()
        self._zmq = zmq
        self.format = format
        self._ctx = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PUSH)
        self._sock.setsockopt(zmq.SNDHWM, high_water_mark)
        self._sock.setsockopt(zmq.LINGER, int(linger_s * 1000))
        self._sock.connect(endpoint)
        self._lock = threading.Lock()
        self.num_sent = 0  #: records and verify entries handed to the socket
        self.num_dropped = 0  #: records and verify entries dropped on a full queue

    def write(self, records: Sequence[Any]) -> None:
        if not records:
            return
        batch = _json_messages(records, None) if self.format == "json" else messages(records)
        with self._lock:
            for msg, n in batch:  # dropped or sent, counted per record and per verify entry
                try:
                    self._sock.send(msg, flags=self._zmq.NOBLOCK)
                    self.num_sent += n
                except self._zmq.Again:
                    self.num_dropped += n

    def close(self) -> None:
        with self._lock:
            self._sock.close()


class ZmqReceiver:
    """Pulls batches on ``endpoint`` and feeds a Collector, on a background thread."""

    def __init__(self, collector: Any, endpoint: str = "tcp://127.0.0.1:5557",
                 max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        zmq = _zmq()
        self._zmq = zmq
        self.collector = collector
        self.max_bytes = max_bytes
        self._ctx = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.MAXMSGSIZE, max_bytes + 1024)
        if endpoint.endswith(":0"):
            port = self._sock.bind_to_random_port(endpoint.rsplit(":", 1)[0])
            endpoint = f"{endpoint.rsplit(':', 1)[0]}:{port}"
        else:
            self._bind(endpoint)
        self.endpoint = endpoint
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _bind(self, endpoint: str, wait_s: float = 5.0) -> None:
        """Bind, retrying while a previous collector's socket on the endpoint is released
        (ZeroMQ closes listeners asynchronously, so a restart can race its predecessor)."""
        import errno
        import time

        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._sock.bind(endpoint)
                return
            except self._zmq.ZMQError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    self._sock.close(linger=0)
                    raise
                time.sleep(0.05)

    def start(self) -> "ZmqReceiver":
        self._thread = threading.Thread(target=self._loop, name="specscope-receiver", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        poller = self._zmq.Poller()
        poller.register(self._sock, self._zmq.POLLIN)
        while not self._stop.is_set():
            if not dict(poller.poll(100)):
                continue
            while not self._stop.is_set():  # a backlog must not hold up close()
                try:
                    msg = self._sock.recv(flags=self._zmq.NOBLOCK, copy=False)
                except self._zmq.Again:
                    break
                self.handle(msg.buffer if hasattr(msg, "buffer") else msg)

    def handle(self, msg: bytes | memoryview) -> None:
        """Decode one message into the collector; bad input is counted, never raised."""
        health = self.collector.health
        try:
            pid, items, skipped = decode_batch(msg, self.max_bytes)
        except WireError as exc:
            health[f"batches_rejected_{exc.reason}"] += 1
            health["entries_rejected"] += exc.entries
            return
        except Exception:
            health["batches_rejected_malformed"] += 1
            return
        if pid:
            self.collector.note_process(pid, "engine")
        health["records_rejected"] += skipped
        health["batches_received"] += 1
        try:
            self.collector.observe(items)
        except Exception:
            health["batches_rejected_malformed"] += 1

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close(linger=0)
