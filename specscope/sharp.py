"""The sharpness test of sampling truth: were committed tokens drawn at the temperature their
requests asked for? One sequential likelihood-ratio test, read the same way in the engine
(``hooks/stats.sharpness_columns``, from the target's logits), by the collector
(``collector/detectors``) and by the probe (``probe/sharpness``, from returned
log-probabilities). Pure functions, stdlib only.

Per verified position of a sampled request, S is a set of tokens fixed before the draw and
surely inside the distribution the request samples from (in the engine: its 16 most probable
tokens, less any at the edge of its top-k / top-p truncation; in the probe: the returned tokens
that bounds place inside it). Given that the committed token x lies in S, honest sampling draws
it from the request's distribution restricted to S, whose normaliser cancels: the test is exact
whatever the rest of the vocabulary holds. The alternatives are the same distribution at c
times the requested temperature, for c on ``GRID`` (0.5 to 2). Per position the ratio
p_c(x | S) / p_1(x | S) (1 where x is not in S) has mean 1 under honest sampling, so each
product over positions is a martingale (speculative decoding commits, at every verified
position, a sample of the target's distribution given the prefix), and so is their average over
the grid: by Ville's inequality it ever reaches 1/alpha with probability at most alpha, however
often it is looked at. FAIL there; PASS where each alternative at or beyond ``RULED_OUT``
(0.8x, 1.25x) has been outweighed 1/pass_alpha to 1 (each such alternative, were it true, would
have done that with probability at most pass_alpha).

Why beside the top-1 share and the PIT: against a temperature applied wrongly (twice, or the
wrong request's) the likelihood ratio is the most powerful test there is; on the real vLLM with
the temperature squared at verify it FAILed after 40 s of the probe's traffic where the PIT,
its tail bounded, was still INCONCLUSIVE at 100 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .exact import ALPHA, FAIL, INCONCLUSIVE, PASS, PASS_ALPHA, fmt_p
from .schema import SHARP_GRID

#: the alternatives: c times the requested temperature (below 1 sharper, toward the argmax;
#: above 1 flatter), each with an equal share of the mixture (the record schema's, since
#: verify entries carry one sum per alternative)
GRID = SHARP_GRID
#: PASS rules out every alternative this far off 1 or further (0.8x or below, 1.25x or above)
RULED_OUT = 0.8
_MAX_NEED = 10_000_000


@dataclass(frozen=True)
class SharpDecision:
    """One reading of the test: its state, the mixture's log likelihood ratio, the alternative
    that fits best (1.0 where none beats the requested temperature), the lean, and about how
    many more positions would settle it (None where unknown or out of reach)."""

    state: str
    log_ratio: float
    best: float
    lean: str
    need: int | None

    @property
    def p_value(self) -> float:
        """The sequential p-value the mixture gives (Ville): 1 / its likelihood ratio, at most 1."""
        return min(1.0, math.exp(-self.log_ratio))

    @property
    def direction(self) -> str:
        return "sharper" if self.best < 1 else "flatter"

    def finding(self, n: int, reading: str = "") -> str:
        """What the test found over ``n`` positions, in words (``reading``: where the figures
        came from, added after the positions)."""
        return (f"fit {self.best:g}x the requested temperature better than the requested one, "
                f"by a likelihood ratio of e^{self.log_ratio:.1f} (p {fmt_p(self.p_value)} over "
                f"{n} positions{', ' + reading if reading else ''}): verify samples "
                f"{self.direction} than asked")

    def evidence(self, n: int) -> dict:
        """The test's figures as a check's evidence carries them (keys ``sharp_*``)."""
        return {"sharp_positions": n, "sharp_log_ratio": self.log_ratio,
                "sharp_temperature_ratio": self.best, "sharp_p_value": self.p_value,
                "sharp_state": self.state}


def mixture(sums: Sequence[float]) -> float:
    """log of the grid's average likelihood ratio, from each alternative's log ratio sum."""
    top = max(sums)
    return top + math.log(sum(math.exp(x - top) for x in sums) / len(sums))


def decide(sums: Sequence[float], n: int, *, alpha: float = ALPHA, pass_alpha: float = PASS_ALPHA,
           can_pass: bool = True) -> SharpDecision:
    """The test over ``n`` positions whose log ratios against each of ``GRID`` sum to ``sums``.
    ``can_pass`` False: the positions may not be all verify produced; a FAIL stands, a PASS
    reads INCONCLUSIVE."""
    if len(sums) != len(GRID):
        raise ValueError(f"{len(sums)} log-ratio sums for {len(GRID)} alternatives")
    log_m = mixture(sums) if n else 0.0
    top = max(sums)
    best = GRID[list(sums).index(top)] if n and top > 0 else 1.0
    far = [i for i, c in enumerate(GRID) if c <= RULED_OUT or c >= 1 / RULED_OUT]
    fail_at, pass_at = math.log(1 / alpha), math.log(1 / pass_alpha)
    if n and log_m >= fail_at:
        return SharpDecision(FAIL, log_m, best, "fault", None)
    if n and can_pass and all(-sums[i] >= pass_at for i in far):
        return SharpDecision(PASS, log_m, best, "honest", None)
    lean = "fault" if n and log_m > pass_at else "honest"
    need: int | None = None
    if n and lean == "fault":
        need = math.ceil((fail_at + math.log(len(GRID)) - top) / (top / n))
    elif n and can_pass:
        # each alternative still to outweigh, at the rate it has been outweighed so far; one
        # that has not been yet (noise, early on) is taken to need as many positions again
        rates = [(-sums[i] / n, pass_at + sums[i]) for i in far if -sums[i] < pass_at]
        need = max([math.ceil(gap / r) if r > 0 else n for r, gap in rates] or [1])
    if need is not None and need > _MAX_NEED:
        need = None
    return SharpDecision(INCONCLUSIVE, log_m, best, lean, need)


def rules_out(pass_alpha: float = PASS_ALPHA) -> str:
    """What a PASS of this test rules out, in words."""
    return (f"rules out sampling at {RULED_OUT:g}x the requested temperature or below, or "
            f"{1 / RULED_OUT:g}x or above (likelihood ratio {1 / pass_alpha:g} to 1 against each)")
