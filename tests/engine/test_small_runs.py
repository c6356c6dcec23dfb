"""Small runs, as an incident starts ("two prompts came back looking greedy"): the exact tests
give a verdict from a couple of requests, and a clean run is never called FAIL."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

SMALL = ["record", "--model", "tiny", "--temperature", "0.8", "--top-k", "20", "--requests", "2",
         "--max-new-tokens", "16", "--seed", "1", "--quiet"]


def _report(tmp_path, *extra):
    trace = tmp_path / "s.jsonl"
    rec = run_cli(*SMALL, *extra, "-o", str(trace))
    assert rec.returncode == 0, rec.stderr
    text = run_cli("report", str(trace))
    assert text.returncode == 0, text.stderr
    js = run_cli("report", str(trace), "--json", fresh=True)  # the real `python -m specscope`
    (section,) = json.loads(js.stdout)["runs"]
    return section, text.stdout


def test_two_requests_of_silent_greedy_fail_the_gate_with_the_evidence(tmp_path):
    section, text = _report(tmp_path, "--fault", "silent_greedy")
    assert section["eval"]["gate"]["verdict"] == "fail"
    assert "EVAL GATE          FAIL" in text
    (flag,) = [a for a in section["anomalies"] if a["kind"] == "silent_greedy"]
    ev = flag["evidence"]
    assert ev["observed_top1_rate"] == 1.0 and ev["p_value"] < 1e-9
    # each request carries the evidence on its own (16 positions, p ~ 4e-7 < 1e-6 per request)
    flagged = {r["request_id"] for r in section["requests_flagged"]}
    assert flagged == {"req-00000", "req-00001"}
    assert "request req-00000" in text


def test_two_requests_of_a_skipped_draft_softmax_fail_the_gate(tmp_path):
    section, text = _report(tmp_path, "--fault", "draft_prob_shortcut")
    assert section["eval"]["gate"]["verdict"] == "fail"
    (flag,) = [a for a in section["anomalies"] if a["kind"] == "draft_prob_collapse"]
    assert flag["evidence"]["share_at_exactly_one"] == 1.0
    assert flag["evidence"]["draft_dtype"] == "float32" and flag["evidence"]["p_value"] < 1e-9
    assert section["draft_health"]["state"] == "fail"


@pytest.mark.parametrize("seed", ["1", "2"])
def test_a_clean_two_request_run_is_never_called_fail(tmp_path, seed):
    SMALL[SMALL.index("--seed") + 1] = seed
    try:
        section, text = _report(tmp_path)
    finally:
        SMALL[SMALL.index("--seed") + 1] = "1"
    gate = section["eval"]["gate"]
    assert gate["verdict"] in ("pass", "inconclusive") and not section["anomalies"]
    for c in gate["checks"]:
        if c["state"] == "inconclusive":  # each says why, or how much more it needs
            assert c["need"] or c.get("reason"), c
    assert "FAIL" not in text


def test_report_compare_and_regress_say_inconclusive_on_a_run_too_small_to_fail(tmp_path):
    trace = tmp_path / "tiny-run.jsonl"
    rec = run_cli("record", "--model", "tiny", "--temperature", "0.8", "--requests", "2",
                  "--max-new-tokens", "4", "--seed", "3", "--quiet", "-o", str(trace))
    assert rec.returncode == 0, rec.stderr
    report = run_cli("report", str(trace)).stdout
    assert "EVAL GATE          INCONCLUSIVE (lean" in report and "need ~" in report
    compare = run_cli("compare", str(trace), str(trace), "--bootstrap", "100").stdout
    gate_rows = [line for line in compare.splitlines() if line.startswith("eval gate")]
    assert len(gate_rows) == 2 and all("INCONCLUSIVE (lean" in line for line in gate_rows)
    regress = run_cli("regress", str(trace), "--bootstrap", "100").stdout
    (row,) = [line for line in regress.splitlines()[1:] if line.strip() and not line.startswith(("[", "run "))]
    verdicts = row.split()[1:]  # the run's name (a hash that may spell "bad") comes first
    assert "inconclusive" in verdicts and "good" not in verdicts and "bad" not in verdicts


def test_record_report_prints_what_report_prints_of_the_trace_it_wrote(tmp_path):
    trace = tmp_path / "r.jsonl"
    rec = run_cli("record", "--model", "tiny", "--requests", "2", "--max-new-tokens", "4",
                  "--quiet", "--report", "-o", str(trace))
    assert rec.returncode == 0, rec.stderr
    report = run_cli("report", str(trace))
    assert report.returncode == 0 and "== run " in report.stdout
    assert rec.stdout.endswith(report.stdout)
    assert rec.stdout.startswith(f"trace written to {trace}\n")
