"""The dashboard in headless Chromium: page load until the figures are drawn, and callback
latency p95, on a 1M-step trace beside the same page on a 10k-step trace."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

from tests.browser import chromium, paths, wait_settled

from .collector import _synthetic_verify_parquet
from .common import Row

PAGES = ("/", "/truth", "/profile")


CALLBACKS = ("return performance.getEntriesByType('resource')"
             ".filter(e => e.name.includes('_dash-update-component')).map(e => e.duration)")
PAINT = ("var p = performance.getEntriesByName('first-contentful-paint');"
         " return p.length ? p[0].startTime : null")


def _measure(url: str, reps: int) -> tuple[list[float], list[float], list[float]]:
    """(figures drawn s, first contentful paint s, callback ms) over ``reps`` loads of each page."""
    driver = chromium(1300, 1400)
    drawn, paint, callbacks = [], [], []
    try:
        for i in range(reps + 1):
            for page in PAGES:
                t0 = time.perf_counter()
                driver.get(url + page)
                wait_settled(driver, timeout=120)
                if i == 0:
                    continue  # warm-up: browser cache, server caches
                drawn.append(time.perf_counter() - t0)
                p = driver.execute_script(PAINT)
                if p is not None:
                    paint.append(p / 1e3)
                callbacks.extend(driver.execute_script(CALLBACKS))
    finally:
        driver.quit()
    return drawn, paint, callbacks


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.95 * len(xs)))]


def bench_dashboard(reps: int) -> list[Row]:
    if not all(paths()):
        return [Row("dashboard page load and callback p95", "not run", "", "", "≤ 2 s, ≤ 150 ms",
                    "n/a", "needs Debian's chromium and chromium-driver")]
    from specscope.dashboard import TraceSource, create_app
    from specscope.dashboard.app import serve

    tmp = tempfile.mkdtemp(prefix="specscope-dash-bench-")
    results = {}
    try:
        for n in (10_000, 1_000_000):
            folder = os.path.join(tmp, f"steps{n}")
            # one request per step, a step every 10 ms: 1M steps span about 2.8 hours
            _synthetic_verify_parquet(folder, n, batch=1, step_ns=10_000_000)
            t0 = time.perf_counter()
            source = TraceSource([folder])
            source.runs()
            load_s = time.perf_counter() - t0
            server = serve(create_app(source), "127.0.0.1", 0)
            try:
                drawn, paint, cb = _measure(f"http://127.0.0.1:{server.server_port}", reps)
            finally:
                server.shutdown()
            results[n] = (load_s, drawn, paint, cb)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    big, small = results[1_000_000], results[10_000]
    draw_big, draw_small = statistics.median(big[1]), statistics.median(small[1])
    cb_big, cb_small = _p95(big[3]), _p95(small[3])
    paint_big = statistics.median(big[2]) if big[2] else float("nan")
    return [
        Row("dashboard: page load until every figure is drawn (Live, Sampling truth, Profile; "
            "median of loads), 1M-step Parquet trace", f"{draw_big:.2f} s (first paint "
            f"{paint_big:.2f} s)", f"{draw_small:.2f} s on a 10k-step trace",
            f"{draw_big / draw_small:.2f}x", "≤ 2 s", "met" if draw_big <= 2 else "not met",
            f"{len(big[1])} loads; min {min(big[1]):.2f} s, max {max(big[1]):.2f} s"),
        Row("dashboard: callback latency p95 (browser-timed _dash-update-component requests), "
            "1M-step trace", f"{cb_big:.0f} ms", f"{cb_small:.0f} ms on a 10k-step trace",
            f"{cb_big / cb_small:.2f}x", "≤ 150 ms", "met" if cb_big <= 150 else "not met",
            f"{len(big[3])} callbacks; median {statistics.median(big[3]):.0f} ms"),
        Row("dashboard: 1M-step Parquet trace to its aggregates when the dashboard starts "
            "(column-wise; kept server-side)", f"{big[0]:.2f} s", f"{small[0]:.2f} s for 10k steps",
            "—", "(reported)", "—", "single run"),
    ]
