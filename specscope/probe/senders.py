"""The probe's classes sent apart from the sampling classes' rounds, each once: the stops
class's cut requests, the prefix class's phases, the seed class's two sendings and the rescore
class's scorings. Each takes
the answers so far and returns its own, numbered after them."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import httpx

from . import limit, prefix, rescore, seed
from .client import Answer, send, token_ids
from .stops import BASES, STOPS, base_of, cuts, not_sent
from .prefix import PREFIX
from .workload import OPEN_ENDED, REPETITIVE, ProbePlan


def send_stops(url: str, engine: str, model: str, plan: ProbePlan, answers: list[Answer],
               top_logprobs: int, stop: Any, http: Any, t0: float) -> tuple[list[Answer], int]:
    """The stops class's requests: uncut greedy answers of its own where the greedy class gave
    too few (``stops.BASES``), then the cut requests of each (``stops.cuts``)."""
    firsts: dict[str, Any] = {}  # the first uncut answer of each prompt (run_checks judges by it)
    for b in (base_of(a) for a in answers if a.cls == "greedy"):
        if b is not None:
            firsts.setdefault(b.prompt, b)
    bases = list(firsts.values())
    got: list[Answer] = []
    took = top_logprobs
    if len(bases) < BASES:
        have = {b.prompt for b in bases}
        # twice the number missing: a prompt's greedy answer may end at once (an
        # end-of-sequence token first, as raw completions of an instruct model often do)
        prompts = [p for p in (*REPETITIVE, *OPEN_ENDED)
                   if p not in have][:2 * (BASES - len(bases))]
        got, took = send(url, engine, model, plan, [(STOPS, p, {"temperature": 0.0})
                                                    for p in prompts], took, stop,
                         client=http, t_start=t0)
        bases += [b for b in (base_of(a) for a in got) if b is not None]
    if not any(a.engine_failed for a in got):
        requests = [(STOPS, b.prompt, f) for b in bases[:BASES]
                    for f in cuts(b, plan.seed, min_tokens=not not_sent(engine, "min_tokens"),
                                  stop_tokens=not not_sent(engine, "stop_token_ids"))]
        more, took = send(url, engine, model, plan, requests, took, stop, client=http,
                          t_start=t0)
        for a in more:
            a.index += len(got)
        got += more
    for a in got:
        a.index += len(answers)
    return got, took


def send_prefix(url: str, engine: str, model: str, plan: ProbePlan, answers: list[Answer],
                top_logprobs: int, stop: Any, http: Any, t0: float) -> tuple[list[Answer], int]:
    """The prefix class's requests (``prefix.py``): greedy prompts sharing a long prefix (as
    long as the server's context allows: halved while it refuses the first as too long), each
    alone, alone again, then all at once twice."""
    try:
        listed = http.get(url.rstrip("/") + "/v1/models", timeout=plan.timeout_s).json()
        context = (listed.get("data") or [{}])[0].get("max_model_len")
    except (httpx.HTTPError, ValueError, AttributeError):
        context = None
    chars = prefix.prefix_tokens(context if isinstance(context, int) else None,
                                 plan.max_tokens) * prefix.CHARS_PER_TOKEN
    got: list[Answer] = []
    took = top_logprobs
    for _ in range(4):
        asks = prefix.prompts(prefix.document(chars, (*REPETITIVE, *OPEN_ENDED)))
        first, took = send(url, engine, model, replace(plan, concurrency=1),
                           [(PREFIX, asks[0], {"temperature": 0.0})], took, stop, client=http,
                           t_start=t0)
        if first[0].status != 400:
            got += first
            break
        chars //= 2  # refused: too long for its context, as the server says
    else:
        return _indexed(first, answers), took  # refused at every size: said as not supported

    def phase(name: str, requests: list[str], concurrency: int) -> None:
        nonlocal took
        sent, took = send(url, engine, model, replace(plan, concurrency=concurrency),
                          [(PREFIX, p, {"temperature": 0.0}) for p in requests], took, stop,
                          client=http, t_start=t0)
        for a in sent:
            a.phase = name
        got.extend(sent)

    got[-1].phase = prefix.ALONE
    phase(prefix.ALONE, asks[1:], 1)
    phase(prefix.REPEATED, asks, 1)
    phase(prefix.CONCURRENT, asks, len(asks))
    phase(prefix.CONCURRENT, asks, len(asks))
    return _indexed(got, answers), took


def _indexed(got: list[Answer], before: list[Answer]) -> list[Answer]:
    """``got`` numbered after ``before`` and in the order sent."""
    for i, a in enumerate(got):
        a.index = len(before) + i
    return got


def send_seed(url: str, engine: str, model: str, plan: ProbePlan, answers: list[Answer],
              top_logprobs: int, stop: Any, http: Any, t0: float) -> tuple[list[Answer], int]:
    """The seed class's requests (``seed.py``): each prompt with a seed of its own, sent alone,
    then the same requests alone again. Not sent to an engine that does not promise seeds: one
    answer saying why, never sent."""
    why = seed.not_sent(engine)
    if why:
        return _indexed([Answer(seed.SEED, "", {}, not_sent=why)], answers), top_logprobs
    got: list[Answer] = []
    took = top_logprobs
    end = time.monotonic() + plan.deadline_s  # (both sendings within the class's deadline)
    for name in (seed.FIRST, seed.AGAIN):
        sent, took = send(url, engine, model, replace(
                              plan, concurrency=1, max_tokens=min(plan.max_tokens, seed.MAX_TOKENS),
                              deadline_s=max(0.0, end - time.monotonic())),
                          seed.requests(OPEN_ENDED, plan.seed), took, stop, client=http, t_start=t0)
        for a in sent:
            a.phase = name
        got += sent
        if any(a.engine_failed for a in sent) or all(a.status == 400 for a in sent):
            break  # (refused: the seed is not taken there, said as not supported)
    return _indexed(got, answers), took


def send_rescore(url: str, engine: str, model: str, plan: ProbePlan, answers: list[Answer],
                 top_logprobs: int, stop: Any, http: Any, t0: float) -> tuple[list[Answer], int]:
    """The rescore class's requests (``rescore.py``): greedy answers with their token ids (the
    greedy class's first, then its own), each sent back whole as a prompt to be scored. Not
    sent to an engine not known to take that: one answer saying why, never sent."""
    why = rescore.not_sent(engine)
    if why:
        return _indexed([Answer(rescore.RESCORE, "", {}, not_sent=why)], answers), top_logprobs

    def based(a: Answer) -> bool:
        return a.response is not None and bool(a.positions) and token_ids(a.response) is not None

    bases = [a for a in answers if a.cls == "greedy" and based(a)][:rescore.ANSWERS]
    got: list[Answer] = []
    took = top_logprobs
    end = time.monotonic() + plan.deadline_s  # (both sendings within the class's deadline)
    if len(bases) < rescore.ANSWERS:
        have = {b.prompt for b in bases}
        prompts = [p for p in (*REPETITIVE, *OPEN_ENDED) if p not in have]
        got, took = send(url, engine, model, plan,
                         [(rescore.RESCORE, p, {"temperature": 0.0})
                          for p in prompts[:rescore.ANSWERS - len(bases)]],
                         took, stop, client=http, t_start=t0)
        for a in got:
            a.phase = rescore.BASE
        bases += [a for a in got if based(a)]
    if bases and not any(a.engine_failed for a in got):
        asks = []
        for b in bases:
            ids = token_ids(b.response or {})
            assert ids is not None  # (based)
            asks.append((rescore.RESCORE, b.prompt, rescore.scoring(*ids)))
        left = replace(plan, deadline_s=max(0.0, end - time.monotonic()))
        scored, took = send(url, engine, model, left, asks, took, stop, client=http, t_start=t0)
        for a in scored:
            a.phase = rescore.SCORE
        got += scored
    return _indexed(got, answers), took


def send_limit(url: str, engine: str, model: str, plan: ProbePlan, answers: list[Answer],
               top_logprobs: int, stop: Any, http: Any, t0: float) -> tuple[list[Answer], int]:
    """The limit class's requests (``limit.py``): a document sized to the server's context
    (halved while refused, then along the line through the sizes measured), each prompt's size
    measured, each answer asked for exactly the room its prompt leaves, and (where the engine
    takes token ids as a prompt) each answer but its last token scored. Not sent where the
    server does not say its context; where no answer could be asked for, one answer says why
    (the check is then INCONCLUSIVE)."""
    def json_of(path: str) -> Any:
        try:
            return http.get(url.rstrip("/") + path, timeout=plan.timeout_s).json()
        except (httpx.HTTPError, ValueError):
            return {}

    context = limit.context_of(json_of("/v1/models"), json_of("/props"))
    if context is None or context > limit.MAX_CONTEXT:
        why = ("the server does not say its context (max_model_len on /v1/models, n_ctx on "
               "/props)" if context is None else f"its context of {context} tokens is over "
               f"{limit.MAX_CONTEXT}: start it with a shorter one to check the context's end")
        return _indexed([Answer(limit.LIMIT, "", {}, not_sent=why)], answers), top_logprobs
    end = time.monotonic() + plan.deadline_s
    took = top_logprobs
    got: list[Answer] = []

    def sending(asks: list[tuple[str, str, dict]], phase: str) -> list[Answer]:
        nonlocal took
        left = replace(plan, deadline_s=max(0.0, end - time.monotonic()))
        sent, took = send(url, engine, model, left, asks, took, stop, client=http, t_start=t0)
        for a in sent:
            a.phase = phase
        got.extend(sent)
        return sent

    def given_up(why: str) -> tuple[list[Answer], int]:
        got.append(Answer(limit.LIMIT, "", {}, not_sent=why))
        return _indexed(got, answers), took

    measure = {"temperature": 0.0, "max_tokens": 1}
    chars = (context - limit.ROOM) * prefix.CHARS_PER_TOKEN
    parts = (*REPETITIVE, *OPEN_ENDED)
    fits: list[tuple[int, int]] = []  # (characters, tokens) measured
    too_long: int | None = None
    for _ in range(limit.SIZING):
        tried = sending([(limit.LIMIT, limit.prompt(prefix.document(chars, parts), 0),
                          measure)], limit.MEASURE)[0]
        tokens = limit.usage(tried.response or {})[0]
        if tried.status == 400 and chars > 1:  # too long, as the server says: smaller
            too_long = min(too_long or chars, chars)
            chars = limit.next_size(context, fits, too_long) if fits else chars // 2
            continue
        if tried.response is None:
            if tried.status == 400 or any(a.engine_failed for a in got):
                return _indexed(got, answers), took  # refused, or the engine failed: said so
            return given_up(f"a prompt's size could not be measured: "
                            f"{tried.error or tried.not_sent}")
        if tokens is None:
            return given_up("the server does not count a prompt's tokens (usage)")
        fits.append((chars, tokens))
        if limit.sized(context, tokens):
            break
        chars = limit.next_size(context, fits, too_long)
    else:
        return given_up(f"no prompt could be sized to the end of the context in "
                        f"{limit.SIZING} tries")
    # the rooms spread: each prompt's document about SPREAD tokens shorter than the one before
    shrink = max(1, round(limit.SPREAD * chars / tokens))
    asks = [limit.prompt(prefix.document(max(1, chars - i * shrink), parts), i)
            for i in range(limit.ANSWERS)]
    measured = [tried] + sending([(limit.LIMIT, p, measure) for p in asks[1:]], limit.MEASURE)
    fields = [(a.prompt, limit.answer_fields(context, limit.usage(a.response or {})[0]))
              for a in measured if a.response is not None]
    if not any(f for _, f in fields):
        return given_up(f"no measured prompt left between {limit.MIN_ROOM} tokens and its "
                        "room's size")
    done = sending([(limit.LIMIT, p, f) for p, f in fields if f is not None], limit.ANSWER)
    if not rescore.not_sent(engine) and not any(a.engine_failed for a in got):
        scorings = []
        for a in done:
            ids = token_ids(a.response) if a.response is not None else None
            if ids is not None and len(ids[1]) > 1:
                scorings.append((limit.LIMIT, a.prompt, limit.scoring(*ids)))
        sending(scorings, limit.SCORE)
    return _indexed(got, answers), took
