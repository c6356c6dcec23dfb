"""``make soak``: the collector at its rated ingest for a long time, scraped every second.

Reports the rate it held and its resident memory over time (flat means bounded state:
cumulative counters, a fixed number of windows, capped label sets). Writes
test-artifacts/reliability/soak.json; ``make bench`` tabulates it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

#: the ingest rate specscope rates one collector process for (verify entries per second), with
#: a /metrics render every second; the peak measured by `make bench` is several times higher
RATED_ENTRIES_PER_S = 1_000_000
OUT = Path(__file__).resolve().parents[1] / "test-artifacts" / "reliability" / "soak.json"


def _batch(n: int, t_ns: int, rng):
    from specscope import schema
    from specscope.collector.columns import VerifyColumns

    acc = np.minimum(rng.geometric(0.45, n) - 1, 4)
    return VerifyColumns(
        run_id="soak", config_id="soak", rank=0, num_steps=max(1, n // 64),
        t_ns=np.full(n, t_ns, dtype=np.int64), num_drafted=np.full(n, 4),
        num_draft_tokens=np.full(n, 4), num_accepted=acc,
        mode_requested=np.full(n, 2, dtype=np.int8), mode_used=np.full(n, 2, dtype=np.int8),
        num_verified=acc + 1, num_top1=acc, expected_top1=rng.random(n) * 3,
        var_top1=rng.random(n), draft_hist=np.zeros((n, schema.DRAFT_HIST_BINS), dtype=np.int64))


def soak(seconds: float, rate: int = RATED_ENTRIES_PER_S, batch: int = 20_000) -> dict:
    """Feed ``rate`` entries/s for ``seconds``; render /metrics every second; sample RSS."""
    import psutil

    from specscope import schema
    from specscope.collector.service import Collector
    from specscope.exporters.prometheus import render

    proc = psutil.Process(os.getpid())
    rng = np.random.default_rng(0)
    collector = Collector(window_s=1.0, num_windows=60)
    collector.observe([schema.RunRecord(run_id="soak", config_id="soak", algorithm="eagle",
                                        num_steps=4, topk=1, num_verify_tokens=5, backend="cpu",
                                        model="soak")])
    template = _batch(batch, 0, rng)
    t0 = time.perf_counter()
    fed, next_scrape, rss, renders = 0, t0 + 1.0, [], []
    while (now := time.perf_counter()) - t0 < seconds:
        if fed < rate * (now - t0):  # behind schedule: feed; ahead: wait for the next tick
            template.t_ns[:] = time.time_ns()
            collector.observe_columns(template)
            fed += batch
        else:
            time.sleep(0.001)
        if now >= next_scrape:
            r0 = time.perf_counter()
            text = render(collector.snapshot())
            renders.append(time.perf_counter() - r0)
            rss.append((now - t0, proc.memory_info().rss / 2**20, len(text)))
            next_scrape += 1.0
    elapsed = time.perf_counter() - t0
    warm = [m for t, m, _ in rss if t >= min(10.0, seconds / 5)] or [m for _, m, _ in rss]
    snap = collector.snapshot()
    return {"seconds": round(elapsed, 1), "target_entries_per_s": rate,
            "held_entries_per_s": round(fed / elapsed), "entries": fed,
            "entries_counted": int(sum(s.num_drafts for s in snap.totals.values())),
            "rss_mib_after_warmup": round(warm[0], 1), "rss_mib_end": round(rss[-1][1], 1),
            "rss_mib_max": round(max(m for _, m, _ in rss), 1),
            "rss_growth_after_warmup_pct": round((rss[-1][1] - warm[0]) / warm[0] * 100, 2),
            "metrics_bytes_end": rss[-1][2],
            "render_ms_p95": round(sorted(renders)[int(0.95 * (len(renders) - 1))] * 1e3, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=RATED_ENTRIES_PER_S)
    args = ap.parse_args()
    result = soak(args.minutes * 60, args.rate)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0 if result["rss_growth_after_warmup_pct"] <= 10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
