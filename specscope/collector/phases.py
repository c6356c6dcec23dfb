"""Where the time of a speculative step goes: a pure function over phase and verify records.

Never imports torch or dash.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from .. import schema

DRAFT_PHASES = ("draft", "draft_extend", "draft_per_token")


def phase_breakdown(records: Iterable[schema.Record]) -> dict[str, Any]:
    """Per phase: total and mean seconds and share of phase time; time per committed token
    (accepted drafts plus the bonus token; a target-only run's output tokens); draft overhead
    share; idle gaps inside steps
    (a step's span from its first phase start to its last phase end, minus its phases)."""
    records = list(records)
    phases = [r for r in records if isinstance(r, schema.PhaseRecord)]
    verify = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    committed = sum(e.num_accepted + 1 for r in verify for e in r.entries)
    if not verify:  # target-only: every output token is one decode step's
        committed = sum(max(0, r.num_output_tokens) for r in records
                        if isinstance(r, schema.RequestRecord))
    total_ns = sum(p.duration_ns for p in phases)
    by_name: dict[str, list[int]] = defaultdict(list)
    by_step: dict[tuple, list[schema.PhaseRecord]] = defaultdict(list)
    for p in phases:
        by_name[p.phase].append(p.duration_ns)
        if p.step >= 0:
            by_step[(p.run_id, p.rank, p.step)].append(p)
    idle_ns = 0
    for step_phases in by_step.values():
        start = min(p.t_start_ns for p in step_phases)
        end = max(p.t_start_ns + p.duration_ns for p in step_phases)
        idle_ns += max(0, (end - start) - sum(p.duration_ns for p in step_phases))
    draft_ns = sum(sum(v) for k, v in by_name.items() if k in DRAFT_PHASES)
    return {
        "phases": {name: {"count": len(v), "total_s": sum(v) / 1e9, "mean_ms": sum(v) / len(v) / 1e6,
                          "share": sum(v) / total_ns if total_ns else None}
                   for name, v in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))},
        "total_phase_s": total_ns / 1e9,
        "committed_tokens": committed,
        "time_per_committed_token_ms": total_ns / committed / 1e6 if committed else None,
        "draft_overhead_share": draft_ns / total_ns if total_ns else None,
        "idle_gap_s": idle_ns / 1e9,
        "steps": len(by_step),
    }


def format_breakdown(b: dict[str, Any]) -> str:
    lines = [f"{'phase':<16} {'count':>6} {'total s':>9} {'mean ms':>9} {'share':>7}"]
    for name, p in b["phases"].items():
        share = f"{p['share']:.1%}" if p["share"] is not None else "n/a"
        lines.append(f"{name:<16} {p['count']:>6} {p['total_s']:>9.3f} {p['mean_ms']:>9.2f} {share:>7}")
    per_tok = b["time_per_committed_token_ms"]
    draft = b["draft_overhead_share"]
    lines.append(f"time per committed token (accepted + bonus): "
                 f"{'n/a' if per_tok is None else f'{per_tok:.2f} ms'} over {b['committed_tokens']} tokens")
    lines.append(f"draft overhead share: {'n/a' if draft is None else f'{draft:.1%}'}")
    lines.append(f"idle gaps between phases inside steps: {b['idle_gap_s']:.3f} s over {b['steps']} steps")
    return "\n".join(lines)
