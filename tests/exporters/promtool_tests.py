"""The ``promtool test rules`` file for the exporter's alert rules: synthetic series on which
two alerts must fire (test support, not part of the installed package)."""

TESTS = """\
rule_files:
  - {rules}
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'specscope_sampling_top1_total{{algorithm="eagle",num_steps="3",topk="1",num_draft_tokens="4",backend="hip",model="m",rank="0",mode_requested="speculative-sampling"}}'
        values: '0+300x20'
      - series: 'specscope_sampling_top1_expected_total{{algorithm="eagle",num_steps="3",topk="1",num_draft_tokens="4",backend="hip",model="m",rank="0",mode_requested="speculative-sampling"}}'
        values: '0+105x20'
      - series: 'specscope_sampling_top1_variance_total{{algorithm="eagle",num_steps="3",topk="1",num_draft_tokens="4",backend="hip",model="m",rank="0",mode_requested="speculative-sampling"}}'
        values: '0+68x20'
      - series: 'specscope_sampling_verified_positions_total{{algorithm="eagle",num_steps="3",topk="1",num_draft_tokens="4",backend="hip",model="m",rank="0",mode_requested="speculative-sampling"}}'
        values: '0+300x20'
      - series: 'specscope_fallbacks_total{{algorithm="eagle",num_steps="3",topk="1",num_draft_tokens="4",backend="hip",model="m",rank="0",reason="top_p_unsupported"}}'
        values: '0 0 0 0 5 10 15 20 25 30'
    alert_rule_test:
      - eval_time: 15m
        alertname: SpecscopeSilentGreedy
        exp_alerts:
          - exp_labels:
              severity: critical
              algorithm: eagle
              num_steps: "3"
              topk: "1"
              num_draft_tokens: "4"
              backend: hip
              model: m
              mode_requested: speculative-sampling
            exp_annotations:
              summary: "Verify commits the argmax for sampled requests (speculative-sampling)"
              description: "Committed tokens equal the target argmax far more often than the requested sampling allows (z = 74.77908641261861)."
      - eval_time: 3m
        alertname: SpecscopeSamplingFallback
        exp_alerts: []
      - eval_time: 8m
        alertname: SpecscopeSamplingFallback
        exp_alerts:
          - exp_labels:
              severity: warning
              algorithm: eagle
              num_steps: "3"
              topk: "1"
              num_draft_tokens: "4"
              backend: hip
              model: m
              reason: top_p_unsupported
            exp_annotations:
              summary: "Verify fell back to argmax (top_p_unsupported)"
              description: "25 request-steps did not get the sampling they asked for in 5 minutes."
"""


def rule_tests(rules_path: str) -> str:
    """A ``promtool test rules`` file exercising two alerts on synthetic series."""
    return TESTS.format(rules=rules_path)
