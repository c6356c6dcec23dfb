"""``specscope explain``: the speedup from separately measured factors, with a verdict."""

from __future__ import annotations

import json

import pytest

from specscope import schema
from specscope.collector.explain import explain_pair, per_k, run_factors
from specscope.engine.decoder import SpecConfig
from specscope.engine.workload import WorkloadSpec, run_workload
from specscope.importers import import_file
from tests.conftest import run_cli

MS = 1_000_000


def _run(spec_ms: dict[str, float] | None, steps: int, accepted: int, k: int = 3,
         target_ms: float = 10.0) -> list:
    """One request decoded in ``steps`` steps: speculative (phases ``spec_ms``, ``accepted``
    drafts per step) or target-only (one ``decode`` phase of ``target_ms``)."""
    out, t = [], 1_000 * MS
    out.append(schema.PhaseRecord(run_id="r", rank=0, step=0, phase="prefill", device="cpu",
                                  t_start_ns=t, duration_ns=5 * MS))
    t += 5 * MS
    tokens = 1
    for i in range(steps):
        for name, ms in (spec_ms or {"decode": target_ms}).items():
            out.append(schema.PhaseRecord(run_id="r", rank=0, step=i, phase=name, device="cpu",
                                          t_start_ns=t, duration_ns=int(ms * MS)))
            t += int(ms * MS)
        if spec_ms:
            out.append(schema.VerifyStepRecord(
                run_id="r", config_id="c", rank=0, step=i, t_ns=t, batch_size=1,
                entries=(schema.VerifyEntry(request_id="q", num_drafted=k, num_draft_tokens=k,
                                            num_accepted=accepted, accepted_per_pos=(1,) * accepted,
                                            temperature=0.0),)))
        tokens += accepted + 1 if spec_ms else 1
    out.append(schema.RequestRecord(run_id="r", rank=0, request_id="q", t_arrival_ns=1_000 * MS,
                                    t_first_token_ns=1_005 * MS, t_finish_ns=t,
                                    num_prompt_tokens=4, num_output_tokens=tokens))
    return out


def test_factors_and_verdict_on_a_constructed_pair():
    """AL 3 (2 of 3 drafts accepted every step) at a 40 ms step against 10 ms target-only
    steps: 3 x 10 / 40 = 0.75x, so don't speculate; at a 20 ms step it is 1.5x."""
    base = _run(None, 60, 0)
    slow = _run({"draft_extend": 5, "draft": 15, "verify_forward": 18, "verify_sample": 2}, 20, 2)
    e = explain_pair(slow, base)
    assert e["spec"]["acceptance_length"] == pytest.approx(3.0)
    assert e["steady_state_speedup"] == pytest.approx(0.75, rel=0.01)
    assert e["predicted_speedup"] == pytest.approx(e["measured_speedup"], rel=0.02)
    assert e["verdict"]["best_k"] == 0 and e["verdict"]["throughput"].startswith("don't speculate")
    assert e["verify_vs_target_step"] == pytest.approx(1.8)
    fast = _run({"draft_extend": 2, "draft": 6, "verify_forward": 11, "verify_sample": 1}, 20, 2)
    e = explain_pair(fast, base, tpot_ms=8)
    assert e["steady_state_speedup"] == pytest.approx(1.5, rel=0.01)
    assert e["verdict"]["best_k"] >= 1 and "speculate with k" in e["verdict"]["throughput"]
    assert e["verdict"]["latency"].startswith("speculate with k")
    rows = per_k(run_factors(fast), run_factors(base), 3)
    assert [r["k"] for r in rows] == [1, 2, 3] and rows[-1]["measured"]
    assert rows[-1]["step_ms"] == pytest.approx(20.0, rel=0.01)  # the measured k is not modelled
    assert rows[-1]["break_even_acceptance_length"] == pytest.approx(2.0, rel=0.01)


def test_engine_data_without_draft_timings_says_what_it_could_not_measure(samples):
    spec = import_file(samples / "vllm_server_specdecode_log_1.txt").records
    e = explain_pair(spec, [])
    assert any("target-only step" in m for m in e["not_measured"])
    assert any("draft time" in m for m in e["not_measured"])
    assert "predicted_speedup" not in e and "verdict" not in e


def test_a_recorded_run_explains_itself(tiny, tmp_path):
    path = run_workload(tiny, SpecConfig(num_steps=3), WorkloadSpec(requests=8, concurrency=2,
                        max_new_tokens=24), tmp_path / "t.jsonl", progress=False)
    out = run_cli("explain", str(path), "--json", "--tpot-ms", "50")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    (e,) = data["runs"].values()
    assert abs(e["prediction_error"]) < 0.10  # the phases account for the run's wall clock
    assert {"throughput", "latency"} <= set(e["verdict"]) and data["engine_configs"]["k_by_batch_size"]
    text = run_cli("explain", str(path)).stdout
    assert "verify_forward" in text and "break-even AL" in text


def test_a_run_at_several_batch_sizes_is_explained_per_batch_size(tiny, tmp_path):
    """One run whose running batch moves (16 requests in batches of 6, 6 and 4): each
    batch-size class with enough steps gets its own factors — its steps' phases and counts, the
    baseline's decode steps of the same class — and its own verdict, which become the engines'
    per-batch-size settings."""
    from specscope.collector.explain import batch_class, by_batch, explain_all, pairs
    from specscope.io.trace import read_trace

    path = run_workload(tiny, SpecConfig(num_steps=3), WorkloadSpec(requests=16, concurrency=6,
                        max_new_tokens=40), tmp_path / "b.jsonl", progress=False)
    records = read_trace(path).records
    ((rid, spec, base),) = pairs(records)
    classes = by_batch(spec, base)
    assert len(classes) >= 2, classes
    verify = [v for v in spec if isinstance(v, schema.VerifyStepRecord)]
    for c, x in classes.items():
        mine = [v for v in verify if batch_class(v.batch_size) == c]
        assert x["steps"] == len(mine) and c / 2 < x["batch"] <= c
        drafts = sum(len(v.entries) for v in mine)
        accepted = sum(e.num_accepted for v in mine for e in v.entries)
        assert x["acceptance_length"] == pytest.approx(1 + accepted / drafts)
        assert x["baseline_steps"] >= 5 and x["verdict"]["throughput"]
    data = explain_all(records)
    assert data["runs"][rid]["by_batch"].keys() == classes.keys()
    assert set(data["engine_configs"]["k_by_batch_size"]) == {round(x["batch"]) for x in classes.values()}


def test_explain_per_category_from_tokens_per_step_and_the_steps_each_request_saw():
    """Two requests in one batch: a copy request that commits 4 tokens a step and a math one
    that commits 1. Speculative steps cost 200 ms, target-only ones 100 ms: the copy request
    gains, the math request pays for the batch's longer steps."""
    from specscope import schema as s
    from specscope.collector.explain import by_category

    t0, ms = 1_700_000_000_000_000_000, 1_000_000

    def run(run_id, step_ms, steps, finish):
        recs = [s.PhaseRecord(run_id=run_id, rank=0, step=-1, phase="prefill", t_start_ns=t0, device="cpu",
                              duration_ns=100 * ms)]
        recs += [s.PhaseRecord(run_id=run_id, rank=0, step=i, phase="verify_forward",
                               t_start_ns=t0 + 100 * ms + i * step_ms * ms, device="cpu",
                               duration_ns=(step_ms - 10) * ms) for i in range(steps)]
        for rid, cat, tokens in (("a", "copy", 21), ("b", "math", 11)):
            recs.append(s.RequestRecord(
                run_id=run_id, rank=0, request_id=rid, prompt_id=f"{cat}-00", category=cat,
                t_arrival_ns=t0, t_first_token_ns=t0 + 90 * ms, t_finish_ns=t0 + finish[rid] * ms,
                num_prompt_tokens=8, num_output_tokens=tokens))
        return recs

    spec = run("spec", 200, 11, {"a": 1100, "b": 2100})  # one step more: each has a successor
    base = run("base", 100, 21, {"a": 2100, "b": 1100})
    cats = by_category(spec, base)
    assert cats["copy"]["delivered_per_step"] == 4.0 and cats["math"]["delivered_per_step"] == 1.0
    assert cats["copy"]["step_ms"] == 200.0 and cats["copy"]["baseline_step_ms"] == 100.0
    # TTFT 90 ms plus the steps each saw: 5 x 200 vs 20 x 100 (copy), 10 x 200 vs 10 x 100
    assert round(cats["copy"]["predicted_speedup"], 4) == round(2090 / 1090, 4)
    assert round(cats["math"]["predicted_speedup"], 4) == round(1090 / 2090, 4)
    for c in cats.values():  # the requests' own E2E times (10 ms more each) say nearly the same
        assert abs(c["prediction_error"]) < 0.01
