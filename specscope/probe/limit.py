"""The limit class: greedy answers that run to the end of the server's context must stop there,
and the figures returned for their tokens must be the ones the engine gives the same tokens
scored as a prompt. Pure; no I/O, never imports torch.

Near ``max_model_len`` a verify step is clipped: the drafts that would run past the context are
not verified, and an engine that gets that wrong commits tokens past the end or returns figures
for the wrong position (vLLM #38711: log-probabilities near ``max_model_len``). Each prompt is
sized to leave about ``ROOM`` tokens of context (the rooms spread by about two tokens a prompt,
so the answers meet the end at different places in a verify step; each prompt's size measured
first, with ``max_tokens`` 1), then asked for exactly the room it leaves, at temperature 0 with
``ignore_eos``.

An answer with more tokens than its room FAILs at once (a count, not a statistic). Where the
engine scores token ids as a prompt (the rescore class's engines), each answer but its last
token is sent back with ``prompt_logprobs``, and that scoring's own greedy token is the
target's choice at the context's last place: a token whose returned figure is more than
``rescore.TOLERANCE_NATS`` from its scored one, or that is not the scored choice beyond the
dtype's tie margin, is off; ``rescore.FAIL_POSITIONS`` off tokens make an answer faulty and
``FAIL_ANSWERS`` faulty answers FAIL. An engine may keep a few tokens of its context (SGLang
0.5.21 ends every answer 2 short, with or without speculation): answers ended by length all the
same distance short of their rooms are its reserve, said and counted; distances that differ FAIL
(the stop follows where a verify step meets the end, not the context: llama.cpp 11434 under
speculation ends them 0 to 3 short, and fills every room without it). One that ended otherwise,
or whose length is unknown, is not judged. PASS once ``positions_needed(RULES_OUT)`` answers
reached the end of the context without a fault, saying how many had their figures compared.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from . import rescore
from .stops import finish_reason, positions_needed

#: the class's name, as ``--classes`` takes it
LIMIT = "limit"
CHECK = "context limit honoured"
#: answers sent to the end of the context
ANSWERS = 8
#: tokens of context the first prompt leaves for its answer (about: a prompt's size is
#: measured); each later prompt leaves about ``SPREAD`` more
ROOM = 24
SPREAD = 2
#: a prompt that leaves fewer tokens than this is not sent (one verify step could fill it)
MIN_ROOM = 8
#: a server whose context is longer is not sent the class (its prompts would be that long;
#: start the server with a shorter context to check its end)
MAX_CONTEXT = 32768
#: sizes measured at most before the prompts are sized to the context's end
SIZING = 8
#: the sendings: the prompt's size (``max_tokens`` 1), the answer, and its scoring
MEASURE, ANSWER, SCORE = "measure", "answer", "score"
#: faulty answers (by their figures) that FAIL; an answer past its room FAILs alone
FAIL_ANSWERS = 2
#: what a PASS rules out: faulty answers at the context's end in this share of requests or more
RULES_OUT = 0.5


def context_of(models: Any, props: Any) -> int | None:
    """The server's context in tokens: ``max_model_len`` on ``/v1/models`` (vLLM, SGLang, the
    reference engine), else llama.cpp's per-slot ``n_ctx`` on ``/props``; None where neither
    says."""
    try:
        got = (models.get("data") or [{}])[0].get("max_model_len")
    except (AttributeError, IndexError):
        got = None
    if not isinstance(got, int):
        try:
            got = props.get("default_generation_settings", {}).get("n_ctx")
        except AttributeError:
            got = None
    return got if isinstance(got, int) and got > 0 else None


def usage(response: dict[str, Any]) -> tuple[int | None, int | None]:
    """(prompt tokens, output tokens) as the engine counts them (OpenAI ``usage``, SGLang's
    ``meta_info``); None where it does not say."""
    use = response.get("usage") or response.get("meta_info") or {}
    p, c = use.get("prompt_tokens"), use.get("completion_tokens")
    return (p if isinstance(p, int) else None, c if isinstance(c, int) else None)


def prompt(document: str, i: int) -> str:
    """The ``i``-th prompt: ``document`` (a shared one: a prefix cache serves the measuring)
    and a request to go on with it."""
    return f"{document}\nGo on with the list above from item {i + 2}, one item per line."


def chars_for(context: int, chars: int, tokens: int) -> int:
    """The document's size in characters that leaves ``ROOM`` tokens of ``context``, from one
    measured prompt of ``chars`` characters and ``tokens`` tokens."""
    per_token = chars / max(tokens, 1)
    return max(1, int(chars + (context - ROOM - tokens) * per_token))


def next_size(context: int, fits: Sequence[tuple[int, int]], too_long: int | None) -> int:
    """The next document size (characters) to measure: on the line through the last two sizes
    that fit (``fits``: (characters, tokens) measured), or through one (``chars_for``), and
    below the smallest size refused as too long."""
    if len(fits) >= 2 and fits[-1][1] != fits[-2][1]:
        (c0, n0), (c1, n1) = fits[-2], fits[-1]
        guess = c1 + (context - ROOM - n1) * (c1 - c0) / (n1 - n0)
    else:
        guess = chars_for(context, *fits[-1])
    if too_long is not None and guess >= too_long:
        guess = (max(c for c, _ in fits) + too_long) / 2
    return max(1, int(guess))


def sized(context: int, tokens: int) -> bool:
    """A prompt of ``tokens`` leaves about ``ROOM`` of ``context`` (at least ``MIN_ROOM``)."""
    return context - 2 * ROOM <= tokens <= context - MIN_ROOM


def answer_fields(context: int, prompt_tokens: int | None) -> dict[str, Any] | None:
    """The greedy fields that ask for exactly the room ``prompt_tokens`` leave of ``context``;
    None where it leaves less than ``MIN_ROOM`` or the prompt's size is unknown."""
    if prompt_tokens is None or context - prompt_tokens < MIN_ROOM:
        return None
    return {"temperature": 0.0, "max_tokens": context - prompt_tokens, "ignore_eos": True}


def scoring(prompt_ids: Sequence[int], output_ids: Sequence[int]) -> dict[str, Any]:
    """The fields of an answer's scoring: its prompt and all but its last token as one prompt
    (``rescore.scoring``), and the greedy token it gives there with its two best figures."""
    return {**rescore.scoring(prompt_ids, output_ids[:-1]), "logprobs": 2,
            "return_token_ids": True}


def last_choice(response: dict[str, Any]) -> tuple[int, float | None] | None:
    """A scoring's own greedy token (its id) and the margin of its top two figures (None
    where fewer are given); None where the response does not say."""
    choice = (response.get("choices") or [{}])[0]
    ids = choice.get("token_ids")
    if not isinstance(ids, list) or not ids:
        return None
    tops = ((choice.get("logprobs") or {}).get("top_logprobs") or [None])[0]
    figures = sorted((v for v in tops.values() if isinstance(v, (int, float))), reverse=True) \
        if isinstance(tops, dict) else []
    return int(ids[0]), (figures[0] - figures[1] if len(figures) >= 2 else None)


def tail_off(prompt_ids: Sequence[int], output_ids: Sequence[int], generated: Sequence[Any],
             scored: Any, margin: float) -> tuple[list[tuple[int, str]], int, float]:
    """The answer's tokens that are off against their scoring: the returned figure more than
    ``rescore.TOLERANCE_NATS`` from the scored one, or not the scored argmax beyond ``margin``;
    as (output position, what), with how many tokens were compared and the largest gap."""
    off, n, largest = rescore.compare(prompt_ids, output_ids, generated, scored)
    out = [(j, f"returned {g:.3f}, scored {s:.3f}") for j, g, s in off]
    seen = {j for j, _, _ in off}
    if not isinstance(scored, list):
        return out, n, largest
    for j, tok in enumerate(output_ids):
        at = len(prompt_ids) + j
        entry = scored[at] if at < len(scored) else None
        s = rescore.figure(entry, tok)
        if s is None or j in seen or not isinstance(entry, dict):
            continue
        best = max((f for f in (rescore.figure(entry, key) for key in entry) if f is not None),
                   default=s)
        if best - s > margin:
            out.append((j, f"not the argmax: {best - s:.3f} nats below it"))
    return sorted(out), n, largest


class Judged(NamedTuple):
    """One answer at the context's end, as ``judge`` saw it."""

    state: str  #: "past", "fault", "pass", "early" (not judged) or "unknown" (length not given)
    what: str  #: what was seen, where it says something
    compared: int = 0  #: tokens compared with its scoring
    largest: float = 0.0  #: the largest gap between a token's two figures
    short: int | None = None  #: tokens short of its room, where it ended by length


def judge(answer: Any, score: Any | None, ids: tuple[list[int], list[int]] | None,
          margin: float) -> Judged:
    """One answer at the context's end: past its room, its tokens against their scoring, and
    how far short of its room it ended by length."""
    room = int(answer.sampling["max_tokens"])
    _, count = usage(answer.response)
    got = count if count is not None else (len(ids[1]) if ids is not None else None)
    if got is None:
        return Judged("unknown", "the engine gave neither its count nor its token ids")
    if got > room:
        return Judged("past", f"{got} tokens for a room of {room}")
    finish = finish_reason(answer.response)
    if got < room and finish != "length":
        return Judged("early", f"ended ({finish or 'unsaid'}) after {got} of {room} tokens")
    short = room - got
    if score is None or score.response is None or ids is None:
        return Judged("pass", "", short=short)
    scored = ((score.response or {}).get("choices") or [{}])[0].get("prompt_logprobs")
    off, n, largest = tail_off(ids[0], ids[1][:-1], answer.positions, scored, margin)
    last = last_choice(score.response)
    if last is not None and ids[1] and last[0] != ids[1][-1] and (
            last[1] is None or last[1] > margin):
        off.append((len(ids[1]) - 1, f"token {ids[1][-1]}, where the scoring's own greedy "
                                     f"choice is {last[0]}"))
    if last is not None:
        n += 1
    if len(off) >= rescore.FAIL_POSITIONS:
        j, what = off[0]
        return Judged("fault", f"{len(off)} of {n} tokens off their scoring, the first at "
                      f"output position {j} of {room}: {what}", n, largest, short)
    return Judged("pass", "", n, largest, short)


def limit_check(judged: Sequence[Judged], context: int | None, processed: bool = False,
                rooms: Sequence[int] = (), reason: str = "") -> Assessment:
    """The class's verdict over each answer's ``judge``; ``rooms``: the tokens each answer was
    asked for; ``reason``: why no answer was asked for, where none was."""
    need = positions_needed(RULES_OUT)
    seen = {s: 0 for s in ("pass", "fault", "past", "early", "unknown")}
    faults = []
    compared, gap, scored = 0, 0.0, 0
    for j in judged:
        seen[j.state] += 1
        compared += j.compared
        gap = max(gap, j.largest)
        if j.state in ("fault", "past"):
            faults.append(j.what)
        if j.state == "pass" and j.compared:
            scored += 1
    shorts = sorted({j.short for j in judged if j.short is not None})
    ev: dict[str, Any] = {"mode_requested": "greedy", "context": context,
                          "room_tokens": [min(rooms), max(rooms)] if rooms else None,
                          "answers": len(judged), "at_the_end": seen["pass"] + seen["fault"],
                          "past_the_room": seen["past"], "faults": seen["fault"],
                          "ended_early": seen["early"], "length_unknown": seen["unknown"],
                          "tokens_short": shorts, "answers_scored": scored,
                          "tokens_compared": compared,
                          "largest_gap_nats": gap if compared else None,
                          "passes_needed": need, "fail_answers": FAIL_ANSWERS,
                          "num_positions": compared}
    if len(shorts) > 1:  # the stop follows the verify step, not the context's end
        faults.insert(0, f"ended by length {', '.join(map(str, shorts))} tokens short of their "
                         "rooms: where a verify step met the end of the context, not at a "
                         "place of the context's own (target-only decoding ends every one the "
                         "same distance from it)")
    if faults:
        ev["message"] = (faults[0] if len(shorts) > 1
                         else f"{len(faults)} of {len(judged)} answers: {faults[0]}")
    elif shorts and shorts[0]:
        ev["note"] = (f"every answer ended by length {shorts[0]} tokens short of its room: the "
                      "engine's own reserve")
    if seen["past"] or seen["fault"] >= FAIL_ANSWERS or len(shorts) > 1:
        return Assessment(CHECK, FAIL, ev)
    good = seen["pass"]
    if good >= need and not faults:
        what = ("lengths and returned log-probabilities" if scored >= need and not processed
                else f"lengths; returned log-probabilities compared in {scored} of them"
                if scored and not processed
                else "lengths only: the tokens' figures not scored here")
        ev["rules_out"] = (f"rules out answers at the end of the context going wrong in "
                           f"{RULES_OUT:.0%} or more of requests like these ({what})"
                           + (f"; {ev['note']}" if "note" in ev else ""))
        return Assessment(CHECK, PASS, ev)
    if not judged:
        ev["reason"] = reason or "no answer reached the end of the context"
        return Assessment(CHECK, INCONCLUSIVE, ev)
    ev["lean"] = "fault" if faults else "honest"
    return Assessment(CHECK, INCONCLUSIVE, ev, max(need - good, 0) or None, "answers")
