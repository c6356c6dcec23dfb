"""A request's figures as a source gives them (``Req``), its RequestRecord, the run's pooled
counts and the identities one request's figures must satisfy: shared by the engines' responses
(``responses``) and the benchmark clients' exports (``bench``). Stdlib and the schema only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import schema
from ._common import ImportResult


@dataclass
class Req:
    """What one response says about its request (None = not given)."""

    request_id: str
    steps: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    hist: tuple[int, ...] = ()  #: steps by accepted draft tokens (index 0 = none accepted)
    per_pos: tuple[float, ...] = ()  #: unconditional per-position rates, as given
    k: int | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    t_arrival_ns: int = 0
    t_first_ns: int = 0
    t_finish_ns: int = 0
    reported_al: float | None = None
    reported_rate: float | None = None
    finish_reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def to_record(r: Req, run_id: str) -> schema.RequestRecord:
    hist = (0,) + r.hist if r.hist else ()
    e2e = r.extra.get("e2e_s")
    arrival, finish = r.t_arrival_ns, r.t_finish_ns
    if not finish and e2e is not None:  # a duration without a clock: kept as a span from 0
        arrival, finish = 1, 1 + int(e2e * 1e9)
    return schema.RequestRecord(
        run_id=run_id, rank=0, request_id=r.request_id, t_arrival_ns=arrival,
        t_first_token_ns=r.t_first_ns, t_finish_ns=finish, num_prompt_tokens=r.prompt_tokens,
        num_output_tokens=r.output_tokens, finish_reason=r.finish_reason,
        num_verify_steps=r.steps, num_draft_tokens=r.drafted, num_accepted=r.accepted,
        accept_len_hist=hist, output_token_ids=tuple(r.extra.get("output_token_ids", ())),
        top2_margins=tuple(r.extra.get("top2_margins", ())),
        second_token_ids=tuple(r.extra.get("second_token_ids", ())))


def _per_pos_from_steps(reqs: list[Req]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(accepted, drafted) per draft position, exactly, from each request's
    ``per_step_accepted`` (a step that accepted a tokens accepted positions 1..a) and
    ``per_step_drafted`` (a step that drafted d reached positions 1..d); () unless every request
    that verified gives its steps (drafted: () unless every one gives its drafted too)."""
    counts: list[int] = []
    reached: list[int] | None = []
    for r in reqs:
        if not r.steps:
            continue
        steps = r.extra.get("per_step_accepted")
        if not isinstance(steps, list) or len(steps) != r.steps:
            return (), ()
        for a in steps:
            a = int(a)
            counts += [0] * (a - len(counts))
            for i in range(a):
                counts[i] += 1
        drafted = r.extra.get("per_step_drafted")
        if reached is None or not isinstance(drafted, list) or len(drafted) != r.steps:
            reached = None
            continue
        for d in drafted:
            d = int(d)
            reached += [0] * (d - len(reached))
            for i in range(d):
                reached[i] += 1
    if reached is None or len(reached) < len(counts):
        return tuple(counts), ()
    counts += [0] * (len(reached) - len(counts))  # positions drafted and never accepted
    return tuple(counts), tuple(reached)


def _per_pos_from_hist(reqs: list[Req]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(accepted, drafted) per draft position, exactly, from each request's acceptance
    histogram (steps by accepted drafts: a step that accepted a accepted positions 1..a) and its
    drafted tokens per step (SGLang drafts the same number every step: positions 1..d reached);
    () when a request's drafted tokens do not divide evenly over its steps."""
    depth = []
    for r in reqs:
        if not r.steps or r.drafted is None or r.drafted % r.steps:
            return (), ()
        depth.append(r.drafted // r.steps)
    width = max(depth + [len(r.hist) - 1 for r in reqs])
    accepted = [0] * width
    reached = [0] * width
    for r, d in zip(reqs, depth):
        for a, n in enumerate(r.hist):
            for p in range(a):
                accepted[p] += n
        for p in range(d):
            reached[p] += r.steps or 0  # every request here gave its steps (checked above)
    return tuple(accepted), tuple(reached)


def pooled(reqs: list[Req], run_id: str, fmt: str) -> schema.SpecCountsRecord | None:
    """The sum over requests that gave drafted and accepted counts (steps only if all gave them)."""
    counted = [r for r in reqs if r.drafted is not None and r.accepted is not None]
    with_steps = [r for r in reqs if r.steps is not None and r.accepted is not None]

    def total(rs: list[Req], name: str) -> int:  # over requests that gave the figure (filtered)
        return sum(getattr(r, name) or 0 for r in rs)

    if not counted and not with_steps:
        return None
    all_steps = bool(counted) and all(r.steps is not None for r in counted)
    per_pos, reached = _per_pos_from_steps(counted) if all_steps else ((), ())
    if not per_pos and all_steps and counted and all(r.per_pos for r in counted) and \
            len({len(r.per_pos) for r in counted}) == 1:
        per_pos = tuple(sum(round(r.per_pos[i] * (r.steps or 0)) for r in counted)
                        for i in range(len(counted[0].per_pos)))
    if not per_pos and all_steps and counted and all(r.hist for r in counted):
        per_pos, reached = _per_pos_from_hist(counted)
    if counted:
        return schema.SpecCountsRecord(
            run_id=run_id, t_ns=0, num_drafts=total(counted, "steps") if all_steps else None,
            num_draft_tokens=total(counted, "drafted"), num_accepted=total(counted, "accepted"),
            accepted_per_pos=per_pos, drafted_per_pos=reached if len(reached) == len(per_pos) else (),
            source=f"{fmt}: sum over {len(counted)} of {len(reqs)} requests")
    return schema.SpecCountsRecord(
        run_id=run_id, t_ns=0, num_drafts=total(with_steps, "steps"),
        num_accepted=total(with_steps, "accepted"),
        source=f"{fmt}: sum over {len(with_steps)} of {len(reqs)} requests (drafted not given)")


def check_request(res: ImportResult, r: Req, fmt: str, file: str, line: int) -> None:
    """The identities one response's figures must satisfy, and the traps its engine sets."""
    if r.hist:
        res.identity("histogram sum = verify steps", sum(r.hist), r.steps, line=line, file=file)
        res.identity("sum of j x histogram(j) = accepted tokens",
                     sum(i * n for i, n in enumerate(r.hist)), r.accepted, line=line, file=file)
    if r.steps and r.accepted is not None and r.reported_al is not None:
        res.identity("acceptance length = 1 + accepted / steps (engine's figure, 2 decimals)",
                     r.reported_al, 1 + r.accepted / r.steps, line=line, file=file, tol=0.006)
    if r.drafted and r.accepted is not None and r.reported_rate is not None:
        res.identity("acceptance rate = accepted / drafted", r.reported_rate, r.accepted / r.drafted,
                     line=line, file=file, tol=0.0006)
    if r.per_pos and r.steps and r.accepted is not None:
        res.identity("sum of per-position rate x steps = accepted tokens",
                     round(sum(p * r.steps for p in r.per_pos)), r.accepted, line=line, file=file,
                     tol=len(r.per_pos))
        res.identity("per-position acceptance is non-increasing (chain drafting)",
                     sum(1 for a, b in zip(r.per_pos, r.per_pos[1:]) if b > a + 1e-9), 0,
                     line=line, file=file)
    acc, dra = r.extra.get("per_step_accepted"), r.extra.get("per_step_drafted")
    if isinstance(acc, list):
        res.identity("per-step accepted sum = accepted tokens", sum(acc), r.accepted, line=line, file=file)
        res.identity("per-step entries = verify steps", len(acc), r.steps, line=line, file=file)
        if isinstance(dra, list):
            res.identity("per-step drafted sum = drafted tokens", sum(dra), r.drafted, line=line, file=file)
            if len(set(dra)) > 1:
                res.trap("varying-k", "draft depth varied between steps (per_step_drafted): per-position "
                         "rates over a fixed k are approximate")
    if fmt == "vllm-responses":
        res.trap("vllm-structured-output", "vLLM's num_draft_tokens leaves out drafts cancelled by "
                 "structured-output constraints: with guided decoding the rate reads high")
    if fmt == "sglang-responses" and r.steps and r.reported_al is not None:
        res.identity("SGLang spec_accept_length = completion tokens / verify steps",
                     r.reported_al, r.output_tokens / r.steps if r.output_tokens else None,
                     line=line, file=file, tol=0.006)
        res.trap("sglang-request-al", "SGLang's per-request spec_accept_length is completion tokens "
                 "/ verify steps: it counts the token made at prefill, so it reads high on short "
                 "outputs; specscope's acceptance length is 1 + accepted / steps")
    if fmt == "llamacpp-responses":
        res.trap("llamacpp-no-steps", "llama.cpp timings give drafted and accepted tokens but no "
                 "verify steps: acceptance length stays null")
    if r.accepted is not None and r.drafted is not None and r.accepted > r.drafted:
        res.identity("accepted <= drafted", r.accepted, r.drafted, line=line, file=file)
