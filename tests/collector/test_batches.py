"""Correctness and acceptance by batch-size class (``report --by batch``)."""

from __future__ import annotations

from specscope import schema
from specscope.collector.batches import batch_classes, format_classes, verdict
from specscope.collector.report import build_report
from specscope.engine.decoder import Request, SpecConfig, SpeculativeDecoder
from specscope.hooks import Recorder


def _served(tiny, run_record, fault: str) -> list:
    """Pairs of long requests at temperature 0.8 (batches of 2), then one short burst of three
    verifying together: a fault that fires only above two requests touches the burst alone."""
    rec = Recorder(run_record, ring_slots=1024)
    dec = SpeculativeDecoder(tiny.target, tiny.draft, SpecConfig(num_steps=3, fault=fault),
                             recorder=rec, seed=3)
    prompts = [[5, 17, 33, 2, 90, 41], [7, 7, 1, 64, 3], [11, 200, 9, 9, 31], [2, 4, 8, 16, 32]]
    for i in range(6):
        dec.generate([Request(f"pair{i}-{j}", prompts[(i + j) % 4], max_new_tokens=96, temperature=0.8)
                      for j in range(2)])
    dec.generate([Request(f"burst-{j}", prompts[j], max_new_tokens=14, temperature=0.8) for j in range(3)])
    return [run_record] + rec.drain()


def test_a_fault_above_two_requests_fails_in_its_class_and_not_in_the_run(tiny, run_record):
    records = _served(tiny, run_record, "silent_greedy_batch_gt2")
    classes = {c.size: c for c in batch_classes(records)}
    assert {2, 4} <= set(classes)
    truth = {c.size: {a.check: a.state for a in c.checks} for c in classes.values()}
    check = "sampling truth (speculative-sampling)"
    assert truth[4][check] == "fail" and truth[2][check] == "pass", truth
    # the whole run's sampling truth, pooled over both classes, does not fail
    (section,) = build_report(records)["runs"]
    (whole,) = [t for t in section["sampling_truth"] if t["mode_requested"] == schema.SPECULATIVE_SAMPLING]
    assert whole["state"] != "fail", whole
    line = verdict(list(classes.values()), run_record.run_id)
    assert "FAIL in batch 4 (3-4): sampling truth (speculative-sampling)" in line
    assert "bonus token included" in format_classes(list(classes.values()))


def test_a_clean_run_passes_or_waits_in_every_class(tiny, run_record):
    classes = batch_classes(_served(tiny, run_record, ""))
    assert classes and not [c for c in classes if c.failed]
    assert all(c.stats.mean_acceptance_length > 1 for c in classes)


def test_report_by_batch_on_a_recorded_trace(tmp_path):
    """`record --fault silent_greedy_batch_gt2` at concurrency 4, then `report --by batch`: the
    classes where three or four requests verified together FAIL sampling truth, named."""
    import json

    from tests.conftest import run_cli

    trace = tmp_path / "t.jsonl"
    out = run_cli("record", "--model", "tiny", "--requests", "8", "--concurrency", "4",
                  "--max-new-tokens", "32", "--temperature", "0.8", "--fault",
                  "silent_greedy_batch_gt2", "--no-reference", "--quiet", "-o", str(trace))
    assert out.returncode == 0, out.stderr
    out = run_cli("report", str(trace), "--by", "batch", "--json")
    classes = {c["batch_class"]: c for c in json.loads(out.stdout)["classes"]}
    states = {c: {k["check"]: k["state"] for k in v["checks"]} for c, v in classes.items()}
    assert states[4]["sampling truth (speculative-sampling)"] == "fail", states
    text = run_cli("report", str(trace), "--by", "batch").stdout
    assert "FAIL in batch 4 (3-4)" in text


def test_the_dashboard_figure_marks_the_failing_class_red(tiny, run_record):
    from types import SimpleNamespace

    from specscope.dashboard.figures.classes import batch_truth_figure

    view = SimpleNamespace(run_id=run_record.run_id, label=run_record.run_id,
                           records=_served(tiny, run_record, "silent_greedy_batch_gt2"))
    fig = batch_truth_figure([view])
    (trace,) = fig.data
    colors = dict(zip(trace.x, trace.marker.color))
    assert colors["batch 4 (3-4)"] == "#d62728" and colors["batch 2"] != "#d62728"
    assert dict(zip(trace.x, trace.y))["batch 4 (3-4)"] > 30  # points above the expectation
