"""Metrics across nodes through real Prometheus servers: three node collectors (each a
``specscope record`` process with its own recorder and node name), a site Prometheus scraping
them, a central Prometheus federating from the site and evaluating the fleet rules. The
central PromQL totals equal the sum of the nodes' traces exactly, per node and across them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from specscope.collector.stats import SpecStats
from specscope.exporters.rules import alert_rules
from specscope.io.trace import read_trace
from specscope.serving.harness import free_port
from tests.conftest import ROOT
from tests.metrics_pages import query, stop

NODES = ("node-a1", "node-a2", "node-a3")


def _prometheus(tmp_path, name: str, config: str, port: int) -> subprocess.Popen:
    (tmp_path / f"{name}.yml").write_text(config)
    return subprocess.Popen([shutil.which("prometheus"), f"--config.file={tmp_path / f'{name}.yml'}",
                             f"--storage.tsdb.path={tmp_path / f'{name}-tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _value(port: int, expr: str) -> dict[str, float]:
    try:
        return {r["metric"].get("node", ""): float(r["value"][1]) for r in query(port, expr)}
    except OSError:
        return {}


def test_central_prometheus_totals_equal_the_nodes_traces(tmp_path, prometheus_ready):
    node_ports = [free_port() for _ in NODES]
    site, central = free_port(), free_port()
    rules = tmp_path / "fleet-rules.yml"
    rules.write_text(alert_rules("fleet"))
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in node_ports)
    procs = [
        _prometheus(tmp_path, "site", "global:\n  scrape_interval: 1s\n  external_labels: {site: a}\n"
                    f"scrape_configs:\n  - job_name: specscope\n    static_configs:\n"
                    f"      - targets: [{targets}]\n", site),
        _prometheus(tmp_path, "central", "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    f"rule_files: ['{rules}']\nscrape_configs:\n  - job_name: federate\n"
                    "    honor_labels: true\n    metrics_path: /federate\n"
                    "    params: {'match[]': ['{__name__=~\"specscope_.*\"}']}\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{site}']\n", central)]
    try:
        for i, (node, port) in enumerate(zip(NODES, node_ports)):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "specscope", "record", "--model", "tiny", "--requests", "6",
                 "--concurrency", "3", "--max-new-tokens", "24", "--temperature", "0.8",
                 "--seed", str(i), "--quiet", "--no-reference", "--metrics-port", str(port),
                 "--node-label", "--linger", "120", "-o", str(tmp_path / f"{node}.jsonl")],
                cwd=ROOT, env=dict(os.environ, SPECSCOPE_NODE=node),
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        for proc in procs[2:]:
            deadline = time.time() + 300
            line = ""
            while time.time() < deadline:
                line = proc.stdout.readline()
                if not line or line.startswith("trace written"):
                    break
            assert line.startswith("trace written"), "a node's workload did not finish"
        want = {node: SpecStats().observe_all(read_trace(tmp_path / f"{node}.jsonl").records)
                for node in NODES}
        per_node = {n: s.accepted_tokens for n, s in want.items()}
        got: dict[str, float] = {}
        deadline = time.time() + 90
        while time.time() < deadline:
            got = _value(central, "sum by (node) (specscope_accepted_tokens_total)")
            if got == per_node:
                break
            time.sleep(0.5)
        assert got == per_node  # each node's figure, through the site, at the centre
        total = sum(per_node.values())
        assert _value(central, "sum(specscope_accepted_tokens_total)") == {"": total}
        drafted = sum(s.draft_tokens for s in want.values())
        drafts = sum(s.num_drafts for s in want.values())
        assert _value(central, "sum(specscope_draft_tokens_total)") == {"": drafted}
        # the fleet's recording rules, evaluated at the centre, say the same
        deadline = time.time() + 30
        while time.time() < deadline and _value(central, "sum(specscope_fleet_accepted_tokens)") != {"": total}:
            time.sleep(0.5)
        assert _value(central, "sum(specscope_fleet_accepted_tokens)") == {"": total}
        assert _value(central, "sum(specscope_fleet_drafts)") == {"": drafts}
        pos = query(central, "sum by (position) (specscope_accepted_tokens_per_position_total)")
        per_pos = [0] * max(len(s.accepted_per_pos) for s in want.values())
        for s in want.values():
            for p, n in enumerate(s.accepted_per_pos):
                per_pos[p] += n
        assert sorted((int(r["metric"]["position"]), float(r["value"][1])) for r in pos) == \
            list(enumerate(map(float, per_pos)))
        # the site's external label travelled with every series; each node one instance
        assert {r["metric"].get("site") for r in query(central, "specscope_drafts_total")} == {"a"}
        assert len(query(central, "count by (instance) (specscope_drafts_total)")) == 3
        # every panel of the fleet board returns data from the central Prometheus
        from specscope.exporters.fleet_rules import FLEET_PANELS

        deadline = time.time() + 60  # rates over the rules' windows need two samples at the centre
        while True:
            empty = [t for t, expr in FLEET_PANELS if not query(central, expr)]
            if not empty or time.time() > deadline:
                break
            time.sleep(1)
        assert not empty, empty
        # the dashboard's Prometheus source gives one view per node, each the node's own
        from specscope.dashboard.promsource import views_from_prometheus

        views = {v.node: v.section.as_dict()["totals"] for v in
                 views_from_prometheus(f"http://127.0.0.1:{central}", minutes=5)}
        assert {n: t["accepted_tokens"] for n, t in views.items()} == per_node
        assert {n: t["num_drafts"] for n, t in views.items()} == {n: s.num_drafts for n, s in want.items()}
    finally:
        for proc in reversed(procs):
            stop(proc)
