"""Acceptance from counts: the one place its convention is written. Stdlib only; never imports
torch or dash.

Every figure of acceptance (a run's totals and windows, a fleet's groups, a context bucket, a
request, a probe's engine counts) is an ``Acceptance`` built from what was counted:

- the rate is accepted / drafted draft tokens, pooled from counters (never a mean of ratios);
- the length is tokens committed per request-step that drafted, the bonus token included:
  (accepted + steps) / steps;
- position i's rate is the share of request-steps that drafted position i whose token i was
  accepted;
- a count nobody gave is None, and so is every figure that needs it: unknown is never 0;
- an impossible entry (accepted > drafted, a negative count) is clamped to 0 <= accepted <=
  drafted, and counted (``clamp``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True, slots=True)
class Acceptance:
    """What was counted, and the figures that follow from it."""

    #: request-steps that drafted at least one token (None: unknown)
    steps: int | None = None
    drafted: int | None = None  #: draft tokens offered to verify (None: unknown)
    accepted: int | None = None  #: draft tokens accepted, bonus token excluded (None: unknown)
    drafted_per_pos: Sequence[int] = ()  #: request-steps that drafted position i
    accepted_per_pos: Sequence[int] = ()  #: ... whose token i was accepted

    @property
    def rate(self) -> float | None:
        """Accepted / drafted draft tokens, pooled; None where nothing was drafted or a count
        is unknown."""
        if not self.drafted or self.accepted is None:
            return None
        return self.accepted / self.drafted

    @property
    def length(self) -> float | None:
        """Tokens committed per request-step, bonus token included: (accepted + steps) / steps;
        None where no step drafted or a count is unknown."""
        if not self.steps or self.accepted is None:
            return None
        return (self.accepted + self.steps) / self.steps

    @property
    def per_position(self) -> list[float | None]:
        """Position i's acceptance rate (None where no step drafted position i)."""
        return [a / d if d else None for a, d in zip(self.accepted_per_pos, self.drafted_per_pos)]


def pool(parts: Iterable[Acceptance]) -> Acceptance:
    """Several counts added up (requests into a run, runs into a group): a count that any part
    does not know is unknown in the sum."""
    parts = list(parts)

    def total(values: list[int | None]) -> int | None:
        known = [v for v in values if v is not None]
        return sum(known) if len(known) == len(values) else None

    return Acceptance(total([a.steps for a in parts]), total([a.drafted for a in parts]),
                      total([a.accepted for a in parts]))


def clamp(drafted: int, accepted: int) -> tuple[int, int, bool]:
    """An entry's counts made possible (0 <= accepted <= drafted), and whether they had to be."""
    if drafted >= 0 and 0 <= accepted <= drafted:
        return drafted, accepted, False
    drafted = max(0, drafted)
    return drafted, min(max(0, accepted), drafted), True
