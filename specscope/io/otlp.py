"""OpenTelemetry out: every finished request a span with its speculative figures, over OTLP.

``OtlpSink`` is a sink like the trace writer and the ZeroMQ sink (``write(records)``,
``close()``): records become spans in the caller's thread (a dict lookup and a small object per
request) and a background thread sends them in batches, OTLP/HTTP (protobuf, ``http://`` or
``https://`` endpoints; ``/v1/traces`` and ``/v1/metrics`` appended unless the path names one)
or OTLP/gRPC (``grpc://host:port``). The queue is bounded: a backend that is down, slow or
refusing never blocks the engine and never raises into it; what the queue cannot hold, and
what a failed export loses, is counted (``stats()``) and sent as OTLP metrics with the run's
totals once the backend answers again.

One span per request (``specscope.request``), its start the request's arrival and its end the
finish; OpenTelemetry GenAI attributes where they fit and ``specscope.spec.*`` for the rest
(``ATTRIBUTES``, each with its unit); TTFT as an event; sampled verify steps (one in
``step_every`` per request, the first always) as events; each anomaly a span of its own
(``specscope.anomaly``) whose event carries the evidence. Unknown figures are left out, never
sent as 0. The resource names the run: ``service.name``, engine, model, configuration, and the node as
``host.name``.
"""

from __future__ import annotations

import collections
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Sequence

from .. import schema

#: attribute -> (unit, meaning): the contract a backend's queries rely on (README's table)
ATTRIBUTES: dict[str, tuple[str, str]] = {
    "gen_ai.operation.name": ("", "always `text_completion`"),
    "gen_ai.request.model": ("", "the run's target model"),
    "gen_ai.request.temperature": ("", "requested temperature (0 = greedy)"),
    "gen_ai.request.top_p": ("", "requested top-p (1 = off)"),
    "gen_ai.request.top_k": ("", "requested top-k (0 = off)"),
    "gen_ai.response.id": ("", "the request id"),
    "gen_ai.response.finish_reasons": ("", "[finish reason]"),
    "gen_ai.usage.input_tokens": ("tokens", "prompt tokens"),
    "gen_ai.usage.output_tokens": ("tokens", "output tokens"),
    "specscope.run_id": ("", "the run the request belongs to"),
    "specscope.spec.algorithm": ("", "eagle, draft-model, ngram, ... (`none`: target-only)"),
    "specscope.spec.k": ("tokens", "configured draft depth (num_speculative_tokens)"),
    "specscope.spec.verify_steps": ("steps", "verify steps the request took part in"),
    "specscope.spec.draft_tokens": ("tokens", "draft tokens proposed for it"),
    "specscope.spec.accepted_tokens": ("tokens", "of those, accepted (bonus token excluded)"),
    "specscope.spec.acceptance_length": ("tokens/step", "(accepted + steps) / steps: bonus included"),
    "specscope.spec.acceptance_rate": ("1", "accepted / drafted, from the request's counters"),
    "specscope.spec.mode_requested": ("", "greedy, speculative-sampling, ... as the request asked"),
    "specscope.spec.mode_used": ("", "what verify used for it (a mismatch is the silent-greedy bug)"),
    "specscope.spec.fallbacks": ("events", "sampling fallbacks recorded for the request"),
    "specscope.latency.ttft_s": ("s", "arrival to first token"),
    "specscope.latency.tpot_s": ("s", "mean time per output token after the first"),
    "specscope.latency.e2e_s": ("s", "arrival to finish"),
}

#: a request's verify steps kept for events until it finishes; the rest counted, not kept
MAX_STEP_EVENTS = 64
#: the run totals sent as metrics, in the order a queued span carries its part of them
TOTALS = ("requests", "verify_steps", "draft_tokens", "accepted_tokens")
#: requests followed at once (steps seen, mode used, events): a source that never reports its
#: requests finishing must not grow the sink without bound; the oldest tenth is forgotten
MAX_OPEN_REQUESTS = 50_000


@dataclass
class OtlpStats:
    spans_queued: int = 0
    spans_sent: int = 0
    dropped_queue_full: int = 0  #: spans the bounded queue could not hold
    dropped_export_failed: int = 0  #: spans of batches the backend did not take
    export_errors: int = 0
    last_error: str = ""
    write_s: float = 0.0  #: time spent in write() (the recorder's or collector's flush thread)
    sender_cpu_s: float = 0.0  #: CPU time of the sending thread (encoding and export)
    requests_forgotten: int = 0  #: followed requests dropped unfinished (MAX_OPEN_REQUESTS)
    metrics: str = ""  #: "sent", "not accepted" (the backend has no metrics receiver), "failed: ..."
    runs: dict[str, dict[str, int]] = field(default_factory=dict)  #: run -> totals sent as metrics


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"bool_value": v}
    if isinstance(v, int):
        return {"int_value": v}
    if isinstance(v, float):
        return {"double_value": v}
    if isinstance(v, (list, tuple)):
        return {"array_value": {"values": [_value(x) for x in v]}}
    return {"string_value": str(v)}


def _attrs(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in d.items() if v is not None]


def _mode(temperature: float) -> str:
    return schema.GREEDY if temperature <= 0 else schema.SPECULATIVE_SAMPLING


class OtlpSink:
    """Records in, OTLP spans and metrics out, off the caller's thread."""

    takes_anomalies = True  #: a collector hands it each anomaly when it starts

    def __init__(self, endpoint: str, *, max_queue: int = 4096, batch: int = 256,
                 interval_s: float = 1.0, timeout_s: float = 5.0, step_every: int = 16,
                 service_name: str = "specscope", headers: dict[str, str] | None = None) -> None:
        url = urllib.parse.urlparse(endpoint)
        if url.scheme not in ("http", "https", "grpc"):
            raise ValueError(f"OTLP endpoint {endpoint!r}: give http(s)://host:port for OTLP/HTTP "
                             "or grpc://host:port for OTLP/gRPC")
        self.endpoint, self.grpc = endpoint, url.scheme == "grpc"
        # what the sender needs, found now rather than in its thread (pip install 'specscope[otlp]')
        import google.protobuf  # noqa: F401
        import opentelemetry.proto.trace.v1.trace_pb2  # noqa: F401
        if self.grpc:
            import grpc  # noqa: F401
        self.max_queue, self.batch, self.interval_s = max_queue, batch, interval_s
        self.timeout_s, self.step_every, self.headers = timeout_s, max(1, step_every), headers or {}
        self.service_name = service_name
        self.stats = OtlpStats()
        self._queue: collections.deque = collections.deque()
        self._runs: dict[str, schema.RunRecord] = {}
        self._steps: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._seen: dict[tuple[str, str], list[int]] = {}  # [verify steps seen] per request
        self._used: dict[tuple[str, str], str] = {}
        self._fallbacks: collections.Counter = collections.Counter()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._channel = None
        self._thread = threading.Thread(target=self._loop, name="specscope-otlp", daemon=True)
        self._thread.start()

    # -- the caller's side: never blocks, never raises ---------------------------------------
    def write(self, records: Sequence[Any]) -> None:
        t0 = time.perf_counter()
        try:
            for r in records:
                self._take(r)
        except Exception as exc:  # a sink must not raise into the engine
            self.stats.last_error = f"encoding: {exc!r}"
            self.stats.export_errors += 1
        self.stats.write_s += time.perf_counter() - t0

    def _take(self, r: Any) -> None:
        if getattr(r, "has_detail", False):  # a recorder's columnar verify steps
            for step in r.to_records():
                self._take(step)
        elif isinstance(r, schema.RunRecord):
            self._runs.setdefault(r.run_id, r)
        elif isinstance(r, schema.VerifyStepRecord):
            if len(self._seen) > MAX_OPEN_REQUESTS:
                self._forget(MAX_OPEN_REQUESTS // 10)
            for e in r.entries:
                key = (r.run_id, e.request_id)
                seen = self._seen.setdefault(key, [0])
                if seen[0] % self.step_every == 0 and len(self._steps.get(key, ())) < MAX_STEP_EVENTS:
                    self._steps.setdefault(key, []).append({
                        "name": "specscope.verify_step", "time_unix_nano": r.t_ns,
                        "attributes": _attrs({"step": r.step, "batch_size": r.batch_size,
                                              "drafted": e.num_drafted, "accepted": e.num_accepted,
                                              "draft_depth": r.draft_depth, "mode_used": e.mode_used})})
                seen[0] += 1
                if e.mode_used != e.mode_requested or key not in self._used:
                    self._used[key] = e.mode_used
        elif isinstance(r, schema.FallbackRecord) and r.request_id:
            self._fallbacks[(r.run_id, r.request_id)] += r.count
        elif isinstance(r, schema.RequestRecord):
            self._enqueue(r.run_id, self._request_span(r), (1, r.num_verify_steps or 0,
                                                             r.num_draft_tokens or 0,
                                                             r.num_accepted or 0))
        elif isinstance(r, schema.AnomalyRecord):
            self._enqueue(r.run_id, self._anomaly_span(r))

    def _forget(self, n: int) -> None:
        for key in list(self._seen)[:n]:
            for d in (self._seen, self._steps, self._used):
                d.pop(key, None)
            self._fallbacks.pop(key, None)
        self.stats.requests_forgotten += n

    def _enqueue(self, run_id: str, span: dict[str, Any],
                 counts: tuple[int, int, int, int] = (0, 0, 0, 0)) -> None:
        """``counts``: what the span adds to its run's totals once sent (requests, verify
        steps, drafted, accepted)."""
        with self._lock:
            if len(self._queue) >= self.max_queue:
                self.stats.dropped_queue_full += 1
                return
            self._queue.append((run_id, span, counts))
            self.stats.spans_queued += 1
        if len(self._queue) >= self.batch:
            self._wake.set()

    def _request_span(self, r: schema.RequestRecord) -> dict[str, Any]:
        key = (r.run_id, r.request_id)
        run = self._runs.get(r.run_id)
        steps, drafted, accepted = r.num_verify_steps, r.num_draft_tokens, r.num_accepted
        rate = accepted / drafted if drafted and accepted is not None else None
        attrs = {
            "gen_ai.operation.name": "text_completion",
            "gen_ai.request.model": run.model if run else None,
            "gen_ai.request.temperature": float(r.temperature), "gen_ai.request.top_p": float(r.top_p),
            "gen_ai.request.top_k": int(r.top_k), "gen_ai.response.id": r.request_id,
            "gen_ai.response.finish_reasons": [r.finish_reason] if r.finish_reason else None,
            "gen_ai.usage.input_tokens": r.num_prompt_tokens,
            "gen_ai.usage.output_tokens": r.num_output_tokens,
            "specscope.run_id": r.run_id,
            "specscope.spec.algorithm": (run.algorithm if run.num_steps else "none") if run else None,
            "specscope.spec.k": run.num_steps if run else None,
            "specscope.spec.verify_steps": steps, "specscope.spec.draft_tokens": drafted,
            "specscope.spec.accepted_tokens": accepted, "specscope.spec.acceptance_length": r.acceptance_length,
            "specscope.spec.acceptance_rate": rate,
            "specscope.spec.mode_requested": _mode(r.temperature),
            "specscope.spec.mode_used": self._used.pop(key, None),
            "specscope.spec.fallbacks": self._fallbacks.pop(key, 0),
            "specscope.latency.ttft_s": r.ttft_s, "specscope.latency.tpot_s": r.tpot_s,
            "specscope.latency.e2e_s": r.e2e_s,
        }
        self._seen.pop(key, None)
        events = []
        if r.t_first_token_ns:
            events.append({"name": "gen_ai.first_token", "time_unix_nano": r.t_first_token_ns,
                           "attributes": _attrs({"specscope.latency.ttft_s": r.ttft_s})})
        events += self._steps.pop(key, [])
        return {"name": "specscope.request", "kind": 2, "start_time_unix_nano": r.t_arrival_ns,
                "end_time_unix_nano": r.t_finish_ns or r.t_arrival_ns,
                "attributes": _attrs(attrs), "events": events}

    @staticmethod
    def _anomaly_span(a: schema.AnomalyRecord) -> dict[str, Any]:
        t = a.t_ns or time.time_ns()
        evidence = {f"specscope.evidence.{k}": v for k, v in a.evidence.items()
                    if isinstance(v, (int, float, str, bool))}
        return {"name": "specscope.anomaly", "kind": 1, "start_time_unix_nano": t,
                "end_time_unix_nano": t,
                "attributes": _attrs({"specscope.run_id": a.run_id, "specscope.anomaly.kind": a.kind,
                                      "specscope.anomaly.severity": a.severity}),
                "events": [{"name": f"specscope.anomaly.{a.kind}", "time_unix_nano": t,
                            "attributes": _attrs({"message": a.message, **evidence})}]}

    # -- the sender's side --------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            t0 = time.thread_time()
            self._flush()
            self.stats.sender_cpu_s += time.thread_time() - t0
            if self._closed and not self._queue:
                return

    def _flush(self) -> None:
        while True:
            with self._lock:
                items = [self._queue.popleft() for _ in range(min(self.batch, len(self._queue)))]
            if not items:
                return
            try:
                self._send("traces", _traces_request(items, self._runs, self.service_name))
            except Exception as exc:  # down, slow, refusing: counted, never raised
                self.stats.export_errors += 1
                self.stats.dropped_export_failed += len(items)
                self.stats.last_error = repr(exc)[:300]
                return
            self.stats.spans_sent += len(items)
            for run_id, _, counts in items:
                t = self.stats.runs.setdefault(run_id, dict.fromkeys(TOTALS, 0))
                for name, n in zip(TOTALS, counts):
                    t[name] += n
            self._send_metrics()

    def _send_metrics(self) -> None:
        """The run totals and the sink's own counters; a backend without a metrics receiver
        (404, 405, gRPC UNIMPLEMENTED) is asked once, then left alone."""
        if self.stats.metrics == "not accepted":
            return
        try:
            self._send("metrics", _metrics_request(self.stats, self._runs, self.service_name))
            self.stats.metrics = "sent"
        except urllib.error.HTTPError as exc:
            self.stats.metrics = "not accepted" if exc.code in (404, 405) else f"failed: {exc}"
        except Exception as exc:
            unimplemented = "UNIMPLEMENTED" in repr(exc)
            self.stats.metrics = "not accepted" if unimplemented else f"failed: {exc!r}"[:300]

    def _send(self, what: str, message: Any) -> None:
        if self.grpc:
            return self._send_grpc(what, message)
        url = self.endpoint.rstrip("/")
        if not url.endswith(("/v1/traces", "/v1/metrics")):
            url += f"/v1/{what}"
        elif what == "metrics":
            url = url.rsplit("/v1/", 1)[0] + "/v1/metrics"
        req = urllib.request.Request(url, data=message.SerializeToString(), method="POST",
                                     headers={"Content-Type": "application/x-protobuf", **self.headers})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            resp.read()

    def _send_grpc(self, what: str, message: Any) -> None:
        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        if self._channel is None:
            self._channel = grpc.insecure_channel(urllib.parse.urlparse(self.endpoint).netloc)
        stub = (trace_service_pb2_grpc.TraceServiceStub if what == "traces"
                else metrics_service_pb2_grpc.MetricsServiceStub)(self._channel)
        stub.Export(message, timeout=self.timeout_s, metadata=tuple(self.headers.items()) or None)

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued (up to ``timeout_s``), then stop; what is left is counted."""
        self._closed = True
        self._wake.set()
        self._thread.join(timeout_s)
        with self._lock:
            self.stats.dropped_queue_full += len(self._queue)
            self._queue.clear()
        if self._channel is not None:
            self._channel.close()


def _resource(run_id: str, run: schema.RunRecord | None, service: str) -> dict[str, Any]:
    attrs: dict[str, str | None] = {"service.name": service, "specscope.run_id": run_id}
    if run is not None:
        attrs.update({"specscope.engine": run.engine or None, "specscope.engine_version":
                      run.engine_version or None, "specscope.model": run.model,
                      "specscope.draft_model": run.draft_model or None,
                      "specscope.config_id": run.config_id,
                      "host.name": run.node or None})  # OTel's resource convention
    return {"attributes": _attrs(attrs)}


def _traces_request(items: list[tuple[str, dict[str, Any]]], runs: dict[str, schema.RunRecord],
                    service: str) -> Any:
    import os

    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    by_run: dict[str, list[dict[str, Any]]] = {}
    for run_id, span, *_ in items:
        span = dict(span, trace_id=os.urandom(16), span_id=os.urandom(8))
        by_run.setdefault(run_id, []).append(span)
    msg = ExportTraceServiceRequest()
    for run_id, spans in by_run.items():
        rs = msg.resource_spans.add()
        json_format.ParseDict(_resource(run_id, runs.get(run_id), service), rs.resource)
        ss = rs.scope_spans.add()
        ss.scope.name = "specscope"
        for span in spans:
            s = ss.spans.add()
            tid, sid = span.pop("trace_id"), span.pop("span_id")
            json_format.ParseDict(span, s, ignore_unknown_fields=False)
            s.trace_id, s.span_id = tid, sid
    return msg


def _metrics_request(stats: OtlpStats, runs: dict[str, schema.RunRecord], service: str) -> Any:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    now = time.time_ns()

    def total(name: str, value: int, unit: str, desc: str) -> dict[str, Any]:
        return {"name": name, "unit": unit, "description": desc,
                "sum": {"aggregation_temporality": 2, "is_monotonic": True,
                        "data_points": [{"as_int": value, "time_unix_nano": now}]}}

    msg = ExportMetricsServiceRequest()
    for run_id, t in stats.runs.items():
        rm = msg.resource_metrics.add()
        json_format.ParseDict(_resource(run_id, runs.get(run_id), service), rm.resource)
        sm = rm.scope_metrics.add()
        sm.scope.name = "specscope"
        for name, unit in (("requests", "{request}"), ("verify_steps", "{step}"),
                           ("draft_tokens", "{token}"), ("accepted_tokens", "{token}")):
            json_format.ParseDict(total(f"specscope.spec.{name}", t[name], unit,
                                        f"sum over the run's requests sent so far ({name})"),
                                  sm.metrics.add())
    rm = msg.resource_metrics.add()
    json_format.ParseDict({"attributes": _attrs({"service.name": service})}, rm.resource)
    sm = rm.scope_metrics.add()
    sm.scope.name = "specscope.otlp"
    for name, value in (("dropped_queue_full", stats.dropped_queue_full),
                        ("dropped_export_failed", stats.dropped_export_failed),
                        ("spans_sent", stats.spans_sent)):
        json_format.ParseDict(total(f"specscope.otlp.{name}", value, "{span}",
                                    "spans the OTLP sink " + name.replace("_", " ")), sm.metrics.add())
    return msg
