"""The report: a trace's figures as typed sections (``collector.section``), the JSON document
``report --json`` writes of them, and its text form.

Never imports torch or dash. Unknown figures are None (null), never invented.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, Iterable, Sequence

import numpy as np

from .. import schema
from .detectors import (DRAFT_CHECK, TRUTH_CHECK, AcceptanceRegressionDetector, DriftDetector,
                        QualityDetector, SamplingTruthDetector, SlotDetector, detectors_for,
                        evaluate)
from .slots import rank_counts
from .evalgate import decide_gate
from ..exact import PER_REQUEST_ALPHA
from . import busy as _busy
from .configured import kind_of
from .section import (Anomaly, Benchmark, DraftHealth, EngineSeen, FlaggedRequest, Percentiles,
                      ProbeSummary, Section, Totals, Truth, Window)
from .stats import SpecStats, TruthStats, token_times
from .views import seen_by_hooks
from .verdict import Assessment

#: Definitions printed with the figures (and reused by the dashboard's hovers).
DEFINITIONS = {
    "mean_acceptance_length": "tokens committed per request per verify step, bonus token "
                              "INCLUDED: (accepted + drafts) / drafts",
    "acceptance_rate": "accepted draft tokens / drafted tokens, pooled from counters",
    "per_position_acceptance": "share of request-steps that drafted position i whose i-th "
                               "draft token was accepted",
    "ttft_s": "first token time - arrival",
    "tpot_s": "(finish - first token) / (output tokens - 1), per request",
    "itl_chunk_s": "gap between consecutive streamed chunks (one chunk per verify step)",
    "itl_token_s": "chunk gap divided over the tokens the chunk carries",
    "reported_mean_acceptance_length": "mean of the acceptance lengths a source logged itself "
                                       "(sources with no counts, e.g. SGLang logs); not pooled; "
                                       "a cumulative source's (vLLM V0) latest value; null in "
                                       "totals over several runs",
    "reported_acceptance_rate": "the source's own acceptance rate, its definition: mean of "
                                "its values, a cumulative source's latest value; null in "
                                "totals over several runs",
}


def _pct(values: Sequence[float], total_s: float | None = None) -> Percentiles:
    if not values:
        return Percentiles(total_s=total_s)
    a = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return Percentiles(int(a.size), float(a.mean()), float(p50), float(p90), float(p99),
                       total_s=total_s)


def _from_buckets(h: Any, total_s: float | None = None) -> Percentiles:
    n = sum(h.counts)
    return Percentiles(n, h.total / n, h.quantile(0.5), h.quantile(0.9), h.quantile(0.99),
                       from_buckets=True, total_s=total_s)


def spec_figures(s: SpecStats) -> dict[str, Any]:
    """The acceptance figures shared by ``totals`` and each window (``AcceptanceFigures``'
    fields, by name)."""
    return {
        #: drafts and drafted tokens include those a source gave without an accepted count
        #: (those enter no rate or length); null where no source gave them
        "num_drafts": None if s.drafts_unknown else s.num_drafts + s.drafts_unmatched,
        "draft_tokens": (s.draft_tokens + s.draft_tokens_unmatched
                         if s.counts_known or s.draft_tokens_unmatched else None),
        "accepted_tokens": s.accepted_tokens if s.counts_known else None,
        "mean_acceptance_length": s.mean_acceptance_length,
        "acceptance_rate": s.acceptance_rate,
        "per_position_acceptance": s.per_position_acceptance,
        #: a cumulative source's latest value (its own total), else the mean of the values
        "reported_mean_acceptance_length": (s.reported_al_last[1] if s.reported_al_last else
                                            s.reported_al_sum / s.reported_al_n
                                            if s.reported_al_n else None),
        #: the source's own acceptance rate (its definition, e.g. SGLang's gauge), averaged
        #: over the values it reported; never mixed into the pooled rate above
        "reported_acceptance_rate": (s.reported_rate_last[1] if s.reported_rate_last else
                                     s.reported_rate_sum / s.reported_rate_n
                                     if s.reported_rate_n else None),
    }


_WINDOWED = (schema.VerifyStepRecord, schema.SpecCountsRecord, schema.FallbackRecord)


def window_figures(t_s: float | None, window_s: float | None, s: SpecStats,
                   index: int | None = None) -> Window:
    """One window: acceptance figures, committed tokens (accepted + bonus) and fallbacks.
    ``t_s`` None: the source gave no time; the window is line ``index`` of it, in file order."""
    return Window(time=t_s, window_s=window_s, **_acceptance_of(s),
                  #: one token per request-step that drafted nothing (speculation off)
                  committed_tokens=s.accepted_tokens + s.num_drafts + s.undrafted_request_steps,
                  fallbacks=dict(s.fallbacks),
                  #: mean k of the window's steps (0 for a step with speculation off)
                  mean_draft_depth=s.mean_draft_depth, off_steps=s.depth_steps.get(0, 0),
                  index=index)


def _acceptance_of(s: SpecStats) -> dict[str, Any]:
    f = spec_figures(s)
    return {**f, "per_position_acceptance": tuple(f["per_position_acceptance"] or ())}


def _windows(records: Sequence[schema.Record], window_s: float | None,
             target_only: bool = False) -> list[Window]:
    timed: list[tuple[int, Any]] = [(r.t_ns, r) for r in records
                                    if isinstance(r, _WINDOWED) and r.t_ns]
    if not timed and target_only:  # no verify steps: each emitted token is one decode step
        timed = [(t, n) for r in records if isinstance(r, schema.RequestRecord)
                 for t, n in token_times(r)]
    if not timed:  # a source without times (a log captured from stdout): its own lines, in order
        return [window_figures(None, None, SpecStats().observe_all([r]), i)
                for i, r in enumerate(x for x in records if isinstance(x, schema.SpecCountsRecord))]
    t0, t1 = min(t for t, _ in timed), max(t for t, _ in timed)
    if window_s is None:
        window_s = max(0.001, max(1e-9, (t1 - t0) / 1e9) / 10)
    width = int(window_s * 1e9)
    buckets: dict[int, SpecStats] = {}
    for t, item in timed:
        s = buckets.setdefault((t - t0) // width, SpecStats())
        if isinstance(item, int):  # a target-only request's tokens emitted at t
            s.undrafted_request_steps += item
        else:
            s.observe(item)
    return [window_figures((t0 + k * width) / 1e9, window_s, buckets[k]) for k in sorted(buckets)]


def _truth(s: SpecStats, checks: Sequence[Assessment]) -> list[Truth]:
    by_mode = {a.evidence["mode_requested"]: a for a in checks if a.check.startswith(TRUTH_CHECK)}
    out = []
    # a truncating class ("speculative-sampling+top-p") is its mode's share: the modes used are
    # counted per mode, so each class row shows its mode's, and a mode whose positions all fell
    # in its classes has no row of its own (it showed what was used beside no positions)
    classed = {k.split("+", 1)[0] for k in s.truth if "+" in k}
    for mode in sorted({m for m, _ in s.modes} | set(s.truth)):
        base = mode.split("+", 1)[0]
        if mode in classed and not (mode in s.truth and s.truth[mode].num_verified):
            continue
        used = {u: n for (m, u), n in s.modes.items() if m == base}
        t = s.truth.get(mode)
        z = t.z if t else None
        a = by_mode.get(mode)
        ev = a.evidence if a else {}
        out.append(Truth(
            mode_requested=mode, modes_used=used, num_positions=t.num_verified if t else 0,
            observed_top1_rate=t.observed_rate if t else None,
            expected_top1_rate=t.expected_rate if t else None,
            #: where honest sampling puts the observed rate 95% of the time (expected +- 1.96 sd)
            expected_band_95=_band(t), z=z,
            #: PASS / FAIL / INCONCLUSIVE (too few positions to fail); None under greedy
            state=a.state if a else None, state_text=a.why if a else None,
            p_value=ev["p_value"] if a else None,
            #: the 99% bounds of the argmax share (a PASS needs both within 5 points of expected)
            bounds_99=((ev.get("lower_bound"), ev.get("bound"))
                       if ev.get("bound") is not None else None),
            #: the whole-distribution test (``specscope.pit``): the committed tokens' mean
            #: mid-rank PIT (honest sampling: 0.5; lower is sharper, higher flatter) and the
            #: positions it covers; None where the entries carry no PIT
            pit_mean=ev.get("pit_mean"), pit_positions=(t.pit_positions or None) if t else None,
            #: the acceptance rule: accepted share of the draft tokens verify tested against
            #: the share min(1, p/q) gives them, over that many; None where not computed
            accept_observed_rate=ev.get("accept_observed_rate"),
            accept_expected_rate=ev.get("accept_expected_rate"),
            accept_trials=(t.accept_trials or None) if t else None,
            #: the residual rule: the mean PIT of the tokens committed in place of rejected
            #: drafts, in the residual max(p - q, 0) (honest: 0.5), over that many rejections
            resid_mean=ev.get("resid_mean"),
            resid_positions=(t.resid_positions or None) if t else None,
            positions_needed=ev["positions_needed"] if a else None))
    return out


def _band(t: Any) -> tuple[float, float] | None:
    """Where honest sampling puts the observed rate 95% of the time (expected +- 1.96 sd)."""
    if not t or not t.num_verified or t.expected_rate is None:
        return None
    half = 1.96 * math.sqrt(t.var_top1) / t.num_verified
    return (t.expected_rate - half, t.expected_rate + half)


def _draft_health(s: SpecStats, checks: Sequence[Assessment]) -> DraftHealth:
    n = sum(s.draft_hist)
    a = next((c for c in checks if c.check == DRAFT_CHECK), None)
    return DraftHealth(n, tuple(s.draft_hist), s.draft_hist[-1] / n if n else None,
                       a.evidence["honest_share_at_one"] if a else None,
                       a.state if a else None, a.why if a else None,
                       a.evidence["p_value"] if a else None)


def _request_summary(per_request: Sequence[schema.AnomalyRecord], pooled: set[str],
                     run_id: str) -> list[schema.AnomalyRecord]:
    """One anomaly per kind for requests flagged on their own where the pooled test was not."""
    out = []
    for kind in sorted({a.kind for a in per_request} - pooled):
        hits = [a.evidence for a in per_request if a.kind == kind]
        ids = [h["request_id"] for h in hits]
        what = "committed only target argmaxes" if kind == "silent_greedy" else \
            "committed too few target argmaxes"
        out.append(schema.AnomalyRecord(
            run_id=run_id, kind=kind, severity="critical",
            message=(f"{len(ids)} request(s) {what} under sampling, each beyond its own test "
                     f"(p < {PER_REQUEST_ALPHA:g} per request): {', '.join(ids[:10])}"
                     + (" ..." if len(ids) > 10 else "")),
            evidence={"requests": ids, "num_requests_flagged": len(ids),
                      "min_p_value": min(h["p_value"] for h in hits)}))
    return out


def request_truth(records: Iterable[schema.Record], run_id: str = "",
                  detector: SamplingTruthDetector = SamplingTruthDetector(
                      alpha=PER_REQUEST_ALPHA)) -> list[schema.AnomalyRecord]:
    """The sampling-truth test on each request's own positions: the requests that carry the
    evidence, each with its id (``PER_REQUEST_ALPHA`` per request and mode)."""
    per: dict[tuple[str, str], TruthStats] = {}
    for r in records:
        if not isinstance(r, schema.VerifyStepRecord):
            continue
        for e in r.entries:
            if e.num_verified and e.mode_requested != schema.GREEDY:
                key = (e.request_id, e.mode_requested)
                per[key] = per.get(key, TruthStats()).merge(
                    TruthStats(e.num_verified, e.num_top1, e.expected_top1, e.var_top1))
    out = []
    for (rid, mode), t in sorted(per.items()):
        a = detector.assess_one(mode, t, run_id, scope=rid)
        if a.anomaly is not None:
            out.append(a.anomaly)
    return out


def _run_section(records: Sequence[schema.Record], run: schema.RunRecord | None,
                 reference: Sequence[Any] | None, window_s: float | None,
                 baseline: SpecStats | None = None) -> Section:
    s = SpecStats().observe_all(records)
    ref_stats = SpecStats().observe_all(reference) if reference else None
    health = schema.latest_health(records)
    target_only = run is not None and not run.num_steps
    # per-request sampling truth only where the run's verification is per-token and measured
    per_request = [] if kind_of(run, s)[0] else request_truth(records, run.run_id if run else "")
    divergence = None
    if reference and s.eval_rate("exact_match") is not None and run is not None:
        from .diverge import diverge  # greedy outputs against the reference's, token by token

        found = diverge(records, reference, run_id=run.run_id)
        divergence = found[0].summary() if found and found[0].pairs else None
    section = _section(s, run, _windows(records, window_s, target_only), reference=ref_stats,
                       baseline=baseline, health=health, per_request=per_request,
                       divergence=divergence)
    more = []
    ranks = rank_counts(records)  # one rank (llama.cpp: one slot) at zero against the others
    if len(ranks) > 1:
        more += SlotDetector().check_ranks(ranks, run.run_id if run else "")
    if run is not None:  # acceptance that ages with uptime, restarts each a new level
        more += DriftDetector().check(records, run.run_id)
    seen = seen_by_hooks(records)
    return replace(section, anomalies=section.anomalies + tuple(Anomaly.of(a) for a in more),
                   probe=(probe_section(run, records) if run is not None
                          and run.labels.get("source_format") == "probe" else None),
                   engine_counts=EngineSeen.from_dict(seen) if seen else None)


def probe_section(run: schema.RunRecord, records: Sequence[schema.Record]) -> ProbeSummary:
    """A ``specscope probe`` trace: its verdict, the endpoint, and each failing check as the
    probe recorded it (its anomalies)."""
    found = [r for r in records if isinstance(r, schema.AnomalyRecord)]
    return ProbeSummary(run.labels.get("probe_url"), run.labels.get("probe_verdict"),
                        run.labels.get("logprobs"), tuple((a.kind, a.message) for a in found))


def _latency(s: SpecStats, name: str) -> Percentiles:
    """Exact percentiles from raw samples; else interpolated within histogram buckets
    (a long-running collector keeps only the histograms), marked ``from_buckets``."""
    if getattr(s, name) or name not in s.hists:
        return _pct(getattr(s, name))
    h = s.hists[name]
    return _from_buckets(h) if sum(h.counts) else _pct([])


def _phases(s: SpecStats) -> dict[str, Percentiles]:
    """Per phase: percentiles and total; from the histograms where samples were not kept."""
    if s.phase_ns:
        return {name: _pct([v / 1e9 for v in ns], total_s=sum(ns) / 1e9)
                for name, ns in sorted(s.phase_ns.items())}
    return {key[6:]: _from_buckets(h, total_s=h.total) for key, h in sorted(s.hists.items())
            if key.startswith("phase:") and any(h.counts)}


def stats_section(s: SpecStats, run: schema.RunRecord | None, windows: Sequence[Window], *,
                  anomalies: Sequence[schema.AnomalyRecord] | None = None) -> Section:
    """One run's section from its pooled stats (records or a collector's aggregates alike).

    ``anomalies`` None runs the detectors on ``s``; otherwise the given (live) ones are shown.
    """
    return _section(s, run, windows, anomalies=anomalies)


def _section(s: SpecStats, run: schema.RunRecord | None, windows: Sequence[Window], *,
             reference: SpecStats | None = None, baseline: SpecStats | None = None,
             anomalies: Sequence[schema.AnomalyRecord] | None = None,
             health: Sequence[schema.HookHealthRecord] = (),
             per_request: Sequence[schema.AnomalyRecord] = (),
             divergence: dict[str, Any] | None = None) -> Section:
    """A run's section, built from its stats; ``per_request``: the per-request tests' findings."""
    run_id = run.run_id if run else ""
    checks, raised = evaluate(s, run_id, detectors_for(run))
    if anomalies is None:
        anomalies = raised + _request_summary(per_request, {a.kind for a in raised}, run_id)
        if baseline is not None:
            if not kind_of(run, s)[0] == "forced":  # a set acceptance regresses nothing
                anomalies += AcceptanceRegressionDetector(baseline).check(s, run_id)
            anomalies += QualityDetector(baseline).check(s, run_id)
    anomalies = list(anomalies)
    kind, kind_why = kind_of(run, s)
    span_s = ((s.t_last_ns - s.t_first_ns) / 1e9
              if s.t_first_ns is not None and s.t_last_ns is not None else None)
    busy_s = _busy.seconds(s.busy) if s.busy else None
    elapsed_s = busy_s or span_s
    gate = decide_gate(s, reference, anomalies, run=run, assessments=checks,
                       divergence=divergence)
    return Section(
        run=run,
        #: "measured", "forced" (acceptance is a setting: a speed-only run) or "lossy"
        #: (verification not per-token by configuration), and why (collector/configured.py)
        verification=kind or "measured", verification_why=kind_why or None,
        totals=Totals(
            **_acceptance_of(s), accept_length_histogram=dict(sorted(s.accept_len_hist.items())),
            num_verify_steps=s.num_steps, num_requests=s.num_requests,
            output_tokens=s.output_tokens,
            #: output tokens over the run's busy time (some request in flight), else over its
            #: span: runs that take turns are not charged for their idle time
            output_tokens_per_s=(s.output_tokens / elapsed_s)
            if elapsed_s and s.num_requests else None,
            busy_s=busy_s, span_s=span_s, num_clamped=s.num_clamped,
            #: steps by the draft depth k they ran with (0: speculation off, as a policy
            #: chose), steps where the policy changed k, times it went off
            steps_by_depth={str(k): v for k, v in sorted(s.depth_steps.items())},
            depth_changes=s.depth_changes, off_periods=s.off_periods),
        windows=tuple(windows),
        sampling_truth=tuple(_truth(s, checks)),
        requests_flagged=tuple(FlaggedRequest.from_dict(a.evidence) for a in per_request),
        fallbacks=dict(s.fallbacks),
        draft_health=_draft_health(s, checks),
        latency={k: _latency(s, k) for k in ("ttft_s", "tpot_s", "itl_chunk_s", "itl_token_s",
                                             "e2e_s")},
        phases=_phases(s),
        eval_rates={k: s.eval_rate(k) for k in sorted(s.evals)},
        eval_reference_rates=({k: reference.eval_rate(k) for k in sorted(reference.evals)}
                              if reference else None),
        gate=gate.verdict, gate_text=gate.text, gate_checks=gate.checks,
        eval_divergence=divergence,
        engine_gauges={k: v[0] / v[1] for k, v in sorted(s.gauges.items()) if v[1]},
        benchmarks=tuple(Benchmark(b.source, dict(b.metrics), dict(b.config))
                         for b in s.benchmarks),
        #: each finding with its own ``kind`` ("silent_greedy", ...), not the record tag
        anomalies=tuple(Anomaly.of(a) for a in anomalies),
        hooks=tuple(health))


def measured_stats(records: Iterable[schema.Record]) -> SpecStats:
    """Pooled stats of a trace's measured runs (reference runs left out): a baseline."""
    records = list(records)
    refs = {r.run_id for r in records
            if isinstance(r, schema.RunRecord) and r.labels.get("role") == "reference"}
    return SpecStats().observe_all(r for r in records if getattr(r, "run_id", "") not in refs)


def build_sections(records: Iterable[schema.Record], *, window_s: float | None = None,
                   baseline: Iterable[Any] | None = None) -> tuple[Section, list[Section]]:
    """A trace's sections: the pooled one (its ``totals``/``windows``) and one per run.

    Runs labelled ``role=reference`` (the same workload without speculation) are not pooled;
    they serve as the eval gate's baseline for the run named in their ``reference_for`` label.
    ``baseline``: records of an earlier run; acceptance regressions and output-quality changes
    against it become anomalies.
    """
    records = list(records)
    base_stats = measured_stats(baseline) if baseline is not None else None
    runs = {r.run_id: r for r in records if isinstance(r, schema.RunRecord)}
    by_run: dict[str, list[Any]] = {}
    for r in records:
        by_run.setdefault(getattr(r, "run_id", ""), []).append(r)
    refs = {run.labels.get("reference_for"): rid for rid, run in runs.items()
            if run.labels.get("role") == "reference"}
    measured = [rid for rid in by_run if rid not in refs.values()]
    sections = [_run_section(by_run[rid], runs.get(rid), by_run.get(refs.get(rid, "\0")), window_s,
                             base_stats) for rid in measured]
    pooled = [r for rid in measured for r in by_run[rid]]
    top = _run_section(pooled, None, None, window_s) if len(sections) != 1 else sections[0]
    if len(sections) > 1:  # over several runs only counts pool: a source's own figures (an
        # SGLang gauge, a V0 total) belong to their run and label set, never averaged across
        top = replace(top, totals=replace(top.totals, reported_mean_acceptance_length=None,
                                          reported_acceptance_rate=None),
                      windows=tuple(replace(w, reported_mean_acceptance_length=None,
                                            reported_acceptance_rate=None) for w in top.windows))
    return top, sections


def report_dict(top: Section | None, sections: Sequence[Section],
                problems: Sequence[Any] = (), **extra: Any) -> dict[str, Any]:
    """The document ``report --json`` writes: ``top``'s totals and windows (None: null, none),
    each section's JSON form, the unreadable lines; ``extra`` keys after ``definitions``."""
    return {
        "schema_version": schema.SCHEMA_VERSION,
        "definitions": DEFINITIONS,
        **extra,
        "totals": top.totals.as_dict() if top is not None else None,
        "windows": [w.as_dict() for w in top.windows] if top is not None else [],
        "runs": [s.as_dict() for s in sections],
        "problems": [str(p) for p in problems],
    }


def report_json(report: dict[str, Any]) -> str:
    """The text ``report --json`` prints of a ``report_dict`` (one newline at the end)."""
    return json.dumps(report, indent=1, default=str) + "\n"


def build_report(records: Iterable[schema.Record], *, window_s: float | None = None,
                 problems: Sequence[Any] = (), baseline: Iterable[Any] | None = None) -> dict[str, Any]:
    """A trace's report as ``report --json`` writes it (``build_sections``: the same, typed)."""
    top, sections = build_sections(records, window_s=window_s, baseline=baseline)
    return report_dict(top, sections, problems)
