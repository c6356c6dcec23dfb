"""One slot at zero on the real llama.cpp server (SmolLM2 as target and draft, two slots, k 5):
the traffic until ``report``'s ``slot_at_zero`` anomaly names slot 1 when the tests' patch
spoils its every draft (``slot_zero 1``), reading the server's ``-lv 5`` log after each round of
four requests; and the same rounds on a clean server, where no slot may be named."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from .common import Row

ROUNDS = 6  #: rounds of four requests a server is given to name a slot


def _named(log: Path) -> list[str]:
    from specscope.collector.report import build_report
    from specscope.importers import import_file

    runs = build_report(import_file(log).records)["runs"]
    return [a["evidence"]["rank"] for s in runs for a in s["anomalies"] if a["kind"] == "slot_at_zero"]


def _rounds(binary, gguf, fault: str, tmp: Path) -> tuple[float | None, list[str], float]:
    """Traffic seconds until a slot is named (None if none in ``ROUNDS``), the slots named, and
    the traffic sent."""
    from specscope.engine.workload import load_prompts
    from specscope.serving.llamacpp import LlamaCppServer
    from specscope.serving.vllm import MIXED_SAMPLING, drive

    prompts = [p["prompt"] for p in load_prompts()]
    (tmp / "fault").write_text(fault)
    srv = LlamaCppServer(model=gguf, draft=gguf, k=5, binary=binary, verbosity=5, slots=2,
                         log=tmp / "server.log")
    srv.start(env={"SPECSCOPE_LLAMACPP_FAULT_FILE": str(tmp / "fault")})
    sent = 0.0
    try:
        for i in range(ROUNDS):
            t = time.monotonic()
            drive(srv.url, "smollm2", prompts[4 * i:4 * i + 4], concurrency=2, max_tokens=64,
                  sampling=MIXED_SAMPLING)
            sent += time.monotonic() - t
            named = _named(tmp / "server.log")
            if named:
                return sent, named, sent
    finally:
        srv.stop()
    return None, [], sent


def bench_slots(reps: int) -> list[Row]:
    from specscope.engine.models import smollm2_gguf
    from specscope.serving.llamacpp import llama_server_binary

    try:
        binary = llama_server_binary()
    except FileNotFoundError:
        binary = None
    if binary is None:
        return [Row("llama.cpp slot at zero", "not run", "", "", "<= 60 s", "n/a",
                    "llama.cpp's environment missing (make llamacpp-env)")]
    gguf = smollm2_gguf()
    times, wrong, clean_named, clean_sent = [], 0, 0, []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as tmp:
            at, named, _ = _rounds(binary, gguf, "slot_zero 1\n", Path(tmp))
            times.append(at)
            wrong += named != ["1"]
        with tempfile.TemporaryDirectory() as tmp:
            _, named, sent = _rounds(binary, gguf, "", Path(tmp))
            clean_named += bool(named)
            clean_sent.append(sent)
    decided = [t for t in times if t is not None]
    med = statistics.median(decided) if decided else None
    return [
        Row(f"llama.cpp build 11434 (SmolLM2, 2 slots, k 5), slot 1's drafts all spoiled: traffic "
            f"until report names it, its -lv 5 log read after each round of 4 requests ({reps} servers)",
            f"median {med:.1f} s ({', '.join('-' if t is None else f'{t:.1f}' for t in times)})"
            if med is not None else "not named", "-", "-", "<= 60 s, slot 1 only",
            "yes" if len(decided) == reps and max(decided) <= 60 and not wrong else "no",
            f"{wrong} runs named another slot"),
        Row(f"llama.cpp clean twin: servers with a slot named after up to {ROUNDS} rounds "
            f"({statistics.median(clean_sent):.0f} s of traffic each)",
            f"{clean_named} of {reps}", "-", "-", "0", "yes" if clean_named == 0 else "no",
            "alpha 1e-9 over the slots judged, rate under 0.1 of the others'"),
    ]
