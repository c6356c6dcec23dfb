"""``specscope check``: the definitions checker.

For each file it reads (any importable format, a specscope trace included) it says, one line
each, which identities between the source's own figures hold and which fail and by how much,
and names the definitional traps that apply. Identities come from two places: the parser's
tallies of the source's printed figures (``ImportResult.identities``) and the records it made
(a request's histogram against its counts; per-request sums against the run's own counters
over the same run).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from .. import schema
from . import import_file
from ._common import ImportResult, Tally


@dataclass
class CheckResult:
    path: str
    format: str
    lines_read: int
    identities: list[Tally] = field(default_factory=list)
    traps: dict[str, str] = field(default_factory=dict)
    problems: int = 0

    @property
    def ok(self) -> bool:
        return all(t.failed == 0 for t in self.identities)


def record_identities(res: ImportResult, records: Iterable[schema.Record], file: str) -> None:
    """Identities that follow from the records themselves, added to ``res``."""
    requests = [r for r in records if isinstance(r, schema.RequestRecord)]
    verify = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    for r in requests:
        h = r.accept_len_hist
        if h and r.num_verify_steps is not None:
            res.identity("request: histogram sum = verify steps", sum(h), r.num_verify_steps,
                         file=file, line=0)
        if h and r.num_accepted is not None:
            res.identity("request: sum of (length - 1) x histogram = accepted tokens",
                         sum((i - 1) * n for i, n in enumerate(h) if i), r.num_accepted,
                         file=file, line=0)
        if r.num_draft_tokens is not None and r.num_accepted is not None:
            res.identity("request: accepted <= drafted", min(r.num_accepted, r.num_draft_tokens),
                         r.num_accepted, file=file, line=0)
    with_counts = [r.num_accepted for r in requests if r.num_accepted is not None]
    if verify and with_counts and len(with_counts) == len(requests):
        accepted = sum(e.num_accepted for v in verify for e in v.entries)
        steps = sum(1 for v in verify for e in v.entries if e.num_drafted > 0)
        res.identity("per-request accepted tokens sum = accepted in the run's verify steps",
                     sum(with_counts), accepted, file=file)
        req_steps = [r.num_verify_steps for r in requests if r.num_verify_steps is not None]
        if len(req_steps) == len(requests):
            res.identity("per-request verify steps sum = the run's drafting request-steps",
                         sum(req_steps), steps, file=file)
    # counters and requests of one trace cover the same run; a log's cumulative statistics
    # lines and its per-request lines do not (they start at different times), so only traces
    counters = [c.num_accepted for c in records if isinstance(c, schema.SpecCountsRecord)
                and "sum over" not in c.source and c.num_accepted is not None]
    if (res.format == "specscope" and counters and with_counts and not verify
            and len(with_counts) == len(requests)):
        res.identity("per-request accepted tokens sum = the run's counters",
                     sum(with_counts), sum(counters), file=file)
    # a request's acceptance length is known exactly where its steps and accepted tokens are
    weighted = [(r.acceptance_length, r.num_verify_steps, r.num_accepted) for r in requests
                if r.acceptance_length is not None and r.num_verify_steps is not None
                and r.num_accepted is not None]
    if len(weighted) >= 2:
        req_mean = sum(al for al, _, _ in weighted) / len(weighted)
        steps = sum(n for _, n, _ in weighted)
        tok_mean = 1 + sum(a for _, _, a in weighted) / steps
        if abs(req_mean - tok_mean) > 0.05:
            res.trap("request-vs-token-weighted",
                     f"request-weighted mean acceptance length {req_mean:.3f} differs from the "
                     f"token-weighted (pooled) {tok_mean:.3f}: engines' counters give the pooled one")


def check_file(path: str | os.PathLike, *, format: str | None = None) -> CheckResult:
    """Read one file and check its definitions (raises ValueError for an unknown format)."""
    res = import_file(path, format=format)
    record_identities(res, res.records, str(path))
    if any(isinstance(r, schema.SpecCountsRecord) and r.source.startswith("prometheus") for r in res.records):
        res.trap("created-series", "'*_created' series are creation timestamps, never counts")
    return CheckResult(str(path), res.format, res.lines_read,
                       sorted(res.identities.values(), key=lambda t: (t.failed == 0, t.name)),
                       dict(res.traps), len(res.problems))


def format_check(result: CheckResult) -> str:
    head = (f"{result.path} ({result.format}, {result.lines_read} lines read"
            + (f", {result.problems} skipped" if result.problems else "") + ")")
    lines = [head]
    if not result.identities:
        lines.append("  (no identity could be checked: the source gives no figures that constrain "
                     "each other)")
    for t in result.identities:
        if t.failed:
            where = f"; first: {t.first_failures[0]}" if t.first_failures else ""
            lines.append(f"  FAILS  {t.name}: {t.failed} of {t.checked} failed, worst by "
                         f"{t.worst:g}{where}")
        else:
            lines.append(f"  holds  {t.name} ({t.held} of {t.checked})")
    for key, text in sorted(result.traps.items()):
        lines.append(f"  trap   {key}: {text}")
    return "\n".join(lines)


def warnings(res: ImportResult) -> list[str]:
    """What ``specscope import`` prints for a source: failed identities and traps."""
    out = [f"identity fails: {t.name}: {t.failed} of {t.checked}, worst by {t.worst:g}"
           for t in res.identities.values() if t.failed]
    out += [f"trap {k}: {v}" for k, v in sorted(res.traps.items())]
    return out
