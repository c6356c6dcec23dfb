"""specscope sweep: one served run per grid point, each with its eval gate; a seeded fault
fails its gate and its throughput is marked untrusted."""

from __future__ import annotations

import json

import pytest

from specscope import schema
from specscope.io.trace import read_trace
from specscope.serving.sweep import Setting, format_sweep, plan, run_sweep


def test_plan_always_includes_target_only_first_and_parses_engine_settings():
    points = plan(["3/1/4", "2/1/3"], [0.0], [1, 4], ["0:32"], fault="silent_greedy@4/1/5")
    assert [p.setting.name for p in points[:2]] == ["off", "off"]
    assert {p.setting for p in points} == {Setting(0, 0, 0), Setting(3, 1, 4), Setting(2, 1, 3),
                                           Setting(4, 1, 5)}
    assert {p.fault for p in points if p.setting == Setting(4, 1, 5)} == {"silent_greedy"}
    assert Setting.parse("3") == Setting(3, 1, 4)
    with pytest.raises(ValueError, match="STEPS/TOPK"):
        Setting.parse("three")


def test_sweep_gates_each_point_and_flags_the_faulted_one(tmp_path):
    points = plan(["3/1/4"], [0.0, 0.8], [4], ["0:40"], fault="silent_greedy@2/1/3")
    results = run_sweep(points, tmp_path, model="tiny", requests=32, progress=False)
    table = format_sweep(results)
    print(table)
    by = {(r.point.setting.name, r.point.temperature): r for r in results}
    assert by[("3-1-4", 0.0)].figures.gate.verdict == "pass"  # greedy output == target-only output
    # sampled: nothing fails; 32 requests of 40 tokens may be too few to rule out a 30-point
    # rise in invalid output against the reference, or (the whole-distribution and acceptance
    # tests need several hundred positions) a sampling fault of the stated sizes, so the gate
    # may say INCONCLUSIVE, each waiting check with what it would need
    sampled = by[("3-1-4", 0.8)].figures
    assert sampled.gate.verdict in ("pass", "inconclusive") and not sampled.gate.failed
    assert all("need" in w or "leans" in w for w in sampled.gate.waiting), sampled.gate.waiting
    faulted = by[("2-1-3", 0.8)]
    assert faulted.figures.gate.verdict == "fail" and "silent_greedy" in faulted.figures.gate.anomalies
    assert "UNTRUSTED" in next(line for line in table.splitlines() if faulted.point.name in line)
    # one trace per point, with the point's labels, the client's throughput, eval records and
    # the target-only reference the gate compared against
    records = read_trace(by[("3-1-4", 0.0)].path).records
    runs = {r.run_id: r for r in records if isinstance(r, schema.RunRecord)}
    measured = by[("3-1-4", 0.0)].run_id
    assert runs[measured].labels["concurrency"] == "4" and runs[measured].num_steps == 3
    assert runs[f"{measured}/reference"].labels["reference_for"] == measured
    evals = [r for r in records if isinstance(r, schema.EvalRecord) and r.run_id == measured]
    assert len(evals) == 32 and all(e.exact_match for e in evals)
    bench = next(r for r in records if isinstance(r, schema.BenchmarkRecord))
    assert bench.metrics["output_throughput_tok_s"] > 0 and bench.metrics["completed"] == 32
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert len(summary) == len(points) and all((tmp_path / s["trace"]).exists() for s in summary)
