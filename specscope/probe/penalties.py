"""The probe's penalties class: greedy requests with presence and frequency penalties, each
committed token checked against its position's penalised argmax. Pure; no I/O.

A verify step judges several drafted tokens at once, and each position's penalties must count
the tokens drafted before it in the same step. An engine that penalises only a step's first
position (SGLang #33643), or none under speculation (TensorRT-LLM #17701), commits drafted
tokens the penalties rule out, and its text looks merely repetitive.

From raw log-probabilities (the target's log-softmax before any processing: vLLM's default,
the reference engine's) the penalised score of each returned token is its log-probability less
``presence`` once it has appeared in the answer so far and ``frequency`` per appearance (logits
and log-probabilities differ by one constant per position, OpenAI's penalties are additive,
and vLLM and SGLang count the output alone). From processed ones (vLLM ``--logprobs-mode
processed_logprobs``) the returned distribution is already penalised. A token the engine did
not return scores at most the lowest returned log-probability (penalties only lower it).

Per position, the committed token is:
- a fault where a returned token's penalised score beats it by more than the dtype's tie
  margin: FAIL at once (structural, like the greedy check's);
- decisive where the penalties changed the choice (the raw top-1 trails it once penalised) and
  no token, returned or not, can beat it: the evidence a PASS counts;
- otherwise neither (the penalties did not matter there, a near tie, or the tail unbounded).

PASS needs ``decisive_needed()`` decisive positions and no fault: it rules out an engine
ignoring the penalties at ``RULES_OUT`` or more of the positions where they decide (one-sided,
``PASS_ALPHA``). Tokens are compared by the identity the engine returned (vLLM's token ids;
elsewhere their text, and a position whose candidates include an undecodable fragment is left
out, since two such tokens can print alike).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from .checks import SLACK, Position
from .stops import positions_needed

PENALTIES = "penalties"
#: the roles of tokens verify produced (``checks.Position.role``): a draft it accepted, the token
#: drawn at a rejection, the bonus after a fully accepted draft
VERIFIED = ("accepted", "correction", "bonus")
CHECK = "penalties honoured"
#: the class's request fields: greedy, with penalties strong enough to decide often
FIELDS: dict[str, Any] = {"temperature": 0.0, "presence_penalty": 1.0, "frequency_penalty": 0.5}
#: the share of deciding positions an engine ignoring the penalties there must reach for a
#: PASS to rule it out, and the one-sided level
RULES_OUT, PASS_ALPHA = 0.2, 0.01


def decisive_needed(rules_out: float = RULES_OUT, alpha: float = PASS_ALPHA) -> int:
    """The deciding positions without a fault that rule out ``rules_out`` at ``alpha``."""
    return positions_needed(rules_out, alpha)


def _ambiguous(token: str) -> bool:
    return not token or "\ufffd" in token


def rescored(positions: Sequence[Position], presence: float,
             frequency: float) -> list[Position | None]:
    """One answer's positions (in output order) with their log-probabilities penalised as the
    request asked (counts over the answer before each), best first again; None for a position
    whose candidates include an undecodable fragment (two such tokens can print alike)."""
    counts: dict[str, int] = {}
    out: list[Position | None] = []

    def score(tok: str, lp: float) -> float:
        c = counts.get(tok, 0)
        return lp - presence * (c > 0) - frequency * c

    for p in sorted(positions, key=lambda p: p.index):
        if p.logprob is None or not p.top or \
                any(_ambiguous(t) for t, _ in (*p.top, (p.token, 0.0))):
            out.append(None)
        else:
            top = tuple(sorted(((t, score(t, lp)) for t, lp in p.top), key=lambda x: -x[1]))
            out.append(replace(p, logprob=score(p.token, p.logprob), top=top))
        counts[p.token] = counts.get(p.token, 0) + 1
    return out


def judge(positions: Sequence[Position], presence: float, frequency: float,
          tie_margin: float, penalised: bool = False) -> list[tuple[str, Position, float]]:
    """Per position of one answer (in output order): ("fault" | "decisive" | "", the
    position, how far the best rival's penalised score is above the committed token's).
    ``penalised``: the log-probabilities are penalised already (nothing is decisive then: the
    raw top-1 is not seen)."""
    ordered = sorted(positions, key=lambda p: p.index)
    after = list(ordered) if penalised else rescored(ordered, presence, frequency)
    out = []
    for p, q in zip(ordered, after):
        if q is None or q.logprob is None or p.logprob is None or not q.top:
            out.append(("", p, 0.0))
            continue
        verdict = ""
        best = max((lp for t, lp in q.top if t != q.token), default=-math.inf)
        tail = p.top[-1][1]  # what a token not returned can score at most
        gap = best - q.logprob
        if gap > tie_margin + SLACK:
            verdict = "fault"
        elif not penalised and q.logprob >= max(best, tail) + tie_margin + SLACK and \
                p.top[0][0] != p.token and p.top[0][1] - p.logprob > tie_margin + SLACK:
            verdict = "decisive"  # the raw top-1 lost to its penalty, as it must
        out.append((verdict, p, gap))
    return out


def penalty_check(answers: Sequence[Any], tie_margin: float, penalised: bool = False,
                  unscorable: str = "") -> Assessment:
    """The class's verdict over its answered requests (``client.Answer``s, their
    ``sampling`` holding the penalties sent). ``penalised``: the engine's log-probabilities
    are penalised already (processed ones; SGLang's). ``unscorable``: why the engine's
    penalties cannot be scored from the answer (they count tokens the probe does not see)."""
    if unscorable:
        return Assessment(CHECK, INCONCLUSIVE, {
            "mode_requested": "greedy", "reason": f"not scored: {unscorable}",
            "num_positions": sum(len(a.positions) for a in answers)})
    faults: list[tuple[float, Any, Position]] = []
    decisive = known = unknown = 0
    got = [a for a in answers if a.response is not None]
    # where the engine says which tokens verify produced (``client.place``), only those count
    # as deciding: a fault confined to verify never reaches a token decoded without a draft
    placed = bool(got) and all(a.roles_by for a in got)
    for a in got:
        f = a.sampling
        judged = judge(a.positions, float(f.get("presence_penalty", 0.0)),
                       float(f.get("frequency_penalty", 0.0)), tie_margin, penalised)
        for verdict, p, gap in judged:
            known += p.known
            unknown += not p.known
            decisive += verdict == "decisive" and (not placed or p.role in VERIFIED)
            if verdict == "fault":
                faults.append((gap, a, p))
    need = decisive_needed()
    ev: dict[str, Any] = {"mode_requested": "greedy", "reading": "penalised by the engine" if penalised else
                          "raw, penalised here", "num_positions": known, "num_unknown": unknown,
                          "decisive": decisive, "faults": len(faults), "decisive_needed": need,
                          "decisive_counted": "tokens verify produced" if placed else
                          "every token (which ones verify produced is unknown)",
                          "tie_margin": tie_margin}
    if faults:
        gap, a, p = max(faults, key=lambda x: x[0])
        ev.update(worst_request_id=p.request, worst_position=p.index, worst_gap=gap,
                  message=f"request {a.index} committed {p.token!r} at output position {p.index}"
                  f" where a token it did not penalise as it must scored {gap:.3g} higher once "
                  f"penalised; {len(faults)} such position(s) of {known}")
        return Assessment(CHECK, FAIL, ev)
    if decisive >= need:
        ev["rules_out"] = (f"rules out penalties ignored at {RULES_OUT:.0%} or more of the "
                           "positions where they decide"
                           + (" among the tokens verify produced" if placed else ""))
        return Assessment(CHECK, PASS, ev)
    if not known:
        ev["reason"] = "no committed token came with log-probabilities"
        return Assessment(CHECK, INCONCLUSIVE, ev)
    if penalised:
        ev["reason"] = ("the engine's log-probabilities are penalised already: a penalty "
                        "skipped in verify is skipped in them too, so only a committed token "
                        "that is not their top-1 shows it; --reference with a server "
                        "without speculation compares the answers themselves")
        return Assessment(CHECK, INCONCLUSIVE, ev)
    ev["lean"] = "honest"
    return Assessment(CHECK, INCONCLUSIVE, ev, need - decisive, "positions where penalties decide")
