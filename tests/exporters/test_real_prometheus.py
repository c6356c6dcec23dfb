"""A real Prometheus scrapes two specscope exporters; PromQL agrees with the traces exactly."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from specscope.collector.stats import SpecStats
from specscope.io.trace import read_trace
from specscope.serving.harness import free_port as _free_port
from tests.conftest import ROOT
from tests.metrics_pages import query as _query
from tests.metrics_pages import stop as _stop

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None,
                                reason="needs Debian's prometheus package (.ci/run installs it)")




def _scalar(port: int, expr: str) -> float | None:
    result = _query(port, expr)
    return float(result[0]["value"][1]) if result else None


def test_promql_acceptance_equals_trace_totals(tmp_path):
    exporter_ports = [_free_port(), _free_port()]
    prom_port = _free_port()
    config = tmp_path / "prometheus.yml"
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in exporter_ports)
    config.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n"
                      f"  - job_name: specscope\n    static_configs:\n      - targets: [{targets}]\n")
    procs = []
    try:
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(prom)
        for i, port in enumerate(exporter_ports):
            # node 1 samples with top-p under the seeded fallback fault: fallbacks and an
            # anomaly for the board's panels to show
            fault = ["--top-p", "0.9", "--fault", "topk_fallback"] if i else []
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "specscope", "record", "--model", "tiny", "--requests", "8",
                 "--concurrency", "4", "--max-new-tokens", "32", "--temperature", str(0.5 * i),
                 "--seed", str(i), "--quiet", "--metrics-port", str(port), "--linger", "120",
                 *fault, "-o", str(tmp_path / f"node{i}.jsonl")], cwd=ROOT,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        for proc in procs[1:]:
            deadline = time.time() + 300
            while time.time() < deadline:
                line = proc.stdout.readline()
                if not line or line.startswith("trace written"):
                    break
            assert line.startswith("trace written"), "the workload did not finish"
        expected = SpecStats().observe_all(
            read_trace([tmp_path / "node0.jsonl", tmp_path / "node1.jsonl"]).records)
        accepted = None
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                accepted = _scalar(prom_port, "sum(specscope_accepted_tokens_total)")
            except OSError:
                accepted = None
            if accepted == expected.accepted_tokens:
                break
            time.sleep(0.5)
        assert accepted == expected.accepted_tokens
        rate = _scalar(prom_port, "sum(specscope_accepted_tokens_total) / sum(specscope_draft_tokens_total)")
        assert rate == pytest.approx(expected.acceptance_rate, rel=1e-12)
        length = _scalar(prom_port, "1 + sum(specscope_accepted_tokens_total) / sum(specscope_drafts_total)")
        assert length == pytest.approx(expected.mean_acceptance_length, rel=1e-12)
        per_pos = _query(prom_port, "sum by (position) (specscope_accepted_tokens_per_position_total)"
                                    " / sum by (position) (specscope_drafted_tokens_per_position_total)")
        got = {int(r["metric"]["position"]): float(r["value"][1]) for r in per_pos}
        assert [got[p] for p in sorted(got)] == pytest.approx(expected.per_position_acceptance, rel=1e-12)
        instances = _query(prom_port, "count by (instance) (specscope_drafts_total)")
        assert len(instances) == 2  # one exporter per node; Prometheus aggregates
        # every panel of `specscope grafana` returns data from this Prometheus
        from specscope.exporters.grafana import PANELS

        time.sleep(3)  # rates need two scrapes after the workloads' last counts
        empty = [title for title, expr in PANELS if not _query(prom_port, expr)]
        assert not empty, empty
        # the dashboard's Prometheus source reads the same counters through the HTTP API
        from specscope.dashboard.promsource import views_from_prometheus

        views = views_from_prometheus(f"http://127.0.0.1:{prom_port}", minutes=5)
        # the speculative configuration (both instances summed) and the no-speculation reference
        assert sorted(v.run.num_steps for v in views) == [0, 3]
        (spec,) = [v for v in views if v.run.num_steps == 3]
        totals = spec.section.as_dict()["totals"]
        assert totals["accepted_tokens"] == expected.accepted_tokens
        assert totals["mean_acceptance_length"] == pytest.approx(expected.mean_acceptance_length)
        assert totals["per_position_acceptance"] == pytest.approx(expected.per_position_acceptance)
    finally:
        for proc in procs:
            _stop(proc)


def test_dashboard_reads_engine_series_through_prometheus(tmp_path, samples):
    """Prometheus scrapes two vLLM servers' pages (a real page, its counters advancing per
    scrape); the dashboard's Prometheus source gives one vLLM run per model and rank with the
    two instances' counters summed and vLLM's acceptance."""
    from specscope.dashboard.promsource import views_from_prometheus
    from tests.metrics_pages import prometheus_scraping, scaled, serving

    page = (samples / "vllm_metrics_scrape_specdecode_1.txt").read_text()
    with serving(lambda n: scaled(page, lambda _: n + 1)) as a, \
            serving(lambda n: scaled(page, lambda _: 2 * (n + 1))) as b, \
            prometheus_scraping(tmp_path, [a, b], job="vllm") as prom_port:
        n = len(_query(prom_port, "vllm:spec_decode_num_drafts_total"))
        views = views_from_prometheus(f"http://127.0.0.1:{prom_port}", minutes=2)
    assert n == 2 and len(views) == 1
    v = views[0]
    assert v.run.algorithm == "vllm" and v.run.num_steps == 3 and v.run.model == "MiniMaxAI/MiniMax-M2.5"
    t = v.section.as_dict()["totals"]
    # each instance's counters are whole multiples of the page's; their sum keeps its ratios
    assert t["num_drafts"] % 43680 == 0 and t["num_drafts"] >= 2 * 43680
    assert t["mean_acceptance_length"] == pytest.approx(1 + 58695 / 43680)
    assert t["acceptance_rate"] == pytest.approx(58695 / 131040)


def test_every_engines_board_and_rules_return_data_and_the_dashboard_agrees(tmp_path, samples):
    """Prometheus scrapes a vLLM (the real page), an SGLang (the real page with the spec-decode
    families its source registers), a TensorRT-LLM and a llama.cpp server whose counters advance
    per scrape: every panel of each engine's board and every recording rule returns data, and
    the dashboard's Prometheus source gives each engine's acceptance as the pages say."""
    from specscope.dashboard.promsource import views_from_prometheus
    from specscope.exporters.engine_rules import exprs, panels
    from specscope.importers import metrics as M
    from tests.metrics_pages import (advanced, llamacpp_page, prometheus_scraping, serving,
                                     sglang_spec, trtllm_page)

    sglang = (samples / "sglang_metrics_scrape_2.txt").read_text()
    # the real page's generated tokens plus the spec page's 2000 + 800, over verify calls
    # chosen to give an acceptance length near 2.8
    generated = sum(float(x.split()[-1]) for x in sglang.splitlines()
                    if x.startswith("sglang:generation_tokens_total")) + 2800
    verify = round(generated / 2.8)
    pages = {
        "vllm": (samples / "vllm_metrics_scrape_specdecode_1.txt").read_text(),
        "sglang": sglang + sglang_spec(verify, 2000, 800, 2.75, 0.6, steps=3),
        "trtllm": trtllm_page(3100, 1420, 2.4, per_pos=[(1000, 700), (1000, 450), (1000, 250)]),
        "llamacpp": llamacpp_page(400, 1600, 500, per_pos=(300, 120, 60, 20)),
    }
    with serving(lambda n: advanced(pages["vllm"], n + 1)) as v, \
            serving(lambda n: advanced(pages["sglang"], n + 1)) as s, \
            serving(lambda n: advanced(pages["trtllm"], n + 1)) as t, \
            serving(lambda n: advanced(pages["llamacpp"], n + 1)) as ll, \
            prometheus_scraping(tmp_path, [v, s, t, ll]) as prom_port:
        n = len(_query(prom_port, "count_over_time(up[1m]) >= 4"))
        empty = []
        for engine in ("vllm", "sglang", "trtllm", "llamacpp"):
            e = exprs(M.BY_NAME[engine])
            queries = [q for _, q in panels(engine)] + [
                x.replace("__W__", "1m") for x in (e.rate, e.length, e.per_pos) if x]
            empty += [f"{engine}: {q}" for q in queries if not _query(prom_port, q)]
        views = views_from_prometheus(f"http://127.0.0.1:{prom_port}", minutes=2)
    assert n == 4 and not empty, empty
    by_engine = {view.run.algorithm: view.section.as_dict()["totals"] for view in views}
    assert set(by_engine) == {"vllm", "sglang", "trtllm", "llamacpp"}
    assert by_engine["vllm"]["mean_acceptance_length"] == pytest.approx(1 + 58695 / 43680)
    assert by_engine["sglang"]["mean_acceptance_length"] == pytest.approx(generated / verify)
    assert by_engine["sglang"]["reported_mean_acceptance_length"] == pytest.approx(2.75)
    assert by_engine["trtllm"]["mean_acceptance_length"] == pytest.approx(2.4)
    assert by_engine["trtllm"]["per_position_acceptance"] == pytest.approx([0.7, 0.45, 0.25])
    assert by_engine["llamacpp"]["acceptance_rate"] == pytest.approx(500 / 1600)
