"""The read model: one run's report section as typed values. Never imports torch or dash.

``stats_section`` (``collector.report``) builds a ``Section``; the advisor, the sweeps, the CLI
and the dashboard read its attributes, and ``report --json`` writes its ``as_dict()``, the JSON
contract every source shares, serialised from the fields (each part's ``as_dict`` writes its
keys in the order the contract has them; ``tests/collector/test_report_golden.py`` holds the
bytes). A misspelt field is an ``AttributeError`` where it is written, not a ``KeyError``
inside a callback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from .. import schema
from ..io import codec
from .evalgate import gate_text
from .verdict import GateCheck

__all__ = ["AcceptanceFigures", "Anomaly", "Benchmark", "Breakdown", "DraftHealth", "EngineSeen",
           "FlaggedRequest", "GateCheck", "Percentiles", "ProbeSummary", "Section", "Totals",
           "Truth", "Window"]


def _plain(value: Any) -> Any:
    """A field's JSON form: tuples as lists (a report's dicts compare equal to parsed JSON)."""
    return list(value) if isinstance(value, tuple) else value


def _acceptance(a: AcceptanceFigures) -> dict[str, Any]:
    return {f.name: _plain(getattr(a, f.name)) for f in fields(AcceptanceFigures)}


@dataclass(frozen=True, slots=True)
class AcceptanceFigures:
    """Pooled acceptance figures (the keys ``totals`` and every window share).

    ``mean_acceptance_length`` includes the bonus token; ``acceptance_rate`` is accepted /
    drafted, pooled from counters. Unknown figures are None, never 0.
    """

    num_drafts: int = 0
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    mean_acceptance_length: float | None = None
    acceptance_rate: float | None = None
    per_position_acceptance: tuple[float, ...] = ()
    #: the engine's own figures (its gauges, its logs' values), never mixed into the pooled ones
    reported_mean_acceptance_length: float | None = None
    reported_acceptance_rate: float | None = None


@dataclass(frozen=True, slots=True)
class Window(AcceptanceFigures):
    """One time window of a run."""

    time: float | None = 0.0  #: window start, seconds since the epoch; None: the source has no times
    index: int | None = None  #: untimed windows: the source line's place in file order
    window_s: float | None = None
    committed_tokens: int = 0  #: accepted + bonus, from verify steps
    fallbacks: Mapping[str, int] = field(default_factory=dict)
    mean_draft_depth: float | None = None  #: mean k of its steps (0: speculation off)
    off_steps: int = 0

    def as_dict(self) -> dict[str, Any]:
        out = {"time": self.time, "window_s": self.window_s, **_acceptance(self),
               "committed_tokens": self.committed_tokens, "fallbacks": dict(self.fallbacks),
               "mean_draft_depth": self.mean_draft_depth, "off_steps": self.off_steps}
        if self.index is not None:
            out["index"] = self.index
        return out


@dataclass(frozen=True, slots=True)
class Totals(AcceptanceFigures):
    """A run's pooled figures."""

    accept_length_histogram: Mapping[int, int] = field(default_factory=dict)
    num_verify_steps: int = 0
    num_requests: int = 0
    output_tokens: int = 0
    output_tokens_per_s: float | None = None
    busy_s: float | None = None  #: time some request was in flight (the rate's denominator)
    span_s: float | None = None  #: first to last record
    num_clamped: int = 0
    steps_by_depth: Mapping[str, int] = field(default_factory=dict)
    depth_changes: int = 0
    off_periods: int = 0

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        out["accept_length_histogram"] = {str(k): v for k, v in
                                          self.accept_length_histogram.items()}
        out["steps_by_depth"] = dict(self.steps_by_depth)
        return out


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Exact percentiles, or interpolated within histogram buckets when ``from_buckets``."""

    n: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    from_buckets: bool = False
    total_s: float | None = None  #: phases only: the phase's total time

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n, "mean": self.mean, "p50": self.p50, "p90": self.p90,
                               "p99": self.p99}
        if self.total_s is not None:
            out["total_s"] = self.total_s
        if self.from_buckets:
            out["from_buckets"] = True
        return out


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where a run's phase time went, from its phase records (``collector.phases``)."""

    steps: int
    total_phase_s: float
    committed_tokens: int
    time_per_committed_token_ms: float | None
    draft_overhead_share: float | None
    idle_gap_s: float

    @classmethod
    def from_phases(cls, b: Mapping[str, Any] | None) -> Breakdown | None:
        return _make(cls, b) if b else None


@dataclass(frozen=True, slots=True)
class Truth:
    """Sampling truth for one requested mode: observed vs expected argmax-commit rate."""

    mode_requested: str
    modes_used: Mapping[str, int]
    num_positions: int
    observed_top1_rate: float | None
    expected_top1_rate: float | None
    expected_band_95: tuple[float, float] | None
    z: float | None  #: +-inf where the observed rate is impossible under honest sampling
    state: str | None = None  #: "pass", "fail", "inconclusive"; None under greedy
    state_text: str | None = None  #: e.g. "INCONCLUSIVE (need ~7 more positions)"
    p_value: float | None = None
    #: the 99% bounds of the argmax share (a PASS needs both within 5 points of expected)
    bounds_99: tuple[float | None, float | None] | None = None
    #: the committed tokens' mean mid-rank PIT (honest: 0.5) and the positions it covers
    pit_mean: float | None = None
    pit_positions: int | None = None
    #: the acceptance rule: accepted share of the tested draft tokens, the share min(1, p/q)
    #: gives them, and how many were tested
    accept_observed_rate: float | None = None
    accept_expected_rate: float | None = None
    accept_trials: int | None = None
    #: the residual rule: the mean PIT at rejected drafts (honest: 0.5) and how many
    resid_mean: float | None = None
    resid_positions: int | None = None
    positions_needed: int | None = None  #: INCONCLUSIVE: about how many more would settle it

    @property
    def flagged(self) -> bool:
        return self.state == "fail"

    def as_dict(self) -> dict[str, Any]:
        z = self.z  # JSON has no infinity: "inf"/"-inf"
        return {"state": self.state, "state_text": self.state_text, "p_value": self.p_value,
                "positions_needed": self.positions_needed, "bounds_99": _plain(self.bounds_99),
                "mode_requested": self.mode_requested, "modes_used": dict(self.modes_used),
                "num_positions": self.num_positions, "observed_top1_rate": self.observed_top1_rate,
                "expected_top1_rate": self.expected_top1_rate,
                "expected_band_95": _plain(self.expected_band_95),
                "z": z if z is None or math.isfinite(z) else ("inf" if z > 0 else "-inf"),
                "pit_mean": self.pit_mean, "pit_positions": self.pit_positions,
                "accept_observed_rate": self.accept_observed_rate,
                "accept_expected_rate": self.accept_expected_rate,
                "accept_trials": self.accept_trials, "resid_mean": self.resid_mean,
                "resid_positions": self.resid_positions}


@dataclass(frozen=True, slots=True)
class DraftHealth:
    """The draft's top-1 probabilities: DRAFT_HIST_BINS bins, the last holding exactly 1.0."""

    num_positions: int = 0
    histogram: tuple[int, ...] = ()
    share_at_exactly_one: float | None = None
    honest_share_at_one: float | None = None  #: the most an honest draft puts at exactly 1.0
    state: str | None = None
    state_text: str | None = None
    p_value: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Anomaly:
    """A finding as the report lists it: its own ``kind`` ("silent_greedy", ...)."""

    kind: str
    severity: str
    message: str
    evidence: Mapping[str, Any]
    run_id: str = ""
    t_ns: int = 0
    node: str = ""

    @classmethod
    def of(cls, a: schema.AnomalyRecord) -> Anomaly:
        return cls(a.kind, a.severity, a.message, a.evidence, a.run_id, a.t_ns, a.node)

    def as_dict(self) -> dict[str, Any]:
        d = codec.to_dict(schema.AnomalyRecord(
            run_id=self.run_id, kind=self.kind, severity=self.severity, message=self.message,
            t_ns=self.t_ns, evidence=self.evidence, node=self.node))
        d["kind"] = d.pop(codec.FIELD_KIND)
        return d


@dataclass(frozen=True, slots=True)
class FlaggedRequest:
    """A request failing sampling truth on its own: its id, mode and p-value, and the whole
    evidence its test wrote (rates, bounds, positions)."""

    request_id: str
    mode_requested: str
    num_positions: int
    observed_top1_rate: float | None
    expected_top1_rate: float | None
    p_value: float | None
    evidence: Mapping[str, Any]  #: as the test wrote it (``as_dict`` writes it whole)

    @classmethod
    def from_dict(cls, e: Mapping[str, Any]) -> FlaggedRequest:
        return cls(str(e.get("request_id", "")), str(e.get("mode_requested", "")),
                   int(e.get("num_positions") or 0), e.get("observed_top1_rate"),
                   e.get("expected_top1_rate"), e.get("p_value"), dict(e))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.evidence)


@dataclass(frozen=True, slots=True)
class ProbeSummary:
    """A ``specscope probe`` trace's verdict: the endpoint, the verdict, which log-probabilities
    it read, and each failing check with its message."""

    url: str | None
    verdict: str | None
    logprobs: str | None
    failed: tuple[tuple[str, str], ...] = ()  #: (check, message)

    @classmethod
    def from_dict(cls, p: Mapping[str, Any]) -> ProbeSummary:
        return cls(p.get("url"), p.get("verdict"), p.get("logprobs"),
                   tuple((f["check"], f["message"]) for f in p.get("failed") or ()))

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "verdict": self.verdict, "logprobs": self.logprobs,
                "failed": [{"check": c, "message": m} for c, m in self.failed]}


@dataclass(frozen=True, slots=True)
class EngineSeen:
    """What the engine counted against what the hooks saw (``views.seen_by_hooks``)."""

    engine: tuple[str, ...]
    final: bool
    engine_counts: Mapping[str, Any]
    hook_counts: Mapping[str, Any]
    not_seen: Mapping[str, Any] | None  #: None where the counts agree
    steps_after: int

    @classmethod
    def from_dict(cls, e: Mapping[str, Any]) -> EngineSeen:
        def counts(m: Any) -> dict[str, Any]:  # (per-position lists as JSON has them)
            return {k: list(v) if isinstance(v, tuple) else v for k, v in (m or {}).items()}

        return cls(tuple(e.get("engine") or ()), bool(e.get("final")),
                   counts(e.get("engine_counts")), counts(e.get("hook_counts")),
                   counts(e["not_seen"]) if e.get("not_seen") is not None else None,
                   int(e.get("steps_after") or 0))

    def as_dict(self) -> dict[str, Any]:
        return {"engine": list(self.engine), "final": self.final,
                "engine_counts": dict(self.engine_counts), "hook_counts": dict(self.hook_counts),
                "not_seen": dict(self.not_seen) if self.not_seen is not None else None,
                "steps_after": self.steps_after}


@dataclass(frozen=True, slots=True)
class Benchmark:
    """One benchmark tool's figures (throughput, interactivity) with its configuration."""

    source: str
    metrics: Mapping[str, Any]
    config: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Section:
    """One run's report section, typed; ``as_dict()`` is its ``report --json`` form."""

    run: schema.RunRecord | None = None
    totals: Totals = field(default_factory=Totals)
    windows: tuple[Window, ...] = ()
    sampling_truth: tuple[Truth, ...] = ()
    fallbacks: Mapping[str, int] = field(default_factory=dict)
    latency: Mapping[str, Percentiles] = field(default_factory=dict)
    phases: Mapping[str, Percentiles] = field(default_factory=dict)
    eval_rates: Mapping[str, float | None] = field(default_factory=dict)
    #: the eval rates of the run's target-only reference (None: no reference)
    eval_reference_rates: Mapping[str, float | None] | None = None
    #: the eval gate's verdict: "pass", "fail", "inconclusive" (too little data to fail), or
    #: None when nothing was checked
    gate: str | None = None
    benchmarks: tuple[Benchmark, ...] = ()
    anomalies: tuple[Anomaly, ...] = ()
    gate_text: str = "N/A"  #: e.g. "INCONCLUSIVE (need ~12 more positions): sampling truth (...)"
    #: the gate's checks (check, state, value, need, reason, ...)
    gate_checks: tuple[GateCheck, ...] = ()
    #: the greedy outputs against target-only decoding, token by token (``diverge``'s summary)
    eval_divergence: Mapping[str, Any] | None = None
    #: "measured", "forced" (acceptance is a setting: a speed-only run) or "lossy"
    #: (verification not per-token by configuration); ``verification_why`` says why
    verification: str = "measured"
    verification_why: str | None = None
    #: a ``specscope probe`` trace's verdict (None: not a probe's trace)
    probe: ProbeSummary | None = None
    node: str = ""  #: the node of a run's share on one node ("": the run, pooled across nodes)
    #: requests failing sampling truth on their own (each its evidence: request_id, rates, p)
    requests_flagged: tuple[FlaggedRequest, ...] = ()
    draft_health: DraftHealth = field(default_factory=DraftHealth)
    engine_gauges: Mapping[str, float] = field(default_factory=dict)  #: mean of each gauge
    #: each recording process's latest accounting (``schema.latest_health``)
    hooks: tuple[schema.HookHealthRecord, ...] = ()
    #: what the engine counted against what the hooks saw (``views.engine_seen``); None: no counts
    engine_counts: EngineSeen | None = None

    def as_dict(self) -> dict[str, Any]:
        """The section as ``report --json`` writes it (shared: do not change it)."""
        out: dict[str, Any] = {
            "run": codec.to_dict(self.run) if self.run else None,
            #: "measured", "forced" (acceptance is a setting: a speed-only run) or "lossy"
            #: (verification not per-token by configuration), and why (collector/configured.py)
            "verification": {"kind": self.verification, "why": self.verification_why},
            "totals": self.totals.as_dict(),
            "windows": [w.as_dict() for w in self.windows],
            "sampling_truth": [x.as_dict() for x in self.sampling_truth],
            "requests_flagged": [r.as_dict() for r in self.requests_flagged],
            "fallbacks": dict(self.fallbacks),
            "draft_health": self.draft_health.as_dict(),
            "latency": {k: v.as_dict() for k, v in self.latency.items()},
            "phases": {k: v.as_dict() for k, v in self.phases.items()},
            "eval": {"rates": dict(self.eval_rates),
                     "reference_rates": (dict(self.eval_reference_rates)
                                         if self.eval_reference_rates is not None else None),
                     "gate": {"verdict": self.gate,
                              "checks": [c.as_dict() for c in self.gate_checks]},
                     "divergence": (dict(self.eval_divergence)
                                    if self.eval_divergence is not None else None)},
            "engine_gauges": dict(self.engine_gauges),
            "benchmarks": [{"source": b.source, "metrics": dict(b.metrics),
                            "config": dict(b.config)} for b in self.benchmarks],
            "anomalies": [a.as_dict() for a in self.anomalies],
            "hooks": [codec.to_dict(h) for h in self.hooks],
        }
        if self.probe is not None:
            out["probe"] = self.probe.as_dict()
        out["engine_counts"] = self.engine_counts.as_dict() if self.engine_counts else None
        if self.node:
            out["node"] = self.node
        return out

    def with_node(self, node: str) -> Section:
        """This section as the share of one node."""
        return replace(self, node=node)

    @classmethod
    def from_dict(cls, sec: Mapping[str, Any]) -> Section:
        """The typed form of a section's JSON form (``report --json``'s ``runs``); keys a newer
        writer added are ignored, keys an older one lacked take their defaults."""
        t = dict(sec.get("totals") or {})
        t["accept_length_histogram"] = {int(k): n for k, n
                                        in (t.get("accept_length_histogram") or {}).items()}
        ev = sec.get("eval") or {}
        gate = ev.get("gate") or {}
        ver = sec.get("verification") or {}
        return cls(
            run=_run(sec.get("run")),
            totals=_make(Totals, t),
            windows=tuple(_make(Window, w) for w in sec.get("windows") or ()),
            sampling_truth=tuple(_truth(x) for x in sec.get("sampling_truth") or ()),
            fallbacks=dict(sec.get("fallbacks") or {}),
            latency={k: _make(Percentiles, v) for k, v in (sec.get("latency") or {}).items()},
            phases={k: _make(Percentiles, v) for k, v in (sec.get("phases") or {}).items()},
            eval_rates=dict(ev.get("rates") or {}),
            eval_reference_rates=(dict(ev["reference_rates"]) if ev.get("reference_rates")
                                  is not None else None),
            gate=gate.get("verdict"),
            gate_text=gate_text(gate),
            gate_checks=tuple(GateCheck.from_dict(c) for c in gate.get("checks") or ()),
            eval_divergence=ev.get("divergence"),
            verification=ver.get("kind") or "measured",
            verification_why=ver.get("why"),
            benchmarks=tuple(Benchmark(b["source"], dict(b["metrics"]), dict(b["config"]))
                             for b in sec.get("benchmarks") or ()),
            anomalies=tuple(Anomaly(a["kind"], a["severity"], a["message"],
                                    a.get("evidence") or {}, a.get("run_id") or "",
                                    a.get("t_ns") or 0, a.get("node") or "")
                            for a in sec.get("anomalies") or ()),
            probe=ProbeSummary.from_dict(sec["probe"]) if sec.get("probe") else None,
            node=sec.get("node") or "",
            requests_flagged=tuple(FlaggedRequest.from_dict(e)
                                   for e in sec.get("requests_flagged") or ()),
            draft_health=_make(DraftHealth, {**(sec.get("draft_health") or {}),
                                             "histogram": tuple((sec.get("draft_health") or {})
                                                                .get("histogram") or ())}),
            engine_gauges=dict(sec.get("engine_gauges") or {}),
            hooks=tuple(codec.from_dict({"kind": "hook_health", **h})
                        for h in sec.get("hooks") or ()),
            engine_counts=(EngineSeen.from_dict(sec["engine_counts"])
                           if sec.get("engine_counts") else None),
        )


def _make(cls: type, data: Mapping[str, Any]) -> Any:
    """``cls`` from the keys it declares (a section may carry more, from a newer writer)."""
    names = {f.name for f in fields(cls)}
    kwargs = {k: v for k, v in data.items() if k in names}
    if "per_position_acceptance" in kwargs:
        kwargs["per_position_acceptance"] = tuple(kwargs["per_position_acceptance"] or ())
    return cls(**kwargs)


def _truth(t: Mapping[str, Any]) -> Truth:
    z = t.get("z")
    if isinstance(z, str):  # JSON has no infinity: the section writes "inf"/"-inf"
        z = math.inf if z == "inf" else -math.inf
    band, b99 = t.get("expected_band_95"), t.get("bounds_99")
    return Truth(t["mode_requested"], dict(t.get("modes_used") or {}), t.get("num_positions", 0),
                 t.get("observed_top1_rate"), t.get("expected_top1_rate"),
                 tuple(band) if band else None, z, t.get("state"), t.get("state_text"),
                 t.get("p_value"), (b99[0], b99[1]) if b99 else None, t.get("pit_mean"),
                 t.get("pit_positions"), t.get("accept_observed_rate"),
                 t.get("accept_expected_rate"), t.get("accept_trials"), t.get("resid_mean"),
                 t.get("resid_positions"), t.get("positions_needed"))


def _run(data: Mapping[str, Any] | None) -> schema.RunRecord | None:
    if not data:
        return None
    return codec.from_dict(data if "kind" in data else {"kind": "run", **data})
