"""Correctness and acceptance by batch-size class: a fault confined to large batches (a verify
that goes greedy only when more than two requests verify together) is diluted by the small
batches in every per-run figure, and stands out in its own class.

A verify step's class is its running batch (the requests that verified together,
``VerifyStepRecord.batch_size``) rounded up to a power of two, as ``explain`` classes them: 1,
2, 4 (3-4), 8 (5-8), ... Each class is aggregated like a run (sampling truth per requested
mode, draft health, acceptance length with the bonus token, acceptance rate pooled from
counters) and checked by the run's own detectors: PASS, FAIL or INCONCLUSIVE with how much more
data it needs before it could fail. Steps of a target-only run have no class here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .. import schema
from .detectors import detectors_for, evaluate
from .explain import batch_class
from .stats import SpecStats
from .verdict import FAIL, PASS


@dataclass
class BatchClass:
    """One run's verify steps of one batch-size class."""

    run_id: str
    size: int  #: the class: 1, 2, 4 (3-4 requests), 8 (5-8), ...
    stats: SpecStats = field(default_factory=lambda: SpecStats(keep_samples=False))
    checks: list[Any] = field(default_factory=list)  #: Assessments of the run's detectors

    @property
    def label(self) -> str:
        lo = self.size // 2 + 1
        return str(self.size) if self.size <= 2 else f"{self.size} ({lo}-{self.size})"

    @property
    def failed(self) -> list[Any]:
        return [c for c in self.checks if c.state == FAIL]


def batch_classes(records: Iterable[Any]) -> list[BatchClass]:
    """Every run's verify steps split by batch-size class, each class checked by its run's
    detectors; ordered by run, then class."""
    from ..io.columns import expand  # a trace's columnar verify steps, as records

    runs: dict[str, schema.RunRecord] = {}
    classes: dict[tuple[str, int], BatchClass] = {}
    for r in expand(records):
        if isinstance(r, schema.RunRecord):
            runs.setdefault(r.run_id, r)
        elif isinstance(r, schema.VerifyStepRecord) and r.batch_size > 0:
            key = (r.run_id, batch_class(r.batch_size))
            c = classes.get(key)
            if c is None:
                c = classes[key] = BatchClass(r.run_id, key[1])
            c.stats.observe(r)
    out = sorted(classes.values(), key=lambda c: (c.run_id, c.size))
    for c in out:
        c.checks = evaluate(c.stats, c.run_id, detectors_for(runs.get(c.run_id)))[0]
    return out


def class_dict(c: BatchClass) -> dict[str, Any]:
    s = c.stats
    return {"run_id": c.run_id, "batch_class": c.size, "label": c.label, "verify_steps": s.num_steps,
            "request_steps": s.num_drafts, "mean_acceptance_length": s.mean_acceptance_length,
            "acceptance_rate": s.acceptance_rate,
            "checks": [{"check": a.check, "state": a.state, "why": a.why,
                        "observed_top1_rate": a.evidence.get("observed_top1_rate"),
                        "expected_top1_rate": a.evidence.get("expected_top1_rate")}
                       for a in c.checks]}


def verdict(classes: list[BatchClass], run_id: str) -> str:
    """One line per run: the classes where a check fails, named, or that none does."""
    mine = [c for c in classes if c.run_id == run_id]
    bad = [(c, a) for c in mine for a in c.failed]
    if not bad:
        states = {a.state for c in mine for a in c.checks}
        word = "PASS" if states == {PASS} else "no class FAILs" if mine else "no verify steps"
        return f"{run_id}: {word} across {len(mine)} batch-size classes"
    named = "; ".join(f"batch {c.label}: {a.check} FAIL" for c, a in bad)
    return f"{run_id}: FAIL in {named}"


def format_classes(classes: list[BatchClass]) -> str:
    """The table `report --by batch` prints."""
    lines = ["Per batch-size class (requests verifying together, rounded up to a power of two).",
             "AL: tokens committed per request-step, bonus token included; rate: accepted / drafted",
             "tokens, pooled; each check PASS / FAIL / INCONCLUSIVE (with what it needs to fail).", ""]
    for run_id in dict.fromkeys(c.run_id for c in classes):
        lines.append(f"== {verdict(classes, run_id)}")
        lines.append(f"  {'batch':<10} {'steps':>6} {'req-steps':>9} {'AL':>6} {'rate':>6}  checks")
        for c in (c for c in classes if c.run_id == run_id):
            s = c.stats
            al = f"{s.mean_acceptance_length:.3f}" if s.mean_acceptance_length is not None else "n/a"
            rate = f"{s.acceptance_rate:.3f}" if s.acceptance_rate is not None else "n/a"
            checks = "; ".join(f"{a.check}: {a.why}" for a in c.checks) or "none"
            lines.append(f"  {c.label:<10} {s.num_steps:>6} {s.num_drafts:>9} {al:>6} {rate:>6}  {checks}")
    return "\n".join(lines)
