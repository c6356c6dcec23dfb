"""Recipe sweeps on the real engines: what the sweep itself costs beside the servers' work, and
the table a user reads (tok/s with its interval over rounds, acceptance, gate) per point."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .common import Row


def _sweep_rows(label: str, engine: str, specs: list[str], options, rounds: int) -> list[Row]:
    from specscope.serving.enginesweep import plan_engine, run_engine_sweep

    points = plan_engine(engine, specs, [0.0, 0.8], [2], ["0:32"])
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        results = run_engine_sweep(points, Path(tmp) / "sweep", options, requests=8,
                                   rounds=rounds, progress=False)
        total = time.perf_counter() - t0
    from specscope.serving.enginesweep import TIMING

    part = {k: sum(r.timing.get(k) or 0.0 for r in results) for k in TIMING}
    rest = total - sum(part.values())  # planning, the progress bar, the index
    own = part["own_s"] + max(rest, 0.0)
    rows = [Row(f"{label} sweep, {len(points)} points x {rounds} rounds (8 req x 32 tok, conc 2, "
                "temperature 0 and 0.8): the sweep's own time (reading the engine's records, "
                "gating, writing the store and index) vs the whole sweep",
                f"{own:.1f} s ({own / total:.1%})", f"{total:.0f} s in all",
                f"serving {part['window_s']:.0f} s, server starts {part['server_start_s']:.0f} s, "
                f"warm-ups {part['server_warmup_s']:.0f} s, probe {part['server_probe_s']:.0f} s, "
                f"stops {part['server_stop_s']:.0f} s", "<= 5% of the sweep",
                "met" if own / total <= 0.05 else "not met", "one run")]
    base = {(r.point.temperature, r.point.concurrency): r.figures.tok_s
            for r in results if r.point.spec.off and r.status == "ok"}
    for r in results:
        f = r.figures
        if r.status != "ok":
            rows.append(Row(f"{label} sweep point {r.point.name}", "failed", r.error[:80], "",
                            "gate PASS before trusting", "failed", ""))
            continue
        ci, tok_s = f.tok_s_ci, f.tok_s or 0.0
        tok = f"{tok_s:.1f} tok/s" + (f" (95% CI {ci[0]:.1f} to {ci[1]:.1f})" if ci else "")
        ref = base.get((r.point.temperature, r.point.concurrency))
        al, acc = f.acceptance_length, f.acceptance_rate
        accept = ("AL " + (f"{al:.2f}" if al is not None else "n/a") + ", acc "
                  + (f"{acc:.2f}" if acc is not None else "n/a"))
        gate = "reference" if r.point.spec.off else (f.gate.verdict or "n/a").upper() + (
            " (" + "; ".join(f.gate.failed) + ")" if f.gate.failed else "")
        rows.append(Row(f"{label} sweep point {r.point.name}: tok/s over {rounds} rounds, "
                        "acceptance (AL incl. the bonus token; acc pooled), gate", tok,
                        f"target-only {ref:.1f} tok/s" if ref else "",
                        f"{tok_s / ref:.2f}x" if ref else "", "gate PASS before trusting",
                        gate, accept))
    return rows


def bench_sweeps(reps: int) -> list[Row]:
    """A small sweep per engine (two speculation settings and target-only, greedy and 0.8,
    concurrency 2, three rounds a point)."""
    from specscope.engine.models import smollm2_dir, smollm2_draft_dir, smollm2_gguf
    from specscope.serving.engines import EngineOptions
    from specscope.serving.llamacpp import llamacpp_python
    from specscope.serving.sglang import sglang_checkpoint, sglang_python
    from specscope.serving.vllm import vllm_python

    rounds = 3
    rows: list[Row] = []
    if llamacpp_python() is not None:
        gguf = smollm2_gguf()
        rows += _sweep_rows("llama.cpp build 11434", "llamacpp", ["draft-simple:2", "draft-simple:4"],
                            EngineOptions(model=gguf, draft=gguf, dtype="float32"), rounds)
    if vllm_python() is not None:
        rows += _sweep_rows("vLLM 0.32 CPU", "vllm",
                            ['{"method": "draft_model", "num_speculative_tokens": 3}',
                             '{"method": "ngram", "num_speculative_tokens": 3, '
                             '"prompt_lookup_min": 2, "prompt_lookup_max": 4}'],
                            EngineOptions(model=smollm2_dir(), draft=smollm2_draft_dir("int:4")),
                            rounds)
    if sglang_python() is not None:
        from tests.engines.sglang_fixtures import LAUNCHER  # the CPU stand-in lives there

        with tempfile.TemporaryDirectory() as tmp:
            model = sglang_checkpoint(smollm2_dir(), Path(tmp) / "smollm2")
            rows += _sweep_rows("SGLang 0.5.21 CPU (as shipped)", "sglang",
                                ["STANDALONE:3/1/4", "STANDALONE:2/1/3"],
                                EngineOptions(model=model, launcher=LAUNCHER,
                                              env={"TORCHDYNAMO_DISABLE": "1"}), rounds)
    return rows or [Row("engine sweeps", "not run", "", "", "", "n/a",
                        "no engine environment (make vllm-env sglang-env llamacpp-env)")]
