"""A collector snapshot as report sections: one per label set (configuration, rank, node), for
the dashboard's live view and a big store's report. Never imports torch or dash."""

from __future__ import annotations

from typing import Any, Iterable

from .. import schema
from .report import stats_section, window_figures
from .section import Section, Window
from .stats import SpecStats


def snapshot_sections(snap: Any, max_windows: int = 240) -> list[tuple[str, str, Section]]:
    """``(run id, node, section)`` per label set of a ``Collector.snapshot()``, ordered by label
    set; the run id is ``RUN@NODE`` for one node's share ("" node: the run, pooled)."""
    out = []
    for key, stats in sorted(snap.totals.items()):
        labels = key.labels()
        run = _run_for(labels, snap.runs.values())
        windows = _coarsen(snap.windows.get(key, []), max_windows, snap.window_s)
        anomalies = [a for k, a in snap.anomalies if k == key]
        sec = stats_section(stats, run, windows, anomalies=anomalies)
        rid = run.run_id if run else "/".join(f"{k}={v}" for k, v in labels.items() if v)
        node = key.node if snap.node_label else ""
        out.append((f"{rid}@{node}" if node else rid, node, sec))
    return out


def _run_for(labels: dict[str, str], runs: Iterable[schema.RunRecord]) -> schema.RunRecord | None:
    match = [r for r in runs if r.algorithm == labels["algorithm"]
             and str(r.num_steps) == labels["num_steps"] and str(r.topk) == labels["topk"]
             and str(r.num_verify_tokens) == labels["num_draft_tokens"]
             and r.model == labels["model"] and r.labels.get("role") != "reference"]
    return max(match, key=lambda r: r.started_ns) if match else None


def _coarsen(windows: list[tuple[int, SpecStats]], max_windows: int,
             width_s: float | None = None) -> list[Window]:
    """At most about ``max_windows`` windows, each ``group`` buckets of ``width_s`` wide by
    time. A run that idled (between its waves) has no buckets there, and none are made up."""
    if not windows:
        return []
    if not width_s:  # an old snapshot: the narrowest gap between buckets
        gaps = [b[0] - a[0] for a, b in zip(windows, windows[1:]) if b[0] > a[0]]
        width_s = min(gaps) / 1e9 if gaps else 1.0
    width_ns = int(width_s * 1e9)
    t0 = windows[0][0]
    group = max(1, -(-((windows[-1][0] - t0) // width_ns + 1) // max_windows))
    merged: dict[int, SpecStats] = {}
    for t, s in windows:
        k = (t - t0) // (width_ns * group)
        merged[k] = merged[k].merge(s) if k in merged else s
    return [window_figures((t0 + k * width_ns * group) / 1e9, width_s * group, merged[k])
            for k in sorted(merged)]
