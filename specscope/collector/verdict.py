"""Three states for every check: PASS only where the data could have failed.

A check that has too little data to detect its target effect says INCONCLUSIVE, with how much
more it needs; it never says PASS on a sample where the fault it looks for would have gone
unseen. Pure; no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
STATES = (PASS, FAIL, INCONCLUSIVE)


@dataclass(frozen=True)
class Assessment:
    """One check on one aggregate (a run, a label set, one request)."""

    check: str  #: what was tested, e.g. "sampling truth (top-p)"
    state: str  #: PASS, FAIL or INCONCLUSIVE
    evidence: dict[str, Any] = field(default_factory=dict)
    need: int | None = None  #: INCONCLUSIVE: about how many more ``unit`` until it could fail
    unit: str = "positions"
    anomaly: Any = None  #: the AnomalyRecord of a FAIL

    @property
    def why(self) -> str:
        """``INCONCLUSIVE (need ~N more positions)`` and the like, for one line of text."""
        return state_text(self.state, self.need, self.unit, self.evidence.get("reason"))

    def to_check(self, forced: str | None = None) -> dict[str, Any]:
        """The check as a gate lists it (``forced``: a state found elsewhere, e.g. per request)."""
        ev = self.evidence
        return {"check": self.check, "state": forced or self.state, "need": self.need,
                "unit": self.unit, "reason": ev.get("reason"), "p_value": ev.get("p_value"),
                "value": ev.get("observed_top1_rate", ev.get("share_at_exactly_one"))}


def why_text(need: int | None, unit: str, reason: str | None = None) -> str:
    """Why a check could not fail yet: how much more it needs, or why no sample can."""
    if need is None:
        return reason or "no sample size can tell here"
    return f"need ~{need} more {unit}"


def state_text(state: str, need: int | None = None, unit: str = "positions",
               reason: str | None = None) -> str:
    """``PASS``, ``FAIL`` or ``INCONCLUSIVE (need ~N more positions)``."""
    if state != INCONCLUSIVE:
        return state.upper()
    return f"INCONCLUSIVE ({why_text(need, unit, reason)})"


def combine(states: Iterable[str]) -> str | None:
    """FAIL if any failed, else INCONCLUSIVE if any could not tell, else PASS; None if empty."""
    states = list(states)
    if not states:
        return None
    if FAIL in states:
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in states else PASS


def assessed(failed: bool, n: int, needed: int | None) -> tuple[str, int | None]:
    """(state, more needed): FAIL if ``failed``, else PASS once ``n`` reaches ``needed`` (the
    smallest sample at which the check could have failed), else INCONCLUSIVE."""
    if failed:
        return FAIL, None
    if needed is None:
        return INCONCLUSIVE, None
    if n >= needed:
        return PASS, None
    return INCONCLUSIVE, needed - n
