"""The probe's side of the wire: the endpoint's engine, requests with log-probabilities, and each
response read into positions. Never imports torch (the importers' response readers, lazily).

Shapes read (the OpenAI API as each engine serves it):
- chat: ``choices[0].logprobs.content[i] = {token, logprob, top_logprobs: [{token, logprob}]}``;
- completions: ``choices[0].logprobs = {tokens, token_logprobs, top_logprobs: [{token: lp}]}``;
- SGLang's native ``/generate`` (``return_logprob``, ``top_logprobs_num``):
  ``meta_info.output_token_logprobs = [[logprob, token id, text], ...]`` and
  ``meta_info.output_top_logprobs`` (per position, a list of the same), from its sources;
- vLLM's per-request speculative detail (``--per-request-spec-decode-metrics detailed``):
  ``metrics.speculative_decoding.per_step_accepted`` / ``per_step_drafted`` give each output
  token's role (accepted draft, the token verify drew at a rejection, bonus);
- each engine's per-request acceptance as ``specscope import`` reads a saved response
  (``importers.responses``: vLLM's per-request metrics, SGLang's ``meta_info``
  ``spec_verify_ct`` and draft counts, llama.cpp's ``timings.draft_n`` / ``draft_n_accepted``);
- llama.cpp under speculation returns ``logprob`` 0.0 and no alternatives after the first
  token (upstream #27972): such a position is unknown, never evidence.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from .checks import TEMPERATURE_FIRST, TRUNCATION_FIRST, Position, Semantics

#: per engine: what it needs to return log-probabilities, for the error that says it
ENABLE = {
    "vllm": "vLLM returns them unless started with --max-logprobs 0 (raise --max-logprobs for "
            "more alternatives; --logprobs-mode says raw or processed)",
    "sglang": "SGLang returns them for OpenAI requests with logprobs/top_logprobs (native "
              "/generate: return_logprob with top_logprobs_num)",
    "llamacpp": "llama-server returns them for requests with logprobs/top_logprobs (n_probs on "
                "/completion); under speculation only for the first token (upstream #27972)",
    "unknown": "start the server with log-probabilities enabled (vLLM: --max-logprobs; llama.cpp "
               "and SGLang: per request, logprobs/top_logprobs)",
}


class ProbeError(RuntimeError):
    """The endpoint cannot be probed (unreachable, no log-probabilities): says why and what fixes it."""


def _get(url: str, timeout_s: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return json.load(r)


def detect(url: str, model: str | None = None) -> tuple[str, str]:
    """(engine, model) from ``/v1/models`` (its ``owned_by``), else from llama.cpp's ``/props``."""
    try:
        models = _get(url.rstrip("/") + "/v1/models")
    except (OSError, ValueError) as exc:
        raise ProbeError(f"{url}: no OpenAI-compatible /v1/models ({exc})") from None
    data = models.get("data") or [{}]
    owner = str(data[0].get("owned_by", "")).lower()
    engine = ("vllm" if "vllm" in owner else "sglang" if "sglang" in owner else
              "llamacpp" if "llama" in owner else "unknown")
    if engine == "unknown":
        try:
            if "default_generation_settings" in _get(url.rstrip("/") + "/props"):
                engine = "llamacpp"
        except (OSError, ValueError):
            pass
    return engine, model or str(data[0].get("id", ""))


def semantics(engine: str, logprobs_mode: str = "raw") -> Semantics:
    """How ``engine``'s log-probabilities and sampler order are read."""
    sem = Semantics(engine=engine, processed=logprobs_mode.startswith("processed"),
                    order=TRUNCATION_FIRST if engine == "llamacpp" else TEMPERATURE_FIRST)
    if engine == "llamacpp":
        sem.notes.append("llama.cpp: pre-sampling probabilities (post_sampling_probs off); its "
                         "sampler applies top-k and top-p before temperature; the probe turns "
                         "its default top-k 40 and min-p 0.05 off where a class does not ask")
    elif engine == "vllm":
        sem.notes.append(f"vLLM: {'processed' if sem.processed else 'raw'} log-probabilities "
                         "(--logprobs-mode); temperature before top-k/top-p")
    elif engine == "sglang":
        sem.notes.append("SGLang: raw log-probabilities; temperature before top-k/top-p")
    return sem


@dataclass
class Answer:
    """One request and what came back."""

    cls: str
    prompt: str
    sampling: dict[str, Any]
    response: dict[str, Any] | None = None
    error: str = ""
    seconds: float = 0.0
    positions: list[Position] = field(default_factory=list)
    drafted: int | None = None  #: the engine's own per-request counts, where it gives them
    accepted: int | None = None
    text: str = ""


def body(plan: Any, engine: str, cls: str, prompt: str, sampling: dict[str, Any], model: str,
         top_logprobs: int, seed: int) -> tuple[str, dict[str, Any]]:
    """(path, request body) for one probe request."""
    fields = dict(sampling)
    if engine == "llamacpp":  # its defaults truncate: off unless the class asks
        fields.setdefault("top_k", 0)
        fields.setdefault("min_p", 0.0)
    if plan.endpoint == "generate":  # SGLang's native API
        params = {"max_new_tokens": plan.max_tokens, **fields}
        if "seed" not in params:
            params["sampling_seed"] = seed
        return "/generate", {"text": prompt, "sampling_params": params, "return_logprob": True,
                             "top_logprobs_num": top_logprobs, **plan.extra}
    out: dict[str, Any] = {"model": model, "max_tokens": plan.max_tokens, "seed": seed, **fields}
    if plan.endpoint == "completions":
        out.update(prompt=prompt, logprobs=top_logprobs)
        path = "/v1/completions"
    else:
        out.update(messages=[{"role": "user", "content": prompt}], logprobs=True,
                   top_logprobs=top_logprobs)
        path = "/v1/chat/completions"
    out.update(plan.extra)
    return path, out


def positions_of(response: dict[str, Any], request: str, sampling: dict[str, Any]) -> list[Position]:
    """The committed tokens of one response with their log-probabilities (unknown where the
    engine returned none, or llama.cpp's 0.0 without alternatives)."""
    choice = (response.get("choices") or [{}])[0]
    lp = choice.get("logprobs") or {}
    t, p, k = (float(sampling.get("temperature", 1.0)), float(sampling.get("top_p", 1.0)),
               int(sampling.get("top_k", 0) or 0))
    rows: list[tuple[str, float | None, tuple]] = []
    if isinstance(lp.get("content"), list):
        for e in lp["content"]:
            top = tuple((str(a.get("token")), float(a["logprob"])) for a in e.get("top_logprobs") or []
                        if a.get("logprob") is not None)
            rows.append((str(e.get("token")), _lp(e.get("logprob"), top), top))
    elif isinstance((response.get("meta_info") or {}).get("output_token_logprobs"), list):
        # SGLang's native /generate with return_logprob: [logprob, token id, text] per token and
        # per position a list of them as the top alternatives; tokens compared by id
        meta = response["meta_info"]
        tops = meta.get("output_top_logprobs") or []
        for i, e in enumerate(meta["output_token_logprobs"]):
            alts = tops[i] if i < len(tops) and isinstance(tops[i], list) else []
            top = tuple((str(a[1]), float(a[0])) for a in alts if a and a[0] is not None)
            rows.append((str(e[1]), _lp(e[0], top), top))
    elif isinstance(lp.get("tokens"), list):
        for tok, v, alts in zip(lp["tokens"], lp.get("token_logprobs") or [], lp.get("top_logprobs") or []):
            top = tuple(sorted(((str(a), float(b)) for a, b in (alts or {}).items()),
                               key=lambda x: -x[1]))
            rows.append((str(tok), _lp(v, top), top))
    out = []
    for i, (tok, v, top) in enumerate(rows):
        top = tuple(sorted(top, key=lambda x: -x[1]))
        out.append(Position(request=request, index=i, token=tok, logprob=v, top=top if v is not None else (),
                            temperature=t, top_p=p, top_k=k))
    return out


def _lp(value: Any, top: tuple) -> float | None:
    if value is None:
        return None
    v = float(value)
    if v == 0.0 and not top:
        return None  # llama.cpp under speculation: 0.0 with nothing beside it is no figure
    return v


def engine_counts(response: dict[str, Any]) -> Any:
    """The request's own speculative figures as ``specscope import`` reads them from a saved
    response (vLLM's per-request metrics, SGLang's ``meta_info``, llama.cpp's ``timings``,
    TensorRT-LLM's ``perf_metrics``), or None."""
    from ..importers.responses import EXTRACT, shape

    fmt = shape(response)
    if fmt not in EXTRACT:
        return None
    found = EXTRACT[fmt][1](response, "response")
    return found[0] if found else None


def roles(positions: list[Position], response: dict[str, Any]) -> tuple[list[Position], int | None, int | None]:
    """Each position's role from the per-step detail where the response has it (vLLM's
    ``per_step_accepted`` / ``per_step_drafted``; exact only when every step drafted, else left
    unknown), and the request's drafted and accepted counts (``engine_counts``)."""
    req = engine_counts(response)
    drafted = req.drafted if req is not None else None
    accepted = req.accepted if req is not None else None
    detail = req.extra if req is not None else {}
    acc, dra = detail.get("per_step_accepted"), detail.get("per_step_drafted")
    if not acc or not dra or len(acc) != len(dra):
        return positions, drafted, accepted
    committed = 1 + sum(a + 1 for a in acc)  # prefill's token, then accepted + 1 per step
    if not (len(positions) <= committed <= len(positions) + max(dra)):
        return positions, drafted, accepted  # steps without a draft sit somewhere: unknown
    labels = ["prefill"]
    for a, d in zip(acc, dra):
        labels += ["accepted"] * a + ["correction" if a < d else "bonus"]
    out = [Position(**{**p.__dict__, "role": labels[p.index]}) if p.index < len(labels) else p
           for p in positions]
    return out, drafted, accepted


def top_logprobs_limit(message: str) -> int | None:
    """The most alternatives a server allows, from its refusal ("max allowed: 5", "between 0
    and 20")."""
    m = re.search(r"(?:max(?:imum)?(?: allowed)?|<=|at most|and)\D{0,12}(\d+)", message, re.I)
    return int(m.group(1)) if m else None


def send(url: str, engine: str, model: str, plan: Any, requests: list[tuple[str, str, dict]],
         top_logprobs: int, stop: Any = None) -> tuple[list[Answer], int]:
    """Every request with at most ``plan.concurrency`` in flight, until the token budget or the
    deadline is spent, or ``stop(answers so far)`` says the verdict is in (a check failed);
    returns the answers and the top-logprobs count the server took."""
    answers = [Answer(cls, prompt, sampling) for cls, prompt, sampling in requests]
    used = {"tokens": 0, "stopped": False}
    lock = threading.Lock()
    limit = {"n": top_logprobs}
    t_end = time.monotonic() + plan.deadline_s

    def one(i: int) -> None:
        a = answers[i]
        with lock:
            if used["stopped"]:
                a.error = "not sent: a check had failed"
                return
            if used["tokens"] >= plan.token_budget or time.monotonic() > t_end:
                a.error = "not sent: token budget or deadline spent"
                return
        for _ in range(3):
            path, payload = body(plan, engine, a.cls, a.prompt, a.sampling, model, limit["n"],
                                 plan.seed + i)
            req = urllib.request.Request(url.rstrip("/") + path, data=json.dumps(payload).encode(),
                                         headers={"content-type": "application/json"})
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(req, timeout=plan.timeout_s) as r:
                    a.response = json.load(r)
                a.seconds = time.monotonic() - t0
                break
            except urllib.error.HTTPError as exc:
                text = exc.read().decode("utf-8", "replace")[:500]
                allowed = top_logprobs_limit(text) if "logprob" in text.lower() else None
                if exc.code == 400 and allowed is not None and allowed < limit["n"]:
                    limit["n"] = allowed
                    continue
                a.error = f"HTTP {exc.code}: {text}"
                return
            except (OSError, ValueError) as exc:
                a.error = f"{type(exc).__name__}: {exc}"
                return
        if a.response is None:
            return
        rid = str(a.response.get("id") or f"probe-{i}")
        a.positions, a.drafted, a.accepted = roles(positions_of(a.response, rid, a.sampling), a.response)
        choice = (a.response.get("choices") or [{}])[0]
        a.text = str((choice.get("message") or {}).get("content") or choice.get("text")
                     or a.response.get("text") or "")
        with lock:
            used["tokens"] += len(a.positions) or int((a.response.get("usage") or {}).get("completion_tokens", 0))
            if stop is not None and not used["stopped"]:
                used["stopped"] = bool(stop([x for x in answers if x.response is not None]))

    with concurrent.futures.ThreadPoolExecutor(max(1, plan.concurrency)) as pool:
        list(pool.map(one, range(len(answers))))
    return answers, limit["n"]
