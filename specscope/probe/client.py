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

The HTTP is httpx's; ``transport=`` (``http_client``) says where the requests go: the network
by default, an ``httpx.MockTransport`` in tests.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

import httpx

from .. import registry
from ..openai_wire import MINUS_INF, token_logprobs
from .checks import TEMPERATURE_FIRST, TRUNCATION_FIRST, Position, Semantics
from .ngram import NgramSettings, replay
from .workload import default_temperature

#: per engine: what it needs to return log-probabilities, for the error that says it
ENABLE = {
    **{e.name: e.logprobs_enable for e in registry.ENGINES if e.logprobs_enable},
    "unknown": "start the server with log-probabilities enabled (vLLM: --max-logprobs; llama.cpp "
               "and SGLang: per request, logprobs/top_logprobs)",
}


class ProbeError(RuntimeError):
    """The endpoint cannot be probed (unreachable, no log-probabilities): says why and what fixes it."""


def http_client(transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """The probe's HTTP client. Each request on a connection of its own, closed after its answer
    (a kept-alive connection the server closes just as a request goes out would read as the
    engine failing); redirects followed; every call gives its own timeout. ``transport``: where
    the requests go (default: the network)."""
    return httpx.Client(transport=transport, follow_redirects=True,
                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=0))


@contextlib.contextmanager
def _using(client: httpx.Client | None) -> Iterator[httpx.Client]:
    """``client``, or a fresh one closed after use."""
    if client is not None:
        yield client
        return
    with http_client() as fresh:
        yield fresh


def _get(client: httpx.Client, url: str, timeout_s: float = 10.0) -> Any:
    r = client.get(url, timeout=timeout_s)
    r.raise_for_status()
    return r.json()


def detect(url: str, model: str | None = None, *,
           client: httpx.Client | None = None) -> tuple[str, str]:
    """(engine, model) from ``/v1/models`` (its ``owned_by``), else from llama.cpp's ``/props``."""
    with _using(client) as http:
        return _detect(http, url, model)


def _detect(http: httpx.Client, url: str, model: str | None) -> tuple[str, str]:
    try:
        models = _get(http, url.rstrip("/") + "/v1/models")
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        raise ProbeError(f"{url}: no OpenAI-compatible /v1/models ({exc})") from None
    data = models.get("data") or [{}]
    owner = str(data[0].get("owned_by", "")).lower()
    engine = registry.served(owner) or ("specscope" if owner == "specscope" else "unknown")
    if engine == "unknown":
        try:
            if "default_generation_settings" in _get(http, url.rstrip("/") + "/props"):
                engine = "llamacpp"
        except (httpx.HTTPError, ValueError):
            pass
    return engine, model or str(data[0].get("id", ""))


#: what each engine's log-probabilities are unless told otherwise (``logprobs_mode``)
DEFAULT_LOGPROBS = {e.name: e.logprobs_default for e in registry.ENGINES
                    if e.logprobs_default != "raw"}
#: engines whose log-probabilities are penalised whatever the mode (``registry``: why)
PENALISED_LOGPROBS = tuple(e.name for e in registry.ENGINES if e.logprobs_penalised)
#: engines whose penalties count more than the answer so far: the probe cannot score them
PENALTY_WINDOW = {e.name: e.penalty_window for e in registry.ENGINES if e.penalty_window}


def semantics(engine: str, logprobs_mode: str | None = None) -> Semantics:
    """How ``engine``'s log-probabilities and sampler order are read: ``logprobs_mode`` raw,
    tempered or processed, by default the engine's own (SGLang tempered, the others raw)."""
    mode = logprobs_mode or DEFAULT_LOGPROBS.get(engine, "raw")
    sem = Semantics(engine=engine, processed=mode.startswith("processed"),
                    tempered=mode == "tempered",
                    penalised=mode.startswith("processed") or engine in PENALISED_LOGPROBS,
                    order=TRUNCATION_FIRST if engine in registry.BY_NAME and
                    registry.BY_NAME[engine].truncation_first else TEMPERATURE_FIRST)
    if engine == "llamacpp":
        sem.notes.append("llama.cpp: pre-sampling probabilities (post_sampling_probs off); its "
                         "sampler applies top-k and top-p before temperature; the probe turns "
                         "its default top-k 40 and min-p 0.05 off where a class does not ask")
    elif engine == "vllm":
        sem.notes.append(f"vLLM: {'processed' if sem.processed else 'raw'} log-probabilities "
                         "(--logprobs-mode); temperature before top-k/top-p" + (
                             "; processed ones are what the engine built: a truncation or "
                             "temperature it got wrong before computing them is invisible "
                             "here (raw ones check it)" if sem.processed else ""))
    elif engine == "sglang":
        sem.notes.append("SGLang: log-probabilities at the request's temperature, before "
                         "top-k/top-p (log_softmax(logits / T); a server started with "
                         "SGLANG_RETURN_ORIGINAL_LOGPROB=1 returns raw ones: --logprobs-mode "
                         "raw), after its penalties; temperature before top-k/top-p")
    return sem


@dataclass
class Answer:
    """One request and what came back."""

    cls: str
    prompt: str
    sampling: dict[str, Any]
    response: dict[str, Any] | None = None
    #: the request was sent and failed: the engine's own words (its error message, or what
    #: happened to the connection)
    error: str = ""
    #: the request was never sent, and why (fail-fast, budget, deadline, a failed engine)
    not_sent: str = ""
    status: int | None = None  #: the HTTP status of a failed request; None where none came
    #: the failure is the engine's (HTTP 5xx, a dropped or refused connection, no answer within
    #: the timeout), not a refusal of this request (HTTP 4xx)
    engine_failed: bool = False
    index: int = 0  #: its place in the plan
    t_sent_s: float | None = None  #: seconds from the first send until this one was sent
    t_done_s: float | None = None  #: ... until it was answered or failed
    seconds: float = 0.0
    positions: list[Position] = field(default_factory=list)
    drafted: int | None = None  #: the engine's own per-request counts, where it gives them
    accepted: int | None = None
    text: str = ""
    #: how each position's role is known: "per-step" (every step drafted: the engine's per-step
    #: figures place every token), "replay" (prompt lookup replayed from the token ids and
    #: confirmed by the engine's figures), or "" (unknown)
    roles_by: str = ""
    #: an upper bound of the output tokens verify produced (accepted drafts and the tokens drawn
    #: at a rejection) from the engine's own counts; None where it gives none
    verified_at_most: int | None = None
    why_unplaced: str = ""  #: why the roles stay unknown, where they do
    #: the prefix class's phase it was sent in ("alone", "repeated", "concurrent"), else ""
    phase: str = ""


#: engines that return token ids when asked (vLLM's ``return_token_ids`` and
#: ``return_tokens_as_token_ids``; specscope's reference engine the latter)
TOKEN_IDS = tuple(e.name for e in registry.ENGINES if e.token_ids) + ("specscope",)


def body(plan: Any, engine: str, cls: str, prompt: str, sampling: dict[str, Any], model: str,
         top_logprobs: int, seed: int) -> tuple[str, dict[str, Any]]:
    """(path, request body) for one probe request."""
    fields = dict(sampling)
    if "prompt_ids" in fields:  # the rescore class: token ids scored as a prompt (vLLM's
        return "/v1/completions", {"model": model, "max_tokens": 1, "seed": seed,  # extension)
                                   "prompt": fields.pop("prompt_ids"), **fields, **plan.extra}
    known = registry.BY_NAME.get(engine)
    if known is not None and known.truncates_by_default:  # (llama.cpp: top-k 40, top-p 0.95,
        fields.setdefault("top_k", 0)  # min-p 0.05) each off unless the class asks
        fields.setdefault("top_p", 1.0)
        fields.setdefault("min_p", 0.0)
    if plan.endpoint == "generate":  # SGLang's native API
        if "max_tokens" in fields:  # a cut request's own (the stops class)
            fields["max_new_tokens"] = fields.pop("max_tokens")
        if "min_tokens" in fields:
            fields["min_new_tokens"] = fields.pop("min_tokens")
        params = {"max_new_tokens": plan.max_tokens, **fields}
        params["sampling_seed"] = params.pop("seed", seed)  # (a seeded class's own)
        return "/generate", {"text": prompt, "sampling_params": params, "return_logprob": True,
                             "top_logprobs_num": top_logprobs, **plan.extra}
    out: dict[str, Any] = {"model": model, "max_tokens": plan.max_tokens, "seed": seed, **fields}
    if engine in TOKEN_IDS:  # token ids (prompt and output): the prompt-lookup replay, stop tokens
        out.update(return_token_ids=True, return_tokens_as_token_ids=True)
    if plan.endpoint == "completions":
        out.update(prompt=prompt, logprobs=top_logprobs)
        path = "/v1/completions"
    else:
        out.update(messages=[{"role": "user", "content": prompt}], logprobs=True,
                   top_logprobs=top_logprobs)
        path = "/v1/chat/completions"
    out.update(plan.extra)
    return path, out


def positions_of(response: dict[str, Any], request: str, sampling: dict[str, Any],
                 default_temperature: float = 1.0) -> list[Position]:
    """The committed tokens of one response with their log-probabilities (unknown where the
    engine returned none, or llama.cpp's 0.0 without alternatives); a request that left its
    temperature out was sampled at ``default_temperature`` (the engine's)."""
    t, p, k = (float(sampling.get("temperature", default_temperature)),
               float(sampling.get("top_p", 1.0)),
               int(sampling.get("top_k", 0) or 0))
    rows: list[tuple[str, float | None, tuple]] = []
    for e in token_logprobs(response):  # (SGLang's native tokens are named by id)
        top = tuple((a, _float(b)) for a, b in e.top)
        rows.append((e.token, _lp(e.logprob, top), top))
    out = []
    for i, (tok, v, top) in enumerate(rows):
        top = tuple(sorted(top, key=lambda x: -x[1]))
        out.append(Position(request=request, index=i, token=tok, logprob=v, top=top if v is not None else (),
                            temperature=t, top_p=p, top_k=k,
                            min_p=float(sampling.get("min_p", 0.0) or 0.0)))
    return out




def _float(value: Any) -> float:
    v = float(value)
    return -math.inf if v <= MINUS_INF else v


def _lp(value: Any, top: tuple) -> float | None:
    if value is None:
        return None
    v = _float(value)
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


def token_ids(response: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    """(prompt ids, output ids) where the response carries them (vLLM's ``return_token_ids``:
    ``choices[0].token_ids``, and ``prompt_token_ids`` beside the choices for chat, in the
    choice for completions), else None."""
    choice = (response.get("choices") or [{}])[0]
    prompt = response.get("prompt_token_ids") or choice.get("prompt_token_ids")
    output = choice.get("token_ids")
    if isinstance(prompt, list) and isinstance(output, list) and output:
        return [int(t) for t in prompt], [int(t) for t in output]
    return None


def roles(positions: list[Position], response: dict[str, Any],
          ngram: NgramSettings | None = None) -> tuple[list[Position], int | None, int | None]:
    """Each position's role, and the request's drafted and accepted counts (``engine_counts``).
    Roles from the per-step detail where the response has it (vLLM's ``per_step_accepted`` /
    ``per_step_drafted``) and every step drafted; else, under prompt lookup with known
    ``ngram`` settings, from the proposer replayed over the response's token ids and confirmed
    by the engine's own figures; else left unknown."""
    placed, drafted, accepted, _, _, _ = place(positions, response, ngram)
    return placed, drafted, accepted


def place(positions: list[Position], response: dict[str, Any], ngram: NgramSettings | None = None
          ) -> tuple[list[Position], int | None, int | None, str, int | None, str]:
    """``roles`` with how they are known ("per-step", "replay" or ""), an upper bound of the
    tokens verify produced (from the engine's counts) and why the roles stay unknown."""
    req = engine_counts(response)
    drafted = req.drafted if req is not None else None
    accepted = req.accepted if req is not None else None
    detail = req.extra if req is not None else {}
    acc, dra = detail.get("per_step_accepted"), detail.get("per_step_drafted")
    steps = list(zip(dra, acc)) if acc and dra and len(acc) == len(dra) else None
    verified = None
    if steps is not None:  # exact: each step's accepted drafts and its rejection, if any
        verified = sum(a + (a < d) for d, a in steps)
    elif drafted is not None:
        verified = drafted  # each drafted token yields at most one verified token
    if verified is not None:
        verified = min(verified, len(positions))

    def labelled(labels: list[str] | tuple[str, ...]) -> list[Position]:
        return [Position(**{**p.__dict__, "role": labels[p.index]}) if p.index < len(labels) else p
                for p in positions]

    if drafted == 0:  # the engine says it drafted nothing: every token sampled outside verify
        return labelled(["undrafted"] * len(positions)), drafted, accepted, "engine", 0, ""
    if steps is not None:
        committed = 1 + sum(a + 1 for _, a in steps)  # prefill's token, then accepted + 1 per step
        if len(positions) <= committed <= len(positions) + max(d for d, _ in steps):
            labels = ["prefill"]
            for d, a in steps:
                labels += ["accepted"] * a + ["correction" if a < d else "bonus"]
            return labelled(labels), drafted, accepted, "per-step", verified, ""
    ids = token_ids(response)
    why = ""
    if ids is None:
        why = "the response has no token ids to replay prompt lookup over"
    elif ngram is None:
        why = "the n-gram settings are unknown (--ngram K:MIN:MAX)"
    elif len(ids[1]) != len(positions):
        why = f"{len(ids[1])} token ids for {len(positions)} positions"
    else:
        r = replay(ids[0], ids[1], ngram, per_step=steps,
                   totals=(drafted, accepted) if drafted is not None and accepted is not None else None)
        if r.ok and (steps is not None or drafted is not None):
            drafts = dict(enumerate(r.drafts))
            out = [p if drafts.get(p.index) is None else
                   replace(p, draft=spelled(p.token, ids[1][p.index], int(drafts[p.index] or 0)))
                   for p in labelled(r.roles)]
            return out, drafted, accepted, "replay", r.num_verified, ""
        why = r.reason or "the engine gives no speculative counts to confirm the replay"
    return positions, drafted, accepted, "", verified, why


def spelled(token: str, token_id: int, other: int) -> str:
    """Token id ``other`` spelled as ``token`` (the token of ``token_id``) is: vLLM's
    ``token_id:N`` under ``return_tokens_as_token_ids``; "" where the spelling is text."""
    if other == token_id:
        return token
    return f"token_id:{other}" if token == f"token_id:{token_id}" else ""


def top_logprobs_limit(message: str) -> int | None:
    """The most alternatives a server allows, from its refusal ("max allowed: 5", "between 0
    and 20")."""
    m = re.search(r"(?:max(?:imum)?(?: allowed)?|<=|at most|and)\D{0,12}(\d+)", message, re.I)
    return int(m.group(1)) if m else None


def engine_message(text: str) -> str:
    """The engine's own message from an error body (OpenAI's ``{"error": {"message": ...}}``,
    vLLM's and SGLang's ``{"message": ...}`` or ``{"detail": ...}``), else the text itself."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text.strip()
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if err.get(key):
                    return str(err[key])
        elif err:
            return str(err)
    return text.strip()


def send(url: str, engine: str, model: str, plan: Any, requests: list[tuple[str, str, dict]],
         top_logprobs: int, stop: Any = None, *,
         client: httpx.Client | None = None,
         t_start: float | None = None) -> tuple[list[Answer], int]:
    """Every request with at most ``plan.concurrency`` in flight, in the plan's order, until the
    token budget or the deadline is spent, ``stop(answers so far)`` says the verdict is in (a
    check failed), or the engine fails (HTTP 5xx, a dropped or refused connection, no answer
    within the timeout: nothing more is sent to it); returns the answers and the top-logprobs
    count the server took. ``client``: the probe's (``http_client``), else a fresh one.
    ``t_start``: the monotonic time the answers' send and done times count from (default:
    now); the deadline counts from now."""
    with _using(client) as http:
        return _send(http, url, engine, model, plan, requests, top_logprobs, stop, t_start)


def _send(http: httpx.Client, url: str, engine: str, model: str, plan: Any,
          requests: list[tuple[str, str, dict]], top_logprobs: int,
          stop: Any, t_start: float | None = None) -> tuple[list[Answer], int]:
    answers = [Answer(cls, prompt, sampling, index=i)
               for i, (cls, prompt, sampling) in enumerate(requests)]
    default_t = default_temperature(engine, getattr(plan, "default_temperature", None))
    used = {"tokens": 0, "stopped": False, "engine_failed": False, "next": 0}
    lock = threading.Lock()
    limit = {"n": top_logprobs}
    t_end = time.monotonic() + plan.deadline_s
    t_start = time.monotonic() if t_start is None else t_start

    def fail(a: Answer, error: str, status: int | None, engine_failed: bool) -> None:
        with lock:
            a.error, a.status, a.engine_failed = error or "(no message)", status, engine_failed
            a.t_done_s = time.monotonic() - t_start
            used["engine_failed"] = used["engine_failed"] or engine_failed

    def worker() -> None:  # takes the next request in the plan's order, under the lock
        while True:
            with lock:
                i = used["next"]
                used["next"] += 1
                if i >= len(answers):
                    return
                sent = admit(answers[i])
            if sent:
                one(i)

    def admit(a: Answer) -> bool:  # under the lock: send it, or say why not
        if used["engine_failed"]:
            a.not_sent = "the engine had failed under an earlier request"
        elif used["stopped"]:
            a.not_sent = "a check had failed (fail-fast)"
        elif used["tokens"] >= plan.token_budget or time.monotonic() > t_end:
            a.not_sent = "token budget or deadline spent"
        else:
            a.t_sent_s = time.monotonic() - t_start
        return not a.not_sent

    def one(i: int) -> None:
        a = answers[i]
        for _ in range(3):
            path, payload = body(plan, engine, a.cls, a.prompt, a.sampling, model, limit["n"],
                                 plan.seed + i)
            t0 = time.monotonic()
            try:
                r = http.post(url.rstrip("/") + path, content=json.dumps(payload).encode(),
                              headers={"content-type": "application/json"}, timeout=plan.timeout_s)
            except httpx.RequestError as exc:
                # refused, reset or dropped connections, and timeouts: the engine stopped answering
                fail(a, f"{type(exc).__name__}: {exc}", None, True)
                return
            if not r.is_success:
                text = r.content.decode("utf-8", "replace")[:2000]
                allowed = top_logprobs_limit(text) if "logprob" in text.lower() else None
                if r.status_code == 400 and allowed is not None and allowed < limit["n"]:
                    limit["n"] = allowed
                    continue
                fail(a, f"HTTP {r.status_code}: {engine_message(text) or r.reason_phrase}",
                     r.status_code, r.status_code >= 500)
                return
            try:
                a.response = r.json()
            except ValueError as exc:  # an answer that is not JSON
                fail(a, f"the response is not JSON ({exc})", None, False)
                return
            a.seconds = time.monotonic() - t0
            break
        if a.response is None:
            return
        rid = str(a.response.get("id") or f"probe-{i}")
        (a.positions, a.drafted, a.accepted, a.roles_by, a.verified_at_most,
         a.why_unplaced) = place(positions_of(a.response, rid, a.sampling, default_t),
                                 a.response, getattr(plan, "ngram", None))
        choice = (a.response.get("choices") or [{}])[0]
        a.text = str((choice.get("message") or {}).get("content") or choice.get("text")
                     or a.response.get("text") or "")
        with lock:
            a.t_done_s = time.monotonic() - t_start
            used["tokens"] += len(a.positions) or int((a.response.get("usage") or {}).get("completion_tokens", 0))
            if stop is not None and not used["stopped"]:
                used["stopped"] = bool(stop([x for x in answers if x.response is not None]))

    with concurrent.futures.ThreadPoolExecutor(max(1, plan.concurrency)) as pool:
        for f in [pool.submit(worker) for _ in range(max(1, plan.concurrency))]:
            f.result()
    return answers, limit["n"]
