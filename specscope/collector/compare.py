"""Runs side by side: the speed table of an engine PR, with a bootstrap confidence interval on
every delta, and the cross-run regression table ordered by commit or time. Never imports torch.

Resampling is by request (a cluster bootstrap): a request's verify steps, latencies and tokens
move together, so within-request correlation does not shrink the intervals. Pooled figures
(acceptance rate, acceptance length, throughput) are recomputed from the resampled requests'
counts, never averaged from per-request ratios.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .. import schema
from .busy import busy_seconds
from .configured import kind_of
from .counts import Acceptance, clamp
from .evalgate import eval_gate, gate_text
from .detectors import detectors_for, evaluate
from .stats import SpecStats

#: metric -> (label, higher is better)
METRICS: dict[str, tuple[str, bool]] = {
    "output_tok_s": ("throughput (output tok/s)", True),
    "tok_s_per_user": ("tok/s per request (mean)", True),
    "mean_acceptance_length": ("acceptance length (bonus incl.)", True),
    "acceptance_rate": ("acceptance rate", True),
    "ttft_ms": ("TTFT mean (ms)", False),
    "tpot_ms": ("TPOT mean (ms)", False),
    "itl_ms": ("ITL per token mean (ms)", False),
}


@dataclass
class RunSample:
    """Per-request arrays of one run, for resampling."""

    run_id: str
    run: schema.RunRecord | None
    accepted: np.ndarray  #: accepted draft tokens per request (summed over its steps)
    drafted: np.ndarray
    drafts: np.ndarray  #: request-steps that drafted
    tokens: np.ndarray  #: output tokens
    e2e_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray  #: NaN where a request has one token
    itl_s: np.ndarray  #: per-request mean per-token ITL, NaN where none
    span_s: float  #: busy time: seconds with one of its requests in flight (collector/busy.py)
    stats: SpecStats
    reference: SpecStats | None = None  #: the same workload without speculation, if recorded
    temperatures: tuple[float, ...] = ()  #: the sampling temperatures its requests asked for


def run_sample(records: Iterable[schema.Record], run_id: str) -> RunSample:
    """Per-request arrays of ``run_id`` from its records (and its reference run's stats)."""
    records = list(records)
    ref_ids = {r.run_id for r in records if isinstance(r, schema.RunRecord)
               and r.labels.get("role") == "reference" and r.labels.get("reference_for") == run_id}
    reference = (SpecStats().observe_all(r for r in records if getattr(r, "run_id", None) in ref_ids)
                 if ref_ids else None)
    records = [r for r in records if getattr(r, "run_id", None) == run_id]
    acc: dict[str, list[int]] = {}
    for r in records:
        if isinstance(r, schema.VerifyStepRecord):
            for e in r.entries:
                a = acc.setdefault(e.request_id, [0, 0, 0])
                d, accepted, _ = clamp(e.num_drafted, e.num_accepted)
                a[0] += accepted
                a[1] += d
                a[2] += 1 if d > 0 else 0
    reqs = [r for r in records if isinstance(r, schema.RequestRecord)]
    ids = [r.request_id for r in reqs] or sorted(acc)
    by_id = {r.request_id: r for r in reqs}

    def col(fn: Callable[[schema.RequestRecord], float]) -> np.ndarray:
        return np.array([fn(by_id[i]) if i in by_id else math.nan for i in ids], dtype=float)

    def itl(r: schema.RequestRecord) -> float:
        gaps = [(r.chunk_times_ns[i] - r.chunk_times_ns[i - 1]) / 1e9 for i in range(1, len(r.chunk_times_ns))]
        n = sum(r.chunk_num_tokens[1:]) if len(r.chunk_num_tokens) > 1 else 0
        return sum(gaps) / n if n else math.nan

    span = busy_seconds(reqs) or 0.0  # runs that take turns: not charged for their idle time
    runs = [r for r in records if isinstance(r, schema.RunRecord)]
    return RunSample(
        run_id=run_id, run=runs[0] if runs else None,
        accepted=np.array([acc.get(i, [0, 0, 0])[0] for i in ids], dtype=float),
        drafted=np.array([acc.get(i, [0, 0, 0])[1] for i in ids], dtype=float),
        drafts=np.array([acc.get(i, [0, 0, 0])[2] for i in ids], dtype=float),
        tokens=col(lambda r: r.num_output_tokens), e2e_s=col(lambda r: _or_nan(r.e2e_s)),
        ttft_s=col(lambda r: _or_nan(r.ttft_s)), tpot_s=col(lambda r: _or_nan(r.tpot_s)),
        itl_s=col(itl), span_s=span, stats=SpecStats().observe_all(records), reference=reference,
        temperatures=tuple(sorted({r.temperature for r in reqs})))


def _or_nan(v: float | None) -> float:
    return math.nan if v is None else v


def _figures(s: RunSample, idx: np.ndarray) -> dict[str, float]:
    # the draw's pooled counts; the convention (bonus token, pooling, unknowns) is Acceptance's
    acc = Acceptance(steps=int(s.drafts[idx].sum()), drafted=int(s.drafted[idx].sum()),
                     accepted=int(s.accepted[idx].sum()))

    def mean(x: np.ndarray) -> float:
        v = x[idx]
        v = v[~np.isnan(v)]
        return float(v.mean()) if v.size else math.nan

    scale = len(idx) / len(s.tokens) if len(s.tokens) else 0.0
    return {
        # a resample of the requests over the same wall time: tokens scale with the draw
        "output_tok_s": float(np.nansum(s.tokens[idx]) / (s.span_s * scale)) if s.span_s and scale else math.nan,
        "tok_s_per_user": mean(s.tokens / s.e2e_s) if len(s.tokens) else math.nan,
        "mean_acceptance_length": _or_nan(acc.length),
        "acceptance_rate": _or_nan(acc.rate),
        "ttft_ms": mean(s.ttft_s) * 1e3, "tpot_ms": mean(s.tpot_s) * 1e3, "itl_ms": mean(s.itl_s) * 1e3,
    }


def compare(a: RunSample, b: RunSample, *, n_boot: int = 2000, seed: int = 0,
            level: float = 0.95) -> list[dict[str, Any]]:
    """One row per metric: A, B, delta % (B vs A) and its bootstrap interval, and a verdict."""
    rng = np.random.default_rng(seed)
    na, nb = len(a.tokens), len(b.tokens)
    base_a, base_b = _figures(a, np.arange(na)), _figures(b, np.arange(nb))
    draws: dict[str, list[float]] = {m: [] for m in METRICS}
    if na and nb:
        for _ in range(n_boot):
            fa = _figures(a, rng.integers(0, na, na))
            fb = _figures(b, rng.integers(0, nb, nb))
            for m in METRICS:
                if m != "output_tok_s" and fa[m] and not math.isnan(fa[m]) and not math.isnan(fb[m]):
                    draws[m].append((fb[m] - fa[m]) / fa[m] * 100)
    rows = []
    lo_q, hi_q = (1 - level) / 2 * 100, (1 + level) / 2 * 100
    forced = [s.run_id for s in (a, b) if kind_of(s.run, s.stats)[0] == "forced"]
    for m, (label, higher_better) in METRICS.items():
        va, vb = base_a[m], base_b[m]
        delta = (vb - va) / va * 100 if va and not math.isnan(va) and not math.isnan(vb) else None
        ci = None
        verdict = "n/a"
        if m == "output_tok_s":  # one wall-clock rate per run: resampling requests cannot vary it
            verdict = "one measurement per run: no interval"
        elif delta is not None and len(draws[m]) >= n_boot // 2:
            lo, hi = np.percentile(draws[m], [lo_q, hi_q])
            ci = [float(lo), float(hi)]
            if lo <= 0 <= hi:
                verdict = "no significant difference"
            else:
                verdict = "better" if (delta > 0) == higher_better else "worse"
        if forced and m in ("mean_acceptance_length", "acceptance_rate"):
            verdict = f"n/a: acceptance forced in {', '.join(forced)} (a speed-only run)"
        rows.append({"metric": m, "label": label, "a": _clean(va), "b": _clean(vb),
                     "delta_pct": delta, "ci_pct": ci, "level": level, "verdict": verdict})
    al = next(r for r in rows if r["metric"] == "mean_acceptance_length")
    if al["verdict"] == "worse":
        al["verdict"] = _shallower(a, b, rows) or al["verdict"]
    for name, s in (("a", a), ("b", b)):
        checks, anomalies = evaluate(s.stats, s.run_id, detectors_for(s.run))
        gate = eval_gate(s.stats, s.reference, anomalies, run=s.run, assessments=checks)
        rows.append({"metric": f"eval_gate_{name}", "label": f"eval gate {name.upper()}",
                     "a": gate["verdict"] if name == "a" else None,
                     "b": gate["verdict"] if name == "b" else None,
                     "delta_pct": None, "ci_pct": None, "level": level, "verdict": gate_text(gate)})
    return rows


#: a verified depth this much lower (drafted tokens per draft) explains a lower acceptance length
SHALLOWER = 0.95


def _shallower(a: RunSample, b: RunSample, rows: list[dict[str, Any]]) -> str | None:
    """The verdict for a lower acceptance length that comes with a lower verified depth (an
    adaptive or n-gram drafter verifying fewer tokens per draft) while acceptance per verified
    token is not worse: not a regression, and said so with both depths."""
    da, db = a.drafts.sum(), b.drafts.sum()
    if not da or not db:
        return None
    depth_a, depth_b = a.drafted.sum() / da, b.drafted.sum() / db
    rate = next((r for r in rows if r["metric"] == "acceptance_rate"), None)
    if depth_b >= depth_a * SHALLOWER or rate is None or rate["verdict"] == "worse":
        return None
    return (f"lower with a shallower verified depth ({depth_a:.2f} -> {depth_b:.2f} drafted tokens "
            f"per draft): not a regression; acceptance per verified token: {rate['verdict']}")


def _clean(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def regression_series(samples: Sequence[RunSample], *, n_boot: int = 1000,
                      seed: int = 0) -> list[dict[str, Any]]:
    """The cross-run table: each run against the last good one before it of the same
    configuration and workload (``group_of``), never across groups.

    A run is bad when its own eval gate fails, a detector fires, or a higher-is-better metric
    (acceptance length, acceptance rate) is significantly worse than the last good run. The
    first bad run is marked. A run that is not bad but whose gate had too little data to fail
    is "inconclusive", not "good"; it still serves as the baseline for the runs after it.
    """
    out: list[dict[str, Any]] = []
    last_good_of: dict[str, RunSample] = {}
    first_bad_seen: set[str] = set()
    sizes: dict[str, int] = {}
    for s in samples:
        sizes[group_of(s)] = sizes.get(group_of(s), 0) + 1
    for s in samples:
        group = group_of(s)
        last_good = last_good_of.get(group)
        checks, anomalies = evaluate(s.stats, s.run_id, detectors_for(s.run))
        full = eval_gate(s.stats, s.reference, anomalies, run=s.run, assessments=checks)
        gate = full["verdict"]
        rows = compare(last_good, s, n_boot=n_boot, seed=seed) if last_good is not None else []
        worse = [r["metric"] for r in rows if r["verdict"] == "worse"
                 and r["metric"] in ("mean_acceptance_length", "acceptance_rate")]
        bad = gate == "fail" or bool(anomalies) or bool(worse)
        entry = {"run_id": s.run_id, "label": (s.run.labels.get("commit") if s.run else None) or s.run_id,
                 "group": group, "group_runs": sizes[group],
                 "note": ("the only run of its configuration and workload: nothing to compare "
                          "it with") if sizes[group] == 1 else "",
                 "baseline": last_good.run_id if last_good else None,
                 "figures": {m: _clean(v) for m, v in _figures(s, np.arange(len(s.tokens))).items()},
                 "gate": gate, "gate_text": gate_text(full),
                 "anomalies": [a.kind for a in anomalies], "worse": worse,
                 "verdict": ("bad" if bad else "inconclusive" if gate == "inconclusive" else "good"),
                 "first_bad": bad and group not in first_bad_seen}
        if bad:
            first_bad_seen.add(group)
        out.append(entry)
        if not bad:
            last_good_of[group] = s
    return out


#: run labels that name the workload (what was asked), beside the configuration (how)
WORKLOAD_LABELS = ("prompt_set", "input_len", "output_len", "concurrency", "dataset")


def group_of(s: RunSample) -> str:
    """Configuration and workload of a run: runs are compared only within one group.

    The configuration is the run's config_id; the workload its sampling temperature(s) (from
    its requests, else its ``temperature`` label), lengths, concurrency and prompt set labels.
    """
    run = s.run
    labels = dict(run.labels) if run else {}
    temps = sorted(set(s.temperatures)) if s.temperatures else []
    t = ",".join(f"{x:g}" for x in temps) or labels.get("temperature", "?")
    parts = [run.config_id if run else "?", f"t={t}"]
    parts += [f"{k}={labels[k]}" for k in WORKLOAD_LABELS if labels.get(k)]
    return " ".join(parts)
