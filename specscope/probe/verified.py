"""Which committed tokens the temperature check tests, and what it cannot see. Pure; no I/O.

A verify fault (committing the argmax for sampled requests) touches only the tokens verify
produced: accepted draft tokens and the token drawn at a rejection. Where each token's role is
known (every step drafted, or prompt lookup replayed from the token ids), the check tests those
tokens alone. Where it is not, it tests every token, and tokens sampled outside verify dilute
the fault: this module then bounds the smallest pooled top-1 share that a fault confined to the
verified tokens is sure to give (each request's verified tokens at most as many as the engine's
own counts allow, placed where honest sampling is nearest the argmax already, the others at a
lower bound of their honest top-1 probability), and a PASS stands only where the share the
check rules out (the allowed share plus the fault's size) is no higher.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from ..collector.verdict import FAIL, INCONCLUSIVE, Assessment
from .checks import Position, Semantics, _tail_bound, p_max_bound, temperature_left
from .client import engine_counts, token_ids
from .ngram import infer, replay

#: roles of the tokens verify committed: the temperature check keeps only these where known
VERIFY_ROLES = ("accepted", "correction")
#: the excess top-1 share a temperature check's PASS rules out where its evidence does not say
#: (``temperature_check``'s ``min_excess``)
DEFAULT_RULED_OUT = 0.05
#: evidence keys under which a check may state the excess top-1 share its PASS rules out
RULED_OUT_KEYS = ("rules_out_excess", "min_excess")


@dataclass
class Selection:
    """The positions a class's temperature check tests and how they were chosen."""

    positions: list[Position]
    #: "verify" (the tokens verify produced, each placed), "all" (no request shows speculation:
    #: nothing to dilute), or "blind" (roles unknown: every token, a fault confined to verified
    #: ones diluted)
    how: str
    requests_placed: int = 0
    requests_blind: int = 0
    placed_by: list[str] = field(default_factory=list)  #: "per-step", "replay", "engine"
    #: per blind request, (its positions, an upper bound of its verified tokens or None)
    blind: list[tuple[list[Position], int | None]] = field(default_factory=list)
    why_blind: list[str] = field(default_factory=list)


def select(answers: Sequence[Any], *, silent_drafted_nothing: bool = False) -> Selection:
    """The positions to test from a class's answered requests (``client.Answer``s): the tokens
    verify produced where any request's roles are known and it drafted; every token where no
    request shows speculation (each drafted nothing, or the engine reports no speculative
    counts at all: a target-only server's responses look the same); else every token, blind.
    ``silent_drafted_nothing``: a response without counts drafted nothing (llama.cpp leaves
    ``draft_n`` out of a request that drafted nothing)."""
    got = [a for a in answers if getattr(a, "response", None) is not None]
    placed = [a for a in got if a.roles_by]
    blind = [(a, 0 if a.verified_at_most is None and silent_drafted_nothing
              else a.verified_at_most) for a in got if not a.roles_by]
    verify = [p for a in placed for p in a.positions if p.role in VERIFY_ROLES]
    by = sorted({a.roles_by for a in placed})
    if verify:
        return Selection(verify, "verify", len(placed), len(blind), by)
    everything = [p for a in got for p in a.positions]
    if all(not v for _, v in blind):  # none shows a verified token (or any count at all)
        return Selection(everything, "all", len(placed), len(blind), by)
    return Selection(everything, "blind", len(placed), len(blind), by,
                     [(list(a.positions), v) for a, v in blind],
                     sorted({a.why_unplaced for a, _ in blind if a.why_unplaced}))


def top1_floor(p: Position, sem: Semantics) -> float:
    """A lower bound of the probability that honest sampling commits this position's top-1:
    tempered over the returned tokens and an upper bound of the tempered unknown tail
    (truncation only raises it)."""
    if sem.processed:
        return min(1.0, math.exp(p.top[0][1]))
    t = max(temperature_left(p, sem), 1e-6)
    lps = [lp for _, lp in p.top]
    best = lps[0]
    den = sum(math.exp((lp - best) / t) for lp in lps)
    den += _tail_bound(lps, t, sem.vocab) * math.exp(-best / t)
    return min(1.0, 1.0 / den) if den > 0 else 0.0


def confined_share(sel: Selection, sem: Semantics) -> float | None:
    """The smallest top-1 share over ``sel.positions`` (those with log-probabilities) that
    verify committing the argmax at every verified token is sure to give in expectation: per
    blind request, its verified tokens (at most ``verified_at_most``) placed where honest
    sampling is nearest the top-1 already, the others at their honest floor (``top1_floor``).
    None where a blind request's engine gives no counts (the fault could sit anywhere)."""
    known = [p for p in sel.positions if p.known]
    if not known:
        return None
    total = 0.0
    for positions, verified in sel.blind:
        if verified is None:
            return None
        floors = sorted((top1_floor(p, sem) for p in positions if p.known), reverse=True)
        total += min(verified, len(floors)) + sum(floors[verified:])
    return total / len(known)


def ruled_out(check: Assessment) -> float:
    """The excess top-1 share ``check``'s PASS rules out (its evidence, else the default)."""
    for key in RULED_OUT_KEYS:
        v = check.evidence.get(key)
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return DEFAULT_RULED_OUT


def guard(check: Assessment, sel: Selection, sem: Semantics) -> Assessment:
    """``check`` with what its selection says: the positions it used, and where it tested
    blind, a PASS only if the share it rules out (the allowed top-1 share plus the fault's
    size) is no higher than the share a fault confined to verified tokens is sure to give; else
    INCONCLUSIVE with the reason."""
    ev = {**check.evidence, "positions_tested": sel.how, "requests_placed": sel.requests_placed,
          "requests_blind": sel.requests_blind}
    if sel.placed_by:
        ev["roles_from"] = sel.placed_by
    if sel.how != "blind":
        return replace(check, evidence=ev)
    known = [p for p in sel.positions if p.known]
    share = confined_share(sel, sem)
    allowed = sum(p_max_bound(p, sem) for p in known) / len(known) if known else None
    target = None if allowed is None else allowed + ruled_out(check)
    verified = [v for _, v in sel.blind]
    at_most = None if None in verified else sum(v for v in verified if v is not None)
    ev.update(verified_at_most=at_most,
              confined_fault_top1_rate=share, ruled_out_top1_rate=target,
              why_unplaced=sel.why_blind)
    if check.state == FAIL or (share is not None and target is not None and share >= target):
        return replace(check, evidence=ev)
    if share is None:
        why = ("some requests give no speculative counts, so a fault confined to the tokens "
               "verify produced could sit at any few of them")
    else:
        why = (f"which tokens verify produced is unknown ({'; '.join(sel.why_blind) or 'no roles'});"
               f" a fault confined to them (at most {at_most} of {len(known)}) is sure to "
               f"give a top-1 share of only {share:.3f}, short of the {target:.3f} this check "
               "can rule out")
    ev["reason"] = why
    return Assessment(check.check, INCONCLUSIVE, ev, None, check.unit)


def infer_ngram(answers: Sequence[Any]) -> tuple[Any, str]:
    """Prompt lookup's settings read off the engine where it was not told them: every
    (min, max) n-gram length under which the replay reproduces vLLM's per-step figures for
    each unplaced request with token ids, with k its ``num_spec_tokens``. (settings, note):
    settings where at least one fits and all that fit give every token the same role; None
    with the reason otherwise (no such request: an empty note)."""
    samples, ks = [], set()
    for a in answers:
        if getattr(a, "response", None) is None or a.roles_by:
            continue
        ids, req = token_ids(a.response), engine_counts(a.response)
        detail = req.extra if req is not None else {}
        acc, dra = detail.get("per_step_accepted"), detail.get("per_step_drafted")
        if ids is None or not acc or not dra or len(acc) != len(dra):
            continue
        samples.append((ids[0], ids[1], list(zip(dra, acc))))
        spec = (a.response.get("metrics") or {}).get("speculative_decoding") or {}
        ks.add(int(spec.get("num_spec_tokens") or max(dra)))
    if not samples:
        return None, ""
    if len(ks) != 1:
        return None, f"requests disagree on num_speculative_tokens ({sorted(ks)})"
    found = infer(samples, ks.pop())
    if not found:
        return None, ("no prompt-lookup settings reproduce vLLM's per-step figures (is it "
                      "prompt lookup?)")
    if any(len({replay(p, o, s).roles for s in found}) > 1 for p, o, _ in samples):
        return None, (f"{len(found)} prompt-lookup settings reproduce vLLM's per-step figures "
                      "but place tokens differently: give --ngram K:MIN:MAX")
    return found[0], (f"prompt-lookup settings read off vLLM's per-step figures over "
                      f"{len(samples)} requests: {found[0]}"
                      + (f" (or {', '.join(map(str, found[1:4]))}{' ...' if len(found) > 4 else ''}"
                         ", which place every token alike)" if len(found) > 1 else ""))
