"""The record schema: the one contract between hooks, collector, exporters and dashboard.

Stdlib only. Records are frozen, slotted, keyword-only dataclasses of plain values (no tensors).
Times are integer nanoseconds; units change only at the edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Union

#: Written into every trace file; readers refuse any version not in READABLE_VERSIONS.
SCHEMA_VERSION = 11
#: 2 added spec_counts, sample and benchmark records; 3 added per-request speculative figures
#: and categories on request records, and the draft depth each verify step used; 4 added the
#: weight of a source's reported figures on spec_counts records (``reported_weight``); 5 added
#: the drafts that reached each position on spec_counts records (``drafted_per_pos``) and each
#: output token's top-2 logit margin and second choice on request records; 6 added mismatch
#: records (a greedy request's committed token that is not its position's argmax, with the margin);
#: 7 added the node (host) a record's process ran on (``node``, "" where unknown); 8 named each
#: count by what it means, one spelling on every record (``io.codec.RENAMED``: older traces still read);
#: 9 added the whole-distribution test's sums on verify entries (``pit_sum``, ``pit_var``) and
#: the acceptance rule's (``accept_expected``, ``accept_var``), and the positions committed
#: outside the truncation (``num_outside``); 10 added the sharpness test's sums
#: (``sharp_positions``, ``sharp_llr``); 11 the residual rule's at a rejected draft
#: (``resid_pit``, ``resid_var``).
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
#: what the ``node`` field means, said once for every record that has one
NODE_DOC = "the node (host) the recording process ran on: $SPECSCOPE_NODE, else the hostname"


# Sampling modes. "Requested" is what the request and the engine's configuration call for;
# "used" is what the verify code path says it ran. The sampling-truth statistics check the
# latter independently of what the engine says.
GREEDY = "greedy"
TARGET_TEMPERATURE = "target-temperature"  # commit y ~ p_target, accept a draft iff it equals y
SPECULATIVE_SAMPLING = "speculative-sampling"  # accept with min(1, p/q), resample the residual
FALLBACK_ARGMAX = "fallback-argmax"  # sampling asked for, argmax committed (a fallback)
SAMPLING_MODES = (GREEDY, TARGET_TEMPERATURE, SPECULATIVE_SAMPLING, FALLBACK_ARGMAX)

#: Bins of the draft top-1 probability histogram: ten equal bins on [0, 1) plus one bin that
#: holds only the value exactly 1.0 (a draft whose probabilities were never computed lands there).
DRAFT_HIST_BINS = 11

#: The sharpness test's alternatives (``specscope.sharp``): c times the requested temperature,
#: below 1 sharper (toward the argmax), above 1 flatter. A verify entry's ``sharp_llr`` holds one
#: log likelihood ratio sum per value here, in this order.
SHARP_GRID = (0.5, 0.63, 0.8, 0.9, 1.11, 1.25, 1.6, 2.0)


class TraceError(ValueError):
    """A trace that cannot be read at all (wrong version, not a trace, wrong format)."""


@dataclass
class Problem:
    """A line or record that was skipped, with where it was."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """Metadata of one run: one engine configuration on one model, written first in a trace."""

    run_id: str
    config_id: str  #: stable id of the configuration (algorithm/steps/topk/draft tokens/...)
    algorithm: str  #: "eagle", "mtp", "draft-model", "none", ...
    num_steps: int  #: draft depth per verify step (0 = no speculation)
    topk: int  #: draft branching factor (1 = chain)
    #: tokens in one verify pass, root included: SGLang's ``speculative_num_draft_tokens``
    #: (num_steps + 1 for a chain); the only count here that includes the root
    num_verify_tokens: int
    backend: str  #: "cuda", "hip", "cpu"
    model: str
    draft_model: str = ""
    engine: str = ""  #: engine name, e.g. "specscope-reference", "vllm", "sglang"
    engine_version: str = ""
    engine_commit: str = ""
    verify_mode: str = ""  #: sampling algorithm configured for temperature > 0 requests
    fault: str = ""  #: a seeded fault, if any (reference decoder only)
    started_ns: int = 0  #: wall-clock start, ns since the epoch
    env_flags: Mapping[str, str] = field(default_factory=dict)
    host: Mapping[str, Any] = field(default_factory=dict)  #: CPU count, memory, platform (psutil)
    labels: Mapping[str, str] = field(default_factory=dict)
    node: str = ""  #: see NODE_DOC


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyEntry:
    """One request's part of one verify step.

    ``num_accepted`` counts accepted draft tokens and EXCLUDES the bonus token the target always
    commits; the acceptance length of the step is ``num_accepted + 1``. The same three names
    mean the same on every record: ``num_drafts`` request-steps that drafted, ``num_draft_tokens``
    draft tokens proposed (and scored by verify; never the root), ``num_accepted`` of those,
    accepted (never the bonus token).
    """

    request_id: str
    num_drafted: int  #: draft positions along a path (chain length / tree depth)
    num_draft_tokens: int  #: draft tokens proposed and scored by verify, root excluded (tree nodes; = num_drafted for chains)
    num_accepted: int  #: accepted draft tokens, bonus excluded
    accepted_per_pos: tuple[int, ...]  #: 1 where the draft token at that depth was accepted
    temperature: float
    top_p: float = 1.0
    top_k: int = 0  #: 0 = off
    mode_requested: str = GREEDY
    mode_used: str = GREEDY
    #: Sampling truth (present when the step was sampled for statistics): over the verified
    #: positions (accepted drafts plus the committed bonus/correction token), how many committed
    #: tokens equal the target argmax, the expected count under the requested sampling
    #: (sum of p_max) and its variance (sum of p_max * (1 - p_max)).
    num_verified: int = 0
    num_top1: int = 0
    expected_top1: float = 0.0
    var_top1: float = 0.0
    #: Counts of the draft's top-1 probability per drafted position, DRAFT_HIST_BINS bins.
    draft_top1_hist: tuple[int, ...] = ()
    #: The whole-distribution test over the same verified positions (``specscope.pit``): the
    #: sum of each committed token's mid-rank PIT (1/2 per position in expectation under honest
    #: sampling) and of its variance bound. None where not computed (older traces, or a source
    #: that gives the top-1 figures only).
    pit_sum: float | None = None
    pit_var: float | None = None
    #: The acceptance rule over the draft positions verify tested (the first ``num_accepted +
    #: 1``, at most ``num_drafted``): the sum of the probability an honest verify accepts each
    #: draft token, min(1, p / q), and of its variance. None where not computed (greedy rows,
    #: trees, a source that does not pass the draft tokens).
    accept_expected: float | None = None
    accept_var: float | None = None
    #: Verified positions whose committed token lies outside the requested truncation (top-k,
    #: top-p) by more than bfloat16's tie margin: impossible under honest sampling. None where
    #: not computed.
    num_outside: int | None = None
    #: The residual rule: where verify rejected a draft, the mid-rank PIT of the token it
    #: committed in the draft's place, in the residual max(p - q, 0) normalised (1/2 in
    #: expectation under honest verify), and its variance bound. None where the step rejected
    #: no draft, or the draft's distribution is unknown (a sampled draft without it).
    resid_pit: float | None = None
    resid_var: float | None = None
    #: The sharpness test (``specscope.sharp``) over the same verified positions: how many it
    #: read (the committed token among the position's most probable tokens), and for each
    #: alternative temperature on ``sharp.GRID`` (c times the requested one) the sum of the log
    #: likelihood ratios there, log p_c(x | S) - log p_1(x | S) (mean 0 or below under honest
    #: sampling). None where not computed (greedy rows, older traces).
    sharp_positions: int | None = None
    sharp_llr: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyStepRecord:
    """One verify step of one engine rank: the batch and each request's outcome."""

    run_id: str
    config_id: str
    rank: int
    step: int
    t_ns: int  #: host time the step was recorded, ns since the epoch
    batch_size: int
    entries: tuple[VerifyEntry, ...]
    #: draft depth k this step ran with (draft tokens proposed per request); None where the
    #: source does not say. Adaptive policies change it from step to step.
    draft_depth: int | None = None
    depth_reason: str = ""  #: why k changed at this step ("" = unchanged)
    node: str = ""  #: see NODE_DOC


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecord:
    """One finished request: its timeline and output, so TTFT, TPOT, ITL and E2E follow."""

    run_id: str
    rank: int
    request_id: str
    prompt_id: str = ""
    t_arrival_ns: int
    t_first_token_ns: int
    t_finish_ns: int
    num_prompt_tokens: int
    num_output_tokens: int
    #: Emission time of each streamed chunk; under speculation one chunk carries every token a
    #: verify step committed, so chunk_num_tokens may exceed 1.
    chunk_times_ns: tuple[int, ...] = ()
    chunk_num_tokens: tuple[int, ...] = ()
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    finish_reason: str = ""
    output_token_ids: tuple[int, ...] = ()
    output_text: str = ""
    category: str = ""  #: workload category ("math", "translation", "code", ...); "" = unknown
    #: The request's own speculative-decoding figures; None where the source does not give them.
    num_verify_steps: int | None = None  #: verify steps this request took part in
    num_draft_tokens: int | None = None  #: draft tokens proposed for it, over all its steps
    num_accepted: int | None = None  #: of those, accepted (bonus token excluded)
    #: steps by acceptance length (index = tokens committed in the step, bonus included)
    accept_len_hist: tuple[int, ...] = ()
    #: per output token, where the source records them (a target-only reference run): the
    #: target's top-1 minus top-2 logit (nats) and its second choice, for divergence analysis
    top2_margins: tuple[float, ...] = ()
    second_token_ids: tuple[int, ...] = ()

    # A first-token or finish time of 0 means the source did not give it (imported per-request
    # files often carry counts and no timeline); the figures below are then None, never 0.
    # Arrival is the clock's origin and may be 0 (a relative clock).
    @property
    def ttft_s(self) -> float | None:
        """Arrival to first token, seconds; None when the first-token time is unknown."""
        if not self.t_first_token_ns:
            return None
        return (self.t_first_token_ns - self.t_arrival_ns) / 1e9

    @property
    def e2e_s(self) -> float | None:
        """Arrival to last token, seconds; None when the finish time is unknown."""
        if not self.t_finish_ns:
            return None
        return (self.t_finish_ns - self.t_arrival_ns) / 1e9

    @property
    def tpot_s(self) -> float | None:
        """First to last token over the tokens after the first, seconds; None when unknown."""
        if not self.t_first_token_ns or not self.t_finish_ns or self.num_output_tokens < 2:
            return None
        return (self.t_finish_ns - self.t_first_token_ns) / 1e9 / (self.num_output_tokens - 1)

    @property
    def acceptance_length(self) -> float | None:
        """Tokens committed per verify step, bonus token included; None when unknown."""
        if not self.num_verify_steps or self.num_accepted is None:
            return None
        return (self.num_accepted + self.num_verify_steps) / self.num_verify_steps
    node: str = ""  #: see NODE_DOC


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseRecord:
    """One timed phase of one step (draft forward, target verify forward, sampling, ...)."""

    run_id: str
    rank: int
    step: int
    phase: str  #: "draft", "verify_forward", "verify_sample", "draft_extend", "prefill", ...
    device: str  #: "cpu", "cuda:0", ...
    t_start_ns: int  #: host time at phase start, ns since the epoch
    duration_ns: int
    clock: str = "perf_counter"  #: "perf_counter" (host) or "cuda_event" (device)
    node: str = ""  #: see NODE_DOC


@dataclass(frozen=True, slots=True, kw_only=True)
class FallbackRecord:
    """Verify did not run the mode a request asked for and fell back (e.g. top-p -> argmax)."""

    run_id: str
    rank: int
    step: int
    t_ns: int
    reason: str  #: e.g. "top_p_unsupported", "top_k_unsupported"
    request_id: str = ""
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    mode_requested: str = ""
    mode_used: str = FALLBACK_ARGMAX
    count: int = 1
    node: str = ""  #: see NODE_DOC


@dataclass(frozen=True, slots=True, kw_only=True)
class MismatchRecord:
    """A greedy request whose verify step committed a token that is not the target's argmax.

    Written by the hooks on statistics steps for each greedy request-step with a mismatch (its
    worst position); ``margin`` is the target's argmax logit minus the committed token's (nats,
    temperature 1, the raw logits). Within the dtype's tie margin it is a numerical tie; beyond
    it the target was firmly against the token: verify is not lossless.
    """

    run_id: str
    rank: int = 0
    step: int
    t_ns: int
    request_id: str
    position: int  #: index along the verified path (0 = the first draft position)
    margin: float  #: nats, > 0
    mode_requested: str = GREEDY
    num_mismatches: int = 1  #: mismatching positions of this request in this step (1 or more)
    node: str = ""  #: see NODE_DOC


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRecord:
    """Output-quality signals of one request (None where a signal does not apply)."""

    run_id: str
    request_id: str
    prompt_id: str = ""
    exact_match: bool | None = None  #: output equals target-only greedy output (greedy runs)
    repetition_loop: bool | None = False  #: n-gram repetition above threshold
    invalid: bool | None = None  #: output does not fit the prompt's expected answer format
    correct: bool | None = None  #: output matches the prompt's expected answer


@dataclass(frozen=True, slots=True, kw_only=True)
class AnomalyRecord:
    """A detector's finding, with the evidence that supports it."""

    run_id: str
    kind: str  #: "silent_greedy", "fallback", "draft_prob_collapse", ...
    severity: str  #: "warning" or "critical"
    message: str
    t_ns: int = 0
    evidence: Mapping[str, Any] = field(default_factory=dict)
    node: str = ""  #: see NODE_DOC


@dataclass(frozen=True, slots=True, kw_only=True)
class HookHealthRecord:
    """The recorder's own accounting: what it recorded, what it lost and why. Cumulative: a
    recording process writes one when it goes idle after recording (at most every
    ``HEALTH_EVERY_S`` while busy) and a last one (``final``) when it closes, so a process that
    was killed still left its state as of its last idle moment; the latest per
    (run_id, node, rank, pid) is the process's figure (``latest_health``)."""

    run_id: str
    rank: int
    num_recorded: int  #: verify steps recorded
    num_dropped_ring_full: int
    num_dropped_batch_too_large: int
    num_dropped_queue_full: int = 0  #: host records dropped because nobody drained
    num_hook_errors: int
    num_sink_errors: int
    disabled: bool
    node: str = ""  #: see NODE_DOC
    pid: int = 0  #: the recording process (0: not said; each such record stands alone)
    t_ns: int = 0  #: when written
    final: bool = False  #: written as the recorder closed; False: a snapshot while running


#: how often a busy recorder writes its cumulative HookHealthRecord (it also writes one each
#: time it goes idle, and a final one as it closes)
HEALTH_EVERY_S = 10.0


def latest_health(records: Iterable[Record]) -> list[HookHealthRecord]:
    """Each recording process's latest HookHealthRecord (records are cumulative), final over
    snapshot, in the order the processes first appear."""
    out: dict[tuple, HookHealthRecord] = {}
    for i, r in enumerate(records):
        if not isinstance(r, HookHealthRecord):
            continue
        key = (r.run_id, r.node, r.rank, r.pid) if r.pid else ("", i)
        old = out.get(key)
        if old is None or (r.final, r.t_ns, r.num_recorded) >= (old.final, old.t_ns, old.num_recorded):
            out[key] = r
    return list(out.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCountsRecord:
    """What the engine itself counted, read inside its process beside the hooks (vLLM: the
    figures its /metrics counters export, as its API server adds them up). Cumulative since the
    process began, written with each health snapshot; the latest per (run_id, node, pid) is the
    engine's figure. Never added to the run's totals: the report holds the verify steps the
    hooks recorded to it and names what they did not see (``collector.seen``)."""

    run_id: str
    engine: str
    num_drafts: int  #: request-steps that drafted
    num_draft_tokens: int  #: draft tokens proposed
    num_accepted: int  #: of those, accepted (bonus token excluded)
    accepted_per_pos: tuple[int, ...] = ()
    node: str = ""  #: see NODE_DOC
    pid: int = 0
    t_ns: int = 0  #: when read
    final: bool = False  #: written as the recorder closed


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecCountsRecord:
    """Speculative-decoding counters over an interval, as engines log or export them.

    Imported from logs, /metrics snapshots and benchmark results. Counts are None where the
    source does not give them; ``reported_*`` keep the source's own rounded figures.
    """

    run_id: str
    rank: int = 0
    t_ns: int  #: end of the interval, ns since the epoch (0 when the source has no time)
    interval_s: float | None = None
    num_drafts: int | None = None  #: request-steps that drafted
    num_draft_tokens: int | None = None  #: draft tokens proposed
    num_accepted: int | None = None  #: of those, accepted (bonus token excluded)
    accepted_per_pos: tuple[int, ...] = ()  #: accepted count per draft position
    reported_mean_acceptance_length: float | None = None  #: the source's figure (see its docs)
    reported_acceptance_rate: float | None = None  #: the source's figure, as a fraction
    #: what one reported figure averages over (SGLang's ``accept len``: the running requests
    #: of its line), so figures of several lines are weighted by it; None: one each
    reported_weight: float | None = None
    #: drafts that reached each draft position, where the source counts them (draft depth
    #: varies: n-gram and suffix drafts, per-batch-size k, a draft cut short by the tokens
    #: left); () = every draft reached every position of ``accepted_per_pos``
    drafted_per_pos: tuple[int, ...] = ()
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleRecord:
    """Engine gauges sampled at one time (throughput, running/waiting requests, KV usage)."""

    run_id: str
    rank: int = 0
    t_ns: int
    values: Mapping[str, float] = field(default_factory=dict)  #: name (with unit) -> value
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchmarkRecord:
    """A benchmark client's summary of a run: latency percentiles, throughput, eval scores.

    Metric names are canonical and carry their unit (``ttft_ms_p50``, ``output_tok_s``, ...);
    a figure the source does not give is absent, never invented.
    """

    run_id: str
    t_ns: int = 0
    source: str = ""  #: "vllm-bench", "sglang-bench", "aiperf", "inferencex", "guidellm", ...
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)


RECORD_TYPES: dict[str, type] = {
    "run": RunRecord,
    "verify": VerifyStepRecord,
    "request": RequestRecord,
    "phase": PhaseRecord,
    "fallback": FallbackRecord,
    "mismatch": MismatchRecord,
    "eval": EvalRecord,
    "anomaly": AnomalyRecord,
    "hook_health": HookHealthRecord,
    "spec_counts": SpecCountsRecord,
    "engine_counts": EngineCountsRecord,
    "sample": SampleRecord,
    "benchmark": BenchmarkRecord,
}
KIND_OF = {cls: kind for kind, cls in RECORD_TYPES.items()}
#: any record of the contract (what a trace holds)
Record = Union[RunRecord, VerifyStepRecord, RequestRecord, PhaseRecord, FallbackRecord,
               MismatchRecord, EvalRecord, AnomalyRecord, HookHealthRecord, SpecCountsRecord,
               EngineCountsRecord, SampleRecord, BenchmarkRecord]
#: a record's own times, in the order ``time_ns`` reads them; never a run's ``started_ns`` (an
#: engine's start, perhaps days before its records)
TIME_FIELDS = ("t_ns", "t_start_ns", "t_finish_ns", "t_arrival_ns")


def time_ns(record: Record | Mapping[str, Any], *, end: bool = False) -> int | None:
    """A record's own time: its ``t_ns``, else its start (a phase's ``t_start_ns``; with ``end``
    first its finish, a request's ``t_finish_ns``: the moment it was complete), else the other,
    else a request's arrival; None where it has none. Reads a record or a row (a dict) alike."""
    get = record.get if isinstance(record, dict) else (lambda f: getattr(record, f, None))
    for f in (("t_ns", "t_finish_ns", "t_start_ns", "t_arrival_ns") if end else TIME_FIELDS):
        v = get(f)
        if v:
            return int(v)
    return None


def node_of(record: Record, runs: Mapping[str, RunRecord]) -> str:
    """The node a record was recorded on: its own, else (a kind without one, as an eval) its
    run's in ``runs`` (run id -> run record), else ""."""
    own = getattr(record, "node", None)
    if own is not None:
        return own
    return getattr(runs.get(getattr(record, "run_id", "")), "node", "") or ""


def mode_for(temperature: float, configured: str) -> str:
    """The mode a request asks for: greedy at temperature 0, else the configured sampler."""
    return GREEDY if temperature <= 0.0 else configured


def default_node() -> str:
    """This process's node name: ``$SPECSCOPE_NODE`` where set, else the hostname."""
    import os
    import socket

    return os.environ.get("SPECSCOPE_NODE", "").strip() or socket.gethostname()
