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
        if self.state != INCONCLUSIVE:
            return self.state.upper()
        if self.need is None:
            return f"INCONCLUSIVE ({self.evidence.get('reason') or 'no sample size can tell here'})"
        return f"INCONCLUSIVE (need ~{self.need} more {self.unit})"

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "state": self.state, "need": self.need, "unit": self.unit,
                "evidence": self.evidence}


def combine(states: Iterable[str]) -> str | None:
    """FAIL if any failed, else INCONCLUSIVE if any could not tell, else PASS; None if empty."""
    states = list(states)
    if not states:
        return None
    if FAIL in states:
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in states else PASS


def assessed(state_if_enough: str, n: int, needed: int | None) -> tuple[str, int | None]:
    """(state, more needed): ``state_if_enough`` once ``n`` reaches ``needed``."""
    if state_if_enough == FAIL:
        return FAIL, None
    if needed is None:
        return INCONCLUSIVE, None
    if n >= needed:
        return state_if_enough, None
    return INCONCLUSIVE, needed - n
