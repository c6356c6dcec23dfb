"""Recipe sweeps on the real engines (``make test-sweeps``): one fresh server per speculation x
flags setting, started and stopped by PID, each point gated, the whole sweep one store that
``report`` reads; a server that cannot start or dies is a failed point and the sweep goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specscope import schema
from specscope.collector.report import build_report
from specscope.io.trace import read_trace
from specscope.serving.engines import EngineOptions
from specscope.serving.enginesweep import plan_engine, run_engine_sweep
from specscope.serving.sweep import format_engine_sweep
from tests.engines.sglang_fixtures import LAUNCHER, sglang_env, sglang_model  # noqa: F401

pytestmark = pytest.mark.sweeps


def by_name(results) -> dict[str, object]:
    return {r.point.name: r for r in results}


def stored_runs(out: Path) -> dict[str, dict]:
    """The store's runs as ``report`` sees them, by run id."""
    return {s["run"]["run_id"]: s for s in build_report(read_trace(str(out)).records)["runs"]
            if s.get("run")}


def test_llamacpp_sweep_of_two_depths_survives_a_server_that_cannot_start_and_resumes(
        llama_server, smollm2_gguf_file, tmp_path):
    """Two draft depths and target-only through ``--launch`` (any command line), an engine flag
    as an axis whose second value llama-server refuses: those points fail with the engine's
    words while the others finish; the probe gates the speculative points from outside; a
    resumed sweep starts no server."""
    out = tmp_path / "sweep"
    points = plan_engine("llamacpp", ["draft-simple:2", "draft-simple:4"], [0.0], [2], ["0:24"],
                         axes=["no-such-flag=off,on"])
    launch = (f"{llama_server} -m {{model}} --host 127.0.0.1 --port {{port}} --metrics -t 2 "
              "-np 2 {spec}")
    options = EngineOptions(model=smollm2_gguf_file, draft=smollm2_gguf_file, launch=launch)
    results = run_engine_sweep(points, out, options, requests=6, progress=False)
    print(format_engine_sweep(results))
    assert len(results) == 6
    ok = {n: r for n, r in by_name(results).items() if "no-such-flag=on" not in n}
    refused = [r for n, r in by_name(results).items() if "no-such-flag=on" in n]
    assert all(r.status == "failed" and "did not start" in r.error for r in refused), refused
    assert all(r.status == "ok" for r in ok.values()), [(r.point.name, r.error) for r in ok.values()]
    spec = [r for r in ok.values() if not r.point.spec.off]
    assert len(spec) == 2
    for r in spec:
        fg = r.figures
        # llama.cpp's own per-request counts (timings.draft_n), pooled
        assert fg.acceptance_rate is not None and 0 < fg.acceptance_rate <= 1
        assert fg.acceptance_length is None  # no verify steps from outside: unknown, not 0
        assert fg.probe in ("pass", "inconclusive"), fg
        assert fg.gate.verdict in ("pass", "inconclusive"), fg
        assert fg.tok_s > 0 and fg.ttft_ms_p50 > 0
    runs = stored_runs(out)
    for r in spec:  # report reads the same acceptance and gate from the store
        assert runs[r.run_id]["totals"]["acceptance_rate"] == r.figures.acceptance_rate
        assert runs[r.run_id]["run"]["labels"]["sweep_gate"] == r.figures.gate.verdict
    for r in results:  # every point, failed ones too, is a run of the store with its config
        assert r.run_id in runs, r.run_id
        assert runs[r.run_id]["run"]["config_id"] == r.point.name
    failed = runs[refused[0].run_id]["run"]["labels"]
    assert failed["status"] == "failed" and "exited with 1" in failed["error"], failed
    stored = read_trace(str(out) + f"#run={refused[0].run_id}").records
    assert any(isinstance(r, schema.AnomalyRecord) and r.kind == "sweep_point_failed"
               for r in stored)
    index = json.loads((out / "sweep.json").read_text())
    assert {e["point"] for e in index} == {p.name for p in points}
    servers = set((out / ".servers").iterdir())
    again = run_engine_sweep(points, out, options, requests=6, progress=False, resume=True)
    assert set((out / ".servers").iterdir()) == servers  # nothing started
    assert [r.status for r in again] == [r.status for r in results]


def test_vllm_sweep_of_two_settings_gates_each_point_and_records_the_top_k_crash(
        vllm_env, smollm2_checkpoints, tmp_path):
    """A draft model and prompt lookup against target-only at two concurrencies: the plugin
    inside gates every point and the greedy answers are compared with target-only's. Then a
    sweep whose speculative point sends top-k (vLLM 0.32's CPU engine dies on it under
    speculation): that point is recorded as failed with vLLM's error, its reference finishes."""
    target, draft = smollm2_checkpoints
    specs = ['{"method": "draft_model", "num_speculative_tokens": 3}',
             '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, '
             '"prompt_lookup_max": 4}']
    options = EngineOptions(model=target, draft=draft, python=vllm_env)
    out = tmp_path / "sweep"
    results = run_engine_sweep(plan_engine("vllm", specs, [0.0], [1, 2], ["0:16"]), out, options,
                               requests=4, progress=False)
    print(format_engine_sweep(results))
    assert len(results) == 6 and all(r.status == "ok" for r in results), \
        [(r.point.name, r.error) for r in results if r.status != "ok"]
    runs = stored_runs(out)
    for r in results:
        sec = runs[r.run_id]
        if r.point.spec.off:
            assert sec["totals"]["num_verify_steps"] == 0
            continue
        # the plugin's records of this point's window, and its gate
        assert sec["totals"]["num_verify_steps"] > 0
        assert r.figures.acceptance_length is not None and r.figures.acceptance_length >= 1
        assert r.figures.gate.verdict in ("pass", "inconclusive"), (r.point.name, r.figures)
        assert r.figures.probe is None  # the plugin inside decides; no probe
        assert any(c["check"].startswith("greedy exact match")
                   for c in sec["eval"]["gate"]["checks"]), sec["eval"]["gate"]
    # one server's two concurrencies are two runs, each with its own window's steps
    a, b = (by_name(results)[f"vllm-draft_model-k3-t0-c{c}-in0-out16"] for c in (1, 2))
    steps = {runs[x.run_id]["totals"]["num_verify_steps"] for x in (a, b)}
    assert 0 not in steps

    crash = run_engine_sweep(plan_engine("vllm", specs[1:], [0.8], [2], ["0:16"], top_ks=[20]),
                             tmp_path / "crash", options, requests=4, progress=False)
    print(format_engine_sweep(crash))
    ref, died = crash
    assert ref.point.spec.off and ref.status == "ok", ref.error
    assert died.status == "failed" and "HTTP 500" in died.error, died.error
    labels = stored_runs(tmp_path / "crash")[died.run_id]["run"]["labels"]
    assert labels["status"] == "failed" and "HTTP 500" in labels["error"]


def test_sglang_sweep_fails_the_temperature_points_whose_acceptance_looks_like_greedys(
        sglang_env, sglang_model, tmp_path):  # noqa: F811
    """SGLang as shipped on a CPU verifies every request by argmax: the sweep's temperature
    points fail their gate (the adapter inside sees silent greedy) while their acceptance looks
    as healthy as the greedy points'; the greedy points pass or wait for data, never fail."""
    out = tmp_path / "sweep"
    points = plan_engine("sglang", ["STANDALONE:3/1/4"], [0.0, 0.8], [2], ["0:32"])
    options = EngineOptions(model=sglang_model, python=sglang_env, launcher=LAUNCHER,
                            env={"TORCHDYNAMO_DISABLE": "1"})
    results = run_engine_sweep(points, out, options, requests=16, progress=False)
    print(format_engine_sweep(results))
    assert all(r.status == "ok" for r in results), [(r.point.name, r.error) for r in results]
    named = by_name(results)
    greedy = named["sglang-standalone-3-1-4-t0-c2-in0-out32"].figures
    hot = named["sglang-standalone-3-1-4-t0.8-c2-in0-out32"].figures
    assert hot.gate.verdict == "fail", hot
    assert "silent_greedy" in hot.gate.anomalies, hot
    assert greedy.gate.verdict in ("pass", "inconclusive"), greedy
    # its acceptance looks as healthy as greedy's: verify is greedy after a sampled first
    # token, so each answer is a greedy one from another start and the two points differ only
    # by which texts they hold (16 answers of about 11 steps each: their acceptance lengths'
    # means part by 0.3 at one standard deviation; 8 answers once read 2.13 against 2.98).
    # Within 40% of the greedy point's, over 4 standard deviations away
    assert hot.acceptance_length >= 0.6 * greedy.acceptance_length, (hot, greedy)
    section = stored_runs(out)[named["sglang-standalone-3-1-4-t0.8-c2-in0-out32"].run_id]
    assert section["run"]["engine"] == "sglang"
    assert any(isinstance(r, schema.VerifyStepRecord) for r in
               read_trace(str(out) + f"#run={section['run']['run_id']}").records)
