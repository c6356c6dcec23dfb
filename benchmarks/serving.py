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


def bench_vllm(reps: int) -> list[Row]:
    """A real vLLM (the CPU build, .venv-vllm) serving SmolLM2 with its 4-bit draft (k = 3):
    specscope's plugin at its default policy (statistics until decided, then one step in 32),
    the plugin with statistics on every step (what the default costs while its classes are
    deciding), the plugin off, and the plugin off again (the control). One server at a time, so
    that no idle server competes for the two cores: each round starts each mode's server in
    turn (the order rotating from round to round), warms it up, times the workload twice and
    stops it (8 chat requests, concurrency 4, 32 tokens each with ignore_eos, mixed
    temperatures, fixed seeds). A fresh server is where the default policy decides, so its row
    is the cost while deciding, as every restart of a busy server pays it."""
    import time

    from specscope.engine.models import smollm2_dir, smollm2_draft_dir
    from specscope.engine.workload import load_prompts
    from specscope.serving.vllm import VllmServer, drive, speculative_config, vllm_python

    from .common import paired_ratio, ratio_verdict

    base = ("vLLM (CPU build) served output tok/s, SmolLM2 + 4-bit draft k = 3, conc 4, "
            "8 req x 32 tok, one server at a time, restarted per measurement, specscope plugin ")
    figures = {"on": base + "on (default policy: stats until decided, then 1 step in 32; "
                            "a fresh server is deciding) vs off",
               "every": base + "on with stats on every step (8 rows a step, all 4 here) vs off",
               # the control: the plugin off again, against the first; what two restarts of
               # one identical server differ by is the floor under the rows above
               "off2": base + "off again (the control: an identical server) vs off: "
                              "the floor under the rows above"}
    if vllm_python() is None:
        return [Row(f, "not run", "", "", "<= 2% slower", "n/a",
                    "vLLM's environment missing (make vllm-env)") for f in figures.values()]
    import tempfile
    from pathlib import Path

    target, draft = smollm2_dir(), smollm2_draft_dir("int:4")
    spec = speculative_config("draft_model", draft=draft, k=3)
    prompts = [p["prompt"] for p in load_prompts()][:8]
    every = {"off": 32, "on": 32, "every": 1, "off2": 32}
    times: dict[str, list[float]] = {mode: [] for mode in every}
    order = list(every)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(max(4, reps)):
            for mode in order[i % len(order):] + order[:i % len(order)]:
                srv = VllmServer(model=target, spec=spec, hooks=not mode.startswith("off"),
                                 stats_every=every[mode], trace_dir=Path(tmp) / f"{mode}{i}",
                                 log=Path(tmp) / f"{mode}{i}.log")
                with srv:
                    drive(srv.url, str(target), prompts[:4], max_tokens=8)  # warm-up
                    t = time.perf_counter()
                    for _ in range(2):
                        drive(srv.url, str(target), prompts, max_tokens=32,
                              extra={"ignore_eos": True})
                    times[mode].append((time.perf_counter() - t) / 2)
    tokens = len(prompts) * 32
    off = tokens / statistics.median(times["off"])
    # an identical server that differs by more than the bar leaves this design unable to
    # resolve it: no row says met or not met then
    _, (c_lo, c_hi) = paired_ratio(times["off2"], times["off"])
    floor = max(1 - c_lo, c_hi - 1)
    rows = []
    for mode, figure in figures.items():
        ratio, (lo, hi) = paired_ratio(times[mode], times["off"])  # time on / time off
        on = tokens / statistics.median(times[mode])
        cost = (ratio - 1) * 100
        if mode == "off2":
            verdict = f"control: within {floor:.1%}"
        elif floor <= 0.02:
            verdict = ratio_verdict((lo, hi), 1.02)
        else:
            verdict = f"unresolved: identical servers differ by up to {floor:.1%} (the control)"
        rows.append(Row(figure, f"{on:.1f} tok/s", f"{off:.1f} tok/s (plugin off)",
                        f"{1 / ratio:.3f}x tok/s ({cost:+.1f}% time, 95% CI {(lo - 1) * 100:+.1f}% "
                        f"to {(hi - 1) * 100:+.1f}%)", "<= 2% slower", verdict,
                        f"{len(times[mode])} rounds of 4 restarts, the order rotating; on "
                        f"{_spread(times[mode])}, off {_spread(times['off'])}"))
    return rows


def bench_sglang(reps: int) -> list[Row]:
    """A real SGLang 0.5.21 (.venv-sglang, the tests' CPU stand-in for sgl_kernel) serving
    SmolLM2 with STANDALONE speculation (a copy of the target, a chain of 3): under
    ``specscope wrap`` (the adapter on, its default policy) against the same server unwrapped,
    two servers side by side, the same workload sent to each in turn (8 /generate requests,
    concurrency 4, 32 tokens each with ignore_eos, temperature 0.8 and greedy in turn)."""
    import concurrent.futures
    import tempfile
    import time
    from pathlib import Path

    from specscope.engine.models import smollm2_dir
    from specscope.engine.workload import load_prompts
    from specscope.serving.sglang import generate, sglang_checkpoint, sglang_python

    from .common import paired_ratio, ratio_verdict

    figure = ("SGLang 0.5.21 (CPU) served output tok/s, SmolLM2 STANDALONE chain 3, conc 4, "
              "8 req x 32 tok, adapter on (specscope wrap, default policy) vs off")
    python = sglang_python()
    if python is None:
        return [Row(figure, "not run", "", "", "<= 2% slower", "n/a",
                    "SGLang's environment missing (make sglang-env)")]
    from tests.engines.sglang_fixtures import sglang_server  # the CPU stand-in lives there

    prompts = [f"<|im_start|>user\n{p['prompt']}<|im_end|>\n<|im_start|>assistant\n"
               for p in load_prompts()][:8]

    def workload(url: str, n: int = 32) -> None:
        def one(i: int) -> None:
            generate(url, prompts[i], {"temperature": 0.8 if i % 2 else 0.0,
                                       "max_new_tokens": n, "ignore_eos": True})
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(one, range(len(prompts))))

    times: dict[str, list[float]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as tmp:
        model = sglang_checkpoint(smollm2_dir(), Path(tmp) / "model")
        servers = {mode: sglang_server(python, model, Path(tmp) / mode, "STANDALONE",
                                       wrap=mode == "on") for mode in ("on", "off")}
        try:
            for srv in servers.values():
                srv.start()
            for srv in servers.values():  # warm-up
                workload(srv.url, 8)
            for i in range(max(4, reps)):
                for mode in (("on", "off") if i % 2 == 0 else ("off", "on")):
                    t = time.perf_counter()
                    workload(servers[mode].url)
                    times[mode].append(time.perf_counter() - t)
        finally:
            for srv in servers.values():
                srv.stop()
    tokens = len(prompts) * 32
    ratio, (lo, hi) = paired_ratio(times["on"], times["off"])  # time on / time off
    on = tokens / statistics.median(times["on"])
    off = tokens / statistics.median(times["off"])
    cost = (ratio - 1) * 100
    return [Row(figure, f"{on:.1f} tok/s", f"{off:.1f} tok/s (unwrapped)",
                f"{1 / ratio:.3f}x tok/s ({cost:+.1f}% time, 95% CI {(lo - 1) * 100:+.1f}% to "
                f"{(hi - 1) * 100:+.1f}%)", "<= 2% slower", ratio_verdict((lo, hi), 1.02),
                f"{len(times['on'])} interleaved pairs; on {_spread(times['on'])}, "
                f"off {_spread(times['off'])}")]
