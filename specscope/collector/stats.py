"""Mergeable aggregates of records: the collector's state. Never imports torch or dash.

``SpecStats.merge`` is associative with ``SpecStats()`` as identity, so per-rank, per-process and
per-window aggregates combine; each field declares how it merges (``_merge.by``: summed, per
position, joined, earliest, ...), and a field without a rule cannot merge. Rates are pooled
from counters (accepted / drafted), never averaged from ratios.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

from .. import sampling, schema
from . import busy as _busy
from ._merge import (by, by_whole, earliest, every, joined, keyed, latest, merged, method,
                     per_position, total)
from ._merge import per_position as _add_lists
from .counts import Acceptance, clamp
from .histogram import Histogram
from .slots import MAX_ROWS


def truth_key(mode: str, top_p: float = 1.0, top_k: int = 0) -> str:
    """The class a request's sampling-truth counters pool in: its requested mode, and for a
    sampled one the truncations it asked for ("speculative-sampling+top-p"). A fault that hits
    only the top-p requests (top-p "falling back to argmax") is then tested on their positions
    alone instead of being diluted among honest ones."""
    return truth_class(mode, sampling.code(1.0, top_p, top_k))


def truth_class(mode: str, code: int) -> str:
    """``truth_key`` from a sampling class's code (``specscope.sampling``)."""
    return mode if mode == schema.GREEDY else mode + sampling.suffix(code | sampling.SAMPLED)


def base_mode(key: str) -> str:
    """The requested mode of a truth class ("speculative-sampling+top-p" -> its mode)."""
    return key.split("+", 1)[0]


@dataclass
class TruthStats:
    """Sampling-truth counters for one (requested mode): see VerifyEntry."""

    num_verified: int = by(total, default=0)
    num_top1: int = by(total, default=0)
    expected_top1: float = by(total, default=0.0)
    var_top1: float = by(total, default=0.0)
    #: the whole-distribution test (``specscope.pit``): positions it covers (entries that carry
    #: it), the sum of their PITs and of their variance bounds
    pit_positions: int = by(total, default=0)
    pit_sum: float = by(total, default=0.0)
    pit_var: float = by(total, default=0.0)
    #: the acceptance rule: draft positions verify tested (where entries carry it), how many
    #: it accepted, and the sum of the probabilities an honest verify accepts them with and of
    #: their variances (``hooks/stats.acceptance_columns``)
    accept_trials: int = by(total, default=0)
    accept_hits: int = by(total, default=0)
    accept_expected: float = by(total, default=0.0)
    accept_var: float = by(total, default=0.0)
    #: verified positions committed outside the requested truncation (``hooks/stats``)
    num_outside: int = by(total, default=0)
    #: the residual rule (``hooks/stats.residual_columns``): rejected drafts it read, the sum
    #: of the PITs of the tokens committed in their place and of their variance bounds
    resid_positions: int = by(total, default=0)
    resid_sum: float = by(total, default=0.0)
    resid_var: float = by(total, default=0.0)
    #: the sharpness test (``specscope.sharp``): positions it read (where entries carry it)
    #: and, per alternative temperature on ``sharp.GRID``, the sum of the log likelihood ratios
    sharp_positions: int = by(total, default=0)
    sharp_llr: list[float] = by(per_position, default_factory=list)

    def merge(self, other: "TruthStats") -> "TruthStats":
        return merged(self, other)

    @property
    def observed_rate(self) -> float | None:
        return self.num_top1 / self.num_verified if self.num_verified else None

    @property
    def expected_rate(self) -> float | None:
        return self.expected_top1 / self.num_verified if self.num_verified else None

    @property
    def z(self) -> float | None:
        """(observed - expected top-1 count) / sd; +inf when the expectation has no variance."""
        if not self.num_verified:
            return None
        excess = self.num_top1 - self.expected_top1
        if self.var_top1 <= 1e-12:
            return 0.0 if abs(excess) < 0.5 else math.copysign(math.inf, excess)
        return excess / math.sqrt(self.var_top1)


#: sources whose reported figures are totals since the engine started (vLLM V0's "Draft
#: acceptance rate" and "System efficiency"): the latest value is the engine's own figure
CUMULATIVE_SOURCES = frozenset({"vllm-v0"})


#: greedy mismatches a SpecStats keeps by margin (every one counts in ``num_mismatches``)
MAX_MISMATCHES = 256


def _widest(a: list[tuple], b: list[tuple]) -> list[tuple]:
    """Two lists of mismatches as one, the ``MAX_MISMATCHES`` widest margins first."""
    if not b:
        return a
    out = sorted(a + b, key=lambda m: (-m[0], m[1:]))
    return out[:MAX_MISMATCHES]


def _later(a: tuple[int, float] | None, b: tuple[int, float] | None) -> tuple[int, float] | None:
    """The later of two (t_ns, value) figures (b on a tie: it was read after a)."""
    if a is None or (b is not None and b[0] >= a[0]):
        return b
    return a


def _busy_union(a: tuple, b: tuple) -> tuple:
    return _busy.union(a + b)


# the draft depth over time: b's steps follow a's (totals and windows fold batches in order)
def _joined_off(a: "SpecStats", b: "SpecStats") -> bool:
    """a ended with speculation off and b starts off: one off period, not two."""
    return a.last_depth == 0 and b.first_depth == 0


def _off_periods(a: "SpecStats", b: "SpecStats") -> int:
    return a.off_periods + b.off_periods - _joined_off(a, b)


def _first(name: str):
    def rule(a: "SpecStats", b: "SpecStats") -> Any:
        """a's first depth (or its time), else b's."""
        return getattr(a if a.first_depth is not None else b, name)
    return rule


def _latest(name: str):
    def rule(a: "SpecStats", b: "SpecStats") -> Any:
        """b's latest depth (or its time), else a's."""
        return getattr(b if b.last_depth is not None else a, name)
    return rule


def _off_since(a: "SpecStats", b: "SpecStats") -> int | None:
    """Where the latest off period started: a's where b only continued it."""
    if b.last_depth is None:
        return a.off_since_ns
    if _joined_off(a, b) and b.off_since_ns == b.first_depth_ns:
        return a.off_since_ns
    return b.off_since_ns


def token_times(r: schema.RequestRecord) -> list[tuple[int, int]]:
    """(time, tokens) of a request's output as it was emitted: its chunks, else all of its
    tokens at its finish; a target-only run's committed tokens, one decode step each."""
    if r.chunk_times_ns:
        sizes = list(r.chunk_num_tokens) or [1] * len(r.chunk_times_ns)
        return [(t, max(0, n)) for t, n in zip(r.chunk_times_ns, sizes) if t]
    return [(r.t_finish_ns, r.num_output_tokens)] if r.t_finish_ns and r.num_output_tokens else []


@dataclass
class SpecStats:
    """Cumulative counters of verify steps, requests, phases, fallbacks and evals."""

    num_steps: int = by(total, default=0)  #: verify-step records
    num_drafts: int = by(total, default=0)  #: request-steps that drafted at least one token
    draft_tokens: int = by(total, default=0)  #: drafted positions (chain length / tree depth), summed
    draft_tokens_scored: int = by(total, default=0)  #: draft tokens verified (tree nodes), summed
    accepted_tokens: int = by(total, default=0)  #: accepted draft tokens, bonus excluded
    #: accepted tokens of the request-steps counted in num_drafts (imported counters may give
    #: tokens without the number of drafts; acceptance length uses only complete counts)
    accepted_with_drafts: int = by(total, default=0)
    drafted_per_pos: list[int] = by(per_position, default_factory=list)
    accepted_per_pos: list[int] = by(per_position, default_factory=list)
    #: draft tokens and accepted ones by batch row (a request's place in its verify step, the
    #: first ``slots.MAX_ROWS``; later rows pool into the last): one row at zero (``slots.py``)
    row_draft_tokens: list[int] = by(per_position, default_factory=list)
    row_accepted: list[int] = by(per_position, default_factory=list)
    accept_len_hist: Counter = by(total, default_factory=Counter)  #: accepted + 1 (bonus) -> count
    truth: dict[str, TruthStats] = by(keyed(method), default_factory=dict)  #: by requested mode
    modes: Counter = by(total, default_factory=Counter)  #: (requested, used) -> request-steps
    draft_hist: list[int] = by(per_position, default_factory=lambda: [0] * schema.DRAFT_HIST_BINS)
    fallbacks: Counter = by(total, default_factory=Counter)  #: reason -> count
    #: greedy requests' committed tokens that were not their position's argmax (MismatchRecord),
    #: the MAX_MISMATCHES widest by margin: (margin nats, request id, step, position, rank)
    mismatches: list[tuple] = by(_widest, default_factory=list)
    num_mismatches: int = by(total, default=0)  #: mismatching request-steps seen, all of them
    #: impossible entries (accepted > drafted, negatives) clamped
    num_clamped: int = by(total, default=0)
    # latency samples, seconds
    ttft_s: list[float] = by(joined, default_factory=list)
    tpot_s: list[float] = by(joined, default_factory=list)
    itl_chunk_s: list[float] = by(joined, default_factory=list)
    itl_token_s: list[float] = by(joined, default_factory=list)
    e2e_s: list[float] = by(joined, default_factory=list)
    num_requests: int = by(total, default=0)
    output_tokens: int = by(total, default=0)
    t_first_ns: int | None = by(earliest, default=None)
    t_last_ns: int | None = by(latest, default=None)
    #: disjoint (start, end) ns with a request in flight (collector/busy.py): the run's busy time
    busy: tuple[tuple[int, int], ...] = by(_busy_union, default=())
    phase_ns: dict[str, list[int]] = by(keyed(joined, list), default_factory=dict)
    # evals: name -> [hits, applicable]
    evals: dict[str, list[int]] = by(keyed(per_position, list), default_factory=dict)
    #: bounded distributions (seconds) for exporters: ttft_s, tpot_s, itl_chunk_s, itl_token_s,
    #: e2e_s and phase:<name>
    hists: dict[str, Histogram] = by(keyed(method), default_factory=dict)
    #: keep raw latency samples for exact percentiles (reports); a long-running collector
    #: keeps only the histograms
    keep_samples: bool = by(every, default=True)
    #: records that gave draft/accepted counts without verify steps (imported counters); with
    #: ``num_steps`` it says whether a count of 0 is measured or merely unknown
    num_counted: int = by(total, default=0)
    #: sources that report only a mean acceptance length: the sum of the reported values times
    #: their weights (``reported_weight``, else 1) and the sum of the weights
    reported_al_sum: float = by(total, default=0.0)
    reported_al_n: float = by(total, default=0)
    #: drafts / drafted tokens a source gave without the accepted count (shown, never in a rate)
    drafts_unmatched: int = by(total, default=0)
    #: intervals that gave drafted and accepted tokens but not their number of drafts (a log
    #: whose draft depth varied): the pooled drafts and acceptance length are then unknown
    drafts_unknown: int = by(total, default=0)
    draft_tokens_unmatched: int = by(total, default=0)
    #: sources that report an acceptance rate of their own (SGLang gauges, V0, benchmarks)
    reported_rate_sum: float = by(total, default=0.0)
    reported_rate_n: float = by(total, default=0)
    #: a cumulative source's (CUMULATIVE_SOURCES) latest reported figures, (t_ns, value): its
    #: own total since the engine started, never averaged with its earlier values
    reported_al_last: tuple[int, float] | None = by(_later, default=None)
    reported_rate_last: tuple[int, float] | None = by(_later, default=None)
    #: engine gauges (SampleRecord): name -> [sum, count]
    gauges: dict[str, list[float]] = by(keyed(per_position, list), default_factory=dict)
    benchmarks: list[Any] = by(joined, default_factory=list)
    #: draft depth per step (a speculation policy moves it): k -> steps (k = 0: speculation
    #: off); steps that carried a reason; entries into k = 0; the first and latest k and times
    depth_steps: Counter = by(total, default_factory=Counter)
    depth_changes: int = by(total, default=0)
    off_periods: int = by_whole(_off_periods, default=0)
    first_depth: int | None = by_whole(_first("first_depth"), default=None)
    first_depth_ns: int | None = by_whole(_first("first_depth_ns"), default=None)
    last_depth: int | None = by_whole(_latest("last_depth"), default=None)
    last_depth_ns: int | None = by_whole(_latest("last_depth_ns"), default=None)
    #: start of the current off period (latest k is 0)
    off_since_ns: int | None = by_whole(_off_since, default=None)
    #: request-steps that drafted nothing (speculation off): one token each, no verify
    undrafted_request_steps: int = by(total, default=0)

    # ------------------------------------------------------------------ observe
    def observe(self, record: Any) -> None:
        """Fold one record into the counters."""
        if isinstance(record, schema.VerifyStepRecord):
            self._observe_verify(record)
        elif isinstance(record, schema.RequestRecord):
            self._observe_request(record)
        elif isinstance(record, schema.PhaseRecord):
            self._hist(f"phase:{record.phase}").observe(record.duration_ns / 1e9)
            if self.keep_samples:
                self.phase_ns.setdefault(record.phase, []).append(record.duration_ns)
        elif isinstance(record, schema.FallbackRecord):
            self.fallbacks[record.reason] += max(0, record.count)
        elif isinstance(record, schema.MismatchRecord):
            self.num_mismatches += 1
            self.mismatches = _widest(self.mismatches, [(
                float(record.margin), record.request_id, record.step, record.position, record.rank)])
        elif isinstance(record, schema.SpecCountsRecord):
            self._observe_counts(record)
        elif isinstance(record, schema.SampleRecord):
            self._touch(record.t_ns) if record.t_ns else None
            for name, value in record.values.items():
                if value is not None and math.isfinite(value):
                    acc = self.gauges.setdefault(name, [0.0, 0])
                    acc[0] += value
                    acc[1] += 1
        elif isinstance(record, schema.BenchmarkRecord):
            self.benchmarks.append(record)
        elif isinstance(record, schema.EvalRecord):
            for name in ("exact_match", "repetition_loop", "invalid", "correct"):
                value = getattr(record, name)
                if value is not None:
                    hits = self.evals.setdefault(name, [0, 0])
                    hits[0] += bool(value)
                    hits[1] += 1

    def observe_depths(self, depths: list[int], times: list[int], reasons: int = 0) -> None:
        """Steps in time order: the k each ran with and its time; ``reasons``: how many of them
        carried a reason. An off period that starts a batch is counted (``merge`` takes it back
        where the batch before ended off)."""
        self.depth_changes += reasons
        prev = self.last_depth
        for k, t in zip(depths, times):
            self.depth_steps[k] += 1
            if k == 0 and prev != 0:
                self.off_periods += 1
                self.off_since_ns = t
            prev = k
        if depths:
            if self.first_depth is None:
                self.first_depth, self.first_depth_ns = depths[0], times[0]
            self.last_depth, self.last_depth_ns = depths[-1], times[-1]
            if self.last_depth:
                self.off_since_ns = None

    def observe_all(self, records: Iterable[schema.Record]) -> "SpecStats":
        for r in records:
            self.observe(r)
        return self

    def _touch(self, t_ns: int) -> None:
        self.t_first_ns = t_ns if self.t_first_ns is None else min(self.t_first_ns, t_ns)
        self.t_last_ns = t_ns if self.t_last_ns is None else max(self.t_last_ns, t_ns)

    def _observe_counts(self, r: schema.SpecCountsRecord) -> None:
        if r.t_ns:
            self._touch(r.t_ns)
        cumulative = r.source in CUMULATIVE_SOURCES
        w = r.reported_weight if r.reported_weight is not None and math.isfinite(r.reported_weight) \
            and r.reported_weight >= 0 else 1.0
        if r.reported_mean_acceptance_length is not None and math.isfinite(r.reported_mean_acceptance_length):
            if cumulative:
                self.reported_al_last = _later(self.reported_al_last,
                                               (r.t_ns, r.reported_mean_acceptance_length))
            else:
                self.reported_al_sum += r.reported_mean_acceptance_length * w
                self.reported_al_n += w
        if r.reported_acceptance_rate is not None and math.isfinite(r.reported_acceptance_rate):
            if cumulative:
                self.reported_rate_last = _later(self.reported_rate_last,
                                                 (r.t_ns, r.reported_acceptance_rate))
            else:
                self.reported_rate_sum += r.reported_acceptance_rate * w
                self.reported_rate_n += w
        if r.num_accepted is None and (r.num_drafts or r.num_draft_tokens):
            # drafts and drafted tokens without the accepted count (a vLLM page missing its
            # accepted counter): they are known and shown, and enter no rate or length
            self.drafts_unmatched += max(0, r.num_drafts or 0)
            self.draft_tokens_unmatched += max(0, r.num_draft_tokens or 0)
        if r.num_draft_tokens is None and r.num_accepted is not None and r.num_drafts:
            # steps and accepted tokens without the drafted count (Spec-Bench answers, some
            # per-request files): acceptance length is known, the acceptance rate is not
            self.num_drafts += r.num_drafts
            self.accepted_with_drafts += max(0, r.num_accepted)
        if r.num_draft_tokens is not None and r.num_accepted is not None:
            self.num_counted += 1
            if r.num_drafts is None and r.num_draft_tokens:
                self.drafts_unknown += 1
            drafted, accepted = r.num_draft_tokens, r.num_accepted
            if drafted < 0 or accepted < 0 or accepted > drafted:
                self.num_clamped += 1
                drafted, accepted, _ = clamp(drafted, accepted)
            self.draft_tokens += drafted
            self.accepted_tokens += accepted
            if r.num_drafts is not None and r.num_drafts > 0:
                self.num_drafts += r.num_drafts
                self.accepted_with_drafts += accepted
                k = len(r.accepted_per_pos)
                if k:
                    # the drafts that reached each position where the source counts them (the
                    # depth varied), else every draft reached every position
                    per_drafted = ([max(0, min(d, r.num_drafts)) for d in r.drafted_per_pos]
                                   if len(r.drafted_per_pos) == k else [r.num_drafts] * k)
                    self.drafted_per_pos = _add_lists(self.drafted_per_pos, per_drafted)
                    accepted_pp = [max(0, min(a, d)) for a, d in zip(r.accepted_per_pos, per_drafted)]
                    self.accepted_per_pos = _add_lists(self.accepted_per_pos, accepted_pp)
                    self.accepted_per_pos += [0] * (len(self.drafted_per_pos) - len(self.accepted_per_pos))

    def _observe_verify(self, r: schema.VerifyStepRecord) -> None:
        self.num_steps += 1
        self._touch(r.t_ns)
        if r.draft_depth is not None:
            self.observe_depths([r.draft_depth], [r.t_ns], int(bool(r.depth_reason)))
        for row, e in enumerate(r.entries):
            drafted, accepted = e.num_drafted, e.num_accepted
            if drafted < 0 or accepted < 0 or accepted > drafted:
                self.num_clamped += 1
                drafted, accepted, _ = clamp(drafted, accepted)
            self.modes[(e.mode_requested, e.mode_used)] += 1
            if drafted == 0:
                self.undrafted_request_steps += 1
            if drafted > 0:
                at = [0] * min(row, MAX_ROWS - 1)  # (its batch row's counts)
                self.row_draft_tokens = _add_lists(self.row_draft_tokens, at + [drafted])
                self.row_accepted = _add_lists(self.row_accepted, at + [accepted])
                self.num_drafts += 1
                self.draft_tokens += drafted
                self.draft_tokens_scored += max(drafted, e.num_draft_tokens)
                self.accepted_tokens += accepted
                self.accepted_with_drafts += accepted
                self.accept_len_hist[accepted + 1] += 1
                if len(self.drafted_per_pos) < drafted:
                    pad = drafted - len(self.drafted_per_pos)
                    self.drafted_per_pos.extend([0] * pad)
                    self.accepted_per_pos.extend([0] * pad)
                for p in range(drafted):
                    self.drafted_per_pos[p] += 1
                for p in range(accepted):
                    self.accepted_per_pos[p] += 1
            if e.num_verified:
                t = self.truth.setdefault(truth_key(e.mode_requested, e.top_p, e.top_k), TruthStats())
                t.num_verified += e.num_verified
                t.num_top1 += e.num_top1
                t.expected_top1 += e.expected_top1
                t.var_top1 += e.var_top1
                if e.pit_sum is not None and e.pit_var is not None:
                    t.pit_positions += e.num_verified
                    t.pit_sum += e.pit_sum
                    t.pit_var += e.pit_var
                if e.accept_expected is not None and e.accept_var is not None:
                    t.accept_trials += min(e.num_accepted + 1, e.num_drafted)
                    t.accept_hits += e.num_accepted
                    t.accept_expected += e.accept_expected
                    t.accept_var += e.accept_var
                if e.num_outside:
                    t.num_outside += int(e.num_outside)
                if e.resid_pit is not None and e.resid_var is not None:
                    t.resid_positions += 1
                    t.resid_sum += e.resid_pit
                    t.resid_var += e.resid_var
                if e.sharp_positions and e.sharp_llr is not None:
                    t.sharp_positions += e.sharp_positions
                    t.sharp_llr = _add_lists(t.sharp_llr, list(e.sharp_llr))
            if e.draft_top1_hist:
                self.draft_hist = _add_lists(self.draft_hist, list(e.draft_top1_hist))

    def _hist(self, name: str) -> Histogram:
        h = self.hists.get(name)
        if h is None:
            h = self.hists[name] = Histogram()
        return h

    def _sample(self, name: str, value: float, n: int = 1) -> None:
        self._hist(name).observe(value, n)
        if self.keep_samples:
            getattr(self, name).extend([value] * n)

    def _observe_request(self, r: schema.RequestRecord) -> None:
        self.num_requests += 1
        self.output_tokens += max(0, r.num_output_tokens)
        if r.t_finish_ns:
            self._touch(r.t_finish_ns)
        span = _busy.request_interval(r)
        if span:
            self.busy = _busy.add(self.busy, span)
        for name in ("ttft_s", "e2e_s", "tpot_s"):
            value = getattr(r, name)
            if value is not None:
                self._sample(name, value)
        times, sizes = r.chunk_times_ns, r.chunk_num_tokens
        for i in range(1, len(times)):
            gap = (times[i] - times[i - 1]) / 1e9
            self._sample("itl_chunk_s", gap)
            n = sizes[i] if i < len(sizes) and sizes[i] > 0 else 1
            self._sample("itl_token_s", gap / n, n)

    @property
    def counts_known(self) -> bool:
        """Whether any source gave draft/accepted counts (else they are unknown, not 0)."""
        return bool(self.num_steps or self.num_counted or self.draft_tokens or self.accepted_tokens)

    # ------------------------------------------------------------------ merge
    def merge(self, other: "SpecStats") -> "SpecStats":
        """A new SpecStats holding both, every field by the rule it declares (associative;
        SpecStats() is the identity; ``other`` follows ``self`` in time)."""
        return merged(self, other)

    # ------------------------------------------------------------------ figures
    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted draft tokens, pooled over all request-steps."""
        return Acceptance(drafted=self.draft_tokens, accepted=self.accepted_tokens).rate

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens committed per request-step, INCLUDING the bonus token: (accepted + drafts) / drafts.
        None where some interval's drafts are unknown (never a figure over part of the run)."""
        return Acceptance(steps=None if self.drafts_unknown else self.num_drafts,
                          accepted=self.accepted_with_drafts).length

    @property
    def per_position_acceptance(self) -> list[float | None]:
        """Share of request-steps that drafted position i whose token i was accepted."""
        return Acceptance(drafted_per_pos=self.drafted_per_pos,
                          accepted_per_pos=self.accepted_per_pos).per_position

    @property
    def mean_draft_depth(self) -> float | None:
        """Mean k over the steps that gave one, off steps (k = 0) included."""
        n = sum(self.depth_steps.values())
        return sum(k * c for k, c in self.depth_steps.items()) / n if n else None

    def eval_rate(self, name: str) -> float | None:
        hits, n = self.evals.get(name, [0, 0])
        return hits / n if n else None
