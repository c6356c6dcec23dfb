"""Verify truth on real engines: time and tokens to a verdict per seeded fault, in-engine at the
plugin's defaults and by ``specscope probe``, the engine's own acceptance rate beside them; and
false alarms over repeated clean probe rounds, with what their PASSes rule out (vLLM with a
draft model and with prompt lookup, llama.cpp, SGLang with its CPU verify as shipped and
repaired)."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from pathlib import Path

from .common import Row

#: the vLLM faults (the tests' fault plugin), as in tests/engines/test_verify_truth_real.py:
#: seeded fault, repaired CPU expand kernel, in-engine class and probe check that must fail
FAULTS = {
    "silent greedy (temperature requests verified by argmax)": ("silent_greedy", True,
                                                               "speculative-sampling"),
    "top-p requests verified by argmax": ("top_p_greedy", True, "speculative-sampling+top-p"),
    "lossy verify (rejected draft token committed)": ("lossy", True, "greedy"),
    "vLLM 0.32 CPU as shipped (expand kernel, upstream #55005)": ("", False, "greedy"),
}
#: faults of other shapes (the top-1 share moves little): the whole distribution, the
#: acceptance rule and the truncation check must find them
SHAPE_FAULTS = {
    "temperature applied twice at verify (T squared)": ("temperature_twice", True,
                                                        "speculative-sampling"),
    "top-p dropped at verify": ("top_p_ignored", True, "speculative-sampling+top-p"),
}


def _plan(**kw):
    from specscope.probe import ProbePlan

    return ProbePlan(classes=("greedy", "temperature", "top-p"), requests=18, max_tokens=48,
                     concurrency=6, token_budget=18 * 48, deadline_s=120, **kw)


def _vllm(tmp: Path, name: str, fault: str, fix: bool):
    from specscope.engine.models import smollm2_dir, smollm2_draft_dir
    from specscope.serving.vllm import VllmServer, speculative_config

    env = {"SPECSCOPE_TEST_FAULT": fault} if fault else {}
    if fix:
        env["SPECSCOPE_TEST_FIX"] = "cpu_expand"
    spec = speculative_config("draft_model", draft=smollm2_draft_dir("int:4"), k=3)
    return VllmServer(model=smollm2_dir(), spec=spec, trace_dir=tmp / name, log=tmp / f"{name}.log",
                      env=env)


def _engine_states(folder: Path) -> dict[str, str]:
    from specscope.collector.report import build_report
    from specscope.io.trace import read_trace

    files = sorted(folder.glob("*.jsonl"))
    if not files:
        return {}
    try:
        (section,) = build_report(read_trace(files).records)["runs"]
    except ValueError:
        return {}
    states = {t["mode_requested"]: t["state"] for t in section["sampling_truth"]}
    # the sharpness test pooled over the sampled classes is a check of its own, only as a FAIL
    if any(a.get("evidence", {}).get("mode_requested") == "sampled" for a in section["anomalies"]):
        states["sampled"] = "fail"
    return states


def bench_probe(reps: int) -> list[Row]:
    from specscope.serving.vllm import vllm_python

    if vllm_python() is None:
        return [Row("verify faults on a real vLLM: time to a verdict", "not run", "", "", "",
                    "n/a", "vLLM's environment missing (make vllm-env)")]
    rows: list[Row] = []
    rounds = max(20, reps)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # the clean rounds first: they count verdicts, not seconds
        rows.append(_clean_rounds("vLLM CPU, SmolLM2 + 4-bit draft k 3 (repaired expand kernel)",
                                  lambda: _vllm(tmp, "clean", "", True), rounds))
        rows += _llamacpp_rounds(rounds)  # the seeded faults' rows: bench_verdicts
        rows += _prompt_lookup_rows(tmp, rounds)
    return rows


def bench_shapes(reps: int) -> list[Row]:
    """The time-to-verdict rows of the faults of other shapes (``SHAPE_FAULTS``), each on a
    server of its own, the probe asking until it knows (its default)."""
    return bench_verdicts(reps, SHAPE_FAULTS)


def bench_verdicts(reps: int, faults: dict | None = None) -> list[Row]:
    """The time-to-verdict rows alone (each seeded vLLM fault, in-engine and by probe), without
    the clean rounds: what the statistics policy's row budget must not make slower."""
    from specscope.serving.vllm import vllm_python

    if vllm_python() is None:
        return [Row("verify faults on a real vLLM: time to a verdict", "not run", "", "", "",
                    "n/a", "vLLM's environment missing (make vllm-env)")]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        return [_fault_row(f"vLLM CPU, SmolLM2 + 4-bit draft k 3, fault: {label}",
                           lambda name=fault or "shipped", fault=fault, fix=fix:
                           _vllm(tmp, name, fault, fix),
                           tmp / (fault or "shipped"), cls, _plan(),
                           "18 requests x 48 tokens, conc 6")
                for label, (fault, fix, cls) in (faults or FAULTS).items()]


def bench_sglang_probe(reps: int) -> list[Row]:
    """SGLang: time to FAIL as shipped (STANDALONE, NGRAM) in-engine and by probe, and 20
    clean rounds of the probe on its repaired verify."""
    with tempfile.TemporaryDirectory() as tmp:
        return _sglang_rows(Path(tmp), max(20, reps))


def _fault_row(label: str, make, folder: Path, cls: str, plan, sent: str,
                engine: str | None = None, srv=None) -> Row:
    """One seeded fault: the probe (fail-fast, its verdict timed) and, until the in-engine
    class FAILs or 120 s pass, more probe traffic of the same classes after it (the probe's
    FAIL ends its own sending; the in-engine time counts from the probe's first request).
    ``srv``: a running server (its fault switched on by the caller) instead of ``make()``."""
    from specscope.probe import probe

    def run(server) -> Row:
        box: dict = {}
        stop = threading.Event()
        t0 = time.monotonic()

        def traffic() -> None:
            box["r"] = probe(server.url, plan, dtype="bfloat16", engine=engine)
            more = dataclasses.replace(plan, fail_fast=False, deadline_s=10)
            i = 1
            while not stop.is_set() and time.monotonic() - t0 < 120:
                probe(server.url, dataclasses.replace(more, seed=plan.seed + 1000 * i),
                      dtype="bfloat16", engine=engine)
                i += 1

        worker = threading.Thread(target=traffic)
        worker.start()
        in_engine = None
        while in_engine is None and time.monotonic() - t0 < 120 and (
                worker.is_alive() or "r" not in box):
            states = _engine_states(folder)
            if states.get(cls) == "fail" or states.get("sampled") == "fail":
                in_engine = time.monotonic() - t0
            time.sleep(0.5)
        stop.set()
        worker.join()
        return _row(label, cls, sent, in_engine, box["r"])

    if srv is not None:
        return run(srv)
    with make() as server:
        return run(server)


def _row(label: str, cls: str, sent: str, in_engine: float | None, r) -> Row:
    fails = [c.check for c in r.checks if c.state == "fail"]
    rate = (r.acceptance or {}).get("acceptance_rate")
    return Row(
        f"{label}: time to FAIL in-engine at the plugin's defaults (class {cls}, or the "
        f"sampled classes pooled) / by probe "
        f"({sent}); the engine's own acceptance rate in the same run",
        f"in-engine {in_engine:.0f} s" if in_engine is not None else "in-engine no FAIL",
        f"probe {r.verdict.upper()} after {r.seconds:.0f} s, {r.tokens} tokens "
        f"({', '.join(fails) or 'nothing failed'})",
        f"acceptance rate {rate:.3f}" if rate is not None else "acceptance rate unknown",
        "FAIL within 60 s", "met" if in_engine is not None and in_engine <= 60 and fails
        and r.seconds <= 60 else "not met", "one run")


#: prompt lookup as issue 42 found it: k 4, n-grams of 2 to 5 tokens, the probe told so
NGRAM_K, NGRAM_MIN, NGRAM_MAX = 4, 2, 5


def _ngram_plan(seed: int = 0):
    from specscope.probe import ProbePlan
    from specscope.probe.ngram import NgramSettings

    return ProbePlan(classes=("greedy", "temperature", "top-p"), requests=30, max_tokens=64,
                     concurrency=4, token_budget=30 * 64, deadline_s=150, seed=seed,
                     ngram=NgramSettings(k=NGRAM_K, min_n=NGRAM_MIN, max_n=NGRAM_MAX))


def _prompt_lookup_rows(tmp: Path, rounds: int) -> list[Row]:
    """The first seed's fault under prompt lookup (its clean rounds: ``bench_ngram_clean``)."""
    return [_fault_row(f"{_NGRAM_LABEL}, fault: temperature requests verified by argmax (the "
                       "tokens verify produced only)",
                       lambda: _ngram_server(tmp, "ngram-fault", "silent_greedy"),
                       tmp / "ngram-fault", "speculative-sampling", _ngram_plan(),
                       "30 requests x 64 tokens, conc 4")]


#: faults of other shapes under prompt lookup, where the replay names each draft: the residual
#: and acceptance-rule checks read them as well as the whole-distribution ones
NGRAM_SHAPE_FAULTS = {
    "the residual's argmax committed at rejections (accepted and bonus tokens honest)":
        ("residual_argmax", "speculative-sampling"),
    "temperature applied twice at verify (T squared)": ("temperature_twice",
                                                        "speculative-sampling"),
}


def bench_ngram_shapes(reps: int) -> list[Row]:
    """Time to a verdict for the faults of other shapes on vLLM's prompt lookup, each on a
    server of its own, the probe told the n-gram settings and asking until it knows."""
    from specscope.serving.vllm import vllm_python

    if vllm_python() is None:
        return [Row("verify faults under prompt lookup: time to a verdict", "not run", "", "",
                    "", "n/a", "vLLM's environment missing (make vllm-env)")]
    with tempfile.TemporaryDirectory() as tmp:
        return [_fault_row(f"{_NGRAM_LABEL}, fault: {label}",
                           lambda fault=fault: _ngram_server(Path(tmp), f"ngram-{fault}", fault),
                           Path(tmp) / f"ngram-{fault}", cls, _ngram_plan(),
                           "30 requests x 64 tokens, conc 4")
                for label, (fault, cls) in NGRAM_SHAPE_FAULTS.items()]


def bench_ngram_clean(reps: int) -> list[Row]:
    """The prompt-lookup server's clean rounds alone (the acceptance-rule and residual checks
    read there, and only there, among the real engines)."""
    from specscope.serving.vllm import vllm_python

    if vllm_python() is None:
        return [Row("probe false alarms under prompt lookup", "not run", "", "", "", "n/a",
                    "vLLM's environment missing (make vllm-env)")]
    with tempfile.TemporaryDirectory() as tmp:
        return [_clean_rounds(_NGRAM_LABEL, lambda: _ngram_server(Path(tmp), "ngram-clean", ""),
                              max(20, reps), lambda i: _ngram_plan(seed=1000 * i))]


_NGRAM_LABEL = f"vLLM CPU, SmolLM2, prompt lookup {NGRAM_K}/{NGRAM_MIN}/{NGRAM_MAX} (--ngram given)"


def _ngram_server(tmp: Path, name: str, fault: str):
    from specscope.engine.models import smollm2_dir
    from specscope.serving.vllm import VllmServer, speculative_config

    env = {"SPECSCOPE_TEST_FIX": "cpu_expand", **({"SPECSCOPE_TEST_FAULT": fault} if fault else {})}
    spec = speculative_config("ngram", k=NGRAM_K, prompt_lookup_min=NGRAM_MIN,
                              prompt_lookup_max=NGRAM_MAX)
    return VllmServer(model=smollm2_dir(), spec=spec, trace_dir=tmp / name,
                      log=tmp / f"{name}.log", env=env, extra_args=["--max-logprobs", "20"])


def _sglang_rows(tmp: Path, rounds: int) -> list[Row]:
    from specscope.engine.models import smollm2_dir
    from specscope.probe import ProbePlan
    from specscope.serving.sglang import sglang_checkpoint, sglang_python

    python = sglang_python()
    if python is None:
        return [Row("verify on a real SGLang", "not run", "", "", "", "n/a",
                    "SGLang's environment missing (make sglang-env)")]
    from tests.engines.sglang_fixtures import sglang_server  # the CPU stand-in lives there

    model = sglang_checkpoint(smollm2_dir(), tmp / "sglang-model")

    def plan(seed: int = 0, classes=("greedy", "temperature", "top-p")) -> ProbePlan:
        return ProbePlan(classes=classes, requests=18, max_tokens=48, concurrency=3,
                         token_budget=18 * 48, deadline_s=150, seed=seed, endpoint="generate")

    rows = []
    for method in ("STANDALONE", "NGRAM"):
        folder = tmp / f"sglang-{method.lower()}"
        rows.append(_fault_row(
            f"SGLang 0.5.21 CPU, SmolLM2, {method} as shipped (CPU verify commits the argmax "
            "for every request)", lambda folder=folder, method=method: sglang_server(
                python, model, folder, method), folder / "traces", "target-temperature", plan(),
            "/generate, 18 requests x 48 tokens, conc 3", engine="sglang"))
    rows.append(_clean_rounds(
        "SGLang 0.5.21 CPU, SmolLM2, STANDALONE with its CPU verify repaired (greedy, "
        "temperature and top-p classes; log-probabilities read as tempered)",
        lambda: sglang_server(python, model, tmp / "sglang-repaired", "STANDALONE",
                              repaired=True), rounds, lambda i: plan(seed=1000 * i),
        engine="sglang"))
    return rows


#: SGLang's faults of other shapes (the stand-in's sampling kernel, switched at run time on one
#: repaired server), as in tests/engines/test_sglang_real.py: fault, probe class, in-engine row
SGLANG_SHAPES = {
    "probabilities squared for temperature requests (the temperature halved)":
        ("sharpened", "temperature", "target-temperature"),
    "top-p dropped at verify": ("top_p_dropped", "top-p", "target-temperature+top-p"),
}


def bench_sglang_shapes(reps: int) -> list[Row]:
    """SGLang's faults of other shapes: time to FAIL in-engine and by probe, one repaired
    STANDALONE server, each fault switched on in turn with the probe sending its class."""
    from specscope.engine.models import smollm2_dir
    from specscope.probe import ProbePlan
    from specscope.serving.sglang import sglang_checkpoint, sglang_python

    python = sglang_python()
    if python is None:
        return [Row("faults of other shapes on a real SGLang", "not run", "", "", "", "n/a",
                    "SGLang's environment missing (make sglang-env)")]
    from tests.engines.sglang_fixtures import sglang_server

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = sglang_checkpoint(smollm2_dir(), tmp / "sglang-model")
        switch = tmp / "fault"
        switch.write_text("")
        srv = sglang_server(python, model, tmp / "shapes", "STANDALONE", repaired=True)
        srv.env["SGLANG_STANDIN_FAULT"] = str(switch)
        with srv:
            for label, (fault, cls, row) in SGLANG_SHAPES.items():
                switch.write_text(fault)
                plan = ProbePlan(classes=(cls,), requests=12, max_tokens=48, concurrency=3,
                                 token_budget=12 * 48, deadline_s=120, endpoint="generate")
                rows.append(_fault_row(
                    f"SGLang 0.5.21 CPU, SmolLM2, STANDALONE repaired, fault: {label}", None,
                    srv.trace_dir, row, plan, f"/generate, {cls} class, 12 requests x 48 "
                    "tokens a round, conc 3", engine="sglang", srv=srv))
    return rows


def _clean_rounds(label: str, make, rounds: int, plan=lambda i: _plan(seed=1000 * i),
                  engine: str | None = None) -> Row:
    from specscope.probe import probe

    verdicts, seconds, ruled_out = [], [], {}
    with make() as srv:
        for i in range(rounds):
            r = probe(srv.url, plan(i), dtype="bfloat16", engine=engine)
            verdicts.append(r.verdict)
            seconds.append(r.seconds)
            for c in r.checks:  # what each check's PASSes rule out, and how often it passed
                if c.state == "pass" and c.evidence.get("rules_out"):
                    ruled_out.setdefault(c.check, [0, c.evidence["rules_out"]])[0] += 1
    fails = verdicts.count("fail")
    passes = "; ".join(f"{check} PASS in {n}/{rounds}: {text}"
                       for check, (n, text) in sorted(ruled_out.items()))
    return Row(f"probe false alarms, {label}: clean rounds, a new seed each",
               f"{fails} FAIL in {rounds} rounds", f"{verdicts.count('pass')} PASS, "
               f"{verdicts.count('inconclusive')} INCONCLUSIVE, {verdicts.count('error')} ERROR",
               passes or "no check passed", "0 false alarms",
               "met" if not fails else "not met",
               f"{min(seconds):.0f}-{max(seconds):.0f} s a round")


def _llamacpp_rounds(rounds: int) -> list[Row]:
    from specscope.engine.models import smollm2_gguf
    from specscope.probe import ProbePlan
    from specscope.serving.llamacpp import LlamaCppServer, llama_server_binary

    try:
        binary = llama_server_binary()
    except FileNotFoundError:
        binary = None
    if binary is None:
        return [Row("probe false alarms, llama.cpp", "not run", "", "", "0 false alarms", "n/a",
                    "llama.cpp's environment missing (make llamacpp-env)")]
    gguf = smollm2_gguf()
    out = []
    for spec in ("draft-simple", "none"):
        n = 48 if spec == "none" else 16  # under speculation its log-probabilities are missing

        def plan(i: int, n: int = n) -> ProbePlan:
            return ProbePlan(requests=n, max_tokens=64, concurrency=2, token_budget=n * 64,
                             deadline_s=300, seed=1000 * i)
        out.append(_clean_rounds(
            f"llama.cpp build 11434, SmolLM2, speculation {spec}, all four classes",
            lambda spec=spec: LlamaCppServer(model=gguf, draft=gguf if spec != "none" else None,
                                             k=3, binary=binary, spec_type=spec), rounds, plan))
    return out
