"""Correctness and acceptance per node: a fault on one node of a fleet (one bad GPU, one host on
an old image) is diluted by the healthy nodes in every pooled figure, and stands out in its own.

Each run's records are split by the node their process ran on (``node``, schema 7; "" for
older traces, shown as "(unknown)"); each node's share is aggregated like a run and checked by
the run's own detectors: sampling truth per class, greedy losslessness, draft health,
fallbacks. PASS, FAIL or INCONCLUSIVE per check, with its lean and what would settle it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .. import schema
from .batches import LEGEND, al_rate
from .shares import Share, shares, verdict_line
from .verdict import PASS

UNKNOWN = "(unknown)"


@dataclass
class NodeShare(Share):
    """One run's records from one node."""

    @property
    def node(self) -> str:
        return self.key

    @property
    def label(self) -> str:
        return self.node or UNKNOWN


def _node(r: Any) -> str | None:
    """A record's node; None for one without a node, or a finding rather than data."""
    return None if not hasattr(r, "node") or isinstance(r, schema.AnomalyRecord) else r.node


def node_shares(records: Iterable[schema.Record]) -> list[NodeShare]:
    """Every run's records split by node, each share checked by its run's detectors; ordered by
    run, then node. Runs labelled ``role=reference`` are left out."""
    return shares(records, _node, make=NodeShare, references=False)


def share_dict(s: NodeShare) -> dict[str, Any]:
    st = s.stats
    return {"run_id": s.run_id, "node": s.node, "verify_steps": st.num_steps,
            "request_steps": st.num_drafts, "mean_acceptance_length": st.mean_acceptance_length,
            "acceptance_rate": st.acceptance_rate,
            "verdict": _word(s),
            "checks": [{"check": a.check, "state": a.state, "why": a.why,
                        "message": a.anomaly.message if getattr(a, "anomaly", None) else None}
                       for a in s.checks]}


def _word(s: NodeShare) -> str | None:
    """FAIL where a check fails, PASS where every check passes, else INCONCLUSIVE."""
    if not s.checks:
        return None
    if s.failed:
        return "FAIL"
    return "PASS" if all(c.state == PASS for c in s.checks) else "INCONCLUSIVE"


def verdict(shares: list[NodeShare], run_id: str) -> str:
    """One line per run: the nodes where a check fails, named, or that none does."""
    return verdict_line([s for s in shares if s.run_id == run_id], run_id, kind="node",
                        name="node", none_word="no records", over="node(s)", where="on")


def format_shares(shares: list[NodeShare]) -> str:
    """The table `report --by node` prints."""
    lines = ["Per node (the host each record's process ran on: $SPECSCOPE_NODE, else its hostname).",
             *LEGEND]
    for run_id in dict.fromkeys(s.run_id for s in shares):
        lines.append(f"== {verdict(shares, run_id)}")
        lines.append(f"  {'node':<20} {'verdict':<12} {'req-steps':>9} {'AL':>6} {'rate':>6}  checks")
        for s in (s for s in shares if s.run_id == run_id):
            st = s.stats
            al, rate = al_rate(st)
            word = _word(s) or "n/a"
            lines.append(f"  {s.label[:20]:<20} {word:<12} {st.num_drafts:>9} {al:>6} {rate:>6}  "
                         + "; ".join(f"{a.check}: {a.state.upper()}" for a in s.checks))
            for a in s.failed:
                said = a.anomaly.message if getattr(a, "anomaly", None) is not None else a.why
                lines.append(f"      node {s.label}: {said}")
    if not shares:
        lines.append("(no records with a node)")
    return "\n".join(lines)
