"""Verify faults at the defaults on a real vLLM (CPU build, SmolLM2 with its 4-bit copy as the
draft, k = 3): the plugin at its default statistics policy and ``specscope probe`` against the
same server, which serves the probe's workload (18 requests of 48 tokens: greedy, temperature
0.8, temperature 0.8 with top-p 0.9; vLLM 0.32 CPU crashes on top-k under prompt lookup,
where a step's batch can draft nothing: ``test_vllm_real`` holds the probe's ERROR). Each
fault is seeded from the server's start (the three servers start together, then serve in
turn); each must FAIL in-engine and by probe within 60 s of serving. A draft model drafts at
every step, so vLLM's per-step detail places every token and the probe tests the tokens verify
committed; under n-gram most tokens come from steps without a draft, and the probe replays the
proposer to find them (``test_vllm_real``'s n-gram test, a fault confined to verified tokens).

The clean server at the defaults is ``test_vllm_real``'s diverge test (in-engine and probe,
against a target-only endpoint); vLLM as shipped is its five-views test (probe FAIL).
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

PLAN = ProbePlan(classes=("greedy", "temperature", "top-p"), requests=18, max_tokens=48,
                 concurrency=6, token_budget=18 * 48, deadline_s=120)
#: per case: seeded faults, the in-engine checks that must fail (sampling-truth class, or
#: "draft health") and the probe checks that must fail
CASES = {
    "silent_greedy": ("silent_greedy", {"speculative-sampling"}, {"temperature honoured (temperature)"}),
    "top_p_greedy": ("top_p_greedy", {"speculative-sampling+top-p"}, {"temperature honoured (top-p)"}),
    # the lossy verify, and the draft's probabilities one-hot at its token (top-1 = 1.0)
    "lossy": ("lossy,draft_prob_one", {"greedy", "draft health"}, {"greedy losslessness"}),
}


def in_engine(folder: Path) -> dict[str, str]:
    """Each sampling-truth class's state and draft health's, from the server's trace so far."""
    try:
        section = run_section(trace_records(folder))
    except (ValueError, FileNotFoundError):
        return {}
    states = {t["mode_requested"]: t["state"] for t in section["sampling_truth"]}
    if section["draft_health"].get("state"):
        states["draft health"] = section["draft_health"]["state"]
    return states


def serve_and_probe(srv, folder: Path, must_fail: set[str], plan: ProbePlan = PLAN, **kw):
    """The probe's workload against ``srv`` while polling its in-engine verdicts: (probe result,
    in-engine states at the end, seconds until each in-engine check failed)."""
    box: dict = {}
    t0 = time.monotonic()
    worker = threading.Thread(target=lambda: box.update(r=probe(srv.url, plan, dtype="bfloat16", **kw)))
    worker.start()
    failed_at: dict[str, float] = {}
    while worker.is_alive() or not failed_at.keys() >= must_fail:
        for check, state in in_engine(folder).items():
            if state == "fail":
                failed_at.setdefault(check, time.monotonic() - t0)
        if not worker.is_alive() and time.monotonic() - t0 > 90:
            break
        time.sleep(1.0)
    worker.join()
    time.sleep(1.0)
    return box["r"], in_engine(folder), failed_at


@pytest.fixture(scope="module")
def fault_servers(vllm_env, smollm2_checkpoints, tmp_path_factory):
    """One server per case, each with its fault from the start and vLLM's CPU expand kernel
    repaired, started together (start-up is mostly single-threaded imports)."""
    target, draft = smollm2_checkpoints
    tmp = tmp_path_factory.mktemp("faults")
    servers = {}
    for case, (fault, _, _) in CASES.items():
        spec = speculative_config("draft_model", draft=draft, k=3,
                                  **({"draft_sample_method": "probabilistic"}
                                     if "draft_prob_one" in fault else {}))
        servers[case] = VllmServer(model=target, spec=spec, python=vllm_env, trace_dir=tmp / case,
                                   log=tmp / f"{case}.log",
                                   env={"SPECSCOPE_TEST_FAULT": fault,
                                        "SPECSCOPE_TEST_FIX": "cpu_expand"})
    errors: list[BaseException] = []

    def start(srv):
        try:
            srv.start()
        except BaseException as exc:  # noqa: BLE001 - reported below, every server stopped
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        if errors:
            raise errors[0]
        yield servers
    finally:
        for srv in servers.values():
            srv.stop()


@pytest.mark.parametrize("case", list(CASES))
def test_verify_faults_fail_at_the_defaults_in_engine_and_by_probe(case, fault_servers):
    _, engine_fails, probe_fails = CASES[case]
    srv = fault_servers[case]
    result, states, failed_at = serve_and_probe(srv, Path(srv.trace_dir), engine_fails)
    print(format_probe(result))
    print(f"{case}: in-engine {states}, failed at {failed_at}; probe {result.seconds:.0f} s, "
          f"{result.tokens} tokens; vLLM's acceptance rate {result.acceptance['acceptance_rate']}")
    probe_states = {c.check: c.state for c in result.checks}
    assert {m for m, s in states.items() if s == "fail"} >= engine_fails, states
    assert {c for c, s in probe_states.items() if s == "fail"} >= probe_fails, probe_states
    for check in engine_fails:
        assert failed_at[check] <= 60, failed_at
    assert result.seconds <= 60, result.seconds
