"""One run seen several ways (the in-engine trace, a scrape of the engine's /metrics, its log,
its saved responses), count by count: do the views agree?

Each view gives the run's speculative counts: drafts (request-steps that drafted at least one
token), drafted tokens, accepted tokens (bonus excluded) and accepted tokens per draft
position. A view that cannot know a count gives None, never 0 and never a figure derived from
part of the run; the views agree when every count that two or more of them know is equal in all
of them exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .. import schema
from .stats import SpecStats

COUNTS = ("num_drafts", "draft_tokens", "accepted_tokens", "accepted_per_pos")
DEFINITIONS = {
    "num_drafts": "request-steps that drafted at least one token",
    "draft_tokens": "draft tokens proposed and verified",
    "accepted_tokens": "draft tokens accepted (the bonus token excluded)",
    "accepted_per_pos": "accepted draft tokens at each draft position (1, 2, ...)",
}


@dataclass(frozen=True)
class ViewCounts:
    name: str
    num_drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    accepted_per_pos: tuple[int, ...] | None

    def get(self, count: str) -> Any:
        return getattr(self, count)


def _trim(values: Iterable[int]) -> tuple[int, ...]:
    out = list(values)
    while out and out[-1] == 0:
        out.pop()
    return tuple(out)


def view_counts(name: str, records: Iterable[schema.Record]) -> ViewCounts:
    """A view's counts from its records: verify steps (a trace) or interval counters (imports,
    scrapes). A count is None unless every record that carries counts gives it."""
    stats = SpecStats()
    known = {c: True for c in COUNTS}
    any_counts = False
    for r in records:
        if isinstance(r, schema.VerifyStepRecord):
            any_counts = True
        elif isinstance(r, schema.SpecCountsRecord):
            if r.num_drafts is None and r.num_draft_tokens is None and r.num_accepted is None:
                continue
            any_counts = True
            for c, field_ in (("num_drafts", "num_drafts"), ("draft_tokens", "num_draft_tokens"),
                              ("accepted_tokens", "num_accepted")):
                known[c] = known[c] and getattr(r, field_) is not None
            if not r.accepted_per_pos and (r.num_accepted or 0) > 0:
                known["accepted_per_pos"] = False
        else:
            continue
        stats.observe(r)
    if not any_counts:
        return ViewCounts(name, None, None, None, None)
    drafts = stats.num_drafts + stats.drafts_unmatched
    drafted = stats.draft_tokens + stats.draft_tokens_unmatched
    return ViewCounts(
        name, drafts if known["num_drafts"] else None,
        drafted if known["draft_tokens"] else None,
        stats.accepted_tokens if known["accepted_tokens"] else None,
        _trim(stats.accepted_per_pos) if known["accepted_per_pos"] else None)


@dataclass
class ViewAgreement:
    views: list[ViewCounts]
    #: count -> the views' values, where they differ
    differences: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: count -> the views that know it
    known_by: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every count two or more views know is equal in all of them, and the drafted and
        accepted counts are known by two views at least (else nothing was compared)."""
        compared = all(len(self.known_by.get(c, [])) >= 2
                       for c in ("draft_tokens", "accepted_tokens"))
        return compared and not self.differences


def views_agree(views: Mapping[str, Iterable[Any]]) -> ViewAgreement:
    """Compare the views' counts exactly (``views``: name -> records)."""
    counted = [view_counts(name, records) for name, records in views.items()]
    out = ViewAgreement(counted)
    for c in COUNTS:
        values = {v.name: v.get(c) for v in counted if v.get(c) is not None}
        out.known_by[c] = list(values)
        if len(set(values.values())) > 1:
            out.differences[c] = values
    return out


def format_views(a: ViewAgreement) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return "null"
        if isinstance(value, tuple):
            return "/".join(str(v) for v in value) or "-"
        return str(value)

    width = max([len(v.name) for v in a.views] + [6])
    lines = [f"{'view':<{width}}  {'drafts':>8}  {'drafted':>8}  {'accepted':>8}  "
             "accepted per position"]
    for v in a.views:
        lines.append(f"{v.name:<{width}}  {cell(v.num_drafts):>8}  {cell(v.draft_tokens):>8}  "
                     f"{cell(v.accepted_tokens):>8}  {cell(v.accepted_per_pos)}")
    for c, meaning in DEFINITIONS.items():
        lines.append(f"  {c}: {meaning}; known by {', '.join(a.known_by.get(c, [])) or 'none'}")
    if a.differences:
        for c, values in a.differences.items():
            lines.append(f"DIFFER {c}: " + ", ".join(f"{k} {cell(v)}" for k, v in values.items()))
    verdict = "AGREE" if a.ok else ("DIFFER" if a.differences else "NOT COMPARED")
    lines.append(f"{verdict}: null = the view cannot know the count")
    return "\n".join(lines)


def seen_by_hooks(records: Iterable[schema.Record]) -> dict[str, Any] | None:
    """The verify steps the hooks recorded against the engine's own counts read beside them
    (EngineCountsRecord: the latest of each process, summed), up to the time of the latest:
    what the hooks did not see (``not_seen``, None where the counts are equal; negative where
    the hooks saw more). None without both, or without a step up to the engine's latest
    counts."""
    records = list(records)
    latest: dict[tuple, schema.EngineCountsRecord] = {}
    for r in records:
        if isinstance(r, schema.EngineCountsRecord):
            key, old = (r.run_id, r.node, r.pid), latest.get((r.run_id, r.node, r.pid))
            if old is None or (r.final, r.t_ns) >= (old.final, old.t_ns):
                latest[key] = r
    steps = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    if not latest or not steps:
        return None
    until = max(r.t_ns for r in latest.values())
    engine = ViewCounts(
        "engine", sum(r.num_drafts for r in latest.values()),
        sum(r.num_draft_tokens for r in latest.values()),
        sum(r.num_accepted for r in latest.values()),
        _trim(_add(r.accepted_per_pos for r in latest.values())))
    seen = [r for r in steps if r.t_ns <= until]
    if not seen:  # the engine's latest counts predate every step read (a window's first
        return None  # moments): nothing of the hooks' to set against them yet
    hooks = view_counts("hooks", seen)
    diff = {c: engine.get(c) - hooks.get(c) for c in COUNTS[:3]}
    return {"engine": sorted({r.engine for r in latest.values()}),
            "final": all(r.final for r in latest.values()),
            "engine_counts": {c: engine.get(c) for c in COUNTS},
            "hook_counts": {c: hooks.get(c) for c in COUNTS},
            "not_seen": diff if any(diff.values()) or engine.accepted_per_pos !=
            hooks.accepted_per_pos else None,
            "steps_after": sum(1 for r in steps if r.t_ns > until)}


def _add(lists: Iterable[tuple[int, ...]]) -> list[int]:
    out: list[int] = []
    for values in lists:
        out += [0] * (len(values) - len(out))
        for i, v in enumerate(values):
            out[i] += v
    return out


def format_seen(seen: dict[str, Any]) -> str:
    """One line: the engine's own counts and what the hooks did not see of them."""
    e, h, d = seen["engine_counts"], seen["hook_counts"], seen["not_seen"]
    head = (f"{'/'.join(seen['engine'])}'s own counts ({'final' if seen['final'] else 'as of its last snapshot'}"
            f"): {e['num_drafts']} drafts, {e['draft_tokens']} drafted, {e['accepted_tokens']} accepted")
    if d is None:
        tail = "; the hooks recorded the same (every verify step seen)"
    elif d["num_drafts"] >= 0 and d["draft_tokens"] >= 0:
        tail = (f"; the hooks recorded {h['num_drafts']}, {h['draft_tokens']}, "
                f"{h['accepted_tokens']}: {d['num_drafts']} request-step(s) not seen "
                f"({d['draft_tokens']} drafted, {d['accepted_tokens']} accepted)")
    else:
        tail = (f"; the hooks recorded {h['num_drafts']}, {h['draft_tokens']}, "
                f"{h['accepted_tokens']}: more than the engine counted")
    after = f" ({seen['steps_after']} verify records after its last count not compared)" \
        if seen["steps_after"] else ""
    return head + tail + after
