"""Prometheus recording and alerting rules for the detectors' signals (``specscope rules``).

Stdlib only: the YAML is written as text. Every metric named here is one the exporter emits
(tests check it), and ``promtool check rules`` / ``promtool test rules`` pass on it in CI.
"""

from __future__ import annotations

from .. import registry
from .decay_rules import decay_rules

BY = "algorithm, num_steps, topk, num_draft_tokens, backend, model"
_DECAY_RECORD, _DECAY_ALERT = decay_rules("specscope", BY, "specscope_accepted_tokens_total",
                                          "specscope_draft_tokens_total",
                                          start="specscope_engine_start_time_seconds")

RULES = f"""\
groups:
  - name: specscope-recording
    rules:
      - record: specscope_acceptance_rate_5m
        expr: |
          sum by ({BY}) (rate(specscope_accepted_tokens_total[5m]))
            / sum by ({BY}) (rate(specscope_draft_tokens_total[5m]))
      - record: specscope_acceptance_rate_1h
        expr: |
          sum by ({BY}) (rate(specscope_accepted_tokens_total[1h]))
            / sum by ({BY}) (rate(specscope_draft_tokens_total[1h]))
      - record: specscope_mean_acceptance_length_5m
        # tokens committed per request-step, bonus token included
        expr: |
          1 + sum by ({BY}) (rate(specscope_accepted_tokens_total[5m]))
            / sum by ({BY}) (rate(specscope_drafts_total[5m]))
      - record: specscope_sampling_truth_z_10m
        expr: |
          (sum by ({BY}, mode_requested) (increase(specscope_sampling_top1_total[10m]))
            - sum by ({BY}, mode_requested) (increase(specscope_sampling_top1_expected_total[10m])))
          / sqrt(sum by ({BY}, mode_requested) (increase(specscope_sampling_top1_variance_total[10m])))
{_DECAY_RECORD}  - name: specscope-alerts
    rules:
      - alert: SpecscopeAcceptanceDecay
{_DECAY_ALERT}      - alert: SpecscopeSilentGreedy
        expr: |
          specscope_sampling_truth_z_10m{{mode_requested!="greedy"}} > 6
          and on ({BY}, mode_requested)
          sum by ({BY}, mode_requested) (increase(specscope_sampling_verified_positions_total[10m])) >= 200
        for: 2m
        labels:
          severity: critical
        annotations:
          summary: "Verify commits the argmax for sampled requests ({{{{ $labels.mode_requested }}}})"
          description: "Committed tokens equal the target argmax far more often than the requested sampling allows (z = {{{{ $value }}}})."
      - alert: SpecscopeSamplingFallback
        expr: sum by ({BY}, reason) (increase(specscope_fallbacks_total[5m])) > 0
        labels:
          severity: warning
        annotations:
          summary: "Verify fell back to argmax ({{{{ $labels.reason }}}})"
          description: "{{{{ $value }}}} request-steps did not get the sampling they asked for in 5 minutes."
      - alert: SpecscopeDraftProbCollapse
        expr: |
          sum by ({BY}) (increase(specscope_draft_top1_at_one_total[10m]))
            / sum by ({BY}) (increase(specscope_draft_top1_probability_count[10m])) > 0.5
          and on ({BY})
          sum by ({BY}) (increase(specscope_draft_top1_probability_count[10m])) >= 100
        for: 2m
        labels:
          severity: critical
        annotations:
          summary: "Draft top-1 probabilities are exactly 1.0"
          description: "{{{{ $value | humanizePercentage }}}} of drafted positions: the draft distribution is not being computed."
      - alert: SpecscopeAcceptanceDrop
        expr: specscope_acceptance_rate_5m < 0.8 * specscope_acceptance_rate_1h
        for: 10m
        labels:
          severity: warning
        annotations:
          summary: "Acceptance rate dropped by more than 20% against the last hour"
          description: "Acceptance rate is {{{{ $value }}}} (5m)."
      - alert: SpecscopeTargetDown
        expr: |
          up == 0 and on (instance, job) count by (instance, job) (count_over_time(specscope_request_steps_total[1h]))
        for: 2m
        labels:
          severity: critical
        annotations:
          summary: "A target that exported specscope series in the last hour is down"
          description: "{{{{ $labels.instance }}}} (job {{{{ $labels.job }}}}) does not answer its scrape."
"""


#: over ``specscope probe --every S --metrics-port P`` (``probe/exporter.py`` names the series)
PROBE_RULES = """\
groups:
  - name: specscope-probe-recording
    rules:
      - record: specscope_probe_failures_1h
        expr: sum by (target) (increase(specscope_probe_failures_total[1h]))
      - record: specscope_probe_excess_top1_rate
        # observed top-1 share minus what honest sampling allows (> 0: more argmax than allowed)
        expr: specscope_probe_observed_top1_rate - specscope_probe_expected_top1_rate
  - name: specscope-probe-alerts
    rules:
      - alert: SpecscopeProbeVerifyFault
        expr: specscope_probe_check_state{state="fail"} == 1
        labels:
          severity: critical
        annotations:
          summary: "The black-box probe finds verify wrong on {{ $labels.target }} ({{ $labels.check }})"
          description: "specscope probe's last round failed this check from the engine's own log-probabilities."
      - alert: SpecscopeProbeCannotProbe
        expr: increase(specscope_probe_errors_total[30m]) > 0 and increase(specscope_probe_rounds_total[30m]) == increase(specscope_probe_errors_total[30m])
        labels:
          severity: warning
        annotations:
          summary: "specscope probe could not probe {{ $labels.target }} for 30 minutes"
          description: "Every round in 30 minutes failed to probe (unreachable, or no log-probabilities)."
      - alert: SpecscopeProbeEngineError
        # a request failed after earlier ones were answered: the engine broke under the probe
        expr: increase(specscope_probe_engine_errors_total[1h]) > 0
        labels:
          severity: critical
        annotations:
          summary: "{{ $labels.target }} failed under the probe's requests (verdict ERROR)"
          description: "An engine that fails a request it should serve is a finding, never a pass: see the probe's trace for the class, the request and the engine's error text."
"""

#: the series a rule file reads: specscope's exporter, each registered engine's own, the
#: probe's exporter, a fleet's node collectors
ENGINES = ("specscope", *(e.name for e in registry.ENGINES), "probe", "fleet")


def alert_rules(engine: str = "specscope") -> str:
    """The rules file (YAML): over specscope's exporter (and ``specscope scrape
    --metrics-port``), over an engine's own series (``vllm``, ``sglang``, ``trtllm``,
    ``llamacpp``: ``engine_rules.py``), over ``specscope probe``'s exporter (``probe``), or
    across a fleet's node collectors (``fleet``: ``fleet_rules.py``)."""
    from ..importers.metrics import BY_NAME
    from .engine_rules import rules

    if engine == "specscope":
        return RULES
    if engine == "probe":
        return PROBE_RULES
    if engine == "fleet":
        from .fleet_rules import FLEET_RULES

        return FLEET_RULES
    if engine not in BY_NAME:
        raise ValueError(f"no rules for engine {engine!r}; known: {', '.join(ENGINES)}")
    return rules(engine)
