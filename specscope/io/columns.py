"""Verify steps as columns: the form they take between the recorder, the wire and the collector.

Imports only numpy and the schema. One ``VerifyColumns`` holds N request-step entries of one
(run, config, rank) as arrays, so nothing on the way builds one Python object per entry. It is
the columnar twin of a run of ``VerifyStepRecord``s: ``to_records()`` rebuilds them exactly
(the per-position acceptance of a chain is the prefix its accepted count implies).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .. import schema
from .intervals import BATCHES

MODES = schema.SAMPLING_MODES
MODE_CODE = {m: i for i, m in enumerate(MODES)}

#: entry flags: which optional statistics the entry carries
HAS_TRUTH = 1
HAS_HIST = 2

SEP = "\x00"


def mode_coder(names: list[str]) -> Callable[[str], int]:
    """Code of a sampling-mode name in ``names``, appending the modes it has not seen (an
    engine may report a mode of its own)."""
    index = {m: i for i, m in enumerate(names)}

    def code(mode: str) -> int:
        i = index.get(mode)
        if i is None:
            i = index[mode] = len(names)
            names.append(mode)
        return i
    return code


class Strings:
    """N strings kept as one UTF-8 blob until somebody asks for them as Python objects."""

    __slots__ = ("blob", "n", "_list")

    def __init__(self, blob: bytes, n: int, values: list[str] | None = None) -> None:
        self.blob = blob
        self.n = n
        self._list = values

    @classmethod
    def of(cls, values: Sequence[str]) -> "Strings":
        values = values if isinstance(values, list) else list(values)
        try:
            joined = SEP.join(values)
        except TypeError:  # ids that are not strings (ints, ...)
            values = [str(v) for v in values]
            joined = SEP.join(values)
        if joined.count(SEP) != max(len(values) - 1, 0):  # an id holding the separator
            values = [v.replace(SEP, "\ufffd") for v in values]
            joined = SEP.join(values)
        return cls(joined.encode("utf-8"), len(values), values)

    def check(self) -> None:
        """Raise ValueError unless the blob holds exactly ``n`` strings (one scan of the bytes,
        no object per string; bytes that are not UTF-8 become U+FFFD when read)."""
        found = self.blob.count(b"\x00") + 1 if self.n else (0 if not self.blob else 1)
        if found != self.n:
            raise ValueError(f"{self.n} strings expected, {found} found")

    def tolist(self) -> list[str]:
        if self._list is None:
            self._list = self.blob.decode("utf-8", errors="replace").split(SEP) if self.n else []
            if len(self._list) != self.n:
                raise ValueError(f"{self.n} strings expected, {len(self._list)} found")
        return self._list

    def take(self, index: np.ndarray) -> "Strings":
        values = self.tolist()
        return Strings.of([values[i] for i in np.asarray(index).tolist()])

    def __len__(self) -> int:
        return self.n


@dataclass
class VerifyColumns:
    """N verify entries of one (run_id, config_id, rank); array fields are [N] unless noted.

    The first block is what aggregation needs. The detail block (``seq`` onwards) is present
    when the entries came from a recorder or a trace and lets ``to_records()`` rebuild the
    records; it is None where only aggregates are wanted.
    """

    run_id: str
    config_id: str
    rank: int
    num_steps: int  #: verify-step records these entries came from
    t_ns: np.ndarray  #: int64, the step's host time per entry
    num_drafted: np.ndarray  #: int64
    num_draft_tokens: np.ndarray  #: int64
    num_accepted: np.ndarray  #: int64, bonus excluded
    mode_requested: np.ndarray  #: int8, index into ``mode_names``
    mode_used: np.ndarray  #: int8
    #: sampling-truth statistics; all four None when no entry carries them
    num_verified: np.ndarray | None  #: int64
    num_top1: np.ndarray | None  #: int64
    expected_top1: np.ndarray | None  #: float64
    var_top1: np.ndarray | None  #: float64
    #: int64 [N, DRAFT_HIST_BINS] (zeros where not sampled); None when no entry carries one
    draft_hist: np.ndarray | None
    mode_names: tuple[str, ...] = MODES
    #: the whole-distribution test's sums (schema.VerifyEntry), float64, NaN where an entry
    #: carries none; both None when no entry does
    pit_sum: np.ndarray | None = None
    pit_var: np.ndarray | None = None
    #: the acceptance rule's sums (schema.VerifyEntry), as the PIT's
    accept_expected: np.ndarray | None = None
    accept_var: np.ndarray | None = None
    #: positions committed outside the truncation (float64 counts, NaN where none carried)
    num_outside: np.ndarray | None = None
    #: the residual rule's PIT at a rejected draft and its variance bound (schema.VerifyEntry),
    #: float64, NaN where an entry rejected none; both or neither
    resid_pit: np.ndarray | None = None
    resid_var: np.ndarray | None = None
    #: the sharpness test's (schema.VerifyEntry): positions read (float64, NaN where none
    #: carried) and float64 [N, len(schema.SHARP_GRID)] log-ratio sums; both or neither
    sharp_positions: np.ndarray | None = None
    sharp_llr: np.ndarray | None = None
    # ---- detail, for rebuilding records
    seq: np.ndarray | None = None  #: int64, which step record (0..num_steps-1) each entry is of
    step: np.ndarray | None = None  #: int64, the step number
    batch_size: np.ndarray | None = None  #: int64, the step's batch size
    draft_depth: np.ndarray | None = None  #: int64, k of the step (-1 = not given)
    request_ids: Strings | None = None
    temperature: np.ndarray | None = None  #: float64
    top_p: np.ndarray | None = None  #: float64
    top_k: np.ndarray | None = None  #: int64
    flags: np.ndarray | None = None  #: int8, HAS_TRUTH | HAS_HIST
    depth_reasons: dict[int, str] | None = None  #: seq -> why k changed at that step (sparse)
    #: entries per verify step, in order. When set, the step-level fields (STEP_ARRAYS) hold one
    #: value per step rather than per entry: the compact form the recorder and the wire use,
    #: expanded by ``per_entry()`` where a consumer needs entry-aligned arrays.
    step_sizes: np.ndarray | None = None
    node: str = ""  #: the node (host) the entries were recorded on (schema.NODE_DOC)

    def __len__(self) -> int:
        return int(self.num_drafted.shape[0])

    @property
    def has_detail(self) -> bool:
        return self.seq is not None and self.request_ids is not None

    def per_entry(self) -> "VerifyColumns":
        """These columns with every step-level field one value per entry."""
        if self.step_sizes is None:
            return self
        sizes = self.step_sizes
        expanded: dict[str, Any] = {name: np.repeat(getattr(self, name), sizes)
                                    for name in STEP_ARRAYS if getattr(self, name) is not None}
        return dataclasses.replace(self, step_sizes=None, **expanded)

    @classmethod
    def from_records(cls, records: Iterable[schema.VerifyStepRecord], *,
                     detail: bool = False) -> list["VerifyColumns"]:
        """Group verify-step records by (run, config, rank, node) into columns."""
        groups: dict[tuple, list] = {}
        steps: dict[tuple, int] = {}
        extra: dict[tuple, list] = {}
        reasons: dict[tuple, dict[int, str]] = {}
        zeros = (0,) * schema.DRAFT_HIST_BINS
        names = list(MODES)
        code = mode_coder(names)
        for r in records:
            key = (r.run_id, r.config_id, r.rank, r.node)
            rows = groups.setdefault(key, [])
            seq = steps.get(key, 0)
            steps[key] = seq + 1
            depth = -1 if r.draft_depth is None else r.draft_depth
            for e in r.entries:
                hist = e.draft_top1_hist if len(e.draft_top1_hist) == schema.DRAFT_HIST_BINS \
                    else zeros
                rows.append((r.t_ns, e.num_drafted, e.num_draft_tokens, e.num_accepted,
                             code(e.mode_requested), code(e.mode_used),
                             e.num_verified, e.num_top1, e.expected_top1, e.var_top1, hist,
                             seq, depth, e.top_p, e.top_k,
                             math.nan if e.pit_sum is None else e.pit_sum,
                             math.nan if e.pit_var is None else e.pit_var,
                             math.nan if e.accept_expected is None else e.accept_expected,
                             math.nan if e.accept_var is None else e.accept_var,
                             math.nan if e.num_outside is None else e.num_outside,
                             math.nan if e.sharp_positions is None or e.sharp_llr is None
                             else e.sharp_positions,
                             _NO_SHARP if e.sharp_llr is None or len(e.sharp_llr) != _G
                             else e.sharp_llr,
                             math.nan if e.resid_pit is None else e.resid_pit,
                             math.nan if e.resid_var is None else e.resid_var))
                if r.depth_reason and seq not in reasons.setdefault(key, {}):
                    reasons[key][seq] = r.depth_reason
                if detail:
                    flags = (HAS_TRUTH if e.num_verified else 0) | \
                        (HAS_HIST if len(e.draft_top1_hist) == schema.DRAFT_HIST_BINS else 0)
                    extra.setdefault(key, []).append(
                        (seq, r.step, r.batch_size, depth, e.request_id, e.temperature, e.top_p,
                         e.top_k, flags))
        out = []
        for key, rows in groups.items():
            cols = list(zip(*rows)) if rows else [()] * 24
            c = cls(
                run_id=key[0], config_id=key[1], rank=key[2], node=key[3], num_steps=steps[key],
                t_ns=np.asarray(cols[0], dtype=np.int64),
                num_drafted=np.asarray(cols[1], dtype=np.int64),
                num_draft_tokens=np.asarray(cols[2], dtype=np.int64),
                num_accepted=np.asarray(cols[3], dtype=np.int64),
                mode_requested=np.asarray(cols[4], dtype=np.int8),
                mode_used=np.asarray(cols[5], dtype=np.int8),
                num_verified=np.asarray(cols[6], dtype=np.int64),
                num_top1=np.asarray(cols[7], dtype=np.int64),
                expected_top1=np.asarray(cols[8], dtype=np.float64),
                var_top1=np.asarray(cols[9], dtype=np.float64),
                draft_hist=np.asarray(cols[10], dtype=np.int64).reshape(-1, schema.DRAFT_HIST_BINS),
                mode_names=tuple(names),
                # which step each entry is of and its k: aggregation counts steps by k
                seq=np.asarray(cols[11], dtype=np.int64), draft_depth=np.asarray(cols[12], dtype=np.int64),
                depth_reasons=reasons.get(key) or None,
                # the sampling-truth classes pool by top-p and top-k (collector's truth_key)
                top_p=np.asarray(cols[13], dtype=np.float64), top_k=np.asarray(cols[14], dtype=np.int64))
            pit_sum = np.asarray(cols[15], dtype=np.float64)
            if len(pit_sum) and not np.isnan(pit_sum).all():
                c.pit_sum, c.pit_var = pit_sum, np.asarray(cols[16], dtype=np.float64)
            accept = np.asarray(cols[17], dtype=np.float64)
            if len(accept) and not np.isnan(accept).all():
                c.accept_expected, c.accept_var = accept, np.asarray(cols[18], dtype=np.float64)
            outside = np.asarray(cols[19], dtype=np.float64)
            if len(outside) and not np.isnan(outside).all():
                c.num_outside = outside
            sharp_n = np.asarray(cols[20], dtype=np.float64)
            if len(sharp_n) and not np.isnan(sharp_n).all():
                c.sharp_positions = sharp_n
                c.sharp_llr = np.asarray(cols[21], dtype=np.float64).reshape(-1, _G)
            resid = np.asarray(cols[22], dtype=np.float64)
            if len(resid) and not np.isnan(resid).all():
                c.resid_pit, c.resid_var = resid, np.asarray(cols[23], dtype=np.float64)
            if detail:
                x = list(zip(*extra.get(key, []))) or [()] * 9
                c.step = np.asarray(x[1], dtype=np.int64)
                c.batch_size = np.asarray(x[2], dtype=np.int64)
                c.request_ids = Strings.of(list(x[4]))
                c.temperature = np.asarray(x[5], dtype=np.float64)
                c.top_p = np.asarray(x[6], dtype=np.float64)
                c.top_k = np.asarray(x[7], dtype=np.int64)
                c.flags = np.asarray(x[8], dtype=np.int8)
            out.append(c)
        return out

    def to_records(self) -> list[schema.VerifyStepRecord]:
        """The verify-step records these columns hold (needs the detail block)."""
        if not self.has_detail:
            raise ValueError("these verify columns carry no per-entry detail; records cannot "
                             "be rebuilt from aggregates")
        if self.step_sizes is not None:
            return self.per_entry().to_records()
        n = len(self)
        if not n:
            return []
        seq, request_ids = self.seq, self.request_ids
        step, batch_size, draft_depth = self.step, self.batch_size, self.draft_depth
        assert seq is not None and request_ids is not None  # has_detail
        assert step is not None and batch_size is not None and draft_depth is not None  # with seq
        ids = request_ids.tolist()
        names = self.mode_names
        zeros = [0] * n
        cols = [a.tolist() if a is not None else zeros
                for a in (self.num_drafted, self.num_draft_tokens, self.num_accepted,
                          self.mode_requested, self.mode_used, self.num_verified,
                          self.num_top1, self.expected_top1, self.var_top1,
                          self.temperature, self.top_p, self.top_k, self.flags)]
        hist = self.draft_hist.tolist() if self.draft_hist is not None else None
        pits = (self.pit_sum.tolist(), self.pit_var.tolist()) \
            if self.pit_sum is not None and self.pit_var is not None else None
        accepts = (self.accept_expected.tolist(), self.accept_var.tolist()) \
            if self.accept_expected is not None and self.accept_var is not None else None
        outside = self.num_outside.tolist() if self.num_outside is not None else None
        resids = (self.resid_pit.tolist(), self.resid_var.tolist()) \
            if self.resid_pit is not None and self.resid_var is not None else None
        sharps = (self.sharp_positions.tolist(), self.sharp_llr.tolist()) \
            if self.sharp_positions is not None and self.sharp_llr is not None else None
        bounds = np.flatnonzero(np.diff(seq)) + 1
        starts = [0] + bounds.tolist()
        ends = bounds.tolist() + [n]
        out = []
        reasons = self.depth_reasons or {}
        for s, e in zip(starts, ends):
            entries = []
            for i in range(s, e):
                drafted, accepted, flags = cols[0][i], cols[2][i], cols[12][i]
                truth = bool(flags & HAS_TRUTH)
                entries.append(schema.VerifyEntry(
                    request_id=ids[i], num_drafted=drafted, num_draft_tokens=cols[1][i],
                    num_accepted=accepted,
                    accepted_per_pos=tuple(1 if p < accepted else 0 for p in range(drafted)),
                    temperature=cols[9][i], top_p=cols[10][i], top_k=cols[11][i],
                    mode_requested=names[cols[3][i]], mode_used=names[cols[4][i]],
                    num_verified=cols[5][i] if truth else 0, num_top1=cols[6][i] if truth else 0,
                    expected_top1=cols[7][i] if truth else 0.0,
                    var_top1=cols[8][i] if truth else 0.0,
                    draft_top1_hist=tuple(hist[i]) if hist is not None and flags & HAS_HIST
                    else (), **(_pit(pits[0][i], pits[1][i]) if pits is not None and truth
                                else {}),
                    **(_pair("accept_expected", "accept_var", accepts[0][i], accepts[1][i])
                       if accepts is not None and truth else {}),
                    **(_count("num_outside", outside[i]) if outside is not None and truth
                       else {}),
                    **(_pair("resid_pit", "resid_var", resids[0][i], resids[1][i])
                       if resids is not None and truth else {}),
                    **(_sharp(sharps[0][i], sharps[1][i]) if sharps is not None and truth
                       else {})))
            depth = int(draft_depth[s])
            out.append(schema.VerifyStepRecord(
                run_id=self.run_id, config_id=self.config_id, rank=self.rank, node=self.node,
                step=int(step[s]), t_ns=int(self.t_ns[s]),
                batch_size=int(batch_size[s]), entries=tuple(entries),
                draft_depth=None if depth < 0 else depth,
                depth_reason=reasons.get(int(seq[s]), "")))
        return out

    def select(self, mask: np.ndarray) -> "VerifyColumns":
        """The entries where ``mask`` holds (aggregation fields only; num_steps unknown = 0)."""
        if self.step_sizes is not None:
            return self.per_entry().select(mask)
        arrays: dict[str, Any] = {name: None if getattr(self, name) is None
                                  else getattr(self, name)[mask]
                                  for name in AGGREGATE_ARRAYS + OPTIONAL_ARRAYS}
        return VerifyColumns(run_id=self.run_id, config_id=self.config_id, rank=self.rank,
                             node=self.node, num_steps=0, mode_names=self.mode_names, **arrays)


AGGREGATE_ARRAYS = ("t_ns", "num_drafted", "num_draft_tokens", "num_accepted", "mode_requested",
                    "mode_used", "num_verified", "num_top1", "expected_top1", "var_top1",
                    "draft_hist")
#: the whole-distribution test's arrays: optional (None where no entry carries them)
PIT_ARRAYS = ("pit_sum", "pit_var")
#: the acceptance rule's, likewise
ACCEPT_ARRAYS = ("accept_expected", "accept_var")
#: the sharpness test's, likewise (``sharp_llr`` is [N, len(schema.SHARP_GRID)])
SHARP_ARRAYS = ("sharp_positions", "sharp_llr")
#: every optional array, in pairs that travel together (both or neither)
#: the residual rule's, likewise
RESID_ARRAYS = ("resid_pit", "resid_var")
OPTIONAL_ARRAYS = PIT_ARRAYS + ACCEPT_ARRAYS + ("num_outside",) + SHARP_ARRAYS + RESID_ARRAYS
#: arrays with more than one value per entry: their width
WIDTHS = {"draft_hist": schema.DRAFT_HIST_BINS, "sharp_llr": len(schema.SHARP_GRID)}
_G = len(schema.SHARP_GRID)
_NO_SHARP = (math.nan,) * _G
#: fields with one value per verify step (compact when ``step_sizes`` is set)
STEP_ARRAYS = ("t_ns", "seq", "step", "batch_size", "draft_depth")
DETAIL_ARRAYS = ("seq", "step", "batch_size", "draft_depth", "temperature", "top_p", "top_k",
                 "flags")


def _pit(u_sum: float, var: float) -> dict[str, Any]:
    """An entry's PIT fields, left out (None) where the columns hold NaN."""
    return _pair("pit_sum", "pit_var", u_sum, var)


def _count(name: str, x: float) -> dict[str, Any]:
    """An entry's optional count, left out (None) where the columns hold NaN."""
    return {} if math.isnan(x) else {name: int(x)}


def _sharp(n: float, llr: list[float]) -> dict[str, Any]:
    """An entry's sharpness fields, left out (None) where the columns hold NaN."""
    return {} if math.isnan(n) else {"sharp_positions": int(n), "sharp_llr": tuple(llr)}


def _pair(a: str, b: str, x: float, y: float) -> dict[str, Any]:
    """Two optional fields of an entry, left out (None) where the columns hold NaN."""
    return {} if math.isnan(x) or math.isnan(y) else {a: x, b: y}


def expand(items: Iterable[Any]) -> list[Any]:
    """Records, with every VerifyColumns and CountsColumns among them rebuilt as records."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, (VerifyColumns, *BATCHES)):
            out.extend(item.to_records())
        else:
            out.append(item)
    return out
