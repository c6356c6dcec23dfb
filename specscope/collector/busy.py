"""Busy time: how long a run had requests in flight, the union of its requests' lifetimes.

Runs that take turns (``make demo``'s configurations, a sweep on one machine) idle between
their waves. Throughput over the span from first arrival to last finish counts those idle
stretches as slow decoding; over busy time it is what the run did while it ran.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from .. import schema

Interval = tuple[int, int]

#: at most this many disjoint intervals are kept per run; past it the two closest are joined
#: (their gap counted as busy), so a long-running collector stays bounded
MAX_INTERVALS = 512


def union(intervals: Iterable[Interval], limit: int = MAX_INTERVALS) -> tuple[Interval, ...]:
    """Sorted disjoint (start, end) intervals covering ``intervals``; empty ones dropped."""
    out: list[list[int]] = []
    for s, e in sorted((int(s), int(e)) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    while len(out) > limit:  # join across the smallest gap
        i = min(range(len(out) - 1), key=lambda j: out[j + 1][0] - out[j][1])
        out[i][1] = out[i + 1][1]
        del out[i + 1]
    return tuple((s, e) for s, e in out)


def add(intervals: tuple[Interval, ...], span: Interval) -> tuple[Interval, ...]:
    """``intervals`` (disjoint, sorted) with ``span`` added: O(1) amortised for spans that
    arrive in start order, as a run's requests do."""
    if intervals and span[0] >= intervals[-1][0] and len(intervals) < MAX_INTERVALS:
        s, e = intervals[-1]
        if span[0] <= e:
            return intervals if span[1] <= e else intervals[:-1] + ((s, span[1]),)
        return intervals + (span,)
    return union(intervals + (span,))


def seconds(intervals: Sequence[Interval]) -> float:
    return sum(e - s for s, e in intervals) / 1e9


def request_interval(r: schema.RequestRecord) -> Interval | None:
    """A request's lifetime, arrival (else first token) to finish; None where not timed."""
    start = r.t_arrival_ns or r.t_first_token_ns
    return (start, r.t_finish_ns) if start and r.t_finish_ns and r.t_finish_ns > start else None


def busy_seconds(records: Iterable[object]) -> float | None:
    """Seconds with at least one of the records' requests in flight; None without timed ones."""
    spans = [i for r in records if isinstance(r, schema.RequestRecord)
             for i in [request_interval(r)] if i]
    return seconds(union(spans)) if spans else None
