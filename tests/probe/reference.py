"""The reference engine (the tiny model drafting a chain of 3, served in this process) probed with
some classes, clean or with one of its seeded faults."""

from __future__ import annotations

import pytest

from specscope.probe import ProbePlan, ProbeResult, probe


def probe_reference(classes: tuple[str, ...], fault: str = "", **options) -> ProbeResult:
    """One probe of ``classes`` against the reference engine with ``fault`` seeded (none: "")
    and more ``EngineOptions`` (``prefix_cache``)."""
    pytest.importorskip("fastapi")
    from specscope.engine.decoder import SpecConfig
    from specscope.serving.inprocess import in_process
    from specscope.serving.server import Engine, EngineOptions

    eng = Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=3, fault=fault),
                               max_batch=8, hooks=False, **options))
    try:
        with in_process(eng.app()) as transport:
            return probe("http://testserver", ProbePlan(classes=classes, fail_fast=False),
                         transport=transport)
    finally:
        eng.close()
