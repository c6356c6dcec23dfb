"""Detectors: false-alarm rate on clean runs of the reference decoder, and what they catch."""

from __future__ import annotations

import pytest

from specscope.collector.detectors import run_detectors
from specscope.collector.stats import SpecStats
from specscope.engine.decoder import SpecConfig
from specscope.engine.workload import WorkloadSpec, run_workload
from specscope.io.trace import read_trace

CLEAN = [(0.0, 1.0, 0), (0.5, 1.0, 0), (0.7, 1.0, 0), (1.0, 1.0, 0), (0.7, 0.9, 0),
         (0.9, 1.0, 20), (1.3, 0.8, 0), (0.7, 1.0, 0)]


@pytest.mark.parametrize("seed", [0, 1])
def test_no_false_alarm_on_clean_reference_runs(tiny, tmp_path, seed):
    """16 clean runs (8 sampling settings x 2 seeds; chain, tree, both verify modes): 0 flags."""
    for i, (t, p, k) in enumerate(CLEAN):
        cfg = (SpecConfig(num_steps=3, topk=2, num_draft_tokens=6) if i % 3 == 2
               else SpecConfig(num_steps=3, verify_mode="target-temperature" if i % 2 else ""))
        spec = WorkloadSpec(requests=8, concurrency=8, max_new_tokens=48, temperature=t,
                            top_p=p, top_k=k, seed=seed * 100 + i, reference=False)
        path = run_workload(tiny, cfg, spec, tmp_path / f"{i}.jsonl", progress=False)
        stats = SpecStats().observe_all(read_trace(path).records)
        assert run_detectors(stats) == [], (t, p, k, cfg.config_id)
