"""Prometheus exposition: exact text, a prometheus_client registry, auth, TLS, rules, Grafana."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from specscope import schema
from specscope.collector.service import Collector
from specscope.exporters.grafana import dashboard_json
from specscope.exporters.http import MetricsServer
from specscope.exporters.prometheus import METRICS, PromCollector, render
from specscope.exporters.rules import alert_rules
from tests.exporters.promtool_tests import engine_rule_tests, rule_tests
from tests.collector.test_stats import _step


def _collector() -> Collector:
    c = Collector()
    run = schema.RunRecord(run_id="r", config_id="c", algorithm="eagle", num_steps=3, topk=1,
                           num_verify_tokens=4, backend="hip", model='m"1')
    entry = schema.VerifyEntry(request_id="q", num_drafted=3, num_draft_tokens=3, num_accepted=2,
                               accepted_per_pos=(1, 1, 0), temperature=0.7,
                               mode_requested="speculative-sampling",
                               mode_used="speculative-sampling", num_verified=3, num_top1=3,
                               expected_top1=1.2, var_top1=0.7,
                               draft_top1_hist=(0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1))
    c.observe([run, _step([0, 3]), schema.VerifyStepRecord(
        run_id="r", config_id="c", rank=0, step=1, t_ns=5, batch_size=1, entries=(entry,)),
        schema.FallbackRecord(run_id="r", rank=0, step=1, t_ns=5, reason="top_p_unsupported"),
        schema.PhaseRecord(run_id="r", rank=0, step=1, phase="verify_forward", device="cpu",
                           t_start_ns=5, duration_ns=3_000_000),
        schema.RequestRecord(run_id="r", rank=0, request_id="q", t_arrival_ns=0,
                             t_first_token_ns=20_000_000, t_finish_ns=120_000_000,
                             num_prompt_tokens=5, num_output_tokens=11,
                             chunk_times_ns=(20_000_000, 70_000_000, 120_000_000),
                             chunk_num_tokens=(1, 5, 5))])
    c.tick()  # the detectors' pass, as the collector's ticker would run it
    c.health.clear()  # volatile counters aside, the text is exact
    c._pids.clear()
    return c


def test_exposition_text_is_exact(golden):
    text = render(_collector().snapshot())
    golden("exposition.txt", text)
    assert 'model="m\\"1"' in text  # label values are escaped
    assert ":" not in "".join(re.findall(r"^(specscope_\w+)", text, re.M))


def _parsed(text: str) -> list:
    from prometheus_client.parser import text_string_to_metric_families

    return [(f.name, f.type, f.documentation,
             sorted((s.name, sorted(s.labels.items()), s.value) for s in f.samples))
            for f in text_string_to_metric_families(text)]


@pytest.mark.parametrize("node", [False, True])
def test_a_registry_serves_the_same_series_as_the_page(node):
    """PromCollector's families, written by prometheus_client, carry exactly the page's series:
    names (no ``_created``, ``_total`` kept), label names and values, HELP, types and values."""
    from prometheus_client import CollectorRegistry, generate_latest

    c = _collector()
    c.health.update(records_observed=7, entries_clamped=1)
    c._pids[os.getpid()] = "collector"  # its own process facts too
    c.node_label = node
    snap = c.snapshot()  # one moment for both (the process facts move)
    registry = CollectorRegistry()
    registry.register(PromCollector(SimpleNamespace(snapshot=lambda: snap)))
    text = generate_latest(registry).decode()
    assert _parsed(text) == _parsed(render(snap))
    assert "_created" not in text and "specscope_process_cpu_seconds_total{" in text
    assert re.search(r'specscope_accepted_tokens_per_position_total\{.*position="1".*\} 2\.0', text)
    assert ('node="' in text) == node


def _get(url, auth=None, context=None):
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    with urllib.request.urlopen(req, timeout=5, context=context) as r:
        return r.status, r.read().decode()


def test_metrics_server_binds_loopback_with_basic_auth():
    server = MetricsServer(_collector(), basic_auth=("u", "p")).start()
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"
        with pytest.raises(urllib.error.HTTPError) as err:
            _get(server.url)
        assert err.value.code == 401
        err.value.close()
        status, body = _get(server.url, auth="u:p")
        assert status == 200 and "specscope_drafts_total" in body
    finally:
        server.close()


def test_a_scraper_that_disconnects_mid_response_is_counted_quietly(capfd):
    import socket
    import struct
    import time

    class Slow:  # the page is rendered after the client has already gone
        def __init__(self, collector):
            self.collector = collector

        def snapshot(self):
            time.sleep(0.3)
            return self.collector.snapshot()

    server = MetricsServer(Slow(_collector())).start()
    try:
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset, not a clean close
        deadline = time.monotonic() + 5
        while server.disconnects < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.disconnects == 2
        status, body = _get(server.url)  # and it keeps serving
        assert status == 200 and "specscope_drafts_total" in body
    finally:
        server.close()
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_metrics_server_tls(tmp_path):
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    server = MetricsServer(_collector(), tls=(str(cert), str(key))).start()
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        ctx.check_hostname = False
        status, body = _get(server.url, context=ctx)
        assert server.url.startswith("https://") and status == 200 and "specscope_" in body
    finally:
        server.close()


def _emitted_names() -> set[str]:
    names = set()
    for name, m in METRICS.items():
        kind = m.kind
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def _names_in(text: str) -> set[str]:
    return set(re.findall(r"\b(specscope_[a-z0-9_]+)", text))


def test_grafana_queries_use_only_emitted_metric_names():
    dash = json.loads(dashboard_json())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    used = _names_in(exprs)
    assert used and used <= _emitted_names(), used - _emitted_names()
    # and the exporter really emits them on a populated collector
    emitted = _names_in(render(_collector().snapshot()))
    assert {n for n in used if not n.startswith("specscope_process") and
            n != "specscope_anomaly_active"} <= emitted


def test_rules_use_only_emitted_or_recorded_names():
    text = alert_rules()
    recorded = set(re.findall(r"record: (specscope_\w+)", text))
    assert _names_in(text) - recorded <= _emitted_names()


def _promtool(tmp_path, rules_text: str, tests_of, n_rules: int) -> None:
    """``promtool check rules`` finds ``n_rules`` and ``promtool test rules`` passes."""
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text)
    tests = tmp_path / "tests.yml"
    tests.write_text(tests_of(str(rules)))
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0 and f"SUCCESS: {n_rules} rules found" in check.stdout, \
        check.stdout + check.stderr
    test = subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True, text=True)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian prometheus)")
def test_promtool_checks_and_unit_tests_the_rules(tmp_path):
    _promtool(tmp_path, alert_rules(), rule_tests, 12)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian prometheus)")
@pytest.mark.parametrize("engine,n_rules", [("vllm", 14), ("sglang", 6), ("trtllm", 14),
                                            ("llamacpp", 14)])
def test_promtool_checks_and_unit_tests_each_engines_rules(tmp_path, engine, n_rules):
    """`specscope rules --engine E`: rules over the engine's own series that promtool accepts;
    on series whose rates come from a real vLLM page, every alert stays quiet before the seeded
    collapse and fires on exactly the run it names after it (a threshold moved fails it)."""
    text = alert_rules(engine)
    _promtool(tmp_path, text, lambda path: engine_rule_tests(engine, path, text), n_rules)


def test_unknown_engine_names_the_known_ones():
    with pytest.raises(ValueError, match="known: specscope, vllm, sglang, trtllm, llamacpp, probe"):
        alert_rules("tgi")
