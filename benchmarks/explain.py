"""``specscope explain`` on SmolLM2 with its int:4 draft (chain of 3) at batch 1 and 4: the
speedup predicted from the separately measured factors beside the one measured from the two
runs' wall-clock throughput."""

from __future__ import annotations

import os
import tempfile

from .common import Row


def bench_explain(reps: int) -> list[Row]:
    from specscope.collector.explain import explain_pair, pairs
    from specscope.engine.decoder import SpecConfig
    from specscope.engine.models import load_pair
    from specscope.engine.workload import WorkloadSpec, run_workload
    from specscope.io.trace import read_trace

    pair = load_pair("smollm2", "int:4")
    tmp = tempfile.mkdtemp(prefix="specscope-explain-")
    rows = []
    for conc in (1, 4):
        path = run_workload(pair, SpecConfig(num_steps=3),
                            WorkloadSpec(requests=8, concurrency=conc, max_new_tokens=48),
                            os.path.join(tmp, f"c{conc}.jsonl"), progress=False)
        ((_, spec, base),) = pairs(read_trace(path).records)
        e = explain_pair(spec, base)
        err = e["prediction_error"]
        rows.append(Row(
            f"explain: SmolLM2-135M, int:4 draft, chain of 3, concurrency {conc} (mean batch "
            f"{e['spec']['batch']:.1f}), 8 requests x 48 tokens: predicted speedup from acceptance "
            "length, step and prefill times (phase clocks) vs measured from wall-clock throughput",
            f"{e['predicted_speedup']:.3f}x predicted; steady state (no prefill, no tail) "
            f"{e['steady_state_speedup']:.3f}x; verdict: {e['verdict']['throughput'].split(':')[0]}",
            f"{e['measured_speedup']:.3f}x measured", f"{err:+.1%}", "within 5%",
            "met" if abs(err) <= 0.05 else "not met", "single run pair"))
    return rows


def bench_ngram_categories(reps: int) -> list[Row]:
    """Prompt lookup (k up to 4) against target-only on SmolLM2, batches of 8 mixing every
    category (the demo's order: copy, edit, refactor first; those greedy, the rest at 0.7):
    the speedup per category with its bootstrap interval, and explain's prediction of it."""
    from specscope.collector.explain import by_category, pairs
    from specscope.collector.requests import category_rows
    from specscope.demo import DEMO_CATEGORIES
    from specscope.engine.decoder import SpecConfig
    from specscope.engine.models import load_pair
    from specscope.engine.workload import WorkloadSpec, run_workload
    from specscope.io.trace import read_trace

    pair = load_pair("smollm2", "int:4")
    tmp = tempfile.mkdtemp(prefix="specscope-ngram-")
    path = run_workload(pair, SpecConfig(algorithm="ngram", num_steps=4),
                        WorkloadSpec(requests=60, concurrency=8, max_new_tokens=48, temperature=0.7,
                                     categories=DEMO_CATEGORIES),
                        os.path.join(tmp, "ngram.jsonl"), progress=False)
    ((_, spec, base),) = pairs(read_trace(path).records)
    predicted = by_category(spec, base)
    rows = []
    wins = {"copy", "edit", "refactor"}
    for c in category_rows(spec, base, n_boot=2000):
        p = predicted.get(c.category)
        if c.speedup is None or c.ci is None or p is None:
            continue
        should_win = c.category in wins
        met = (c.ci[0] > 1) if should_win else (c.ci[1] < 1)
        rows.append(Row(
            f"prompt lookup (n-gram, k <= 4) vs target-only, SmolLM2, 60 requests x 48 tokens in "
            f"mixed batches of 8, category {c.category} ({c.matched} requests, "
            f"{'greedy' if should_win else 'temperature 0.7'}): speedup from the requests' own "
            "tokens / E2E (bootstrap 95% CI over prompts), explain's prediction (tokens per "
            "request-step x step times) beside it",
            f"{c.speedup:.2f}x [{c.ci[0]:.2f}, {c.ci[1]:.2f}]; AL {c.acceptance_length or 0:.2f}",
            f"explain {p['predicted_speedup']:.2f}x ({p['prediction_error']:+.1%}); "
            f"{p['delivered_per_step']:.2f} tokens/request-step",
            f"{c.speedup:.2f}x", "> 1 (CI above 1)" if should_win else "< 1 (CI below 1)",
            ("met" if met else "not met") + (", explain within 10%" if abs(p["prediction_error"]) <= 0.10
                                             else ", explain off by more than 10%"),
            "one run pair, back to back"))
    return rows
