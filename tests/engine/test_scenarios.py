"""The incidents, reproduced and caught, each run from the CLI as a user would."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

COMMON = ["record", "--model", "tiny", "--requests", "32", "--concurrency", "8",
          "--max-new-tokens", "96", "--quiet"]


def _record_and_report(tmp_path, name, *extra):
    trace = tmp_path / f"{name}.jsonl"
    rec = run_cli(*COMMON, *extra, "-o", str(trace))
    assert rec.returncode == 0, rec.stderr
    rep = run_cli("report", str(trace), "--json")
    assert rep.returncode == 0, rep.stderr
    (section,) = json.loads(rep.stdout)["runs"]
    return section


@pytest.fixture(scope="module")
def clean_sampled(tmp_path_factory):
    return _record_and_report(tmp_path_factory.mktemp("clean"), "clean", "--temperature", "0.7")


def test_s000_silent_greedy_is_flagged_with_its_evidence(tmp_path, clean_sampled):
    faulty = _record_and_report(tmp_path, "s000", "--temperature", "0.7",
                                "--fault", "silent_greedy")
    (flag,) = [a for a in faulty["anomalies"] if a["kind"] == "silent_greedy"]
    ev = flag["evidence"]
    assert ev["observed_top1_rate"] == 1.0 and ev["expected_top1_rate"] < 0.6
    assert ev["z"] == "inf" or ev["z"] > 20
    # the engine reported the sampler it was asked for: only the statistic shows the truth
    (truth,) = faulty["sampling_truth"]
    assert set(truth["modes_used"]) == {"speculative-sampling"}
    # greedy falls into repetition loops; the same run without the fault does not
    assert faulty["eval"]["rates"]["repetition_loop"] > clean_sampled["eval"]["rates"]["repetition_loop"]
    assert faulty["eval"]["gate"]["verdict"] == "fail"
    # acceptance length looks healthy all the same: dashboards of throughput would not notice
    assert faulty["totals"]["mean_acceptance_length"] > 2.0


def test_s000_clean_run_raises_no_flag(clean_sampled):
    assert clean_sampled["anomalies"] == []
    assert clean_sampled["eval"]["gate"]["verdict"] == "pass"


def test_one_batch_row_at_zero_is_named_while_the_pooled_rate_only_drops(tmp_path,
                                                                          clean_sampled):
    faulty = _record_and_report(tmp_path, "row", "--temperature", "0.7",
                                "--fault", "row_drafts_rejected")
    (flag,) = [a for a in faulty["anomalies"] if a["kind"] == "slot_at_zero"]
    assert flag["evidence"]["row"] == 1 and flag["evidence"]["rate"] == 0.0
    assert flag["evidence"]["rest_rate"] > 0.2 and flag["evidence"]["p_value"] < 1e-9
    # the pooled rate drops by less than the row's share: it reads as a harder workload
    assert faulty["totals"]["acceptance_rate"] > 0.6 * clean_sampled["totals"]["acceptance_rate"]


def test_s000b_top_p_fallback_events_counted_by_reason(tmp_path):
    faulty = _record_and_report(tmp_path, "s000b", "--temperature", "0.7", "--top-p", "0.9",
                                "--fault", "topk_fallback")
    verify_entries = sum(faulty["sampling_truth"][0]["modes_used"].values())
    assert faulty["fallbacks"] == {"top_p_unsupported": verify_entries}
    assert faulty["sampling_truth"][0]["modes_used"] == {"fallback-argmax": verify_entries}
    assert {a["kind"] for a in faulty["anomalies"]} >= {"fallback"}


def test_s000b_top_p_without_the_fault_is_honoured(tmp_path):
    clean = _record_and_report(tmp_path, "topp", "--temperature", "0.7", "--top-p", "0.9")
    assert clean["fallbacks"] == {} and clean["anomalies"] == []


def test_s002_draft_prob_shortcut_flags_draft_health_and_fails_the_gate(tmp_path, clean_sampled):
    faulty = _record_and_report(tmp_path, "s002", "--temperature", "0.7",
                                "--fault", "draft_prob_shortcut")
    kinds = {a["kind"] for a in faulty["anomalies"]}
    assert "draft_prob_collapse" in kinds
    assert faulty["draft_health"]["share_at_exactly_one"] == 1.0
    assert clean_sampled["draft_health"]["share_at_exactly_one"] < 0.1
    assert faulty["eval"]["gate"]["verdict"] == "fail"
    assert clean_sampled["eval"]["gate"]["verdict"] == "pass"


def test_tree_drafting_from_the_cli(tmp_path):
    sec = _record_and_report(tmp_path, "tree", "--spec-steps", "3", "--spec-topk", "2",
                             "--spec-draft-tokens", "6", "--temperature", "0")
    assert sec["run"]["topk"] == 2 and sec["run"]["num_verify_tokens"] == 6
    assert sec["eval"]["rates"]["exact_match"] == 1.0
    assert len(sec["totals"]["per_position_acceptance"]) == 3


def test_bad_flags_are_clear_errors(tmp_path):
    out = run_cli("record", "--model", "nowhere", "-o", str(tmp_path / "x.jsonl"))
    assert out.returncode == 2 and "not 'tiny', 'smollm2' or a model directory" in out.stderr
    out = run_cli("record", "--spec-topk", "2", "--verify-mode", "speculative-sampling",
                  "-o", str(tmp_path / "x.jsonl"))
    assert out.returncode == 2 and "speculative sampling needs a chain" in out.stderr
