"""What both sweeps share about a point: the prompts it sends and its gate as the sweep decides
it (the report's eval gate, joined by the probe's verdict where the probe checked the server).
The reference sweep (``sweep``) and the engine sweep (``enginesweep``) read them here. Imports
the collector's read model and the shipped prompt set only: never a server or the network."""

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


@dataclass(frozen=True)
class PointFigures:
    """A sweep point's figures, the same for both sweeps (None: not measured there, never 0):
    acceptance from the report (length includes the bonus token; the rate is accepted /
    drafted, pooled), throughput and latency as the client timed them, the speedup over the
    target-only point at the same temperature, concurrency and lengths, and the gate."""

    gate: GateOutcome = GateOutcome(None, (), (), ())
    acceptance_length: float | None = None
    acceptance_rate: float | None = None
    tok_s: float | None = None  #: output tokens per second of the point's wall time
    tok_s_ci: tuple[float, float] | None = None  #: 95% interval over rounds (two or more)
    tok_s_user: float | None = None  #: median tokens per second a request saw after its first
    ttft_ms_p50: float | None = None
    ttft_ms_p99: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p99: float | None = None
    speedup_vs_target_only: float | None = None
    probe: str | None = None  #: the probe's verdict where it checked the server from outside

    def as_dict(self) -> dict[str, Any]:
        """As ``sweep.json`` lists it."""
        out: dict[str, Any] = {f: getattr(self, f) for f in _FIGURES}
        out["tok_s_ci"] = list(self.tok_s_ci) if self.tok_s_ci else None
        return {**out, **self.gate.figures()}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> PointFigures:
        """From a ``sweep.json`` row (a resumed sweep's); older rows named ``tok_s_user``
        ``interactivity_tok_s_user_median``."""
        ci = row.get("tok_s_ci")
        figures = {f: row.get(f) for f in _FIGURES if f != "tok_s_ci"}
        if figures["tok_s_user"] is None:
            figures["tok_s_user"] = row.get("interactivity_tok_s_user_median")
        return cls(GateOutcome(row.get("gate"), tuple(row.get("failed") or ()),
                               tuple(row.get("anomalies") or ()), tuple(row.get("waiting") or ())),
                   tok_s_ci=(ci[0], ci[1]) if ci else None, **figures)


_FIGURES = ("acceptance_length", "acceptance_rate", "tok_s", "tok_s_ci", "tok_s_user",
            "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99", "speedup_vs_target_only",
            "probe")
