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
