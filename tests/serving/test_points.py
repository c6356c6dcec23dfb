"""The gate both sweeps give a point, and the prompts they send."""

from __future__ import annotations

from specscope.collector.section import Section
from specscope.serving.points import GateOutcome, prompts


def _section(verdict, checks, anomalies=()):
    return Section.from_dict({"eval": {"gate": {"verdict": verdict, "checks": checks}},
                              "anomalies": [{"kind": k, "severity": "critical", "message": ""}
                                            for k in anomalies]})


def test_the_probe_joins_the_reports_gate():
    waiting = {"check": "sampling truth (temperature)", "state": "inconclusive", "need": 40,
               "unit": "positions", "lean": "honest"}
    sec = _section("inconclusive", [waiting], anomalies=["fallback", "fallback"])
    alone = GateOutcome.of(sec)
    assert alone.verdict == "inconclusive" and alone.failed == ()
    assert alone.anomalies == ("fallback",)  # each kind once
    assert alone.waiting == ("sampling truth (temperature): leans honest; need ~40 more positions",)
    assert GateOutcome.of(sec, "error").verdict == "fail"
    assert GateOutcome.of(sec, "error").failed == ("probe error",)
    passed = _section("pass", [{"check": "greedy exact match vs target-only", "state": "pass"}])
    assert GateOutcome.of(passed, "inconclusive").verdict == "inconclusive"  # holds back a PASS
    assert GateOutcome.of(passed, "pass").figures() == {"gate": "pass", "failed": [],
                                                       "anomalies": [], "waiting": []}


def test_prompts_cycle_the_shipped_set_padded_to_about_the_length_asked():
    short, long = prompts(3, 0), prompts(3, 400)
    assert [p["text"] for p in short] == [p["prompt"] for p in short]
    assert all(p["text"].endswith(p["prompt"]) and 1200 <= len(p["text"]) - len(p["prompt"]) <= 1700
               for p in long)


def test_a_points_figures_read_back_from_sweep_json_as_written():
    import json

    from specscope.serving.points import PointFigures

    fg = PointFigures(GateOutcome("inconclusive", (), ("fallback",), ("x: need ~3 more",)),
                      acceptance_length=2.5, acceptance_rate=0.5, tok_s=40.0,
                      tok_s_ci=(38.0, 42.0), ttft_ms_p50=12.0, probe="pass")
    row = json.loads(json.dumps({"point": "p", **fg.as_dict()}))
    assert PointFigures.from_dict(row) == fg
    assert row["acceptance_length"] == 2.5 and row["tok_s_user"] is None  # unknown: null, not 0
    older = {"gate": "pass", "interactivity_tok_s_user_median": 31.5}  # a sweep.json before
    assert PointFigures.from_dict(older).tok_s_user == 31.5
