"""The reliability suite's figures: runs tests/reliability (fault injection, kill -9, fuzzing
with a larger budget, cardinality, the short soak) and tabulates what it recorded; adds the
long soak from `make soak` when it has been run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .common import Row

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "test-artifacts" / "reliability" / "figures.json"
SOAK = ROOT / "test-artifacts" / "reliability" / "soak.json"


def bench_reliability(reps: int, fuzz_examples: int = 3000) -> list[Row]:
    if FIGURES.exists():
        FIGURES.unlink()
    env = {**os.environ, "SPECSCOPE_FUZZ_EXAMPLES": str(fuzz_examples)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/reliability", "tests/importers/test_formats.py::"
                           "test_fuzz_no_exception_escapes", "tests/importers/test_formats.py::"
                           "test_fuzz_count_recorded"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    summary = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    rows = [Row("reliability suite (tests/reliability + importer fuzzing)", summary, "", "",
                "all pass", "met" if proc.returncode == 0 else "not met", "single run")]
    for name, v in sorted(figures.items()):
        if name.startswith("fuzz"):
            rows.append(Row(name, f"{v['inputs']} inputs, {v['crashes']} crashes", "", "",
                            "0 crashes", "met" if v["crashes"] == 0 else "not met",
                            "hypothesis, mutations of valid inputs and arbitrary bytes"))
        elif name.startswith("soak"):
            rows.append(_soak_row(name, v))
        elif name.startswith("cardinality"):
            rows.append(Row(name, f"{v['label_sets_kept']} label sets kept, "
                            f"{v['overflowed_and_counted']} overflows counted",
                            f"/metrics {v['metrics_bytes_at_cap']} bytes at the cap, "
                            f"{v['metrics_bytes_after']} after", "",
                            "capped, counted, /metrics bounded",
                            "met" if v.get("bounded") else "not met", "single run"))
        else:
            facts = ", ".join(f"{k.replace('_', ' ')} {x}" for k, x in v.items() if k != "survived")
            rows.append(Row(f"fault: {name}", "engine kept going" if v.get("survived") else
                            "FAILED", facts, "", "no block, no raise, drops counted",
                            "met" if v.get("survived") else "not met", "single run"))
    if SOAK.exists():
        rows.append(_soak_row("soak (make soak)", json.loads(SOAK.read_text())))
    return rows


def _soak_row(name: str, v: dict) -> Row:
    flat = v["rss_growth_after_warmup_pct"] <= 10
    return Row(f"{name}: collector at its rated ingest, /metrics rendered every second",
               f"held {v['held_entries_per_s'] / 1e6:.2f} M entries/s for {v['seconds']:.0f} s "
               f"(target {v['target_entries_per_s'] / 1e6:.1f} M/s)",
               f"RSS {v['rss_mib_after_warmup']} → {v['rss_mib_end']} MiB "
               f"({v['rss_growth_after_warmup_pct']:+.1f}%), render p95 {v['render_ms_p95']} ms",
               "", "flat RSS (≤ +10%)", "met" if flat else "not met",
               f"{v['entries']} entries, all counted" if v["entries"] == v["entries_counted"]
               else f"{v['entries'] - v['entries_counted']} entries missing")
