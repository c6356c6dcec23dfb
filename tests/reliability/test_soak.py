"""The short soak (`make soak` runs the long one): the collector at its rated ingest with a
/metrics render every second keeps its memory flat and counts every entry."""

from __future__ import annotations

from benchmarks.soak import soak


def test_short_soak_memory_stays_flat_and_nothing_is_lost(figure):
    r = soak(15.0)
    figure("soak (short, 15 s)", **r)
    assert r["entries_counted"] == r["entries"]  # every entry fed is in the totals
    assert r["rss_growth_after_warmup_pct"] <= 10.0, r  # bounded state: windows, label sets
    assert r["metrics_bytes_end"] < 200_000
