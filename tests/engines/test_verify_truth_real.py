"""Verify truth at the defaults on a real vLLM (CPU build, SmolLM2 with its 4-bit copy as the
draft, k = 3): the plugin at its default statistics policy and ``specscope probe`` against the
same server, which serves the probe's workload (18 requests of 64 tokens: greedy, temperature
0.8, temperature 0.8 with top-p 0.9; vLLM 0.32 CPU crashes on top-k under speculation). A draft
model drafts at every step, so vLLM's per-step detail places every token and the probe tests
the tokens verify committed; under n-gram most tokens come from steps without a draft. Each verify fault is seeded from
the server's start; each must FAIL in-engine and by probe within 60 s of serving, and the
clean server must not. vLLM as shipped (its CPU expand kernel, upstream #55005) fails too.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from specscope.probe import ProbePlan, format_probe, probe
from specscope.serving.vllm import VllmServer, speculative_config
from tests.engines.test_vllm_real import run_section, trace_records

pytestmark = pytest.mark.slow

PLAN = ProbePlan(classes=("greedy", "temperature", "top-p"), requests=18, max_tokens=64,
                 concurrency=6, token_budget=18 * 64, deadline_s=120)
#: per case: seeded fault, whether vLLM's CPU defect is repaired, and the checks that must fail
#: in-engine (sampling-truth class) and by probe
CASES = {
    "clean": ("", True, set(), set()),
    "silent_greedy": ("silent_greedy", True, {"speculative-sampling"},
                      {"temperature honoured (temperature)"}),
    "top_p_greedy": ("top_p_greedy", True, {"speculative-sampling+top-p"},
                     {"temperature honoured (top-p)"}),
    "lossy": ("lossy", True, {"greedy"}, {"greedy losslessness"}),
    "shipped": ("", False, {"greedy"}, {"greedy losslessness"}),
}


def _in_engine(folder: Path) -> dict[str, str]:
    try:
        section = run_section(trace_records(folder))
    except (ValueError, FileNotFoundError):
        return {}
    return {t["mode_requested"]: t["state"] for t in section["sampling_truth"]}


@pytest.mark.parametrize("case", list(CASES))
def test_verify_faults_fail_at_the_defaults_in_engine_and_by_probe(case, vllm_env, smollm2_checkpoints,
                                                                   tmp_path):
    fault, fix, engine_fails, probe_fails = CASES[case]
    target, draft = smollm2_checkpoints
    env = {"SPECSCOPE_TEST_FAULT": fault} if fault else {}
    if fix:
        env["SPECSCOPE_TEST_FIX"] = "cpu_expand"
    folder = tmp_path / "trace"
    srv = VllmServer(model=target, spec=speculative_config("draft_model", draft=draft, k=3), python=vllm_env,
                     trace_dir=folder, log=tmp_path / "vllm.log", env=env)  # statistics: default
    with srv:
        box: dict = {}
        t0 = time.monotonic()
        worker = threading.Thread(target=lambda: box.update(r=probe(srv.url, PLAN, dtype="bfloat16")))
        worker.start()
        failed_at: dict[str, float] = {}
        while worker.is_alive() or not failed_at.keys() >= engine_fails:
            states = _in_engine(folder)
            for mode, state in states.items():
                if state == "fail":
                    failed_at.setdefault(mode, time.monotonic() - t0)
            if not worker.is_alive() and time.monotonic() - t0 > 90:
                break
            time.sleep(1.0)
        worker.join()
        time.sleep(1.0)
        states = _in_engine(folder)
    result = box["r"]
    print(format_probe(result))
    print(f"{case}: in-engine {states}, failed at {failed_at}; probe {result.seconds:.0f} s, "
          f"{result.tokens} tokens")
    probe_states = {c.check: c.state for c in result.checks}
    assert {m for m, s in states.items() if s == "fail"} >= engine_fails, states
    assert {c for c, s in probe_states.items() if s == "fail"} >= probe_fails, probe_states
    if not engine_fails:
        assert "fail" not in states.values(), states
        assert "fail" not in probe_states.values(), format_probe(result)
    for mode in engine_fails:
        assert failed_at[mode] <= 60, failed_at
    assert result.seconds <= 60 or not probe_fails, result.seconds
