"""The sweep's client: chat requests streamed to any OpenAI-compatible server with at most
``concurrency`` in flight, each answer timed chunk by chunk (TTFT, inter-token latency) and, for
greedy requests, its tokens with the top two log-probabilities at each position (the
target-only reference's margins say whether a different greedy answer is a near-tie flip).

Token identities are the CRC-32 of each token's text: equal tokens compare equal across engines
and processes without a tokenizer (a sweep resumed later still pairs its answers).
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from .. import schema
from ..openai_wire import content_items


@dataclass
class Answer:
    """One streamed answer as the client saw it."""

    index: int
    request_id: str
    prompt: dict[str, Any]
    temperature: float
    t_send_ns: int
    top_k: int = 0
    t_end_ns: int = 0
    chunk_times_ns: list[int] = field(default_factory=list)
    text: str = ""
    completion_tokens: int | None = None  #: the server's usage count
    tokens: list[str] = field(default_factory=list)  #: greedy answers with log-probabilities
    #: the committed token's log-probability minus the best other token's
    margins: list[float | None] = field(default_factory=list)
    seconds: list[str | None] = field(default_factory=list)  #: the runner-up token's text
    timings: dict[str, Any] = field(default_factory=dict)  #: llama.cpp's per-request timings
    finish_reason: str = ""
    error: str = ""

    @property
    def output_tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else \
            len(self.tokens) or len(self.chunk_times_ns)


def token_id(text: str | None) -> int:
    """A token's identity from its text (CRC-32; not the engine's vocabulary id)."""
    return zlib.crc32((text or "").encode("utf-8", "surrogatepass"))


async def _one(client: Any, url: str, model: str, answer: Answer, body: dict[str, Any]) -> None:
    async with client.stream("POST", url + "/v1/chat/completions", json=body,
                             headers={"X-Request-ID": answer.request_id}) as r:
        if r.status_code >= 400:
            text = (await r.aread()).decode(errors="replace")
            answer.error = f"HTTP {r.status_code}: {text[:300]}"
            return
        parts = []
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            now = time.time_ns()
            if chunk.get("usage"):
                answer.completion_tokens = chunk["usage"].get("completion_tokens")
            if isinstance(chunk.get("timings"), dict):
                answer.timings = chunk["timings"]
            for c in chunk.get("choices", []):
                delta = (c.get("delta") or {}).get("content") or ""
                items = content_items(c)
                if delta or items:
                    answer.chunk_times_ns.append(now)
                parts.append(delta)
                for it in items:
                    token = it.get("token", "")
                    answer.tokens.append(token)
                    # the runner-up is the best alternative other than the token committed (at
                    # an exact tie the engine may list either first)
                    alts = [t for t in it.get("top_logprobs") or []
                            if isinstance(t.get("logprob"), (int, float)) and t.get("token") != token]
                    best = max(alts, key=lambda t: t["logprob"], default=None)
                    mine = it.get("logprob")
                    if best is not None and isinstance(mine, (int, float)):
                        answer.margins.append(mine - best["logprob"])
                        answer.seconds.append(best.get("token"))
                    else:
                        answer.margins.append(None)
                        answer.seconds.append(None)
                if c.get("finish_reason"):
                    answer.finish_reason = c["finish_reason"]
        answer.text = "".join(parts)


def send(url: str, model: str, prompts: list[dict[str, Any]], *, run_id: str, temperature: float,
         concurrency: int, max_tokens: int, logprobs: bool = True, timeout_s: float = 600.0,
         seed: int = 0, top_k: int = 0) -> tuple[list[Answer], float]:
    """Every prompt (``text`` field) streamed with at most ``concurrency`` in flight; returns the
    answers in prompt order and the wall time. ``logprobs``: greedy requests ask for the top two
    log-probabilities per token. A request that fails keeps its error and the others go on."""
    import httpx

    async def run() -> tuple[list[Answer], float]:
        sem = asyncio.Semaphore(concurrency)
        answers = [Answer(i, f"{run_id}:{i:04d}", p, temperature, 0, top_k)
                   for i, p in enumerate(prompts)]

        async def one(client: Any, a: Answer) -> None:
            turns = list(a.prompt.get("messages") or [])[:-1]
            body: dict[str, Any] = {
                "model": model, "messages": turns + [{"role": "user", "content": a.prompt["text"]}],
                "max_tokens": max_tokens, "temperature": temperature, "seed": seed + a.index,
                "stream": True, "stream_options": {"include_usage": True}}
            if top_k > 0:
                body["top_k"] = top_k
            if logprobs and temperature == 0:
                body.update(logprobs=True, top_logprobs=2)
            async with sem:
                a.t_send_ns = time.time_ns()
                try:
                    await _one(client, url, model, a, body)
                except (httpx.HTTPError, OSError, ValueError) as exc:
                    a.error = f"{type(exc).__name__}: {exc}"[:300]
                a.t_end_ns = time.time_ns()

        t0 = time.perf_counter()
        # a connection per request: a server closing an idle kept-alive connection as the next
        # request goes out on it (llama.cpp's does) would fail that request
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s),
                                     limits=httpx.Limits(max_keepalive_connections=0)) as client:
            await asyncio.gather(*(one(client, a) for a in answers))
        return answers, time.perf_counter() - t0

    return asyncio.run(run())


def request_record(a: Answer, run_id: str) -> schema.RequestRecord:
    """The answer as the client measured it. Token ids are text identities (``token_id``);
    the margins are kept only where every position has one. llama.cpp's ``timings`` give the
    request's own drafted and accepted counts (absent: unknown, never 0)."""
    n = a.output_tokens
    chunks = a.chunk_times_ns
    # the tokens only where the stream gave every one (llama.cpp under speculation gives the
    # first token's log-probabilities and no more, upstream #27972: the rest is unknown); a
    # server may count an end-of-sequence token it does not stream (SGLang does)
    whole = bool(a.tokens) and (a.completion_tokens is None or
                                len(a.tokens) in (a.completion_tokens, a.completion_tokens - 1))
    margins = (tuple(float(m) for m in a.margins if m is not None)
               if whole and None not in a.margins else ())
    drafted = a.timings.get("draft_n")
    accepted = a.timings.get("draft_n_accepted")
    return schema.RequestRecord(
        run_id=run_id, rank=0, request_id=a.request_id, prompt_id=str(a.prompt.get("id", a.index)),
        category=str(a.prompt.get("category", "")), t_arrival_ns=a.t_send_ns,
        t_first_token_ns=chunks[0] if chunks else 0, t_finish_ns=a.t_end_ns if chunks else 0,
        num_prompt_tokens=0, num_output_tokens=int(n or 0), chunk_times_ns=tuple(chunks),
        temperature=a.temperature, top_k=a.top_k, finish_reason=a.finish_reason,
        output_token_ids=tuple(token_id(t) for t in a.tokens) if whole else (),
        output_text=a.text,
        top2_margins=margins,
        second_token_ids=tuple(token_id(s) for s in a.seconds) if margins else (),
        num_draft_tokens=int(drafted) if drafted is not None else None,
        num_accepted=int(accepted) if accepted is not None else None)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q / 100 * len(v)) - 1))]


def latency(answers: list[Answer]) -> dict[str, float | None]:
    """Client-side latency figures of one window (ms; tok/s/user is output tokens after the
    first over the time after the first chunk, per request)."""
    ok = [a for a in answers if not a.error and a.chunk_times_ns]
    ttft = [(a.chunk_times_ns[0] - a.t_send_ns) / 1e6 for a in ok]
    itl = [(b - c) / 1e6 for a in ok for c, b in zip(a.chunk_times_ns, a.chunk_times_ns[1:])]
    user = [(a.output_tokens - 1) / ((a.t_end_ns - a.chunk_times_ns[0]) / 1e9) for a in ok
            if a.output_tokens > 1 and a.t_end_ns > a.chunk_times_ns[0]]
    return {"ttft_ms_p50": percentile(ttft, 50), "ttft_ms_p99": percentile(ttft, 99),
            "itl_ms_p50": percentile(itl, 50), "itl_ms_p99": percentile(itl, 99),
            "interactivity_tok_s_user_median": statistics.median(user) if user else None}


#: Student's t, two-sided 95%, by degrees of freedom (1 to 10)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def _t975(df: int) -> float:
    """Student's t quantile at 0.975 (within 0.01 past 10 degrees of freedom)."""
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


def rounds_interval(per_round: list[float]) -> dict[str, Any]:
    """tok/s over the rounds: the median and a 95% t-interval of the mean (two rounds or more)."""
    if len(per_round) < 2:
        return {}
    m, s = statistics.mean(per_round), statistics.stdev(per_round)
    h = _t975(len(per_round) - 1) * s / len(per_round) ** 0.5
    return {"tok_s_round_median": statistics.median(per_round), "tok_s_ci95": [m - h, m + h]}
