"""The limit class: greedy answers that run to the end of the server's context must stop exactly
there, and the log-probabilities returned for their last tokens must be the ones the engine
gives the same tokens scored as a prompt. Pure; no I/O, never imports torch.

Near ``max_model_len`` a verify step is clipped: the drafts that would run past the context are
not verified, and an engine that gets that wrong commits tokens past the end or
returns figures for the wrong position (vLLM #38711: log-probabilities near ``max_model_len``).
Each prompt is sized to leave about ``ROOM`` tokens of context (its own size measured first, with
``max_tokens`` 1), then asked for exactly the room that is left, at temperature 0 with
``ignore_eos``. An answer is faulty when it runs past the room or, where the engine scores token ids as a prompt (the rescore class's engines), a token of it
whose returned figure is more than ``rescore.TOLERANCE_NATS`` from its scored one or that is
not the scored argmax beyond the dtype's tie margin (an answer ended by length short of its
room is the engine's own reserve: said, not judged). ``FAIL_ANSWERS`` faulty answers FAIL; PASS
once ``positions_needed(RULES_OUT)`` answers reached the end of the context without a fault.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from . import rescore
from .stops import finish_reason, positions_needed

#: the class's name, as ``--classes`` takes it
LIMIT = "limit"
CHECK = "context limit honoured"
#: answers sent to the end of the context
ANSWERS = 8
#: tokens of context each prompt leaves for its answer (about: a prompt's size is measured)
ROOM = 24
#: a prompt that leaves fewer tokens than this is not sent (one verify step could fill it)
MIN_ROOM = 8
#: a server whose context is longer is not sent the class (its prompts would be that long;
#: start the server with a shorter context to check its end)
MAX_CONTEXT = 32768
#: sizes measured at most before the prompts are sized to the context's end
SIZING = 8
#: the sendings: the prompt's size (``max_tokens`` 1), the answer, and its scoring
MEASURE, ANSWER, SCORE = "measure", "answer", "score"
#: faulty answers that FAIL (one could be a quantised model's numerics at one position)
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


def prompts(document: str, n: int = ANSWERS) -> list[str]:
    """``n`` prompts sharing ``document`` (so a prefix cache serves their measuring), each
    asking to go on from another item."""
    return [f"{document}\nGo on with the list above from item {i + 2}, one item per line."
            for i in range(n)]


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


def answer_fields(context: int, prompt_tokens: int) -> dict[str, Any] | None:
    """The greedy fields that ask for exactly the room ``prompt_tokens`` leave of ``context``;
    None where it leaves less than ``MIN_ROOM``."""
    room = context - prompt_tokens
    if room < MIN_ROOM:
        return None
    return {"temperature": 0.0, "max_tokens": room, "ignore_eos": True}


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
        s = rescore._figure(entry, tok)
        if s is None or j in seen or not isinstance(entry, dict):
            continue
        best = max((f for f in (rescore._figure(entry, key) for key in entry) if f is not None),
                   default=s)
        if best - s > margin:
            out.append((j, f"not the argmax: {best - s:.3f} nats below it"))
    return sorted(out), n, largest


def judge(answer: Any, score: Any | None, ids: tuple[list[int], list[int]] | None,
          margin: float) -> tuple[str, str, int, float]:
    """One answer at the context's end: ("pass" | "short" | "fault" | "early", what was seen,
    tokens compared with its scoring, the largest gap). "short": ended by length before its
    room, as an engine that keeps a token of its context does (not a fault)."""
    room = int(answer.sampling["max_tokens"])
    _, count = usage(answer.response)
    got = count if count is not None else len(answer.positions)
    finish = finish_reason(answer.response)
    if got > room or len(answer.positions) > room:
        return "fault", f"{max(got, len(answer.positions))} tokens for a room of {room}", 0, 0.0
    if got < room and finish != "length":
        return "early", f"ended ({finish or 'unsaid'}) after {got} of {room} tokens", 0, 0.0
    # (ended by length short of its room: the engine's own reserve at the end of its context,
    # said, not judged; llama.cpp keeps one token)
    ends = "pass" if got == room else "short"
    said = "" if got == room else f"ended by length {room - got} short of its room of {room}"
    if score is None or score.response is None or ids is None:
        return ends, said, 0, 0.0
    scored = ((score.response or {}).get("choices") or [{}])[0].get("prompt_logprobs")
    off, n, largest = tail_off(ids[0], ids[1][:-1], answer.positions, scored, margin)
    if off:
        j, what = off[0]
        return ("fault", f"{len(off)} of {n} tokens off their scoring, the first at output "
                f"position {j} of {room}: {what}", n, largest)
    return ends, said, n, largest


def limit_check(judged: Sequence[tuple[str, str, int, float]], context: int | None,
                scored: bool, processed: bool = False, rooms: Sequence[int] = ()) -> Assessment:
    """The class's verdict over each answer's ``judge``. ``scored``: the tokens were compared
    with their scoring (the engine takes token ids as a prompt); ``rooms``: the tokens each
    answer was asked for."""
    need = positions_needed(RULES_OUT)
    seen = {"pass": 0, "short": 0, "fault": 0, "early": 0}
    faults, shorts = [], []
    compared, gap = 0, 0.0
    for state, what, n, largest in judged:
        seen[state] += 1
        compared += n
        gap = max(gap, largest)
        if state == "fault":
            faults.append(what)
        elif state == "short":
            shorts.append(what)
    ev: dict[str, Any] = {"mode_requested": "greedy", "context": context,
                          "room_tokens": [min(rooms), max(rooms)] if rooms else None,
                          "answers": len(judged),
                          "at_the_end": len(judged) - seen["early"], "faults": seen["fault"],
                          "ended_early": seen["early"], "short_of_room": seen["short"],
                          "tails_scored": scored and not processed,
                          "tokens_compared": compared,
                          "largest_gap_nats": gap if compared else None,
                          "passes_needed": need, "fail_answers": FAIL_ANSWERS,
                          "num_positions": compared}
    if faults:
        ev["message"] = f"{len(faults)} of {len(judged)} answers: {faults[0]}"
    elif shorts:
        ev["note"] = (f"{len(shorts)} of {len(judged)} answers ended short of their room, the "
                      f"first {shorts[0].removeprefix('ended ')} (the engine's own reserve, not "
                      "judged)")
    good = seen["pass"] + seen["short"]
    if seen["fault"] >= FAIL_ANSWERS:
        return Assessment(CHECK, FAIL, ev)
    if good >= need and not faults:
        what = ("lengths and returned log-probabilities" if ev["tails_scored"]
                else "lengths only: the tokens' figures not scored here")
        ev["rules_out"] = (f"rules out answers at the end of the context going wrong in "
                           f"{RULES_OUT:.0%} or more of requests like these ({what})"
                           + (f"; {ev['note']}" if shorts else ""))
        return Assessment(CHECK, PASS, ev)
    if not judged:
        ev["reason"] = "no answer reached the end of the context"
        return Assessment(CHECK, INCONCLUSIVE, ev)
    ev["lean"] = "fault" if faults else "honest"
    return Assessment(CHECK, INCONCLUSIVE, ev, max(need - good, 0) or None, "answers")
