"""Acceptance against uptime across a fleet's nodes: nodes started at different times show a
decay at once, without waiting a day on one node (SGLang #37326's acceptance that ages).

One SQL text (DuckDB or Spark, as ``query.py``'s) returns drafted and accepted tokens per
configuration, node, run and span of time (``BUCKET_S``); each span's uptime is its middle less
the latest start its run's records give for that node (``RunRecord.started_ns``: the hooks' process
start, scrape's ``process_start_time_seconds``; spans with no start known are counted and left
out). Per configuration, the acceptance rate is fitted on uptime by weighted least squares
(weights: drafted tokens) with one line for the fleet, and the slope's error is read across
nodes (a cluster-robust sandwich by node, on nodes less one degrees of freedom): one node with a
harder workload widens the interval instead of making a trend. The 95% interval is the slope's
plus and minus Student's t quantile times that error. Three nodes are the least it fits.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

from ..collector.drift import t_lower
from ..io.store import UNKNOWN, Where
from .query import where_sql

BUCKET_S = 600  #: the span of time one row pools
MIN_NODES = 3


def aging_sql(where: Where, bucket_s: int = BUCKET_S) -> str:
    """Drafted and accepted tokens per configuration, node, run and span of ``bucket_s``."""
    span = int(bucket_s * 1e9)
    return (f"SELECT config, node, run, CAST(floor(t_ns / {span}) AS BIGINT) AS span, "
            "sum(num_drafted) AS drafted, "
            "sum(least(greatest(num_accepted, 0), num_drafted)) AS accepted FROM verify "
            f"WHERE {where_sql(where)} AND num_drafted > 0 GROUP BY config, node, run, span "
            "ORDER BY config, node, run, span")


@dataclass(frozen=True)
class Aging:
    """One configuration's acceptance rate against node uptime, across its nodes."""

    config: str
    nodes: int
    spans: int
    draft_tokens: int
    uptime_h: tuple[float, float]  #: the least and most uptime fitted
    rate_at_start: float  #: the fitted rate at uptime 0
    slope_per_h: float  #: change of the rate per hour of uptime (absolute)
    ci95: tuple[float, float]  #: of the slope
    relative_per_h: float  #: the slope over the rate at uptime 0
    unknown_start_spans: int  #: spans left out: their run gave no start for their node

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (bisection on ``t_lower``)."""
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_lower(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def aging(rows: Iterable[Sequence[Any]], starts: dict[tuple[str, str], list[int]],
          bucket_s: int = BUCKET_S) -> list[Aging]:
    """``rows``: (config, node, run, span, drafted, accepted); ``starts``: (run, node) -> engine
    starts, ns (a node's own, else the run's without a node, "_" as the store writes it). A span
    that straddles a restart is timed from the start before its middle."""
    per: dict[str, list[tuple[str, float, int, int]]] = {}
    unknown: dict[str, int] = {}
    for config, node, run, span, drafted, accepted in rows:
        t = (int(span) + 0.5) * bucket_s * 1e9
        node = node or UNKNOWN
        known = [s for s in starts.get((run, node), []) or starts.get((run, UNKNOWN), []) if s <= t]
        if not known:
            unknown[config] = unknown.get(config, 0) + 1
            continue
        per.setdefault(config, []).append((node, (t - max(known)) / 3.6e12, int(drafted),
                                           int(accepted)))
    return [a for config, pts in sorted(per.items())
            if (a := _fit(config, pts, unknown.get(config, 0))) is not None]


def _fit(config: str, pts: list[tuple[str, float, int, int]], unknown: int) -> Aging | None:
    nodes = sorted({p[0] for p in pts})
    w = sum(p[2] for p in pts)
    if len(nodes) < MIN_NODES or not w:
        return None
    xm = sum(p[2] * p[1] for p in pts) / w
    ym = sum(p[3] for p in pts) / w
    sxx = sum(p[2] * (p[1] - xm) ** 2 for p in pts)
    if sxx <= 0:
        return None
    slope = sum(p[2] * (p[1] - xm) * (p[3] / p[2] - ym) for p in pts) / sxx
    score: dict[str, float] = {}
    for node, x, d, a in pts:  # each node's share of the slope's error (its residuals, summed)
        score[node] = score.get(node, 0.0) + d * (x - xm) * (a / d - ym - slope * (x - xm))
    g = len(nodes)
    se = math.sqrt(g / (g - 1) * sum(v * v for v in score.values())) / sxx
    half = t_quantile(0.975, g - 1) * se
    start = ym - slope * xm
    return Aging(config, g, len(pts), w, (min(p[1] for p in pts), max(p[1] for p in pts)),
                 start, slope, (slope - half, slope + half),
                 slope / start if start > 0 else math.nan, unknown)


def run_starts(uri: str, where: Where = Where()) -> dict[tuple[str, str], list[int]]:
    """(run, node) -> the engine starts the store's run records give (ns, sorted)."""
    from ..io.store import open_store, safe

    store = open_store(uri)
    ds = store.dataset("run")
    out: dict[tuple[str, str], set[int]] = {}
    if ds is None:
        return {}
    table = ds.to_table(columns=[c for c in ("run_id", "started_ns", "node") if c in ds.schema.names])
    cols = table.to_pydict()
    for i, run in enumerate(cols.get("run_id", [])):
        start = cols["started_ns"][i] if "started_ns" in cols else 0
        if start and start > 0:
            node = (cols.get("node") or [""] * len(cols["run_id"]))[i] or UNKNOWN
            out.setdefault((safe(run), node), set()).add(int(start))
    return {k: sorted(v) for k, v in out.items()}


def fleet_aging(uri, where: Where = Where(), *, engine: str = "duckdb", master: str = "local[2]",
                spark=None, bucket_s: int = BUCKET_S) -> list[Aging]:
    """Acceptance against node uptime per configuration, over a store, on ``engine``."""
    sql = aging_sql(where, bucket_s)
    if engine == "duckdb":
        from . import duck

        rows = duck.histogram(uri, (), where, sql=sql)
    else:
        from . import spark as sp

        rows = sp.histogram(uri, (), where, spark=spark, master=master, sql=sql)
    return aging(rows, run_starts(str(uri), where), bucket_s)


def format_aging(rows: list[Aging]) -> str:
    lines = ["Acceptance rate against node uptime, across nodes (weighted least squares over "
             f"{BUCKET_S // 60}-minute spans; 95% interval across nodes, cluster-robust by node; "
             "rate: accepted / drafted tokens).", ""]
    if not rows:
        lines.append(f"no configuration with {MIN_NODES} or more nodes whose engine starts are "
                     "known")
    for a in rows:
        lo, hi = a.ci95
        verdict = ("falls with uptime" if hi < 0 else "rises with uptime" if lo > 0
                   else "no trend ruled in")
        lines.append(f"{a.config}: {a.slope_per_h:+.4f}/h [{lo:+.4f}, {hi:+.4f}] "
                     f"({a.relative_per_h:+.1%}/h of {a.rate_at_start:.3f} at start) over "
                     f"{a.nodes} nodes, uptime {a.uptime_h[0]:.1f}-{a.uptime_h[1]:.1f} h, "
                     f"{a.draft_tokens} draft tokens: {verdict}"
                     + (f"; {a.unknown_start_spans} spans without a known start left out"
                        if a.unknown_start_spans else ""))
    return "\n".join(lines)
