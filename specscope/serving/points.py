"""What both sweeps share about a point: the prompts it sends and its gate as the sweep decides
it (the report's eval gate, joined by the probe's verdict where the probe checked the server).
The reference sweep (``sweep``) and the engine sweep (``enginesweep``) read them here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..collector.evalgate import check_why
from ..collector.section import Section

#: what pads a prompt to about ``input_len`` tokens (ignored by the question that follows it)
FILLER = ("The following notes are background material and can be ignored when answering. ")


def prompts(n: int, input_len: int) -> list[dict[str, Any]]:
    """``n`` prompts of the shipped set in turn, each padded to about ``input_len`` tokens with
    ``FILLER`` (0: as shipped); ``text`` is what is sent."""
    from ..engine.workload import load_prompts

    base = load_prompts()
    out = []
    for i in range(n):
        p = dict(base[i % len(base)])
        if input_len:  # about 4 characters per token
            reps = max(0, input_len * 4 // len(FILLER))
            p["text"] = FILLER * reps + p["prompt"]
        else:
            p["text"] = p["prompt"]
        out.append(p)
    return out


@dataclass(frozen=True)
class GateOutcome:
    """A point's gate: the verdict (None: nothing checked), the checks that failed it, the
    anomalies found, and why each INCONCLUSIVE check has not decided."""

    verdict: str | None
    failed: tuple[str, ...]
    anomalies: tuple[str, ...]
    waiting: tuple[str, ...]

    @classmethod
    def of(cls, sec: Section, probe_verdict: str | None = None) -> GateOutcome:
        """From the point's report section; a probe's FAIL or ERROR fails the point, its
        INCONCLUSIVE holds back a PASS."""
        verdict = sec.gate
        if probe_verdict in ("fail", "error"):
            verdict = "fail"
        elif probe_verdict == "inconclusive" and verdict == "pass":
            verdict = "inconclusive"
        failed = [c.check for c in sec.gate_checks if c.state == "fail"]
        if probe_verdict in ("fail", "error"):
            failed.append(f"probe {probe_verdict}")
        return cls(verdict, tuple(failed), tuple(sorted({a.kind for a in sec.anomalies})),
                   tuple(f"{c.check}: {check_why(c)}" for c in sec.gate_checks
                         if c.state == "inconclusive"))

    def figures(self) -> dict[str, Any]:
        """As a sweep's ``sweep.json`` lists it."""
        return {"gate": self.verdict, "failed": list(self.failed),
                "anomalies": list(self.anomalies), "waiting": list(self.waiting)}
