"""Three states for every check: PASS only where the data rule the fault out.

Each check names a fault and its size (an excess argmax share of 5 points, a 5% fall in
acceptance length, ...). FAIL where the data show the fault beyond its false-alarm budget;
PASS only where they exclude it at that size (a one-sided equivalence test at
``exact.PASS_ALPHA``: the confidence bound on the fault's side lies short of it), and the PASS
says what it rules out; everything between is INCONCLUSIVE, says which way it leans and about
how much more would settle it. Pure; no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ..exact import FAIL, INCONCLUSIVE, PASS, RateDecision

STATES = (PASS, FAIL, INCONCLUSIVE)


@dataclass(frozen=True)
class Assessment:
    """One check on one aggregate (a run, a label set, one request)."""

    check: str  #: what was tested, e.g. "sampling truth (top-p)"
    state: str  #: PASS, FAIL or INCONCLUSIVE
    evidence: dict[str, Any] = field(default_factory=dict)
    need: int | None = None  #: INCONCLUSIVE: about how many more ``unit`` would settle it
    unit: str = "positions"
    anomaly: Any = None  #: the AnomalyRecord of a FAIL

    @property
    def why(self) -> str:
        """``PASS (rules out ...)``, ``INCONCLUSIVE (leans toward the fault; need ~N more
        positions)`` and the like, for one line of text."""
        ev = self.evidence
        return state_text(self.state, self.need, self.unit, ev.get("reason"), ev.get("lean"),
                          ev.get("rules_out"))

    def to_check(self, forced: str | None = None) -> GateCheck:
        """The check as a gate lists it (``forced``: a state found elsewhere, e.g. per request)."""
        ev = self.evidence
        state = forced or self.state
        return GateCheck(self.check, state, self.need if state == INCONCLUSIVE else None,
                         self.unit, ev.get("reason"), ev.get("p_value"),
                         ev.get("lean") if state == INCONCLUSIVE else None,
                         ev.get("rules_out") if state == PASS else None, ev.get("bound"),
                         ev.get("observed_top1_rate", ev.get("share_at_exactly_one")))


@dataclass(frozen=True)
class GateCheck:
    """One check of an eval gate as ``report --json`` lists it: every key always written (null
    where it does not apply), ``reference`` and ``threshold`` only by the checks that have one."""

    check: str  #: what was tested, e.g. "sampling truth (top-p)"
    state: str  #: PASS, FAIL or INCONCLUSIVE
    need: int | None = None  #: INCONCLUSIVE: about how many more ``unit`` would settle it
    unit: str = "positions"
    reason: str | None = None  #: why no sample size can settle it, or how it was decided
    p_value: float | None = None
    lean: str | None = None  #: INCONCLUSIVE: "fault" or "honest"
    rules_out: str | None = None  #: PASS: the fault and size the data exclude
    bound: float | None = None
    value: Any = None  #: the observed figure (a rate; a list of anomaly kinds)
    reference: float | None = None  #: the reference run's figure, where compared with one
    threshold: float | None = None  #: the figure below which it fails, where fixed

    def as_dict(self) -> dict[str, Any]:
        out = {"check": self.check, "state": self.state, "need": self.need, "unit": self.unit,
               "reason": self.reason, "p_value": self.p_value, "lean": self.lean,
               "rules_out": self.rules_out, "bound": self.bound,
               "value": list(self.value) if isinstance(self.value, tuple) else self.value}
        if self.reference is not None:
            out["reference"] = self.reference
        if self.threshold is not None:
            out["threshold"] = self.threshold
        return out

    @classmethod
    def from_dict(cls, c: Any) -> GateCheck:
        """A check from its JSON form (keys a newer writer added are ignored)."""
        return cls(c["check"], c["state"], c.get("need"), c.get("unit") or "positions",
                   c.get("reason"), c.get("p_value"), c.get("lean"), c.get("rules_out"),
                   c.get("bound"), c.get("value"), c.get("reference"), c.get("threshold"))


LEANS = {"fault": "leans toward the fault", "honest": "leans honest"}


def why_text(need: int | None, unit: str, reason: str | None = None,
             lean: str | None = None) -> str:
    """Why a check has not decided: which way it leans, how much more would settle it, or why
    no sample can."""
    head = f"{LEANS[lean]}; " if lean in LEANS else ""
    if need is None:
        return head + (reason or "no sample size can tell here")
    return f"{head}need ~{need} more {unit}"


def state_text(state: str, need: int | None = None, unit: str = "positions",
               reason: str | None = None, lean: str | None = None,
               rules_out: str | None = None) -> str:
    """``PASS (rules out ...)``, ``FAIL`` or ``INCONCLUSIVE (leans ...; need ~N more
    positions)``."""
    if state == PASS and rules_out:
        return f"PASS ({rules_out})"
    if state != INCONCLUSIVE:
        return state.upper()
    return f"INCONCLUSIVE ({why_text(need, unit, reason, lean)})"


def rate_evidence(d: RateDecision) -> dict[str, Any]:
    """A rate decision's figures for a check's evidence."""
    return {"lean": d.lean if d.state == INCONCLUSIVE else None, "bound": d.bound,
            "p_pass": d.p_pass}


def combine(states: Iterable[str]) -> str | None:
    """FAIL if any failed, else INCONCLUSIVE if any could not tell, else PASS; None if empty."""
    states = list(states)
    if not states:
        return None
    if FAIL in states:
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in states else PASS


def assessed(failed: bool, n: int, needed: int | None) -> tuple[str, int | None]:
    """(state, more needed): FAIL if ``failed``, else PASS once ``n`` reaches ``needed``, else
    INCONCLUSIVE. For checks whose unit is all-or-nothing (no faulty unit seen in ``n``):
    ``needed`` must then be the sample that rules the fault out at its size
    (``exact.positions_to_rule_out``), never merely one at which it could have shown."""
    if failed:
        return FAIL, None
    if needed is None:
        return INCONCLUSIVE, None
    if n >= needed:
        return PASS, None
    return INCONCLUSIVE, needed - n
