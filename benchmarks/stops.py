"""Immediate stops of real engines: each server serves a short mixed workload and is stopped
by its PID at once after its last response (vLLM: SIGINT to the API server, which SIGTERMs and
then at once SIGKILLs its engine core at ``--shutdown-timeout 0``; SGLang: its launcher SIGKILLs
the scheduler), half of them while two busy processes load both cores. Each trace is held to the
engine's own counts read just before the stop, and each recording process's last health record
to its last verify step."""

from __future__ import annotations

import concurrent.futures
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from specscope import schema
from specscope.io.trace import read_trace

from .common import Row

BUSY = "while True: pass"


def held(folder: Path, rids: set[str] | None = None) -> tuple[int, bool]:
    """(the trace's request-steps: those that drafted, or with ``rids`` those of these
    requests; whether every process's latest health record counts its verify steps and came
    after the last of them, and, for vLLM, the report says no NOT SEEN)."""
    counted = 0
    ok = True
    for f in sorted(folder.glob("*.jsonl")):
        got = read_trace(f).records
        steps = [r for r in got if isinstance(r, schema.VerifyStepRecord)]
        counted += sum(1 for s in steps for e in s.entries
                       if (e.request_id in rids if rids is not None else e.num_drafted > 0))
        if steps:
            health = schema.latest_health(got)
            ok = ok and len(health) == 1 and health[0].num_recorded == len(steps) and (
                health[0].final or health[0].t_ns >= max(s.t_ns for s in steps))
    if rids is None:  # vLLM's own counts ride in the trace: the report names what no hook saw
        from specscope.collector.report import build_report

        (section,) = build_report(read_trace(sorted(folder.glob("*.jsonl"))).records)["runs"]
        seen = section.get("engine_counts") or {}
        ok = ok and bool(seen) and seen.get("not_seen") is None
    return counted, ok


def vllm_drafts(url: str) -> int:
    page = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    return int(sum(float(v) for v in re.findall(
        r"^vllm:spec_decode_num_drafts_total(?:{[^}]*})? (\S+)$", page, re.M)))


def stop_once(engine: str, i: int, loaded: bool, tmp: Path, ctx: dict[str, Any]) -> dict:
    """One server: start, serve, read the engine's counts, stop at once; what the trace kept."""
    load = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)] if loaded else []
    try:
        if engine == "vllm":
            from specscope.serving.vllm import VllmServer, drive, speculative_config

            srv = VllmServer(model=ctx["target"], spec=speculative_config("ngram", k=4),
                             trace_dir=tmp / f"vllm{i}", log=tmp / f"vllm{i}.log")
            with srv:
                drive(srv.url, str(ctx["target"]), ctx["prompts"][:6], concurrency=3,
                      max_tokens=24, seed=10 * i)
                theirs = vllm_drafts(srv.url)
            rids = None
        else:
            from specscope.serving.sglang import generate

            from tests.engines.sglang_fixtures import sglang_server

            srv = sglang_server(ctx["python"], ctx["model"], tmp / f"sglang{i}", "STANDALONE")
            with srv:
                with concurrent.futures.ThreadPoolExecutor(3) as pool:
                    out = list(pool.map(lambda k: generate(srv.url, ctx["chat"][(i + k) % 8], {
                        "temperature": 0.8 if k % 2 else 0.0, "max_new_tokens": 24}), range(6)))
                theirs = sum(int(r["meta_info"].get("spec_verify_ct", 0)) for r in out)
            rids = {r["meta_info"]["id"] for r in out}
    finally:
        for p in load:
            p.kill()
            p.wait()
    mine, ok = held(Path(srv.trace_dir), rids)
    return {"theirs": theirs, "mine": mine, "health_ok": ok, "loaded": loaded}


def bench_stops(reps: int) -> list[Row]:
    """``reps`` immediate stops per engine (at least 10), every other one loaded."""
    from specscope.engine.models import smollm2_dir
    from specscope.engine.workload import load_prompts
    from specscope.serving.sglang import sglang_checkpoint, sglang_python
    from specscope.serving.vllm import vllm_python

    n = max(10, reps)
    prompts = [p["prompt"] for p in load_prompts()][:16]
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for engine in ("vllm", "sglang"):
            python = vllm_python() if engine == "vllm" else sglang_python()
            figure = (f"{engine}: immediate stops (0 s after the last response; every other one "
                      "with both cores loaded) that lose nothing: the trace equals the engine's "
                      "counts and each process's last health record follows its last step")
            if python is None:
                rows.append(Row(figure, "not run", "", "", "10 of 10", "n/a",
                                f"{engine}'s environment missing"))
                continue
            ctx: dict[str, Any] = {"target": smollm2_dir(), "prompts": prompts,
                                   "python": python}
            if engine == "sglang":
                ctx["model"] = sglang_checkpoint(smollm2_dir(), tmp / "model")
                ctx["chat"] = [f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n"
                               for p in prompts]
            runs = [stop_once(engine, i, i % 2 == 1, tmp, ctx) for i in range(n)]
            good = [r for r in runs if r["health_ok"] and r["mine"] == r["theirs"]]
            lost = sum(r["theirs"] - r["mine"] for r in runs)
            rows.append(Row(figure, f"{len(good)} of {n}",
                            f"request-steps lost in all: {lost}; health after the last step "
                            f"{sum(r['health_ok'] for r in runs)} of {n}",
                            "", f"{n} of {n}", "met" if len(good) == n else "not met",
                            f"loaded {sum(r['loaded'] for r in good)} of "
                            f"{sum(r['loaded'] for r in runs)} kept all"))
    return rows
