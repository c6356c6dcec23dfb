"""OTLP JSON span exports in: SGLang's speculative stage spans, specscope's own request spans.

The SGLang export below is built from SGLang's tracing code as it reads: the root span of a
request carries ``rid`` and ``gen_ai.*`` (tokenizer_manager's span attributes and
req_time_stats' ``gen_ai.latency.*``), a thread span under it ``tp_rank`` and the like, the
stage spans ``spec_draft``, ``spec_verify`` (``num_correct_drafts`` and its alias
``accepted_tokens``, bonus excluded) and ``spec_draft_extend`` under that, and schedule events
with ``bid``, ``batch_size`` and ``forward_mode``; the first version of its speculative
tracing (sglang #19545) recorded each verify's count as a ``spec_accept`` event instead.
"""

from __future__ import annotations

import json

from specscope import schema
from specscope.importers import detect, import_file

T0 = 1_764_700_000_000_000_000


def _kv(d):
    out = []
    for k, v in d.items():
        if isinstance(v, bool):
            out.append({"key": k, "value": {"boolValue": v}})
        elif isinstance(v, int):
            out.append({"key": k, "value": {"intValue": str(v)}})
        elif isinstance(v, float):
            out.append({"key": k, "value": {"doubleValue": v}})
        elif isinstance(v, list):
            out.append({"key": k, "value": {"arrayValue": {"values": [{"stringValue": x} for x in v]}}})
        else:
            out.append({"key": k, "value": {"stringValue": v}})
    return out


def _span(trace, sid, parent, name, t0_ms, t1_ms, attrs=None, events=()):
    return {"traceId": trace, "spanId": sid, "parentSpanId": parent, "name": name, "kind": 1,
            "startTimeUnixNano": str(T0 + t0_ms * 1_000_000), "endTimeUnixNano": str(T0 + t1_ms * 1_000_000),
            "attributes": _kv(attrs or {}), "events": list(events)}


def _doc(spans, service="sglang"):
    return {"resourceSpans": [{"resource": {"attributes": _kv({"service.name": service})},
                               "scopeSpans": [{"scope": {"name": "sglang"}, "spans": spans}]}]}


def _request(trace, rid, per_step, *, events_only=False):
    root = _span(trace, "r" + trace[:15], "", f"Req {rid[:8]}", 0, 400, {
        "rid": rid, "module": "sglang::request", "gen_ai.request.temperature": 0.7,
        "gen_ai.request.top_p": 0.9, "gen_ai.request.max_tokens": 64,
        # SGLang writes the OpenAI request's own "top_k off" (-1) where the request left it out
        "gen_ai.request.top_k": -1, "gen_ai.response.model": "qwen3-8b", "gen_ai.response.finish_reasons": ["length"],
        "gen_ai.usage.prompt_tokens": 21, "gen_ai.usage.completion_tokens": 3 * len(per_step) + 1,
        "gen_ai.latency.time_to_first_token": 0.05, "gen_ai.latency.e2e": 0.4})
    thread = _span(trace, "t" + trace[:15], root["spanId"], "Scheduler", 1, 399,
                   {"tp_rank": 0, "pp_rank": 0, "dp_rank": 0, "pid": 4242, "thread_label": "scheduler"},
                   events=[{"timeUnixNano": str(T0), "name": "schedule",
                            "attributes": _kv({"bid": "b1", "batch_size": 2, "forward_mode": "TARGET_VERIFY"})}])
    spans = [root, thread]
    for i, n in enumerate(per_step):
        t = 60 + i * 100
        spans.append(_span(trace, f"d{i}" + trace[:14], thread["spanId"], "spec_draft", t, t + 20))
        if events_only:
            verify = _span(trace, f"v{i}" + trace[:14], thread["spanId"], "spec_verify", t + 20, t + 60,
                           events=[{"timeUnixNano": str(T0 + (t + 60) * 1_000_000), "name": "spec_accept",
                                    "attributes": _kv({"accepted_tokens": n})}])
        else:
            verify = _span(trace, f"v{i}" + trace[:14], thread["spanId"], "spec_verify", t + 20, t + 60,
                           {"num_correct_drafts": n, "accepted_tokens": n})
        spans.append(verify)
        spans.append(_span(trace, f"e{i}" + trace[:14], thread["spanId"], "spec_draft_extend", t + 60, t + 70))
    return spans


def test_sglang_speculative_spans_import_to_the_acceptance_they_carry(tmp_path):
    path = tmp_path / "otel-export.jsonl"
    lines = [json.dumps(_doc(_request("a" * 32, "req-one-0001", [2, 0, 3]))),
             "{this line was cut when the collector was killed",
             json.dumps(_doc(_request("b" * 32, "req-two-0002", [1, 1], events_only=True))),
             json.dumps(_doc([_span("c" * 32, "x" * 16, "", "http.request", 0, 5, {"http.method": "POST"})]))]
    path.write_text("\n".join(lines) + "\n")
    assert detect(path) == "otlp-json"
    res = import_file(path)
    assert [(p.line, p.message[:8]) for p in res.problems] == [(2, "not JSON")]
    reqs = {r.request_id: r for r in res.records if isinstance(r, schema.RequestRecord)}
    one, two = reqs["req-one-0001"], reqs["req-two-0002"]
    assert (one.num_verify_steps, one.num_accepted, one.num_draft_tokens) == (3, 5, None)
    assert one.acceptance_length == (5 + 3) / 3 and one.accept_len_hist == (0, 1, 0, 1, 1)
    assert (two.num_verify_steps, two.num_accepted) == (2, 2)  # from spec_accept events
    assert one.ttft_s == 0.05 and one.e2e_s == 0.4 and one.temperature == 0.7 and one.top_p == 0.9
    assert one.top_k == 0  # off, in the records' terms
    assert (one.num_prompt_tokens, one.num_output_tokens, one.finish_reason) == (21, 10, "length")
    (counts,) = [r for r in res.records if isinstance(r, schema.SpecCountsRecord)]
    assert (counts.num_drafts, counts.num_accepted, counts.num_draft_tokens) == (5, 7, None)
    phases = [r for r in res.records if isinstance(r, schema.PhaseRecord)]
    assert sorted({p.phase for p in phases}) == ["draft", "draft_extend", "verify"]
    assert sum(p.phase == "verify" for p in phases) == 5
    assert all(p.duration_ns == 40_000_000 for p in phases if p.phase == "verify")
    assert "1 http.request" in res.traps["other-spans"]
    (run,) = [r for r in res.records if isinstance(r, schema.RunRecord)]
    assert run.model == "qwen3-8b" and run.engine == "sglang"

    from specscope.collector.report import build_report

    (section,) = build_report(res.records)["runs"]
    assert section["totals"]["mean_acceptance_length"] == (7 + 5) / 5  # bonus included
    assert section["totals"]["acceptance_rate"] is None  # drafted is in no span


def test_vllm_llm_request_spans_become_request_timelines(tmp_path):
    """vLLM 0.32's ``llm_request`` span (vllm/tracing/utils.py names its attributes): a request
    timeline with no speculative figure, which stays unknown."""
    span = _span("d" * 32, "s" * 16, "", "llm_request", 0, 900, {
        "gen_ai.request.id": "cmpl-7", "gen_ai.response.model": "SmolLM2-135M-Instruct",
        "gen_ai.request.temperature": 0.0, "gen_ai.request.top_p": 1.0, "gen_ai.request.max_tokens": 32,
        "gen_ai.usage.prompt_tokens": 12, "gen_ai.usage.completion_tokens": 32,
        "gen_ai.latency.time_in_queue": 0.01, "gen_ai.latency.time_to_first_token": 0.12,
        "gen_ai.latency.e2e": 0.9})
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(_doc([span], service="vllm"), indent=2))
    res = import_file(path)
    (r,) = [x for x in res.records if isinstance(x, schema.RequestRecord)]
    assert r.request_id == "cmpl-7" and r.ttft_s == 0.12 and r.e2e_s == 0.9
    assert (r.num_verify_steps, r.num_accepted, r.num_draft_tokens) == (None, None, None)
    assert not [x for x in res.records if isinstance(x, schema.SpecCountsRecord)]
