"""One slot at zero on the real engines: the traffic until ``report``'s ``slot_at_zero`` anomaly
names the faulted slot or batch row, and clean traffic on which none may be named.

- llama.cpp (SmolLM2 as target and draft, two slots, k 5): the tests' patch spoils slot 1's
  every draft (``slot_zero 1``); the server's ``-lv 5`` log is read after each round of four
  requests; the clean twin is a server given the same rounds.
- vLLM's CPU build (SmolLM2, its 4-bit copy drafting, k 3, the tests' fault plugin): batch row
  1's drafts all rejected (``row_drafts_rejected``); the hooks' trace is read after each round
  of 8 greedy requests at concurrency 4; one server, a clean window before each faulted one."""

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


def _vllm_rows(reps: int) -> list[Row]:
    """Per window: the seconds of traffic until row 1 is named (faulted), whether any row was
    named (clean), on one vLLM server switched between the two."""
    from specscope import schema
    from specscope.collector.report import build_report
    from specscope.engine.models import smollm2_dir, smollm2_draft_dir
    from specscope.io.trace import read_trace
    from specscope.probe.workload import REPETITIVE
    from specscope.serving.vllm import VllmServer, drive, speculative_config, vllm_python

    if vllm_python() is None:
        return [Row("vLLM batch row at zero", "not run", "", "", "<= 60 s", "n/a",
                    "vLLM's environment missing (make vllm-env)")]

    def named(folder: Path, since: int) -> list:
        records = [r for r in read_trace(sorted(folder.glob("*.jsonl"))).records
                   if not isinstance(r, schema.VerifyStepRecord) or r.t_ns >= since]
        try:
            (section,) = build_report(records)["runs"]
        except ValueError:
            return []
        return [a["evidence"]["row"] for a in section["anomalies"] if a["kind"] == "slot_at_zero"]

    times, wrong, clean_named = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        switch = Path(tmp) / "faults"
        switch.write_text("")
        srv = VllmServer(model=smollm2_dir(), spec=speculative_config(
            "draft_model", draft=smollm2_draft_dir("int:4"), k=3), trace_dir=Path(tmp) / "trace",
            log=Path(tmp) / "vllm.log", env={"SPECSCOPE_TEST_FAULT_FILE": str(switch),
                                             "SPECSCOPE_TEST_FIX": "cpu_expand"})
        with srv:
            for _ in range(reps):
                for fault in ("", "row_drafts_rejected"):
                    switch.write_text(fault)
                    since, sent, rows = time.time_ns(), 0.0, []
                    for _ in range(3):
                        t = time.monotonic()
                        drive(srv.url, str(srv.model), list(REPETITIVE) * 2,
                              sampling=({"temperature": 0.0},), concurrency=4, max_tokens=48,
                              extra={"ignore_eos": True})
                        sent += time.monotonic() - t
                        time.sleep(1.0)  # the recorders drain every 0.25 s
                        rows = named(Path(tmp) / "trace", since)
                        if rows:
                            break
                    if fault:
                        times.append(sent if rows else None)
                        wrong += bool(rows) and rows != [1]
                    else:
                        clean_named += bool(rows)
    decided = [t for t in times if t is not None]
    return [
        Row(f"vLLM CPU 0.32 (SmolLM2, 4-bit draft, k 3), batch row 1's drafts all rejected: traffic "
            f"until report names it, the trace read after each round of 8 requests ({reps} windows "
            "on one server)", f"median {statistics.median(decided):.1f} s ("
            + ", ".join('-' if t is None else f'{t:.1f}' for t in times) + ")" if decided
            else "not named", "-", "-", "<= 60 s, row 1 only",
            "yes" if len(decided) == reps and max(decided) <= 60 and not wrong else "no",
            f"{wrong} windows named another row"),
        Row("vLLM clean windows (the same server, before each faulted one, up to 3 rounds): "
            "windows with a row named", f"{clean_named} of {reps}", "-", "-", "0",
            "yes" if clean_named == 0 else "no", "alpha 1e-9 over the rows judged"),
    ]


def bench_slots(reps: int) -> list[Row]:
    from specscope.engine.models import smollm2_gguf
    from specscope.serving.llamacpp import llama_server_binary

    try:
        binary = llama_server_binary()
    except FileNotFoundError:
        binary = None
    if binary is None:
        return [Row("llama.cpp slot at zero", "not run", "", "", "<= 60 s", "n/a",
                    "llama.cpp's environment missing (make llamacpp-env)")] + _vllm_rows(reps)
    gguf = smollm2_gguf()
    times, wrong, clean_named, clean_sent = [], 0, 0, []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as tmp:
            at, named, _ = _rounds(binary, gguf, "slot_zero 1\n", Path(tmp))
            times.append(at)
            wrong += bool(named) and named != ["1"]
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
        Row(f"llama.cpp clean twin: servers with a slot named after up to {ROUNDS} rounds of 4 requests",
            f"{clean_named} of {reps}", "-", "-", "0", "yes" if clean_named == 0 else "no",
            f"{statistics.median(clean_sent):.0f} s of traffic a server; alpha 1e-9 over the slots "
            "judged, rate under 0.1 of the others'"),
    ] + _vllm_rows(reps)
