"""Output-quality signals and the eval gate for speculative correctness. Never imports torch.

A run passes when greedy requests reproduce target-only decoding, sampled requests show no
silent-greedy evidence, and its repetition-loop and invalid-output rates are not significantly
above the same workload decoded without speculation (the reference).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from .detectors import DRAFT_CHECK, TRUTH_CHECK, detectors_for, evaluate
from ..exact import PASS_ALPHA, _z, decide_rate, one_sided_excess
from .stats import SpecStats
from .verdict import (FAIL, INCONCLUSIVE, PASS, Assessment, GateCheck, combine, state_text,
                      why_text)


def repetition_loop(tokens: Sequence[int], n: int = 4, threshold: float = 0.5,
                    min_len: int = 24) -> bool:
    """True when at least ``threshold`` of the output's n-grams repeat an earlier n-gram.

    Outputs shorter than ``min_len`` tokens are never called loops.
    """
    if len(tokens) < max(min_len, n + 1):
        return False
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for g in grams:
        if g in seen:
            repeats += 1
        seen.add(g)
    return repeats / len(grams) >= threshold


def invalid_output(text: str, answer_format: str | None) -> bool | None:
    """Whether the text misses the prompt's expected answer format (a regex); None if none."""
    if not answer_format:
        return None
    return re.search(answer_format, text.strip()) is None


def correct_output(text: str, answer: str | None) -> bool | None:
    """Whether the expected answer appears as a whole word in the text; None if no answer."""
    if not answer:
        return None
    return re.search(r"(?<![\w.])" + re.escape(answer) + r"(?![\w])", text, re.IGNORECASE) is not None


@dataclass
class GateConfig:
    min_exact_match: float = 0.95  #: float32 near-ties may flip a rare greedy token
    alpha: float = 0.01  #: significance of "worse than the reference"
    min_excess: float = 0.10  #: and by at least this much (absolute rate)
    #: the rise the quality checks rule out before they may say PASS: 30 points, the size of
    #: the silent-greedy incident (30.6% of answers unparseable); also the share of greedy
    #: outputs differing from target-only that exact match rules out
    detect_excess: float = 0.30
    pass_alpha: float = PASS_ALPHA  #: a PASS's confidence: 1 - this, one-sided


def exact_match_check(hits: int, n: int, config: GateConfig = GateConfig()) -> GateCheck:
    """Greedy exact match: FAIL below ``min_exact_match``; PASS where it reaches it and the
    share of greedy outputs that differ from target-only is ruled out at ``detect_excess`` (13
    identical requests at the defaults); INCONCLUSIVE between."""
    em = hits / n
    check = GateCheck("greedy exact match vs target-only", FAIL, value=em,
                      threshold=config.min_exact_match, unit="requests",
                      rules_out=f"rules out greedy outputs differing from target-only decoding "
                                f"in {config.detect_excess:.0%} or more of requests")
    if em < config.min_exact_match:
        return check
    d = decide_rate(hits, n, 1.0, 1.0 - config.detect_excess, pass_alpha=config.pass_alpha)
    if d.state == PASS:
        return replace(check, state=PASS)
    return replace(check, state=INCONCLUSIVE, need=d.need, lean="honest")


def rise_check(hits: int, n: int, ref_hits: int, ref_n: int, config: GateConfig = GateConfig()
               ) -> tuple[str, int | None, float]:
    """(state, more requests needed, upper bound of the rise) of a rate against the reference's:
    FAIL where Fisher's one-sided test says worse at ``alpha`` by ``min_excess``; PASS where the
    upper bound of the rise (Agresti-Caffo, one-sided at ``pass_alpha``) lies below
    ``detect_excess``; INCONCLUSIVE between."""
    excess, p = one_sided_excess(hits, n, ref_hits, ref_n)
    z = _z(config.pass_alpha)
    p1, p0 = (hits + 1) / (n + 2), (ref_hits + 1) / (ref_n + 2)
    se = math.sqrt(p1 * (1 - p1) / (n + 2) + p0 * (1 - p0) / (ref_n + 2))
    upper = (p1 - p0) + z * se
    if p < config.alpha and excess >= config.min_excess:
        return FAIL, None, upper
    if upper < config.detect_excess:
        return PASS, None, upper
    room = config.detect_excess - (p1 - p0)
    budget = (room / z) ** 2 - p0 * (1 - p0) / (ref_n + 2) if room > 0 else 0.0
    need = max(1, math.ceil(p1 * (1 - p1) / budget) - n - 2) if budget > 0 else None
    return INCONCLUSIVE, need, upper


def requests_to_detect(ref_hits: int, ref_n: int, config: GateConfig = GateConfig()) -> int | None:
    """Requests a run needs before a rate ``detect_excess`` above the reference's would test as
    significantly worse (Fisher's exact test at ``alpha``); None where the reference is too
    small for any run to show it."""
    if not ref_n:
        return None
    rate = ref_hits / ref_n + config.detect_excess
    if rate > 1:
        return None

    def detects(n: int) -> bool:
        excess, p = one_sided_excess(math.floor(rate * n), n, ref_hits, ref_n)
        return p < config.alpha and excess >= config.min_excess

    n = 1
    while n <= 1 << 14 and not detects(n):
        n *= 2
    if n > 1 << 14:
        return None
    lo = n // 2 + 1  # the smallest n in (n/2, n] that detects
    while lo < n:
        mid = (lo + n) // 2
        if detects(mid):
            n = mid
        else:
            lo = mid + 1
    return n


#: anomaly kinds (found per request, or live) that fail the gate's sampling-truth checks
_TRUTH_KINDS = ("silent_greedy", "sampling_mismatch", "distribution_mismatch", "acceptance_mismatch",
                "residual_mismatch",
                "truncation_violated",
                "greedy_mismatch")


@dataclass(frozen=True)
class Gate:
    """An eval gate: its verdict (None: nothing checked) and its checks."""

    verdict: str | None
    checks: tuple[GateCheck, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """As ``report --json`` writes it."""
        return {"verdict": self.verdict, "checks": [c.as_dict() for c in self.checks]}

    @property
    def text(self) -> str:
        """The verdict for one line: ``PASS``, ``FAIL``, ``INCONCLUSIVE (need ~N more
        positions)`` naming the check that needs the most, or ``N/A`` when nothing was
        checked."""
        if self.verdict is None:
            return "N/A"
        if self.verdict != INCONCLUSIVE:
            return self.verdict.upper()
        waiting = [c for c in self.checks if c.state == INCONCLUSIVE]
        worst = max(waiting, key=lambda c: -1 if c.need is None else c.need)
        return f"{check_text(worst)}: {worst.check}"


def eval_gate(stats: SpecStats, reference: SpecStats | None, anomalies: Sequence[Any] = (),
              config: GateConfig = GateConfig(), run: Any = None,
              assessments: Sequence[Assessment] | None = None,
              divergence: dict[str, Any] | None = None) -> dict[str, Any]:
    """``decide_gate``'s gate as ``report --json`` writes it."""
    return decide_gate(stats, reference, anomalies, config, run, assessments, divergence).as_dict()


def decide_gate(stats: SpecStats, reference: SpecStats | None, anomalies: Sequence[Any] = (),
                config: GateConfig = GateConfig(), run: Any = None,
                assessments: Sequence[Assessment] | None = None,
                divergence: dict[str, Any] | None = None) -> Gate:
    """The gate's verdict and its checks, each PASS, FAIL or INCONCLUSIVE.

    The verdict is FAIL if any check failed, else INCONCLUSIVE if any check had too little data
    to fail (each says how much more it needs), else PASS; None when nothing could be checked.
    Sampling truth and (for runs with temperature > 0 requests, whose verification reads the
    draft's probabilities) draft health are tested on ``stats``; ``anomalies`` of those kinds
    found elsewhere (per request, or live) fail them too. ``assessments``: the detectors'
    checks on ``stats`` when the caller has them (``detectors.evaluate``); else they are run.
    ``divergence``: ``diverge``'s summary of the greedy outputs against target-only decoding,
    where the records were at hand: exact match below its threshold then fails only on a
    structural divergence (tie-flips are numerics) and passes where every divergence is one.
    """
    checks: list[GateCheck] = []
    em = stats.eval_rate("exact_match")
    if em is not None:
        hits, total = stats.evals["exact_match"]
        check = exact_match_check(int(hits), int(total), config)
        if divergence and check.state == FAIL and divergence.get("pairs"):
            structural = divergence.get("structural", 0)
            check = replace(check, state=FAIL if structural else PASS
                            if divergence["verdict"] == "PASS" else INCONCLUSIVE,
                            reason=f"diverge: {structural} structural of {divergence['pairs']} "
                                   "greedy pairs, the rest tie-flips")
        checks.append(check)
    found = {getattr(a, "kind", "") for a in anomalies if getattr(a, "severity", "") == "critical"}
    if assessments is None:
        assessments = evaluate(stats, "", detectors_for(run))[0]
    truth = [a for a in assessments if a.check.startswith(TRUTH_CHECK)]
    # a greedy_mismatch fails the greedy check; silent greedy and sampling mismatches the others
    greedy_found = "greedy_mismatch" in found
    sampled_found = bool(found & (set(_TRUTH_KINDS) - {"greedy_mismatch"}))

    def failed_by(a: Assessment) -> bool:
        return greedy_found if a.check.endswith("(greedy)") else sampled_found

    # where exact match compares greedy outputs with target-only decoding, the greedy truth
    # check adds its verdict only when it has one (a small run is INCONCLUSIVE about outputs
    # exact match already judged)
    truth = [a for a in truth if not (em is not None and a.check.endswith("(greedy)")
                                      and a.state == INCONCLUSIVE and not failed_by(a))]
    checks += [a.to_check(FAIL if failed_by(a) else None) for a in truth]
    unmatched = (greedy_found and not any(a.check.endswith("(greedy)") for a in truth)) or \
        (sampled_found and not any(not a.check.endswith("(greedy)") for a in truth))
    if unmatched:
        checks.append(GateCheck("sampling truth", FAIL, value=sorted(found & set(_TRUTH_KINDS))))
    sampled = any(m != "greedy" and t.num_verified for m, t in stats.truth.items())
    if sampled:  # greedy verification never reads the draft's probabilities
        checks += [a.to_check(FAIL if "draft_prob_collapse" in found else None)
                   for a in assessments if a.check == DRAFT_CHECK]
    # under greedy verification the exact-match check compares each output with target-only
    # decoding itself; the rate tests below add nothing to it (and on a small run could only
    # say INCONCLUSIVE about outputs already shown identical)
    greedy_only = em is not None and not sampled
    if reference is not None and not greedy_only:
        for name in ("repetition_loop", "invalid"):
            hits, n = stats.evals.get(name, [0, 0])
            ref_hits, ref_n = reference.evals.get(name, [0, 0])
            if not n or not ref_n:
                continue
            _, p = one_sided_excess(hits, n, ref_hits, ref_n)
            state, need, upper = rise_check(int(hits), int(n), int(ref_hits), int(ref_n), config)
            checks.append(GateCheck(
                f"{name} rate vs reference", state, need, "requests",
                reason=f"a reference of {ref_n} requests cannot rule out a rise of "
                       f"{config.detect_excess:.0%}",
                p_value=p, lean=("fault" if hits / n - ref_hits / ref_n >= config.detect_excess
                                 else "honest") if state == INCONCLUSIVE else None,
                rules_out=f"rules out a rise of {config.detect_excess:.0%} or more over the "
                          "reference",
                bound=upper, value=hits / n, reference=ref_hits / ref_n))
    return Gate(combine(c.state for c in checks), tuple(checks))


def check_text(c: GateCheck | Mapping[str, Any]) -> str:
    """``PASS (rules out ...)``, ``FAIL`` or ``INCONCLUSIVE (leans ...; need ~N more
    positions)`` for one gate check (typed, or as ``report --json`` lists it)."""
    c = c if isinstance(c, GateCheck) else GateCheck.from_dict(c)
    return state_text(c.state, c.need, c.unit, c.reason, c.lean, c.rules_out)


def check_why(c: GateCheck | Mapping[str, Any]) -> str:
    """Why an INCONCLUSIVE gate check has not decided."""
    c = c if isinstance(c, GateCheck) else GateCheck.from_dict(c)
    return why_text(c.need, c.unit, c.reason, c.lean)


def gate_text(gate: Mapping[str, Any]) -> str:
    """``Gate.text`` of a gate as ``report --json`` writes it."""
    return Gate(gate.get("verdict"),
                tuple(GateCheck.from_dict(c) for c in gate.get("checks") or ())).text
