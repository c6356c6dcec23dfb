"""The stops class: greedy answers cut short by ``max_tokens`` or a stop string must end exactly
where the same answer uncut says, and one held past its end by ``min_tokens`` must not end
before it. Pure; no I/O, never imports torch.

A verify step commits several tokens at once, so an engine checks its stops against a step's
whole output, not one token: a stop string completed inside the step, or ``max_tokens`` reached
in its middle, must end the answer there, as target-only decoding would. The class needs no
log-probabilities and no reference: a greedy answer of the full length (the greedy class's, or
the class's own) is the reference for the cut requests of the same prompt.

Per cut request the verdict is exact, not statistical. An answer that runs past its cut is a
fault, FAIL at once: more tokens than ``max_tokens`` while agreeing with the uncut answer up to
there, or text that holds its stop string (an engine returns the text before it, whatever came
earlier; an answer that parted from the uncut one and then met its stop string is no fault). An answer that agrees to the
character is one pass. An answer that parts from the uncut answer before its cut tells nothing
(greedy decoding may flip at a near tie between two runs): it is counted, never judged. PASS
once the passes rule out cut requests ending in the wrong place at ``RULES_OUT`` or more of
them (a one-sided bound at ``PASS_ALPHA``); the share a fault reaches depends on how often a
cut falls inside a multi-token step, so the PASS says what it rules out of requests like these.

``min_tokens`` (vLLM's and SGLang's; llama.cpp's server has none and ignores the field, so it is
not sent there): an uncut answer that ended on its own (an end-of-sequence token, finish "stop")
after N tokens is asked again with ``min_tokens`` N + ``MIN_EXTRA``, the end-of-sequence tokens
masked until then. An answer that ends on its own with fewer tokens than that broke the request
whatever its text: FAIL. Under speculation the mask must hold at every drafted position a verify
step accepts, not only at the step's first (SGLang counted steps for ``min_new_tokens``).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any, Sequence

from .. import registry
from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from ..exact import PASS_ALPHA

#: the class's name, as ``--classes`` takes it
STOPS = "stops"
CHECK = "stops honoured"
#: the share of cut requests ending in the wrong place that a PASS rules out
RULES_OUT = 0.3
#: cut requests per uncut answer: two by max_tokens, four by a stop string (a stop string
#: is missed only where it ends inside a multi-token step: more of them, more chances)
PER_ANSWER = 6
#: uncut answers cut, at most (the greedy class's first, then the class's own)
BASES = 4
#: the fewest output tokens an uncut answer needs to be cut (a cut in its middle, and one later)
MIN_TOKENS = 6
#: a min_tokens request asks for this many tokens more than its uncut answer ended after
MIN_EXTRA = 3
#: the engines known to take ``min_tokens`` and ``stop_token_ids`` (vLLM, SGLang, the reference
#: engine). Others are not sent them: a server that ignores an unknown field (llama.cpp's does,
#: and so may a proxy in front of any engine) would end where it would have anyway, which reads
#: as a fault
HELD_ENGINES = tuple(e.name for e in registry.ENGINES if e.takes_stop_fields) + ("specscope",)


def not_sent(engine: str, field: str) -> str | None:
    """Why ``field`` (min_tokens, stop_token_ids) is not sent to ``engine``, or None."""
    if engine in HELD_ENGINES:
        return None
    if engine == "llamacpp":
        return f"not sent: llama.cpp's server takes no {field} (it ignores the field)"
    return (f"not sent: {engine} engine (a server that ignores {field} would read as a fault; "
            "--engine names one that takes it)")


@dataclass(frozen=True)
class Base:
    """An uncut greedy answer: its prompt, text, output tokens and why it ended."""

    prompt: str
    text: str
    tokens: int
    finish: str
    ids: tuple[int, ...] = ()  #: its output token ids, where the engine returns them


def finish_reason(response: dict[str, Any]) -> str:
    """Why the engine says the answer ended ("stop", "length", ...), or "" where it does not."""
    choice = (response.get("choices") or [{}])[0]
    if choice.get("finish_reason"):
        return str(choice["finish_reason"])
    fr = (response.get("meta_info") or {}).get("finish_reason")  # SGLang's /generate
    if isinstance(fr, dict):
        return str(fr.get("type") or "")
    return str(fr or "")


def output_ids(response: dict[str, Any], positions: Sequence[Any] = ()) -> tuple[int, ...]:
    """The answer's output token ids where the engine returns them (vLLM's ``return_token_ids``,
    SGLang's ``/generate``, tokens spelled ``token_id:N``), else ()."""
    choice = (response.get("choices") or [{}])[0]
    ids = choice.get("token_ids")
    if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
        return tuple(ids)
    meta = (response.get("meta_info") or {}).get("output_token_logprobs")
    if isinstance(meta, list) and all(isinstance(e, list) and len(e) > 1 for e in meta):
        return tuple(int(e[1]) for e in meta)
    spelled = [p.token for p in positions]
    if spelled and all(t.startswith("token_id:") for t in spelled):
        return tuple(int(t.split(":", 1)[1]) for t in spelled)
    return ()


def output_tokens(response: dict[str, Any], positions: int) -> int:
    """The answer's output tokens: the engine's own count where it gives one, else the
    positions returned."""
    usage = response.get("usage") or {}
    n = usage.get("completion_tokens", (response.get("meta_info") or {}).get("completion_tokens"))
    return int(n) if isinstance(n, int) else positions


def base_of(answer: Any) -> Base | None:
    """``answer`` (a ``client.Answer``) as an uncut answer, where it can be cut."""
    if answer.response is None or is_cut(answer.sampling):
        return None
    n = output_tokens(answer.response, len(answer.positions))
    if n < MIN_TOKENS or len(answer.text) < MIN_TOKENS:
        return None
    return Base(answer.prompt, answer.text, n, finish_reason(answer.response),
                output_ids(answer.response, answer.positions))


def is_cut(fields: dict[str, Any]) -> bool:
    return any(k in fields for k in ("stop", "max_tokens", "min_tokens", "stop_token_ids"))


def cuts(base: Base, seed: int, per_answer: int = PER_ANSWER, min_tokens: bool = True,
         stop_tokens: bool = True) -> list[dict[str, Any]]:
    """The cut requests' greedy fields for one uncut answer: ``max_tokens`` at two places
    inside it, and up to four stop strings, each a word whose first occurrence begins past the
    answer's first eighth, spread over the rest (the text before it is the expected answer);
    where it ended on its own and ``min_tokens`` is sent, the same request held ``MIN_EXTRA``
    tokens past its end; and where its token ids are known and ``stop_tokens`` are sent, two
    stop tokens (``stop_token_ids``): tokens first seen past a third and past two thirds of
    it (the ids before one are the expected answer)."""
    rng = random.Random(f"{seed}:{base.prompt}")
    out: list[dict[str, Any]] = []
    for frac in (0.4, 0.75)[:(per_answer + 2) // 3]:
        n = min(base.tokens - 1, max(2, int(base.tokens * frac) + rng.randint(-1, 1)))
        out.append({"temperature": 0.0, "max_tokens": n})
    words: dict[str, int] = {}
    for m in re.finditer(r"\w{3,}", base.text):
        at = base.text.find(m.group())
        if at >= max(4, len(base.text) // 8) and m.group() not in words:
            words[m.group()] = at
    picks = sorted(words, key=lambda w: words[w])
    if picks:
        spread = [picks[int(len(picks) * f)] for f in (0.15, 0.4, 0.6, 0.85)]
        for j, w in enumerate(dict.fromkeys(spread)):
            # every other one takes the character after the word too, so that the token
            # completing the stop string is the word's own last one or the next one
            stop = base.text[words[w]:words[w] + len(w) + j % 2]
            if len(out) < per_answer:
                out.append({"temperature": 0.0, "stop": [stop]})
    if min_tokens and base.finish == "stop":
        n = base.tokens + MIN_EXTRA
        out.append({"temperature": 0.0, "min_tokens": n, "max_tokens": n + 8})
    if stop_tokens and len(base.ids) >= MIN_TOKENS:
        first = {t: i for i, t in reversed(list(enumerate(base.ids)))}
        picked: list[int] = []
        for frac in (1 / 3, 2 / 3):
            new = [i for i in range(int(len(base.ids) * frac), len(base.ids))
                   if first[base.ids[i]] == i and i > 0 and base.ids[i] not in picked]
            if new:
                picked.append(base.ids[new[0]])
                out.append({"temperature": 0.0, "stop_token_ids": [base.ids[new[0]]]})
    return out


def judge(base: Base, fields: dict[str, Any], text: str, tokens: int,
          finish: str = "", ids: tuple[int, ...] = ()) -> tuple[str, str]:
    """One cut answer against its uncut one: ("pass" | "fault" | "parted", what was seen)."""
    if "stop_token_ids" in fields:
        t = int(fields["stop_token_ids"][0])
        if not ids:
            return "parted", f"stop token {t}: the answer's token ids not returned"
        if t in ids[:-1]:  # an honest engine ends at the token (returning it last, or not)
            at = ids.index(t)
            return "fault", (f"stop token {t} at output token {at}; the answer ran on "
                             f"{len(ids) - at - 1} tokens past it")
        if t not in base.ids:  # a later uncut answer of the prompt, parted from the first
            return "parted", f"stop token {t}: not in the uncut answer judged against"
        i = base.ids.index(t)
        if ids in (base.ids[:i], base.ids[:i + 1]):
            return "pass", ""
        return "parted", f"stop token {t}: the answer parted from the uncut one before it"
    if "min_tokens" in fields:
        m = int(fields["min_tokens"])
        if tokens >= m:
            return "pass", ""
        if finish == "stop":
            return "fault", (f"min_tokens {m} returned {tokens} tokens, ending on its own "
                             f"(the uncut answer ended after {base.tokens})")
        return "parted", f"min_tokens {m}: {tokens} tokens, finish {finish or 'unknown'}"
    if "max_tokens" in fields:
        n = int(fields["max_tokens"])
        agrees = base.text.startswith(text.rstrip("\ufffd"))
        if tokens > n and agrees:
            return "fault", (f"max_tokens {n} returned {tokens} tokens, the text running on "
                             "as the uncut answer does")
        if tokens == n and agrees:
            return "pass", ""
        return "parted", f"max_tokens {n}: {tokens} tokens, {'agreeing' if agrees else 'parted'}"
    stop = next(iter(fields["stop"]))
    expected = base.text[:base.text.find(stop)]
    at = text.find(stop)
    if at >= 0:  # an honest engine returns the text before its stop string, never the string
        return "fault", (f"stop string {stop!r} begins at character {at} of the answer "
                         f"({len(expected)} in the uncut one); the answer ran on "
                         f"{len(text) - at} characters past it ({text[at:][:40]!r}...)")
    if text == expected:
        return "pass", ""
    return "parted", f"stop {stop!r}: the answer parted from the uncut one before it"


def kind_of(fields: dict[str, Any]) -> str:
    """Which cut a request is: "min_tokens", "stop_token_ids", "stop" or "max_tokens"."""
    return next((k for k in ("min_tokens", "stop_token_ids", "stop") if k in fields),
                "max_tokens")


def positions_needed(rules_out: float = RULES_OUT, alpha: float = PASS_ALPHA) -> int:
    """The passes without a fault that rule out ``rules_out`` at ``alpha``: the least n with
    (1 - rules_out)^n <= alpha (the exact binomial tail at no faults seen)."""
    return math.ceil(math.log(alpha) / math.log(1.0 - rules_out))


def stops_check(bases: dict[str, Base], cut_answers: Sequence[Any]) -> Assessment:
    """The class's verdict over its answered cut requests (``client.Answer``s), each against
    the uncut answer of its prompt in ``bases``."""
    seen = {"pass": 0, "fault": 0, "parted": 0}
    faults: list[str] = []
    by_kind = {"max_tokens": 0, "stop": 0, "min_tokens": 0, "stop_token_ids": 0}
    for a in cut_answers:
        base = bases.get(a.prompt)
        if a.response is None or base is None:
            continue
        state, what = judge(base, a.sampling, a.text,
                            output_tokens(a.response, len(a.positions)),
                            finish_reason(a.response), output_ids(a.response, a.positions))
        seen[state] += 1
        by_kind[kind_of(a.sampling)] += 1
        if state == "fault":
            faults.append(f"request {a.index}: {what}")
    need = positions_needed()
    ev: dict[str, Any] = {"mode_requested": "greedy", "cut_requests": sum(seen.values()),
                          "passes": seen["pass"], "faults": seen["fault"],
                          "parted": seen["parted"], "by_kind": by_kind,
                          "uncut_answers": len(bases), "passes_needed": need,
                          "num_positions": sum(len(a.positions) for a in cut_answers)}
    if faults:
        ev["message"] = (f"{len(faults)} of {sum(seen.values())} cut answers ran past their "
                         f"cut; first: {faults[0]}")
        return Assessment(CHECK, FAIL, ev)
    if seen["pass"] >= need:
        ev["rules_out"] = (f"rules out cut requests (max_tokens, stop strings, stop tokens) "
                           f"ending past "
                           f"their cut, or held ones (min_tokens) ending before it, in "
                           f"{RULES_OUT:.0%} or more of requests like these")
        return Assessment(CHECK, PASS, ev)
    if not sum(seen.values()):
        ev["reason"] = "no cut request was answered against an uncut answer"
        return Assessment(CHECK, INCONCLUSIVE, ev)
    ev["lean"] = "honest"
    return Assessment(CHECK, INCONCLUSIVE, ev, need - seen["pass"], "cut requests")
