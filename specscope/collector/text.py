"""The human-readable report: typed sections (``collector.section``) as text, read by attribute.

``format_sections`` is what ``specscope report`` prints; ``format_report`` takes the JSON form
(``report --json``) and reads it through ``Section.from_dict``, so both print the same.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..exact import fmt_p
from .evalgate import check_text
from .section import Section
from .views import format_seen


def _f(v: Any, spec: str = ".3f") -> str:
    return "n/a" if v is None else format(v, spec)


def _n(v: Any) -> str:
    return "n/a" if v is None else str(v)


def format_report(report: Mapping[str, Any]) -> str:
    """A ``report --json`` report as text."""
    return format_sections([Section.from_dict(s) for s in report["runs"]], report["problems"])


def format_sections(sections: Sequence[Section], problems: Sequence[Any] = ()) -> str:
    """Report sections as text: one block per run (or per node of a run)."""
    lines: list[str] = []
    for sec in sections:
        lines += _section_lines(sec)
    if problems:
        lines.append(f"{len(problems)} unreadable line(s) skipped:")
        lines.extend(f"  {p}" for p in problems[:20])
    return "\n".join(lines)


def _section_lines(sec: Section) -> list[str]:
    run, t = sec.run, sec.totals
    lines = [f"== run {run.run_id if run else '?'}  config {run.config_id if run else '?'}  "
             f"model {run.model if run else '?'}  fault {(run.fault if run else '') or 'none'}"
             + (f"  node {sec.node}" if sec.node else "")]
    if sec.verification == "forced":
        lines.append(f"  SPEED-ONLY RUN: {sec.verification_why}; acceptance below is as set, "
                     "not measured")
    elif sec.verification == "lossy":
        lines.append(f"  {sec.verification_why}: sampling truth does not apply; output quality decides")
    lines.append(f"  acceptance length  {_f(t.mean_acceptance_length)}  "
                 "(tokens per request-step, bonus token included)")
    lines.append(f"  acceptance rate    {_f(t.acceptance_rate)}  "
                 f"({_n(t.accepted_tokens)} accepted / {_n(t.draft_tokens)} drafted)")
    per_pos = ", ".join(_f(v, ".2f") for v in t.per_position_acceptance)
    lines.append(f"  per position       [{per_pos}]")
    hist = "  ".join(f"{k}:{v}" for k, v in t.accept_length_histogram.items())
    lines.append(f"  accept-length hist {hist}")
    lines.append(f"  requests {t.num_requests}  output tokens {t.output_tokens}  "
                 f"tok/s {_f(t.output_tokens_per_s, '.1f')}")
    if sec.probe:
        pr = sec.probe
        lines.append(f"  black-box probe of {pr.url}: {str(pr.verdict).upper()} "
                     f"({pr.logprobs} log-probabilities)")
        lines += [f"    [FAIL] {check}: {message}" for check, message in pr.failed]
    lines.append("  sampling truth (committed == target argmax):")
    for row in sec.sampling_truth:
        p = f"  p {fmt_p(row.p_value)}" if row.p_value is not None else ""
        b99 = row.bounds_99
        lines.append(f"    {row.mode_requested:<22} used {dict(row.modes_used)}  "
                     f"observed {_f(row.observed_top1_rate)} expected "
                     f"{_f(row.expected_top1_rate)}  z {_f(row.z, '.1f')}{p}  n {row.num_positions}"
                     + (f"  99% {_f(b99[0])}-{_f(b99[1])}" if b99 and None not in b99 else "")
                     + (f"  PIT {_f(row.pit_mean)} (honest 0.500, n {row.pit_positions})"
                        if row.pit_mean is not None else "")
                     + (f"  accepted {_f(row.accept_observed_rate)} vs rule "
                        f"{_f(row.accept_expected_rate)} (n {row.accept_trials})"
                        if row.accept_trials else "")
                     + (f"  residual PIT {_f(row.resid_mean)} (honest 0.500, n "
                        f"{row.resid_positions})" if row.resid_positions else "")
                     + (f"  {row.state_text}" if row.state_text else ""))
    flagged = sec.requests_flagged
    for r in flagged[:5]:
        lines.append(f"    request {r.request_id}: observed {_f(r.observed_top1_rate)} "
                     f"expected {_f(r.expected_top1_rate)} "
                     f"p {fmt_p(r.p_value) if r.p_value is not None else 'n/a'} "
                     f"n {r.num_positions}  FAIL")
    if len(flagged) > 5:
        lines.append(f"    ... and {len(flagged) - 5} more request(s) failing on their own "
                     "(report --json lists them all)")
    fb = ", ".join(f"{k}: {v}" for k, v in sec.fallbacks.items()) or "none"
    lines.append(f"  fallbacks          {fb}")
    dh = sec.draft_health
    lines.append(f"  draft top-1 prob   at exactly 1.0: {_f(dh.share_at_exactly_one)} "
                 f"(honest at most {_f(dh.honest_share_at_one, '.2f')})  "
                 f"hist {list(dh.histogram)}"
                 + (f"  {dh.state_text}" if dh.state_text else ""))
    for k, v in sec.latency.items():
        if v.n:
            lines.append(f"  {k:<18} p50 {_ms(v.p50)} ms  p90 {_ms(v.p90)} ms  "
                         f"p99 {_ms(v.p99)} ms  (n {v.n})")
    for k, v in sec.phases.items():
        lines.append(f"  phase {k:<12} total {_f(v.total_s)} s  mean {_ms(v.mean)} ms"
                     f"  p99 {_ms(v.p99)} ms  (n {v.n})")
    if t.reported_mean_acceptance_length is not None:
        lines.append(f"  reported acceptance length (mean of source's values) "
                     f"{_f(t.reported_mean_acceptance_length)}")
    if t.reported_acceptance_rate is not None:
        lines.append(f"  reported acceptance rate (mean of source's values) "
                     f"{_f(t.reported_acceptance_rate)}")
    for k, g in sec.engine_gauges.items():
        lines.append(f"  engine {k:<28} mean {_f(g, '.2f')}")
    for b in sec.benchmarks:
        figures = ", ".join(f"{k} {_f(v, '.4g')}" for k, v in list(b.metrics.items())[:24])
        lines.append(f"  benchmark [{b.source}] {figures}")
    rates = ", ".join(f"{k} {_f(v)}" for k, v in sec.eval_rates.items()) or "none"
    lines.append(f"  eval               {rates}")
    if sec.eval_reference_rates:
        ref = ", ".join(f"{k} {_f(v)}" for k, v in sec.eval_reference_rates.items())
        lines.append(f"  reference (no speculation) {ref}")
    lines.append(f"  EVAL GATE          {sec.gate_text}")
    for c in sec.gate_checks:
        value = c.value if isinstance(c.value, (str, list)) else _f(c.value)
        why = f" ({c.reason})" if c.reason and c.check.startswith("greedy exact") else ""
        lines.append(f"    [{check_text(c)}] {c.check}: {value}{why}")
    for a in sec.anomalies:
        lines.append(f"  ANOMALY {a.kind} ({a.severity}): {a.message}")
    for h in sec.hooks:
        dropped = h.num_dropped_ring_full + h.num_dropped_batch_too_large + h.num_dropped_queue_full
        lines.append(f"  hooks: recorded {h.num_recorded}, dropped {dropped}, hook errors "
                     f"{h.num_hook_errors}, sink errors {h.num_sink_errors}"
                     + ("" if h.final else
                        " (as of its last snapshot: the process stopped without closing)"))
    if sec.engine_counts:
        lines.append(f"  {'SEEN' if sec.engine_counts.not_seen is None else 'NOT SEEN'}: "
                     + format_seen(sec.engine_counts.as_dict()))
    return lines


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.2f}"
