"""Per-request speculative-decoding figures from engines' responses: one RequestRecord each.

A file is a JSON object, a JSON list, or JSONL (one response per line, as a client saves them;
a ``{"data": {...}}`` wrapper from a stream capture is unwrapped). Shapes, from each engine's
source and documentation:

| format | where the figures sit | counts it gives |
| --- | --- | --- |
| vllm-responses | top-level ``metrics.speculative_decoding`` (``num_spec_steps``, ``num_draft_tokens``, ``num_accepted_draft_tokens``, dense ``acceptance_histogram``) or per choice ``speculative_decoding_stats`` (``num_draft_steps``, ``num_drafted_tokens``, ``num_accepted_tokens``, sparse ``{"j": n}`` histogram); ``per_step_accepted`` / ``per_step_drafted`` when detailed | steps, drafted, accepted, histogram |
| sglang-responses | ``meta_info`` (top level or per choice) or ``sglext.spec_tokens_details``: ``spec_verify_ct``, ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``, ``spec_accept_histogram`` / ``spec_correct_drafts_histogram`` | steps, drafted, accepted, histogram |
| llamacpp-responses | ``timings.draft_n`` / ``timings.draft_n_accepted`` | drafted, accepted (no steps) |
| trtllm-requests | ``perf_metrics.speculative_decoding`` (``total_draft_tokens``, ``total_accepted_draft_tokens``) and ``timing_metrics`` | drafted, accepted, TTFT, E2E |

A spec object on its own — one choice, the bare stats object, SGLang's spec details, a
llama.cpp ``timings`` object as ``jq .timings`` prints it — is recognised by the keys only it has
together and read as if it sat in its response; the import says so, with the file.

Histograms are indexed by accepted draft tokens in every engine; specscope's
``accept_len_hist`` is indexed by tokens committed (bonus included), one place further on.
Each file also yields one SpecCountsRecord, the sum over the requests that gave counts, so the
run's pooled figures read like any other source's.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator

from ..openai_wire import content_items
from ..schema import Problem
from ._common import ImportResult, run_record
from ._requests import Req, check_request, pooled, to_record


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)) and v == v:
        return int(v)
    return None


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return float(v)


#: no engine drafts more tokens per step than this; a histogram key beyond it is not one
MAX_DEPTH = 4096


def _hist(v: Any) -> tuple[int, ...]:
    """A dense list or a sparse ``{"j": n}`` mapping, as a dense tuple (index = accepted)."""
    if isinstance(v, list) and all(_int(x) is not None for x in v):
        return tuple(int(x) for x in v)
    if isinstance(v, dict) and v:
        read = {int(k): _int(n) for k, n in v.items()}
        pairs = {k: n for k, n in read.items() if n is not None and 0 <= k <= MAX_DEPTH}
        if len(pairs) < len(read):
            raise ValueError(f"histogram with a bad entry (keys are accepted drafts, 0..{MAX_DEPTH}): "
                             f"{str(v)[:200]}")
        out = [0] * (max(pairs) + 1)
        for k, n in pairs.items():
            out[k] = n
        return tuple(out)
    return ()


def _obj(v: Any) -> dict:
    """``v`` where it is a JSON object, else an empty one."""
    return v if isinstance(v, dict) else {}


def _usage(obj: dict) -> tuple[int, int]:
    u = _obj(obj.get("usage"))
    return _int(u.get("prompt_tokens")) or 0, _int(u.get("completion_tokens")) or 0


# ---------------------------------------------------------------- per engine
def vllm(obj: dict, where: str) -> list[Req]:
    prompt, completion = _usage(obj)
    rid = str(obj.get("id", where))
    out = []
    top = (obj.get("metrics") or {}).get("speculative_decoding") if isinstance(obj.get("metrics"), dict) else None
    if isinstance(top, dict):
        out.append(Req(
            rid, steps=_int(top.get("num_spec_steps")), drafted=_int(top.get("num_draft_tokens")),
            accepted=_int(top.get("num_accepted_draft_tokens")), hist=_hist(top.get("acceptance_histogram")),
            k=_int(top.get("num_spec_tokens")), prompt_tokens=prompt, output_tokens=completion,
            reported_al=_float(top.get("mean_acceptance_length")),
            reported_rate=_float(top.get("draft_acceptance_rate")),
            extra={**_detailed(top), **_first_choice_tokens(obj)}))
    for i, choice in enumerate(obj.get("choices") or []):
        s = choice.get("speculative_decoding_stats") if isinstance(choice, dict) else None
        if not isinstance(s, dict):
            tokens = _token_logprobs(choice) if i == 0 and not out and isinstance(choice, dict) else {}
            if tokens:  # a target-only server's response: its tokens and margins, for diverge
                out.append(Req(rid, prompt_tokens=prompt, output_tokens=completion,
                               finish_reason=str(choice.get("finish_reason") or ""), extra=tokens))
            continue
        rates = s.get("per_position_acceptance_rates")
        out.append(Req(
            rid if i == 0 else f"{rid}/{i}", steps=_int(s.get("num_draft_steps")),
            drafted=_int(s.get("num_drafted_tokens")), accepted=_int(s.get("num_accepted_tokens")),
            hist=_hist(s.get("acceptance_histogram")),
            per_pos=tuple(float(r) for r in rates) if isinstance(rates, list) else (),
            k=len(rates) if isinstance(rates, list) else None, prompt_tokens=prompt,
            output_tokens=completion if i == 0 else 0,
            reported_al=_float(s.get("mean_accepted_length_per_step")),
            reported_rate=_float(s.get("draft_acceptance_rate")),
            finish_reason=str(choice.get("finish_reason") or ""),
            extra={**_detailed(s), **_token_logprobs(choice)}))
    return out


def _first_choice_tokens(obj: dict) -> dict[str, Any]:
    choices = obj.get("choices") or []
    return _token_logprobs(choices[0]) if choices and isinstance(choices[0], dict) else {}


def _token_id(text: Any) -> int | None:
    """A token as vLLM writes it with ``return_tokens_as_token_ids``: ``token_id:N``."""
    if isinstance(text, str) and text.startswith("token_id:") and text[9:].isdigit():
        return int(text[9:])
    return None


def _token_logprobs(choice: dict) -> dict[str, Any]:
    """Output token ids and the top-1 minus top-2 log-probability per token (the logit margin:
    one normaliser) from a choice's chat ``logprobs.content``, where the server wrote tokens as
    ids (``return_tokens_as_token_ids``) and gave two or more ``top_logprobs``; {} otherwise."""
    content = content_items(choice)
    if not content:
        return {}
    ids, margins, seconds = [], [], []
    for item in content:
        tok = _token_id(item.get("token")) if isinstance(item, dict) else None
        tops = item.get("top_logprobs") if isinstance(item, dict) else None
        if tok is None or not isinstance(tops, list) or len(tops) < 2:
            return {}
        ranked = sorted((t for t in tops if isinstance(t, dict) and _float(t.get("logprob")) is not None),
                        key=lambda t: -t["logprob"])
        if len(ranked) < 2 or _token_id(ranked[1].get("token")) is None:
            return {}
        ids.append(tok)
        margins.append(ranked[0]["logprob"] - ranked[1]["logprob"])
        seconds.append(_token_id(ranked[1]["token"]))
    return {"output_token_ids": ids, "top2_margins": margins, "second_token_ids": seconds}


def _detailed(s: dict) -> dict[str, Any]:
    acc, dra = s.get("per_step_accepted"), s.get("per_step_drafted")
    return {"per_step_accepted": acc, "per_step_drafted": dra} if isinstance(acc, list) else {}


SG_ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
SG_PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
SG_HIST = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def _first(d: dict, keys: tuple[str, ...]) -> Any:
    return next((d[k] for k in keys if d.get(k) is not None), None)


def sglang(obj: dict, where: str) -> list[Req]:
    metas: list[dict] = []
    if isinstance(obj.get("meta_info"), dict):
        metas.append(obj["meta_info"])
    for choice in obj.get("choices") or []:
        if isinstance(choice, dict) and isinstance(choice.get("meta_info"), dict):
            metas.append(choice["meta_info"])
    ext = _obj(obj.get("sglext"))
    details = ext.get("spec_tokens_details") or ext.get("spec") or obj.get("sglext_spec")
    prompt, completion = _usage(obj)
    rid = str(obj.get("id", where))
    out = []
    for i, m in enumerate(metas or ([details] if isinstance(details, dict) else [])):
        merged = {**(details if isinstance(details, dict) and i == 0 else {}), **m}
        out_tokens = _int(merged.get("completion_tokens")) or (completion if i == 0 else 0)
        e2e = _float(merged.get("e2e_latency"))
        req = Req(
            str(merged.get("id") or (rid if i == 0 else f"{rid}/{i}")),
            steps=_int(merged.get("spec_verify_ct")), drafted=_int(_first(merged, SG_PROPOSED)),
            accepted=_int(_first(merged, SG_ACCEPTED)), hist=_hist(_first(merged, SG_HIST)),
            prompt_tokens=_int(merged.get("prompt_tokens")) or prompt, output_tokens=out_tokens,
            reported_al=_float(merged.get("spec_accept_length")),
            reported_rate=_float(merged.get("spec_accept_rate")),
            finish_reason=str((merged.get("finish_reason") or {}).get("type", ""))
            if isinstance(merged.get("finish_reason"), dict) else str(merged.get("finish_reason") or ""))
        if e2e is not None:
            req.extra["e2e_s"] = e2e
        out.append(req)
    return out


def llamacpp(obj: dict, where: str) -> list[Req]:
    """OpenAI-compatible responses, their final stream chunks and the native ``/completion``.
    ``timings`` carries ``draft_n`` / ``draft_n_accepted`` only when the request drafted
    something; without them the counts stay unknown (a target-only server's responses look the
    same), and a file where no response has them says so."""
    t = obj.get("timings")
    if not isinstance(t, dict):
        return []
    prompt, completion = _usage(obj)
    rid = obj.get("id")
    if rid is None and obj.get("id_slot") is not None:  # the native /completion names no id
        rid = f"slot{obj['id_slot']}-{where}"
    return [Req(str(rid if rid is not None else where), drafted=_int(t.get("draft_n")),
                accepted=_int(t.get("draft_n_accepted")),
                prompt_tokens=_int(t.get("prompt_n")) or _int(obj.get("tokens_evaluated")) or prompt,
                output_tokens=_int(t.get("predicted_n")) or completion,
                finish_reason=_finish(obj), extra={} if "draft_n" in t else {"no_draft_n": True})]


def _finish(obj: dict) -> str:
    choices = [c for c in obj.get("choices") or [] if isinstance(c, dict)]
    if choices and choices[0].get("finish_reason"):
        return str(choices[0]["finish_reason"])
    return str(obj.get("stop_type") or "")


def stream_chunk(obj: dict) -> bool:
    """A streamed chunk that carries text but no figures (every chunk but a stream's last):
    an OpenAI ``delta`` chunk, a completions chunk of a stream, or a native ``/completion``
    chunk with ``"stop": false``."""
    if obj.get("object") == "chat.completion.chunk" or obj.get("stop") is False:
        return True
    choices = [c for c in obj.get("choices") or [] if isinstance(c, dict)]
    return bool(choices) and all("delta" in c or c.get("finish_reason") is None for c in choices) \
        and "usage" not in obj


def trtllm(obj: dict, where: str) -> list[Req]:
    pm = obj.get("perf_metrics")
    if not isinstance(pm, dict):
        return []
    spec = _obj(pm.get("speculative_decoding"))
    tm = _obj(pm.get("timing_metrics"))

    def ns(key: str) -> int:
        v = _float(tm.get(key))
        return int(v * 1e9) if v and v > 0 else 0

    first, last = _int(pm.get("first_iter")), _int(pm.get("last_iter"))
    req = Req(str(obj.get("request_id", where)), drafted=_int(spec.get("total_draft_tokens")),
              accepted=_int(spec.get("total_accepted_draft_tokens")),
              reported_rate=_float(spec.get("acceptance_rate")),
              t_arrival_ns=ns("arrival_time"), t_first_ns=ns("first_token_time"),
              t_finish_ns=ns("last_token_time"))
    if first is not None and last is not None:
        req.extra["iterations"] = last - first + 1
    return [req]


EXTRACT = {"vllm-responses": ("vllm", vllm), "sglang-responses": ("sglang", sglang),
           "llamacpp-responses": ("llama.cpp", llamacpp), "trtllm-requests": ("tensorrt-llm", trtllm)}


#: a spec-decoding object on its own (one choice, the bare stats object, ``jq .timings``), by
#: keys only it has together: its format and how it sits in a whole response
BARE = (
    ("llamacpp-responses", ("draft_n", "draft_n_accepted"), lambda o: {"timings": o}, "timings"),
    ("vllm-responses", ("speculative_decoding_stats",), lambda o: {"choices": [o]}, "a choice"),
    ("vllm-responses", ("num_drafted_tokens", "num_accepted_tokens"),
     lambda o: {"choices": [{"speculative_decoding_stats": o}]}, "speculative_decoding_stats"),
    ("vllm-responses", ("num_spec_steps", "num_draft_tokens"),
     lambda o: {"metrics": {"speculative_decoding": o}}, "metrics.speculative_decoding"),
    ("sglang-responses", ("spec_verify_ct",), lambda o: {"meta_info": o}, "meta_info / sglext spec details"),
)


def bare(obj: Any) -> tuple[str, dict, str] | None:
    """(format, the object as a whole response, where it sits in one) for a spec object on its
    own, or None."""
    if not isinstance(obj, dict):
        return None
    for fmt, keys, wrap, where in BARE:
        if all(k in obj for k in keys):
            return fmt, wrap(obj), where
    return None


def shape(obj: Any) -> str | None:
    """Which engine's response this object is (or which engine's spec object on its own), or
    None."""
    if isinstance(obj, list):  # the first item that says (a response without a draft may not)
        return next((k for k in (shape(x) for x in obj[:64] if isinstance(x, dict)) if k), None)
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("data"), dict) and "choices" in obj["data"]:
        obj = obj["data"]
    if isinstance(obj.get("metrics"), dict) and "speculative_decoding" in obj["metrics"]:
        return "vllm-responses"
    choices = [c for c in obj.get("choices") or [] if isinstance(c, dict)]
    if any("speculative_decoding_stats" in c for c in choices):
        return "vllm-responses"
    if "meta_info" in obj or "sglext" in obj or "sglext_spec" in obj or any("meta_info" in c for c in choices):
        return "sglang-responses"
    timings = obj.get("timings")
    if isinstance(timings, dict) and ("draft_n" in timings or "predicted_n" in timings):
        return "llamacpp-responses"
    if isinstance(obj.get("perf_metrics"), dict) and "request_id" in obj:
        return "trtllm-requests"
    if choices and _token_logprobs(choices[0]):  # a vLLM response with token ids, no figures
        return "vllm-responses"
    found = bare(obj)
    return found[0] if found else None


# ---------------------------------------------------------------- reading
def iter_objects(path: str | os.PathLike, res: ImportResult) -> Iterator[tuple[int, Any]]:
    """(line or item number, object) for a JSON object, a JSON list or JSONL; bad lines are
    problems naming file and line, and the rest is kept."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, list):
        res.lines_read = len(whole)
        yield from enumerate(whole, start=1)
        return
    if isinstance(whole, dict):
        res.lines_read = 1
        yield 1, whole
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        res.lines_read += 1
        line = line.strip()
        if not line or line.startswith("data: [DONE]"):
            continue
        if line.startswith("data: "):
            line = line[6:]
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            res.problems.append(Problem(str(path), lineno, f"not JSON: {exc.msg} at column {exc.colno}"))


def parse(path: str | os.PathLike, run_id: str, fmt: str) -> ImportResult:
    res = ImportResult(fmt)
    engine, extract = EXTRACT[fmt]
    name = str(path)
    reqs: list[Req] = []
    chunks = 0
    for where, obj in iter_objects(path, res):
        if isinstance(obj, dict) and isinstance(obj.get("data"), dict):
            obj = obj["data"]
        if not isinstance(obj, dict):
            res.problems.append(Problem(name, where, f"expected a response object, got {type(obj).__name__}"))
            continue
        found = bare(obj) if shape(obj) == fmt else None
        if found and not extract(obj, f"line-{where}"):  # the spec object on its own
            obj = found[1]
            res.trap("bare-object", f"{name}: spec objects on their own (as they sit at "
                     f"'{found[2]}' in a whole response), first at item/line {where}")
        try:
            got = extract(obj, f"line-{where}")
        except (TypeError, ValueError, AttributeError) as exc:
            res.problems.append(Problem(name, where, f"not a {fmt} object: {exc}"))
            continue
        if not got and stream_chunk(obj):
            chunks += 1  # a stream's chunks before its last carry text only
            continue
        if not got:
            res.problems.append(Problem(name, where, f"no speculative-decoding figures in this {engine} response"))
        for r in got:
            check_request(res, r, fmt, name, where)
            res.add(to_record(r, run_id))
            reqs.append(r)
    if chunks:
        res.trap("stream-chunks", f"{name}: {chunks} streamed chunks before each stream's last "
                 "carry text only; the figures are read from each stream's final chunk")
    if fmt == "llamacpp-responses" and reqs and all(r.extra.get("no_draft_n") for r in reqs):
        res.trap("nothing-drafted", f"{name}: no response drafted a token (llama.cpp omits "
                 "draft_n when it is 0): speculation was off (-md without --spec-type leaves it "
                 "off) or its drafter found nothing to propose (ngram-simple on prompts that do "
                 "not repeat)")
    ks = {r.k for r in reqs if r.k}
    res.add(run_record(run_id, engine, fmt, path, num_steps=max(ks) if ks else 0))
    summed = pooled(reqs, run_id, fmt)
    if summed is not None:
        res.add(summed)
    return res
