"""The probe's run: detect the engine, send the plan, check the answers and say the verdict
(``probe``), with a target-only reference where one is given. Never imports torch."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import httpx

from .. import sampling
from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment
from ..exact import tie_margin
from .checks import Semantics, greedy_check, overall, temperature_check, truncation_check
from .client import (ENABLE, PENALTY_WINDOW, Answer, ProbeError, detect, http_client, place,
                     semantics, send, token_ids)
from .acceptance import acceptance_check, residual_check
from .distribution import distribution_check
from .sharpness import sharpness_check
from .result import ERROR, ProbeResult
from .verified import guard, infer_ngram, select
from . import limit, prefix, rescore, seed
from .penalties import PENALTIES, penalty_check, rescored
from .limit import LIMIT
from .prefix import PREFIX
from .seed import SEED
from .rescore import RESCORE
from .senders import send_limit, send_prefix, send_rescore, send_seed, send_stops
from .stops import STOPS, base_of, is_cut, not_sent, stops_check
from .workload import APART, CLASSES, MIN_P, RISKY, ProbePlan, class_code


def probe(url: str, plan: ProbePlan | None = None, *, model: str | None = None,
          engine: str | None = None, logprobs_mode: str | None = None, top_logprobs: int = 20,
          dtype: str = "", reference: str | None = None,
          transport: httpx.BaseTransport | None = None) -> ProbeResult:
    """Probe ``url`` with ``plan``: send, check, and say. Raises ProbeError where the endpoint
    cannot be probed (unreachable, or it returns no log-probabilities at all). ``transport``:
    where its requests go (``url`` and ``reference`` alike; default: the network)."""
    plan = plan or ProbePlan()
    t0 = time.monotonic()
    with http_client(transport) as http:
        found, model = detect(url, model, client=http)
        engine = engine or found
        sem = semantics(engine, logprobs_mode)
        answers, took = ask(url, engine, model, plan, sem, dtype, top_logprobs, http)
        inferred_note = "" if plan.ngram is not None else place_by_inference(answers)
        got = [a for a in answers if a.response is not None]
        # (a class not sent to this engine by design leaves one answer saying why, no prompt)
        by_design = bool(answers) and all(a.not_sent and not a.prompt for a in answers)
        if not got and not refused(answers) and not by_design:
            # (every request refused: no class supported; none sent: each class not sent to
            # this engine by design, which its table says)
            errors = sorted({a.error for a in answers if a.error})[:3]
            raise ProbeError(f"{url}: no request was answered ({'; '.join(errors) or 'none sent'})")
        if not any(p.logprob is not None for a in got for p in a.positions) and \
                any(a.cls != STOPS for a in got):  # the stops class reads text alone
            raise ProbeError(f"{url} ({engine}) returned no log-probabilities: "
                             f"{ENABLE.get(engine, ENABLE['unknown'])}")
        checks = incomplete(run_checks(answers, sem, dtype), answers)
        result = ProbeResult(url=url, engine=engine, model=model, semantics=sem, checks=checks,
                             answers=answers, top_logprobs=took, seconds=time.monotonic() - t0,
                             dtype=dtype, verdict=overall(checks),
                             engine_error=engine_failure(answers),
                             classes=capabilities(answers))
        if by_design:
            result.notes.append("no class asked for is sent to this engine (the classes table "
                                "says why): nothing checked")
        elif not got:
            result.notes.append("the server refused every request as a bad request (HTTP 400): "
                                "none of the classes sent is supported there, nothing checked")
        unknown = sum(1 for a in got for p in a.positions if p.logprob is None or not p.top)
        total = sum(len(a.positions) for a in got)
        if unknown:
            result.notes.append(
                f"{unknown} of {total} committed tokens came without log-probabilities"
                + (" (llama.cpp under speculation returns logprob 0.0 and no alternatives after "
                   "the first token, upstream #27972)" if engine == "llamacpp" else "")
                + ": unknown, not evidence")
        if inferred_note:
            result.notes.append(inferred_note)
        if took < top_logprobs:
            result.notes.append(f"the server allows {took} alternatives per position "
                                f"(asked {top_logprobs})")
        if result.engine_error is not None:
            result.verdict = ERROR
            return result  # a reference is not asked to judge an engine that failed
        if reference:
            result.checks.append(against_reference(reference, plan, answers, dtype,
                                                   top_logprobs, client=http))
            result.verdict = overall(result.checks)
        return result


def ask(url: str, engine: str, model: str, plan: ProbePlan, sem: Semantics, dtype: str,
        top_logprobs: int, http: Any) -> tuple[list[Answer], int]:
    """The plan's requests, then (``plan.until_decided``) more rounds, each for the classes
    whose checks could still be settled by more positions, until every check has decided, one
    has failed (``plan.fail_fast``), the engine fails, or the deadline passes. The risky
    classes go last, once the others have decided. Returns every answer (indices and times
    across rounds) and the top-logprobs count the server took."""
    t0 = time.monotonic()
    answers: list[Answer] = []

    def stop_at(before: list[Answer]):
        if not plan.fail_fast:
            return None
        return lambda done: overall(run_checks(before + list(done), sem, dtype)) == FAIL

    # (in reverse sending order: popped from the end)
    apart = {c: sender for c, sender in ((LIMIT, send_limit), (RESCORE, send_rescore),
                                         (SEED, send_seed), (STOPS, send_stops),
                                         (PREFIX, send_prefix))
             if c in plan.classes}

    def cut(answers: list[Answer], took: int) -> tuple[list[Answer], int]:
        """The classes sent apart (``senders.py``), once the greedy answers the stops class
        cuts are in: each once, before the risky classes."""
        while apart:
            _, sender = apart.popitem()
            left = plan.deadline_s - (time.monotonic() - t0)
            if left <= 0 or any(a.engine_failed for a in answers) or (
                    plan.fail_fast and answers and overall(run_checks(answers, sem, dtype)) == FAIL):
                return answers, took
            part = replace(plan, deadline_s=left, seed=plan.seed + len(answers))
            got, took = sender(url, engine, model, part, answers, took, stop_at(answers),
                               http, t0)
            answers = answers + got
        return answers, took

    if not plan.until_decided:
        got, took = send(url, engine, model, plan, plan.requests_to_send(), top_logprobs,
                         stop_at([]), client=http, t_start=t0)
        return cut(got, took)
    main = tuple(c for c in plan.classes if c not in APART)
    safe = tuple(c for c in main if c not in RISKY)
    risky = tuple(c for c in main if c in RISKY)
    per_class = max(1, plan.requests // max(1, len(main)))
    plan = replace(plan, classes=main)
    classes, sent, took = safe or risky, {c: 0 for c in plan.classes}, top_logprobs
    while classes:
        left = plan.deadline_s - (time.monotonic() - t0)
        if left <= 0:
            break
        first = not answers
        n = (plan.requests - per_class * len(risky) if first and safe else
             per_class * len(classes))
        offset = min(sent[c] for c in classes)
        part = replace(plan, classes=classes, requests=max(n, len(classes)), deadline_s=left,
                       offset=offset, seed=plan.seed + len(answers))
        got, took = send(url, engine, model, part, part.requests_to_send(), took,
                         stop_at(answers), client=http, t_start=t0)
        for a in got:
            a.index += len(answers)
            sent[a.cls] += 1
        answers += got
        if any(a.engine_failed for a in got) or not any(a.response for a in got):
            break
        if first:
            answers, took = cut(answers, took)
        checks = run_checks(answers, sem, dtype)
        if plan.fail_fast and overall(checks) == FAIL:
            break
        classes = undecided(checks, classes)
        if not classes and risky and not any(sent[c] for c in risky):
            classes = risky  # the others have decided: now the classes that may crash it
    return cut(answers, took)  # where no other class was sent


def refused(answers: list[Answer]) -> bool:
    """Every request sent was refused as a bad request (HTTP 400: a parameter the server does
    not take) and none answered: the class is not supported there, never a FAIL or an ERROR."""
    sent = [a for a in answers if a.t_sent_s is not None]
    return bool(sent) and all(a.response is None and a.status == 400 for a in sent)


def capabilities(answers: list[Answer]) -> dict[str, dict[str, Any]]:
    """Per class sent: whether the server takes its parameters ("checked", "not supported"
    with the server's words, "failed" where the engine failed under it, "not sent"), and how
    many of its requests were answered."""
    out: dict[str, dict[str, Any]] = {}
    for cls in dict.fromkeys(a.cls for a in answers):
        # (the stops and rescore classes' own uncut answers are plain greedy requests: their
        # cuts and scorings say)
        mine = [a for a in answers if a.cls == cls and (cls != STOPS or is_cut(a.sampling))
                and (cls != RESCORE or a.phase != rescore.BASE)
                and (cls != LIMIT or a.phase in (limit.ANSWER, ""))]
        if cls == LIMIT and not mine:  # (its sizing requests: where they were refused)
            mine = [a for a in answers if a.cls == cls]
        answered = sum(1 for a in mine if a.response is not None)
        no = [a for a in mine if a.response is None and a.status == 400]
        if refused(mine):
            state, said = "not supported", no[0].error
        elif answered:
            state, said = "checked", no[0].error if no else ""
        elif any(a.engine_failed for a in mine):
            state, said = "failed", next(a.error for a in mine if a.error)
        else:
            state, said = "not sent", next((a.not_sent for a in mine if a.not_sent), "")
        out[cls] = {"state": state, "answered": answered, "requests": len(mine),
                    "refused": len(no), **({"server_said": said} if said else {})}
    return out


def undecided(checks: list[Assessment], classes: tuple[str, ...]) -> tuple[str, ...]:
    """The classes among ``classes`` with a check that more positions could settle
    (INCONCLUSIVE with a count it needs)."""
    open_ = {cls for c in checks if c.state == INCONCLUSIVE and c.need is not None
             for cls in c.evidence.get("probe_classes") or [c.evidence.get("probe_class")]}
    return tuple(c for c in classes if c in open_)


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


def incomplete(checks: list[Assessment], answers: list[Answer]) -> list[Assessment]:
    """No check PASSes on a class whose requests did not all complete (one failed, or was not
    sent because the engine had failed): INCONCLUSIVE, saying how many."""
    short: dict[str, int] = {}
    for a in answers:
        if (a.error and a.status != 400) or a.not_sent.startswith("the engine had failed"):
            # (a request refused, HTTP 400, is a parameter the server does not take: the
            # class's table says so; its evidence is smaller, not incomplete)
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
    found, else on every token with the blind spot bounded (``verified.py``); then the
    sharpness check pooled over every sampled class (``probe_classes``), and where the replay
    names each draft (prompt lookup), the acceptance rule and the residual pooled too."""
    checks = []
    sampled: list = []  # every sampled class's tested positions, for the pooled check
    sampled_classes: list[str] = []
    blind = False
    for cls in CLASSES:
        mine = [a for a in answers if a.cls == cls]
        if not mine or refused(mine):
            continue
        positions = [p for a in mine for p in a.positions]
        code = class_code(cls)
        if cls == MIN_P:  # the floor alone: the temperature checks do not model it
            found = [truncation_check(positions, sem, label=cls, margin=tie_margin(dtype))]
        elif cls == PENALTIES:
            found = [penalty_check(mine, tie_margin(dtype), penalised=sem.penalised,
                                   unscorable=PENALTY_WINDOW.get(sem.engine, ""))]
        elif code == sampling.GREEDY:
            found = [greedy_check(positions, tie_margin(dtype))]
        else:
            sel = select(mine, silent_drafted_nothing=sem.engine == "llamacpp")
            found = [guard(temperature_check(sel.positions, sem, label=cls), sel, sem)]
            sampled += sel.positions
            sampled_classes.append(cls)
            blind = blind or sel.how == "blind"
            dist = distribution_check(sel.positions, sem, label=cls, blind=sel.how == "blind")
            if dist is not None:
                found.append(dist)
            if code & (sampling.TOP_P | sampling.TOP_K):
                found.append(truncation_check(positions, sem, label=cls, margin=tie_margin(dtype)))
        checks += [replace(c, evidence={**c.evidence, "probe_class": cls}) for c in found]
    shared = [a for a in answers if a.cls == PREFIX]
    if any(a.phase for a in shared) and not refused(shared):
        c = prefix.prefix_check(shared, tie_margin(dtype))
        checks.append(replace(c, evidence={**c.evidence, "probe_class": PREFIX}))
    scorings = [a for a in answers if a.cls == RESCORE and a.phase == rescore.SCORE]
    if scorings and not refused(scorings):
        c = rescore_pairs(answers, scorings, sem)
        checks.append(replace(c, evidence={**c.evidence, "probe_class": RESCORE}))
    tried = [a for a in answers if a.cls == LIMIT]
    ends = [a for a in tried if a.phase == limit.ANSWER]
    # (sized and given up before any answer: INCONCLUSIVE, saying why)
    gave_up = not ends and any(a.t_sent_s is not None for a in tried) and not refused(tried)
    if (ends and not refused(ends)) or gave_up:
        c = limit_answers(answers, ends, sem, dtype)
        checks.append(replace(c, evidence={**c.evidence, "probe_class": LIMIT}))
    seeded = [a for a in answers if a.cls == SEED]
    if any(a.phase for a in seeded) and not refused(seeded):
        c = seed.seed_check(seeded, sem)
        checks.append(replace(c, evidence={**c.evidence, "probe_class": SEED}))
    cut_answers = [a for a in answers if a.cls == STOPS and is_cut(a.sampling)]
    if cut_answers and not refused(cut_answers):
        bases: dict[str, Any] = {}  # the first uncut answer of each prompt: the one cut
        for b in (base_of(a) for a in answers if a.cls in ("greedy", STOPS)):
            if b is not None:
                bases.setdefault(b.prompt, b)
        c = stops_check(bases, cut_answers)
        notes = {}  # what min_tokens and stop tokens could not check, and why
        for key in ("min_tokens", "stop_token_ids"):
            mine = [a for a in cut_answers if key in a.sampling]
            said = not_sent(sem.engine, key) or (
                f"refused: {mine[0].error}" if mine and refused(mine) else None)
            if said:
                notes[key] = said
        checks.append(replace(c, evidence={**c.evidence, "probe_class": STOPS, **notes}))
    if sampled_classes:  # pooled: a temperature applied wrongly reaches every sampled class
        pooled = [sharpness_check(sampled, sem, blind=blind),  # and where the drafts are known
                  acceptance_check(sampled, sem, label="sampled"),  # (prompt lookup), the
                  residual_check(sampled, sem, label="sampled")]  # rule and its residual
        checks += [replace(c, evidence={**c.evidence, "probe_class": "sampled",
                                        "probe_classes": sampled_classes})
                   for c in pooled if c is not None]
    return checks


def rescore_pairs(answers: list[Answer], scorings: list[Answer], sem: Semantics) -> Assessment:
    """The rescore check over each scoring and the answer it scored (found by its token ids:
    the scoring's prompt is the answer's prompt and output ids)."""
    by_ids: dict[tuple[int, ...], tuple[Answer, list[int], list[int]]] = {}
    for a in answers:
        ids = token_ids(a.response) if a.response and a.phase != rescore.SCORE else None
        if ids is not None and a.cls in ("greedy", RESCORE):
            by_ids.setdefault(tuple(ids[0] + ids[1]), (a, *ids))
    pairs = []
    for s in scorings:
        hit = by_ids.get(tuple(s.sampling.get("prompt_ids") or ()))
        if s.response is not None and hit is not None:
            pairs.append((hit[0], s, hit[1], hit[2]))
    return rescore.rescore_check(pairs, processed=sem.processed)


def limit_answers(answers: list[Answer], ends: list[Answer], sem: Semantics,
                  dtype: str) -> Assessment:
    """The limit check over each answer sent to the end of the context and its scoring (found
    by its token ids), where the figures are raw."""
    scorings = {tuple(a.sampling.get("prompt_ids") or ()): a for a in answers
                if a.cls == LIMIT and a.phase == limit.SCORE and a.response is not None}
    judged, context = [], None
    why = next((a.not_sent for a in answers if a.cls == LIMIT and a.not_sent), "")
    for a in ends:
        if a.response is None:
            continue
        ids = token_ids(a.response)
        score = (scorings.get(tuple(ids[0] + ids[1][:-1]))
                 if ids is not None and not sem.processed else None)
        judged.append(limit.judge(a, score, ids, tie_margin(dtype)))
        p = limit.usage(a.response)[0]
        context = context or (p + int(a.sampling["max_tokens"]) if p is not None else None)
    return limit.limit_check(judged, context, sem.processed,
                             [int(a.sampling["max_tokens"]) for a in ends if a.response], why)


def against_reference(reference: str, plan: ProbePlan, answers: list[Answer], dtype: str,
                      top_logprobs: int, *, client: httpx.Client | None = None) -> Assessment:
    """The greedy prompts (the penalties class's too) sent to a target-only endpoint, each pair
    compared as ``diverge`` does (first divergence, the reference's top-2 margin there,
    penalised where the request was, tie-flip or structural)."""
    from .. import schema
    from ..collector.diverge import TIE_MARGIN, DivergeResult, diverge

    engine, model = detect(reference, client=client)
    greedy = [(i, a) for i, a in enumerate(answers)
              if a.cls in ("greedy", PENALTIES) and a.response is not None]
    ref_penalised = semantics(engine).penalised
    ref_answers, _ = send(reference, engine, model, plan,
                          [(a.cls, a.prompt, a.sampling) for _, a in greedy], top_logprobs,
                          client=client)
    vocab: dict[str, int] = {}

    def ids(tokens):
        return tuple(vocab.setdefault(t, len(vocab)) for t in tokens)

    def request(run_id: str, i: int, a: Answer, margins: bool) -> schema.RequestRecord:
        pos = a.positions
        extra = {}
        if a.cls == PENALTIES and not ref_penalised:  # margins as the penalised choice saw them
            scored = rescored(pos, float(a.sampling.get("presence_penalty", 0.0)),
                              float(a.sampling.get("frequency_penalty", 0.0)))
            margins = margins and all(q is not None for q in scored)
            pos = [q or p for q, p in zip(scored, pos)]
        if margins and pos and all(len(p.top) >= 2 for p in pos):
            extra = {"top2_margins": tuple(p.top[0][1] - p.top[1][1] for p in pos),
                     "second_token_ids": ids(p.top[1][0] for p in pos)}
        return schema.RequestRecord(
            run_id=run_id, rank=0, request_id=f"{run_id}-{i}", prompt_id=f"{a.cls}-{i}",
            t_arrival_ns=0, t_first_token_ns=0, t_finish_ns=0, num_prompt_tokens=0,
            num_output_tokens=len(pos), output_token_ids=ids(p.token for p in pos), **extra)

    kind = dtype if dtype in TIE_MARGIN else "bfloat16"
    run = schema.RunRecord(run_id="probe", config_id="probe", algorithm="unknown", num_steps=1,
                           topk=1, num_verify_tokens=2, backend="", model=model)
    mine = [run] + [request("probe", i, a, False) for i, a in greedy]
    refs = [request("reference", i, r, True) for (i, _), r in zip(greedy, ref_answers)
            if r.response is not None]
    results: list[DivergeResult | None] = list(diverge(mine, refs, dtype=kind)) or [None]
    (res,) = results
    summary: dict[str, Any] = (res.summary() if res is not None
                               else {"verdict": "INCONCLUSIVE", "pairs": 0})
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
