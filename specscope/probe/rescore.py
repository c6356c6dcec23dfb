"""The rescore class: the log-probabilities an engine returns for the tokens it generated must
agree with the ones it returns for the same tokens scored as a prompt. Pure; no I/O, never
imports torch.

Both are the target's log-softmax at the same place after the same tokens: one from the verify
(or decode) pass that committed the token, one from a prefill over the prompt and the answer
together (vLLM's ``prompt_logprobs`` on ``/v1/completions``, the tokens sent as ids). Under
speculation either can lie: vLLM #53488 returned prompt log-probabilities wildly wrong for some
requests under MTP with chunked prefill, llama.cpp #27972 returns 0.0 for generated tokens. A
greedy answer (its prompt's and its own token ids returned) is sent back whole as a prompt; a
token whose two figures differ by more than ``TOLERANCE_NATS`` is off (the two passes' numerics
differ by far less for a committed top-1), an answer with ``FAIL_POSITIONS`` such tokens is
faulty, and ``FAIL_ANSWERS`` faulty answers FAIL (one could be a quantised model's numerics at
an uncertain position: the evidence gives the largest gap seen). PASS once ``positions_needed(RULES_OUT)`` answers agree: it rules out disagreeing
answers in half or more of requests like these (one-sided, ``PASS_ALPHA``). Raw figures only:
processed ones of a greedy request are not the target's log-softmax.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from .stops import positions_needed

#: the class's name, as ``--classes`` takes it
RESCORE = "rescore"
CHECK = "log-probabilities consistent"
#: greedy answers rescored, at most (the greedy class's first, then the class's own)
ANSWERS = 8
#: the two sendings: the answer (its own greedy request, where the greedy class gave too few)
#: and its scoring
BASE, SCORE = "base", "score"
#: two figures of one token further apart than this are off (nats)
TOLERANCE_NATS = 0.5
#: off tokens that make an answer faulty, and faulty answers that FAIL
FAIL_POSITIONS = 2
FAIL_ANSWERS = 2
#: what a PASS rules out: disagreeing answers in this share of requests or more
RULES_OUT = 0.5
#: the engines known to take ``prompt_logprobs`` with token ids as the prompt and to return
#: the ids of an answer (vLLM, the reference engine); elsewhere the class is not sent
TAKEN_BY = ("vllm", "specscope")


def not_sent(engine: str) -> str:
    """Why the class is not sent to ``engine``, or "" where it is."""
    if engine in TAKEN_BY:
        return ""
    return (f"{engine} is not known to take prompt_logprobs with token ids as the prompt "
            "(vLLM's extension; the reference engine's)")


def scoring(prompt_ids: Sequence[int], output_ids: Sequence[int]) -> dict[str, Any]:
    """The sampling fields of the request that scores an answer: its prompt and output ids sent
    as one prompt (``client.body`` sends them to ``/v1/completions``)."""
    return {"temperature": 0.0, "prompt_ids": [*prompt_ids, *output_ids], "prompt_logprobs": 1}


def figure(entry: Any, token: int) -> float | None:
    """One token's log-probability in a ``prompt_logprobs`` entry ({id: {logprob} or float})."""
    if not isinstance(entry, dict):
        return None
    got = entry.get(str(token), entry.get(token))
    if isinstance(got, dict):
        got = got.get("logprob")
    return float(got) if isinstance(got, (int, float)) else None


def compare(prompt_ids: Sequence[int], output_ids: Sequence[int], generated: Sequence[Any],
            scored: Any) -> tuple[list[tuple[int, float, float]], int, float]:
    """The answer's tokens whose generated figure (``generated``: its ``Position``s) and scored
    one (the scoring response's ``prompt_logprobs``) differ by more than the tolerance, as
    (output position, generated, scored), how many tokens were compared, and the largest gap
    between the two figures of one token."""
    if not isinstance(scored, list):
        return [], 0, 0.0
    off, compared, largest = [], 0, 0.0
    for j, (tok, pos) in enumerate(zip(output_ids, generated)):
        at = len(prompt_ids) + j
        s = figure(scored[at], tok) if at < len(scored) else None
        if s is None or pos.logprob is None:
            continue
        compared += 1
        largest = max(largest, abs(s - pos.logprob))
        if abs(s - pos.logprob) > TOLERANCE_NATS:
            off.append((j, pos.logprob, s))
    return off, compared, largest


def rescore_check(pairs: Sequence[tuple[Any, Any, Sequence[int], Sequence[int]]],
                  processed: bool = False) -> Assessment:
    """The class's verdict over (answer, its scoring, prompt ids, output ids) per answer
    rescored (``client.Answer``s)."""
    need = positions_needed(RULES_OUT)
    agree, compared, faults, single, gap = 0, 0, [], 0, 0.0
    for answer, score, prompt_ids, output_ids in pairs:
        scored = ((score.response or {}).get("choices") or [{}])[0].get("prompt_logprobs")
        off, n, largest = compare(prompt_ids, output_ids, answer.positions, scored)
        compared += n
        gap = max(gap, largest)
        if len(off) >= FAIL_POSITIONS:
            j, g, s = off[0]
            faults.append(f"request {answer.index}: {len(off)} of {n} tokens disagree, the first "
                          f"at output position {j}: {g:.3f} as generated, {s:.3f} as scored "
                          f"(request {score.index})")
        elif off:
            single += 1  # one token off: not a fault alone, and not an agreeing answer
        elif n:
            agree += 1
    ev: dict[str, Any] = {"mode_requested": "greedy", "answers": len(pairs), "agree": agree,
                          "faults": len(faults), "one_token_off": single,
                          "tokens_compared": compared,
                          "tolerance_nats": TOLERANCE_NATS, "largest_gap_nats": gap if compared else None,
                          "passes_needed": need, "fail_answers": FAIL_ANSWERS,
                          "num_positions": compared}
    if processed:
        ev["reason"] = ("processed log-probabilities of greedy requests are not the target's "
                        "log-softmax: not compared (raw ones are)")
        return Assessment(CHECK, INCONCLUSIVE, ev)
    if faults:
        ev["message"] = f"{len(faults)} of {len(pairs)} answers: {faults[0]}"
    if len(faults) >= FAIL_ANSWERS:
        return Assessment(CHECK, FAIL, ev)
    if agree >= need and not faults:
        ev["rules_out"] = (f"rules out generated and prompt log-probabilities disagreeing in "
                           f"{RULES_OUT:.0%} or more of answers like these (by more than "
                           f"{TOLERANCE_NATS} nats at {FAIL_POSITIONS} tokens)")
        return Assessment(CHECK, PASS, ev)
    if not compared:
        ev["reason"] = "no answer's tokens could be compared with their scoring"
        return Assessment(CHECK, INCONCLUSIVE, ev)
    ev["lean"] = "fault" if faults else "honest"
    return Assessment(CHECK, INCONCLUSIVE, ev, max(need - agree, 0) or None, "answers")
