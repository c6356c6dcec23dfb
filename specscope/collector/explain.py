"""``specscope explain``: why speculation is faster or slower, from separately measured factors.

For each speculative run and its baseline (the same workload without speculation), at the
run's batch size:

- acceptance length AL (tokens committed per request per verify step, bonus included) and
  per-position acceptance, from the counts;
- the target-only step time, from the baseline's ``decode`` phases;
- the speculative step time, from this run's own phases: draft_extend, draft, verify_forward,
  verify_sample, and idle: the host time of the step outside them (between its phases and up
  to the next step's first phase);
- each run's prefill time, from its ``prefill`` phases.

The predicted time of each run is its prefill plus its steps at those step times, all from the
phases' own clocks; the predicted speedup is the ratio of tokens per predicted second, set
beside the speedup measured from the two runs' wall-clock throughput (output tokens over busy
time: seconds with one of the run's requests in flight), which none of the factors uses. Tokens
per step are the acceptance length less what a request's end discards (accepted tokens past EOS
or max tokens are verified, then dropped). For other draft depths k (up to the measured one) it
models AL(k) = 1 + s x the sum of the first k per-position rates (s: the share of request-steps
that drafted at all, 1 for a draft model, less for prompt lookup),
the draft cost as linear in k and the verify forward as linear in tokens between the
target-only step (1 token) and the measured k + 1: the break-even acceptance length of each k
and a verdict per batch size, for throughput and for a TPOT target. Factors a source does not
give (engine logs time verify but not the draft) are named, never guessed.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any, Iterable, Sequence

from .. import schema
from .busy import busy_seconds
from .stats import SpecStats

SPEC_PHASES = ("draft_extend", "draft", "verify_forward", "verify_sample")


def _steps(records: Sequence[schema.Record]) -> dict[int, list[schema.PhaseRecord]]:
    by: dict[int, list[schema.PhaseRecord]] = defaultdict(list)
    for p in records:
        if isinstance(p, schema.PhaseRecord) and p.step >= 0 and p.phase != "prefill":
            by[p.step].append(p)
    return by


def _span_ms(phases: list[schema.PhaseRecord]) -> float:
    return (max(p.t_start_ns + p.duration_ns for p in phases) - min(p.t_start_ns for p in phases)) / 1e6


def _wall(records: Sequence[schema.Record]) -> tuple[int, float | None]:
    """Output tokens and busy seconds (some request in flight: a run that takes turns with
    others is not charged for the time it waited)."""
    reqs = [r for r in records if isinstance(r, schema.RequestRecord) and r.t_finish_ns]
    if not reqs:
        return 0, None
    return sum(r.num_output_tokens for r in reqs), busy_seconds(reqs)


def _cycles(records: Sequence[schema.Record], steps: dict[int, list[schema.PhaseRecord]]) -> dict[int, float]:
    """step -> ms from its first phase's start to the next step's start: the host work between
    steps (commit, scheduling) is the step's idle time, measured from the phases' own clocks,
    not from the run's wall clock. A step followed by a prefill (a wave's end, a new request)
    keeps its own span: the gap is not its."""
    starts = sorted([(min(p.t_start_ns for p in ph), n) for n, ph in steps.items()] +
                    [(p.t_start_ns, None) for p in records if isinstance(p, schema.PhaseRecord)
                     and p.phase == "prefill"])
    return {n: (t1 - t0) / 1e6 for (t0, n), (t1, n1) in zip(starts, starts[1:])
            if n is not None and n1 is not None}


def step_spans(records: Sequence[schema.Record]) -> dict[int, tuple[int, float]]:
    """step -> (its start ns, its span ms: to the next step's start, else its phases' own)."""
    steps = _steps(records)
    cycle = _cycles(records, steps)
    return {n: (min(p.t_start_ns for p in ph), max(cycle.get(n, _span_ms(ph)), _span_ms(ph)))
            for n, ph in steps.items()}


def run_factors(records: Sequence[schema.Record], only: set[int] | None = None) -> dict[str, Any]:
    """The measured factors of one run (speculative or target-only); with ``only``, of those
    steps alone (each step's span still ends where the run's next step or prefill starts)."""
    steps = _steps(records)
    prefill_ms = sum(p.duration_ns for p in records if isinstance(p, schema.PhaseRecord)
                     and p.phase == "prefill") / 1e6
    phases: dict[str, list[float]] = defaultdict(list)
    cycle = _cycles(records, steps)
    if only is not None:
        steps = {n: ph for n, ph in steps.items() if n in only}
        records = [r for r in records if not isinstance(r, (schema.VerifyStepRecord, schema.PhaseRecord))
                   or (r.step in only and getattr(r, "phase", "") != "prefill")]
    idle, spans = [], []
    for n, ph in steps.items():
        for p in ph:
            phases[p.phase].append(p.duration_ns / 1e6)
        busy = sum(p.duration_ns for p in ph) / 1e6
        span = max(cycle.get(n, _span_ms(ph)), _span_ms(ph))
        spans.append(span)
        idle.append(max(0.0, span - busy))
    verify = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    stats = SpecStats().observe_all(records)
    tokens, wall = _wall(records)
    n_req = sum(1 for r in records if isinstance(r, schema.RequestRecord))
    out: dict[str, Any] = {
        "steps": len(steps), "prefill_ms": prefill_ms if prefill_ms else None,
        "step_ms": statistics.mean(spans) if spans else None,
        "phase_ms": {k: statistics.mean(v) for k, v in phases.items()},
        "idle_ms": statistics.mean(idle) if idle else None,
        "tokens": tokens, "requests": n_req, "wall_s": wall,
        "tok_s": tokens / wall if wall else None,
    }
    if verify:
        out["batch"] = sum(len(v.entries) for v in verify) / len(verify)
        out["acceptance_length"] = stats.mean_acceptance_length
        # tokens a request-step delivered: accepted tokens past a request's end (EOS, max
        # tokens) are verified and counted in the acceptance length, then discarded
        entries = sum(len(v.entries) for v in verify)
        out["delivered_per_step"] = (tokens - n_req) / entries if entries and tokens else None
        out["per_position"] = stats.per_position_acceptance
        # request-steps that drafted at all: a prompt-lookup drafter finds no match in many
        out["draft_share"] = stats.num_drafts / entries if entries else None
        out["k"] = max((e.num_drafted for v in verify for e in v.entries), default=0)
    else:  # target-only: tokens per decode step = its mean batch
        out["batch"] = (tokens - n_req) / len(steps) if steps else None
    return out


#: a batch-size class needs this many steps in both runs to be explained on its own
MIN_CLASS_STEPS = 5


def batch_class(n: int) -> int:
    """The batch-size class of a step: powers of two (1, 2, 4 = 3-4, 8 = 5-8, ...)."""
    return 1 << max(0, (n - 1).bit_length())


def step_batches(records: Sequence[schema.Record]) -> dict[int, int]:
    """step -> running batch of each step: a speculative step's own batch size; a target-only
    decode step's, the requests between their first token and their finish at its start."""
    import bisect

    verify = {v.step: v.batch_size for v in records if isinstance(v, schema.VerifyStepRecord)}
    if verify:
        return verify
    reqs = [r for r in records if isinstance(r, schema.RequestRecord) and r.t_first_token_ns
            and r.t_finish_ns]
    starts = sorted(r.t_first_token_ns for r in reqs)
    ends = sorted(r.t_finish_ns for r in reqs)
    out = {}
    for n, ph in _steps(records).items():
        t = min(p.t_start_ns for p in ph)
        out[n] = bisect.bisect_right(starts, t) - bisect.bisect_right(ends, t)
    return out


def by_batch(spec: Sequence[Any], base: Sequence[Any], *, tpot_ms: float | None = None
             ) -> dict[int, dict[str, Any]]:
    """The decomposition per batch-size class within the two runs (a served run batches at
    several sizes): each class's steps only — their phases, their counts, the baseline's decode
    steps of the same class — with its own per-k model and verdict. Wall-clock throughput is a
    whole-run figure, so no measured speedup is given per class. Classes with fewer than
    ``MIN_CLASS_STEPS`` steps in either run are left out."""
    sb, bb = step_batches(spec), step_batches(base)
    out: dict[int, dict[str, Any]] = {}
    for c in sorted({batch_class(n) for n in sb.values() if n > 0}):
        s_steps = {n for n, b in sb.items() if b > 0 and batch_class(b) == c}
        b_steps = {n for n, b in bb.items() if b > 0 and batch_class(b) == c}
        if len(s_steps) < MIN_CLASS_STEPS or len(b_steps) < MIN_CLASS_STEPS:
            continue
        s = run_factors([r for r in spec if not isinstance(r, schema.RequestRecord)], s_steps)
        b = run_factors([r for r in base if not isinstance(r, schema.RequestRecord)], b_steps)
        b["batch"] = statistics.mean(bb[n] for n in b_steps)  # not tokens / steps: no requests here
        if not (s["step_ms"] and b["step_ms"] and s.get("acceptance_length")):
            continue
        entry: dict[str, Any] = {"steps": s["steps"], "baseline_steps": b["steps"],
                                 "batch": s["batch"], "baseline_batch": b["batch"],
                                 "acceptance_length": s["acceptance_length"],
                                 "step_ms": s["step_ms"], "baseline_step_ms": b["step_ms"],
                                 "phase_ms": s["phase_ms"]}
        entry["steady_state_speedup"] = (s["acceptance_length"] * (s["batch"] or 1) / (b["batch"] or 1)
                                         * b["step_ms"] / s["step_ms"])
        entry["per_k"] = per_k(s, b, s.get("k") or 0)
        entry["verdict"] = verdict(entry["per_k"], b["step_ms"], tpot_ms)
        out[c] = entry
    return out


def _category_sums(records: Sequence[schema.Record], prompts: set[str] | None) -> dict[str, list[float]]:
    """category -> [requests, output tokens, steps it took part in, their ms, TTFT ms, E2E ms]
    over the run's requests (of ``prompts`` only, where given). A request takes part in the
    steps that start after its first token and before its finish."""
    import bisect

    spans = sorted(step_spans(records).values())
    starts = [t for t, _ in spans]
    cum = [0.0]
    for _, ms in spans:
        cum.append(cum[-1] + ms)
    out: dict[str, list[float]] = {}
    for r in records:
        if not (isinstance(r, schema.RequestRecord) and r.category and r.t_first_token_ns
                and r.t_finish_ns and r.t_arrival_ns) or (prompts is not None and r.prompt_id not in prompts):
            continue
        i, j = bisect.bisect_right(starts, r.t_first_token_ns), bisect.bisect_left(starts, r.t_finish_ns)
        row = out.setdefault(r.category, [0, 0, 0, 0.0, 0.0, 0.0])
        for k, v in enumerate((1, r.num_output_tokens, max(0, j - i), cum[max(j, i)] - cum[i],
                               (r.t_first_token_ns - r.t_arrival_ns) / 1e6,
                               (r.t_finish_ns - r.t_arrival_ns) / 1e6)):
            row[k] += v
    return out


def by_category(spec: Sequence[Any], base: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Per workload category, over the prompts both runs decoded: tokens a request-step
    delivered and the step time its requests saw (phase clocks), in both runs; the speedup they
    predict, TTFT included, beside the one measured from the requests' own E2E times (the
    category matrix's). In a mixed batch every request pays the batch's step; a category gains
    by its tokens per step alone."""
    def ids(records):
        return {r.prompt_id for r in records if isinstance(r, schema.RequestRecord) and r.prompt_id}

    both = ids(spec) & ids(base)
    s_sums, b_sums = _category_sums(spec, both), _category_sums(base, both)
    out: dict[str, dict[str, Any]] = {}
    for cat in sorted(set(s_sums) & set(b_sums)):
        (n, tok, steps, ms, ttft, e2e), (bn, btok, bsteps, bms, bttft, be2e) = s_sums[cat], b_sums[cat]
        if not (steps and bsteps and tok and btok and e2e and be2e):
            continue
        pred = (tok / (ttft + ms)) / (btok / (bttft + bms))
        meas = (tok / e2e) / (btok / be2e)
        out[cat] = {"requests": n, "baseline_requests": bn,
                    "delivered_per_step": (tok - n) / steps, "step_ms": ms / steps,
                    "baseline_step_ms": bms / bsteps, "ttft_share": ttft / (ttft + ms),
                    "predicted_speedup": pred, "measured_speedup": meas,
                    "prediction_error": pred / meas - 1}
    return out


def _predicted_s(f: dict[str, Any]) -> float | None:
    """Prefill plus the run's steps at its step time (phase clocks only)."""
    if not f["step_ms"] or not f["steps"]:
        return None
    return ((f["prefill_ms"] or 0.0) + f["steps"] * f["step_ms"]) / 1e3


def explain_pair(spec: Sequence[Any], base: Sequence[Any], *, tpot_ms: float | None = None) -> dict[str, Any]:
    """The decomposition of one speculative run against its baseline (see the module doc)."""
    s, b = run_factors(spec), run_factors(base)
    missing = [name for name, ok in (
        ("target-only step time (baseline decode phases)", b["step_ms"]),
        ("speculative step time (this run's phases)", s["step_ms"]),
        ("draft time (draft / draft_extend phases)", "draft" in s["phase_ms"]),
        ("acceptance length (verify counts)", s.get("acceptance_length")),
        ("wall-clock throughput of both runs", s["tok_s"] and b["tok_s"])) if not ok]
    out: dict[str, Any] = {"spec": s, "baseline": b, "not_measured": missing}
    al, k = s.get("acceptance_length"), s.get("k") or 0
    if s["step_ms"] and b["step_ms"] and al:
        t_spec, t_base = _predicted_s(s), _predicted_s(b)
        out["predicted_speedup"] = (s["tokens"] / t_spec) / (b["tokens"] / t_base) if t_spec and t_base else None
        out["steady_state_speedup"] = ((s.get("delivered_per_step") or al) * (s["batch"] or 1)
                                       / (b["batch"] or 1) * b["step_ms"] / s["step_ms"])
        out["verify_vs_target_step"] = s["phase_ms"].get("verify_forward", 0) / b["step_ms"]
        out["rejected_share_of_verify"] = (1 - (al - 1) / k) * k / (k + 1) if k else None
        out["per_k"] = per_k(s, b, k)
        out["verdict"] = verdict(out["per_k"], b["step_ms"], tpot_ms)
    if s["tok_s"] and b["tok_s"]:
        out["measured_speedup"] = s["tok_s"] / b["tok_s"]
    if out.get("predicted_speedup") and out.get("measured_speedup"):
        out["prediction_error"] = out["predicted_speedup"] / out["measured_speedup"] - 1
    cats = by_category(spec, base)
    if cats:
        out["by_category"] = cats
    classes = by_batch(spec, base, tpot_ms=tpot_ms)
    if len(classes) > 1:  # a run at one batch size is explained above as a whole
        out["by_batch"] = classes
    return out


def per_k(s: dict[str, Any], b: dict[str, Any], k_m: int) -> list[dict[str, Any]]:
    """Per draft depth 1..k_m: AL(k), modelled step time, predicted speedup, break-even AL."""
    ph, t1 = s["phase_ms"], b["step_ms"]
    if not k_m or "draft" not in ph or "verify_forward" not in ph:
        return []
    fixed = ph.get("draft_extend", 0) + ph.get("verify_sample", 0) + (s["idle_ms"] or 0)
    ratio = (s["batch"] or 1) / (b["batch"] or 1)
    rows = []
    for k in range(1, k_m + 1):
        # tokens per request-step: the request-steps that drafted nothing commit one
        al = 1 + (s.get("draft_share") or 1.0) * sum(p or 0 for p in s["per_position"][:k])
        step = fixed + ph["draft"] * k / k_m + t1 + (ph["verify_forward"] - t1) * k / k_m
        rows.append({"k": k, "acceptance_length": al, "step_ms": step,
                     "speedup": al * ratio * t1 / step, "break_even_acceptance_length": step / (t1 * ratio),
                     "tpot_ms": step / al, "measured": k == k_m})
    return rows


def verdict(rows: list[dict[str, Any]], t_target_ms: float, tpot_ms: float | None) -> dict[str, Any]:
    if not rows:
        return {"throughput": "unknown: the factors above were not all measured"}
    best = max(rows, key=lambda r: r["speedup"])
    out = {"best_k": best["k"] if best["speedup"] > 1 else 0,
           "throughput": (f"speculate with k = {best['k']} (predicted {best['speedup']:.2f}x)"
                          if best["speedup"] > 1 else
                          f"don't speculate: the best k ({best['k']}) is predicted at "
                          f"{best['speedup']:.2f}x; it needs acceptance length "
                          f"{best['break_even_acceptance_length']:.2f} to break even, it has "
                          f"{best['acceptance_length']:.2f}")}
    if tpot_ms is not None:
        ok = [r for r in rows if r["tpot_ms"] <= tpot_ms]
        fastest = min(rows, key=lambda r: r["tpot_ms"])
        if t_target_ms <= tpot_ms and (not ok or fastest["tpot_ms"] >= t_target_ms):
            out["latency"] = (f"don't speculate: target-only TPOT {t_target_ms:.1f} ms meets "
                              f"{tpot_ms:g} ms and no k is faster")
        elif ok:
            out["latency"] = f"speculate with k = {fastest['k']}: TPOT {fastest['tpot_ms']:.1f} ms"
        else:
            out["latency"] = (f"nothing meets {tpot_ms:g} ms: target-only {t_target_ms:.1f} ms, "
                              f"best k = {fastest['k']} at {fastest['tpot_ms']:.1f} ms")
    return out


def pairs(records: Iterable[schema.Record], baseline: Iterable[Any] | None = None) -> list[tuple[str, list, list]]:
    """(run id, its records, its baseline's records) for every speculative run: the baseline
    is its ``reference_for`` run in the trace, else the first run without speculation of
    ``baseline`` (or of the trace)."""
    records = list(records)
    by: dict[str, list[Any]] = defaultdict(list)
    for r in records:
        by[getattr(r, "run_id", "")].append(r)
    runs = [r for r in records if isinstance(r, schema.RunRecord)]
    refs = {r.labels.get("reference_for"): r.run_id for r in runs if r.labels.get("role") == "reference"}
    plain = [r.run_id for r in runs if not r.num_steps]
    base_records = list(baseline) if baseline is not None else []
    base_runs = [r.run_id for r in base_records if isinstance(r, schema.RunRecord) and not r.num_steps]
    out = []
    for run in runs:
        if not run.num_steps or run.labels.get("role") == "reference":
            continue
        if run.run_id in refs:
            base = by[refs[run.run_id]]
        elif base_runs:
            base = [r for r in base_records if getattr(r, "run_id", "") == base_runs[0]]
        elif plain:
            base = by[plain[0]]
        else:
            continue
        out.append((run.run_id, by[run.run_id], base))
    return out


def explain_all(records: Iterable[schema.Record], baseline: Iterable[Any] | None = None, *,
                tpot_ms: float | None = None) -> dict[str, Any]:
    """``specscope explain --json``'s object: every speculative run against its baseline (its
    reference run, or ``baseline``'s), and the verdicts as engine settings; ``runs`` is empty
    where no run has a baseline."""
    results = {rid: explain_pair(spec, base, tpot_ms=tpot_ms)
               for rid, spec, base in pairs(records, baseline)}
    configs = engine_configs([(c["batch"], c) for e in results.values() for c in e["by_batch"].values()]
                             if all("by_batch" in e for e in results.values()) and results else
                             [(e["spec"].get("batch"), e) for e in results.values()])
    return {"runs": results, "engine_configs": configs}


def format_explain(run_id: str, e: dict[str, Any]) -> str:
    s, b = e["spec"], e["baseline"]

    def f(v: Any, spec: str = ".2f") -> str:
        return "n/a" if v is None else format(v, spec)

    lines = [f"{run_id}: batch {f(s.get('batch'), '.1f')}, k = {s.get('k')}, acceptance length "
             f"{f(s.get('acceptance_length'))} (bonus included), {f(s.get('delivered_per_step'))} "
             "delivered per request-step (the rest fell past a request's end)",
             f"  target-only step {f(b['step_ms'], '.1f')} ms (baseline decode phases, batch "
             f"{f(b.get('batch'), '.1f')}); speculative step {f(s['step_ms'], '.1f')} ms:"]
    for name in SPEC_PHASES:
        if name in s["phase_ms"]:
            lines.append(f"    {name:<15} {s['phase_ms'][name]:8.1f} ms")
    lines.append(f"    {'idle (host)':<15} {f(s['idle_ms'], '8.1f')} ms")
    lines.append(f"  verify forward = {f(e.get('verify_vs_target_step'))} x a target-only step; "
                 f"{f(e.get('rejected_share_of_verify'), '.0%')} of the positions it verifies are "
                 "rejected drafts")
    lines.append(f"  predicted speedup {f(e.get('predicted_speedup'))}x (steady state "
                 f"{f(e.get('steady_state_speedup'))}x) vs measured {f(e.get('measured_speedup'))}x "
                 f"from wall-clock throughput" + (f" (prediction off by {e['prediction_error']:+.1%})"
                                                  if e.get("prediction_error") is not None else ""))
    for r in e.get("per_k", []):
        lines.append(f"    k={r['k']}: AL {r['acceptance_length']:.2f}, step {r['step_ms']:.1f} ms, "
                     f"speedup {r['speedup']:.2f}x, break-even AL {r['break_even_acceptance_length']:.2f}"
                     + ("  (measured)" if r["measured"] else "  (modelled)"))
    v = e.get("verdict", {})
    for key in ("throughput", "latency"):
        if key in v:
            lines.append(f"  verdict ({key}): {v[key]}")
    if e.get("by_batch"):
        lines.append("  per batch size within the run (its steps and the baseline's decode steps "
                     "of each class; no wall-clock speedup per class):")
        for c, x in e["by_batch"].items():
            lines.append(f"    batch <= {c} ({x['steps']} steps, mean {x['batch']:.1f}; baseline "
                         f"{x['baseline_steps']} steps): AL {x['acceptance_length']:.2f}, step "
                         f"{x['step_ms']:.1f} ms vs target-only {x['baseline_step_ms']:.1f} ms, "
                         f"steady state {x['steady_state_speedup']:.2f}x; "
                         f"{x['verdict'].get('throughput', '')}")
    if e.get("by_category"):
        lines.append("  per category (its requests' tokens per request-step, bonus included, and "
                     "the step time they saw; TTFT included; measured: the requests' own E2E):")
        for c, x in e["by_category"].items():
            lines.append(f"    {c:<14} {x['requests']:>3} req: {x['delivered_per_step']:.2f} tokens/step, "
                         f"step {x['step_ms']:.1f} ms vs target-only {x['baseline_step_ms']:.1f} ms: "
                         f"predicted {x['predicted_speedup']:.2f}x, measured "
                         f"{x['measured_speedup']:.2f}x ({x['prediction_error']:+.1%})")
    if e["not_measured"]:
        lines.append("  not measured: " + "; ".join(e["not_measured"]))
    return "\n".join(lines)


def engine_configs(results: Sequence[tuple[float | None, dict[str, Any]]]) -> dict[str, Any]:
    """The verdicts as the engines' own settings: k per batch size (0 = speculation off).

    vLLM takes one ``num_speculative_tokens`` (its per-batch-size form maps batch sizes to k);
    SGLang's adaptive step tiers map batch sizes to ``speculative_num_steps``.
    """
    by_batch = {round(b): e["verdict"]["best_k"] for b, e in results
                if b and "best_k" in e.get("verdict", {})}
    if not by_batch:
        return {}
    return {"k_by_batch_size": dict(sorted(by_batch.items())),
            "vllm": {"speculative_config": None if not any(by_batch.values()) else
                     {"num_speculative_tokens": max(by_batch.values()),
                      "num_speculative_tokens_by_batch_size": dict(sorted(by_batch.items()))}},
            "sglang": {"speculative_num_steps_by_batch_size": dict(sorted(by_batch.items()))}}
