"""Engine-side benchmarks: hook cost, the reference decoder, drafts, the HF adapter."""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Callable

import numpy as np
import torch

from specscope.hooks import Recorder, every_n, every_step
from specscope.hooks.recorder import DEFAULT_STATS_ROWS
from specscope.hooks.policy import UntilDecided

from .common import Row, _interleaved, _run_record, _spread, _timeit, paired_ratio, ratio_verdict


def bench_hooks(reps: int) -> list[Row]:
    """A verify step's cost with and without the recorder: batch 64, 4 draft tokens, V 49152."""
    from specscope.engine.models import load_smollm2
    from specscope.engine.sampling import process_probs, verify_chain

    rows: list[Row] = []
    b, d = 64, 4
    pair = load_smollm2("none")
    model, v = pair.target, pair.target.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(0, v, (b, 64), generator=g)
    draft = torch.randint(0, v, (b, d), generator=g)
    temps = torch.full((b,), 0.7)
    ones, zeros = torch.ones(b), torch.zeros(b, dtype=torch.long)
    q = torch.softmax(torch.randn(b, d, v, generator=g), -1)
    mode = torch.full((b,), 2)
    ids = [f"r{i}" for i in range(b)]

    def sample_only(logits):
        p = process_probs(logits, temps, ones, zeros, truncate=False)
        return verify_chain(draft, p, q, mode, g)

    def forward():
        with torch.inference_mode():
            return model(input_ids=torch.cat([ctx, draft, draft[:, :1]], 1)[:, -(d + 1):]).logits

    with torch.inference_mode():
        logits = forward()

    def recorder_cost(policy, calls: int, rows: int | None = DEFAULT_STATS_ROWS) -> list[float]:
        """Seconds per record_verify call, averaged over ``calls`` consecutive steps; ``rows``:
        the statistics' budget in rows per step (the default; None: every row)."""
        rec = Recorder(_run_record(), stats_policy=policy, max_batch=b, ring_slots=calls + 1,
                       max_stats_rows=rows)
        acc, committed = sample_only(logits)
        top1 = q.amax(-1)
        q_drafted = q.gather(-1, draft[..., None])[..., 0]  # the acceptance rule's q
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for step in range(calls):
                rec.record_verify(request_ids=ids, num_accepted=acc, num_drafted=d,
                                  temperature=[0.7] * b, committed_tokens=committed,
                                  target_logits=logits, draft_top1_probs=top1, step=step,
                                  draft_tokens=draft, draft_token_probs=q_drafted)
            out.append((time.perf_counter() - t0) / calls)
            rec.drain()  # the drain thread's work, off the hot path
        return out

    t_sample = _timeit(lambda: sample_only(logits), reps)
    # the adaptive default at steady state: every class of the batch decided, so each step asks
    # the policy about its batch's classes and takes statistics on one in 32
    steady = UntilDecided(every=32)
    n = np.array([100_000])
    steady.observe([0.7], None, None, n, n // 2, n * 0.5)
    # while deciding: the default policy with nothing decided yet (every step, the budget's
    # rows); what the drain tells it between repetitions is not kept, so it stays deciding
    class Deciding(UntilDecided):
        def observe(self, *args, **kwargs) -> None:
            pass

    costs = {"counts": recorder_cost(lambda s: False, 64),
             "every32": recorder_cost(every_n(32), 64), "every1": recorder_cost(every_step, 8),
             "adaptive": recorder_cost(steady, 64),
             "deciding": recorder_cost(Deciding(every=32), 8),
             "every1-all": recorder_cost(every_step, 4, rows=None)}
    t_full = _timeit(lambda: sample_only(forward()), max(3, reps // 3))
    base, full = statistics.median(t_sample), statistics.median(t_full)
    for name, label in (("counts", "counts only, no statistics"),
                        ("every32", "statistics on 1 step in 32"),
                        ("adaptive", "statistics until decided, then 1 step in 32 (the vLLM "
                         "default), steady state"),
                        ("deciding", "statistics until decided (the vLLM default) while "
                         f"deciding: every step, {DEFAULT_STATS_ROWS} of the 64 rows (the default "
                         "budget)"),
                        ("every1", f"statistics on every step, {DEFAULT_STATS_ROWS} rows a step "
                         "(the default budget)"),
                        ("every1-all", "statistics on every step, every row (no budget)")):
        cost = statistics.median(costs[name])
        # the bars: 1% of a full verify step, 2% of the sampling kernel alone; every row on
        # every step is an opt-in (SPECSCOPE_STATS_ROWS=0), reported beside them with no bar
        for figure, ref, noise, bar in (
                ("verify sampling alone", base, t_sample, 0.02),
                ("full verify step (target forward + sampling)", full, t_full, 0.01)):
            added = cost / ref
            opt_in = name == "every1-all"
            rows.append(Row(
                f"{figure}, B 64, 4 drafts, V {v}: + recorder, {label}",
                f"{(ref + cost) * 1e3:.2f} ms", f"{ref * 1e3:.2f} ms", f"{1 + added:.4f}x",
                "none: an opt-in (SPECSCOPE_STATS_ROWS=0)" if opt_in else f"≤ {bar:.0%} added",
                "n/a" if opt_in else "met" if added <= bar else "not met",
                f"recorder {cost * 1e6:.0f} µs {_spread(costs[name])}; step {_spread(noise)}"))
    del pair
    return rows


# ------------------------------------------------------------------------ decoder (issue 3)


def bench_decoder(reps: int) -> list[Row]:
    """Reference decoder on SmolLM2: hooks on vs off, and speculative vs target-only."""
    from specscope.engine.decoder import SpecConfig, SpeculativeDecoder
    from specscope.engine.models import load_smollm2
    from specscope.engine.workload import WorkloadSpec, build_requests

    pair = load_smollm2("int:4")
    reqs, _ = build_requests(pair, WorkloadSpec(requests=8, max_new_tokens=32))
    reqs = reqs[:8]

    from specscope.io.otlp import OtlpSink
    from specscope.serving.harness import free_port

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: every export is refused
    lost = {"spans": 0}

    def run(cfg: SpecConfig, hooks: bool, otlp: bool = False) -> Callable[[], None]:
        def go():
            sinks = [OtlpSink(dead, interval_s=0.2)] if otlp else []
            rec = Recorder(_run_record(), stats_policy=every_n(32), sinks=sinks) if hooks else None
            dec = SpeculativeDecoder(pair.target, pair.draft, cfg, recorder=rec,
                                     eos_ids=pair.eos_ids, seed=0)
            n = 0
            for i in range(0, len(reqs), 4):
                n += sum(len(o.token_ids) for o in dec.generate(reqs[i:i + 4]))
            go.tokens = n
            if rec is not None:
                rec.close()
            for sink in sinks:
                lost["spans"] += sink.stats.dropped_export_failed + sink.stats.dropped_queue_full
                lost.setdefault("own_s", []).append(sink.stats.write_s + sink.stats.sender_cpu_s)
        return go

    fns = {"spec_on": run(SpecConfig(num_steps=3), True),
           "spec_otlp_dead": run(SpecConfig(num_steps=3), True, otlp=True),
           "spec_off": run(SpecConfig(num_steps=3), False),
           "target_only": run(SpecConfig(num_steps=0), False)}
    t = _interleaved(fns, reps)
    tps = {k: fns[k].tokens / statistics.median(v) for k, v in t.items()}
    on, off, base = tps["spec_on"], tps["spec_off"], tps["target_only"]
    dead_on = tps["spec_otlp_dead"]
    def added(arm: str) -> tuple[str, str]:
        """Time with hooks over time without, paired by round, with its 95% interval; met
        where the interval's top is within 1%, not met where its bottom is above it."""
        ratio, (lo, hi) = paired_ratio(t[arm], t["spec_off"])
        verdict = "met" if hi <= 1.01 else "not met" if lo > 1.01 else "inconclusive"
        return f"{ratio:.3f}x time (95% CI {lo:.3f} to {hi:.3f}, {len(t[arm])} interleaved pairs)", verdict

    own = statistics.median(lost["own_s"])  # the sink's own time per run: its write calls
    run_s = statistics.median(t["spec_otlp_dead"])  # and its sender thread's CPU
    hooks_ratio, hooks_met = added("spec_on")
    dead_ratio, dead_met = added("spec_otlp_dead")
    return [
        Row("reference decoder tok/s, SmolLM2 + int:4 draft, chain 3, batch 4: hooks on "
            "(statistics 1 step in 32) vs off",
            f"{on:.2f} tok/s", f"{off:.2f} tok/s", hooks_ratio, "≤ 1% added", hooks_met,
            f"{_spread(t['spec_on'])} / {_spread(t['spec_off'])}"),
        Row("reference decoder tok/s, as above: hooks on with an OTLP sink to a dead endpoint "
            f"(every export refused; {lost['spans']} spans lost and counted over the runs) vs hooks off",
            f"{dead_on:.2f} tok/s", f"{off:.2f} tok/s", dead_ratio, "≤ 1% added", dead_met,
            f"{_spread(t['spec_otlp_dead'])} / {_spread(t['spec_off'])}"),
        Row("the OTLP sink's own time in that run (its write calls in the recorder's flush "
            "thread + its sender thread's CPU, dead endpoint) vs the run's wall time",
            f"{own * 1e3:.1f} ms", f"{run_s:.2f} s", f"{own / run_s * 100:.3f}%",
            "≤ 1% added", "met" if own / run_s <= 0.01 else "not met",
            f"median of {len(lost['own_s'])} runs"),
        Row("speculative (hooks off) vs target-only tok/s, same model and prompts",
            f"{off:.2f} tok/s", f"{base:.2f} tok/s", f"{off / base:.2f}x speedup",
            "(reported)", "—", f"{_spread(t['spec_off'])} / {_spread(t['target_only'])}"),
    ]


def bench_margins(reps: int) -> list[Row]:
    """The reference run's top-2 margins (one top-2 per output token, for ``diverge``): the
    call's own time on SmolLM2's logits beside the target-only decode step it rides on."""
    from specscope.engine import sampling
    from specscope.engine.decoder import SpecConfig, SpeculativeDecoder
    from specscope.engine.models import load_smollm2
    from specscope.engine.workload import WorkloadSpec, build_requests

    pair = load_smollm2("int:4")
    reqs, _ = build_requests(pair, WorkloadSpec(requests=4, max_new_tokens=32))
    dec = SpeculativeDecoder(pair.target, None, SpecConfig(num_steps=0), eos_ids=pair.eos_ids, seed=0)
    steps: list[float] = []

    def decode():
        batch = dec.new_batch()
        dec.admit(batch, reqs[:4])
        while batch.rows:
            t = time.perf_counter()
            dec.step(batch)
            steps.append(time.perf_counter() - t)

    logits = torch.randn(4, pair.target.config.vocab_size) * 8
    t = _interleaved({"decode": decode, "top2": lambda: sampling.top2(logits)}, reps)
    step, top2 = statistics.median(steps), statistics.median(t["top2"])
    share = top2 / step
    return [Row("target-only decode step with its top-2 margins (SmolLM2, batch 4): the top-2 "
                "call vs the whole step it is part of",
                f"{top2 * 1e3:.3f} ms", f"{step * 1e3:.1f} ms", f"{share * 100:.2f}% of the step",
                "≤ 1%", "met" if share <= 0.01 else "not met",
                f"{_spread(t['top2'])} / {_spread(steps)}")]


def bench_drafts(reps: int) -> list[Row]:
    """Acceptance each SmolLM2 draft gives (chain of 3, greedy, 8 prompts x 32 tokens)."""
    from specscope.collector.stats import SpecStats
    from specscope.engine.decoder import SpecConfig, SpeculativeDecoder
    from specscope.engine.models import load_smollm2, make_draft
    from specscope.engine.workload import WorkloadSpec, build_requests

    pair = load_smollm2("none")
    reqs, _ = build_requests(pair, WorkloadSpec(requests=8, max_new_tokens=32))
    rows = []

    def tok_s(draft, cfg):
        rec = Recorder(_run_record())
        dec = SpeculativeDecoder(pair.target, draft, cfg, recorder=rec, eos_ids=pair.eos_ids)
        t = time.perf_counter()
        for i in range(0, len(reqs), 4):
            dec.generate(reqs[i:i + 4])
        el = time.perf_counter() - t
        stats = SpecStats().observe_all(rec.drain(wait=True))
        return stats.output_tokens / el, stats

    base, _ = tok_s(None, SpecConfig(num_steps=0))
    for kind in ("int:4", "bf16", "layers:8", "layers:22"):
        speed, st = tok_s(make_draft(pair.target, kind), SpecConfig(num_steps=3))
        per_pos = ", ".join(f"{x:.2f}" for x in st.per_position_acceptance)
        rows.append(Row(f"SmolLM2 draft `{kind}`: acceptance length (bonus incl.), per position "
                        "(chain 3, greedy, batch 4)",
                        f"AL {st.mean_acceptance_length:.2f} [{per_pos}], {speed:.1f} tok/s",
                        f"target-only {base:.1f} tok/s", f"{speed / base:.2f}x speed",
                        "(reported)", "—", "single run"))
    return rows


def bench_hf(reps: int) -> list[Row]:
    """Hugging Face assisted generation on SmolLM2 (int:4 assistant): adapter on vs off.

    One recorder lives through the whole benchmark (as in a user's process); each generate call
    is one measurement, the adapter attached or not, in ABBA order per prompt, and the on arm's
    timing includes flushing its records to the trace writer (synchronously: no drain thread, so
    every cost lands in the timed thread). Two rows: the direct ratio sum(on) / sum(off) over
    the pairs with its bootstrap interval, and the time spent inside specscope's own calls
    (wrappers, step recording, request records, flush) timed where they run."""
    import tempfile

    from specscope.engine.models import load_smollm2
    from specscope.engine.workload import WorkloadSpec, build_requests
    from specscope.hooks import hf

    pair = load_smollm2("int:4")
    reqs, _ = build_requests(pair, WorkloadSpec(requests=4, max_new_tokens=32))
    prompts = [torch.tensor([r.prompt_ids]) for r in reqs]
    inside = [0]

    def timed(fn):
        def run(*args, **kwargs):
            t = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                inside[0] += time.perf_counter_ns() - t
        return run

    from specscope.io.trace import TraceWriter

    with tempfile.TemporaryDirectory() as tmp, _patched(hf, "_record_step", timed), \
            _patched(hf, "_finish", timed):
        rec = Recorder(_run_record(), stats_policy=every_n(32), sinks=[TraceWriter(f"{tmp}/hf.jsonl")])
        phase = rec.phase
        rec.phase = timed(phase)  # opening the draft phase (its close, one clock read, is not)

        def call(prompt: torch.Tensor, adapter: bool) -> tuple[float, int]:
            t = time.perf_counter()
            with (hf.attach(rec, pair.target) if adapter else _null()), torch.inference_mode():
                out = pair.target.generate(prompt, assistant_model=pair.draft, max_new_tokens=32,
                                           do_sample=False)
            if adapter:
                timed(rec.flush)()
            return time.perf_counter() - t, out.shape[1] - prompt.shape[1]

        for p in prompts:  # warm-up
            call(p, True), call(p, False)
        on, off, tokens = [], [], 0
        inside[0] = 0
        for i in range(max(2, reps)):
            for p in prompts:
                order = (True, False, False, True) if i % 2 == 0 else (False, True, True, False)
                got = {True: [], False: []}
                for adapter in order:
                    dt, n = call(p, adapter)
                    got[adapter].append(dt)
                    tokens += n if adapter else 0
                on.append(sum(got[True])), off.append(sum(got[False]))
        rec.close()
    ratio, ci = paired_ratio(on, off)
    tok_s = tokens / sum(on)
    spent = inside[0] / 1e9
    attributed = sum(on) / (sum(on) - spent)
    name = "HF assisted generation (SmolLM2, int:4 assistant, greedy, 4 prompts x 32 tokens): adapter"
    return [Row(f"{name} on vs off, direct: {len(on)} ABBA pairs of generate calls",
                f"{tok_s:.2f} tok/s", f"{tok_s * ratio:.2f} tok/s", f"{ratio:.3f}x time",
                "≤ 2% added", ratio_verdict(ci, 1.02),
                f"95% CI of the ratio [{ci[0]:.3f}, {ci[1]:.3f}]"),
            Row(f"{name}: time inside specscope's calls (timed where they run) / the rest of the on arm",
                f"{spent * 1e3:.1f} ms in specscope", f"{(sum(on) - spent):.1f} s generating",
                f"{attributed:.4f}x time", "≤ 2% added", "met" if attributed <= 1.02 else "not met",
                "timed, not a difference of two noisy runs")]


@contextlib.contextmanager
def _patched(module, name: str, wrap):
    orig = getattr(module, name)
    setattr(module, name, wrap(orig))
    try:
        yield
    finally:
        setattr(module, name, orig)


@contextlib.contextmanager
def _null():
    yield


def bench_policy(reps: int) -> list[Row]:
    """--spec-policy adaptive vs target-only on SmolLM2 + int:4, where fixed speculation loses
    on this CPU (the decoder row above: ~0.4x), interleaved and repeated: cold (a fresh decoder
    per arm, paying the policy's start-up probes and the draft's prompt prefill) and settled
    (one decoder per arm kept across repetitions, as a server runs)."""
    from specscope.engine.decoder import SpecConfig, SpeculativeDecoder
    from specscope.engine.models import load_smollm2
    from specscope.engine.workload import WorkloadSpec, build_requests

    pair = load_smollm2("int:4")
    reqs, _ = build_requests(pair, WorkloadSpec(requests=16, max_new_tokens=64))
    reqs = reqs[:16]
    target, adaptive = SpecConfig(num_steps=0), SpecConfig(num_steps=3, policy="adaptive")

    def decoder(cfg: SpecConfig) -> tuple[SpeculativeDecoder, dict[int, int]]:
        dec = SpeculativeDecoder(pair.target, pair.draft if cfg.num_steps else None, cfg,
                                 eos_ids=pair.eos_ids, seed=0)
        depths: dict[int, int] = {}
        choose = dec.policy.choose

        def counted(batch_size: int):  # the k of every step, straight from the policy
            k, why = choose(batch_size)
            depths[k] = depths.get(k, 0) + 1
            return k, why
        dec.policy.choose = counted
        return dec, depths

    def tok_s(dec: SpeculativeDecoder, requests=reqs) -> float:
        t, n = time.perf_counter(), 0
        for i in range(0, len(requests), 8):
            n += sum(len(o.token_ids) for o in dec.generate(requests[i:i + 8]))
        return n / (time.perf_counter() - t)

    tok_s(decoder(adaptive)[0], reqs[:2])  # warm-up
    rows = []
    settled = {"target": decoder(target), "adaptive": decoder(adaptive)}
    for arm in settled.values():
        tok_s(arm[0])  # the settled arms' first pass: the policy's start-up
    for label, fresh in (("cold: a fresh decoder per arm (start-up probes and the draft's "
                          "prompt prefill included)", True),
                         ("settled: one decoder per arm across repetitions, after one pass", False)):
        speeds: dict[str, list[float]] = {"target": [], "adaptive": []}
        depths: dict[int, int] = {}
        for _ in range(reps):
            for name, cfg in (("target", target), ("adaptive", adaptive)):
                dec, d = decoder(cfg) if fresh else settled[name]
                before = dict(d)
                speeds[name].append(tok_s(dec))
                if name == "adaptive":
                    for k, n in d.items():
                        depths[k] = depths.get(k, 0) + n - before.get(k, 0)
        base, ours = statistics.median(speeds["target"]), statistics.median(speeds["adaptive"])
        ratios = sorted(a / b for a, b in zip(speeds["adaptive"], speeds["target"]))
        steps = ", ".join(f"k {k}: {n}" for k, n in sorted(depths.items()))
        rows.append(Row(
            f"--spec-policy adaptive vs target-only tok/s, SmolLM2 + int:4 draft (chain up to 3), "
            f"16 requests x 64 tokens in batches of 8, {label}; steps by k in the measured "
            f"adaptive arms: {steps}",
            f"{ours:.2f} tok/s", f"{base:.2f} tok/s target-only", f"{ours / base:.2f}x",
            "≥ 0.9x target-only", "met" if ours / base >= 0.9 else "not met",
            f"{reps} interleaved pairs, per-pair ratios {ratios[0]:.2f}-{ratios[-1]:.2f}"))
    return rows
