"""Per request and per workload category: pure functions over a trace's records.

Each request's figures come from its RequestRecord where the source gave them (the decoder,
every per-request importer) and otherwise from the verify entries carrying its id (the hooks).
Acceptance length includes the bonus token: 1 + accepted / verify steps.

Two means are given side by side: request-weighted (every request counts once) and
token-weighted (every verify step counts once, 1 + sum(accepted) / sum(steps)); engines'
counters (vLLM, SGLang, TensorRT-LLM) give the token-weighted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from .. import schema
from .configured import configured
from .counts import Acceptance, clamp, pool
from .evalgate import repetition_loop

#: a request pinned at k+1 accepts (nearly) every draft: with repetition it is a loop
PINNED_MARGIN = 0.05  #: acceptance length within 5% of k + 1
#: a request stuck near 1 accepts (nearly) nothing: often garbled output or a wrong draft
NEAR_ONE = 1.10
MIN_STEPS_TO_FLAG = 8  #: fewer verify steps than this say too little to flag either way


@dataclass
class RequestRow:
    run_id: str
    request_id: str
    category: str
    steps: int | None
    drafted: int | None
    accepted: int | None
    output_tokens: int
    k: int | None  #: the most draft tokens it was offered in one step (None: unknown)
    e2e_s: float | None
    tpot_s: float | None
    repetition: bool | None  #: n-gram repetition over its output (None: no output kept)
    flags: list[dict[str, Any]] = field(default_factory=list)  #: {"flag", "evidence"}

    @property
    def acceptance(self) -> Acceptance:
        return Acceptance(self.steps, self.drafted, self.accepted)

    @property
    def acceptance_length(self) -> float | None:
        return self.acceptance.length

    @property
    def acceptance_rate(self) -> float | None:
        return self.acceptance.rate


def request_rows(records: Iterable[schema.Record]) -> list[RequestRow]:
    """One row per request, in trace order, with its flags."""
    records = list(records)
    runs = {r.run_id: r for r in records if isinstance(r, schema.RunRecord)}
    per: dict[tuple[str, str], list[int]] = {}  #: (run, request) -> [steps, drafted, accepted, k]
    for r in records:
        if isinstance(r, schema.VerifyStepRecord):
            for e in r.entries:
                if e.num_drafted <= 0:
                    continue
                acc = per.setdefault((r.run_id, e.request_id), [0, 0, 0, 0])
                acc[0] += 1
                acc[1] += e.num_drafted
                acc[2] += clamp(e.num_drafted, e.num_accepted)[1]
                acc[3] = max(acc[3], e.num_drafted)
    loops = {(r.run_id, r.request_id): r.repetition_loop for r in records
             if isinstance(r, schema.EvalRecord)}
    rows = []
    for r in records:
        if not isinstance(r, schema.RequestRecord):
            continue
        v = per.get((r.run_id, r.request_id))
        steps = r.num_verify_steps if r.num_verify_steps is not None else (v[0] if v else None)
        drafted = r.num_draft_tokens if r.num_draft_tokens is not None else (v[1] if v else None)
        accepted = r.num_accepted if r.num_accepted is not None else (v[2] if v else None)
        run = runs.get(r.run_id)
        k = v[3] if v else (run.num_steps if run and run.num_steps else None)
        rep = loops.get((r.run_id, r.request_id))
        if rep is None and r.output_token_ids:
            rep = repetition_loop(r.output_token_ids)
        row = RequestRow(r.run_id, r.request_id, r.category, steps, drafted, accepted,
                         r.num_output_tokens, k, r.e2e_s, r.tpot_s, rep)
        # a run whose acceptance is forced by configuration flags nothing on acceptance
        row.flags = [] if configured(run)[0] == "forced" else flags(row)
        rows.append(row)
    return rows


def flags(row: RequestRow) -> list[dict[str, Any]]:
    """The rule-based outliers, each with its evidence."""
    al = row.acceptance_length
    if al is None or not row.steps or row.steps < MIN_STEPS_TO_FLAG:
        return []
    out = []
    if row.k and al >= (row.k + 1) * (1 - PINNED_MARGIN) and row.repetition:
        out.append({"flag": "pinned_at_k_plus_1",
                    "evidence": f"acceptance length {al:.2f} of at most {row.k + 1} over {row.steps} "
                                "steps, and its output repeats its own n-grams (a repetition loop)"})
    elif row.k and al >= (row.k + 1) * (1 - PINNED_MARGIN):
        out.append({"flag": "pinned_at_k_plus_1_no_repetition_signal",
                    "evidence": f"acceptance length {al:.2f} of at most {row.k + 1} over {row.steps} "
                                "steps; no repetition signal (output not kept or not repeating)"})
    if al <= NEAR_ONE:
        out.append({"flag": "near_one",
                    "evidence": f"acceptance length {al:.2f} over {row.steps} steps: the draft "
                                "is almost never accepted (garbled output or a wrong draft?)"})
    return out


def _pct(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    p10, p50, p90 = np.percentile(np.asarray(values, dtype=float), [10, 50, 90])
    return {"p10": float(p10), "p50": float(p50), "p90": float(p90),
            "min": float(min(values)), "max": float(max(values))}


def distribution(rows: Sequence[RequestRow]) -> dict[str, Any]:
    """Request- and token-weighted mean acceptance length and the spread over requests."""
    known = [(r.acceptance, r.acceptance.length) for r in rows]
    lengths = [al for _, al in known if al is not None]
    return {
        "num_requests": len(rows),
        "num_with_figures": len(lengths),
        "request_weighted_mean_acceptance_length": sum(lengths) / len(lengths) if lengths else None,
        "token_weighted_mean_acceptance_length": pool(a for a, al in known if al is not None).length,
        "engine_counters_give": "token_weighted",
        "acceptance_length_percentiles": _pct(lengths),
        "num_flagged": sum(1 for r in rows if r.flags),
    }


def row_dict(r: RequestRow) -> dict[str, Any]:
    return {"run_id": r.run_id, "request_id": r.request_id, "category": r.category or None,
            "steps": r.steps, "drafted": r.drafted, "accepted": r.accepted,
            "acceptance_length": r.acceptance_length, "acceptance_rate": r.acceptance_rate,
            "output_tokens": r.output_tokens, "k": r.k, "flags": r.flags}


# ---------------------------------------------------------------- categories
@dataclass
class CategoryRow:
    category: str
    requests: int
    acceptance_length: float | None  #: token-weighted, bonus included
    acceptance_rate: float | None  #: pooled accepted / drafted
    tokens_per_s: float | None  #: sum(output tokens) / sum(E2E seconds) of its requests
    speedup: float | None = None  #: tokens/s over the baseline's on the same prompts
    ci: tuple[float, float] | None = None  #: 95% bootstrap interval of the speedup
    matched: int = 0  #: requests matched to a baseline request (same prompt)


def _key(r: RequestRow, by_prompt: dict[tuple[str, str], str]) -> str:
    return by_prompt.get((r.run_id, r.request_id)) or r.request_id


def own_reference(records: Sequence[schema.Record]) -> tuple[list[Any], list[Any] | None]:
    """A trace recorded with its reference run (``record``'s default): (the other runs'
    records, the reference run's), else (the records, None)."""
    refs = {r.run_id for r in records if isinstance(r, schema.RunRecord)
            and r.labels.get("role") == "reference"}
    if not refs:
        return list(records), None
    return ([r for r in records if getattr(r, "run_id", None) not in refs],
            [r for r in records if getattr(r, "run_id", None) in refs])


def category_rows(records: Iterable[schema.Record], baseline: Iterable[Any] | None = None, *,
                  n_boot: int = 2000, seed: int = 0) -> list[CategoryRow]:
    """Per workload category (uncategorised requests under ""), with the speedup over a
    baseline run of the same prompts where one is given (requests matched by prompt id, else by
    request id; a bootstrap over matched prompts gives the interval)."""
    records = list(records)
    rows = request_rows(records)
    prompt = {(r.run_id, r.request_id): r.prompt_id for r in records
              if isinstance(r, schema.RequestRecord) and r.prompt_id}
    base_speed: dict[str, tuple[int, float]] = {}
    if baseline is not None:
        base_records = list(baseline)
        base_prompt = {(r.run_id, r.request_id): r.prompt_id for r in base_records
                       if isinstance(r, schema.RequestRecord) and r.prompt_id}
        for b in request_rows(base_records):
            if b.e2e_s:
                tok, sec = base_speed.get(_key(b, base_prompt), (0, 0.0))
                base_speed[_key(b, base_prompt)] = (tok + b.output_tokens, sec + b.e2e_s)
    cats: dict[str, list[RequestRow]] = {}
    for r in rows:
        cats.setdefault(r.category, []).append(r)
    rng = np.random.default_rng(seed)
    out = []
    for name in sorted(cats):
        rs = cats[name]
        known = [r.acceptance for r in rs if r.acceptance_length is not None]
        rated = [r.acceptance for r in rs if r.acceptance_rate is not None]
        timed = [(r, r.e2e_s) for r in rs if r.e2e_s]
        row = CategoryRow(
            name, len(rs), pool(known).length, pool(rated).rate,
            sum(r.output_tokens for r, _ in timed) / sum(t for _, t in timed) if timed else None)
        pairs = [(r.output_tokens, t, *base_speed[_key(r, prompt)]) for r, t in timed
                 if _key(r, prompt) in base_speed]
        if pairs:
            a = np.array(pairs, dtype=float)  # tokens, seconds (spec); tokens, seconds (base)
            row.matched = len(pairs)
            row.speedup = _speedup(a)
            if len(pairs) >= 2:
                idx = rng.integers(0, len(a), size=(n_boot, len(a)))
                boots = np.array([_speedup(a[i]) for i in idx])
                lo, hi = np.nanpercentile(boots, [2.5, 97.5])
                row.ci = (float(lo), float(hi))
        out.append(row)
    return out


def _speedup(a: np.ndarray) -> float:
    spec = a[:, 0].sum() / a[:, 1].sum()
    base = a[:, 2].sum() / a[:, 3].sum()
    return float(spec / base) if base > 0 and math.isfinite(spec) else math.nan


def cat_dict(c: CategoryRow) -> dict[str, Any]:
    return {"category": c.category or None, "requests": c.requests,
            "acceptance_length": c.acceptance_length, "acceptance_rate": c.acceptance_rate,
            "tokens_per_s": c.tokens_per_s, "speedup": c.speedup,
            "speedup_ci95": list(c.ci) if c.ci else None, "matched_requests": c.matched}


def _f(v: float | None, spec: str = ".2f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def format_requests(rows: Sequence[RequestRow], limit: int = 40) -> str:
    d = distribution(rows)
    pct = d["acceptance_length_percentiles"]
    lines = [
        f"{d['num_requests']} requests, {d['num_with_figures']} with speculative figures "
        "(acceptance length = 1 + accepted / steps, bonus token included)",
        f"  mean acceptance length: request-weighted {_f(d['request_weighted_mean_acceptance_length'])}, "
        f"token-weighted {_f(d['token_weighted_mean_acceptance_length'])} (what engines' counters give)",
    ]
    if pct:
        lines.append(f"  over requests: p10 {_f(pct['p10'])}  p50 {_f(pct['p50'])}  p90 {_f(pct['p90'])}  "
                     f"min {_f(pct['min'])}  max {_f(pct['max'])}")
    flagged = [r for r in rows if r.flags]
    lines.append(f"  flagged: {len(flagged)} (pinned within {PINNED_MARGIN:.0%} of k+1 with repetition, "
                 f"or at most {NEAR_ONE}; at least {MIN_STEPS_TO_FLAG} steps)")
    lines.append("")
    lines.append(f"{'request':<24} {'category':<14} {'steps':>6} {'drafted':>8} {'accepted':>8} "
                 f"{'AL':>6} {'tokens':>7}  flags")
    shown = flagged + [r for r in rows if not r.flags]
    for r in shown[:limit]:
        lines.append(f"{r.request_id[:24]:<24} {(r.category or '-')[:14]:<14} {_f(r.steps, 'd'):>6} "
                     f"{_f(r.drafted, 'd'):>8} {_f(r.accepted, 'd'):>8} {_f(r.acceptance_length):>6} "
                     f"{r.output_tokens:>7}  {', '.join(f['flag'] for f in r.flags)}")
    if len(shown) > limit:
        lines.append(f"... and {len(shown) - limit} more (--json lists all)")
    for r in flagged[:10]:
        for f in r.flags:
            lines.append(f"  {r.request_id}: {f['flag']}: {f['evidence']}")
    return "\n".join(lines)


def format_categories(rows: Sequence[CategoryRow], baseline: bool) -> str:
    head = (f"{'category':<20} {'requests':>8} {'AL':>6} {'rate':>6} {'tokens/s':>9}"
            + (f" {'speedup':>8} {'95% CI':>15} {'matched':>7}" if baseline else ""))
    lines = ["acceptance length token-weighted (bonus included); rate = accepted / drafted; "
             "tokens/s = output tokens / E2E seconds of the category's requests"
             + ("; speedup over the baseline on the same prompts, bootstrap over prompts" if baseline else ""),
             head]
    for c in rows:
        line = (f"{(c.category or '(none)')[:20]:<20} {c.requests:>8} {_f(c.acceptance_length):>6} "
                f"{_f(c.acceptance_rate):>6} {_f(c.tokens_per_s, '.1f'):>9}")
        if baseline:
            ci = f"[{_f(c.ci[0])}, {_f(c.ci[1])}]" if c.ci else "n/a"
            line += f" {_f(c.speedup):>8} {ci:>15} {c.matched:>7}"
        lines.append(line)
    return "\n".join(lines)
