"""Figure functions are pure: sweep points and Pareto fronts, the advisor's model, tables."""

from __future__ import annotations

import pytest

from specscope import schema
from specscope.collector.advisor import advise, fit_costs, predict_al
from specscope.collector.report import build_report
from specscope.dashboard.data import RunView
from specscope.dashboard.figures import live, runs, sweep


def _view(run_id, spec, x, y, gate_fail=False, steps=3):
    run = schema.RunRecord(run_id=run_id, config_id=spec, algorithm="mtp", num_steps=steps,
                           topk=1, num_verify_tokens=steps + 1, backend="cpu", model="m")
    bench = schema.BenchmarkRecord(run_id=run_id, source="specscope-sweep", metrics={
        "output_throughput_per_gpu_tok_s": y, "interactivity_tok_s_user_median": x},
        config={"spec": spec, "concurrency": "4"})
    records = [run, bench]
    if gate_fail:
        records.append(schema.EvalRecord(run_id=run_id, request_id="r", exact_match=False))
    else:  # 13 identical greedy outputs rule out differing ones in 30% of requests
        records += [schema.EvalRecord(run_id=run_id, request_id=f"r{i}", exact_match=True)
                    for i in range(13)]
    return RunView(run_id, build_report(records)["runs"][0])


def test_pareto_front_keeps_only_undominated_points():
    pts = [{"x": 10, "y": 100}, {"x": 20, "y": 90}, {"x": 15, "y": 80}, {"x": 30, "y": 50},
           {"x": 30, "y": 40}]
    assert [(p["x"], p["y"]) for p in sweep.pareto_front(pts)] == [(10, 100), (20, 90), (30, 50)]


def test_failed_gates_are_untrusted_and_drawn_hollow():
    views = [_view("a", "3-1-4", 20, 300), _view("b", "3-1-4", 25, 200, gate_fail=True),
             _view("c", "off", 30, 150, steps=0)]
    pts = {p["run"]: p for p in sweep.sweep_points(views)}
    assert pts["a"]["trusted"] and not pts["b"]["trusted"] and pts["c"]["trusted"]
    assert pts["b"]["gate"] == "fail"
    fig = sweep.pareto_figure(list(pts.values()))
    hollow = [t for t in fig.data if t.mode == "markers+text" and "UNTRUSTED" in t.name]
    assert len(hollow) == 1 and list(hollow[0].x) == [25] and hollow[0].marker.symbol == "x-open"
    assert hollow[0].marker.color != "white"  # an open symbol is stroked in its marker colour
    fronts = {t.name: list(t.x) for t in fig.data if t.mode == "lines"}
    assert fronts["3-1-4 Pareto front"] == [20]  # the untrusted point is not on any front


def _section(k, totals, phases):
    """A section of a run at depth ``k`` with these totals and phase times."""
    from specscope.collector.section import Percentiles, Section, Totals

    run = schema.RunRecord(run_id=f"k{k}", config_id="", algorithm="eagle", num_steps=k, topk=1,
                           num_verify_tokens=k + 1, backend="cpu", model="m")
    return Section(run=run, totals=Totals(**totals),
                   phases={n: Percentiles(**p) for n, p in phases.items()})


def test_advisor_acceptance_model_and_its_error_on_measured_runs():
    # prefix acceptance: p = P(L >= i)
    assert predict_al([0.8, 0.6, 0.4], 3) == pytest.approx(2.8)
    assert predict_al([0.8, 0.6, 0.4], 1) == pytest.approx(1.8)
    assert predict_al([0.8, 0.4], 3) == pytest.approx(1 + 0.8 + 0.4 + 0.2)  # c = 0.5 held

    def section(k, pp, draft_ms, verify_ms, steps=100):
        return _section(k, {"num_verify_steps": steps, "per_position_acceptance": pp,
                            "mean_acceptance_length": 1 + sum(pp)},
                        {"draft": {"total_s": k * draft_ms * steps / 1e3},
                         "draft_extend": {"total_s": 0.0},
                         "verify_forward": {"total_s": verify_ms * steps / 1e3},
                         "verify_sample": {"total_s": 0.0}})

    base = section(3, [0.8, 0.6, 0.4], 2.0, 10.0 + 2 * 4)
    other = section(2, [0.8, 0.6], 2.0, 10.0 + 2 * 3)
    costs = fit_costs([base, other])
    assert costs.verify_b_s == pytest.approx(0.002) and costs.verify_a_s == pytest.approx(0.010)
    out = advise(base, [base, other], depths=[1, 2, 3, 4])
    rows = {r["num_steps"]: r for r in out["rows"]}
    assert rows[2]["measured_al"] == pytest.approx(2.4) and rows[2]["predicted_al"] == pytest.approx(2.4)
    assert out["mape_al_pct"] == pytest.approx(0.0) and out["mape_tok_s_pct"] == pytest.approx(0.0, abs=1e-9)
    assert "fitted over depths [2, 3]" in out["verify_cost_model"]
    assert rows[4]["predicted_tok_s"] < rows[3]["predicted_tok_s"] * 1.2


def test_tables_say_what_they_compare():
    rows = runs.accuracy_rows({"ref": {"gsm8k": 0.975}, "mtp": {"gsm8k": 0.035}}, "ref")
    assert rows == [{"benchmark": "gsm8k", "ref": "0.975", "mtp": "0.035 (-94.00 pts)"}]
    cmp = runs.compare_rows([{"label": "acceptance length", "a": 2.0, "b": 2.2, "delta_pct": 10.0,
                              "ci_pct": [4.0, 16.0], "level": 0.95, "verdict": "better"}])
    assert cmp[0]["95% CI of Δ%"] == "[+4.00, +16.00]"
    assert live.empty("x").layout.annotations[0].text == "x"


def test_category_heatmap_cells_carry_speedup_interval_and_acceptance():
    from specscope.collector.requests import CategoryRow
    from specscope.dashboard.figures.requests import category_heatmap

    rows = [CategoryRow("code", 4, 2.6, 0.53, 12.0, speedup=1.31, ci=(1.1, 1.5), matched=4),
            CategoryRow("translation", 3, 1.4, 0.13, 7.0, speedup=0.82, ci=None, matched=1)]
    fig = category_heatmap([("eagle-s3", rows), ("empty", [])])
    hm = fig.data[0]
    assert list(hm.y) == ["code", "translation"] and list(hm.x) == ["eagle-s3"]
    assert [r[0] for r in hm.z] == [1.31, 0.82] and hm.zmid == 1.0
    assert "speedup 1.31x [1.10, 1.50] over 4 matched" in hm.hovertext[0][0]
    assert "no interval" in hm.hovertext[1][0] and "acceptance length 1.40" in hm.hovertext[1][0]
    # no baseline matched anywhere: the cells are acceptance lengths, and the title says so
    plain = category_heatmap([("a", [CategoryRow("qa", 2, 2.0, 0.3, 5.0)])])
    assert plain.data[0].z[0][0] == 2.0 and "Acceptance length" in plain.layout.title.text
    assert "no requests" in category_heatmap([]).layout.annotations[0].text


def test_advisor_offers_no_speculation_where_a_target_only_step_was_timed():
    base = _section(2, {"per_position_acceptance": [0.5, 0.3], "num_verify_steps": 10},
                    {"draft": {"total_s": 1.0, "n": 20}, "verify_forward": {"total_s": 1.5, "n": 10}})
    assert advise(base)["rows"][0]["num_steps"] == 1  # nothing says what a target-only step costs
    target_only = _section(0, {"num_verify_steps": 0}, {"decode": {"total_s": 0.8, "n": 10}})
    rows = advise(base, [target_only])["rows"]
    assert rows[0]["num_steps"] == 0 and rows[0]["predicted_al"] == 1.0
    assert rows[0]["predicted_tok_s"] == pytest.approx(1 / 0.08)
    # k 1: 0.05 s of draft per token (0.1 s per step over 2 drafted) + 0.15 s verify
    assert rows[1]["predicted_tok_s"] == pytest.approx(1.5 / 0.2)
    assert max(rows, key=lambda r: r["predicted_tok_s"] or 0)["num_steps"] == 0


def test_requests_table_and_picker_open_on_speculative_requests_not_target_only():
    """A target-only request has no acceptance length: it goes after every speculative request,
    which are ordered flagged first, then by acceptance length, lowest first."""
    from specscope.collector.requests import RequestRow
    from specscope.dashboard.figures.requests import request_rows

    def row(run, rid, steps, accepted, flags=()):
        return RequestRow(run, rid, "", steps, None if steps is None else 3 * steps, accepted, 32,
                          3 if steps else None, 1.0, 0.03, False, list(flags))

    rows = [row("target-only", "t0", None, None), row("spec", "high", 10, 20),
            row("spec", "low", 10, 2), row("spec", "pinned", 10, 30,
                                            [{"flag": "pinned", "evidence": "x"}])]
    assert [r["request"] for r in request_rows(rows)] == ["pinned", "low", "high", "t0"]


def test_accuracy_page_lists_every_selected_runs_gate_with_its_checks():
    from types import SimpleNamespace

    from specscope.dashboard.pages.accuracy import gate_rows

    gate = {"verdict": "fail", "checks": [
        {"check": "sampling truth (speculative-sampling)", "state": "fail", "value": 0.984},
        {"check": "greedy exact match vs target-only", "state": "pass", "value": 1.0}]}
    from specscope.collector.section import Section

    views = [SimpleNamespace(label="faulted", section=Section.from_dict({"eval": {"gate": gate}})),
             SimpleNamespace(label="target-only", section=Section.from_dict({"eval": {}}))]
    ctx = SimpleNamespace(views=lambda selected: views)
    rows = gate_rows(ctx, None)
    assert [r["run"] for r in rows] == ["faulted", "target-only"]
    assert rows[0]["gate"] == "FAIL" and "sampling truth (speculative-sampling): FAIL (0.984)" \
        in rows[0]["checks"] and rows[1]["gate"] == "no checks"


def test_profile_draws_target_only_beside_speculative_runs(tiny, tmp_path):
    """A target-only run has decode steps, not verify steps: its bar and its time per committed
    token (its output tokens) stand beside the speculative run's."""
    import dataclasses
    from types import SimpleNamespace

    from specscope import schema
    from specscope.collector.report import build_report
    from specscope.dashboard.figures.runs import profile_figure, profile_rows
    from specscope.collector.section import Section
    from tests.conftest import run_cli

    trace = tmp_path / "t.jsonl"
    assert run_cli("record", "--model", "tiny", "--requests", "4", "--max-new-tokens", "12",
                   "--quiet", "-o", str(trace)).returncode == 0
    from specscope.io.trace import read_trace

    records = read_trace(trace).records
    views = []
    for run in [r for r in records if isinstance(r, schema.RunRecord)]:
        own = [dataclasses.replace(r, labels={}) if r is run else r for r in records
               if getattr(r, "run_id", "") == run.run_id]
        (sec,) = build_report(own)["runs"]
        views.append(SimpleNamespace(run_id=run.run_id, label=run.run_id,
                                     section=Section.from_dict(sec), breakdown=None))
    fig = profile_figure(views)
    assert len({x for bar in fig.data for x in bar.x}) == 2  # both runs drawn
    rows = profile_rows(views)
    assert len(rows) == 2 and all(r["time per committed token (ms)"] for r in rows)


def test_the_uptime_figure_draws_a_line_per_segment_and_dots_the_restarts():
    import random

    from specscope.collector.uptime import uptime_runs
    from specscope.dashboard.figures.runs import uptime_figure
    from tests.collector.test_drift import _segments

    records = _segments(random.Random(3), [(0.8, 0.1), (0.8, 0.1)], every_s=30)
    (u,) = uptime_runs(records)
    fig = uptime_figure([("run a", u)])
    assert [t.name for t in fig.data] == ["run a", "run a · after restart 1"]
    assert [t.line.dash for t in fig.data] == ["solid", "dot"]
    first = fig.data[0]
    assert len(first.x) == 24 and all(0 <= x <= 1 for x in first.x)
    assert all(1 <= y <= 4 for y in first.y)  # acceptance length of a chain of three, bonus incl.
    assert "no verify steps" in uptime_figure([]).layout.annotations[0].text
