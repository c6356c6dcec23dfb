"""The typed section the figures read: the same view from a live section and from its JSON."""

from __future__ import annotations

import json
import math

import pytest

from specscope.dashboard import TraceSource
from specscope.collector.section import Section


def test_a_section_types_the_same_from_python_and_from_report_json(dash_traces):
    views = {v.run_id: v for v in TraceSource([dash_traces]).runs()}
    for v in views.values():
        typed = v.section
        from_json = Section.from_dict(json.loads(json.dumps(v.section.as_dict())))
        assert from_json == typed  # histogram keys and infinities come back as written
        assert typed.totals.num_drafts == v.section.as_dict()["totals"]["num_drafts"]
        assert typed.totals.accept_length_histogram  # keys are ints, not JSON's strings
        assert all(isinstance(k, int) for k in typed.totals.accept_length_histogram)
        assert typed.run is not None and typed.run.run_id == v.run_id
    faulted = views["faulted-s2"].section
    assert faulted.gate == "fail" and [a.kind for a in faulted.anomalies] == ["silent_greedy"]
    (truth,) = [t for t in faulted.sampling_truth if t.observed_top1_rate is not None]
    assert truth.flagged and truth.observed_top1_rate == pytest.approx(1.0)


def test_an_impossible_observation_keeps_its_infinite_z_and_newer_fields_are_ignored():
    sec = {"run": None, "totals": {"num_drafts": 3, "a_field_from_a_newer_writer": 1},
           "windows": [], "fallbacks": {}, "latency": {}, "phases": {}, "benchmarks": [],
           "anomalies": [], "eval": {"rates": {}, "gate": {"verdict": None}},
           "sampling_truth": [{"mode_requested": "speculative-sampling", "modes_used": {},
                               "num_positions": 9, "observed_top1_rate": 1.0,
                               "expected_top1_rate": 1.0, "expected_band_95": None, "z": "-inf",
                               "state": "fail"}]}
    typed = Section.from_dict(sec)
    assert typed.run is None and typed.gate is None and typed.totals.num_drafts == 3
    assert typed.totals.mean_acceptance_length is None  # unknown stays unknown
    assert typed.sampling_truth[0].z == -math.inf and typed.sampling_truth[0].flagged
