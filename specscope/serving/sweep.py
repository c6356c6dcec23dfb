"""``specscope sweep``: one server run per grid point, each with its eval gate.

A grid crosses speculation settings (steps/topk/draft tokens, as engines name them; ``0`` is
target-only decoding), temperatures, concurrency levels and input/output lengths. Every point
starts ``serve-engine`` with the point's setting, sends the shipped prompt set through the
OpenAI API at the point's concurrency (streaming), and lands as one trace in the sweep
directory: the server's records, the client's throughput (a BenchmarkRecord), eval records, and
a copy of the matching target-only run as the eval gate's reference. Target-only points are
always part of the grid: they are the references and the tokens/s baseline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .. import schema
from ..collector import evalgate
from ..collector.report import build_sections
from ..io.trace import TraceWriter, read_trace
from ..io import fetch
from .harness import ServerProcess
from .points import GateOutcome, PointFigures, prompts as point_prompts

@dataclass(frozen=True)
class Setting:
    """steps/topk/draft-tokens (draft tokens include the root, as SGLang counts them)."""

    steps: int
    topk: int = 1
    draft_tokens: int = 0

    @classmethod
    def parse(cls, text: str) -> "Setting":
        if text.strip() in ("0", "off", "none"):
            return cls(0, 0, 0)
        try:
            parts = [int(p) for p in text.split("/")]
        except ValueError:
            raise ValueError(f"speculation setting {text!r}: use STEPS/TOPK/DRAFT_TOKENS "
                             "(e.g. 3/1/4) or 0") from None
        steps, topk = parts[0], parts[1] if len(parts) > 1 else 1
        draft = parts[2] if len(parts) > 2 else steps * topk + 1
        if steps < 1 or topk < 1 or draft < 2:
            raise ValueError(f"speculation setting {text!r}: steps >= 1, topk >= 1, draft >= 2")
        return cls(steps, topk, draft)

    @property
    def name(self) -> str:
        return "off" if not self.steps else f"{self.steps}-{self.topk}-{self.draft_tokens}"

    def args(self) -> list[str]:
        if not self.steps:
            return ["--spec-draft-tokens", "0"]
        return ["--spec-steps", str(self.steps), "--spec-topk", str(self.topk),
                "--spec-draft-tokens", str(self.draft_tokens)]


@dataclass(frozen=True)
class Point:
    setting: Setting
    temperature: float
    concurrency: int
    input_len: int  #: approximate prompt length in tokens (0: the prompt as shipped)
    output_len: int
    fault: str = ""

    @property
    def name(self) -> str:
        fault = f"-fault-{self.fault}" if self.fault else ""
        return (f"spec-{self.setting.name}-t{self.temperature:g}-c{self.concurrency}-"
                f"in{self.input_len}-out{self.output_len}{fault}")

    def reference(self) -> "Point":
        return Point(Setting(0, 0, 0), self.temperature, self.concurrency, self.input_len,
                     self.output_len)

    def labels(self) -> dict[str, str]:
        return {"sweep_point": self.name, "concurrency": str(self.concurrency),
                "temperature": f"{self.temperature:g}", "input_len": str(self.input_len),
                "output_len": str(self.output_len), "spec": self.setting.name}


def plan(settings: Iterable[str], temperatures: Iterable[float], concurrencies: Iterable[int],
         lengths: Iterable[str], fault: str = "") -> list[Point]:
    """The grid, target-only points first. ``fault``: ``KIND@SETTING`` seeds a fault into every
    point of that setting (e.g. ``silent_greedy@3/1/4``)."""
    sets = [Setting.parse(s) for s in settings]
    faulted: tuple[str, Setting] | None = None
    if fault:
        kind, _, where = fault.partition("@")
        faulted = (kind, Setting.parse(where or "3/1/4"))
        if faulted[1] not in sets:
            sets.append(faulted[1])
    if Setting(0, 0, 0) not in sets:
        sets.insert(0, Setting(0, 0, 0))
    lens = []
    for text in lengths:
        inp, _, out = text.partition(":")
        lens.append((int(inp or 0), int(out)))
    points = []
    for s, t, c, (i, o) in itertools.product(sets, temperatures, concurrencies, lens):
        f = faulted[0] if faulted and s == faulted[1] else ""
        points.append(Point(s, float(t), int(c), i, o, f))
    return sorted(points, key=lambda p: p.setting.steps != 0)


@dataclass
class PointResult:
    point: Point
    path: Path
    run_id: str
    figures: PointFigures = field(default_factory=PointFigures)
    #: the output token ids of each request by its index (a target-only point's: the greedy
    #: points' exact-match reference); not written to sweep.json
    tokens_by_index: dict[int, tuple[int, ...]] = field(default_factory=dict, repr=False)


async def _drive(url: str, model: str, prompts: list[dict], point: Point,
                 run_id: str) -> tuple[list[dict], float]:
    """Send every prompt (streaming chat) with at most ``concurrency`` in flight."""
    import httpx

    sem = asyncio.Semaphore(point.concurrency)
    results: list[dict] = []

    async def one(client, i: int, p: dict) -> None:
        rid = f"{run_id}:{i:04d}"
        turns = list(p.get("messages") or [])[:-1]  # a multi-turn prompt's earlier turns
        body = {"model": model, "messages": turns + [{"role": "user", "content": p["text"]}],
                "max_tokens": point.output_len, "temperature": point.temperature,
                "stream": True, "stream_options": {"include_usage": True}}
        async with sem:
            text, usage, t0 = [], 0, time.time_ns()
            async with client.stream("POST", url + "/v1/chat/completions", json=body,
                                     headers={"X-Request-ID": rid}) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        usage = chunk["usage"]["completion_tokens"]
                    for c in chunk.get("choices", []):
                        text.append(c.get("delta", {}).get("content") or "")
            results.append({"request_id": rid, "prompt": p, "text": "".join(text),
                            "tokens": usage, "t_send": t0, "t_end": time.time_ns()})

    t_start = time.time_ns()
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        await asyncio.gather(*(one(client, i, p) for i, p in enumerate(prompts)))
    return results, (time.time_ns() - t_start) / 1e9


def _evals(run_id: str, results: list[dict], server: dict[str, schema.RequestRecord],
           ref_tokens: dict[int, tuple[int, ...]] | None, greedy: bool) -> list[schema.EvalRecord]:
    out = []
    for res in sorted(results, key=lambda r: r["request_id"]):
        idx = int(res["request_id"].rsplit(":", 1)[1])
        rec = server.get(res["request_id"])
        toks = tuple(rec.output_token_ids) if rec else ()
        p = res["prompt"]
        exact = None
        if greedy and ref_tokens is not None and idx in ref_tokens:
            exact = toks == ref_tokens[idx]
        out.append(schema.EvalRecord(
            run_id=run_id, request_id=res["request_id"], prompt_id=p["id"], exact_match=exact,
            repetition_loop=evalgate.repetition_loop(list(toks)),
            invalid=evalgate.invalid_output(res["text"], p.get("answer_format")),
            correct=evalgate.correct_output(res["text"], p.get("answer"))))
    return out


def _benchmark(run_id: str, point: Point, results: list[dict], wall_s: float,
               server: dict[str, schema.RequestRecord]) -> schema.BenchmarkRecord:
    tokens = sum(r["tokens"] for r in results)
    tpot = [(s.t_finish_ns - s.t_first_token_ns) / 1e9 / (s.num_output_tokens - 1)
            for s in server.values() if s.num_output_tokens > 1]
    ttft = [(s.t_first_token_ns - s.t_arrival_ns) / 1e6 for s in server.values()]
    m = {"output_throughput_tok_s": tokens / wall_s if wall_s else None,
         "output_throughput_per_gpu_tok_s": tokens / wall_s if wall_s else None,
         "interactivity_tok_s_user_median": statistics.median(1 / t for t in tpot if t > 0)
         if tpot else None,
         "request_throughput_req_s": len(results) / wall_s if wall_s else None,
         "ttft_ms_median": statistics.median(ttft) if ttft else None,
         "completed": float(len(results)), "duration_s": wall_s, "output_tokens": float(tokens)}
    return schema.BenchmarkRecord(run_id=run_id, t_ns=time.time_ns(), source="specscope-sweep",
                                  metrics=m, config={**point.labels(), "fault": point.fault})


def run_point(point: Point, out_dir: Path, *, model: str, draft: str, tokenizer: str | None,
              requests: int, seed: int, max_batch: int, refs: dict[Point, PointResult]) -> PointResult:
    """Serve, drive and record one grid point; returns where its trace landed."""
    raw = out_dir / ".server" / f"{point.name}.jsonl"
    raw.parent.mkdir(parents=True, exist_ok=True)
    run_id = f"sweep-{point.name}"
    args = ["--model", model, "--draft", draft, "--seed", str(seed), "--run-id", run_id,
            "--stats-every", "1",
            "--max-batch", str(max(max_batch, point.concurrency)), *point.setting.args()]
    args += ["--tokenizer", tokenizer] if tokenizer else []
    args += ["--fault", point.fault] if point.fault else []
    args += [a for k, v in point.labels().items() for a in ("--label", f"{k}={v}")]
    prompts = point_prompts(requests, point.input_len)
    with ServerProcess(args, raw, log=raw.with_suffix(".log")) as srv:
        served = fetch.served_model(srv.url)
        results, wall = asyncio.run(_drive(srv.url, served, prompts, point, run_id))
    records = read_trace(raw).records
    sent = {res["request_id"]: res["prompt"] for res in results}
    records = [dataclasses.replace(r, prompt_id=sent[r.request_id]["id"],
                                   category=sent[r.request_id].get("category", ""))
               if isinstance(r, schema.RequestRecord) and r.request_id in sent else r for r in records]
    server = {r.request_id: r for r in records if isinstance(r, schema.RequestRecord)}
    ref = refs.get(point.reference())
    ref_tokens = ref.tokens_by_index if ref else None
    extra: list[Any] = [_benchmark(run_id, point, results, wall, server)]
    extra += _evals(run_id, results, server, ref_tokens, point.temperature == 0)
    if ref is not None and ref is not refs.get(point):
        extra += _reference_copy(ref.path, ref.run_id, run_id)
    path = out_dir / f"{point.name}.jsonl"
    with TraceWriter(path) as w:
        w.write(records)
        w.write(extra)
    _, sections = build_sections([*records, *extra])  # what the trace file now holds
    sec = next(s for s in sections if s.run is not None and s.run.run_id == run_id)
    bench = extra[0].metrics
    figures = PointFigures(GateOutcome.of(sec), acceptance_length=sec.totals.mean_acceptance_length,
                           acceptance_rate=sec.totals.acceptance_rate,
                           tok_s=bench["output_throughput_tok_s"],
                           tok_s_user=bench["interactivity_tok_s_user_median"])
    return PointResult(point, path, run_id, figures,
                       {int(k.rsplit(":", 1)[1]): tuple(v.output_token_ids)
                        for k, v in server.items()})


def _reference_copy(path: Path, ref_run: str, run_id: str) -> list[Any]:
    """The target-only run's records under ``RUN/reference``, labelled as this run's reference."""
    new_id = f"{run_id}/reference"
    out = []
    for r in read_trace(path).records:
        if getattr(r, "run_id", None) != ref_run:
            continue
        if isinstance(r, schema.RunRecord):
            r = dataclasses.replace(r, labels={**r.labels, "role": "reference",
                                               "reference_for": run_id})
        out.append(dataclasses.replace(r, run_id=new_id))
    return out


def run_sweep(points: list[Point], out_dir: str | Path, *, model: str = "tiny",
              draft: str = "int:4", tokenizer: str | None = None, requests: int = 12,
              seed: int = 0, max_batch: int = 8, progress: bool = True) -> list[PointResult]:
    """Run every point (target-only first) and write one trace per point into ``out_dir``."""
    from tqdm import tqdm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    refs: dict[Point, PointResult] = {}
    results = []
    for point in tqdm(points, desc="sweep", unit="point", disable=not progress):
        res = run_point(point, out, model=model, draft=draft, tokenizer=tokenizer,
                        requests=requests, seed=seed, max_batch=max_batch, refs=refs)
        if not point.setting.steps:
            refs[point] = res
        results.append(res)
    base = {(r.point.temperature, r.point.concurrency, r.point.input_len, r.point.output_len):
            r.figures.tok_s for r in results if not r.point.setting.steps}
    for r in results:
        b = base.get((r.point.temperature, r.point.concurrency, r.point.input_len,
                      r.point.output_len))
        tok_s = r.figures.tok_s
        r.figures = dataclasses.replace(r.figures, speedup_vs_target_only=tok_s / b
                                        if b and tok_s is not None else None)
    (out / "sweep.json").write_text(json.dumps(
        [{"point": r.point.name, "trace": r.path.name, "run_id": r.run_id, **r.figures.as_dict()}
         for r in results], indent=1))
    return results


def _num(v: Any, spec: str) -> str:
    """A figure in a table: ``n/a`` where it is unknown (never 0)."""
    return "n/a" if v is None else format(v, spec)


def _gate(g: GateOutcome) -> str:
    """A point's gate and the checks that failed it."""
    return (g.verdict or "n/a").upper() + (" (" + "; ".join(g.failed) + ")" if g.failed else "")


def format_sweep(results: list[PointResult]) -> str:
    f = _num
    lines = [f"{'point':<44} {'AL':>5} {'tok/s':>7} {'vs off':>7} {'tok/s/user':>10}  gate",
             "(AL: acceptance length, tokens per verify step incl. the bonus token; vs off: "
             "tokens/s over target-only at the same temperature, concurrency and lengths)"]
    for r in results:
        fg = r.figures
        gate = _gate(fg.gate)
        if fg.gate.anomalies:
            gate += " anomalies: " + ", ".join(fg.gate.anomalies)
        if fg.gate.waiting:
            gate += " (" + "; ".join(fg.gate.waiting) + ")"
        # FAIL or no gate at all is untrusted; INCONCLUSIVE says so in its own column
        trusted = ("" if fg.gate.verdict in ("pass", "inconclusive") or not r.point.setting.steps
                   else "  UNTRUSTED")
        lines.append(f"{r.point.name:<44} {f(fg.acceptance_length, '5.2f')} "
                     f"{f(fg.tok_s, '7.1f')} {f(fg.speedup_vs_target_only, '6.2f')}x "
                     f"{f(fg.tok_s_user, '10.1f')}  {gate}{trusted}")
    return "\n".join(lines)


def format_engine_sweep(results: list[Any]) -> str:
    """The engine sweep's table (``enginesweep.EnginePointResult``)."""
    f = _num
    lines = [f"{'point':<58} {'AL':>5} {'acc':>5} {'tok/s':>7} {'TTFT p50':>8} {'ITL p50':>7}  gate",
             "(AL: acceptance length, tokens per verify step incl. the bonus token; acc: accepted "
             "/ drafted tokens, pooled; TTFT/ITL in ms, client side; n/a: not measured)"]
    for r in results:
        fg = r.figures
        if r.status != "ok":
            lines.append(f"{r.point.name:<58} FAILED: {r.error.splitlines()[0][:100] if r.error else '?'}")
            continue
        gate = _gate(fg.gate)
        if fg.acceptance_rate is None and not r.point.spec.off:
            gate += " [acceptance unknown: no verify step recorded, no response counted drafts]"
        if fg.probe:
            gate += f" [probe {fg.probe.upper()}]"
        untrusted = "" if r.point.spec.off or fg.gate.verdict in ("pass", "inconclusive") \
            else "  UNTRUSTED"
        lines.append(f"{r.point.name:<58} {f(fg.acceptance_length, '5.2f')} "
                     f"{f(fg.acceptance_rate, '5.2f')} {f(fg.tok_s, '7.1f')} "
                     f"{f(fg.ttft_ms_p50, '8.0f')} {f(fg.itl_ms_p50, '7.1f')}  "
                     f"{gate}{untrusted}")
    return "\n".join(lines)
