"""OpenTelemetry in: OTLP JSON span exports (the SDK's file exporter, the Collector's ``file``
exporter: one ``{"resourceSpans": [...]}`` document per line, or one whole document).

What each engine's spans give, from their sources:
- SGLang (``--enable-trace``; speculative stages since sglang #19545): a request's spans share
  one trace; its root span carries ``rid`` and ``gen_ai.*`` (usage, request, latency); each verify
  step is a ``spec_verify`` span with ``num_correct_drafts`` (its older name ``accepted_tokens``:
  draft tokens accepted, bonus excluded), drafting a ``spec_draft`` span, the draft's catch-up a
  ``spec_draft_extend`` span; the first version recorded the accepted count as a ``spec_accept``
  event instead. Steps and accepted tokens become the request's figures and the run's pooled
  counts; the spans' durations become phases (``draft``, ``verify``, ``draft_extend``). The
  drafted count is in no span: acceptance length is known, the acceptance rate stays unknown.
- vLLM (``--otlp-traces-endpoint``): one ``llm_request`` span per request, ``gen_ai.usage.*``,
  ``gen_ai.latency.*``, ``gen_ai.request.*``, no speculative attribute: request timelines only.
- specscope's own ``specscope.request`` spans (``--otlp``): their ``specscope.spec.*`` figures.

Every other span is skipped and counted (trap ``other-spans``); a line that is not JSON is a
problem naming the file and line, and the lines around it still import.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from .. import sampling, schema
from ._common import ImportResult, run_record

FORMAT = "otlp-json"
#: SGLang's stage spans -> specscope phases
PHASES = {"spec_draft": "draft", "spec_verify": "verify", "spec_draft_extend": "draft_extend"}
REQUEST_SPANS = ("llm_request", "specscope.request")


def sniff(obj: Any) -> bool:
    return isinstance(obj, dict) and ("resourceSpans" in obj or "resource_spans" in obj)


def _value(v: dict[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:  # int64 travels as a JSON string
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return None


def _attrs(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {a["key"]: _value(a.get("value") or {}) for a in items or () if "key" in a}


def _documents(path: Path, res: ImportResult) -> Iterator[dict[str, Any]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        yield json.loads(text)
        res.lines_read = text.count("\n") + 1
        return
    except json.JSONDecodeError:
        pass
    for n, line in enumerate(text.splitlines(), 1):
        res.lines_read = n
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            res.problems.append(schema.Problem(str(path), n, f"not JSON: {exc.msg}"))
            continue
        if sniff(doc):
            yield doc
        else:
            res.problems.append(schema.Problem(str(path), n, "no resourceSpans in this line"))


def _spans(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for rs in doc.get("resourceSpans") or doc.get("resource_spans") or ():
        resource = _attrs((rs.get("resource") or {}).get("attributes"))
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or ():
            for span in ss.get("spans") or ():
                yield resource, span


def _ns(span: dict[str, Any], key: str) -> int:
    return int(span.get(key) or 0)


def _is_request(span: dict[str, Any], attrs: dict[str, Any]) -> bool:
    return span.get("name") in REQUEST_SPANS or "rid" in attrs


def parse(path: Path, run_id: str) -> ImportResult:
    res = ImportResult(FORMAT)
    traces: dict[str, list[tuple[dict, dict, dict]]] = {}
    for doc in _documents(path, res):
        for resource, span in _spans(doc):
            traces.setdefault(span.get("traceId", ""), []).append((resource, span, _attrs(span.get("attributes"))))
    services = sorted({res_attrs.get("service.name", "") for spans in traces.values()
                       for res_attrs, _, _ in spans})
    run_of = {s: run_id if len(services) <= 1 else f"{run_id}-{s or 'unnamed'}" for s in services}
    runs: dict[str, dict[str, Any]] = {r: {"model": "", "steps": 0, "accepted": 0, "requests": 0,
                                           "k": 0, "algorithm": "unknown"}
                                       for r in run_of.values()}
    skipped: dict[str, int] = {}
    for spans in traces.values():
        root = next(((ra, s, a) for ra, s, a in spans if _is_request(s, a)), None)
        if root is None:
            for _, s, _ in spans:
                skipped[s.get("name", "?")] = skipped.get(s.get("name", "?"), 0) + 1
            continue
        resource, span, attrs = root
        rid = run_of[resource.get("service.name", "")]
        run = runs[rid]
        per_step = []
        for _, s, a in spans:
            name = s.get("name", "")
            if s is span:
                continue
            if name == "spec_verify":
                n = a.get("num_correct_drafts", a.get("accepted_tokens"))
                if n is not None:
                    per_step.append(int(n))
            elif name not in PHASES and name not in ("decode_loop",) and not name.startswith(("Req ", "req ")):
                skipped[name] = skipped.get(name, 0) + 1
            if name in PHASES:
                res.add(schema.PhaseRecord(run_id=rid, rank=int(a.get("tp_rank", 0) or 0), step=0,
                                           phase=PHASES[name], device="", t_start_ns=_ns(s, "startTimeUnixNano"),
                                           duration_ns=max(0, _ns(s, "endTimeUnixNano") - _ns(s, "startTimeUnixNano")),
                                           clock="otlp"))
        if not per_step:  # the first version: a spec_accept event per verify
            for _, s, _ in spans:
                for ev in s.get("events") or ():
                    if ev.get("name") == "spec_accept":
                        n = _attrs(ev.get("attributes")).get("accepted_tokens")
                        if n is not None:
                            per_step.append(int(n))
        res.add(_request(rid, span, attrs, per_step))
        run["requests"] += 1
        run["model"] = run["model"] or attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model") or ""
        if per_step or attrs.get("specscope.spec.verify_steps"):
            run["steps"] += len(per_step) or int(attrs.get("specscope.spec.verify_steps") or 0)
            run["accepted"] += sum(per_step) if per_step else int(attrs.get("specscope.spec.accepted_tokens") or 0)
        run["k"] = max(run["k"], int(attrs.get("specscope.spec.k") or 0))
        if attrs.get("specscope.spec.algorithm"):
            run["algorithm"] = attrs["specscope.spec.algorithm"]
    for service, rid in run_of.items():
        run = runs[rid]
        res.add(run_record(rid, service or "otlp", FORMAT, path, num_steps=run["k"],
                           algorithm=run["algorithm"], model=run["model"],
                           labels={"service.name": service} if service else None))
        if run["steps"]:
            res.add(schema.SpecCountsRecord(run_id=rid, t_ns=0, num_drafts=run["steps"],
                                            num_accepted=run["accepted"],
                                            source=f"{FORMAT}: sum over {run['requests']} requests' "
                                                   "verify spans (drafted not given)"))
    if skipped:
        names = ", ".join(f"{n} {k}" for k, n in sorted(skipped.items(), key=lambda x: -x[1])[:8])
        res.trap("other-spans", f"{sum(skipped.values())} spans that are no request and no "
                                f"speculative stage were skipped: {names}")
    res.trap("drafted-unknown", "SGLang's verify spans carry accepted tokens, not drafted ones: "
                                "acceptance length is known, the acceptance rate is not")
    return res


def _top_k(value: Any) -> int:
    """A span's requested top-k in the records' terms (0 = off): SGLang writes its request's
    own "off" there (-1), as the request gave it."""
    k = int(value or 0)
    return k if sampling.code(1.0, None, k) & sampling.TOP_K else 0


def _request(run_id: str, span: dict[str, Any], a: dict[str, Any], per_step: list[int]) -> schema.RequestRecord:
    start, end = _ns(span, "startTimeUnixNano"), _ns(span, "endTimeUnixNano")
    ttft = a.get("gen_ai.latency.time_to_first_token", a.get("specscope.latency.ttft_s"))
    first = start + int(float(ttft) * 1e9) if ttft is not None else 0
    steps = len(per_step) if per_step else a.get("specscope.spec.verify_steps")
    accepted = sum(per_step) if per_step else a.get("specscope.spec.accepted_tokens")
    hist: list[int] = []
    for n in per_step:  # index: tokens committed in the step, bonus included
        hist += [0] * max(0, n + 2 - len(hist))
        hist[n + 1] += 1
    reasons = a.get("gen_ai.response.finish_reasons") or []
    return schema.RequestRecord(
        run_id=run_id, rank=0,
        request_id=str(a.get("rid") or a.get("gen_ai.request.id") or a.get("gen_ai.response.id")
                       or span.get("spanId", "")),
        t_arrival_ns=start, t_first_token_ns=first, t_finish_ns=end,
        num_prompt_tokens=int(a.get("gen_ai.usage.prompt_tokens", a.get("gen_ai.usage.input_tokens", 0)) or 0),
        num_output_tokens=int(a.get("gen_ai.usage.completion_tokens", a.get("gen_ai.usage.output_tokens", 0)) or 0),
        temperature=float(a.get("gen_ai.request.temperature", 0.0) or 0.0),
        top_p=float(a.get("gen_ai.request.top_p", 1.0) or 1.0), top_k=_top_k(a.get("gen_ai.request.top_k")),
        finish_reason=str(reasons[0]) if isinstance(reasons, list) and reasons else str(reasons or ""),
        num_verify_steps=int(steps) if steps is not None else None,
        num_draft_tokens=(int(a["specscope.spec.draft_tokens"]) if "specscope.spec.draft_tokens" in a else None),
        num_accepted=int(accepted) if accepted is not None else None,
        accept_len_hist=tuple(hist))
