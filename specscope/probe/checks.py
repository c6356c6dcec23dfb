"""The probe's checks: what an engine's own log-probabilities say of the tokens it committed.
Pure functions over ``Position``s; no I/O, never imports torch.

Each position is one committed token with the log-probability the engine returned for it and
its top alternatives. Raw log-probabilities (vLLM's default ``raw_logprobs``, llama.cpp's
pre-sampling probabilities) are the target's log-softmax at temperature 1 over the whole
vocabulary; tempered ones (SGLang's: ``log_softmax(logits / T)``, before top-k/top-p) are
already at the request's temperature and are never tempered again; processed ones (vLLM
``--logprobs-mode processed_logprobs``) already are the distribution the request sampled from,
and are used as returned. Where a
figure depends on tokens the engine did not return, the check uses a bound and tests only the
side that bound guarantees:

- greedy: a committed token whose log-probability trails its position's top-1 by more than the
  dtype's tie margin is structural: FAIL at once. Near ties keep the in-engine allowance.
- temperature honoured: the share of committed tokens that are their position's top-1, against
  an upper bound of its expectation (p_max after temperature, renormalised over the returned
  tokens only: the unknown tail only adds to the divisor; under top-p divided by the nucleus
  mass's lower bound, top-p itself). Tested on the upper side only: "argmax more often than
  the requested temperature allows" (verify running greedy).
- top-p and top-k honoured: FAIL only where a lower bound of the probability mass ranked above
  the committed token already reaches top-p (the unknown tail bounded, not ignored), in the
  engine's sampler order, or where k returned tokens rank strictly above it.

PASS, as everywhere in specscope, only where the data rule the fault out at its size (a
one-sided bound at ``PASS_ALPHA``): an argmax share 5 points above the bound for temperature,
non-argmax tokens at 6% of greedy positions, tokens outside the truncation at 5% of the
positions checked; INCONCLUSIVE between, with its lean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment, rate_evidence
from ..exact import ALPHA, TIE_SLACK, decide_rate, fmt_p, greedy_positions_needed

#: a bound is violated only past this much (log-probabilities travel as rounded decimals)
SLACK = TIE_SLACK
#: the vocabulary size used to bound the unknown tail at temperature > 1 (where spreading the
#: tail over more tokens raises its tempered mass); larger than any current model's
DEFAULT_VOCAB = 1 << 18
#: the sampler orders: vLLM and SGLang apply temperature before top-k/top-p, llama.cpp after
TEMPERATURE_FIRST, TRUNCATION_FIRST = "temperature-first", "truncation-first"


@dataclass(frozen=True)
class Position:
    """One committed token: its log-probability and the returned alternatives, best first."""

    request: str
    index: int  #: output index (0 = the first token)
    token: str
    logprob: float | None  #: None where the engine returned none (unknown, never 0)
    top: tuple[tuple[str, float], ...] = ()
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0  #: tokens under min_p times the top-1's probability are excluded
    #: "accepted" (a draft token verify accepted), "correction" (the token verify drew where
    #: it rejected), "bonus", "undrafted", or "" where the engine does not say
    role: str = ""
    #: the token drafted at this place (an accepted one is the committed token; a correction's
    #: is the one verify rejected), in ``top``'s spelling; "" where unknown
    draft: str = ""

    @property
    def known(self) -> bool:
        return self.logprob is not None and bool(self.top)

    @property
    def is_top1(self) -> bool:
        return bool(self.top) and (self.token == self.top[0][0] or
                                   (self.logprob is not None and self.logprob >= self.top[0][1] - 1e-9))

    @property
    def margin(self) -> float:
        """The top-1 log-probability minus the committed token's (nats; 0 for the top-1)."""
        if self.logprob is None or not self.top:  # not known
            return 0.0
        return max(0.0, self.top[0][1] - self.logprob)


@dataclass
class Semantics:
    """How an engine's log-probabilities and sampler are to be read."""

    engine: str = "unknown"
    processed: bool = False  #: the distribution sampled from (True) or the raw log-softmax
    #: at the request's temperature already, before truncation (SGLang's): never tempered again
    tempered: bool = False
    #: penalties (presence, frequency) applied already: processed ones, and SGLang's
    penalised: bool = False
    order: str = TEMPERATURE_FIRST
    vocab: int = DEFAULT_VOCAB
    notes: list[str] = field(default_factory=list)

    @property
    def mode(self) -> str:
        """raw, tempered or processed, as the output says."""
        return "processed" if self.processed else "tempered" if self.tempered else "raw"


def greedy_check(positions: Sequence[Position], tie_margin: float, *, tie_rate: float = 0.01,
                 min_excess: float = 0.05, alpha: float = ALPHA) -> Assessment:
    """Every committed token of a greedy request is its position's top-1 beyond ``tie_margin``."""
    known = [p for p in positions if p.known]
    n = len(known)
    mismatched = [p for p in known if not p.is_top1]
    structural = sorted((p for p in mismatched if p.margin > tie_margin + SLACK),
                        key=lambda p: -p.margin)
    needed = greedy_positions_needed(tie_rate, min_excess, alpha)
    ev: dict[str, Any] = {"mode_requested": "greedy", "num_positions": n,
                          "num_unknown": len(positions) - n, "num_mismatches": len(mismatched),
                          "structural_mismatches": len(structural), "tie_margin": tie_margin,
                          "positions_needed": needed,
                          "observed_top1_rate": (n - len(mismatched)) / n if n else None,
                          "expected_top1_rate": 1.0}
    if structural:
        w = structural[0]
        ev.update(worst_margin=w.margin, worst_request_id=w.request, worst_position=w.index,
                  message=f"request {w.request} committed a token {w.margin:.3g} nats below its "
                  f"top-1 at output position {w.index} (tie margin {tie_margin:g}); "
                  f"{len(structural)} such position(s)")
        return Assessment("greedy losslessness", FAIL, ev)
    honest, fault = 1.0 - tie_rate, 1.0 - tie_rate - min_excess
    d = decide_rate(n - len(mismatched), n, honest, fault, alpha=alpha)
    ev.update(p_value=d.p_fail if n else None, **rate_evidence(d),
              rules_out=f"rules out non-argmax tokens at {1 - fault:.0%} or more of greedy "
                        "positions")
    if d.state == FAIL:
        ev["message"] = (f"{len(mismatched)} of {n} greedy positions are near-ties broken "
                         f"against the top-1 (p {fmt_p(d.p_fail)})")
        return Assessment("greedy losslessness", FAIL, ev)
    return Assessment("greedy losslessness", d.state, ev, d.need if n else needed, "positions")


def temperature_left(p: Position, sem: Semantics) -> float:
    """The temperature still to apply to ``p``'s returned log-probabilities: the request's, or
    1 where the engine returned them tempered already."""
    return 1.0 if sem.tempered else p.temperature


def p_max_bound(p: Position, sem: Semantics) -> float:
    """An upper bound of the probability that honest sampling commits this position's top-1
    under the request's temperature and top-p (top-k only raises it: bounded by 1 there)."""
    if p.top_k and p.top_k <= len(p.top) and not sem.processed:
        # top-k: renormalised over exactly the k best, which the engine returned
        lps = [lp for _, lp in p.top[:p.top_k]]
    else:
        lps = [lp for _, lp in p.top]
        if p.top_k and not sem.processed:
            return 1.0  # k beyond the returned tokens: no bound below 1 from these alone
    if sem.processed:  # every token tied with the top-1 counts as it
        return min(1.0, sum(math.exp(lp) for _, lp in p.top if lp >= p.top[0][1] - 1e-9))
    t = max(temperature_left(p, sem), 1e-6)
    truncated_first = p.top_p < 1.0 and sem.order == TRUNCATION_FIRST
    if truncated_first:
        # top-p on the raw probabilities, then temperature over what it kept: the returned
        # tokens inside the nucleus (the raw mass ranked above each is exact) are a part of the
        # divisor, so renormalising over them alone bounds p_max from above
        kept, above = [], 0.0
        for lp in lps:
            if above >= p.top_p:
                break
            kept.append(lp)
            above += math.exp(lp)
        lps = kept
    best = lps[0]
    z = sum(math.exp((lp - best) / t) for lp in lps)
    # every token tied with the top-1 counts as the top-1 (``Position.is_top1``): their mass
    tied = sum(1 for lp in lps if lp >= best - 1e-9)
    bound = tied / z
    if p.top_p < 1.0 and not truncated_first:
        bound = bound / p.top_p  # the tempered nucleus holds at least top-p of the mass
    return min(1.0, bound)


def temperature_check(positions: Sequence[Position], sem: Semantics, *, label: str,
                      alpha: float = ALPHA, min_excess: float = 0.05) -> Assessment:
    """Committed tokens are their position's top-1 no more often than the requested sampling
    allows (upper side only: the expectation is an upper bound)."""
    known = [p for p in positions if p.known]
    n = len(known)
    k = sum(1 for p in known if p.is_top1)
    bound = sum(p_max_bound(p, sem) for p in known)
    exp = bound / n if n else None
    ev: dict[str, Any] = {"mode_requested": label, "num_positions": n,
                          "num_unknown": len(positions) - n, "observed_top1_rate": k / n if n else None,
                          "expected_top1_rate_bound": exp,
                          "roles": sorted({p.role for p in known if p.role})}
    check = f"temperature honoured ({label})"
    if not n:
        ev["positions_needed"] = None
        ev["reason"] = "no position with log-probabilities"
        return Assessment(check, INCONCLUSIVE, ev)
    assert exp is not None  # n > 0
    d = decide_rate(k, n, exp, exp + min_excess, alpha=alpha)
    ev.update(p_value=d.p_fail, positions_needed=None if d.need is None else n + d.need,
              **rate_evidence(d), rules_out_excess=min_excess,
              rules_out=f"rules out an argmax share {min_excess:.0%} or more above the "
                        f"{exp:.1%} the requested sampling allows at most")
    if d.state == FAIL:
        ev["message"] = (f"{k} of {n} committed tokens are their position's top-1 ({k / n:.1%}); "
                         f"the requested sampling allows at most {exp:.1%} on average "
                         f"(p {fmt_p(d.p_fail)}): verify is committing the argmax")
        return Assessment(check, FAIL, ev)
    if 1.0 - exp <= min_excess:
        ev["reason"] = (f"honest sampling here commits the top-1 up to {exp:.0%} of the time: too "
                        "close to greedy to tell apart")
        return Assessment(check, INCONCLUSIVE, ev)
    if d.state == INCONCLUSIVE and d.need is None:
        ev["reason"] = (f"the observed top-1 share sits at the fault's size ({k / n:.1%} against "
                        f"{exp + min_excess:.1%}): no sample within reach settles it")
    return Assessment(check, d.state, ev, d.need, "positions")


def _tail_bound(lps: Sequence[float], t: float, vocab: int) -> float:
    """An upper bound of the tempered mass sum(p^(1/t)) of the tokens not returned: their raw
    mass is 1 - sum(returned), each at most the second smallest returned probability (the
    smallest may be the committed token, listed because it was committed: vLLM's OpenAI server
    lists the sampled token first and cuts the list at the count asked)."""
    probs = [math.exp(lp) for lp in lps]
    rest = max(0.0, 1.0 - sum(probs))
    if rest <= 0.0:
        return 0.0
    smallest = sorted(probs)[1] if len(probs) > 1 else probs[0]
    a = 1.0 / t
    if a >= 1.0:  # convex: the most mass sits in as few tokens as possible, each at the cap
        return rest * smallest ** (a - 1.0)
    spread = max(1, vocab - len(lps))  # concave: spread over every other token
    return spread * (rest / spread) ** a


def mass_above(p: Position, sem: Semantics, margin: float = 0.0) -> float | None:
    """A lower bound of the sampling distribution's mass ranked strictly above the committed
    token, in the order the engine applies top-p; None where nothing ranks above it.
    ``margin`` (nats, the dtype's tie margin): the engine's logits may differ from the returned
    log-probabilities by that much between any two tokens, so a token ranks above only by more
    than it, and the mass above is taken with every token above it ``margin`` lower."""
    assert p.logprob is not None  # a known position
    above = [lp for tok, lp in p.top if lp > p.logprob + max(SLACK, margin) and tok != p.token]
    if not above:
        return None
    if sem.processed or sem.order == TRUNCATION_FIRST or temperature_left(p, sem) == 1.0:
        a = sum(math.exp(lp) for lp in above)  # raw probabilities: exact, normalised
        return a / (a + (1.0 - a) * math.exp(margin)) if margin > 0 and a < 1.0 else a
    t = max(temperature_left(p, sem), 1e-6)
    lps = [lp for _, lp in p.top]
    ref = max(lps)
    scale = math.exp(-ref / t)  # keep the powers in range
    num = sum(math.exp(lp / t) * scale for lp in above)
    den = sum(math.exp(lp / t) * scale for lp in lps) + _tail_bound(lps, t, sem.vocab) * scale
    if den <= 0:
        return None
    return num / (num + (den - num) * math.exp(margin / t))


def truncation_check(positions: Sequence[Position], sem: Semantics, *, label: str,
                     alpha: float = ALPHA, fault_share: float = 0.05,
                     margin: float = 0.0) -> Assessment:
    """No committed token lies outside the requested top-p nucleus, top-k set or min-p floor,
    beyond the dtype's tie ``margin`` (see ``mass_above``, ``under_min_p``). Processed
    log-probabilities are the truncated distribution renormalised: the mass ranked above a token
    there can pass top-p for a token inside the nucleus, so top-p reads only a -inf processed
    log-probability as outside; ranks (top-k) and ratios to the top-1 (min-p) survive the
    renormalisation and are read as from raw ones."""
    known = [p for p in positions if p.known and (p.top_p < 1.0 or p.top_k > 0 or p.min_p > 0)]
    outside: list[tuple[Position, str]] = []
    for p in known:
        assert p.logprob is not None  # known
        if sem.processed and p.logprob == -math.inf:  # cut from the distribution it sampled
            outside.append((p, "its processed log-probability is -inf"))
            continue
        if p.min_p > 0:
            ratio = under_min_p(p, sem, max(SLACK, margin))
            if ratio is not None:
                outside.append((p, f"its probability is {ratio:.3g} of the top-1's "
                                   f"(min-p {p.min_p})"))
                continue
        if p.top_k > 0:
            above = sum(1 for tok, lp in p.top
                        if lp > p.logprob + max(SLACK, margin) and tok != p.token)
            if above >= p.top_k:
                outside.append((p, f"{above} returned tokens rank above it (top-k {p.top_k})"))
                continue
        if p.top_p < 1.0 and not sem.processed:  # renormalised: only -inf says outside
            m = mass_above(p, sem, margin)
            if m is not None and m >= p.top_p + SLACK:
                outside.append((p, f"at least {m:.4f} of the mass ranks above it (top-p {p.top_p})"))
    d = decide_rate(len(outside), len(known), 0.0, fault_share, alpha=alpha)
    ev: dict[str, Any] = {"mode_requested": label, "num_positions": len(known),
                          "num_outside": len(outside), "sampler_order": sem.order,
                          "tie_margin": margin,
                          "positions_needed": None if d.need is None else len(known) + d.need,
                          **rate_evidence(d),
                          "rules_out": f"rules out tokens outside the truncation at "
                                       f"{fault_share:.0%} or more of the positions checked"}
    check = f"truncation honoured ({label})"
    if outside:
        p, why = outside[0]
        ev.update(worst_request_id=p.request, worst_position=p.index,
                  message=f"request {p.request} committed a token outside its truncation at output "
                  f"position {p.index}: {why}; {len(outside)} such position(s)")
        return Assessment(check, FAIL, ev)
    state = PASS if d.state == PASS else INCONCLUSIVE
    return Assessment(check, state, ev, None if state == PASS else d.need, "positions")


def under_min_p(p: Position, sem: Semantics, margin: float) -> float | None:
    """The committed token's probability as a share of its top-1's where min-p judges it, if
    that lies under the floor by more than ``margin`` (logit units), else None. The ratio of
    two returned probabilities needs no normaliser, so it is exact. The engines that apply
    temperature first (vLLM, SGLang) apply min-p after it; llama.cpp before."""
    assert p.logprob is not None and p.top
    gap = max(0.0, p.top[0][1] - p.logprob)  # nats, as returned
    t = p.temperature if p.temperature > 0 else 1.0
    if sem.processed or sem.order == TRUNCATION_FIRST:
        share, below = gap, gap - margin  # the floor applied to what was returned
    elif sem.tempered:  # returned at T already: a logit margin is margin / T there
        share, below = gap, gap - margin / t
    else:  # raw: tempered here
        share, below = gap / t, (gap - margin) / t
    return math.exp(-share) if below > -math.log(p.min_p) else None


def overall(checks: Sequence[Assessment]) -> str:
    """The probe's verdict: FAIL if any check failed, else INCONCLUSIVE if any could not tell
    (or there is none), else PASS."""
    states = [c.state for c in checks]
    if FAIL in states:
        return FAIL
    if not states or INCONCLUSIVE in states:
        return INCONCLUSIVE
    return PASS
