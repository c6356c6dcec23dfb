"""``specscope serve``: the collector as a standalone service (wire in, /metrics and a trace out).

Never imports torch or dash.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Sequence

from ..collector.service import Collector
from ..io.transport import ZmqReceiver


def serve(*, listen: str, metrics_host: str = "127.0.0.1", metrics_port: int = 9400,
          trace: str | None = None, trace_roll_s: float = 10.0, basic_auth: tuple[str, str] | None = None,
          tls: tuple[str, str] | None = None, max_label_sets: int = 64,
          stop: threading.Event | None = None, sinks: Sequence[Any] = (),
          node_label: bool | None = None) -> int:
    """Receive, aggregate and export until SIGINT/SIGTERM (or ``stop`` is set); ``sinks``
    (an OTLP sink, ...) get every record as the trace does."""
    from .http import MetricsServer

    sinks = list(sinks)
    if trace:
        from ..io.trace import open_writer

        sinks.append(open_writer(trace, roll_s=trace_roll_s))
    collector = Collector(sinks=sinks, max_label_sets=max_label_sets, node_label=node_label).start()
    receiver = ZmqReceiver(collector, listen).start()
    server = MetricsServer(collector, host=metrics_host, port=metrics_port,
                           basic_auth=basic_auth, tls=tls).start()
    stop = stop or threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"collector listening on {receiver.endpoint}; metrics at {server.url}", flush=True)
    stop.wait()
    receiver.close()
    server.close()
    collector.close()
    print("collector stopped", flush=True)
    return 0
