"""A run's records split into shares (by batch-size class, by node, ...), each aggregated like a
run and checked by the run's own detectors: a fault confined to one share is diluted in every
pooled figure and stands out in its own. Never imports torch or dash."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable

from .. import schema
from .detectors import detectors_for, evaluate
from .stats import SpecStats
from .verdict import FAIL, PASS


def split_by(records: Iterable[Any], key: Callable[[Any], Hashable | None]) -> dict[Any, list[Any]]:
    """``records`` grouped by ``key(record)``, each group in record order, groups in the order
    first seen; a record whose key is None is in no group."""
    out: dict[Any, list[Any]] = {}
    for r in records:
        k = key(r)
        if k is not None:
            out.setdefault(k, []).append(r)
    return out


@dataclass
class Share:
    """One run's records of one share."""

    run_id: str
    key: Any  #: what the share is split by: a batch-size class, a node, ...
    stats: SpecStats = field(default_factory=lambda: SpecStats(keep_samples=False))
    checks: list[Any] = field(default_factory=list)  #: Assessments of the run's detectors

    @property
    def failed(self) -> list[Any]:
        return [c for c in self.checks if c.state == FAIL]


def verdict_line(mine: list[Any], run_id: str, *, kind: str, name: str, none_word: str,
                 over: str, where: str) -> str:
    """One line for a run's shares (each with a ``label``): the shares where a check fails,
    named (``"NAME LABEL: CHECK FAIL"`` after ``"FAIL WHERE"``); else PASS where every check
    passed, "no KIND FAILs", or ``none_word`` where the run has no share ("across N OVER")."""
    bad = [(s, a) for s in mine for a in s.failed]
    if not bad:
        states = {a.state for s in mine for a in s.checks}
        word = "PASS" if states == {PASS} else f"no {kind} FAILs" if mine else none_word
        return f"{run_id}: {word} across {len(mine)} {over}"
    named = "; ".join(f"{name} {s.label}: {a.check} FAIL" for s, a in bad)
    return f"{run_id}: FAIL {where} {named}"


def shares(records: Iterable[Any], key: Callable[[Any], Hashable | None], *,
           make: Callable[[str, Any], Share] = Share, references: bool = True) -> list[Any]:
    """Every run's records split by ``key(record)`` (None: in no share; run records are the
    runs, never in a share), each share made by ``make(run_id, key)``, aggregated and checked
    by its run's detectors; ordered by run, then key. ``references`` False leaves runs labelled
    ``role=reference`` out."""
    runs: dict[str, schema.RunRecord] = {}
    found: dict[tuple[str, Any], Share] = {}
    for r in records:
        if isinstance(r, schema.RunRecord):
            runs.setdefault(r.run_id, r)
            continue
        k = key(r)
        if k is None:
            continue
        share = found.get((r.run_id, k))
        if share is None:
            share = found[(r.run_id, k)] = make(r.run_id, k)
        _observe(share.stats, r)
    out = [s for _, s in sorted(found.items(), key=lambda kv: kv[0])
           if references or runs.get(s.run_id) is None
           or runs[s.run_id].labels.get("role") != "reference"]
    for s in out:
        s.checks = evaluate(s.stats, s.run_id, detectors_for(runs.get(s.run_id)))[0]
    return out


def _observe(stats: SpecStats, r: Any) -> None:
    from ..io.columns import VerifyColumns

    if isinstance(r, VerifyColumns):
        from .columns import observe_columns

        observe_columns(stats, r)
    else:
        stats.observe(r)
