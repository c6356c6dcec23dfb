"""The drain side of the Recorder: ready ring slots into VerifyColumns. Stdlib, numpy, torch.

Runs on the drain thread, never on the engine's hot path. A few array operations per verify
step and nothing per request entry but what numpy and ``str.join`` do in C.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import numpy as np

from .. import schema
from ..io.columns import HAS_HIST as _HAS_HIST
from ..io.columns import HAS_TRUTH as _HAS_TRUTH
from ..io.columns import Strings, VerifyColumns, mode_coder
from . import stats as _stats


class StepMeta(NamedTuple):
    """What the hot path keeps of one verify step besides its packed tensor: host values only,
    copied where the engine could change them under us."""

    step: int
    t_ns: int
    request_ids: tuple
    temperature: Any  #: per entry (a numpy array or a tuple), or None
    top_p: Any
    top_k: Any
    modes: Any  #: the mode used: one name for the step, a tuple per entry, or None
    has_truth: bool
    has_hist: bool
    draft_depth: int  #: -1 where the hook was not told
    depth_reason: str | None
    lite: tuple[int, int] | None  #: (drafted, draft tokens) where only acceptance was packed


def columns(rec: Any, ready: list[tuple]) -> VerifyColumns:
    """One VerifyColumns from a recorder's ready ring slots: a few array copies per step, nothing
    per request entry but what numpy does in C."""
    metas: list[StepMeta] = [m for _, _, _, m in ready]
    sizes = [b for _, b, _, _ in ready]
    step_sizes = np.asarray(sizes, dtype=np.int64)
    n = int(step_sizes.sum())
    f64, i64 = np.float64, np.int64
    cat = np.concatenate
    lites = [m.lite for m in metas]
    per_step = np.asarray([lt if lt is not None else (0, 0) for lt in lites], dtype=i64)
    drafted = np.repeat(per_step[:, 0], sizes)
    draft_tokens = np.repeat(per_step[:, 1], sizes)
    full_rows, full_at = [], []
    if None not in lites and min(sizes) == max(sizes):  # the usual drain: one gather
        idxs = np.fromiter((idx for idx, _, _, _ in ready), dtype=i64, count=len(ready))
        accepted = rec._acc_np[idxs, :sizes[0]].reshape(-1)
    else:
        parts, at = [], 0
        for (idx, b, _, _m), lite in zip(ready, lites):
            if lite is not None:
                parts.append(rec._acc_np[idx, :b])
            else:
                row = rec._host_np[idx, :b]
                parts.append(row[:, _stats.COL_NUM_ACCEPTED].astype(i64))
                drafted[at:at + b] = row[:, _stats.COL_NUM_DRAFTED]
                draft_tokens[at:at + b] = row[:, _stats.COL_NUM_DRAFT_TOKENS]
                full_rows.append(row[:, _stats.COL_NUM_VERIFIED:])
                full_at.append((at, b))
            at += b
        accepted = cat(parts)
    temps = cat(_arrays([m.temperature for m in metas], sizes, f64, 0.0))
    top_p = cat(_arrays([m.top_p for m in metas], sizes, f64, 1.0))
    top_k = cat(_arrays([m.top_k for m in metas], sizes, i64, 0))
    names = list(schema.SAMPLING_MODES)
    configured = rec.run.verify_mode or schema.SPECULATIVE_SAMPLING
    code = mode_coder(names)
    requested = np.where(temps > 0, code(configured), code(schema.GREEDY)).astype(np.int8)
    used = requested.copy()
    start = 0
    for m, b in zip(metas, sizes):
        modes = m.modes
        if isinstance(modes, str) and modes:
            used[start:start + b] = code(modes)
        elif modes:
            for i, mode in enumerate(modes):
                if mode:
                    used[start + i] = code(mode)
        start += b
    step_flags = np.fromiter(((_HAS_TRUTH if m.has_truth else 0) | (_HAS_HIST if m.has_hist else 0)
                              for m in metas), dtype=np.int8, count=len(metas))
    flags = np.repeat(step_flags, sizes)
    truth = (flags & _HAS_TRUTH) != 0
    base = _stats.COL_NUM_VERIFIED
    hist: np.ndarray | None
    verified: np.ndarray | None
    top1: np.ndarray | None
    expected: np.ndarray | None
    var: np.ndarray | None
    pit_sum: np.ndarray | None = None
    pit_var: np.ndarray | None = None
    accept_expected: np.ndarray | None = None
    accept_var: np.ndarray | None = None
    outside: np.ndarray | None = None
    resid_pit: np.ndarray | None = None
    resid_var: np.ndarray | None = None
    sharp_n: np.ndarray | None = None
    sharp_llr: np.ndarray | None = None
    mismatches: np.ndarray
    if full_rows:
        stats = np.zeros((n, _stats.ROW_WIDTH - base), dtype=np.float32)
        for (start, b), rows in zip(full_at, full_rows):
            stats[start:start + b] = rows
        hist = stats[:, _stats.COL_HIST - base:_stats.COL_MISMATCH_MARGIN - base].astype(i64)
        hist[(flags & _HAS_HIST) == 0] = 0
        # a row whose expected figure could not be known (NaN) has no statistics
        truth = truth & np.isfinite(stats[:, _stats.COL_EXPECTED_TOP1 - base])
        verified = np.where(truth, stats[:, _stats.COL_NUM_VERIFIED - base], 0).astype(i64)
        top1 = np.where(truth, stats[:, _stats.COL_NUM_TOP1 - base], 0).astype(i64)
        expected = np.where(truth, stats[:, _stats.COL_EXPECTED_TOP1 - base], 0).astype(f64)
        var = np.where(truth, stats[:, _stats.COL_VAR_TOP1 - base], 0).astype(f64)
        # the whole-distribution test's sums, NaN where the entry has no statistics
        pit_sum = np.where(truth, stats[:, _stats.COL_PIT_SUM - base], np.nan).astype(f64)
        pit_var = np.where(truth, stats[:, _stats.COL_PIT_VAR - base], np.nan).astype(f64)
        # the acceptance rule's sums, NaN where the entry has none (greedy, no draft tokens)
        tried = truth & (verified > 0)
        accept_expected = np.where(tried, stats[:, _stats.COL_ACCEPT_EXPECTED - base],
                                   np.nan).astype(f64)
        accept_var = np.where(tried, stats[:, _stats.COL_ACCEPT_VAR - base], np.nan).astype(f64)
        outside = np.where(truth, stats[:, _stats.COL_OUTSIDE - base], np.nan).astype(f64)
        # the residual rule's PIT at a rejected draft, NaN where the entry rejected none
        resid_pit = np.where(truth, stats[:, _stats.COL_RESID_PIT - base], np.nan).astype(f64)
        resid_var = np.where(truth, stats[:, _stats.COL_RESID_VAR - base], np.nan).astype(f64)
        # the sharpness test's, NaN where the entry has no statistics or is greedy
        sharp = truth & (temps > 0)
        sharp_n = np.where(sharp, stats[:, _stats.COL_SHARP_N - base], np.nan).astype(f64)
        sharp_llr = np.where(sharp[:, None], stats[:, _stats.COL_SHARP_LLR - base:],
                             np.nan).astype(f64)
        margin = np.where(truth & (temps <= 0), stats[:, _stats.COL_MISMATCH_MARGIN - base], -1.0)
        mismatches = np.flatnonzero(margin > 0)
    else:  # no statistics in this drain
        hist = verified = top1 = expected = var = None
        mismatches = np.empty(0, dtype=np.intp)
    ids = list(itertools.chain.from_iterable(m.request_ids for m in metas))
    cols = VerifyColumns(
        run_id=rec.run.run_id, config_id=rec.run.config_id, rank=rec.rank, node=rec.node,
        num_steps=len(metas),
        t_ns=np.fromiter((m.t_ns for m in metas), dtype=i64, count=len(metas)),
        num_drafted=drafted, num_draft_tokens=draft_tokens, num_accepted=accepted,
        mode_requested=requested, mode_used=used,
        num_verified=verified, num_top1=top1, expected_top1=expected, var_top1=var,
        draft_hist=hist, mode_names=tuple(names), pit_sum=pit_sum, pit_var=pit_var,
        accept_expected=accept_expected, accept_var=accept_var, num_outside=outside,
        resid_pit=resid_pit, resid_var=resid_var,
        sharp_positions=sharp_n, sharp_llr=sharp_llr,
        seq=np.arange(len(metas), dtype=i64),
        step=np.fromiter((m.step for m in metas), dtype=i64, count=len(metas)),
        batch_size=step_sizes,
        draft_depth=np.fromiter((m.draft_depth for m in metas), dtype=i64, count=len(metas)),
        step_sizes=step_sizes,
        request_ids=Strings.of(ids), temperature=temps, top_p=top_p, top_k=top_k, flags=flags)
    reasons = {i: m.depth_reason for i, m in enumerate(metas) if m.depth_reason}
    if reasons:
        cols.depth_reasons = reasons
    if len(mismatches):
        assert verified is not None and top1 is not None  # mismatches come with statistics
        seq = np.repeat(np.arange(len(metas)), sizes)
        for i in mismatches.tolist():
            m = metas[seq[i]]
            rec._emit(schema.MismatchRecord(
                run_id=rec.run.run_id, rank=rec.rank, node=rec.node, step=int(m.step), t_ns=int(m.t_ns),
                request_id=ids[i], position=int(stats[i, _stats.COL_MISMATCH_POS - base]),
                margin=float(margin[i]),
                num_mismatches=max(1, int(verified[i] - top1[i]))))
    return cols


def host_copy(values: Any) -> Any:
    """A copy the engine cannot change under us: numpy arrays stay arrays (vLLM keeps its
    sampling parameters in host arrays; an array copy is one memcpy), anything else a tuple."""
    if values is None:
        return None
    if isinstance(values, np.ndarray):
        return values.copy()
    return tuple(values)


def parts(ready: list[tuple], limit: int) -> list[list[tuple]]:
    """Ready steps in groups of at most ``limit`` entries (a larger single step alone)."""
    parts: list[list[tuple]] = []
    current: list[tuple] = []
    size = 0
    for item in ready:
        if current and size + item[1] > limit:
            parts.append(current)
            current, size = [], 0
        current.append(item)
        size += item[1]
    if current:
        parts.append(current)
    return parts


def _arrays(seqs: list, sizes: list[int], dtype: Any, default: float) -> list[np.ndarray]:
    """Per-step host sequences as arrays; a step whose values equal the step before reuses its
    array (continuous batching keeps a batch's parameters from step to step)."""
    out: list[np.ndarray] = []
    prev, prev_arr = None, None
    for seq, size in zip(seqs, sizes):
        if seq is None:
            arr = np.full(size, default, dtype=dtype)
        elif isinstance(seq, np.ndarray):
            arr = seq.astype(dtype, copy=False)
        elif prev_arr is not None and not isinstance(prev, np.ndarray) and seq == prev:
            arr = prev_arr
        else:
            arr = np.asarray(seq, dtype=dtype)
        out.append(arr)
        prev, prev_arr = seq, arr
    return out
