"""The OTLP sink on its own (no backend): unknown figures left out, a bounded queue whose
losses are counted, requests that never finish forgotten within a bound."""

from __future__ import annotations

from specscope import schema
from specscope.io import otlp
from specscope.io.otlp import OtlpSink


def _req(i, **kw):
    return schema.RequestRecord(run_id="r", rank=0, request_id=f"q{i}", t_arrival_ns=10, t_first_token_ns=0,
                                t_finish_ns=0, num_prompt_tokens=5, num_output_tokens=3, **kw)


def _dead():
    from specscope.serving.harness import free_port

    return f"http://127.0.0.1:{free_port()}"  # nothing listens: every export is refused


def test_unknown_figures_are_left_out_never_sent_as_zero():
    sink = OtlpSink(_dead(), interval_s=60)
    try:
        sink.write([_req(0), _req(1, num_verify_steps=4, num_draft_tokens=12, num_accepted=6)])
        (_, unknown, _), (_, known, _) = list(sink._queue)
        msg = otlp._traces_request([("r", unknown), ("r", known)], {}, "svc")
        a, b = ({kv.key for kv in s.attributes} for s in msg.resource_spans[0].scope_spans[0].spans)
        for key in ("specscope.spec.verify_steps", "specscope.spec.draft_tokens",
                    "specscope.spec.acceptance_length", "specscope.spec.acceptance_rate",
                    "specscope.latency.ttft_s", "specscope.latency.e2e_s"):
            assert key not in a, key
        assert {"specscope.spec.acceptance_length", "specscope.spec.acceptance_rate"} <= b
        spans = msg.resource_spans[0].scope_spans[0].spans
        assert len(spans[0].trace_id) == 16 and spans[0].trace_id != spans[1].trace_id
    finally:
        sink.close(timeout_s=5)


def test_a_full_queue_and_a_dead_backend_lose_spans_counted_once():
    sink = OtlpSink(_dead(), max_queue=5, batch=1000, interval_s=60, timeout_s=1)
    sink.write([_req(i) for i in range(8)])
    assert sink.stats.spans_queued == 5 and sink.stats.dropped_queue_full == 3
    sink.close(timeout_s=10)
    s = sink.stats
    assert s.spans_sent == 0 and s.dropped_export_failed + s.dropped_queue_full == 8
    assert "refused" in s.last_error.lower() or "URLError" in s.last_error


def test_requests_that_never_finish_are_forgotten_within_a_bound(monkeypatch):
    monkeypatch.setattr(otlp, "MAX_OPEN_REQUESTS", 100)
    sink = OtlpSink(_dead(), interval_s=60)
    try:
        for i in range(300):
            sink.write([schema.VerifyStepRecord(
                run_id="r", config_id="c", rank=0, step=i, t_ns=i, batch_size=1,
                entries=(schema.VerifyEntry(request_id=f"q{i}", num_drafted=2, num_draft_tokens=2,
                                            num_accepted=1, accepted_per_pos=(1, 0), temperature=0.0),))])
        assert len(sink._seen) <= 101 and sink.stats.requests_forgotten >= 190
    finally:
        sink.close(timeout_s=5)


def test_a_bad_endpoint_is_refused_with_what_to_give():
    import pytest

    with pytest.raises(ValueError, match="grpc://host:port"):
        OtlpSink("127.0.0.1:4317")


def test_the_resource_names_the_node_as_host_name():
    import dataclasses

    run = schema.RunRecord(run_id="r", config_id="c", algorithm="eagle", num_steps=3, topk=1,
                           num_verify_tokens=4, backend="cuda", model="m", node="gpu-07")

    def resource(r):
        span = {"traceId": "0" * 32, "spanId": "0" * 16, "name": "s"}
        msg = otlp._traces_request([("r", span)], {"r": r}, "svc")
        return {kv.key: kv.value.string_value for kv in msg.resource_spans[0].resource.attributes}

    assert resource(run)["host.name"] == "gpu-07" and resource(run)["specscope.run_id"] == "r"
    assert "host.name" not in resource(dataclasses.replace(run, node=""))  # unknown: left out
