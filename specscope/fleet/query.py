"""The fleet's aggregates as one SQL text, run unchanged by DuckDB and by Spark SQL.

The query reads the verify dataset of a store (``io.store`` layout), keeps the partitions the
filters admit, and returns the histogram of (drafted, accepted) per group: a few hundred rows
however many entries the store holds. Every figure (drafts, drafted and accepted tokens, both
per position, acceptance length and rate) follows from that histogram exactly, because a
request-step accepts a prefix of its draft: position p was drafted where num_drafted > p and
accepted where num_accepted > p. The figures are computed here, in one pure function, from
integer counts, so two engines that count the same agree to the last digit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ..collector.counts import Acceptance, clamp
from ..io.store import Where

#: what a fleet query can group by: the partitions, read from the folder names (path-safe
#: copies of configuration and run ids; node names whole, "_" where unknown)
GROUPS = {"config": "config", "node": "node", "run": "run", "date": "date"}


def _lit(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def where_sql(where: Where) -> str:
    """The filters as a SQL condition on the partition columns (pushed down to the folders)."""
    cond = []
    if where.since:
        cond.append(f"date >= {_lit(where.since)}")
    if where.until:
        cond.append(f"date <= {_lit(where.until)}")
    for col, values in where.values().items():
        cond.append(f"{col} IN ({', '.join(_lit(v) for v in sorted(values))})")
    return " AND ".join(cond) or "TRUE"


def histogram_sql(by: Sequence[str], where: Where, table: str = "verify") -> str:
    """The one query both engines run: entries counted per group and (drafted, accepted)."""
    cols = [GROUPS[b] for b in by]
    keys = ", ".join(cols + ["num_drafted", "num_accepted"])
    return (f"SELECT {keys}, count(*) AS n FROM {table} WHERE {where_sql(where)} "
            f"GROUP BY {keys} ORDER BY {keys}")


@dataclass
class FleetFigures:
    """One group's figures, pooled from counters (acceptance length includes the bonus token)."""

    group: dict[str, str]
    request_steps: int = 0  #: verify entries (a request in a verify step)
    num_drafts: int = 0  #: request-steps that drafted at least one token
    draft_tokens: int = 0
    accepted_tokens: int = 0  #: bonus token excluded
    drafted_per_pos: list[int] = field(default_factory=list)
    accepted_per_pos: list[int] = field(default_factory=list)
    num_clamped: int = 0  #: entries with accepted > drafted or a negative count (clamped)

    @property
    def mean_acceptance_length(self) -> float | None:
        """(accepted + drafts) / drafts: tokens committed per request-step that drafted."""
        return self.acceptance.length

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted tokens, pooled."""
        return self.acceptance.rate

    @property
    def per_position_acceptance(self) -> list[float | None]:
        return self.acceptance.per_position

    @property
    def acceptance(self) -> Acceptance:
        """The group's counts, as every acceptance figure is computed from them."""
        return Acceptance(self.num_drafts, self.draft_tokens, self.accepted_tokens,
                          self.drafted_per_pos, self.accepted_per_pos)

    def to_dict(self) -> dict[str, Any]:
        return {**self.group, "request_steps": self.request_steps, "num_drafts": self.num_drafts,
                "draft_tokens": self.draft_tokens, "accepted_tokens": self.accepted_tokens,
                "mean_acceptance_length": self.mean_acceptance_length,
                "acceptance_rate": self.acceptance_rate,
                "drafted_per_pos": self.drafted_per_pos, "accepted_per_pos": self.accepted_per_pos,
                "per_position_acceptance": self.per_position_acceptance,
                "num_clamped": self.num_clamped}


def figures(rows: Iterable[Sequence[Any]], by: Sequence[str]) -> list[FleetFigures]:
    """Per-group figures from histogram rows ``(*group, drafted, accepted, n)``; pure.

    Counts are clamped as the collector clamps them (0 <= accepted <= drafted)."""
    out: dict[tuple, FleetFigures] = {}
    for row in rows:
        *group, d, a, n = row
        d, a, n = int(d), int(a), int(n)
        key = tuple("" if k is None else str(k) for k in group)
        f = out.get(key)
        if f is None:
            f = out[key] = FleetFigures(dict(zip(by, key)))
        d, a, clamped = clamp(d, a)
        f.num_clamped += n if clamped else 0
        f.request_steps += n
        f.draft_tokens += n * d
        f.accepted_tokens += n * a
        if d:
            f.num_drafts += n
        for lst, k in ((f.drafted_per_pos, d), (f.accepted_per_pos, a)):
            if len(lst) < k:
                lst.extend([0] * (k - len(lst)))
            for p in range(k):
                lst[p] += n
    for f in out.values():  # per-position lists pair up over the positions drafted
        f.accepted_per_pos.extend([0] * (len(f.drafted_per_pos) - len(f.accepted_per_pos)))
    return [out[k] for k in sorted(out)]


def format_figures(rows: list[FleetFigures], by: Sequence[str], engine: str) -> str:
    """The table `specscope fleet` prints."""
    lines = [f"Fleet figures by {', '.join(by)} ({engine}); AL: tokens committed per request-step "
             "that drafted, bonus token included; rate: accepted / drafted tokens, pooled.", ""]
    head = "  ".join(f"{b:<24}" for b in by)
    lines.append(f"{head}  {'req-steps':>12} {'drafted':>12} {'accepted':>12} {'AL':>6} {'rate':>6}"
                 "  per position")
    for f in rows:
        keys = "  ".join(f"{f.group[b][:24]:<24}" for b in by)
        al = f"{f.mean_acceptance_length:.3f}" if f.mean_acceptance_length is not None else "n/a"
        rate = f"{f.acceptance_rate:.3f}" if f.acceptance_rate is not None else "n/a"
        pp = " ".join(f"{x:.2f}" if x is not None else "n/a" for x in f.per_position_acceptance)
        lines.append(f"{keys}  {f.request_steps:>12,} {f.draft_tokens:>12,} {f.accepted_tokens:>12,}"
                     f" {al:>6} {rate:>6}  {pp}")
    if not rows:
        lines.append("(no verify entries in the partitions selected)")
    return "\n".join(lines)
