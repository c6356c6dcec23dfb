"""Acceptance-regression and output-quality detectors against a baseline run."""

from __future__ import annotations

import json

import pytest

from specscope.collector.detectors import AcceptanceRegressionDetector
from specscope.collector.report import measured_stats
from specscope.collector.stats import SpecStats
from specscope.engine.decoder import SpecConfig
from specscope.engine.models import tiny_pair
from specscope.engine.workload import WorkloadSpec, run_workload
from specscope.io.trace import read_trace
from tests.conftest import run_cli


def _stats(pair, tmp_path, name, seed, **kw):
    spec = WorkloadSpec(requests=16, concurrency=8, max_new_tokens=48, seed=seed,
                        reference=False, **kw)
    path = run_workload(pair, SpecConfig(num_steps=3), spec, tmp_path / f"{name}.jsonl",
                        progress=False)
    return measured_stats(read_trace(path).records)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_no_false_alarm_between_clean_runs(tiny, tmp_path, temperature):
    """Clean runs with different prompts' seeds and sampling seeds: 0 flags (3 pairs each)."""
    runs = [_stats(tiny, tmp_path, f"c{i}", seed=i, temperature=temperature) for i in range(3)]
    for i in range(3):
        for j in range(3):
            if i != j:
                assert AcceptanceRegressionDetector(runs[i]).check(runs[j]) == []


def test_a_worse_draft_is_flagged(tmp_path):
    good = _stats(tiny_pair(noise=0.2), tmp_path, "good", seed=0)
    worse = _stats(tiny_pair(noise=0.4), tmp_path, "worse", seed=0)
    (flag,) = AcceptanceRegressionDetector(good).check(worse)
    assert flag.kind == "acceptance_regression"
    assert flag.evidence["mean_acceptance_length"]["now"] < flag.evidence["mean_acceptance_length"]["baseline"]
    assert "position_0" in flag.evidence


def test_trailing_windows():
    from tests.collector.test_stats import _step

    good = [SpecStats().observe_all([_step([3, 2, 3, 1] * 100)]) for _ in range(5)]
    bad = SpecStats().observe_all([_step([0, 1, 0, 0] * 100)])
    det = AcceptanceRegressionDetector()
    assert det.check_windows(good) == []
    assert det.check_windows(good + [bad])[0].kind == "acceptance_regression"


def test_report_baseline_flags_the_nightly_that_broke(tmp_path):
    """The cross-run incident: yesterday's clean trace against today's faulty one."""
    common = ["record", "--model", "tiny", "--requests", "16", "--concurrency", "8",
              "--max-new-tokens", "64", "--temperature", "0.7", "--quiet", "--no-reference"]
    assert run_cli(*common, "-o", str(tmp_path / "good.jsonl")).returncode == 0
    assert run_cli(*common, "--fault", "draft_prob_shortcut",
                   "-o", str(tmp_path / "bad.jsonl")).returncode == 0
    out = run_cli("report", str(tmp_path / "bad.jsonl"), "--baseline",
                  str(tmp_path / "good.jsonl"), "--json")
    kinds = {a["kind"] for a in json.loads(out.stdout)["runs"][0]["anomalies"]}
    assert {"acceptance_regression", "repetition_loop_rate", "draft_prob_collapse"} <= kinds
    same = run_cli("report", str(tmp_path / "good.jsonl"), "--baseline",
                   str(tmp_path / "good.jsonl"), "--json")
    assert json.loads(same.stdout)["runs"][0]["anomalies"] == []
