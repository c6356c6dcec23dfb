"""Correctness and acceptance by batch-size class: a fault confined to large batches (a verify
that goes greedy only when more than two requests verify together) is diluted by the small
batches in every per-run figure, and stands out in its own class.

A verify step's class is its running batch (the requests that verified together,
``VerifyStepRecord.batch_size``) rounded up to a power of two, as ``explain`` classes them: 1,
2, 4 (3-4), 8 (5-8), ... Each class is aggregated like a run (sampling truth per requested
mode, draft health, acceptance length with the bonus token, acceptance rate pooled from
counters) and checked by the run's own detectors: PASS, FAIL or INCONCLUSIVE with how much more
data it needs before it could fail. Steps of a target-only run have no class here.

Exact match by class: each greedy request paired with its reference (``diverge``) is counted in
every class whose steps committed its tokens up to its first divergence, and its divergence in
the class of the step that committed the divergent token (the first token, sampled at prefill,
has no class). A class FAILs on a structural divergence committed there; tie-flips alone never
fail; PASS needs the compared greedy requests that rule a structural fault in 30% of them out
(``diverge.PAIRS_TO_PASS``), INCONCLUSIVE below that (or where a divergence's margin is
unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .. import schema
from .explain import batch_class
from .shares import Share, shares, verdict_line
from .stats import SpecStats
from .verdict import FAIL, INCONCLUSIVE, PASS, Assessment

EXACT_CHECK = "exact match (greedy, against target-only)"


@dataclass
class BatchClass(Share):
    """One run's verify steps of one batch-size class."""

    greedy_requests: int = 0  #: greedy requests with a reference and a step here up to their divergence
    diverged: dict[str, int] = field(default_factory=dict)  #: verdict -> first divergences here

    @property
    def size(self) -> int:
        """The class: 1, 2, 4 (3-4 requests), 8 (5-8), ..."""
        return self.key

    @property
    def label(self) -> str:
        lo = self.size // 2 + 1
        return str(self.size) if self.size <= 2 else f"{self.size} ({lo}-{self.size})"


def _class(r: Any) -> int | None:
    """A verify step's batch-size class (None: not a verify step, or no batch size)."""
    if isinstance(r, schema.VerifyStepRecord) and r.batch_size > 0:
        return batch_class(r.batch_size)
    return None


def batch_classes(records: Iterable[Any]) -> list[BatchClass]:  # (records, VerifyColumns)
    """Every run's verify steps split by batch-size class, each class checked by its run's
    detectors; ordered by run, then class."""
    from ..io.columns import expand  # a trace's columnar verify steps, as records

    records = list(expand(records))
    out = shares(records, _class, make=BatchClass)
    steps: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (run, request) -> (class, tokens)
    for r in records:
        size = _class(r)
        if size is not None and isinstance(r, schema.VerifyStepRecord):
            for e in r.entries:
                steps.setdefault((r.run_id, e.request_id), []).append((size, e.num_accepted + 1))
    _exact_by_class(records, steps, {(c.run_id, c.size): c for c in out})
    for c in out:
        if c.greedy_requests or c.diverged:
            c.checks.append(_exact_check(c))
    return out


def _exact_by_class(records: list[schema.Record], steps: dict[tuple[str, str], list[tuple[int, int]]],
                    classes: dict[tuple[str, int], BatchClass]) -> None:
    from .diverge import diverge

    for res in diverge(records):
        for p in res.pairs:
            seen: set[int] = set()
            committed = 1  # the first token comes from prefill, in no class
            for size, n in steps.get((res.run_id, p.request_id), ()):
                c = classes[(res.run_id, size)]
                seen.add(size)
                if p.first_index is not None and committed <= p.first_index < committed + n:
                    c.diverged[p.verdict] = c.diverged.get(p.verdict, 0) + 1
                    break
                committed += n
            for size in seen:
                classes[(res.run_id, size)].greedy_requests += 1


def _exact_check(c: BatchClass) -> Assessment:
    n, d = c.greedy_requests, c.diverged
    evidence = {"greedy_requests": n, "diverged": sum(d.values()), **d,
                "exact_match": 1 - sum(d.values()) / n if n else None}
    if d.get("structural"):
        return Assessment(EXACT_CHECK, FAIL, {**evidence, "reason": f"{d['structural']} structural "
                                             f"divergence(s) committed in this class"})
    if d.get("unknown") or not n:
        return Assessment(EXACT_CHECK, INCONCLUSIVE, {**evidence, "reason": "a divergence's margin "
                                                     "is unknown" if n else "no greedy request"})
    from .diverge import FAULT_SHARE, PAIRS_TO_PASS

    if n < PAIRS_TO_PASS:
        return Assessment(EXACT_CHECK, INCONCLUSIVE, {**evidence, "lean": "honest"},
                          PAIRS_TO_PASS - n, "greedy requests")
    return Assessment(EXACT_CHECK, PASS, {**evidence, "rules_out": "rules out structural "
                      f"divergence in {FAULT_SHARE:.0%} or more of greedy requests"})


def class_dict(c: BatchClass) -> dict[str, Any]:
    s = c.stats
    return {"run_id": c.run_id, "batch_class": c.size, "label": c.label, "verify_steps": s.num_steps,
            "request_steps": s.num_drafts, "mean_acceptance_length": s.mean_acceptance_length,
            "acceptance_rate": s.acceptance_rate, "greedy_requests": c.greedy_requests,
            "diverged": dict(c.diverged),
            "checks": [{"check": a.check, "state": a.state, "why": a.why,
                        "observed_top1_rate": a.evidence.get("observed_top1_rate"),
                        "expected_top1_rate": a.evidence.get("expected_top1_rate")}
                       for a in c.checks]}


def verdict(classes: list[BatchClass], run_id: str) -> str:
    """One line per run: the classes where a check fails, named, or that none does."""
    return verdict_line([c for c in classes if c.run_id == run_id], run_id, kind="class",
                        name="batch", none_word="no verify steps", over="batch-size classes",
                        where="in")


def _check_text(a: Any) -> str:
    if a.check != EXACT_CHECK:
        return f"{a.check}: {a.why}"
    e = a.evidence
    kinds = ", ".join(f"{e[k]} {k}" for k in ("structural", "tie-flip", "unknown") if e.get(k))
    return (f"{a.check}: {a.why}, {e['diverged']} of {e['greedy_requests']} greedy requests first "
            f"diverged here" + (f" ({kinds})" if kinds else ""))


#: what the per-share tables' columns mean (``report --by batch`` and ``--by node``)
LEGEND = ["AL: tokens committed per request-step, bonus token included; rate: accepted / drafted",
          "tokens, pooled; each check PASS / FAIL / INCONCLUSIVE (with what it needs to fail).", ""]


def al_rate(s: SpecStats) -> tuple[str, str]:
    """Acceptance length and rate as the tables print them ("n/a" where unknown)."""
    al = f"{s.mean_acceptance_length:.3f}" if s.mean_acceptance_length is not None else "n/a"
    return al, f"{s.acceptance_rate:.3f}" if s.acceptance_rate is not None else "n/a"


def format_classes(classes: list[BatchClass]) -> str:
    """The table `report --by batch` prints."""
    lines = ["Per batch-size class (requests verifying together, rounded up to a power of two).",
             *LEGEND]
    for run_id in dict.fromkeys(c.run_id for c in classes):
        lines.append(f"== {verdict(classes, run_id)}")
        lines.append(f"  {'batch':<10} {'steps':>6} {'req-steps':>9} {'AL':>6} {'rate':>6}  checks")
        for c in (c for c in classes if c.run_id == run_id):
            s = c.stats
            al, rate = al_rate(s)
            checks = "; ".join(_check_text(a) for a in c.checks) or "none"
            lines.append(f"  {c.label:<10} {s.num_steps:>6} {s.num_drafts:>9} {al:>6} {rate:>6}  {checks}")
    return "\n".join(lines)
