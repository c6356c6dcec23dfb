"""Fleet rules and board (``specscope rules --engine fleet``, ``grafana --engine fleet``): per
configuration across nodes, per node against its fleet, and alerts when one node's acceptance or
sampling truth leaves the fleet's.

Over the exporter's series with a ``node`` label: node collectors started with ``--node-label``
(or a collector serving several nodes, which labels them itself). A configuration here is the
label set without ``backend`` and ``rank``, so a node on another backend (a ROCm node in a CUDA
fleet) is compared against the same configuration's fleet. Stdlib only.
"""

from __future__ import annotations

#: the labels that name a configuration across a fleet
CONFIG = "algorithm, num_steps, topk, num_draft_tokens, model"

FLEET_RULES = f"""\
groups:
  - name: specscope-fleet-recording
    rules:
      # totals across nodes, per configuration (counters summed: exact, whatever the node count)
      - record: specscope_fleet_accepted_tokens
        expr: sum by ({CONFIG}) (specscope_accepted_tokens_total)
      - record: specscope_fleet_draft_tokens
        expr: sum by ({CONFIG}) (specscope_draft_tokens_total)
      - record: specscope_fleet_drafts
        expr: sum by ({CONFIG}) (specscope_drafts_total)
      - record: specscope_fleet_acceptance_rate_10m
        expr: |
          sum by ({CONFIG}) (increase(specscope_accepted_tokens_total[10m]))
            / sum by ({CONFIG}) (increase(specscope_draft_tokens_total[10m]))
      - record: specscope_fleet_mean_acceptance_length_10m
        # tokens committed per request-step, bonus token included
        expr: |
          1 + sum by ({CONFIG}) (increase(specscope_accepted_tokens_total[10m]))
            / sum by ({CONFIG}) (increase(specscope_drafts_total[10m]))
      - record: specscope_node_acceptance_rate_10m
        expr: |
          sum by ({CONFIG}, node) (increase(specscope_accepted_tokens_total[10m]))
            / sum by ({CONFIG}, node) (increase(specscope_draft_tokens_total[10m]))
      - record: specscope_fleet_median_node_acceptance_rate_10m
        # the middle node: one odd node cannot move it (the pooled rate moves with it)
        expr: quantile by ({CONFIG}) (0.5, specscope_node_acceptance_rate_10m)
      - record: specscope_node_acceptance_vs_fleet_10m
        # a node's acceptance rate over its configuration's median node (1 = the fleet's)
        expr: |
          specscope_node_acceptance_rate_10m
            / on ({CONFIG}) group_left specscope_fleet_median_node_acceptance_rate_10m
      - record: specscope_node_excess_top1_rate_10m
        # committed argmax share above what the requested sampling expects (0 when honest)
        expr: |
          (sum by ({CONFIG}, node, mode_requested) (increase(specscope_sampling_top1_total[10m]))
            - sum by ({CONFIG}, node, mode_requested) (increase(specscope_sampling_top1_expected_total[10m])))
          / sum by ({CONFIG}, node, mode_requested) (increase(specscope_sampling_verified_positions_total[10m]))
      - record: specscope_node_uptime_hours
        # hours since the node's engine started (its latest start: a restart moves it)
        expr: (time() - max by ({CONFIG}, node) (specscope_engine_start_time_seconds)) / 3600
      - record: specscope_fleet_acceptance_uptime_slope_10m
        # acceptance rate per hour of node uptime, least squares across the configuration's
        # nodes (< 0: nodes lose acceptance as they age; the interval: specscope fleet --aging)
        expr: |
          (avg by ({CONFIG}) (specscope_node_uptime_hours * on ({CONFIG}, node) specscope_node_acceptance_rate_10m)
            - avg by ({CONFIG}) (specscope_node_uptime_hours and on ({CONFIG}, node) specscope_node_acceptance_rate_10m)
            * avg by ({CONFIG}) (specscope_node_acceptance_rate_10m and on ({CONFIG}, node) specscope_node_uptime_hours))
          / (avg by ({CONFIG}) ((specscope_node_uptime_hours and on ({CONFIG}, node) specscope_node_acceptance_rate_10m) ^ 2)
            - avg by ({CONFIG}) (specscope_node_uptime_hours and on ({CONFIG}, node) specscope_node_acceptance_rate_10m) ^ 2)
          and on ({CONFIG}) count by ({CONFIG}) (specscope_node_uptime_hours and on ({CONFIG}, node) specscope_node_acceptance_rate_10m) >= 3
      - record: specscope_fleet_excess_top1_rate_10m
        # the median node's excess top-1 share
        expr: quantile by ({CONFIG}, mode_requested) (0.5, specscope_node_excess_top1_rate_10m)
  - name: specscope-fleet-alerts
    rules:
      - alert: SpecscopeNodeAcceptanceOffFleet
        expr: |
          (specscope_node_acceptance_vs_fleet_10m < 0.8 or specscope_node_acceptance_vs_fleet_10m > 1.25)
          and on ({CONFIG}, node)
          sum by ({CONFIG}, node) (increase(specscope_draft_tokens_total[10m])) >= 500
          and on ({CONFIG})
          count by ({CONFIG}) (specscope_node_acceptance_rate_10m) >= 3
        for: 10m
        labels:
          severity: warning
        annotations:
          summary: "Node {{{{ $labels.node }}}}'s acceptance rate is off its fleet's"
          description: "Acceptance rate {{{{ $value | printf `%.2f` }}}} x the median node's for the same configuration (10m, at least three nodes; alerts below 0.8 or above 1.25)."
      - alert: SpecscopeNodeSamplingTruthOffFleet
        expr: |
          specscope_node_excess_top1_rate_10m{{mode_requested!="greedy"}}
            - on ({CONFIG}, mode_requested) group_left specscope_fleet_excess_top1_rate_10m > 0.1
          and on ({CONFIG}, node, mode_requested)
          sum by ({CONFIG}, node, mode_requested) (increase(specscope_sampling_verified_positions_total[10m])) >= 200
        for: 2m
        labels:
          severity: critical
        annotations:
          summary: "Node {{{{ $labels.node }}}} commits the argmax more often than its fleet ({{{{ $labels.mode_requested }}}})"
          description: "Its excess top-1 share is {{{{ $value | printf `%.3f` }}}} above the median node's: verify on this node does not sample as asked."
"""

#: (title, PromQL) of the fleet board
FLEET_PANELS = [
    ("Acceptance rate per configuration, across nodes (10m)", "specscope_fleet_acceptance_rate_10m"),
    ("Acceptance length per configuration, bonus token included (10m)",
     "specscope_fleet_mean_acceptance_length_10m"),
    ("Acceptance rate per node (10m)", "specscope_node_acceptance_rate_10m"),
    ("Node acceptance over the median node's (1 = the fleet's)", "specscope_node_acceptance_vs_fleet_10m"),
    ("Excess top-1 share per node (0 = honest sampling)", "specscope_node_excess_top1_rate_10m"),
    ("Acceptance rate per hour of node uptime, across nodes (< 0: nodes age)",
     "specscope_fleet_acceptance_uptime_slope_10m"),
    ("Accepted tokens across nodes", "specscope_fleet_accepted_tokens"),
]
