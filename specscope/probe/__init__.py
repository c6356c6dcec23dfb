"""``specscope probe``: a black-box check of verify through any OpenAI-compatible endpoint.
Never imports torch; installs nothing in the engine.

It sends a designed workload (``workload.py``: greedy, temperature, temperature with top-p,
and with top-k where the engine takes it), each request asking for log-probabilities, and
checks from the engine's own figures (``checks.py``) that greedy requests committed their top-1,
that sampled ones are not the top-1 more often than their temperature allows, and that no
committed token lies outside its top-p or top-k. Where the engine gives per-step speculative
detail (vLLM), the temperature check is restricted to the tokens verify committed (accepted
drafts and the tokens drawn at a rejection). The verdict is FAIL / PASS / INCONCLUSIVE with
evidence, or ERROR where the engine failed under the probe (a request answered HTTP 5xx, a
dropped connection, no answer) after earlier ones were answered: a finding, never a pass. A
trace of it reads in ``report``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from .. import sampling
from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment, state_text
from ..exact import tie_margin
from .checks import Semantics, greedy_check, overall, temperature_check, truncation_check
from .client import ENABLE, Answer, ProbeError, detect, place, semantics, send
from .verified import guard, infer_ngram, select
from .workload import CLASSES, ProbePlan

__all__ = ["CLASSES", "ERROR", "ProbeError", "ProbePlan", "ProbeResult", "format_probe", "probe",
           "probe_records"]

#: the probe's verdict where the engine failed under its requests after answering earlier ones
ERROR = "error"



@dataclass
class ProbeResult:
    url: str
    engine: str
    model: str
    semantics: Semantics
    checks: list[Assessment]
    answers: list[Answer]
    top_logprobs: int
    seconds: float
    dtype: str
    verdict: str = INCONCLUSIVE
    notes: list[str] = field(default_factory=list)
    #: where the engine failed under the probe: the first failed request (class, index,
    #: sampling, the engine's words) and the requests in flight when it failed; else None
    engine_error: dict[str, Any] | None = None

    @property
    def tokens(self) -> int:
        return sum(len(a.positions) for a in self.answers)

    @property
    def acceptance(self) -> dict[str, Any]:
        """The engine's own per-request counts, pooled: drafted, accepted, their rate."""
        known = [a for a in self.answers if a.drafted is not None and a.accepted is not None]
        drafted = sum(a.drafted for a in known)
        accepted = sum(a.accepted for a in known)
        return {"requests": len(known), "drafted": drafted if known else None,
                "accepted": accepted if known else None,
                "acceptance_rate": accepted / drafted if known and drafted else None}

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url, "engine": self.engine, "model": self.model, "verdict": self.verdict,
            "seconds": self.seconds, "output_tokens": self.tokens, "dtype": self.dtype,
            "tie_margin": tie_margin(self.dtype), "top_logprobs": self.top_logprobs,
            "logprobs": self.semantics.mode,
            "sampler_order": self.semantics.order, "engine_acceptance": self.acceptance,
            "requests": requests_json(self.answers), "engine_error": self.engine_error,
            "checks": [{"check": c.check, "state": c.state, "need": c.need, "unit": c.unit,
                        **{k: v for k, v in c.evidence.items()}} for c in self.checks],
            "notes": self.semantics.notes + self.notes,
        }


def probe(url: str, plan: ProbePlan | None = None, *, model: str | None = None,
          engine: str | None = None, logprobs_mode: str | None = None, top_logprobs: int = 20,
          dtype: str = "", reference: str | None = None) -> ProbeResult:
    """Probe ``url`` with ``plan``: send, check, and say. Raises ProbeError where the endpoint
    cannot be probed (unreachable, or it returns no log-probabilities at all)."""
    plan = plan or ProbePlan()
    t0 = time.monotonic()
    found, model = detect(url, model)
    engine = engine or found
    sem = semantics(engine, logprobs_mode)
    stop = (lambda done: overall(run_checks(done, sem, dtype)) == FAIL) if plan.fail_fast else None
    answers, took = send(url, engine, model, plan, plan.requests_to_send(), top_logprobs, stop)
    inferred_note = "" if plan.ngram is not None else place_by_inference(answers)
    got = [a for a in answers if a.response is not None]
    if not got:
        errors = sorted({a.error for a in answers if a.error})[:3]
        raise ProbeError(f"{url}: no request was answered ({'; '.join(errors) or 'none sent'})")
    if not any(p.logprob is not None for a in got for p in a.positions):
        raise ProbeError(f"{url} ({engine}) returned no log-probabilities: {ENABLE.get(engine, ENABLE['unknown'])}")
    checks = incomplete(run_checks(answers, sem, dtype), answers)
    result = ProbeResult(url=url, engine=engine, model=model, semantics=sem, checks=checks,
                         answers=answers, top_logprobs=took, seconds=time.monotonic() - t0,
                         dtype=dtype, verdict=overall(checks),
                         engine_error=engine_failure(answers))
    unknown = sum(1 for a in got for p in a.positions if p.logprob is None or not p.top)
    total = sum(len(a.positions) for a in got)
    if unknown:
        result.notes.append(
            f"{unknown} of {total} committed tokens came without log-probabilities"
            + (" (llama.cpp under speculation returns logprob 0.0 and no alternatives after the "
               "first token, upstream #27972)" if engine == "llamacpp" else "")
            + ": unknown, not evidence")
    if inferred_note:
        result.notes.append(inferred_note)
    if took < top_logprobs:
        result.notes.append(f"the server allows {took} alternatives per position (asked {top_logprobs})")
    if result.engine_error is not None:
        result.verdict = ERROR
        return result  # a reference is not asked to judge an engine that failed
    if reference:
        result.checks.append(against_reference(reference, plan, answers, dtype, top_logprobs))
        result.verdict = overall(result.checks)
    return result


def place_by_inference(answers: list[Answer]) -> str:
    """Places the requests whose roles are unknown by the prompt-lookup settings read off the
    engine's per-step figures (``verified.infer_ngram``), where they fit one way only; returns
    the note that says what was read (empty where nothing was)."""
    inferred, note = infer_ngram(answers)
    for a in answers:
        if inferred is not None and a.response is not None and not a.roles_by:
            (a.positions, _, _, a.roles_by, a.verified_at_most,
             a.why_unplaced) = place(a.positions, a.response, inferred)
    return note


def engine_failure(answers: list[Answer]) -> dict[str, Any] | None:
    """The engine's failure under the probe, if it failed after answering an earlier request:
    the last request sent before it failed (class, sampling, prompt), every request in flight
    then, the first request that failed with the engine's words, and what was answered before
    and not sent after. Every request in a batch the engine was running fails with it, so the
    request that brought it down is one of those in flight; the last one sent is named."""
    failed = sorted((a for a in answers if a.engine_failed), key=lambda a: a.t_done_s or 0.0)
    if not failed or not any(a.response is not None for a in answers):
        return None
    first = failed[0]
    t = first.t_done_s or 0.0
    in_flight = sorted((a for a in answers if a.t_sent_s is not None and a.t_sent_s <= t
                        and (a.t_done_s is None or a.t_done_s >= t)),
                       key=lambda a: a.t_sent_s or 0.0)
    last = in_flight[-1] if in_flight else first

    def named(a: Answer) -> dict[str, Any]:
        return {"index": a.index, "class": a.cls, "sampling": a.sampling, "prompt": a.prompt[:80]}

    return {**named(last), "status": first.status, "error": first.error,
            "first_failed": first.index, "after_seconds": round(t, 3),
            "answered_before": sum(1 for a in answers if a.response is not None
                                   and (a.t_done_s or 0.0) <= t),
            "in_flight": [named(a) for a in in_flight],
            "failed": sum(1 for a in answers if a.error),
            "not_sent": sum(1 for a in answers if a.not_sent)}


def requests_json(answers: list[Answer]) -> dict[str, Any]:
    """The requests as the JSON keeps them: answered, failed (each with the engine's words) and
    never sent (fail-fast, budget, a failed engine), apart."""
    not_sent: dict[str, list[int]] = {}
    for a in answers:
        if a.not_sent:
            not_sent.setdefault(a.not_sent, []).append(a.index)
    return {"planned": len(answers), "sent": sum(1 for a in answers if a.t_sent_s is not None),
            "answered": sum(1 for a in answers if a.response is not None),
            "failed": [{"index": a.index, "class": a.cls, "status": a.status,
                        "engine_failed": a.engine_failed, "error": a.error}
                       for a in answers if a.error],
            "not_sent": [{"reason": why, "count": len(ix), "indices": ix}
                         for why, ix in not_sent.items()]}


def incomplete(checks: list[Assessment], answers: list[Answer]) -> list[Assessment]:
    """No check PASSes on a class whose requests did not all complete (one failed, or was not
    sent because the engine had failed): INCONCLUSIVE, saying how many."""
    short: dict[str, int] = {}
    for a in answers:
        if a.error or a.not_sent.startswith("the engine had failed"):
            short[a.cls] = short.get(a.cls, 0) + 1
    out = []
    for c in checks:
        cls = c.evidence.get("probe_class")
        if c.state == PASS and cls in short:
            n = sum(1 for a in answers if a.cls == cls)
            c = Assessment(c.check, INCONCLUSIVE, {
                **c.evidence, "reason": f"{short[cls]} of the class's {n} requests did not "
                "complete (failed, or not sent after the engine failed)"}, None, c.unit)
        out.append(c)
    return out


def run_checks(answers: list[Answer], sem: Semantics, dtype: str = "") -> list[Assessment]:
    """The checks per class over the answers' positions (each check's evidence names its class,
    ``probe_class``); the temperature check on the tokens verify produced where they can be
    found, else on every token with the blind spot bounded (``verified.py``)."""
    checks = []
    for cls in CLASSES:
        mine = [a for a in answers if a.cls == cls]
        if not mine:
            continue
        positions = [p for a in mine for p in a.positions]
        code = sampling.of_name(cls)
        if code == sampling.GREEDY:
            found = [greedy_check(positions, tie_margin(dtype))]
        else:
            sel = select(mine, silent_drafted_nothing=sem.engine == "llamacpp")
            found = [guard(temperature_check(sel.positions, sem, label=cls), sel, sem)]
            if code & (sampling.TOP_P | sampling.TOP_K):
                found.append(truncation_check(positions, sem, label=cls, margin=tie_margin(dtype)))
        checks += [replace(c, evidence={**c.evidence, "probe_class": cls}) for c in found]
    return checks


def against_reference(reference: str, plan: ProbePlan, answers: list[Answer], dtype: str,
                      top_logprobs: int) -> Assessment:
    """The greedy prompts sent to a target-only endpoint too, each pair compared as ``diverge``
    does (first divergence, the reference's top-2 margin there, tie-flip or structural)."""
    from .. import schema
    from ..collector.diverge import TIE_MARGIN, diverge

    engine, model = detect(reference)
    greedy = [(i, a) for i, a in enumerate(answers) if a.cls == "greedy" and a.response is not None]
    ref_answers, _ = send(reference, engine, model, plan,
                          [(a.cls, a.prompt, a.sampling) for _, a in greedy], top_logprobs)
    vocab: dict[str, int] = {}

    def ids(tokens):
        return tuple(vocab.setdefault(t, len(vocab)) for t in tokens)

    def request(run_id: str, i: int, a: Answer, margins: bool) -> schema.RequestRecord:
        pos = a.positions
        extra = {}
        if margins and pos and all(len(p.top) >= 2 for p in pos):
            extra = {"top2_margins": tuple(p.top[0][1] - p.top[1][1] for p in pos),
                     "second_token_ids": ids(p.top[1][0] for p in pos)}
        return schema.RequestRecord(
            run_id=run_id, rank=0, request_id=f"{run_id}-{i}", prompt_id=f"greedy-{i}",
            t_arrival_ns=0, t_first_token_ns=0, t_finish_ns=0, num_prompt_tokens=0,
            num_output_tokens=len(pos), output_token_ids=ids(p.token for p in pos), **extra)

    kind = dtype if dtype in TIE_MARGIN else "bfloat16"
    run = schema.RunRecord(run_id="probe", config_id="probe", algorithm="unknown", num_steps=1,
                           topk=1, num_draft_tokens=2, backend="", model=model)
    mine = [run] + [request("probe", i, a, False) for i, a in greedy]
    refs = [request("reference", i, r, True) for (i, _), r in zip(greedy, ref_answers)
            if r.response is not None]
    (res,) = diverge(mine, refs, dtype=kind) or [None]
    summary = res.summary() if res is not None else {"verdict": "INCONCLUSIVE", "pairs": 0}
    state = str(summary["verdict"]).lower()
    ev = {"mode_requested": "greedy", "reference": reference, "pairs": summary.get("pairs", 0),
          "identical": summary.get("identical"), "structural": summary.get("structural"),
          "share_tie_flips": summary.get("share_tie_flips"), "tie_margin": TIE_MARGIN[kind],
          "num_positions": sum(len(a.positions) for _, a in greedy)}
    if state == FAIL and res is not None:
        p = next(p for p in res.diverged if p.verdict == "structural")
        ev["message"] = (f"greedy request {p.prompt_id} first differs from the target-only "
                         f"endpoint at token {p.first_index}, where the reference's margin is "
                         f"{p.margin:.3g} nats (structural)")
    if state == PASS:
        ev["rules_out"] = summary.get("rules_out")
    elif state == INCONCLUSIVE and summary.get("need"):
        ev["lean"] = "honest"
        return Assessment("greedy against target-only", state, ev, summary["need"], "greedy pairs")
    return Assessment("greedy against target-only", state, ev)


#: what a temperature check tested, as its line says
TESTED = {"verify": "only the tokens verify produced",
          "blind": "every token: which ones verify produced is unknown",
          "all": "every token (no request shows speculation)"}


def format_probe(r: ProbeResult) -> str:
    """The verdict as text: one line per check with its evidence, then the engine's own figures."""
    acc = r.acceptance
    rate = f"{acc['acceptance_rate']:.3f}" if acc["acceptance_rate"] is not None else "unknown"
    lines = [f"probe {r.url}  engine {r.engine}  model {r.model}",
             f"  {sum(1 for a in r.answers if a.response is not None)} requests, {r.tokens} output "
             f"tokens in {r.seconds:.1f} s; top_logprobs {r.top_logprobs}; "
             f"{r.semantics.mode} log-probabilities, "
             f"{r.semantics.order}; tie margin {tie_margin(r.dtype):g} nats",
             f"  engine's own acceptance rate (accepted / drafted, its per-request counts): {rate}"
             f" over {acc['requests']} requests"]
    for c in r.checks:
        ev = c.evidence
        obs, exp = ev.get("observed_top1_rate"), ev.get("expected_top1_rate_bound", ev.get("expected_top1_rate"))
        figures = f"n {ev.get('num_positions', 0)}"
        if obs is not None and exp is not None:
            figures += f"  top-1 {obs:.3f} vs {'<= ' if 'expected_top1_rate_bound' in ev else ''}{exp:.3f}"
        if ev.get("p_value") is not None:
            figures += f"  p {ev['p_value']:.2g}"
        if ev.get("bound") is not None and c.state != FAIL:
            figures += f"  99% bound {ev['bound']:.3f}"
        said = state_text(c.state, c.need, c.unit, ev.get("reason"), ev.get("lean"))
        lines.append(f"  {c.check:<34} {said:<40} {figures}")
        if c.state == PASS and ev.get("rules_out"):
            lines.append(f"      {ev['rules_out']}")
        if ev.get("message") and c.state == FAIL:
            lines.append(f"      {ev['message']}")
        if ev.get("positions_tested") in TESTED:
            lines.append(f"      tested {TESTED[ev['positions_tested']]}"
                         + (f" ({', '.join(ev['roles_from'])})" if ev.get("roles_from") else ""))
    e = r.engine_error
    if e is not None:
        lines.append(f"  ENGINE FAILED under the probe after {e['after_seconds']:.1f} s and "
                     f"{e['answered_before']} answered requests, the last sent before it request "
                     f"{e['index']} (class {e['class']}, {json.dumps(e['sampling'])}): request "
                     f"{e['first_failed']} got {e['error']}")
        if len(e["in_flight"]) > 1:
            lines.append("      in flight then: " + "; ".join(
                f"request {x['index']} ({x['class']})" for x in e["in_flight"]))
        lines.append(f"      {e['failed']} request(s) failed, {e['not_sent']} not sent; no check "
                     "on an incomplete class can PASS")
    for note in r.semantics.notes + r.notes:
        lines.append(f"  note: {note}")
    lines.append(f"  VERDICT {r.verdict.upper()}")
    return "\n".join(lines)


def probe_records(r: ProbeResult, run_id: str) -> list[Any]:
    """The probe as a trace: its run, each answered request (tokens, sampling, the engine's own
    counts) and each failing check as an anomaly, so that ``report`` reads it."""
    from .. import schema

    now = time.time_ns()
    out: list[Any] = [schema.RunRecord(
        run_id=run_id, config_id=f"probe-{r.engine}", algorithm="unknown", num_steps=0, topk=0,
        num_draft_tokens=0, backend="", model=r.model, engine=r.engine, started_ns=now,
        labels={"source_format": "probe", "probe_url": r.url, "probe_verdict": r.verdict,
                "logprobs": r.semantics.mode,
                **({"dtype": r.dtype} if r.dtype else {})})]
    for i, a in enumerate(r.answers):
        if a.response is None:
            continue
        out.append(schema.RequestRecord(
            run_id=run_id, rank=0, request_id=str(a.response.get("id") or f"probe-{i}"),
            t_arrival_ns=0, t_first_token_ns=0, t_finish_ns=0, num_prompt_tokens=0,
            num_output_tokens=len(a.positions), temperature=float(a.sampling.get("temperature", 0)),
            top_p=float(a.sampling.get("top_p", 1.0)), top_k=int(a.sampling.get("top_k", 0)),
            output_text=a.text, category=f"probe-{a.cls}",
            num_draft_tokens=a.drafted, num_accepted_tokens=a.accepted))
    if r.engine_error is not None:
        e = r.engine_error
        out.append(schema.AnomalyRecord(
            run_id=run_id, kind="probe_engine_error", severity="critical", t_ns=now,
            message=f"the engine failed under the probe: request {e['index']} (class "
                    f"{e['class']}) got {e['error']}",
            evidence={k: v for k, v in e.items() if k != "error"}))
    for c in r.checks:
        if c.state == FAIL:
            out.append(schema.AnomalyRecord(
                run_id=run_id, kind="probe_" + c.check.split(" (")[0].replace(" ", "_"),
                severity="critical", t_ns=now, message=str(c.evidence.get("message", c.check)),
                evidence={k: v for k, v in c.evidence.items() if k != "message"}))
    return out
