"""A fixed-bucket, mergeable histogram: bounded memory for a long-running collector.

Never imports torch or dash. Buckets are upper bounds (``le``), as Prometheus exposes them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable, Sequence

#: Latency buckets in seconds: 100 µs to 60 s, about 4 per decade.
SECONDS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                   0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0)


@dataclass
class Histogram:
    """Counts per bucket (the last is +Inf), sum and count of the observed values."""

    bounds: tuple[float, ...] = SECONDS_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.total += value * n
        self.count += n

    def observe_many(self, values: Iterable[float]) -> None:
        for v in values:
            self.observe(v)

    def add_counts(self, counts: Sequence[int], total: float) -> None:
        """Add per-bucket counts computed elsewhere (vectorised ingest)."""
        for i, c in enumerate(counts):
            self.counts[i] += int(c)
        self.count += int(sum(counts))
        self.total += total

    def merge(self, other: "Histogram") -> "Histogram":
        if other.bounds != self.bounds:
            raise ValueError("cannot merge histograms with different buckets")
        return Histogram(self.bounds, [a + b for a, b in zip(self.counts, other.counts)],
                         self.total + other.total, self.count + other.count)

    def cumulative(self) -> list[int]:
        """Counts of values <= each bound, then the +Inf total (Prometheus ``_bucket``)."""
        out, run = [], 0
        for c in self.counts:
            run += c
            out.append(run)
        return out

    def quantile(self, q: float) -> float | None:
        """Linear interpolation inside the bucket, as PromQL's histogram_quantile does."""
        if not self.count:
            return None
        rank = q * self.count
        cum = self.cumulative()
        for i, c in enumerate(cum):
            if c >= rank:
                lo = self.bounds[i - 1] if i > 0 else 0.0
                if i >= len(self.bounds):
                    return self.bounds[-1]
                prev = cum[i - 1] if i > 0 else 0
                inside = self.counts[i]
                return lo + (self.bounds[i] - lo) * ((rank - prev) / inside if inside else 0.0)
        return self.bounds[-1]
