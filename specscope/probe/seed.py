"""The seed class: the same seeded request sent twice gives the same answer. Pure; no I/O, never
imports torch.

A seed promises the draws, not the distribution: two answers to one seeded request may part
only where the engine computed something different for them. Each prompt goes out twice, alone
both times (one request in flight, so a batch of the same shape), at temperature 0.8 with a
seed of its own. A pair that parts where the engine's returned log-probabilities were the same
at every position up to and including the parting (the same context, the same figures to
``EQUAL_NATS``) drew differently from the same distribution: the seed was not followed there
(a draft sampled from the batch's generator, a verify drawing from a shared one). FAIL once
``FAIL_PAIRS`` pairs part that way (one could be a draft's own numerical near tie, which the
returned figures cannot show). A pair whose figures differed before it parted is numerical
(another batch shape, a prefix cache): counted, never judged; where the figures are unknown
(llama.cpp under speculation returns none after the first token) a parting is unknown.

PASS once ``MIN_PAIRS`` pairs agree and the chance that two independent draws would have agreed
as they did (at most the product of each position's top-1 probability bound,
``checks.p_max_bound``) is under ``PASS_ALPHA``: the data rule out a seed that is ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from .. import registry
from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from ..exact import PASS_ALPHA
from .checks import Position, Semantics, p_max_bound

#: the class's name, as ``--classes`` takes it
SEED = "seed"
CHECK = "seed honoured"
#: prompts sent twice each
PROMPTS = 4
#: the two sendings of each prompt, in order
FIRST, AGAIN = "first", "again"
#: the temperature the class samples at, and the tokens each answer may run to (a seed ignored
#: parts a pair within a few sampled tokens)
TEMPERATURE = 0.8
MAX_TOKENS = 32
#: log-probabilities this close are the same figures (they travel as JSON decimals)
EQUAL_NATS = 1e-6
#: pairs parting where the figures were the same that FAIL
FAIL_PAIRS = 2
#: agreeing pairs a PASS needs, whatever the bound says
MIN_PAIRS = 3
#: the seeds the class's requests carry: this plus the prompt's number
SEED_BASE = 4242
#: the engines that promise a seeded request's draws (vLLM's per-request generators, llama.cpp's
#: per-slot sampler seed, the reference engine's); SGLang follows a seed only when started with
#: --enable-deterministic-inference (otherwise every request samples from a fixed seed, 42 on the
#: device's generator), so the class is not sent there: a parting would be its documented choice
PROMISED_BY = tuple(e.name for e in registry.ENGINES if e.seeds_repeat) + ("specscope",)


def not_sent(engine: str) -> str:
    """Why the class is not sent to ``engine``, or "" where it is."""
    if engine in PROMISED_BY:
        return ""
    if engine == "sglang":
        return ("SGLang follows a request's seed only when started with "
                "--enable-deterministic-inference")
    return f"{engine} is not known to promise that a seeded request's draws repeat"


def requests(prompts: Sequence[str], base: int = 0) -> list[tuple[str, str, dict[str, Any]]]:
    """The class's requests for one sending (``client.send``'s triples): each prompt at
    ``TEMPERATURE`` with a seed of its own (``SEED_BASE`` plus ``base`` plus its number)."""
    return [(SEED, p, {"temperature": TEMPERATURE, "seed": SEED_BASE + base + i})
            for i, p in enumerate(prompts[:PROMPTS])]


def same_figures(a: Position, b: Position) -> bool | None:
    """Whether two positions carry the same figures (their committed token's log-probability
    aside: the tokens may differ); None where either's are unknown."""
    if not a.top or not b.top:
        return None
    return len(a.top) == len(b.top) and all(
        ta == tb and abs(la - lb) <= EQUAL_NATS for (ta, la), (tb, lb) in zip(a.top, b.top))


@dataclass(frozen=True)
class Pair:
    """How the two answers to one seeded request compare."""

    kind: str  #: "agree", "parted" (the same figures up to there), "numerical", "unknown"
    index: int | None = None  #: the output position where they part
    #: log of the chance two independent draws agree on the agreeing positions (0: unknown)
    log_agree: float = 0.0


def compare(first: Any, again: Any, sem: Semantics) -> Pair:
    """The two answers (``client.Answer``s) to one seeded request, token by token."""
    a, b = first.positions, again.positions
    if not a or not b:
        return Pair("agree" if first.text == again.text else "unknown")
    log_agree, seen = 0.0, "same"  # the figures so far: "same", "unknown" or "differ"

    def judged(figures: bool | None) -> str:
        state = seen if figures else ("unknown" if figures is None else "differ")
        if "differ" in (seen, state):
            return "numerical"  # another computation: a parting has an honest cause
        return "unknown" if "unknown" in (seen, state) else "parted"

    for i, (x, y) in enumerate(zip(a, b)):
        figures = same_figures(x, y)
        if x.token != y.token:
            return Pair(judged(figures), i)
        if figures is not True and seen != "differ":
            seen = "unknown" if figures is None else "differ"
        if x.top:
            log_agree += math.log(max(p_max_bound(x, sem), 1e-300))
    if len(a) != len(b):  # one ended where the other went on: its end token's figures are
        return Pair(judged(None), min(len(a), len(b)))  # not returned (unknown there)
    return Pair("agree", None, log_agree)


def seed_check(answers: Sequence[Any], sem: Semantics) -> Assessment:
    """The class's verdict over its answers (``client.Answer``s with ``phase`` set)."""
    firsts = {a.prompt: a for a in answers if a.phase == FIRST and a.response is not None}
    pairs = [(a, compare(firsts[a.prompt], a, sem)) for a in answers
             if a.phase == AGAIN and a.response is not None and a.prompt in firsts]
    kinds = {k: sum(1 for _, p in pairs if p.kind == k)
             for k in ("agree", "parted", "numerical", "unknown")}
    log_agree = sum(p.log_agree for _, p in pairs if p.kind == "agree")
    ev: dict[str, Any] = {"mode_requested": "temperature", "temperature": TEMPERATURE,
                          "pairs": len(pairs), **kinds, "fail_pairs": FAIL_PAIRS,
                          "min_pairs": MIN_PAIRS,
                          "independent_agree_bound": math.exp(log_agree) if kinds["agree"]
                          else None,
                          "num_positions": sum(len(a.positions) for a in answers)}
    parted = [(a, p) for a, p in pairs if p.kind == "parted"]
    if parted:
        a, p = parted[0]
        ev["message"] = (f"{len(parted)} of {len(pairs)} seeded requests sent twice alone gave "
                         f"different tokens where the engine's own log-probabilities were the "
                         f"same up to there: request {a.index} first at output position "
                         f"{p.index} (seed {a.sampling.get('seed')})")
    if len(parted) >= FAIL_PAIRS:
        return Assessment(CHECK, FAIL, ev)
    bound = ev["independent_agree_bound"]
    if not parted and kinds["agree"] >= MIN_PAIRS and bound is not None and bound <= PASS_ALPHA:
        ev["rules_out"] = ("rules out draws independent of the seed: two independent draws "
                           f"would have agreed as these did with probability at most {bound:.2g}")
        return Assessment(CHECK, PASS, ev)
    if not pairs:
        ev["reason"] = "no seeded request answered twice"
        return Assessment(CHECK, INCONCLUSIVE, ev)
    if kinds["unknown"] and not kinds["agree"]:
        ev["reason"] = "the answers part where the engine returned no log-probabilities"
    ev["lean"] = "fault" if parted else "honest"  # (numerical partings are never judged)
    return Assessment(CHECK, INCONCLUSIVE, ev)
