"""``report --json`` held byte for byte: the JSON every source shares (dashboards, sweeps,
notebooks and other tools read it), on a synthetic two-run trace that exercises the sampling
checks, the per-request flags and the gate, and on real engine outputs imported from
``../shared/samples``. A change to the read model must leave these files as they are (or
say why in the commit that rewrites them with ``--update-golden``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from specscope import schema
from specscope.collector.report import build_report, report_json
from specscope.importers import import_file

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples"
T0 = 1_780_000_000 * 10**9


def _run(run_id: str, silent: bool, seed: int) -> list:
    """Eight requests (half greedy, half at temperature 0.8) over 120 verify steps; under
    ``silent`` the sampled ones commit their top-1 every time (the first seed's fault)."""
    rng = random.Random(seed)
    out: list = [schema.RunRecord(run_id=run_id, config_id="eagle-3-1-4", algorithm="eagle",
                                  num_steps=3, topk=1, num_verify_tokens=4, backend="cpu",
                                  model="tiny", engine="specscope-reference",
                                  started_ns=T0, labels={"fault": "silent" if silent else ""})]
    for step in range(120):
        entries = []
        for i in range(8):
            sampled = i % 2 == 1
            acc = rng.choice((0, 1, 2, 3, 3))
            verified = acc + 1
            p_top = 0.7
            top1 = verified if (silent or not sampled) else sum(
                rng.random() < p_top for _ in range(verified))
            entries.append(schema.VerifyEntry(
                request_id=f"{run_id}-q{i}", num_drafted=3, num_draft_tokens=3,
                num_accepted=acc, accepted_per_pos=tuple(int(j < acc) for j in range(3)),
                temperature=0.8 if sampled else 0.0,
                mode_requested="temperature" if sampled else schema.GREEDY,
                mode_used=schema.SPECULATIVE_SAMPLING if sampled else schema.GREEDY,
                num_verified=verified if sampled else 0, num_top1=top1 if sampled else 0,
                expected_top1=p_top * verified if sampled else 0.0,
                var_top1=p_top * (1 - p_top) * verified if sampled else 0.0))
        out.append(schema.VerifyStepRecord(
            run_id=run_id, config_id="eagle-3-1-4", rank=0, step=step,
            t_ns=T0 + step * 50_000_000, batch_size=8, entries=tuple(entries), draft_depth=3))
    for i in range(8):
        t = T0 + i * 10**8
        out.append(schema.RequestRecord(
            run_id=run_id, rank=0, request_id=f"{run_id}-q{i}", t_arrival_ns=t,
            t_first_token_ns=t + 30_000_000 + i * 1_000_000, t_finish_ns=t + 6 * 10**9,
            num_prompt_tokens=16, num_output_tokens=300 + i,
            temperature=0.8 if i % 2 else 0.0))
    return out


def test_report_json_of_a_silent_and_an_honest_run_is_unchanged(golden):
    records = _run("honest", False, 1) + _run("silent", True, 2)
    report = build_report(records, window_s=2.0)
    assert {r["run"]["run_id"]: r["eval"]["gate"]["verdict"] for r in report["runs"]}["silent"] \
        == "fail"  # (the file below holds a report that could have failed)
    golden("report_synthetic.json", report_json(report))


def test_report_json_of_a_gate_against_a_reference_is_unchanged(golden):
    """The gate's other checks: greedy exact match against target-only decoding and the
    invalid and looping rates against a reference run."""
    records = _run("measured", False, 3)
    ref = schema.RunRecord(run_id="measured/reference", config_id="off", algorithm="none",
                           num_steps=0, topk=1, num_verify_tokens=1, backend="cpu",
                           model="tiny", labels={"role": "reference",
                                                 "reference_for": "measured"})
    for i in range(20):
        records.append(schema.EvalRecord(run_id="measured", request_id=f"q{i}",
                                         exact_match=i != 7, invalid=i % 5 == 0,
                                         repetition_loop=i % 4 == 0))
    records.append(ref)
    records += [schema.EvalRecord(run_id="measured/reference", request_id=f"q{i}",
                                  invalid=i % 10 == 0, repetition_loop=False) for i in range(20)]
    report = build_report(records)
    checks = [c["check"] for c in report["runs"][0]["eval"]["gate"]["checks"]]
    assert checks[0] == "greedy exact match vs target-only", checks
    assert {"invalid rate vs reference", "repetition_loop rate vs reference"} <= set(checks)
    golden("report_gate_reference.json", report_json(report))


@pytest.mark.parametrize("sample", ["vllm_server_specdecode_log_1.txt",
                                    "vllm_metrics_scrape_specdecode_1.txt",
                                    "sglang_metrics_scrape_1.txt",
                                    "llamacpp_spec_stats_docs_excerpt.txt",
                                    "vllm_bench_1.json"])
def test_report_json_of_real_engine_outputs_is_unchanged(sample, golden, monkeypatch):
    if not (SAMPLES / sample).exists():
        pytest.skip(f"../shared/samples/{sample} is absent (the suite reads, never copies, it)")
    # vLLM's log lines carry no year: the importer takes the file's (a clone's mtime); fixed here
    monkeypatch.setattr("specscope.importers.vllm_log.file_year", lambda path: 2026)
    result = import_file(SAMPLES / sample)
    report = build_report(result.records, problems=result.problems)
    golden(f"report_{Path(sample).stem}.json", report_json(report))
