"""Traces for the dashboard tests: a clean run and a silent-greedy run on the tiny models."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def dash_traces(tmp_path_factory):
    from specscope.engine.decoder import SpecConfig
    from specscope.engine.models import tiny_pair
    from specscope.engine.workload import WorkloadSpec, run_workload

    folder = tmp_path_factory.mktemp("dash-traces")
    pair = tiny_pair()
    spec = WorkloadSpec(requests=16, concurrency=8, max_new_tokens=40, temperature=0.8)
    run_workload(pair, SpecConfig(num_steps=3), spec, folder / "clean.jsonl", progress=False,
                 run_id="clean-s3")
    run_workload(pair, SpecConfig(num_steps=2, fault="silent_greedy"), spec,
                 folder / "faulted.jsonl", progress=False, run_id="faulted-s2")
    return folder
