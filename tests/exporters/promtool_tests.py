"""The ``promtool test rules`` file for the exporter's alert rules: synthetic series on which
two alerts must fire (test support, not part of the installed package)."""

import json

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


#: per-minute increases taken from the real vLLM page in shared/samples (43680 drafts, 131040
#: drafted, 58695 accepted, 29030 / 18342 / 11323 per position), divided by 100: k = 3
DRAFTS, DRAFTED, POS = 437, 1311, (290, 183, 114)
#: three runs: "c" stays clean; from minute 90 "x" collapses (4 accepted a minute, all at
#: position 0) and "l" accepts every draft token (acceptance length k + 1, a looping output)
RUNS = {"c": (POS, POS), "x": (POS, (4, 0, 0)), "l": (POS, (DRAFTS,) * 3)}


def _counter(before: int, after: int) -> str:
    return f"0+{before}x90 {90 * before}+{after}x60"


def _series(engine: str) -> list[tuple[str, dict, str]]:
    """(family, labels, values) of each run's series under ``engine``'s names."""
    from specscope.importers import metrics as M

    m = M.BY_NAME[engine]
    fam = {role: f for f, role in m.counters.items()}
    out = []
    for run, (pos_before, pos_after) in RUNS.items():
        labels = {"instance": run} if m.by_target else {m.model_label: run}
        if m.rank_label and m.counters_by_rank:
            labels[m.rank_label] = "0"
        acc = _counter(sum(pos_before), sum(pos_after))
        if M.DRAFTS in fam:
            out.append((fam[M.DRAFTS], labels, f"0+{DRAFTS}x150"))
        if M.DRAFT_TOKENS in fam:
            out.append((fam[M.DRAFT_TOKENS], labels, f"0+{DRAFTED}x150"))
        if M.ACCEPTED in fam:
            out.append((fam[M.ACCEPTED], labels, acc))
        if M.VERIFY_CALLS in fam:
            out.append((fam[M.VERIFY_CALLS], labels, f"0+{DRAFTS}x150"))
            out.append((fam[M.GENERATED], labels,
                        _counter(DRAFTS + sum(pos_before), DRAFTS + sum(pos_after))))
            # a scheduler gauge: SGLang's scheduler labels, the data-parallel rank among them
            out.append(("sglang:spec_num_steps", {**labels, "engine_type": "unified", "tp_rank": "0",
                                                  "pp_rank": "0", "moe_ep_rank": "0", "dp_rank": "0"},
                        "3x150"))
        for p in range(3):
            at = {**labels, m.pos_label: str(p)}
            if m.per_pos:
                out.append((m.per_pos, at, _counter(pos_before[p], pos_after[p])))
            if m.drafted_per_pos:
                out.append((m.drafted_per_pos, at, f"0+{DRAFTS}x150"))
    # a target that exported the engine's series and stops answering at minute 100
    first = next(iter(m.counters))
    out.append((first, {"instance": "gone:1", "job": "engine"}, f"0+{DRAFTS}x100 stale"))
    out.append(("up", {"instance": "gone:1", "job": "engine"}, "1x100 0x50"))
    return out


def _fill(text: str, labels: dict) -> str:
    for k, v in labels.items():
        text = text.replace(f"{{{{ $labels.{k} }}}}", v)
    return text


def engine_rule_tests(engine: str, rules_path: str, rules_text: str) -> str:
    """A ``promtool test rules`` file for the rules over ``engine``'s own series: at minute 85
    nothing fires; at 110 the drop, near-one and per-position alerts fire on "x" alone, the
    near-k+1 alert on "l" alone, the target-down alert on the target that went away."""
    import yaml

    from specscope.importers import metrics as M

    m = M.BY_NAME[engine]
    rules = {r["alert"]: r for g in yaml.safe_load(rules_text)["groups"] for r in g["rules"]
             if "alert" in r}

    def labels_of(run: str) -> dict:
        out = {"instance": run} if m.by_target else {m.model_label: run}
        if m.rank_label and m.counters_by_rank:
            out[m.rank_label] = "0"
        return out

    fires: dict[str, list[dict]] = {}
    for name in rules:
        if name.endswith("TargetDown"):
            fires[name] = [{"instance": "gone:1", "job": "engine"}]
        elif name.endswith("NearMax"):
            fires[name] = [labels_of("l")]
        elif name.endswith("PerPositionCollapse"):
            fires[name] = [{**labels_of("x"), m.pos_label: str(p)} for p in range(3)]
        else:
            fires[name] = [labels_of("x")]
    lines = [HEAD.format(rules=rules_path).rstrip("\n")]
    for family, labels, values in _series(engine):
        sel = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines += [f"      - series: '{family}{{{sel}}}'", f"        values: '{values}'"]
    lines.append("    alert_rule_test:")
    for name, rule in rules.items():
        lines += ["      - eval_time: 85m", f"        alertname: {name}",
                  "      - eval_time: 110m", f"        alertname: {name}", "        exp_alerts:"]
        for labels in fires[name]:
            exp = {"severity": rule["labels"]["severity"], **labels}
            ann = {k: _fill(v, labels) for k, v in rule["annotations"].items()}
            lines += [f"          - exp_labels: {json.dumps(exp)}",
                      f"            exp_annotations: {json.dumps(ann)}"]
    return "\n".join(lines) + "\n"
