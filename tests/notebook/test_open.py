"""``specscope.open``: one object over a trace, a Parquet dataset, a sweep folder or an importable
file, whose frames agree with the report the CLI prints."""

from __future__ import annotations

import pytest

import specscope
from specscope.engine.decoder import SpecConfig
from specscope.engine.workload import WorkloadSpec, run_workload
from specscope.io.trace import compact

pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    from specscope.engine.models import tiny_pair

    tmp = tmp_path_factory.mktemp("nb")
    return run_workload(tiny_pair(), SpecConfig(num_steps=3),
                        WorkloadSpec(requests=12, concurrency=4, max_new_tokens=24, temperature=0.7),
                        tmp / "run.jsonl", progress=False)


def test_frames_agree_with_the_report(trace, tmp_path):
    t = specscope.open(trace)
    rep = t.report()
    steps = t.steps()
    measured = rep["runs"][0]["run"]["run_id"]
    mine = steps[steps.run_id == measured]
    totals = rep["runs"][0]["totals"]
    assert mine.num_accepted.sum() == totals["accepted_tokens"]
    assert (mine.num_drafted > 0).sum() == totals["num_drafts"]
    reqs = t.requests()
    assert set(reqs.columns) >= {"acceptance_length", "category", "flags"}
    assert reqs[reqs.run_id == measured].accepted.sum() == totals["accepted_tokens"]
    # the same trace as Parquet opens into the same verify entries, straight from Arrow
    pq = compact([trace], tmp_path / "run.parquet")
    again = specscope.open(pq).steps()
    assert len(again) == len(steps) and again.num_accepted.sum() == steps.num_accepted.sum()
    assert t.compare(specscope.open(trace)).query("metric == 'mean_acceptance_length'").delta_pct.iloc[0] == 0
    # explain: the CLI's object (the trace carries its reference run)
    ex = t.explain(tpot_ms=50)
    (e,) = ex["runs"].values()
    assert e["verdict"] and ex["engine_configs"]["k_by_batch_size"]


def test_a_sweep_folder(trace, tmp_path):
    import shutil

    folder = tmp_path / "sweep"
    folder.mkdir()
    shutil.copy(trace, folder / "a.jsonl")
    shutil.copy(trace, folder / "b.jsonl")
    assert len(specscope.open(folder).requests()) == 2 * len(specscope.open(trace).requests())


def test_an_importable_file_opens_as_it_imports(samples):
    cats = specscope.open(samples / "specbench_sps68m_answers_excerpt.jsonl").categories(
        specscope.open(samples / "specbench_vanilla_answers_excerpt.jsonl"))
    assert len(cats) == 13 and cats.speedup.notna().all()
