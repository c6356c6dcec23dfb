"""The probe's penalties and min-p classes. Penalties: time to FAIL for penalties skipped on
drafted positions (the reference engine's seeded fault; two faults seeded in the real vLLM by
the test plugin, switched on one server), clean rounds on the reference engine, vLLM, SGLang and
llama.cpp, and SGLang's own per-step penalties against the same model served without
speculation. Min-p: SGLang with speculation and without, llama.cpp, and vLLM's refusal."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .common import Row
from .probe_classes import _probe_reference, llamacpp_server, sglang_server

CHECK = "penalties honoured"
#: faults seeded by the vLLM test plugin (tests/engines/vllm_faults), switched through its file
VLLM_FAULTS = ("penalties_ignored", "penalty_drafts_uncounted")


def _plan(seed: int, **kw: Any):
    from specscope.probe import ProbePlan

    return ProbePlan(classes=("penalties",), seed=seed, requests=12, max_tokens=48,
                     concurrency=4, deadline_s=60, **kw)


def _state(r: Any, check: str = CHECK) -> tuple[str, dict]:
    c = next((c for c in r.checks if c.check == check), None)
    return (c.state, c.evidence) if c is not None else ("absent", {})


def _fault_row(label: str, results: list[Any]) -> Row:
    """Time to FAIL over rounds, and the positions each FAIL rests on."""
    failed = [r for r in results if _state(r)[0] == "fail"]
    seconds = [r.seconds for r in results]
    faults = sorted(_state(r)[1].get("faults", 0) for r in failed)
    n = len(results)
    return Row(f"probe class penalties, {label}: time to FAIL ({CHECK}), {n} rounds",
               f"FAIL in {len(failed)}/{n}", f"{min(seconds):.1f}-{max(seconds):.1f} s a round",
               f"positions against the penalties per FAIL: {faults[0]}-{faults[-1]}"
               if faults else "", "FAIL within 60 s, on more than one position",
               "met" if len(failed) == n and max(seconds) < 60 and faults[0] > 1 else "not met",
               "single runs")


def _clean_row(label: str, results: list[Any]) -> Row:
    states = [_state(r) for r in results]
    n = len(results)
    fails = sum(s == "fail" for s, _ in states)
    decisive = sorted(ev.get("decisive", 0) for _, ev in states)
    seconds = [r.seconds for r in results]
    verdicts = [s for s, _ in states]
    return Row(f"probe false alarms, penalties class, {label}: clean rounds, a new seed each",
               f"{fails} FAIL in {n} rounds",
               f"{verdicts.count('pass')} PASS, {verdicts.count('inconclusive')} INCONCLUSIVE",
               f"positions where the penalties decided: {decisive[0]}-{decisive[-1]}",
               "0 false alarms", "met" if not fails else "not met",
               f"{min(seconds):.0f}-{max(seconds):.0f} s a round")


def _vllm_rows(tmp: Path, rounds: int) -> list[Row]:
    from specscope.probe import probe
    from specscope.engine.models import smollm2_dir, smollm2_draft_dir
    from specscope.serving.vllm import VllmServer, speculative_config, vllm_python

    if vllm_python() is None:
        return []
    switch = tmp / "faults"
    switch.write_text("")
    spec = speculative_config("draft_model", draft=smollm2_draft_dir("int:4"), k=3)
    rows = []
    with VllmServer(model=smollm2_dir(), spec=spec, trace_dir=tmp / "vllm", log=tmp / "vllm.log",
                    env={"SPECSCOPE_TEST_FIX": "cpu_expand",
                         "SPECSCOPE_TEST_FAULT_FILE": str(switch)}) as srv:
        clean = [probe(srv.url, _plan(1000 + 100 * i)) for i in range(rounds)]
        rows.append(_clean_row("vLLM CPU, SmolLM2 + 4-bit draft k 3", clean))
        for fault in VLLM_FAULTS:
            switch.write_text(fault)
            got = [probe(srv.url, _plan(2000 + 100 * i)) for i in range(rounds)]
            rows.append(_fault_row(f"vLLM CPU draft model k 3, test plugin's {fault}", got))
        switch.write_text("")
    return rows


def _sglang_rows(tmp: Path, rounds: int) -> list[Row]:
    from specscope.probe import ProbePlan, probe

    spec, target = sglang_server(tmp, "STANDALONE", "spec"), sglang_server(tmp, None, "target")
    if spec is None or target is None:
        return []
    rows = []
    with spec() as srv, target() as ref:
        clean = [probe(srv.url, _plan(1000 + 100 * i)) for i in range(rounds)]
        rows.append(_clean_row("SGLang 0.5.21 CPU, STANDALONE (log-probabilities penalised "
                               "already: never scored)", clean))
        said = {}
        for cls in ("greedy", "penalties"):
            r = probe(srv.url, ProbePlan(classes=(cls,), requests=12, max_tokens=48,
                                         until_decided=False, fail_fast=False),
                      reference=ref.url, dtype="bfloat16")
            said[cls] = _state(r, "greedy against target-only")[1]
        g, p = said["greedy"], said["penalties"]
        rows.append(Row(
            "SGLang 0.5.21 CPU STANDALONE against itself without speculation (--reference), 12 "
            "pairs each: penalised greedy answers (per-step penalties) vs plain greedy ones",
            f"penalties: {p.get('structural')} of {p.get('pairs')} pairs part structurally, "
            f"{p.get('identical')} identical",
            f"greedy: {g.get('structural')} of {g.get('pairs')} structural, "
            f"{g.get('identical')} identical", "", "the defect shown (SGLang #33643's shape)",
            "met" if (p.get("structural") or 0) > (g.get("structural") or 0) else "not met",
            "one run; bf16 ties flip"))
    return rows


def _llamacpp_rows(rounds: int) -> list[Row]:
    from specscope.probe import probe

    server = llamacpp_server()
    if server is None:
        return []
    with server() as srv:
        clean = [probe(srv.url, _plan(1000 + 100 * i)) for i in range(rounds)]
    return [_clean_row("llama.cpp build 11434, draft-simple k 3 (counts the prompt: not "
                       "scored)", clean)]


def bench_probe_penalties(reps: int) -> list[Row]:
    rounds = max(4, reps)
    rows = [_fault_row("reference engine (tiny model, chain of 3, in process), fault "
                       "penalty_first_only",
                       [_probe_reference("penalty_first_only", ("penalties",), seed=100 * i)
                        for i in range(rounds)]),
            _clean_row("the reference engine (tiny model, chain of 3, in process)",
                       [_probe_reference("", ("penalties",), seed=100 * i, fail_fast=False)
                        for i in range(rounds)])]
    with tempfile.TemporaryDirectory() as tmp:
        rows += _vllm_rows(Path(tmp), rounds)
        rows += _sglang_rows(Path(tmp), rounds)
    rows += _llamacpp_rows(rounds)
    return rows


def _min_p_plan(seed: int):
    from specscope.probe import ProbePlan

    return ProbePlan(classes=("min-p",), seed=seed, requests=12, max_tokens=48, concurrency=4,
                     deadline_s=60)


def _floor_row(label: str, results: list[Any], target: str) -> Row:
    """Per round: the min-p floor's verdict and how many committed tokens lay under it."""
    check = "truncation honoured (min-p)"
    states = [_state(r, check) for r in results]
    under = sorted(ev.get("num_outside", 0) for _, ev in states)
    verdicts = [s for s, _ in states]
    seconds = [r.seconds for r in results]
    n = len(results)
    return Row(f"probe class min-p (temperature 0.8, min_p 0.1), {label}, {n} rounds",
               f"FAIL in {verdicts.count('fail')}/{n}, PASS in {verdicts.count('pass')}/{n}",
               f"tokens under the floor per round: {under[0]}-{under[-1]}",
               f"{min(seconds):.1f}-{max(seconds):.1f} s a round", target,
               "met" if (verdicts.count("fail") == n) == (target.startswith("FAIL")) and
               (target.startswith("FAIL") or "fail" not in verdicts) else "not met",
               "single runs")


def bench_probe_min_p(reps: int) -> list[Row]:
    """The min-p class on the real engines: SGLang under speculation (its verify drops min-p)
    and without (the control), llama.cpp, and vLLM, which refuses min-p under speculation."""
    from specscope.probe import probe
    from specscope.engine.models import smollm2_dir

    rounds = max(4, reps)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        from specscope.serving.vllm import VllmServer, speculative_config, vllm_python

        if vllm_python() is not None:
            from specscope.engine.models import smollm2_draft_dir

            spec = speculative_config("draft_model", draft=smollm2_draft_dir("int:4"), k=3)
            with VllmServer(model=smollm2_dir(), spec=spec, trace_dir=tmp / "vllm",
                            log=tmp / "vllm.log", env={"SPECSCOPE_TEST_FIX": "cpu_expand"}) as srv:
                r = probe(srv.url, _min_p_plan(1000))
            said = r.classes.get("min-p", {})
            rows.append(Row("probe class min-p, vLLM CPU draft model k 3: what the server takes",
                            said.get("state", "absent"), said.get("server_said", ""), "",
                            "reported as not supported, never FAIL or ERROR",
                            "met" if said.get("state") == "not supported" and
                            r.verdict == "inconclusive" else "not met", "one run"))
        for method, label, target in (
                ("STANDALONE", "SGLang 0.5.21 CPU STANDALONE (repaired verify: temperature, "
                 "top-k, top-p, no min-p)", "FAIL every round (the engine's defect)"),
                (None, "SGLang 0.5.21 CPU without speculation (the control)",
                 "0 false alarms")):
            server = sglang_server(tmp, method, method or "target")
            if server is None:
                break
            with server() as srv:
                got = [probe(srv.url, _min_p_plan(1000 + 100 * i)) for i in range(rounds)]
            rows.append(_floor_row(label, got, target))
        server = llamacpp_server()
        if server is not None:
            # (its rounds take a minute or more each: it answers few positions, so the probe
            # keeps asking until its deadline)
            with server() as srv:
                got = [probe(srv.url, _min_p_plan(1000 + 100 * i)) for i in range(min(rounds, 4))]
            rows.append(_floor_row("llama.cpp build 11434 draft-simple k 3 (first tokens only: "
                                   "none returned after them under speculation)", got,
                                   "0 false alarms"))
    return rows
