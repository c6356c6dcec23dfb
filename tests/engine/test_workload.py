"""The shipped prompt set as a workload takes it: in file order, or every category in turn."""

from __future__ import annotations

from specscope.engine.workload import WorkloadSpec, build_requests, load_prompts


def test_mixed_waves_walk_every_category_in_turn(tiny):
    categories = sorted({p.get("category", "") for p in load_prompts()})
    assert len(categories) >= 7
    plain, _ = build_requests(tiny, WorkloadSpec(requests=8))
    assert len({r.category for r in plain}) == 1  # the file is grouped by category
    seen = []
    for wave in range(3):
        reqs, _ = build_requests(tiny, WorkloadSpec(requests=8, mix=True, first=8 * wave))
        assert len({r.category for r in reqs}) == min(8, len(categories))
        seen += [r.prompt_id for r in reqs]
    assert len(set(seen)) == len(seen)  # the waves take the next prompts, none twice
    assert {p.split("-")[0] for p in seen} >= {"copy", "edit", "refactor", "math", "code"}


def test_categories_choose_and_order_the_round_robin(tiny):
    import pytest

    reqs, _ = build_requests(tiny, WorkloadSpec(requests=6, categories=("copy", "math")))
    assert [r.category for r in reqs] == ["copy", "math"] * 3
    # copying and editing are decoded greedily whatever the workload asks (the prompt says so)
    assert {r.temperature for r in reqs if r.category == "copy"} == {0.0}
    hot, _ = build_requests(tiny, WorkloadSpec(requests=4, temperature=0.7, categories=("math",)))
    assert {r.temperature for r in hot} == {0.7}
    with pytest.raises(ValueError, match="unknown categories poetry"):
        build_requests(tiny, WorkloadSpec(requests=2, categories=("poetry",)))
