"""The probe's result: its verdict, checks and requests, and that result as text, as JSON and
as a trace that ``report`` reads. No I/O; never imports torch."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ..collector.counts import Acceptance
from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, Assessment, state_text
from ..exact import tie_margin
from .checks import Semantics
from .client import Answer

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
    #: per class sent: checked, not supported (the server refused its parameters: HTTP 400),
    #: failed or not sent (``run.capabilities``)
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return sum(len(a.positions) for a in self.answers)

    @property
    def acceptance(self) -> dict[str, Any]:
        """The engine's own per-request counts, pooled: drafted, accepted, their rate."""
        known = [a for a in self.answers if a.drafted is not None and a.accepted is not None]
        drafted = sum(a.drafted or 0 for a in known)
        accepted = sum(a.accepted or 0 for a in known)
        return {"requests": len(known), "drafted": drafted if known else None,
                "accepted": accepted if known else None,
                "acceptance_rate": Acceptance(drafted=drafted, accepted=accepted).rate
                if known else None}

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url, "engine": self.engine, "model": self.model, "verdict": self.verdict,
            "seconds": self.seconds, "output_tokens": self.tokens, "dtype": self.dtype,
            "tie_margin": tie_margin(self.dtype), "top_logprobs": self.top_logprobs,
            "logprobs": self.semantics.mode,
            "sampler_order": self.semantics.order, "engine_acceptance": self.acceptance,
            "requests": requests_json(self.answers), "engine_error": self.engine_error,
            "classes": self.classes,
            "checks": [{"check": c.check, "state": c.state, "need": c.need, "unit": c.unit,
                        **{k: v for k, v in c.evidence.items()}} for c in self.checks],
            "notes": self.semantics.notes + self.notes,
        }



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
    if r.classes:
        lines.append("  classes: " + "; ".join(
            f"{cls} {c['state']}" + (f" ({c['answered']}/{c['requests']} answered"
                                     + (f", {c['refused']} refused: {c['server_said'][:80]}"
                                        if c.get("refused") else "") + ")"
                                     if c["state"] == "checked" else
                                     f" ({c['server_said'][:80]})" if c.get("server_said") else "")
            for cls, c in r.classes.items()))
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
        num_verify_tokens=0, backend="", model=r.model, engine=r.engine, started_ns=now,
        labels={"source_format": "probe", "probe_url": r.url, "probe_verdict": r.verdict,
                "logprobs": r.semantics.mode,
                **({"dtype": r.dtype} if r.dtype else {})})]
    for i, a in enumerate(r.answers):
        if a.response is None:
            continue
        out.append(schema.RequestRecord(
            run_id=run_id, rank=0, request_id=str(a.response.get("id") or f"probe-{i}"),
            t_arrival_ns=0, t_first_token_ns=0, t_finish_ns=0, num_prompt_tokens=0,
            num_output_tokens=len(a.positions),
            temperature=float(a.sampling.get("temperature", a.positions[0].temperature
                                             if a.positions else 0)),
            top_p=float(a.sampling.get("top_p", 1.0)), top_k=int(a.sampling.get("top_k", 0)),
            output_text=a.text, category=f"probe-{a.cls}",
            num_draft_tokens=a.drafted, num_accepted=a.accepted))
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
