"""The probe's exporter: its exposition parses as Prometheus text, each check's state is one-hot,
an unknown figure is absent (never 0), and the rules and board over it name only series it
serves; promtool accepts the rules, and its unit test fires the alert on a failing check only."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specscope.collector.verdict import Assessment
from specscope.exporters.grafana import dashboard_json
from specscope.exporters.rules import alert_rules
from specscope.probe import ProbeResult
from specscope.probe.checks import Semantics
from specscope.probe.client import Answer
from specscope.probe.exporter import SERIES, render_probe


def _result(verdict: str) -> ProbeResult:
    checks = [Assessment("greedy losslessness", "pass", {"num_positions": 300,
                                                          "observed_top1_rate": 1.0,
                                                          "expected_top1_rate": 1.0}),
              Assessment("temperature honoured (temperature)", verdict,
                         {"num_positions": 200, "observed_top1_rate": 0.99,
                          "expected_top1_rate_bound": 0.75})]
    return ProbeResult(url="http://e:8000", engine="vllm", model="m", semantics=Semantics(),
                       checks=checks, answers=[], top_logprobs=20, seconds=41.5, dtype="",
                       verdict=verdict)


def test_exposition_parses_one_hot_states_and_leaves_unknowns_out():
    text = render_probe("http://e:8000", _result("fail"), rounds=3, failures=1, errors=0,
                        last_ns=1_700_000_000_000_000_000)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    states = {(s.labels["check"], s.labels["state"]): s.value
              for s in fams["specscope_probe_check_state"].samples}
    assert states[("temperature honoured (temperature)", "fail")] == 1
    assert sum(v for (c, _), v in states.items() if c.startswith("temperature")) == 1
    assert fams["specscope_probe_success"].samples[0].value == 0
    assert fams["specscope_probe_failures"].samples[0].value == 1  # the _total counter
    # no per-request counts in the round: the engine's acceptance rate is absent, not 0
    assert "specscope_probe_engine_acceptance_rate" not in text
    assert "specscope_probe_class_supported" not in text  # the round said nothing of classes
    result = _result("pass")
    result.classes = {"greedy": {"state": "checked"}, "stops": {"state": "not supported"},
                      "top-k": {"state": "not sent"}}
    fams = {f.name: f for f in text_string_to_metric_families(render_probe(
        "http://e:8000", result, rounds=1, failures=0, errors=0, last_ns=1))}
    assert {s.labels["class"]: s.value for s in fams["specscope_probe_class_supported"].samples} \
        == {"greedy": 1, "stops": 0}  # a class never sent is absent: unknown, not unsupported
    before = render_probe("http://e:8000", None, rounds=0, failures=0, errors=0, last_ns=0)
    assert "specscope_probe_success" not in before and "specscope_probe_rounds_total" in before


def test_exposition_text_is_exact(golden):
    """prometheus_client writes the page: sorted label names, values as floats, no _created."""
    result = _result("fail")
    # the engine's own counts: 10 / 81 accepted, six significant digits on the page
    result.answers = [Answer(cls="greedy", prompt="", sampling={}, drafted=81, accepted=10)]
    text = render_probe('http://e:8000/"a"', result, rounds=3, failures=1, errors=0,
                        last_ns=1_700_000_000_123_456_789, engine_errors=2)
    golden("probe_exposition.txt", text)
    assert 'specscope_probe_engine_acceptance_rate{target="http://e:8000/\\"a\\""} 0.123457' in text


def test_rules_and_board_name_only_series_the_exporter_serves():
    rules, board = alert_rules("probe"), dashboard_json("probe")
    recorded = set(re.findall(r"record: (specscope_probe_\w+)", rules))
    for text in (rules, board):
        used = set(re.findall(r"specscope_probe_\w+", text)) - recorded
        assert used and used <= set(SERIES), used - set(SERIES)


PROMTOOL_TEST = """\
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'specscope_probe_check_state{{target="a",check="greedy losslessness",state="fail"}}'
        values: '0x5 1x5'
      - series: 'specscope_probe_check_state{{target="b",check="greedy losslessness",state="fail"}}'
        values: '0x10'
      - series: 'specscope_probe_engine_errors_total{{target="c"}}'
        values: '0x5 1x5'
      - series: 'specscope_probe_engine_errors_total{{target="d"}}'
        values: '0x10'
    alert_rule_test:
      - eval_time: 4m
        alertname: SpecscopeProbeEngineError
        exp_alerts: []
      - eval_time: 8m
        alertname: SpecscopeProbeEngineError
        exp_alerts:
          - exp_labels: {{severity: critical, target: c}}
            exp_annotations:
              summary: "c failed under the probe's requests (verdict ERROR)"
              description: "An engine that fails a request it should serve is a finding, never a pass: see the probe's trace for the class, the request and the engine's error text."
      - eval_time: 3m
        alertname: SpecscopeProbeVerifyFault
        exp_alerts: []
      - eval_time: 8m
        alertname: SpecscopeProbeVerifyFault
        exp_alerts:
          - exp_labels: {{severity: critical, target: a, check: greedy losslessness, state: fail}}
            exp_annotations:
              summary: "The black-box probe finds verify wrong on a (greedy losslessness)"
              description: "specscope probe's last round failed this check from the engine's own log-probabilities."
"""


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian prometheus)")
def test_promtool_checks_the_probe_rules_and_the_alert_fires_on_a_failing_check(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(alert_rules("probe"))
    tests = tmp_path / "tests.yml"
    tests.write_text(PROMTOOL_TEST.format(rules=rules))
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS: 5 rules found" in check.stdout, check.stdout + check.stderr
    test = subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr
