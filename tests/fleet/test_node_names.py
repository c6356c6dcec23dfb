"""A node's name comes back whole from every reader of the fleet store: spaces, slashes, ``=``,
``%`` and non-ASCII in ``$SPECSCOPE_NODE`` survive Parquet, DuckDB, Spark, the collector and
the notebook, two names that sanitise alike stay two nodes, and a store written with sanitised
names reads back as the names it holds."""

from __future__ import annotations

import dataclasses
import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specscope import schema
from specscope.io.columns import expand
from specscope.io.store import Where, encode_node, open_store, partition_values
from specscope.io.trace import read_trace, write_trace

pytest.importorskip("pyarrow")
torch = pytest.importorskip("torch")

#: "rack 3/gpu 5" and "rack_3_gpu_5" were one folder when the store sanitised node names
NAMES = ["rack 3/gpu 5", "rack_3_gpu_5", "a=b", "50%", "nœud-ü"]


@given(st.text(min_size=1, max_size=40))
def test_a_node_name_is_its_partition_value_decoded(name):
    value = encode_node(name)
    # ASCII outside letters, digits and -_. is escaped (no folder separator, no second "=")
    assert value and all(c.isascii() and (c.isalnum() or c in "-_.%") or not c.isascii() for c in value)
    assert urllib.parse.unquote(value) == name
    assert partition_values(f"verify/date=2026-12-01/node={value}/part.parquet")["node"] == name


def _store(tmp_path, run_record, monkeypatch):
    from tests.io.test_wire import _recorder

    records = []
    for i, name in enumerate(NAMES):
        monkeypatch.setenv("SPECSCOPE_NODE", name)
        rec = _recorder(dataclasses.replace(run_record, run_id=f"run-{i}"), steps=2 + i)
        out, cols = rec.drain_columns(wait=True)
        records += out + cols
    store = tmp_path / "store.parquet"
    write_trace(store, records)
    return store, expand(records)


def _steps_by_node(records):
    out: dict[str, int] = {}
    for r in records:
        if isinstance(r, schema.VerifyStepRecord):
            out[r.node] = out.get(r.node, 0) + len(r.entries)
    return out


def test_node_names_come_back_whole_from_parquet_duckdb_and_the_notebook(tmp_path, run_record,
                                                                         monkeypatch):
    pytest.importorskip("duckdb")
    pytest.importorskip("pandas")
    import specscope
    from specscope.fleet import fleet_figures
    from specscope.io.parquet import iter_verify_columns

    store, written = _store(tmp_path, run_record, monkeypatch)
    want = _steps_by_node(written)
    assert sorted(want) == sorted(NAMES)
    # Parquet: records, and the columns the collector's replay reads
    back = read_trace(store).records
    assert _steps_by_node(back) == want
    assert {(type(r).__name__, r.run_id, r.node) for r in back if hasattr(r, "node")} == \
        {(type(r).__name__, r.run_id, NAMES[int(r.run_id[-1])]) for r in written if hasattr(r, "node")}
    assert {c.node: len(c) for c in iter_verify_columns(store)} == want
    # DuckDB groups and selects by the name itself
    by_node = {f.group["node"]: f.request_steps for f in fleet_figures(store, ("node",))}
    assert by_node == want
    for name in NAMES:
        one = Where(nodes=(name,))
        assert _steps_by_node(read_trace(store, one).records) == {name: want[name]}
        assert [f.group["node"] for f in fleet_figures(store, ("node",), one)] == [name]
        assert _steps_by_node(read_trace(f"{store}#node={name}").records) == {name: want[name]}
    # the notebook: a node column, and the fleet query's selection
    steps = specscope.open(store).steps()
    assert steps.groupby("node", observed=True).size().to_dict() == want
    picked = specscope.open(store, where="node=rack 3/gpu 5|nœud-ü").steps()
    assert set(picked.node) == {"rack 3/gpu 5", "nœud-ü"} and len(picked) == \
        want["rack 3/gpu 5"] + want["nœud-ü"]
    same = specscope.open(store, where=Where(nodes=("a=b",))).steps()
    assert set(same.node) == {"a=b"}
    jsonl = tmp_path / "t.jsonl"
    write_trace(jsonl, written)
    from_jsonl = specscope.open(jsonl, where="node=50%").steps()
    assert set(from_jsonl.node) == {"50%"} and len(from_jsonl) == want["50%"]


def test_the_collector_replaying_a_store_labels_each_node_by_its_name(tmp_path, run_record,
                                                                      monkeypatch):
    from specscope.collector.service import LABELS, Collector
    from specscope.exporters.replay import replay

    store, written = _store(tmp_path, run_record, monkeypatch)
    collector = Collector(node_label=True)
    replay([store], collector, progress=False)
    snap = collector.snapshot()
    assert {key[len(LABELS)] for key in snap.totals} == set(NAMES)
    accepted = {key[len(LABELS)]: s.accepted_tokens for key, s in snap.totals.items()}
    assert accepted["rack 3/gpu 5"] != accepted["rack_3_gpu_5"]


def test_a_store_written_with_sanitised_names_reads_as_the_names_it_holds(tmp_path, run_record,
                                                                          monkeypatch):
    """Before node names were kept whole, ``rack 3/gpu 5`` was written as ``node=rack_3_gpu_5``:
    such a store reads, groups and selects by that name."""
    pytest.importorskip("duckdb")
    from specscope.fleet import fleet_figures

    from tests.io.test_wire import _recorder

    monkeypatch.setenv("SPECSCOPE_NODE", "rack 3/gpu 5")
    rec = _recorder(run_record)
    out, cols = rec.drain_columns(wait=True)
    store = tmp_path / "old.parquet"
    write_trace(store, out + cols)
    for folder in sorted(store.rglob("node=rack%203%2Fgpu%205"), reverse=True):
        folder.rename(folder.with_name("node=rack_3_gpu_5"))
    assert not list(store.rglob("*%*"))
    back = read_trace(store).records
    assert {r.node for r in back if hasattr(r, "node")} == {"rack_3_gpu_5"}
    assert [f.group["node"] for f in fleet_figures(store, ("node",))] == ["rack_3_gpu_5"]
    assert read_trace(store, Where(nodes=("rack_3_gpu_5",))).records
    assert open_store(store).files("verify", Where(nodes=("rack 3/gpu 5",))) == []


def test_spark_reads_node_names_whole(tmp_path, run_record, monkeypatch, spark_ready):
    pytest.importorskip("duckdb")
    from specscope.fleet import fleet_figures

    store, _ = _store(tmp_path, run_record, monkeypatch)
    queries = [(("node",), Where()), (("node",), Where(nodes=("rack 3/gpu 5", "nœud-ü", "50%")))]
    from specscope.fleet import spark as sp

    spark = sp.session("local[1]")
    try:
        got = [[f.to_dict() for f in fleet_figures(store, by, w, engine="spark", spark=spark)]
               for by, w in queries]
    finally:
        spark.stop()
    want = [[f.to_dict() for f in fleet_figures(store, by, w)] for by, w in queries]
    assert got == want
    assert [f["node"] for f in got[1]] == sorted(["rack 3/gpu 5", "nœud-ü", "50%"])
