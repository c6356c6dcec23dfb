"""The detectors' false alarms and power, over many seeded runs of the reference decoder, beside
the fixed thresholds they replaced (sampling truth at >= 200 positions and |z| > 6, draft health
at >= 100 positions and > 50% at exactly 1.0); and the share of drafted positions at exactly
1.0 an honest softmax produces per dtype (the draft-health base rate)."""

from __future__ import annotations

import tempfile
import time

import torch

from specscope import schema
from specscope.collector.detectors import detectors_for
from specscope.collector.report import request_truth
from specscope.collector.stats import SpecStats
from specscope.io.trace import read_trace

from .common import Row

#: clean runs: temperatures 0.3-1.2 with top-p and top-k on and off
CLEAN = [(t, p, k) for t in (0.3, 0.6, 0.9, 1.2) for p, k in ((1.0, 0), (0.9, 0), (1.0, 20), (0.9, 20))]
SIZES = (4, 8, 16, 32, 64)  #: new tokens per request (2 requests per run) for the power curve


def _run(pair, temperature: float, top_p: float, top_k: int, seed: int, tokens: int,
         fault: str = "") -> tuple[list, float]:
    from specscope.engine.decoder import SpecConfig
    from specscope.engine.workload import WorkloadSpec, run_workload

    spec = WorkloadSpec(requests=2, concurrency=2, max_new_tokens=tokens, temperature=temperature,
                        top_p=top_p, top_k=top_k, seed=seed, reference=False)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        torch.manual_seed(seed)
        path = run_workload(pair, SpecConfig(fault=fault), spec, f"{tmp}/r.jsonl", progress=False)
        took = time.perf_counter() - t
        return list(read_trace(path).records), took


def _new(records: list) -> set[str]:
    """What the detectors and per-request tests flag now."""
    run = next(r for r in records if isinstance(r, schema.RunRecord))
    s = SpecStats().observe_all(records)
    kinds = {a.kind for d in detectors_for(run) for a in d.check(s)}
    return kinds | {a.kind for a in request_truth(records)}


def _old(records: list) -> set[str]:
    """What the fixed thresholds flagged (the peer)."""
    s = SpecStats().observe_all(records)
    out = set()
    for mode, t in s.truth.items():
        if mode == schema.GREEDY or t.num_verified < 200 or t.z is None:
            continue
        obs, exp = t.observed_rate or 0.0, t.expected_rate or 0.0
        if t.z > 6 and obs - exp > 0.05:
            out.add("silent_greedy")
        elif t.z < -6 and exp - obs > 0.05:
            out.add("sampling_mismatch")
    n = sum(s.draft_hist)
    if n >= 100 and s.draft_hist[-1] / n > 0.5:
        out.add("draft_prob_collapse")
    return out


def _positions(records: list) -> tuple[int, int]:
    s = SpecStats().observe_all(records)
    return sum(t.num_verified for m, t in s.truth.items() if m != schema.GREEDY), sum(s.draft_hist)


def bench_detectors(reps: int) -> list[Row]:
    from specscope.engine.models import tiny_pair

    pair = tiny_pair()
    runs = max(400, 100 * reps)
    false_new: dict[str, int] = {}
    false_old: dict[str, int] = {}
    at_one = drafted = 0
    for i in range(runs):
        t, p, k = CLEAN[i % len(CLEAN)]
        recs, _ = _run(pair, t, p, k, seed=1000 + i, tokens=16)
        for kind in _new(recs):
            false_new[kind] = false_new.get(kind, 0) + 1
        for kind in _old(recs):
            false_old[kind] = false_old.get(kind, 0) + 1
        s = SpecStats().observe_all(recs)
        at_one += s.draft_hist[-1]
        drafted += sum(s.draft_hist)
    rows = [Row(f"false alarms on clean runs (tiny model, 2 requests x 16 tokens, temperature "
                f"0.3-1.2, top-p 0.9/1, top-k 20/off; {runs} seeded runs)",
                f"{sum(false_new.values())} ({_kinds(false_new)})",
                f"{sum(false_old.values())} ({_kinds(false_old)}) fixed thresholds", "—",
                "0", "met" if not false_new else "not met",
                f"float32 draft: {at_one} of {drafted} drafted positions at exactly 1.0")]
    seeds = max(40, 10 * reps)
    for fault, kind in (("silent_greedy", "silent_greedy"), ("draft_prob_shortcut", "draft_prob_collapse")):
        judges = {"exact tests": _new, "fixed thresholds": _old}
        found: dict[str, tuple | None] = {name: None for name in judges}
        for tokens in SIZES:  # the same seeded runs judged both ways
            caught = {name: 0 for name in judges}
            pos, secs = [], []
            for j in range(seeds):
                recs, took = _run(pair, 0.8, 1.0, 20, seed=2000 + j, tokens=tokens, fault=fault)
                for name, judge in judges.items():
                    caught[name] += kind in judge(recs)
                pos.append(_positions(recs)[0 if kind == "silent_greedy" else 1])
                secs.append(took)
            for name in judges:
                if found[name] is None and caught[name] / seeds >= 0.95:
                    found[name] = (tokens, sum(pos) / seeds, sum(secs) / seeds, caught[name])
            if all(found.values()):
                break
        rows.append(Row(f"power: smallest run catching seeded {fault} in >= 95% of {seeds} runs "
                        "(tiny model, 2 requests, temperature 0.8, top-k 20)",
                        _size(found["exact tests"], seeds), _size(found["fixed thresholds"], seeds),
                        "—", "≤ 2 x 16 tokens", "met" if found["exact tests"] and
                        found["exact tests"][0] <= 16 else "not met", f"sizes tried: {SIZES}"))
    rows.append(_half_precision_row())
    return rows


def _kinds(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(d.items())) or "none"


def _size(found, seeds: int) -> str:
    if found is None:
        return f"not within {SIZES[-1]} tokens x 2 requests"
    tokens, pos, secs, caught = found
    return f"2 x {tokens} tokens: ~{pos:.0f} positions, {secs:.1f} s decoding ({caught}/{seeds})"


def _half_precision_row() -> Row:
    """Share of a real draft's top-1 probabilities at exactly 1.0 by softmax dtype: SmolLM2's
    int:4 draft on its target's greedy continuations of the shipped prompts, the logits
    sharpened x1, x3.3 and x10 (divided by 1, 0.3, 0.1) as stand-ins for more confident drafts."""
    from specscope.engine.models import load_smollm2
    from specscope.engine.workload import WorkloadSpec, build_requests

    pair = load_smollm2("int:4")
    reqs, _ = build_requests(pair, WorkloadSpec(requests=32, max_new_tokens=64))
    dtypes, temps = ("float32", "bfloat16", "float16"), (1.0, 0.3, 0.1)
    counts = {(d, t): [0, 0] for d in dtypes for t in temps}
    with torch.inference_mode():
        for r in reqs:
            ids = torch.tensor([r.prompt_ids])
            out = pair.target.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
            logits = pair.draft(out).logits[0, ids.shape[1] - 1:-1]
            for d, t in counts:
                top = torch.softmax((logits / t).to(getattr(torch, d)), dim=-1).max(dim=-1).values
                counts[d, t][0] += int((top == 1.0).sum())
                counts[d, t][1] += top.numel()
    share = {k: a / n for k, (a, n) in counts.items()}
    ceil = _ceilings()
    return Row("draft top-1 probability at exactly 1.0 from an honest softmax, by dtype, logits "
               "x1 / x3.3 / x10 (SmolLM2 int:4 draft on its target's greedy text, 32 prompts x "
               "64 tokens)",
               "; ".join(f"{d} " + " / ".join(f"{share[d, t]:.1%}" for t in temps) for d in dtypes),
               "ceilings used: " + ", ".join(f"{k} {v:.0%}" for k, v in ceil.items()), "—",
               "ceiling above the x10 figure", "met" if all(share[d, 0.1] < ceil[d] for d in dtypes)
               else "not met", f"{counts['float32', 1.0][1]} positions per cell")


def _ceilings() -> dict[str, float]:
    from specscope.collector.detectors import HONEST_SHARE_AT_ONE

    return {k: v for k, v in HONEST_SHARE_AT_ONE.items() if k}

