"""Correctness and acceptance by batch-size class (``report --by batch``)."""

from __future__ import annotations

from specscope import schema
from specscope.collector.batches import batch_classes, format_classes, verdict
from specscope.collector.report import build_report
from specscope.collector.verdict import FAIL, INCONCLUSIVE
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


def _greedy(run_id, rid, tokens, **kw):
    return schema.RequestRecord(run_id=run_id, rank=0, request_id=rid, prompt_id=rid, t_arrival_ns=0,
                                t_first_token_ns=1, t_finish_ns=2, num_prompt_tokens=4,
                                num_output_tokens=len(tokens), output_token_ids=tuple(tokens),
                                temperature=0.0, finish_reason="length", **kw)


def _step(i, batch, commits):
    return schema.VerifyStepRecord(
        run_id="spec", config_id="c", rank=0, step=i, t_ns=i, batch_size=batch,
        entries=tuple(schema.VerifyEntry(request_id=rid, num_drafted=2, num_draft_tokens=2,
                                         num_accepted=n - 1, accepted_per_pos=(1,) * (n - 1) + (0,) * (3 - n),
                                         temperature=0.0) for rid, n in commits))


def test_exact_match_by_class_names_the_class_that_committed_the_divergence():
    """Three greedy requests: a verifies alone, then with b and c (class 4); b diverges firmly
    (margin 3 nats, its reference's third choice) at token 4, in a class-4 step; c diverges
    at a near tie (second choice, margin 1e-4) at token 2, also in class 4; a never diverges."""
    runs = [schema.RunRecord(run_id="spec", config_id="c", algorithm="eagle", num_steps=2, topk=1,
                             num_verify_tokens=3, backend="cpu", model="m"),
            schema.RunRecord(run_id="ref", config_id="none", algorithm="none", num_steps=0, topk=0,
                             num_verify_tokens=0, backend="cpu", model="m",
                             labels={"role": "reference", "reference_for": "spec"})]
    ref_tokens = {"a": [1, 2, 3, 4, 5, 6, 7], "b": [1, 2, 3, 4, 5, 6, 7], "c": [1, 2, 3, 4, 5, 6, 7]}
    second = (9,) * 7
    refs = [_greedy("ref", rid, t, top2_margins=(3.0, 3.0, 1e-4, 3.0, 3.0, 3.0, 3.0),
                    second_token_ids=second) for rid, t in ref_tokens.items()]
    mine = [_greedy("spec", "a", [1, 2, 3, 4, 5, 6, 7]), _greedy("spec", "b", [1, 2, 3, 4, 8, 8, 8]),
            _greedy("spec", "c", [1, 2, 9, 4, 5, 6, 7])]
    # a: 1 (prefill) + 2 alone + 2 + 2 in class 4; b and c: prefill, then 3 + 3 in class 4
    steps = [_step(0, 1, [("a", 2)]), _step(1, 3, [("a", 2), ("b", 3), ("c", 3)]),
             _step(2, 3, [("a", 2), ("b", 3), ("c", 3)])]
    classes = {c.size: c for c in batch_classes(runs + refs + mine + steps)}
    one, four = classes[1], classes[4]
    exact = [a for a in four.checks if a.check.startswith("exact match")]
    assert four.greedy_requests == 3 and four.diverged == {"structural": 1, "tie-flip": 1}
    assert [a.state for a in exact] == [FAIL]
    # one identical greedy request cannot rule a structural fault in 30% of requests out
    (alone,) = [a for a in one.checks if a.check.startswith("exact match")]
    assert alone.state == INCONCLUSIVE and alone.why == ("INCONCLUSIVE (leans honest; need ~12 "
                                                         "more greedy requests)")
    assert one.greedy_requests == 1 and not one.diverged
    text = format_classes(list(classes.values()))
    assert "2 of 3 greedy requests first diverged here (1 structural, 1 tie-flip)" in text
    assert verdict(list(classes.values()), "spec").startswith("spec: FAIL in batch 4 (3-4): exact match")
