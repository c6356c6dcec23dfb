"""The fleet store: many writers on one layout, partitions read back, filters, filesystem URIs,
compaction, and traces written before it."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os

import pytest

from specscope import schema
from specscope.io.store import Where, compact_store, open_store, partition_values
from specscope.io.trace import read_trace, write_trace

pytest.importorskip("pyarrow")
DAY = 86_400 * 10**9
T0 = 1_764_806_400 * 10**9  # 2025-12-04 00:00 UTC


def _run(node: str, config: str = "eagle-s3", run_id: str = "fleet-1") -> schema.RunRecord:
    return schema.RunRecord(run_id=run_id, config_id=config, algorithm="eagle", num_steps=3, topk=1,
                            num_verify_tokens=4, backend="cuda", model="m", node=node, started_ns=T0)


def _steps(node: str, n: int, t0: int, accepted: int = 2, run_id: str = "fleet-1",
           config: str = "eagle-s3") -> list[schema.VerifyStepRecord]:
    return [schema.VerifyStepRecord(
        run_id=run_id, config_id=config, rank=0, step=i, t_ns=t0 + i, batch_size=2, node=node,
        entries=tuple(schema.VerifyEntry(request_id=f"{node}-q{j}", num_drafted=3, num_draft_tokens=3,
                                         num_accepted=accepted, accepted_per_pos=(1,) * accepted + (0,) * (3 - accepted),
                                         temperature=0.0) for j in range(2)))
        for i in range(n)]


def _writer(args):
    root, node, parts = args
    from specscope.io.parquet import write_parquet

    os.environ["SPECSCOPE_NODE"] = node
    for p in range(parts):
        write_parquet([_run(node)] * (p == 0) + _steps(node, 5, T0 + p * 100), root)
    return node


def test_writers_on_many_nodes_share_one_store_without_coordinating(tmp_path):
    """Four processes write 12 parts each into the same store at once (two of them into the same
    partition, as two engine processes of one node do): every part lands under its own name, in
    its date/config/run/node partition, and every step reads back with its node."""
    root = tmp_path / "fleet"
    jobs = [(str(root), "gpu-01", 12), (str(root), "gpu-01", 12), (str(root), "gpu-02", 12),
            (str(root), "gpu-03", 12)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_writer, jobs)
    store = open_store(root)
    files = store.files("verify")
    assert len(files) == 48 and len({f.rsplit("/", 1)[1] for f in files}) == 48
    parts = {tuple(partition_values(f[len(store.root):]).values()) for f in files}
    assert parts == {("2025-12-04", "eagle-s3", "fleet-1", n) for n in ("gpu-01", "gpu-02", "gpu-03")}
    records = read_trace(root).records
    steps = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    assert len(steps) == 4 * 12 * 5
    assert {n: sum(r.node == n for r in steps) for n in ("gpu-01", "gpu-02", "gpu-03")} == \
        {"gpu-01": 120, "gpu-02": 60, "gpu-03": 60}
    assert not list(root.rglob(".*.tmp"))  # no half-written part left behind


def test_filters_read_only_the_partitions_selected_and_jsonl_agrees(tmp_path):
    records = [_run("a"), _run("b"), _run("c", config="mtp-s2", run_id="fleet-2")]
    records += _steps("a", 4, T0) + _steps("a", 3, T0 + DAY) + _steps("b", 5, T0 + 2 * DAY)
    records += _steps("c", 2, T0 + DAY, run_id="fleet-2", config="mtp-s2")
    write_trace(tmp_path / "s.parquet", records)
    write_trace(tmp_path / "s.jsonl", records)

    def steps(path, where):
        return sorted((r.node, r.t_ns) for r in read_trace(path, where).records
                      if isinstance(r, schema.VerifyStepRecord))

    cases = [Where(nodes=("a",)), Where(since="2025-12-05"), Where(since="2025-12-05", until="2025-12-05"),
             Where(configs=("mtp-s2",)), Where(nodes=("a", "b"), until="2025-12-04")]
    sizes = []
    for where in cases:
        got = steps(tmp_path / "s.parquet", where)
        assert got == steps(tmp_path / "s.jsonl", where), where
        sizes.append(len(got))
    assert sizes == [7, 10, 5, 2, 4]
    # the selection after '#' in a path is the same Where; a run's record survives a date filter
    sel = read_trace(f"{tmp_path / 's.parquet'}#node=a,since=2025-12-05").records
    assert [type(r).__name__ for r in sel].count("RunRecord") == 1
    assert sum(isinstance(r, schema.VerifyStepRecord) for r in sel) == 3
    with pytest.raises(ValueError, match="not a date"):
        Where.parse("since=yesterday")


def test_a_filesystem_uri_takes_the_same_code_path(tmp_path):
    """An fsspec filesystem (memory://) written and read through the store, and queried by
    DuckDB, gives what the local path gives."""
    fsspec = pytest.importorskip("fsspec")
    from specscope.fleet import fleet_figures

    records = [_run("a"), _run("b")] + _steps("a", 6, T0) + _steps("b", 4, T0, accepted=1)
    uri = "memory://fleet-test/store"
    write_trace(tmp_path / "local.parquet", records)
    from specscope.io.parquet import write_parquet

    write_parquet(records, uri)
    assert fsspec.filesystem("memory").exists("/fleet-test/store/verify")
    assert sorted(map(repr, read_trace(uri).records)) == sorted(map(repr, read_trace(tmp_path / "local.parquet").records))
    from specscope.io.trace import open_writer

    with open_writer("memory://fleet-test/streamed", roll_s=3600) as w:  # serve --trace URI
        w.write(records)
    assert len(read_trace("memory://fleet-test/streamed").records) == len(records)
    remote = [f.to_dict() for f in fleet_figures(uri, ("node",))]
    local = [f.to_dict() for f in fleet_figures(tmp_path / "local.parquet", ("node",))]
    assert remote == local and [r["accepted_tokens"] for r in remote] == [24, 8]


def test_compact_merges_parts_per_partition_and_changes_no_figure(tmp_path):
    from specscope.fleet import fleet_figures

    root = tmp_path / "s.parquet"
    for p in range(6):
        write_trace(root, [_run("a")] * (p == 0) + _steps("a", 3, T0 + p) + _steps("b", 2, T0 + DAY + p))
    store = open_store(root)
    before = [f.to_dict() for f in fleet_figures(root, ("date", "node"))]
    assert len(store.files("verify")) == 12
    counts = compact_store(store, where=Where(nodes=("a",)))
    assert counts == {"partitions": 1, "parts_read": 6, "parts_written": 1}
    assert len(store.files("verify")) == 7  # node b's partition left as it was
    compact_store(store)
    assert len(store.files("verify")) == 2 and len(store.files("run")) == 1
    assert [f.to_dict() for f in fleet_figures(root, ("date", "node"))] == before
    assert len([r for r in read_trace(root).records if isinstance(r, schema.VerifyStepRecord)]) == 30


def test_a_trace_written_before_the_fleet_layout_still_reads(tmp_path):
    """Schema 6 parts in the old config/run layout (no date, no node) read as before, node ''."""
    import pyarrow.parquet as pq

    new = tmp_path / "new.parquet"
    write_trace(new, [_run("a")] + _steps("a", 3, T0))
    old = tmp_path / "old.parquet"
    for f in new.rglob("*.parquet"):
        rel = f.relative_to(new).parts
        dest = old / rel[0] / rel[2] / rel[3] / "part-0.parquet"
        dest.parent.mkdir(parents=True)
        table = pq.read_table(f, partitioning=None)
        meta = dict(table.schema.metadata)
        meta[b"specscope_schema_version"] = b"6"
        pq.write_table(table.replace_schema_metadata(meta), dest)
    records = read_trace(old).records
    assert {type(r).__name__ for r in records} == {"RunRecord", "VerifyStepRecord"}
    assert {r.node for r in records} == {""}
    assert [dataclasses.replace(r, node="a") for r in records if isinstance(r, schema.VerifyStepRecord)] \
        == [r for r in read_trace(new).records if isinstance(r, schema.VerifyStepRecord)]


def test_two_selections_narrow_each_other():
    a = Where.parse("node=a|b,since=2025-12-01")
    both = a.merge(Where(nodes=("b", "c"), until="2025-12-31"))
    assert (both.nodes, both.since, both.until) == (("b",), "2025-12-01", "2025-12-31")
    assert not a.merge(Where(nodes=("z",))).admits({"date": "2025-12-02", "node": "z"})
    assert a.merge(Where()).nodes == ("a", "b")
