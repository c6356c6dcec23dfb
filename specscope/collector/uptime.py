"""Acceptance by uptime and tokens served (``report --by uptime``, the notebook's ``uptime()``,
the dashboard's uptime figure): each run's engine starts, its spans of uptime with their
acceptance, and the drift test's trends (``drift.py``). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .. import schema
from .drift import ALL, Drift, drift

DEFINITIONS = ("Uptime: time since the engine's start (its process start where the run says "
               "it; else since its first record, marked '+'). AL: tokens committed per "
               "request-step, bonus token included; rate: accepted / drafted tokens, pooled. "
               "Served: tokens committed since the start. A restart opens a new segment.")


@dataclass
class RunUptime:
    run_id: str
    pooled: Drift  #: every class pooled: the spans shown
    judged: Drift  #: per class: the trends tested (what the report's anomaly reads)


def uptime_runs(records: Iterable[schema.Record], judged: bool = True) -> list[RunUptime]:
    """Each measured run's uptime figures (runs without acceptance left out; reference runs
    too); ``judged=False``: the spans only, no trend fitted (a figure)."""
    by_run: dict[str, list[Any]] = {}
    for r in records:
        by_run.setdefault(getattr(r, "run_id", ""), []).append(r)
    out = []
    for rid, recs in by_run.items():
        run = next((r for r in recs if isinstance(r, schema.RunRecord)), None)
        if run is not None and run.labels.get("role") == "reference":
            continue
        pooled = drift(recs, by_class=False, trends=False)
        if pooled.segments:
            out.append(RunUptime(rid, pooled, drift(recs) if judged else Drift(pooled.segments)))
    return out


def uptime_dict(u: RunUptime) -> dict[str, Any]:
    return {
        "run_id": u.run_id, "restarts": u.pooled.restarts,
        "segments": [{"start_ns": s.start_ns or None, "first_ns": s.first_ns, "last_ns": s.last_ns,
                      "tokens_served": s.tokens_served} for s in u.pooled.segments],
        "spans": [{"segment": b.segment, "uptime_h": b.uptime_h, "tokens_served": b.served,
                   "drafts": b.drafts, "draft_tokens": b.drafted, "accepted": b.accepted,
                   "acceptance_rate": b.rate, "acceptance_length": b.acceptance_length}
                  for b in u.pooled.bins.get(("", ALL), [])],
        "trends": [{"class": t.klass, "position": None if t.position == ALL else t.position,
                    "rate": t.rate, "start_rate": t.start_rate,
                    "relative_per_h": t.relative_per_h, "fall": t.fall,
                    "t": t.t, "df": t.df, "p_value": t.p_value, "cells_judged": t.judged,
                    "flagged": t.flagged} for t in u.judged.trends],
    }


def format_uptime(runs: list[RunUptime]) -> str:
    lines = [DEFINITIONS, ""]
    for u in runs:
        lines.append(f"== {u.run_id}: {len(u.pooled.segments)} segment(s), "
                     f"{u.pooled.restarts} restart(s)")
        lines.append(f"  {'seg':>3} {'uptime h':>9} {'served':>9} {'drafts':>7} {'AL':>6} "
                     f"{'rate':>6}")
        for b in u.pooled.bins.get(("", ALL), []):
            known = "" if u.pooled.segments[b.segment].start_ns else "+"
            al = f"{b.acceptance_length:.3f}" if b.acceptance_length is not None else "n/a"
            lines.append(f"  {b.segment:>3} {b.uptime_h:>8.3f}{known or ' '} {b.served:>9} "
                         f"{b.drafts:>7} {al:>6} {b.rate:>6.3f}")
        if not u.judged.trends:
            lines.append("  drift: no trend fitted (it needs two spans a segment after its "
                         "warm-up, four degrees of freedom, and a rate strictly between 0 and 1: "
                         "every draft accepted, or none, leaves nothing to fall)")
        for t in u.judged.trends:
            where = "all positions" if t.position == ALL else f"position {t.position}"
            verdict = "FALLING (flagged)" if t.flagged else "not flagged"
            lines.append(f"  drift {t.klass or '(no class)'} {where}: "
                         f"{t.relative_per_h:+.1%}/h of its starting rate, t {t.t:.1f} on {t.df} df, "
                         f"p {t.p_value:.2g} against {t.judged} cells: {verdict}")
    if not runs:
        lines.append("no run has acceptance at known times, so nothing is shown or judged here: "
                     "an import of a llama.cpp log or of saved responses carries no clock (scrape "
                     "the server's /metrics for acceptance over uptime)")
    return "\n".join(lines)


