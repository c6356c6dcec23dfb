"""The fleet rules pass promtool, and their alerts fire for the node that leaves its fleet and
for no other."""

from __future__ import annotations

import subprocess

from specscope.exporters.rules import alert_rules
from tests.exporters.promtool_tests import HEAD

CFG = 'algorithm="eagle",num_steps="3",topk="1",num_draft_tokens="4",model="m"'


def _series(name: str, node: str, backend: str, per_min: int, extra: str = "") -> str:
    labels = f'{CFG},backend="{backend}",rank="0",node="{node}"{extra}'
    return f"      - series: '{name}{{{labels}}}'\n        values: '0+{per_min}x30'\n"


def _fleet() -> str:
    out = ""
    sampled = ',mode_requested="speculative-sampling"'
    for node, backend, accepted, top1 in (("n1", "cuda", 600, 330), ("n2", "cuda", 610, 335),
                                          ("n3", "hip", 200, 990), ("n4", "cuda", 590, 340)):
        out += _series("specscope_draft_tokens_total", node, backend, 1000)
        out += _series("specscope_accepted_tokens_total", node, backend, accepted)
        out += _series("specscope_sampling_verified_positions_total", node, backend, 1000, sampled)
        out += _series("specscope_sampling_top1_total", node, backend, top1, sampled)
        out += _series("specscope_sampling_top1_expected_total", node, backend, 330, sampled)
    return out


TESTS = HEAD + """\
{series}    alert_rule_test:
      - eval_time: 25m
        alertname: SpecscopeNodeAcceptanceOffFleet
        exp_alerts:
          - exp_labels: {{severity: warning, algorithm: eagle, num_steps: "3", topk: "1", num_draft_tokens: "4", model: m, node: n3}}
            exp_annotations:
              summary: "Node n3's acceptance rate is off its fleet's"
              description: "Acceptance rate 0.34 x the median node's for the same configuration (10m, at least three nodes; alerts below 0.8 or above 1.25)."
      - eval_time: 25m
        alertname: SpecscopeNodeSamplingTruthOffFleet
        exp_alerts:
          - exp_labels: {{severity: critical, algorithm: eagle, num_steps: "3", topk: "1", num_draft_tokens: "4", model: m, node: n3, mode_requested: speculative-sampling}}
            exp_annotations:
              summary: "Node n3 commits the argmax more often than its fleet (speculative-sampling)"
              description: "Its excess top-1 share is 0.653 above the median node's: verify on this node does not sample as asked."
"""


def test_promtool_checks_the_fleet_rules_and_only_the_odd_node_alerts(tmp_path, prometheus_ready):
    rules = tmp_path / "fleet.yml"
    rules.write_text(alert_rules("fleet"))
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS: 14 rules found" in check.stdout, check.stdout + check.stderr
    tests = tmp_path / "tests.yml"
    tests.write_text(TESTS.format(rules=rules, series=_fleet()))
    test = subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr


def test_the_fleets_uptime_slope_is_least_squares_across_nodes(tmp_path, prometheus_ready):
    """Three nodes started 2, 6 and 10 hours before minute 30 (their start gauges), accepting
    0.62, 0.58 and 0.54 of their draft tokens: the fleet's slope is -0.01 an hour."""
    out = ""
    for node, started_h, accepted in (("n1", 2, 620), ("n2", 6, 580), ("n3", 10, 540)):
        labels = f'{CFG},backend="cuda",rank="0",node="{node}"'
        out += _series("specscope_draft_tokens_total", node, "cuda", 1000)
        out += _series("specscope_accepted_tokens_total", node, "cuda", accepted)
        start = 30 * 60 - started_h * 3600  # seconds (promtool's clock starts at 0)
        out += (f"      - series: 'specscope_engine_start_time_seconds{{{labels}}}'\n"
                f"        values: '{start}x30'\n")
    rules = tmp_path / "fleet.yml"
    rules.write_text(alert_rules("fleet"))
    tests = tmp_path / "tests.yml"
    tests.write_text(HEAD.format(rules=rules) + out + """\
    promql_expr_test:
      - expr: round(specscope_fleet_acceptance_uptime_slope_10m, 0.0001)
        eval_time: 30m
        exp_samples:
          - labels: '{algorithm="eagle",num_steps="3",topk="1",num_draft_tokens="4",model="m"}'
            value: -0.01
""")
    test = subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr
