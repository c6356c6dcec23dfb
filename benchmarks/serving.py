"""serve-engine under a real benchmark client (AIPerf): hooks on vs off."""

from __future__ import annotations

import statistics

from specscope import schema

from .common import Row, _spread


def bench_serve(reps: int) -> list[Row]:
    """serve-engine under AIPerf (concurrency 4, 32 requests x 32 tokens): hooks on vs off.

    AIPerf's own /metrics scraping is off in both arms (a hooks-off server has no /metrics to
    scrape); the cost of serving /metrics is its own row (bench_collector)."""
    import tempfile
    from pathlib import Path

    from specscope.engine.models import smollm2_tokenizer_dir
    from specscope.importers import import_file
    from specscope.serving.harness import ServerProcess, find_aiperf, run_aiperf

    if find_aiperf() is None:
        return [Row("serve-engine tok/s under AIPerf, hooks on vs off", "not run", "",
                    "", "<= 2% slower", "n/a", "aiperf missing (make .venv-aiperf)")]
    tok = smollm2_tokenizer_dir()
    rates: dict[str, list[float]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(max(6, reps)):
            for mode in ("on", "off"):
                args = ["--model", "tiny", "--tokenizer", str(tok), "--spec-steps", "3",
                        "--max-batch", "4", "--stats-every", "8"]
                args += ["--no-hooks"] if mode == "off" else []
                trace = Path(tmp) / f"{mode}{i}.jsonl"
                with ServerProcess(args, trace) as srv:
                    run = run_aiperf(srv.url, model="tiny", tokenizer=tok,
                                     artifact_dir=Path(tmp) / f"a-{mode}{i}", concurrency=4,
                                     requests=32, input_tokens=64, output_tokens=32,
                                     server_metrics=False)
                bench = next(r for r in import_file(run.summary, run_id="x").records
                             if isinstance(r, schema.BenchmarkRecord))
                rates[mode].append(bench.metrics["output_throughput_tok_s"])
    on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
    cost = (off - on) / off * 100
    return [Row("serve-engine output tok/s under AIPerf (tiny model, chain of 3, conc 4, "
                "32 req x 32 tok, no client-side scraping), hooks on vs off", f"{on:.0f} tok/s", f"{off:.0f} tok/s (no hooks)",
                f"{on / off:.3f}x ({cost:+.1f}% cost)", "<= 2% slower",
                "met" if cost <= 2 else "not met",
                f"on {_spread(rates['on'])}, off {_spread(rates['off'])}")]
