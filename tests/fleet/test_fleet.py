"""A fleet of eight nodes, one with a seeded fault, in one store: ``report --by node`` names the
faulted node; DuckDB's per-configuration and per-node figures equal the records' own; a real
Spark cluster (a master and two workers, each a JVM started here and stopped by PID) gives the
same figures exactly."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specscope import schema
from specscope.collector.stats import SpecStats
from specscope.fleet import fleet_figures
from specscope.io.store import Where
from specscope.io.trace import read_trace
from tests.conftest import run_cli

pytest.importorskip("duckdb")
NODES = [f"gpu-{i:02d}" for i in range(8)]
FAULTY = "gpu-05"
PROMPTS = [[5, 17, 33, 2, 90, 41], [7, 7, 1, 64, 3], [11, 200, 9, 9, 31], [2, 4, 8, 16, 32]]


def _node(tiny, store, run: schema.RunRecord, node: str, fault: str, steps: int, seed: int) -> None:
    from specscope.engine.decoder import Request, SpecConfig, SpeculativeDecoder
    from specscope.hooks import Recorder
    from specscope.io.parquet import ParquetTraceWriter

    writer = ParquetTraceWriter(store, roll_records=400, roll_s=3600)
    rec = Recorder(dataclasses.replace(run, node=node), ring_slots=1024, sinks=[writer])
    dec = SpeculativeDecoder(tiny.target, tiny.draft, SpecConfig(num_steps=steps, fault=fault),
                             recorder=rec, seed=seed)
    for i in range(3):
        dec.generate([Request(f"{node}-{i}-{j}", PROMPTS[(i + j) % 4], max_new_tokens=160,
                              temperature=0.8) for j in range(4)])
    rec.close()


@pytest.fixture(scope="module")
def fleet(tiny, tmp_path_factory):
    """Eight nodes serve one configuration under one run id (gpu-05 verifies greedily while it
    says it samples); two of them also serve a second configuration."""
    store = tmp_path_factory.mktemp("fleet") / "store.parquet"
    base = dict(algorithm="eagle", topk=1, backend="cpu", model="tiny",
                verify_mode=schema.SPECULATIVE_SAMPLING)
    a = schema.RunRecord(run_id="nightly-a", config_id="eagle-s3-k1-d4", num_steps=3,
                         num_verify_tokens=4, **base)
    b = schema.RunRecord(run_id="nightly-b", config_id="eagle-s2-k1-d3", num_steps=2,
                         num_verify_tokens=3, **base)
    for i, node in enumerate(NODES):
        _node(tiny, store, a, node, "silent_greedy" if node == FAULTY else "", 3, seed=i)
    for i, node in enumerate(NODES[:2]):
        _node(tiny, store, b, node, "", 2, seed=10 + i)
    return store


def test_report_by_node_names_the_faulted_node_of_eight(fleet):
    out = run_cli("report", str(fleet), "--by", "node")
    assert out.returncode == 1, out.stderr  # a FAIL: exit 1, as a CI gate reads it
    assert f"nightly-a: FAIL on node {FAULTY}: sampling truth (speculative-sampling) FAIL" in out.stdout, out.stderr
    assert "nightly-b: PASS across 2 node(s)" in out.stdout
    data = json.loads(run_cli("report", str(fleet), "--by", "node", "--json").stdout)
    verdicts = {(s["run_id"], s["node"]): s["verdict"] for s in data["nodes"]}
    assert verdicts == {**{("nightly-a", n): "PASS" for n in NODES if n != FAULTY},
                        ("nightly-a", FAULTY): "FAIL",
                        ("nightly-b", "gpu-00"): "PASS", ("nightly-b", "gpu-01"): "PASS"}
    # the pooled run does not say which node; a filter to the healthy seven passes
    healthy = [a for n in NODES if n != FAULTY for a in ("--node", n)]
    assert run_cli("report", str(fleet), "--by", "node", *healthy).returncode == 0


def _expected(records, key) -> dict[tuple, SpecStats]:
    out: dict[tuple, SpecStats] = {}
    for r in records:
        if isinstance(r, schema.VerifyStepRecord):
            out.setdefault(key(r), SpecStats()).observe(r)
    return out


def test_duckdb_fleet_figures_equal_the_records_own(fleet):
    records = read_trace(fleet).records
    for by, key in ((("config", "node"), lambda r: (r.config_id, r.node)),
                    (("config",), lambda r: (r.config_id,)), (("node",), lambda r: (r.node,))):
        want = _expected(records, key)
        got = {tuple(f.group.values()): f for f in fleet_figures(fleet, by)}
        assert set(got) == set(want), by
        for k, s in want.items():
            f = got[k]
            assert (f.num_drafts, f.draft_tokens, f.accepted_tokens) == \
                (s.num_drafts, s.draft_tokens, s.accepted_tokens), (by, k)
            assert f.accepted_per_pos == s.accepted_per_pos and f.drafted_per_pos == s.drafted_per_pos
            assert f.mean_acceptance_length == s.mean_acceptance_length  # exact: same integers
    # filters reach the partitions: one node, one configuration
    (one,) = fleet_figures(fleet, ("config", "node"), Where(nodes=("gpu-01",), configs=("eagle-s2-k1-d3",)))
    assert one.group == {"config": "eagle-s2-k1-d3", "node": "gpu-01"} and one.num_drafts > 0
    assert fleet_figures(fleet, ("node",), Where(since="2099-01-01")) == []
    cli = json.loads(run_cli("fleet", str(fleet), "--by", "node", "--json").stdout)
    assert [r["node"] for r in cli["rows"]] == NODES


def test_a_spark_cluster_gives_duckdbs_figures_exactly(fleet, tmp_path, spark_ready):
    from specscope.fleet import spark as sp
    from tests.fleet.cluster import LocalCluster

    queries = [(("config", "node"), Where()),
               (("date", "node"), Where(nodes=("gpu-05", "gpu-06"), configs=("eagle-s3-k1-d4",),
                                        since="2000-01-01"))]
    with LocalCluster(workers=2, work_dir=tmp_path / "spark") as cluster:
        assert len(cluster.pids) == 3  # a master and two workers, each its own JVM
        spark = sp.session(cluster.master)
        try:
            got = [[f.to_dict() for f in fleet_figures(fleet, by, w, engine="spark", spark=spark)]
                   for by, w in queries]
            # the work ran on the workers' executors (two), not in the driver
            executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        finally:
            spark.stop()
    assert all(p.poll() is not None for p in cluster.procs)  # stopped by PID
    assert executors == 2
    want = [[f.to_dict() for f in fleet_figures(fleet, by, w)] for by, w in queries]
    assert got == want and all(got)


def test_the_dashboards_node_selector_shows_each_nodes_share(fleet):
    """The trace source gives each run pooled and per node; picking a node in the selector
    (the runs callback, over HTTP as the browser calls it) lists that node's runs, and the
    faulted node's share fails sampling truth where its neighbours pass."""
    from specscope.dashboard import TraceSource, create_app

    source = TraceSource([fleet])
    views = {v.run_id: v for v in source.runs()}
    assert {"nightly-a", "nightly-b", *(f"nightly-a@{n}" for n in NODES)} <= set(views)
    truth = {rid: {t["state"] for t in v.section.as_dict()["sampling_truth"]} for rid, v in views.items()}
    assert truth[f"nightly-a@{FAULTY}"] == {"fail"} and truth["nightly-a@gpu-04"] == {"pass"}
    assert views[f"nightly-a@{FAULTY}"].label == f"nightly-a (eagle-s3-k1-d4) on node {FAULTY}"
    app = create_app(source, n_boot=50)
    outputs = [("runs", "options"), ("runs", "value"), ("source-info", "children"),
               ("url", "search"), ("nodes", "options")]

    def call(nodes, changed):
        payload = {"output": "..." .join(f"{i}.{p}" for i, p in outputs).join(["..", ".."]),
                   "outputs": [{"id": i, "property": p} for i, p in outputs],
                   "inputs": [{"id": "tick", "property": "n_intervals", "value": None},
                              {"id": "url", "property": "search", "value": ""},
                              {"id": "runs", "property": "value", "value": None},
                              {"id": "nodes", "property": "value", "value": nodes},
                              {"id": "open-status", "property": "children", "value": None}],
                   "changedPropIds": [changed], "state": []}
        res = app.server.test_client().post("/_dash-update-component", json=payload)
        assert res.status_code == 200, res.data[:500]
        return res.get_json()["response"]

    everything = call(None, "url.search")
    assert [o["value"] for o in everything["nodes"]["options"]] == NODES
    assert everything["runs"]["value"] == ["nightly-a", "nightly-b"]  # pooled runs by default
    picked = call([FAULTY, "gpu-00"], "nodes.value")
    assert {o["value"] for o in picked["runs"]["options"]} == \
        {f"nightly-a@{FAULTY}", "nightly-a@gpu-00", "nightly-b@gpu-00"}
    assert f"nightly-a@{FAULTY}" in picked["runs"]["value"]


def test_compare_and_regress_read_one_node_each_from_the_store(fleet):
    """`compare STORE#node=A STORE#node=B` sets two nodes of one run side by side, with
    intervals; `regress --node` reads that node's partitions only."""
    out = run_cli("compare", f"{fleet}#node=gpu-04", f"{fleet}#node={FAULTY}", "--json",
                  "--bootstrap", "200")
    assert out.returncode == 0, out.stderr
    rows = {r["label"]: r for r in json.loads(out.stdout)["rows"]}
    rate = rows["acceptance rate"]  # each side one node's share of the same run
    assert rate["a"] is not None and rate["b"] is not None and rate["a"] != rate["b"]
    single = run_cli("regress", str(fleet), "--node", FAULTY, "--json", "--bootstrap", "100")
    assert single.returncode == 0, single.stderr
    assert [e["label"].split()[0] for e in json.loads(single.stdout)] == ["nightly-a"]


def test_report_over_a_store_past_the_record_limit_streams_per_node(fleet, monkeypatch):
    """A store with more entries than records can hold is reported from counters, one section
    per configuration and node: the faulted node's sampling truth fails there too."""
    import specscope.cli.traces as traces

    monkeypatch.setattr(traces, "STREAM_ENTRIES", 100)
    out = run_cli("report", str(fleet), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["streamed"]
    truth = {(s["run"]["run_id"], s.get("node")): {t["state"] for t in s["sampling_truth"]}
             for s in report["runs"]}
    assert len(truth) == 10 and truth[("nightly-a", FAULTY)] == {"fail"}
    assert truth[("nightly-a", "gpu-06")] == {"pass"}
