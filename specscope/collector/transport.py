"""Record batches between engine processes and a collector over ZeroMQ (PUSH -> PULL).

Never imports torch or dash. A batch is one JSON message ``{"v": SCHEMA_VERSION, "pid": PID,
"records": [...]}``. The engine side never blocks: a full send queue drops the batch and counts
it. The collector side rejects oversized, malformed or wrong-version batches and counts them
by reason, then goes on.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Sequence

from .. import schema

MAX_MESSAGE_BYTES = 16 * 2**20


def _zmq():
    try:
        import zmq
    except ImportError:
        raise SystemExit("the collector transport needs pyzmq: pip install 'specscope[collector]'") from None
    return zmq


class ZmqSink:
    """Recorder sink that pushes record batches to a collector; never blocks, drops and counts."""

    def __init__(self, endpoint: str, *, high_water_mark: int = 1000) -> None:
        zmq = _zmq()
        self._zmq = zmq
        self._ctx = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PUSH)
        self._sock.setsockopt(zmq.SNDHWM, high_water_mark)
        self._sock.setsockopt(zmq.LINGER, 2000)  # on close, up to 2 s to flush what is queued
        self._sock.connect(endpoint)
        self._lock = threading.Lock()
        self.num_sent = 0
        self.num_dropped = 0

    def write(self, records: Sequence[Any]) -> None:
        if not records:
            return
        msg = json.dumps({"v": schema.SCHEMA_VERSION, "pid": os.getpid(),
                          "records": [schema.to_dict(r) for r in records]},
                         separators=(",", ":")).encode()
        with self._lock:
            try:
                self._sock.send(msg, flags=self._zmq.NOBLOCK)
                self.num_sent += len(records)
            except self._zmq.Again:
                self.num_dropped += len(records)

    def close(self) -> None:
        with self._lock:
            self._sock.close()


def decode_batch(msg: bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> tuple[int, list[Any], int]:
    """(sender pid, records, records skipped) of one message; raises ValueError if unusable."""
    if len(msg) > max_bytes:
        raise ValueError("oversized")
    try:
        data = json.loads(msg)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError("malformed") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ValueError("malformed")
    if data.get("v") not in schema.READABLE_VERSIONS:
        raise ValueError("version")
    pid = data.get("pid") if isinstance(data.get("pid"), int) else 0
    records, skipped = [], 0
    for item in data["records"]:
        try:
            records.append(schema.from_dict(item))
        except (schema.SchemaError, TypeError, ValueError):
            skipped += 1
    return pid, records, skipped


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
                    msg = self._sock.recv(flags=self._zmq.NOBLOCK)
                except self._zmq.Again:
                    break
                self.handle(msg)

    def handle(self, msg: bytes) -> None:
        """Decode one message into the collector; bad input is counted, never raised."""
        health = self.collector.health
        try:
            pid, records, skipped = decode_batch(msg, self.max_bytes)
        except ValueError as exc:
            health[f"batches_rejected_{exc}"] += 1
            return
        except Exception:
            health["batches_rejected_malformed"] += 1
            return
        if pid:
            self.collector.note_process(pid, "engine")
        health["records_rejected"] += skipped
        health["batches_received"] += 1
        try:
            self.collector.observe(records)
        except Exception:
            health["batches_rejected_malformed"] += 1

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close(linger=0)
