"""Prompt lookup (n-gram drafting) replayed from token ids: which committed tokens verify
produced. Pure; stdlib only.

vLLM's n-gram proposer (``vllm/v1/spec_decode/ngram_proposer.py``, 0.32) is a deterministic
function of the token ids so far (prompt and output) and three settings: ``k``
(``num_speculative_tokens``), ``prompt_lookup_min`` and ``prompt_lookup_max``. After every
step it looks for the longest suffix of the context, between min and max tokens long, that
occurred earlier (the earliest such occurrence where two are equally long) and drafts the up
to ``k`` tokens that followed it; none where no suffix of min tokens recurs. Replaying it over a
response's prompt and output ids says, for each output token, whether it came out of a verify
step with a draft (an accepted draft token, the token drawn at a rejection, the bonus after a
fully accepted draft) or from a step without one. The replay is only trusted where it
reproduces the engine's own per-step figures (vLLM ``--per-request-spec-decode-metrics
detailed``: drafted and accepted tokens per verify step) or at least its per-request totals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

#: output roles: a draft token verify accepted, the token verify drew where it rejected one, the
#: token after a fully accepted draft, and a token from a step that drafted nothing
ACCEPTED, CORRECTION, BONUS, UNDRAFTED, PREFILL = ("accepted", "correction", "bonus",
                                                   "undrafted", "prefill")


@dataclass(frozen=True)
class NgramSettings:
    """Prompt lookup's settings: ``k`` tokens drafted after the longest recurring suffix of
    ``min_n`` to ``max_n`` tokens; ``max_model_len`` caps the draft where it is known."""

    k: int
    min_n: int
    max_n: int
    max_model_len: int | None = None

    @classmethod
    def parse(cls, text: str) -> "NgramSettings":
        """``K:MIN:MAX`` (``4:2:5``), as ``--ngram`` takes it."""
        try:
            k, lo, hi = (int(x) for x in text.split(":"))
        except ValueError:
            raise ValueError(f"n-gram settings are K:MIN:MAX (num_speculative_tokens, "
                             f"prompt_lookup_min, prompt_lookup_max), e.g. 4:2:5; got {text!r}") from None
        if not (k >= 1 and 1 <= lo <= hi):
            raise ValueError(f"n-gram settings need K >= 1 and 1 <= MIN <= MAX; got {text!r}")
        return cls(k, lo, hi)

    def __str__(self) -> str:
        return f"{self.k}:{self.min_n}:{self.max_n}"


def propose(tokens: Sequence[int], s: NgramSettings) -> list[int]:
    """The draft vLLM's n-gram proposer makes after ``tokens`` (its algorithm: the longest
    suffix of ``min_n`` to ``max_n`` tokens that recurs, by prefix function over the reversed
    context; the earliest occurrence among the longest; up to ``k`` tokens after it)."""
    total = len(tokens)
    if total < s.min_n:
        return []
    k = s.k if s.max_model_len is None else min(s.k, s.max_model_len - total)
    if k <= 0:
        return []
    rev = tokens[::-1]
    lps = [0] * s.max_n  # prefix function, kept for the first max_n prefixes only
    longest = position = prev = 0
    i = 1
    while i < total:
        if rev[prev] == rev[i]:
            prev += 1
            if prev >= longest:  # ties move to the earliest occurrence in the original order
                longest, position = prev, i
            if i < s.max_n:
                lps[i] = prev
            if prev == s.max_n:
                prev = lps[s.max_n - 1]
            i += 1
        elif prev:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < s.min_n:
        return []
    start = total - 1 - position + longest
    return list(tokens[start:start + min(k, total - start)])


@dataclass(frozen=True)
class Replay:
    """Each output token's role, or why the replay does not hold (``roles`` empty then)."""

    roles: tuple[str, ...]
    steps: tuple[tuple[int, int], ...]  #: (drafted, accepted) per verify step with a draft
    reason: str = ""
    #: per output token, the token id drafted at its place (accepted ones and corrections), else
    #: None; empty where the replay does not hold
    drafts: tuple[int | None, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.reason

    @property
    def num_verified(self) -> int:
        """Output tokens verify produced with a draft in front of it (accepted and corrections)."""
        return sum(r in (ACCEPTED, CORRECTION) for r in self.roles)


def replay(prompt: Sequence[int], output: Sequence[int], s: NgramSettings, *,
           per_step: Sequence[tuple[int, int]] | None = None,
           totals: tuple[int, int] | None = None) -> Replay:
    """The roles of ``output``'s tokens under prompt lookup with settings ``s``, checked against
    the engine's own figures: ``per_step`` (drafted, accepted) per verify step, or only
    ``totals`` (drafted, accepted) for the request. The first output token comes from prefill.
    A step's draft may be shorter than proposed where the engine trimmed it (its per-step
    drafted count says); accepted tokens past the output's end (a stop inside a draft) are the
    engine's to count, not the output's."""
    ctx = list(prompt)
    out = list(output)
    if not out:
        return Replay((), (), "no output tokens")
    roles = [PREFILL]
    drafts: list[int | None] = [None]
    steps: list[tuple[int, int]] = []
    engine = list(per_step) if per_step is not None else None
    j = 1
    while j < len(out):
        draft = propose(ctx + out[:j], s)
        if engine is not None and draft:
            if len(steps) >= len(engine):
                return Replay((), tuple(steps), f"the replay drafts at output token {j}, after "
                              f"the engine's {len(engine)} verify steps")
            drafted = engine[len(steps)][0]
            if not 0 < drafted <= len(draft):
                return Replay((), tuple(steps), f"verify step {len(steps) + 1}: the engine "
                              f"drafted {drafted} tokens where the replay proposes {len(draft)}")
            draft = draft[:drafted]
        if not draft:
            roles.append(UNDRAFTED)
            drafts.append(None)
            j += 1
            continue
        a = 0
        while a < len(draft) and j + a < len(out) and draft[a] == out[j + a]:
            a += 1
        ends = j + a >= len(out)  # the output stopped inside (or right after) this draft
        if engine is not None:
            want = engine[len(steps)][1]
            if want != a and not (ends and want > a):
                return Replay((), tuple(steps), f"verify step {len(steps) + 1} (output token "
                              f"{j}): the engine accepted {want} of {len(draft)}, the replay {a}")
            a = min(want, len(out) - j)
        steps.append((len(draft), a))
        roles += [ACCEPTED] * a
        drafts += draft[:a]
        if j + a < len(out):
            roles.append(CORRECTION if a < len(draft) else BONUS)
            drafts.append(draft[a] if a < len(draft) else None)
        j += a + 1
    if engine is not None and len(steps) != len(engine):
        return Replay((), tuple(steps), f"the engine ran {len(engine)} verify steps with a "
                      f"draft, the replay {len(steps)}")
    if totals is not None:
        drafted, accepted = sum(d for d, _ in steps), sum(a for _, a in steps)
        if engine is None and (drafted, accepted) != tuple(totals):
            return Replay((), tuple(steps), f"the replay drafts {drafted} and accepts {accepted}; "
                          f"the engine says {totals[0]} and {totals[1]}")
    return Replay(tuple(roles[:len(out)]), tuple(steps), drafts=tuple(drafts[:len(out)]))


#: the n-gram lengths tried where the settings are inferred (vLLM's default is 5:5)
INFER_MAX_N = 10


def infer(samples: Sequence[tuple[Sequence[int], Sequence[int], Sequence[tuple[int, int]]]],
          k: int) -> list[NgramSettings]:
    """Every (``prompt_lookup_min``, ``prompt_lookup_max``) up to ``INFER_MAX_N`` under which
    the replay reproduces each sample's (prompt ids, output ids, per-step (drafted, accepted))
    exactly, with ``k`` the engine's ``num_speculative_tokens``; best tried on the samples with
    the most steps first, so wrong settings drop out early."""
    order = sorted(samples, key=lambda x: -len(x[2]))
    out = []
    for lo in range(1, INFER_MAX_N + 1):
        for hi in range(lo, INFER_MAX_N + 1):
            s = NgramSettings(k, lo, hi)
            if all(replay(p, o, s, per_step=st).ok for p, o, st in order):
                out.append(s)
    return out
