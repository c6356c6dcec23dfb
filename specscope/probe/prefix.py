"""The prefix class: greedy requests with a long shared prefix must give the same answer alone,
repeated (the engine's prefix cache warm) and at concurrency, and no answer may carry a
corruption signature its alone answer lacks. Pure; no I/O, never imports torch.

Corruption under cache reuse and concurrency (a KV block reused wrongly, a batch row's token
taken from another row) shows as answers that change with what else the engine is doing,
while acceptance looks normal. Greedy decoding makes the alone answer the reference: a repeated
or concurrent answer that parts from it where the alone answer's top-2 margin is beyond the
dtype's tie margin is structural (FAIL at once); one that parts at a near tie is a numerical
flip (counted, never judged); where the engine returns no log-probabilities a parting is
unknown. Every answer is scanned for corruption signatures (U+FFFD, one token repeated
``RUN`` times or more, literal special tokens, and JSON that does not parse where the prompt
asks for JSON and the answer ended by itself): one that the same prompt's alone answer lacks
FAILs. PASS once the agreeing pairs rule out structural partings in ``RULES_OUT`` or more of
such requests (one-sided, ``PASS_ALPHA``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from .stops import RULES_OUT, finish_reason, positions_needed

#: the class's name, as ``--classes`` takes it
PREFIX = "prefix"
CHECK = "shared prefix honoured"
#: prompts sharing the prefix; each is sent alone, alone again, then at concurrency twice
PROMPTS = 5
#: the phases, in sending order: alone (the reference), repeated (prefix cache warm), and the
#: prompts all at once (twice)
ALONE, REPEATED, CONCURRENT = "alone", "repeated", "concurrent"
#: the longest shared prefix, in tokens (a context that allows more is not needed to reuse it)
MAX_PREFIX_TOKENS = 1024
#: where the server does not say its context: a prefix of this many tokens first, halved while
#: the server refuses it as too long
DEFAULT_PREFIX_TOKENS = 512
#: characters per token the prefix is sized with (English text; a refusal halves it)
CHARS_PER_TOKEN = 4
#: one token repeated this many times in a row is a corruption signature
RUN = 16
#: special tokens that must never appear in an answer's text
SPECIAL = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>",
           "</s>", "<s>", "<unk>", "<pad>")
#: the question that asks for JSON: an answer to it that ended by itself must parse
JSON_QUESTION = "Which numbers appear above? In JSON."
QUESTIONS = ("Summarise the text above in two sentences.",
             "List three things the text above mentions, one per line.",
             "What is the first instruction in the text above? Answer briefly.",
             "Write a title for the text above.",
             JSON_QUESTION,
             "Explain the text above to a child in one paragraph.")


def prefix_tokens(max_model_len: int | None, max_tokens: int) -> int:
    """The shared prefix's size in tokens: half of what the context leaves, at most
    ``MAX_PREFIX_TOKENS``; ``DEFAULT_PREFIX_TOKENS`` where the context is unknown."""
    if not max_model_len:
        return DEFAULT_PREFIX_TOKENS
    return max(32, min(MAX_PREFIX_TOKENS, (max_model_len - max_tokens - 64) // 2))


def document(chars: int, parts: Sequence[str]) -> str:
    """A shared prefix of about ``chars`` characters: ``parts`` (the probe's prompts) numbered
    and repeated."""
    out: list[str] = []
    size, i = 0, 0
    while size < chars:
        out.append(f"{i + 1}. {parts[i % len(parts)]}\n")
        size += len(out[-1])
        i += 1
    return "".join(out)[:chars]


def prompts(prefix: str, n: int = PROMPTS) -> list[str]:
    """``n`` prompts that share ``prefix`` and differ in their question, the longest first (a
    server that takes it takes them all)."""
    asked = sorted(QUESTIONS[:n], key=len, reverse=True)
    return [f"{prefix}\n\n{q}" for q in asked]


def parses_as_json(text: str) -> bool:
    """The answer holds one JSON object or array (a code fence and words around it allowed)."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return False
    start = min(starts)
    end = text.rfind("}" if text[start] == "{" else "]")
    try:
        json.loads(text[start:end + 1])
    except ValueError:
        return False
    return True


def signatures(text: str, tokens: Sequence[str], json_ended: bool = False) -> list[str]:
    """The corruption signatures in one answer. ``json_ended``: its prompt asks for JSON and
    it ended by itself (a stop, not ``max_tokens``), so it must parse."""
    found = []
    if json_ended and not parses_as_json(text):
        found.append("invalid JSON where the prompt asks for JSON")
    if "\ufffd" in text:
        found.append("U+FFFD (bytes that are not text)")
    run, longest, last = 0, 0, None
    for t in tokens:
        run = run + 1 if t == last else 1
        last = t
        longest = max(longest, run)
    if longest >= RUN and tokens:
        found.append(f"one token repeated {longest} times")
    elif not tokens and re.search(r"(.)\1{%d,}" % (RUN - 1), text):
        found.append(f"one character repeated {RUN} times or more")
    found += [f"the literal special token {s}" for s in SPECIAL if s in text]
    return found


@dataclass(frozen=True)
class Parting:
    """Where a repeated or concurrent answer first differs from its alone one."""

    index: int  #: output position (token, or character where tokens are not returned)
    margin: float | None  #: the alone answer's top-2 margin there (nats); None: unknown


def parting(alone: Any, other: Any) -> Parting | None:
    """The first position where ``other``'s answer differs from ``alone``'s (``client.Answer``s),
    with the alone answer's margin there; None where they agree (one may stop earlier only
    where the other ended too)."""
    a = [p.token for p in alone.positions]
    b = [p.token for p in other.positions]
    if a and b:
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                p = alone.positions[i]
                margin = (p.top[0][1] - p.top[1][1]) if len(p.top) >= 2 else None
                return Parting(i, margin)
        return None if len(a) == len(b) else Parting(min(len(a), len(b)), None)
    ta, tb = alone.text, other.text
    if ta == tb:
        return None
    i = next((k for k, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    return Parting(i, None)


def json_ended(answer: Any) -> bool:
    """The answer's prompt asks for JSON and the answer ended by itself."""
    return JSON_QUESTION in answer.prompt and finish_reason(answer.response or {}) == "stop"


def prefix_check(answers: Sequence[Any], tie_margin: float) -> Assessment:
    """The class's verdict over its answers (``client.Answer``s with ``phase`` set), each
    repeated or concurrent answer against the alone answer of its prompt."""
    alone = {a.prompt: a for a in answers if a.phase == ALONE and a.response is not None}
    seen = {"agree": 0, "tie": 0, "unknown": 0}
    faults: list[str] = []
    for a in answers:
        ref = alone.get(a.prompt)
        if a.phase == ALONE or a.response is None or ref is None:
            continue
        where = f"request {a.index} ({a.phase})"
        acc = (f"; the engine's own acceptance for it {a.accepted}/{a.drafted}"
               if a.drafted else "")
        new = [s for s in signatures(a.text, [p.token for p in a.positions], json_ended(a))
               if s not in signatures(ref.text, [p.token for p in ref.positions],
                                      json_ended(ref))]
        if new:
            faults.append(f"{where}: {new[0]}, absent from the same prompt alone{acc}")
            continue
        part = parting(ref, a)
        if part is None:
            seen["agree"] += 1
        elif part.margin is None:
            seen["unknown"] += 1
        elif part.margin <= tie_margin:
            seen["tie"] += 1
        else:
            faults.append(f"{where} parts from the same prompt alone at output position "
                          f"{part.index}, where the alone answer's top-2 margin is "
                          f"{part.margin:.3g} nats (structural){acc}")
    judged = sum(seen.values()) + len(faults)
    need = positions_needed()
    ev: dict[str, Any] = {"mode_requested": "greedy", "pairs": judged, "agree": seen["agree"],
                          "tie_flips": seen["tie"], "unknown": seen["unknown"],
                          "faults": len(faults), "alone_answers": len(alone),
                          "tie_margin": tie_margin, "passes_needed": need,
                          "num_positions": sum(len(a.positions) for a in answers)}
    if faults:
        ev["message"] = f"{len(faults)} of {judged} answers: {faults[0]}"
        return Assessment(CHECK, FAIL, ev)
    if seen["agree"] + seen["tie"] >= need:
        ev["rules_out"] = (f"rules out repeated or concurrent greedy answers parting "
                           f"structurally from the same prompt alone in {RULES_OUT:.0%} or more "
                           "of requests like these")
        return Assessment(CHECK, PASS, ev)
    if not judged:
        ev["reason"] = "no repeated or concurrent answer to compare with one alone"
        return Assessment(CHECK, INCONCLUSIVE, ev)
    ev["lean"] = "honest"
    return Assessment(CHECK, INCONCLUSIVE, ev, need - seen["agree"] - seen["tie"], "pairs")
