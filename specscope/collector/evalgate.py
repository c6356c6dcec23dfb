"""Output-quality signals and the eval gate for speculative correctness. Never imports torch.

A run passes when greedy requests reproduce target-only decoding, sampled requests show no
silent-greedy evidence, and its repetition-loop and invalid-output rates are not significantly
above the same workload decoded without speculation (the reference).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

from .stats import SpecStats


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


def one_sided_excess(hits_a: int, n_a: int, hits_b: int, n_b: int) -> tuple[float, float]:
    """(rate_a - rate_b, p-value) of a one-sided two-proportion z-test that a > b."""
    if not n_a or not n_b:
        return 0.0, 1.0
    pa, pb = hits_a / n_a, hits_b / n_b
    pooled = (hits_a + hits_b) / (n_a + n_b)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    if se == 0:
        return pa - pb, 1.0 if pa <= pb else 0.0
    z = (pa - pb) / se
    return pa - pb, 0.5 * math.erfc(z / math.sqrt(2))


@dataclass
class GateConfig:
    min_exact_match: float = 0.95  #: float32 near-ties may flip a rare greedy token
    alpha: float = 0.01  #: significance of "worse than the reference"
    min_excess: float = 0.10  #: and by at least this much (absolute rate)


def eval_gate(stats: SpecStats, reference: SpecStats | None, anomalies: Sequence[Any] = (),
              config: GateConfig = GateConfig()) -> dict[str, Any]:
    """The gate's verdict ("pass", "fail", or None when nothing could be checked) and checks."""
    checks: list[dict[str, Any]] = []
    em = stats.eval_rate("exact_match")
    if em is not None:
        checks.append({"check": "greedy exact match vs target-only", "value": em,
                       "threshold": config.min_exact_match, "pass": em >= config.min_exact_match})
    silent = [a for a in anomalies
              if getattr(a, "kind", "") in ("silent_greedy", "sampling_mismatch")]
    if stats.truth:
        checks.append({"check": "sampling truth (committed tokens follow the requested "
                                "distribution)", "value": len(silent),
                       "threshold": 0, "pass": not silent})
    if reference is not None:
        for name in ("repetition_loop", "invalid"):
            hits, n = stats.evals.get(name, [0, 0])
            ref_hits, ref_n = reference.evals.get(name, [0, 0])
            if not n or not ref_n:
                continue
            excess, p = one_sided_excess(hits, n, ref_hits, ref_n)
            worse = p < config.alpha and excess >= config.min_excess
            checks.append({"check": f"{name} rate vs reference", "value": hits / n,
                           "reference": ref_hits / ref_n, "p_value": p, "pass": not worse})
    verdict = None if not checks else ("pass" if all(c["pass"] for c in checks) else "fail")
    return {"verdict": verdict, "checks": checks}
