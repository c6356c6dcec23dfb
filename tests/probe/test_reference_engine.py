"""The probe against the reference engine (``specscope serve-engine``'s application, the tiny
model drafting a chain of 3), which returns raw log-probabilities as vLLM does: clean, no check
FAILs; each seeded fault FAILs the classes it reaches and leaves the others alone."""

from __future__ import annotations

import pytest

from specscope.probe import ProbePlan, format_probe, probe

pytest.importorskip("fastapi")

#: one pass over the classes (no further rounds): a clean engine must not FAIL on it
PLAN = ProbePlan(classes=("greedy", "temperature", "top-p", "top-p/unset-t"), requests=16,
                 max_tokens=48, until_decided=False, fail_fast=False)


def _probe(fault: str):
    from specscope.engine.decoder import SpecConfig
    from specscope.serving.inprocess import in_process
    from specscope.serving.server import Engine, EngineOptions

    eng = Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=3, fault=fault),
                               max_batch=4, hooks=False))
    try:
        with in_process(eng.app()) as transport:
            return probe("http://testserver", PLAN, transport=transport)
    finally:
        eng.close()


@pytest.mark.parametrize("fault,failing", [
    ("", set()),
    # verify commits the argmax for every sampled request
    ("silent_greedy", {"temperature", "top-p", "top-p/unset-t"}),
    # only requests that leave the temperature out are decoded greedily
    ("unset_temperature_greedy", {"top-p/unset-t"}),
])
def test_each_seeded_fault_fails_the_classes_it_reaches_and_no_other(fault, failing):
    result = _probe(fault)
    failed = {c.evidence.get("probe_class") for c in result.checks
              if c.state == "fail" and c.check.startswith("temperature honoured")}
    assert failed == failing, format_probe(result)
    assert (result.verdict == "fail") == bool(failing), format_probe(result)
    assert all(c.state != "fail" for c in result.checks
               if c.evidence.get("probe_class") == "greedy"), format_probe(result)
