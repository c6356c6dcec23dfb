"""Acceptance that ages with uptime: a trend test within each stretch between restarts
(SGLang #37326: MTP acceptance decays to about 0 over a day, a restart restores it; vLLM
#41838: EAGLE acceptance length 3.07 to about 2.8 over hours). Pure; stdlib only.

A run's engine starts are its run records' ``started_ns`` (the hooks write the process's start,
``scrape`` the engine's ``process_start_time_seconds`` and a new start at each counter reset),
per node (a node's own starts, else the run's without a node). Each start opens a **segment**
of that node's records; a record belongs to the latest start at or before its time, and
its **uptime** is its time since that start (since the segment's first record where the start
is unknown). The spans are cut over the segment's records, from its first to its last. Tokens served since the start are counted beside it.

Per prompt class (a request's ``category``; "" where the records do not say) and per draft
position (and all positions pooled), each segment's records are cut into ``BINS`` equal spans of
uptime, its first span is left out (warm-up), and the acceptance rate is fitted on uptime by
weighted least squares with one intercept per segment and one slope: a restart starts a new
level and is never itself a change, while a decay that comes back after each restart adds to the
evidence. The slope's error is the binomial one scaled by the spread the bins show about the
fit (never below binomial: steps and requests make tokens clump) and by (1 + r) / (1 - r) for
the lag-one correlation r of neighbouring spans' residuals (acceptance that wanders slowly),
whose degrees of freedom shrink by the same factor. A cell is flagged where the slope is negative at ``ALPHA`` divided by
the cells judged (one-sided: acceptance that rises with warm-up is not a fault) and the fitted
fall over the judged uptime is at least ``MIN_FALL`` of the fitted rate where it begins. Comparing within a class keeps
a changed workload mix from reading as drift; a mix that changes within one class still can.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from .. import schema

#: uptime spans per segment (the first is warm-up and left out)
BINS = 24
#: draft tokens a span needs to be fitted
MIN_BIN_TOKENS = 20
#: the false-alarm rate per run, split over the cells judged
ALPHA = 1e-4
#: the fitted fall over the judged uptime, as a share of the fitted rate where it begins, that a
#: finding needs
MIN_FALL = 0.05
#: draft positions judged one by one (deeper ones are left out, of the pooled cell too)
MAX_POSITIONS = 8
ALL = -1  #: the cell of all positions pooled


@dataclass(frozen=True)
class Point:
    """One record's acceptance at one time: drafted and accepted per draft position."""

    t_ns: int
    klass: str
    drafted: tuple[int, ...]
    accepted: tuple[int, ...]
    served: int  #: tokens committed (bonus tokens included)
    drafts: int = 1  #: request-steps that drafted
    node: str = ""


@dataclass(frozen=True)
class Segment:
    """The stretch between one engine start and the next."""

    start_ns: int  #: the engine's start; 0 where unknown (uptime from the first record)
    first_ns: int
    last_ns: int
    tokens_served: int
    node: str = ""

    @property
    def span_h(self) -> float:
        return (self.last_ns - self.first_ns) / 3.6e12


@dataclass(frozen=True)
class Bin:
    """One span of uptime in one segment, one cell."""

    segment: int
    uptime_h: float  #: its draft tokens' mean uptime, hours since the segment's start
    served: int  #: tokens served since the start, at the span's end
    drafted: int
    accepted: int
    drafts: int = 0  #: request-steps that drafted
    index: int = 0  #: the span's place in its segment (0: the warm-up)

    @property
    def rate(self) -> float:
        return self.accepted / self.drafted

    @property
    def acceptance_length(self) -> float | None:
        """Tokens committed per request-step, bonus token included (all positions' cell)."""
        return 1 + self.accepted / self.drafts if self.drafts else None


@dataclass(frozen=True)
class Trend:
    """The fitted slope of one cell: acceptance rate per hour of uptime."""

    klass: str
    position: int  #: ALL for every position pooled
    rate: float  #: pooled acceptance rate of the bins fitted
    start_rate: float  #: the fitted rate where the longest segment's judged uptime begins
    slope_per_h: float  #: change of the rate per hour of uptime (absolute)
    se_per_h: float
    t: float
    df: int
    p_value: float  #: one-sided, for a fall
    fall: float  #: fitted fall over the judged uptime, as a share of the fitted rate at its start
    span_h: float  #: judged uptime, hours (the longest segment's)
    bins: int
    segments: int
    judged: int = 0  #: cells judged (the Bonferroni divisor)
    flagged: bool = False

    @property
    def relative_per_h(self) -> float:
        """The slope as a share of the fitted rate where the judged uptime begins."""
        return self.slope_per_h / self.start_rate


@dataclass
class Drift:
    segments: list[Segment]
    trends: list[Trend] = field(default_factory=list)
    bins: dict[tuple[str, int], list[Bin]] = field(default_factory=dict)

    @property
    def restarts(self) -> int:
        return max(0, len(self.segments) - 1)

    @property
    def flagged(self) -> list[Trend]:
        return [t for t in self.trends if t.flagged]


def points(records: Iterable[schema.Record]) -> list[Point]:
    """Acceptance per draft position from verify steps (each request's entry, its class from
    its request record) or, where a run has none, from counter windows."""
    records = list(records)
    klass = {r.request_id: r.category for r in records if isinstance(r, schema.RequestRecord)}
    out: list[Point] = []
    for r in records:
        if isinstance(r, schema.VerifyStepRecord):
            for e in r.entries:
                n = min(e.num_drafted, MAX_POSITIONS)
                if n <= 0:
                    continue
                a = min(max(e.num_accepted, 0), e.num_drafted)
                per = e.accepted_per_pos[:n] if len(e.accepted_per_pos) >= n else \
                    tuple(int(i < a) for i in range(n))
                out.append(Point(r.t_ns, klass.get(e.request_id, ""), (1,) * n,
                                 tuple(min(int(x), 1) for x in per), a + 1, 1, r.node))
    if out:
        return out
    for r in records:
        if isinstance(r, schema.SpecCountsRecord) and r.t_ns and r.num_drafts:
            acc = tuple(r.accepted_per_pos[:MAX_POSITIONS])
            drafted = tuple(r.drafted_per_pos[:MAX_POSITIONS]) or (r.num_drafts,) * len(acc)
            if acc and len(drafted) == len(acc):
                out.append(Point(r.t_ns, "", drafted, acc, sum(r.accepted_per_pos) + r.num_drafts,
                                 r.num_drafts, getattr(r, "node", "")))
    return out


def starts(records: Iterable[schema.Record]) -> dict[str, list[int]]:
    """The engine starts the run records say (ns since the epoch), in order, per node."""
    out: dict[str, set[int]] = {}
    for r in records:
        if isinstance(r, schema.RunRecord) and r.started_ns > 0:
            out.setdefault(r.node, set()).add(r.started_ns)
    return {node: sorted(v) for node, v in out.items()}


def _segments(pts: list[Point], known: dict[str, list[int]]) -> tuple[list[int], list[Segment]]:
    """Each point's segment and the segments (points sorted by time): a node's records between
    one of its starts and the next (its own starts, else the run's without a node)."""
    segs: list[Segment] = []
    which: dict[tuple[str, int], int] = {}
    out = []
    for p in pts:
        mine = known.get(p.node) or known.get("", [])
        i = bisect.bisect_right(mine, p.t_ns)  # 0: before any known start
        key = (p.node, i)
        if key not in which:
            which[key] = len(segs)
            segs.append(Segment(mine[i - 1] if i else 0, p.t_ns, p.t_ns, 0, p.node))
        s = segs[which[key]]
        segs[which[key]] = Segment(s.start_ns, s.first_ns, p.t_ns, s.tokens_served + p.served,
                                   s.node)
        out.append(which[key])
    return out, segs


def _cells(p: Point, klass: str) -> Iterable[tuple[tuple[str, int], int, int, int]]:
    yield (klass, ALL), sum(p.drafted), sum(p.accepted), p.drafts
    for i, (d, a) in enumerate(zip(p.drafted, p.accepted)):
        yield (klass, i), d, a, 0


def drift(records: Iterable[schema.Record], *, bins: int = BINS, alpha: float = ALPHA,
          min_fall: float = MIN_FALL, min_bin_tokens: int = MIN_BIN_TOKENS,
          by_class: bool = True, trends: bool = True) -> Drift:
    """The trend of acceptance on uptime per (class, position) over one run's records
    (``by_class=False``: every class pooled under ""; ``trends=False``: the spans only)."""
    records = list(records)
    pts = sorted(points(records), key=lambda p: p.t_ns)
    seg_of, segs = _segments(pts, starts(records))
    out = Drift(segs)
    acc: dict[tuple[str, int], dict[tuple[int, int], list[Any]]] = {}
    served = [0] * len(segs)
    for p, s in zip(pts, seg_of):
        seg = segs[s]
        b = min(int((p.t_ns - seg.first_ns) / (max(seg.last_ns - seg.first_ns, 1) / bins)),
                bins - 1)
        served[s] += p.served
        up = (p.t_ns - (seg.start_ns or seg.first_ns)) / 3.6e12
        for cell, d, a, n in _cells(p, p.klass if by_class else ""):
            slot = acc.setdefault(cell, {}).setdefault((s, b), [0, 0, 0, 0, 0.0])
            slot[0] += d
            slot[1] += a
            slot[2] = served[s]
            slot[3] += n
            slot[4] += d * up
    if not any(cell[1] > 0 for cell in acc):  # one position only: its cell is the pooled one
        acc = {cell: v for cell, v in acc.items() if cell[1] == ALL}
    for cell, by_bin in acc.items():
        out.bins[cell] = [Bin(s, v[4] / v[0], v[2], v[0], v[1], v[3], b)
                          for (s, b), v in sorted(by_bin.items()) if v[0]]
    if not trends:
        return out
    found = [t for cell, bs in sorted(out.bins.items())
             if (t := fit(cell, bs, min_bin_tokens=min_bin_tokens)) is not None]
    out.trends = [_judge(t, len(found), alpha, min_fall) for t in found]
    return out


def _judge(t: Trend, judged: int, alpha: float, min_fall: float) -> Trend:
    flagged = t.p_value < alpha / judged and t.fall >= min_fall
    return Trend(**{**t.__dict__, "judged": judged, "flagged": flagged})


def fit(cell: tuple[str, int], bins: list[Bin], *, min_bin_tokens: int = MIN_BIN_TOKENS
        ) -> Trend | None:
    """One slope over segments with their own intercepts; None where too little to fit (at
    least two spans in a segment after its warm-up, and four degrees of freedom)."""
    by_seg: dict[int, list[Bin]] = {}
    for b in bins:
        by_seg.setdefault(b.segment, []).append(b)
    kept = {s: [b for b in sorted(bs, key=lambda b: b.index) if b.index and b.drafted >= min_bin_tokens]
            for s, bs in by_seg.items()}
    kept = {s: bs for s, bs in kept.items() if len(bs) >= 2}
    n = sum(len(bs) for bs in kept.values())
    df = n - len(kept) - 1
    if df < 4:
        return None
    drafted = sum(b.drafted for bs in kept.values() for b in bs)
    accepted = sum(b.accepted for bs in kept.values() for b in bs)
    rate = accepted / drafted
    if rate <= 0 or rate >= 1:
        return None
    sxx = sxy = 0.0
    centred: list[list[tuple[float, float, float]]] = []  #: per segment, in uptime order
    means: dict[int, tuple[float, float]] = {}
    for s, bs in kept.items():
        w = sum(b.drafted for b in bs)
        xm = sum(b.drafted * b.uptime_h for b in bs) / w
        ym = sum(b.accepted for b in bs) / w
        means[s] = (xm, ym)
        centred.append([(b.drafted, b.uptime_h - xm, b.rate - ym) for b in bs])
        for w_, x, y in centred[-1]:
            sxx += w_ * x * x
            sxy += w_ * x * y
    if sxx <= 0:
        return None
    slope = sxy / sxx
    var = rate * (1 - rate)
    resid = [[math.sqrt(w) * (y - slope * x) for w, x, y in seg] for seg in centred]
    spread = sum(r * r for seg in resid for r in seg) / var / df
    # neighbouring spans' residuals that move together: the error grows, the evidence shrinks
    lag = sum(a * b for seg in resid for a, b in zip(seg, seg[1:]))
    raw = lag / max(sum(r * r for seg in resid for r in seg), 1e-300)
    rho = min(max(raw + (1 + 3 * raw) * len(kept) / n, 0.0), 0.9)  # (its bias: spans a segment)
    inflate = (1 + rho) / (1 - rho)
    df_eff = max(2, int(df / inflate))
    se = math.sqrt(max(1.0, spread) * inflate * var / sxx)
    t = slope / se
    longest = max(kept, key=lambda s: kept[s][-1].uptime_h - kept[s][0].uptime_h)
    span = kept[longest][-1].uptime_h - kept[longest][0].uptime_h
    xm, ym = means[longest]  # the fitted rate where the longest segment's judged uptime begins
    start = max(ym + slope * (kept[longest][0].uptime_h - xm), 1e-9)
    return Trend(cell[0], cell[1], rate, start, slope, se, t, df_eff, t_lower(t, df_eff),
                 -slope * span / start, span, n, len(kept))


def t_lower(t: float, df: int) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return tail if t < 0 else 1 - tail


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) (continued fraction, Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1 - _betainc(b, a, 1 - x)
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 400):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return front * f / a
