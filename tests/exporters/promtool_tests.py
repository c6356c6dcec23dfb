"""The ``promtool test rules`` file for the exporter's alert rules: synthetic series on which
two alerts must fire (test support, not part of the installed package)."""

HEAD = """\
rule_files:
  - {rules}
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
"""

TESTS = HEAD + """\
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


#: vLLM's own series: acceptance falls from 0.6 to 0.2 after 90 minutes (the drop alert fires
#: 10 minutes on); drafts keep coming, so acceptance length stays above 1.05 (that alert stays
#: quiet), then accepted tokens stop entirely on a second engine (it fires there)
VLLM_TESTS = HEAD + """\
      - series: 'vllm:spec_decode_num_draft_tokens_total{{model_name="m",engine="0"}}'
        values: '0+300x150'
      - series: 'vllm:spec_decode_num_drafts_total{{model_name="m",engine="0"}}'
        values: '0+100x150'
      - series: 'vllm:spec_decode_num_accepted_tokens_total{{model_name="m",engine="0"}}'
        values: '0+180x90 16200+60x60'
      - series: 'vllm:spec_decode_num_draft_tokens_total{{model_name="m",engine="1"}}'
        values: '0+300x150'
      - series: 'vllm:spec_decode_num_drafts_total{{model_name="m",engine="1"}}'
        values: '0+100x150'
      - series: 'vllm:spec_decode_num_accepted_tokens_total{{model_name="m",engine="1"}}'
        values: '0+180x90 16200+1x60'
    alert_rule_test:
      - eval_time: 85m
        alertname: SpecscopeVllmAcceptanceDrop
      - eval_time: 110m
        alertname: SpecscopeVllmAcceptanceDrop
        exp_alerts:
          - exp_labels: {{severity: warning, model_name: m, engine: "0"}}
            exp_annotations:
              summary: "vLLM acceptance rate dropped by more than 20% against the last hour"
              description: "Acceptance rate is 0.2 (5m) on m, engine 0."
          - exp_labels: {{severity: warning, model_name: m, engine: "1"}}
            exp_annotations:
              summary: "vLLM acceptance rate dropped by more than 20% against the last hour"
              description: "Acceptance rate is 0.003333333333333333 (5m) on m, engine 1."
      - eval_time: 110m
        alertname: SpecscopeVllmAcceptanceLengthNearOne
        exp_alerts:
          - exp_labels: {{severity: warning, model_name: m, engine: "1"}}
            exp_annotations:
              summary: "vLLM speculation commits almost nothing beyond the bonus token"
              description: "Acceptance length 1.01 (bonus included): the draft agrees with almost nothing (a broken draft, or garbled output)."
"""


def vllm_rule_tests(rules_path: str) -> str:
    """A ``promtool test rules`` file for the rules over vLLM's own series."""
    return VLLM_TESTS.format(rules=rules_path)
