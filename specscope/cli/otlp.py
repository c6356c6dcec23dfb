"""``--otlp``: the flags, the sink they ask for, and what it sent and lost (a thin shell over
``specscope.io.otlp``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def otlp_sink(args: argparse.Namespace) -> Any:
    """The OTLP sink ``--otlp`` asks for (None without it)."""
    if not getattr(args, "otlp", None):
        return None
    from ..io.otlp import OtlpSink

    return OtlpSink(args.otlp, service_name=args.otlp_service)


def report_otlp(sink: Any) -> None:
    """What the OTLP sink sent and lost, on stderr (after it closed)."""
    if sink is None:
        return
    s = sink.stats
    lost = s.dropped_queue_full + s.dropped_export_failed
    print(f"otlp {sink.endpoint}: {s.spans_sent} spans sent, {lost} lost ({s.dropped_queue_full} "
          f"queue full, {s.dropped_export_failed} export failed){'; ' + s.last_error if lost else ''}"
          f"; metrics {s.metrics or 'not sent'}", file=sys.stderr)


def add_otlp_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--otlp", metavar="ENDPOINT", default=None,
                   help="also send each request as an OpenTelemetry span (and anomalies, run "
                   "totals as metrics) to an OTLP receiver: http://host:4318 (OTLP/HTTP "
                   "protobuf) or grpc://host:4317; never blocks, losses counted")
    p.add_argument("--otlp-service", default="specscope", help="the spans' service.name")
