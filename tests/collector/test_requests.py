"""Per-request figures and flags, the category matrix with its speedup over a baseline, and
``report --by request|category``."""

from __future__ import annotations

import json

import pytest

from specscope import schema
from specscope.collector.requests import category_rows, distribution, request_rows
from specscope.collector.stats import SpecStats
from specscope.engine.decoder import SpecConfig
from specscope.engine.workload import WorkloadSpec, run_workload
from specscope.importers import import_file
from specscope.io.trace import read_trace
from tests.conftest import run_cli


def _req(rid, steps, accepted, tokens, out=(), category="", drafted=None):
    return schema.RequestRecord(
        run_id="r", rank=0, request_id=rid, t_arrival_ns=1, t_first_token_ns=2,
        t_finish_ns=1 + 10**9, num_prompt_tokens=4, num_output_tokens=tokens,
        output_token_ids=tuple(out), category=category, num_verify_steps=steps,
        num_draft_tokens=drafted if drafted is not None or steps is None else steps * 3,
        num_accepted=accepted)


def test_flags_pinned_with_repetition_near_one_and_too_short():
    loop = [5, 6, 7, 8] * 30  # 120 tokens repeating one 4-gram
    rows = {r.request_id: r for r in request_rows([
        schema.RunRecord(run_id="r", config_id="c", algorithm="eagle", num_steps=3, topk=1,
                         num_verify_tokens=4, backend="cpu", model="m"),
        _req("loop", 30, 88, 120, loop),           # AL 3.93 of 4, repeating: a loop
        _req("fast", 30, 88, 120, range(120)),     # AL 3.93 but no repetition
        _req("stuck", 40, 2, 42),                  # AL 1.05
        _req("short", 4, 0, 4),                    # too few steps to say anything
        _req("fine", 40, 50, 90, range(90))])}
    assert [f["flag"] for f in rows["loop"].flags] == ["pinned_at_k_plus_1"]
    assert "repetition" in rows["loop"].flags[0]["evidence"]
    assert [f["flag"] for f in rows["fast"].flags] == ["pinned_at_k_plus_1_no_repetition_signal"]
    assert [f["flag"] for f in rows["stuck"].flags] == ["near_one"]
    assert rows["short"].flags == [] and rows["fine"].flags == []


def test_request_and_token_weighted_means_differ_as_they_should():
    """A long request at acceptance length 3 and a short one at 1.5: the request-weighted mean
    sits halfway (2.25), the token-weighted one near the long request, as engines count it."""
    rows = request_rows([_req("long", 100, 200, 300), _req("short", 10, 5, 15)])
    d = distribution(rows)
    assert d["request_weighted_mean_acceptance_length"] == pytest.approx(2.25)
    assert d["token_weighted_mean_acceptance_length"] == pytest.approx(1 + 205 / 110)


def test_a_recorded_run_per_request_sums_to_its_verify_steps(tiny, tmp_path):
    path = run_workload(tiny, SpecConfig(num_steps=3), WorkloadSpec(requests=12, concurrency=4,
                        max_new_tokens=24, reference=False), tmp_path / "t.jsonl", progress=False)
    records = read_trace(path).records
    rows = request_rows(records)
    stats = SpecStats().observe_all(records)
    assert len(rows) == 12 and all(r.category for r in rows)  # the prompt set's categories
    assert sum(r.accepted for r in rows) == stats.accepted_tokens
    assert sum(r.steps for r in rows) == stats.num_drafts
    assert distribution(rows)["token_weighted_mean_acceptance_length"] == pytest.approx(
        stats.mean_acceptance_length)
    out = run_cli("report", str(path), "--by", "request", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert len(data["requests"]) == 12 and data["distribution"]["engine_counters_give"] == "token_weighted"


def test_category_speedup_on_spec_bench_answers(samples):
    """SpS answers against the vanilla answers of the same questions: per category, speedup is
    (tokens / seconds) over the baseline's, as Spec-Bench's speed.py divides them."""
    spec = import_file(samples / "specbench_sps68m_answers_excerpt.jsonl").records
    base = import_file(samples / "specbench_vanilla_answers_excerpt.jsonl").records
    cats = {c.category: c for c in category_rows(spec, base)}
    raw = {json.loads(x)["category"]: json.loads(x)["choices"][0] for x in
           (samples / "specbench_sps68m_answers_excerpt.jsonl").read_text().splitlines()}
    van = {json.loads(x)["category"]: json.loads(x)["choices"][0] for x in
           (samples / "specbench_vanilla_answers_excerpt.jsonl").read_text().splitlines()}
    for name in ("coding", "translation"):
        s, v = raw[name], van[name]
        want = (sum(s["new_tokens"]) / sum(s["wall_time"])) / (sum(v["new_tokens"]) / sum(v["wall_time"]))
        assert cats[name].speedup == pytest.approx(want, rel=1e-6)
        assert cats[name].matched == 1 and cats[name].ci is None  # one prompt: no interval
    assert cats["coding"].speedup > 2 and cats["translation"].speedup < 1  # as Spec-Bench shows


def test_category_interval_from_a_bootstrap_over_prompts():
    import dataclasses

    spec = [dataclasses.replace(_req(f"q{i}", 10, 10, 20, category="math"),
                                t_finish_ns=1 + int((1 + 0.1 * i) * 1e9)) for i in range(6)]
    base = [dataclasses.replace(_req(f"q{i}", None, None, 20, category="math"),
                                t_finish_ns=1 + int(2.5e9)) for i in range(6)]
    (row,) = category_rows(spec, base, n_boot=500)
    assert row.matched == 6 and row.speedup == pytest.approx(2.5 * 6 / sum(1 + 0.1 * i for i in range(6)))
    lo, hi = row.ci
    assert lo < row.speedup < hi and hi - lo < 0.6


def test_categories_against_the_traces_own_reference_run(tiny, tmp_path):
    """`record` writes a reference run beside the measured one: `report --by category` compares
    against it without --baseline, each category its own speedup from matched prompts."""
    path = run_workload(tiny, SpecConfig(algorithm="ngram", num_steps=3),
                        WorkloadSpec(requests=6, concurrency=3, max_new_tokens=12,
                                     categories=("copy", "math")), tmp_path / "t.jsonl",
                        progress=False)
    out = run_cli("report", str(path), "--by", "category", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["baseline"] is True
    cats = {c["category"]: c for c in data["categories"]}
    assert set(cats) == {"copy", "math"}
    assert all(c["matched_requests"] == 3 and c["speedup"] > 0 for c in cats.values())
    assert all(c["speedup_ci95"] for c in cats.values())
