"""A probe written as a trace reads back in ``report`` (its verdict and each failing check) and
in the Sampling truth page's probe table."""

from __future__ import annotations

from specscope.collector.report import build_report
from specscope.collector.text import format_report
from specscope.dashboard.figures.live import probe_rows
from specscope.collector.section import Section
from specscope.io.trace import read_trace, write_trace
from specscope.probe import probe_records
from specscope.probe.client import Answer
from tests.probe.test_exporter import _result


def test_a_probe_trace_reads_in_report_and_on_the_truth_page(tmp_path):
    r = _result("fail")
    r.checks[1].evidence["message"] = "300 of 300 committed tokens are their position's top-1"
    r.answers = [Answer("temperature", "p", {"temperature": 0.8},
                        response={"id": "c1", "choices": [{}]}, drafted=30, accepted=12)]
    path = write_trace(tmp_path / "probe.jsonl", probe_records(r, "probe-1"))
    rep = build_report(read_trace(path).records)
    (sec,) = rep["runs"]
    assert sec["probe"]["verdict"] == "fail" and sec["probe"]["url"] == "http://e:8000"
    assert [f["check"] for f in sec["probe"]["failed"]] == ["probe_temperature_honoured"]
    assert "black-box probe of http://e:8000: FAIL" in format_report(rep)
    # the engine's own counts of the request travel with it
    assert sec["totals"]["accepted_tokens"] is None or sec["totals"]["draft_tokens"] in (None, 30)

    class V:
        label, section = "probe-1", Section.from_dict(sec)
    (row,) = probe_rows([V()])
    assert row["verdict"] == "FAIL" and "300 of 300" in row["failed"]
