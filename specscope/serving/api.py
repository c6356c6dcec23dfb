"""The OpenAI-compatible HTTP front of the reference decoder (FastAPI).

``/v1/completions`` and ``/v1/chat/completions`` (streaming as server-sent events, with
``stream_options.include_usage``), ``/v1/models``, ``/health`` and the collector's ``/metrics``.
Under speculation one streamed chunk carries every token a verify step commits.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator

from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from ..engine.decoder import Request
from .scheduler import Event, QueueFull, Scheduler
from .text import BadRequest, Codec, first_stop, stop_matcher, stop_strings


@dataclass
class Served:
    """What the API serves: a scheduler, the model's codec, its name and a metrics source."""

    scheduler: Scheduler
    codec: Codec
    model: str
    max_tokens_limit: int = 4096
    collector: Any = None  #: a specscope Collector for /metrics, or None
    fault: str = ""  #: the decoder's seeded fault, where one lives in the API
    max_model_len: int | None = None  #: prompt and output tokens the model can hold


def _params(body: dict[str, Any], limit: int, chat: bool) -> dict[str, Any]:
    def num(key, default, kind=float):
        v = body.get(key, default)
        if v is None:
            return default
        try:
            out = kind(v)
        except (TypeError, ValueError, OverflowError):
            raise BadRequest(f"{key} must be a number") from None
        if isinstance(v, bool) or not math.isfinite(out):
            raise BadRequest(f"{key} must be a finite number")
        return out

    max_tokens = body.get("max_completion_tokens") if chat else None
    max_tokens = max_tokens if max_tokens is not None else body.get("max_tokens")
    max_tokens = 16 if max_tokens is None and not chat else max_tokens
    max_tokens = limit if max_tokens is None else max_tokens
    try:
        if isinstance(max_tokens, bool):
            raise TypeError
        max_tokens = int(max_tokens)
    except (TypeError, ValueError, OverflowError):
        raise BadRequest("max_tokens must be an integer") from None
    if not 1 <= max_tokens <= limit:
        raise BadRequest(f"max_tokens must be between 1 and {limit}")
    temperature, top_p, top_k = num("temperature", 1.0), num("top_p", 1.0), num("top_k", 0, int)
    if temperature < 0 or not 0 < top_p <= 1 or top_k < 0 and top_k != -1:
        raise BadRequest("temperature >= 0, 0 < top_p <= 1 and top_k >= 0 (or -1) are required")
    if num("n", 1, int) != 1:
        raise BadRequest("only n = 1 is supported")
    presence, frequency = num("presence_penalty", 0.0), num("frequency_penalty", 0.0)
    if not (-2 <= presence <= 2 and -2 <= frequency <= 2):
        raise BadRequest("presence_penalty and frequency_penalty must be between -2 and 2")
    for key, neutral in (("repetition_penalty", 1.0), ("min_p", 0.0)):
        if num(key, neutral) != neutral:
            raise BadRequest(f"{key} is not supported")
    stop_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in stop_ids):
        raise BadRequest("stop_token_ids must be a list of token ids")
    min_tokens = num("min_tokens", 0, int)
    if not 0 <= min_tokens <= max_tokens:
        raise BadRequest(f"min_tokens must be between 0 and max_tokens ({max_tokens})")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)
                             or not -(1 << 63) <= seed < (1 << 64)):
        raise BadRequest("seed must be an integer from -2^63 to 2^64 - 1")
    stops = stop_strings(body.get("stop"))
    lp = body.get("logprobs")
    top = (num("top_logprobs", 0, int) if lp is True else None) if chat else \
        (None if lp is None or lp is False else num("logprobs", 0, int))
    if top is not None and not 0 <= top <= 20:
        raise BadRequest("top_logprobs (logprobs) must be between 0 and 20")
    prompt_lps = None if body.get("prompt_logprobs") is None else num("prompt_logprobs", 0, int)
    if prompt_lps is not None and (chat or not 0 <= prompt_lps <= 20):
        raise BadRequest("prompt_logprobs must be between 0 and 20, on /v1/completions")
    opts = body.get("stream_options") or {}
    given = body.get("max_completion_tokens" if chat else "max_tokens") is not None or \
        body.get("max_tokens") is not None
    return dict(max_new_tokens=max_tokens, max_given=given, temperature=temperature, top_p=top_p,
                top_k=max(top_k, 0), presence_penalty=presence, frequency_penalty=frequency,
                min_tokens=min_tokens, stop_token_ids=frozenset(stop_ids), seed=seed,
                ignore_eos=bool(body.get("ignore_eos", False)),
                stream=bool(body.get("stream", False)), stop=stops, top_logprobs=top,
                token_ids=bool(body.get("return_tokens_as_token_ids")),
                return_ids=bool(body.get("return_token_ids")), prompt_logprobs=prompt_lps,
                include_usage=bool(isinstance(opts, dict) and opts.get("include_usage")))


def create_app(served: Served):
    """The FastAPI application for ``served``."""
    app = FastAPI(title="specscope reference engine", docs_url=None, redoc_url=None)

    def error(status: int, message: str, kind: str = "invalid_request_error"):
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}},
                            status_code=status)

    @app.get("/health")
    async def health():
        s = served.scheduler
        return {"status": "ok", "running": s.running, "queued": s.queued}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": served.model, "object": "model",
                                            "created": 0, "owned_by": "specscope",
                                            "max_model_len": served.max_model_len}]}

    @app.get("/metrics")
    async def metrics():
        if served.collector is None:
            return error(404, "no collector attached")
        from ..exporters.prometheus import render

        return PlainTextResponse(render(served.collector.snapshot()),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    async def handle(http: HTTPRequest, chat: bool):
        try:
            body = await http.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error(400, "the body is not JSON")
        if not isinstance(body, dict):
            return error(400, "the body must be a JSON object")
        try:
            p = _params(body, served.max_tokens_limit, chat)
            ids = (served.codec.encode_chat(body.get("messages")) if chat
                   else served.codec.encode_prompt(body.get("prompt")))
            room = served.max_model_len - len(ids) if served.max_model_len else None
            if room is not None and not p["max_given"]:  # what the context leaves, as vLLM
                p["max_new_tokens"] = max(1, min(p["max_new_tokens"], room))
            if room is not None and p["max_new_tokens"] > room:
                raise BadRequest(f"the prompt's {len(ids)} tokens and max_tokens "
                                 f"{p['max_new_tokens']} exceed the model's context of "
                                 f"{served.max_model_len} tokens")
        except BadRequest as exc:
            return error(400, str(exc))
        if served.fault == "unset_temperature_greedy" and body.get("temperature") is None \
                and (body.get("top_p") is not None or body.get("top_k") is not None):
            p["temperature"] = 0.0  # top-p or top-k without a temperature: the greedy sentinel
        rid = http.headers.get("x-request-id") or uuid.uuid4().hex
        stop = (stop_matcher(served.codec, p["stop"],
                             step_end_only=served.fault == "stop_past_step")
                if p["stop"] else None)
        req = Request(rid, ids, p["max_new_tokens"], p["temperature"], p["top_p"], p["top_k"],
                      arrival_ns=time.time_ns(), ignore_eos=p["ignore_eos"], stop=stop,
                      top_logprobs=None if p["stream"] else p["top_logprobs"],
                      presence_penalty=p["presence_penalty"],
                      frequency_penalty=p["frequency_penalty"], min_new_tokens=p["min_tokens"],
                      stop_token_ids=p["stop_token_ids"], seed=p["seed"],
                      prompt_logprobs=None if p["stream"] else p["prompt_logprobs"])
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()
        try:
            served.scheduler.submit(req, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev))
        except QueueFull as exc:
            return error(503, str(exc), "overloaded")
        stream = _Stream(served, rid, chat, len(ids), body.get("model") or served.model,
                         p["stop"], p["token_ids"], ids, p["return_ids"])
        if p["stream"]:
            return StreamingResponse(stream.sse(events, http, p["include_usage"]),
                                     media_type="text/event-stream",
                                     headers={"X-Request-ID": rid, "Cache-Control": "no-cache"})
        result = await stream.whole(events, http)
        if "error" in result:
            return error(500, result["error"]["message"], "engine_error")
        return JSONResponse(result, headers={"X-Request-ID": rid})

    @app.post("/v1/completions")
    async def completions(http: HTTPRequest):
        return await handle(http, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HTTPRequest):
        return await handle(http, chat=True)

    return app


class _Stream:
    """One request's response, built from the scheduler's events."""

    def __init__(self, served: Served, rid: str, chat: bool, n_prompt: int, model: str,
                 stops: tuple[str, ...] = (), token_ids: bool = False,
                 prompt_ids: list[int] | None = None, return_ids: bool = False) -> None:
        self.served, self.rid, self.chat, self.n_prompt = served, rid, chat, n_prompt
        self.model, self.stops, self.token_ids = model, stops, token_ids
        self.prompt_ids = prompt_ids or []
        self.return_ids = return_ids  #: the prompt's and the output's ids returned (vLLM's)
        #: streamed text held back: the tail a stop string may still complete, or all from
        #: a stop string on until the engine says it stopped there
        self.held = ""
        self.id = ("chatcmpl-" if chat else "cmpl-") + rid
        self.created = int(time.time())
        self.detok = served.codec.stream()
        self.n_out = 0

    def _chunk(self, text: str | None, finish: str | None, first: bool = False) -> dict:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if first else {}
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": [choice]}

    def _usage(self) -> dict:
        return {"prompt_tokens": self.n_prompt, "completion_tokens": self.n_out,
                "total_tokens": self.n_prompt + self.n_out}

    def _cut(self, text: str, finish: str | None) -> str:
        """The answer's text ends where a stop string begins, where the engine stopped there
        (the stop string is not returned, as OpenAI's API and the engines do)."""
        at = first_stop(text, self.stops) if finish == "stop" and self.stops else None
        return text if at is None else text[:at]

    def _release(self, delta: str, finish: str | None = None) -> str:
        """The streamed text that may go out now: all of it without stop strings; with them,
        none that a stop string could still begin, until the request has finished."""
        if not self.stops:
            return delta
        self.held += delta
        if finish is not None:
            out, self.held = self._cut(self.held, finish), ""
            return out
        at = first_stop(self.held, self.stops)
        keep = at if at is not None else max(0, len(self.held) - max(map(len, self.stops)) + 1)
        out, self.held = self.held[:keep], self.held[keep:]
        return out

    async def _events(self, events: asyncio.Queue, http) -> AsyncIterator[Event]:
        while True:
            try:
                ev = await asyncio.wait_for(events.get(), timeout=1.0)
            except asyncio.TimeoutError:
                if await http.is_disconnected():
                    self.served.scheduler.cancel(self.rid)
                    return
                continue
            yield ev
            if ev.kind != "tokens":
                return

    async def sse(self, events: asyncio.Queue, http, include_usage: bool) -> AsyncIterator[str]:
        def data(obj: dict) -> str:
            return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

        first = True
        try:
            async for ev in self._events(events, http):
                if ev.kind == "tokens":
                    assert ev.tokens is not None  # a tokens event carries them
                    self.n_out += len(ev.tokens)
                    text = self._release(self.detok.push(ev.tokens))
                    if text or first:
                        yield data(self._chunk(text, None, first))
                        first = False
                elif ev.kind == "done":
                    assert ev.output is not None  # a done event carries the output
                    tail = self._release(self.detok.push([], final=True),
                                         ev.output.finish_reason)
                    yield data(self._chunk(tail or (None if self.chat else ""),
                                           ev.output.finish_reason))
                    if include_usage:
                        usage = {**self._chunk(None, None), "choices": [], "usage": self._usage()}
                        yield data(usage)
                else:
                    yield data({"error": {"message": ev.error, "type": "engine_error"}})
            yield "data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.served.scheduler.cancel(self.rid)
            raise

    def _token(self, i: int) -> str:
        return f"token_id:{i}" if self.token_ids else self.served.codec.decode([i])

    def _logprobs(self, lps: list, ids: list[int]) -> dict[str, Any]:
        """The answer's log-probabilities as OpenAI's chat (``content``) or completions API
        lays them out."""
        if self.chat:
            return {"content": [{"token": self._token(t), "logprob": lp, "top_logprobs": [
                {"token": self._token(a), "logprob": v} for a, v in top]}
                for t, (lp, top) in zip(ids, lps)]}
        return {"tokens": [self._token(t) for t in ids[:len(lps)]],
                "token_logprobs": [lp for lp, _ in lps],
                "top_logprobs": [{self._token(a): v for a, v in top} for _, top in lps]}

    async def whole(self, events: asyncio.Queue, http) -> dict:
        finish, lps, plps = None, None, None
        async for ev in self._events(events, http):
            if ev.kind == "tokens":
                assert ev.tokens is not None  # a tokens event carries them
                self.n_out += len(ev.tokens)
                self.detok.ids.extend(ev.tokens)
            elif ev.kind == "done":
                assert ev.output is not None  # a done event carries the output
                finish = ev.output.finish_reason
                lps, plps = ev.output.logprobs, ev.output.prompt_logprobs
            else:
                return {"error": {"message": ev.error}}
        text = self._cut(self.served.codec.decode(self.detok.ids), finish)
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
        if lps:
            choice["logprobs"] = self._logprobs(lps, self.detok.ids)
        top: dict[str, Any] = {}
        if self.return_ids:  # vLLM's layout: prompt ids beside a chat's choices, else in it
            choice["token_ids"] = list(self.detok.ids)
            (top if self.chat else choice)["prompt_token_ids"] = list(self.prompt_ids)
        if plps is not None:  # vLLM's layout: per prompt token {id: {logprob, decoded_token}}
            choice["prompt_logprobs"] = [None if e is None else {
                str(a): {"logprob": v, "decoded_token": self._token(a)}
                for a, v in ((tok, e[0]), *e[1])}
                for tok, e in zip(self.prompt_ids, plps)]
        return {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [choice],
                "usage": self._usage(), **top}
