"""Every record a process writes names its node; the node crosses the wire and both trace
formats; a collector serving several nodes labels its series with the node."""

from __future__ import annotations

import socket

from specscope import schema
from specscope.collector.service import Collector
from specscope.exporters.prometheus import render
from specscope.io import wire
from specscope.io.columns import expand
from specscope.io.trace import read_trace, write_trace
from tests.io.test_wire import _recorder


def _noded(records):
    return [r for r in records if hasattr(r, "node")]


def test_the_recorder_stamps_its_node_on_every_record(run_record, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSCOPE_NODE", "gpu-07")
    rec = _recorder(run_record)
    out, cols = rec.drain_columns(wait=True)
    records = expand(out + cols) + [rec.health()]
    kinds = {type(r).__name__ for r in records}
    assert {"RunRecord", "VerifyStepRecord", "RequestRecord", "HookHealthRecord"} <= kinds
    assert {r.node for r in _noded(records)} == {"gpu-07"}
    (msg,) = wire.encode(out + cols, pid=1)
    assert {r.node for r in _noded(expand(wire.decode_batch(msg)[1]))} == {"gpu-07"}
    for name in ("t.jsonl", "t.parquet"):
        write_trace(tmp_path / name, records)
        back = read_trace(tmp_path / name).records
        assert {r.node for r in _noded(back)} == {"gpu-07"} and len(back) == len(records), name
    monkeypatch.delenv("SPECSCOPE_NODE")
    assert schema.default_node() == socket.gethostname()
    assert _recorder(run_record).run.node == socket.gethostname()


def _lines(collector, name="specscope_accepted_tokens_total"):
    return [x for x in render(collector.snapshot()).splitlines() if x.startswith(name + "{")]


def test_a_collector_labels_series_with_the_node_once_it_serves_several(run_record, monkeypatch):
    collector = Collector()
    monkeypatch.setenv("SPECSCOPE_NODE", "n1")
    collector.observe(_recorder(run_record).drain(wait=True))
    assert _lines(collector) and all("node=" not in x for x in _lines(collector))  # one node
    monkeypatch.setenv("SPECSCOPE_NODE", "n2")
    collector.observe(_recorder(run_record, steps=2).drain(wait=True))
    lines = _lines(collector)
    assert len(lines) == 2 and {x.split('node="')[1].split('"')[0] for x in lines} == {"n1", "n2"}
    assert all('node="' in x for x in render(collector.snapshot()).splitlines()
               if x.startswith("specscope_drafts_total{"))
    forced = Collector(node_label=True)
    forced.observe(_recorder(run_record).drain(wait=True))
    assert all('node="n2"' in x for x in _lines(forced))
