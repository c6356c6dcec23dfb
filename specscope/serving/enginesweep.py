"""``specscope sweep --engine vllm|sglang|llamacpp``: a recipe sweep on a real engine.

The grid crosses the engine's own speculation settings (``engines.parse_speculation``) and
engine flags (``--axis``) with temperatures, concurrencies and input/output lengths;
target-only points (``off``) are added as the references. Each server setting (speculation x
flags) gets a fresh server, started and stopped by its PID; its client points (temperature,
concurrency, lengths) run against it one after another, each in a time window of its own, after
a warm-up request. A point whose server fails to start or dies is recorded as failed with the
engine's last words, and the sweep goes on (the next point starts a fresh server).

Each point lands in the sweep directory, a store in the fleet layout (``config=`` the point):
the in-engine records of its window where specscope sits inside (vLLM's plugin, SGLang under
``wrap``), the client's requests as it timed them, a BenchmarkRecord (throughput, latency
percentiles), EvalRecords (greedy answers against target-only, loops, invalid and wrong answers)
and the target-only point's records as the gate's reference. Where nothing inside verifies
(llama.cpp), the probe checks the server from outside once its points are done; its verdict
joins the gate. ``sweep.json`` lists every point's figures and outcome; ``resume`` skips the
points it lists.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import schema
from ..collector import evalgate
from ..collector.report import build_sections
from ..io import fetch
from . import client as cl
from .points import GateOutcome, PointFigures
from .engines import Axis, EngineOptions, Speculation, engine_server, parse_speculation

#: the timing keys a point's sweep.json row carries beside its figures
TIMING = ("window_s", "own_s", "server_start_s", "server_warmup_s", "server_probe_s",
          "server_stop_s")


@dataclass(frozen=True)
class EnginePoint:
    engine: str
    spec: Speculation
    flags: tuple[tuple[str, str], ...]  #: (flag, value) per axis
    temperature: float
    concurrency: int
    input_len: int
    output_len: int
    top_k: int = 0  #: sent only where > 0 (with a temperature above 0)

    @property
    def server_key(self) -> tuple:
        return (self.spec.name, self.flags)

    @property
    def flags_name(self) -> str:
        return "".join(f"-{f.lstrip('-')}={v}" for f, v in self.flags)

    @property
    def name(self) -> str:
        k = f"-k{self.top_k}" if self.top_k else ""
        return (f"{self.engine}-{self.spec.name}{self.flags_name}-t{self.temperature:g}{k}-"
                f"c{self.concurrency}-in{self.input_len}-out{self.output_len}")

    def reference(self) -> "EnginePoint":
        return dataclasses.replace(self, spec=Speculation(self.engine, "off", "off"))

    def labels(self) -> dict[str, str]:
        return {"sweep_point": self.name, "engine": self.engine, "spec": self.spec.name,
                "spec_text": self.spec.text, "concurrency": str(self.concurrency),
                "temperature": f"{self.temperature:g}", "top_k": str(self.top_k),
                "input_len": str(self.input_len),
                "output_len": str(self.output_len),
                "token_ids": "crc32 of the token text (client side)",
                **{f"flag{f}": v for f, v in self.flags}}

    def args(self) -> list[str]:
        return [a for f, v in self.flags for a in Axis.args(f, v)]


def plan_engine(engine: str, specs: Iterable[str], temperatures: Iterable[float],
                concurrencies: Iterable[int], lengths: Iterable[str],
                axes: Iterable[str] = (), top_ks: Iterable[int] = (0,)) -> list[EnginePoint]:
    """The grid, target-only points first, each server setting's points together."""
    sets = [parse_speculation(engine, s) for s in specs]
    names = [s.name for s in sets]
    for i, s in enumerate(sets):  # two configs that shorten alike keep apart
        if names.count(s.name) > 1:
            sets[i] = dataclasses.replace(s, name=f"{s.name}-{names[:i + 1].count(s.name)}")
    if not any(s.off for s in sets):
        sets.insert(0, Speculation(engine, "off", "off"))
    parsed = [Axis.parse(a) for a in axes]
    flag_sets = [tuple(zip([a.flag for a in parsed], vals))
                 for vals in itertools.product(*(a.values for a in parsed))]
    lens = []
    for text in lengths:
        inp, _, out = text.partition(":")
        lens.append((int(inp or 0), int(out)))
    points = [EnginePoint(engine, s, f, float(t), int(c), i, o, int(k) if t > 0 else 0)
              for s, f, t, c, (i, o), k in itertools.product(sets, flag_sets, temperatures,
                                                            concurrencies, lens, top_ks)]
    points = list(dict.fromkeys(points))  # top-k is not crossed with greedy
    return sorted(points, key=lambda p: not p.spec.off)  # stable: server settings stay together


@dataclass
class EnginePointResult:
    point: EnginePoint
    run_id: str
    status: str  #: "ok" or "failed"
    figures: PointFigures = field(default_factory=PointFigures)
    error: str = ""
    #: where the point's time went, seconds: ``window_s`` serving it, ``own_s`` the sweep's
    #: own work (reading, gating, writing); its server's ``server_start_s``, ``_warmup_s``,
    #: ``_probe_s``, ``_stop_s`` on the first point a server served
    timing: dict[str, float] = field(default_factory=dict)


def _in_window(r: Any, t0: int, t1: int) -> bool:
    t = schema.time_ns(r)
    return t is not None and t0 <= t <= t1


def _relabel(r: Any, run_id: str, config: str, labels: dict[str, str]) -> Any:
    if isinstance(r, schema.RunRecord):
        return dataclasses.replace(r, run_id=run_id, config_id=config, labels={**r.labels, **labels})
    return dataclasses.replace(r, run_id=run_id) if hasattr(r, "run_id") else r


def _run_record(p: EnginePoint, run_id: str, model: str, status: str, error: str = "",
                dtype: str = "") -> Any:
    spec = p.spec
    steps = 0 if spec.off else int(spec.get("steps") or spec.get("depth") or
                                   json.loads(spec.get("config") or "{}").get("num_speculative_tokens", 0))
    algo = "none" if spec.off else str(spec.get("method") or spec.get("spec_type") or
                                       json.loads(spec.get("config") or "{}").get("method", "unknown")).lower()
    labels = {**p.labels(), "status": status, **({"dtype": dtype} if dtype else {})}
    if error:
        labels["error"] = error[-1500:]
    return schema.RunRecord(run_id=run_id, config_id=p.name, algorithm=algo, num_steps=steps,
                            topk=int(spec.get("topk") or (1 if steps else 0)),
                            num_verify_tokens=int(spec.get("draft_tokens") or (steps + 1 if steps else 0)),
                            backend="", model=model, engine=p.engine, started_ns=time.time_ns(),
                            labels=labels)


def _evals(run_id: str, answers: list[cl.Answer], ref: dict[int, str] | None) -> list[Any]:
    """Per answer: greedy exact match with the target-only answer to the same prompt (by text:
    what a user reads, and all a stream without every token's log-probability allows), loops
    (over the token identities where the stream gave them all), invalid and wrong answers."""
    out = []
    for a in answers:
        if a.error:
            continue
        rec = cl.request_record(a, run_id)
        exact = None
        if a.temperature == 0 and ref is not None and a.index in ref:
            exact = a.text == ref[a.index]
        p = a.prompt
        out.append(schema.EvalRecord(
            run_id=run_id, request_id=a.request_id, prompt_id=str(p.get("id", a.index)),
            exact_match=exact, repetition_loop=evalgate.repetition_loop(list(rec.output_token_ids))
            if rec.output_token_ids else None,
            invalid=evalgate.invalid_output(a.text, p.get("answer_format")),
            correct=evalgate.correct_output(a.text, p.get("answer"))))
    return out


@dataclass
class Window:
    point: EnginePoint
    run_id: str
    answers: list[cl.Answer]
    t0: int
    t1: int
    wall_s: list[float]  #: per round
    tokens: list[int]  #: output tokens per round


def _last_words(srv: Any, n: int = 12) -> str:
    log = getattr(srv, "log", None)
    try:
        lines = Path(log).read_text(errors="replace").splitlines() if log else []
    except OSError:
        lines = []
    keep = [ln for ln in lines if ln.strip()][-n:]
    return "\n".join(keep)


def _engine_records(srv: Any) -> list[Any]:
    from ..io.trace import read_trace

    folder = getattr(srv, "trace_dir", None)
    files = sorted(Path(folder).glob("*.jsonl")) if folder and Path(folder).is_dir() else []
    return read_trace(files).records if files else []


def run_engine_sweep(points: list[EnginePoint], out_dir: str | Path, options: EngineOptions, *,
                     requests: int = 8, rounds: int = 1, seed: int = 0, resume: bool = False,
                     probe: str = "auto", progress: bool = True,
                     on_point: Callable[[EnginePointResult], None] | None = None
                     ) -> list[EnginePointResult]:
    """Run the grid (see the module docstring); returns every point's result, those a
    resumed sweep skipped included (from ``sweep.json``)."""
    from tqdm import tqdm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    index = out / "sweep.json"
    done: dict[str, dict] = {}
    if resume and index.exists():
        done = {e["point"]: e for e in json.loads(index.read_text())}
    results: dict[str, EnginePointResult] = {}
    refs: dict[str, tuple[list[Any], list[Any]]] = {}
    bar = tqdm(total=len(points), desc="sweep", unit="point", disable=not progress)
    groups = itertools.groupby(points, key=lambda p: p.server_key)
    for _, group in groups:
        todo = []
        for p in group:
            if p.name in done:
                e = done[p.name]
                results[p.name] = EnginePointResult(
                    p, e["run_id"], e["status"], PointFigures.from_dict(e), e.get("error", ""),
                    {k: float(v) for k, v in e.items() if k in TIMING and v is not None})
                if p.spec.off and e["status"] == "ok":
                    stored = _stored_reference(out, e["run_id"])
                    if stored is not None:
                        refs[_ref_key(p)] = stored
                bar.update(1)
            else:
                todo.append(p)
        def written(r: EnginePointResult) -> None:
            # indexed as soon as its records are in the store: a sweep stopped between the two
            # would run the point again on --resume and store it twice
            results[r.point.name] = r
            _write_index(index, [results[p.name] for p in points if p.name in results])
            if on_point:
                on_point(r)

        while todo:
            finished = _serve(todo, out, options, requests=requests, rounds=rounds, seed=seed,
                              probe=probe, refs=refs, bar=bar, written=written)
            todo = todo[len(finished):]
    bar.close()
    return [results[p.name] for p in points]


def _write_index(path: Path, results: list[EnginePointResult]) -> None:
    rows = [{"point": r.point.name, "run_id": r.run_id, "status": r.status,
             **({"error": r.error} if r.error else {}),
             **r.figures.as_dict(), **r.timing}
            for r in results]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(path)


def _serve(todo: list[EnginePoint], out: Path, options: EngineOptions, *, requests: int,
           rounds: int, seed: int, probe: str, refs: dict[str, tuple[list[Any], list[Any]]],
           bar: Any, written: Callable[[EnginePointResult], None]) -> list[EnginePointResult]:
    """One fresh server for ``todo``'s setting: its points in turn until one fails (the
    failed point and those before it are returned; the caller starts a fresh server for the
    rest)."""
    from ..io.parquet import write_parquet
    from . import points

    first = todo[0]
    slug = f"server-{first.engine}-{first.spec.name}{first.flags_name}-{time.time_ns() // 10**6}"
    folder = out / ".servers" / slug
    options = dataclasses.replace(options, max_model_len=max(
        options.max_model_len, max(p.input_len + p.output_len for p in todo) + 512))
    srv = engine_server(first.engine, first.spec, first.args(), folder, run_id=slug,
                        options=options, slots=max(p.concurrency for p in todo))
    windows: list[Window] = []
    failed: EnginePointResult | None = None
    clock = {"start_s": time.perf_counter()}  #: the server's own time, apart from the sweep's
    try:
        srv.start()
    except Exception as exc:  # noqa: BLE001 - the engine's failure is the point's outcome
        failed = EnginePointResult(todo[0], f"sweep-{todo[0].name}", "failed",
                                   error=f"server did not start: {exc}\n{_last_words(srv)}")
    clock["start_s"] = time.perf_counter() - clock["start_s"]
    try:
        model = ""
        if failed is None:
            try:
                model = fetch.served_model(srv.url)
            except fetch.FetchError as exc:  # the engine's answer is the point's outcome
                failed = EnginePointResult(todo[0], f"sweep-{todo[0].name}", "failed",
                                           error=str(exc))  # (its last words follow below)
        if failed is None:  # warm-up, outside every window
            t = time.perf_counter()
            cl.send(srv.url, model, points.prompts(1, 0), run_id="warmup", temperature=0.0,
                    concurrency=1, max_tokens=8, logprobs=False)
            clock["warmup_s"] = time.perf_counter() - t
        for p in todo if failed is None else ():
            bar.set_description(f"{p.name} ({requests} req x {rounds})")
            run_id = f"sweep-{p.name}"
            prompts = points.prompts(requests, p.input_len)
            t0, walls, answers, counts = time.time_ns(), [], [], []
            for r in range(rounds):
                got, wall = cl.send(srv.url, model, prompts, run_id=f"{run_id}/r{r}" if r else run_id,
                                    temperature=p.temperature, concurrency=p.concurrency,
                                    max_tokens=p.output_len, seed=seed, top_k=p.top_k)
                answers += got
                walls.append(wall)
                counts.append(sum(a.output_tokens for a in got if not a.error))
                errors = [a.error for a in got if a.error]
                if errors:
                    break
            windows.append(Window(p, run_id, answers, t0, time.time_ns(), walls, counts))
            if errors:
                failed = EnginePointResult(p, run_id, "failed", error=(
                    f"{len(errors)} of {len(answers)} requests failed: {errors[0]}"))
                break
            bar.update(1)
        probed = None
        if failed is None and not first.spec.off and probe != "off":
            t = time.perf_counter()
            probed = _probe_if_blind(srv, first, windows, probe)
            clock["probe_s"] = time.perf_counter() - t
    finally:
        t = time.perf_counter()
        srv.stop()
        clock["stop_s"] = time.perf_counter() - t
    if failed is not None:
        failed.error += ("\n" + _last_words(srv)) if "server did not start" not in failed.error else ""
    engine_recs = _engine_records(srv)
    results = []
    for i, w in enumerate(windows):
        t = time.perf_counter()
        ok = failed is None or w.point != failed.point
        recs = _point_records(w, engine_recs, model, ok, failed.error if not ok and failed else "",
                              options.dtype)
        figures = PointFigures()
        if ok:
            recs, figures = _gate(w, recs, refs, probed, options.dtype)
        if ok and w.point.spec.off:
            refs[_ref_key(w.point)] = _reference_of(recs, w.run_id)
        write_parquet(recs, out)
        # the sweep's own time on this point (reading, gating, writing) beside the serving
        timing = {"window_s": sum(w.wall_s), "own_s": time.perf_counter() - t,
                  **({f"server_{k}": v for k, v in clock.items()} if i == 0 else {})}
        res = EnginePointResult(w.point, w.run_id, "ok" if ok else "failed", figures,
                                "" if ok or failed is None else failed.error, timing)
        results.append(res)
        written(res)
    if failed is not None and not any(r.point == failed.point for r in results):
        write_parquet([_run_record(failed.point, failed.run_id, model, "failed", failed.error,
                                   options.dtype),
                       _failed_anomaly(failed)], out)
        results.append(failed)
        written(failed)
    if failed is not None:
        bar.update(1)
    return results


def _failed_anomaly(f: EnginePointResult) -> Any:
    return schema.AnomalyRecord(run_id=f.run_id, kind="sweep_point_failed", severity="critical",
                                t_ns=time.time_ns(), message=f.error.splitlines()[0][:300],
                                evidence={"error": f.error[-1500:]})


def _ref_key(p: EnginePoint) -> str:
    return p.reference().name


def _index(request_id: str) -> int:
    return int(request_id.rsplit(":", 1)[1])


def _reference_of(records: list[schema.Record], run_id: str) -> tuple[list[Any], list[Any]]:
    """A target-only point's first-round requests and evals: what later points compare with."""
    return ([r for r in records if isinstance(r, schema.RequestRecord) and r.run_id == run_id
             and "/r" not in r.request_id],
            [r for r in records if isinstance(r, schema.EvalRecord) and r.run_id == run_id])


def _stored_reference(out: Path, run_id: str) -> tuple[list[Any], list[Any]] | None:
    """A reference point written by an earlier (resumed) sweep, read back from the store."""
    from ..io.store import Where
    from ..io.trace import read_trace

    got = _reference_of(read_trace(str(out), Where(runs=(run_id,))).records, run_id)
    return got if got[0] else None


def _point_records(w: Window, engine_recs: list[Any], model: str, ok: bool, error: str,
                   dtype: str = "") -> list[Any]:
    """The point's run: the engine's records of its window (their run record relabelled; the
    engine's own request records give way to the client's), the client's requests."""
    labels = {**w.point.labels(), "status": "ok" if ok else "failed",
              **({"dtype": dtype} if dtype else {})}
    if error:
        labels["error"] = error[-1500:]
    runs = [r for r in engine_recs if isinstance(r, schema.RunRecord)]
    recs: list[Any] = [_relabel(runs[0], w.run_id, w.point.name, labels)] if runs else \
        [_run_record(w.point, w.run_id, model, labels["status"], error, dtype)]
    keep = (schema.VerifyStepRecord, schema.FallbackRecord, schema.PhaseRecord,
            schema.MismatchRecord, schema.AnomalyRecord)
    recs += [_relabel(r, w.run_id, w.point.name, labels) for r in engine_recs
             if isinstance(r, keep) and _in_window(r, w.t0, w.t1)]
    # a later round repeats round 0's prompts: named apart, so that no comparison with
    # target-only counts one prompt's answer as several independent pairs
    requests = [cl.request_record(a, w.run_id) for a in w.answers if not a.error]
    requests = [dataclasses.replace(q, prompt_id=f"{q.prompt_id}#{q.request_id.rsplit('/', 1)[1].split(':')[0]}")
                if "/r" in q.request_id else q for q in requests]
    recs += requests
    known = [q for q in requests if q.num_draft_tokens is not None and q.num_accepted is not None]
    if known and not any(isinstance(r, schema.VerifyStepRecord) for r in recs):
        # no verify step seen from inside: the responses' own counts (llama.cpp's timings),
        # pooled over the window, as the engine counted them (request-steps unknown)
        recs.append(schema.SpecCountsRecord(
            run_id=w.run_id, t_ns=w.t1, interval_s=(w.t1 - w.t0) / 1e9,
            num_draft_tokens=sum(q.num_draft_tokens or 0 for q in known),
            num_accepted=sum(q.num_accepted or 0 for q in known),
            source=f"{w.point.engine} responses' own counts, {len(known)} requests pooled"))
    if not ok:
        recs.append(_failed_anomaly(EnginePointResult(w.point, w.run_id, "failed", error=error)))
    return recs


def _gate(w: Window, recs: list[Any], refs: dict[str, tuple[list[Any], list[Any]]],
          probed: Any, dtype: str = "") -> tuple[list[Any], PointFigures]:
    """The point's benchmark and evals, the reference's copy, and its figures from the report."""
    ref = None if w.point.spec.off else refs.get(_ref_key(w.point))
    ref_text = {_index(q.request_id): q.output_text for q in ref[0]} if ref else None
    first_round = [a for a in w.answers if not a.error and a.request_id.count("/r") == 0]
    tokens, wall = sum(w.tokens), sum(w.wall_s)
    per_round = [n / s for n, s in zip(w.tokens, w.wall_s) if s]
    metrics = {"output_throughput_tok_s": tokens / wall if wall else None,
               "output_throughput_per_gpu_tok_s": tokens / wall if wall else None,
               **cl.rounds_interval(per_round), **cl.latency(w.answers),
               "request_throughput_req_s": len(w.answers) / wall if wall else None,
               "completed": float(sum(1 for a in w.answers if not a.error)),
               "duration_s": wall, "output_tokens": float(tokens), "rounds": float(len(w.wall_s))}
    extra: list[Any] = [schema.BenchmarkRecord(run_id=w.run_id, t_ns=time.time_ns(),
                                               source="specscope-sweep", metrics=metrics,
                                               config=w.point.labels())]
    extra += _evals(w.run_id, first_round, ref_text)
    if ref is not None:
        ref_id = f"{w.run_id}/reference"
        ref_run = _run_record(w.point.reference(), ref_id, "", "ok", dtype=dtype)
        extra.append(dataclasses.replace(ref_run, labels={**ref_run.labels, "role": "reference",
                                                          "reference_for": w.run_id}))
        extra += [dataclasses.replace(r, run_id=ref_id) for r in ref[0] + ref[1]]
    if probed is not None:
        extra += [dataclasses.replace(r, run_id=w.run_id) for r in probed[1]]
    recs = recs + extra
    _, sections = build_sections(recs)
    sec = next(s for s in sections if s.run is not None and s.run.run_id == w.run_id)
    probe_verdict = probed[0] if probed is not None else None
    outcome = GateOutcome.of(sec, probe_verdict)
    verdict = outcome.verdict
    ci = metrics.get("tok_s_ci95")
    figures = PointFigures(
        outcome, acceptance_length=sec.totals.mean_acceptance_length,
        acceptance_rate=sec.totals.acceptance_rate, tok_s=metrics["output_throughput_tok_s"],
        tok_s_ci=(ci[0], ci[1]) if ci else None,
        tok_s_user=metrics["interactivity_tok_s_user_median"],
        ttft_ms_p50=metrics["ttft_ms_p50"], ttft_ms_p99=metrics["ttft_ms_p99"],
        itl_ms_p50=metrics["itl_ms_p50"], itl_ms_p99=metrics["itl_ms_p99"],
        probe=probe_verdict)
    # the point's gate as the sweep decided it (the report's eval gate and the probe's verdict)
    # on its run, where the dashboard's sweep page reads it
    recs = [dataclasses.replace(r, labels={**r.labels, "sweep_gate": verdict or "",
                                           "probe_verdict": probe_verdict or ""})
            if isinstance(r, schema.RunRecord) and r.run_id == w.run_id else r for r in recs]
    return recs, figures


def _probe_if_blind(srv: Any, p: EnginePoint, windows: list[Window], mode: str) -> Any:
    """The probe's (verdict, records) where nothing inside the engine verified (``auto``) or
    always (``on``); None where the engine's own records decide."""
    if mode == "auto" and _engine_records(srv) and any(
            isinstance(r, schema.VerifyStepRecord) for r in _engine_records(srv)):
        return None
    from ..probe import ProbePlan, ProbeError, probe, probe_records

    # the plan once: a sweep point's gate is its in-engine verdict; the probe beside it is
    # bounded to the plan's requests (its INCONCLUSIVE stays INCONCLUSIVE)
    plan = ProbePlan(classes=("greedy", "temperature", "top-p"), requests=12, max_tokens=32,
                     concurrency=min(4, max(w.point.concurrency for w in windows)), deadline_s=180,
                     until_decided=False)
    try:
        result = probe(srv.url, plan, engine=p.engine)
    except ProbeError as exc:
        return "inconclusive", [schema.AnomalyRecord(
            run_id="", kind="probe_blind", severity="info", t_ns=time.time_ns(),
            message=f"the probe could not check this server: {exc}", evidence={})]
    return result.verdict, [r for r in probe_records(result, "")
                            if isinstance(r, schema.AnomalyRecord)]
