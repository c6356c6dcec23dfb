"""Columnar verify entries: the collector's fast ingest path. Never imports torch or dash.

``observe_columns`` folds them into a SpecStats with a handful of vectorised operations, so
ingest costs nanoseconds per entry instead of a Python loop per entry.
"""

from __future__ import annotations

import numpy as np

from ..io.columns import VerifyColumns
from .. import sampling, schema, sharp
from .slots import MAX_ROWS
from .stats import SpecStats, TruthStats, _add_lists, truth_class

__all__ = ["VerifyColumns", "observe_columns"]


def _tail_counts(values: np.ndarray) -> list[int]:
    """[count(values > p) for p in 0..max-1]: drafted/accepted per position from lengths."""
    if not values.size or values.max() <= 0:
        return []
    bc = np.bincount(values)
    return np.cumsum(bc[::-1])[::-1][1:].tolist()


def _observe_depths(stats: SpecStats, c: VerifyColumns) -> None:
    """The k of each step (where given), one per step in step order."""
    depth = c.draft_depth
    if depth is None:
        return
    if c.step_sizes is not None:
        t = c.t_ns
    elif c.seq is not None:
        _, first = np.unique(c.seq, return_index=True)
        depth, t = depth[first], c.t_ns[first]
    else:
        return
    given = depth >= 0
    if given.any():
        reasons = c.depth_reasons or {}
        n_reasons = len(reasons)
        if reasons and c.seq is not None:  # a selection of steps: only the reasons of its own
            present = set(np.unique(c.seq).tolist())
            n_reasons = sum(1 for s in reasons if s in present)
        stats.observe_depths(depth[given].tolist(), t[given].tolist(), n_reasons)


def _rows(c: VerifyColumns) -> np.ndarray | None:
    """Each entry's place in its verify step (its batch row), from the step sizes or the step
    each entry is of; None where the columns say neither."""
    n = len(c)
    if c.step_sizes is not None:
        sizes = np.asarray(c.step_sizes, dtype=np.int64)
        starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    elif c.seq is not None:
        first = np.r_[True, c.seq[1:] != c.seq[:-1]]
        starts = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    else:
        return None
    return np.arange(n) - starts


def observe_columns(stats: SpecStats, c: VerifyColumns) -> None:
    """Fold columnar entries into ``stats`` (same result as observing the records)."""
    if not len(c):
        stats.num_steps += c.num_steps
        return
    d, a = c.num_drafted, c.num_accepted
    bad = (d < 0) | (a < 0) | (a > d)
    stats.num_clamped += int(bad.sum())
    d = np.maximum(d, 0)
    a = np.minimum(np.maximum(a, 0), d)
    stats.num_steps += c.num_steps
    has = d > 0
    stats.num_drafts += int(has.sum())
    stats.undrafted_request_steps += int((d == 0).sum())
    stats.draft_tokens += int(d.sum())
    stats.draft_tokens_scored += int(np.maximum(d, c.num_draft_tokens)[has].sum())
    stats.accepted_tokens += int(a.sum())
    stats.accepted_with_drafts += int(a[has].sum())
    for length, n in enumerate(np.bincount(a[has] + 1).tolist() if has.any() else []):
        if n:
            stats.accept_len_hist[length] += n
    drafted_pp = _tail_counts(d)
    accepted_pp = _tail_counts(a)
    accepted_pp += [0] * (len(drafted_pp) - len(accepted_pp))
    stats.drafted_per_pos = _add_lists(stats.drafted_per_pos, drafted_pp)
    stats.accepted_per_pos = _add_lists(stats.accepted_per_pos, accepted_pp)
    rows = _rows(c)
    if rows is not None and has.any():
        rows = np.minimum(rows[has], MAX_ROWS - 1)
        stats.row_draft_tokens = _add_lists(stats.row_draft_tokens,
                                            np.bincount(rows, weights=d[has]).astype(int).tolist())
        stats.row_accepted = _add_lists(stats.row_accepted,
                                        np.bincount(rows, weights=a[has]).astype(int).tolist())
        stats.row_accepted += [0] * (len(stats.row_draft_tokens) - len(stats.row_accepted))
    _observe_depths(stats, c)
    modes = c.mode_names
    n_modes = len(modes)
    pair = c.mode_requested.astype(np.int64) * n_modes + c.mode_used
    for code, n in enumerate(np.bincount(pair, minlength=n_modes * n_modes).tolist()):
        if n:
            stats.modes[(modes[code // n_modes], modes[code % n_modes])] += n
    truth = (c.num_verified, c.num_top1, c.expected_top1, c.var_top1)
    cols = [w for w in truth if w is not None]  # the four travel together: all or none
    sampled = cols[0] > 0 if len(cols) == len(truth) else None
    if sampled is not None:  # the whole-distribution test's sums, where entries carry them
        cols += _pit_columns(c, cols[0])
    if sampled is not None and sampled.any():
        # truth classes (``truth_class``): the requested mode, and its sampling class's
        # truncations where asked for (``specscope.sampling``), as mode * 16 + class
        width = 16
        req = c.mode_requested.astype(np.int64) * width
        if c.top_p is not None and len(c.top_p) == len(req):
            cls = np.asarray(sampling.code(1.0, c.top_p, c.top_k), dtype=np.int64)
            if schema.GREEDY in modes:
                cls = np.where(c.mode_requested == modes.index(schema.GREEDY), 0, cls)
            req = req + cls
        if req.min() == req.max():  # the usual batch: one class, no grouping needed
            all_rows = bool(sampled.all())
            sums = [(w if all_rows else w[sampled]).sum() for w in cols]
            groups = [(int(req[0]), sums)]
        else:
            r = req[sampled]
            per = [np.bincount(r, weights=w[sampled], minlength=n_modes * width) for w in cols]
            groups = [(code, [p[code] for p in per]) for code in np.flatnonzero(per[0]).tolist()]
        for code, (nv, nt, ex, var, pn, ps, pv, at, ah, ae, av, out, rn, rs, rv, sn,
                   *llr) in groups:
            key = truth_class(modes[code // width], code % width)
            t = stats.truth.setdefault(key, TruthStats())
            t.num_verified += int(nv)
            t.num_top1 += int(nt)
            t.expected_top1 += float(ex)
            t.var_top1 += float(var)
            t.pit_positions += int(pn)
            t.pit_sum += float(ps)
            t.pit_var += float(pv)
            t.accept_trials += int(at)
            t.accept_hits += int(ah)
            t.accept_expected += float(ae)
            t.accept_var += float(av)
            t.num_outside += int(round(out))
            t.resid_positions += int(round(rn))
            t.resid_sum += float(rs)
            t.resid_var += float(rv)
            if sn:
                t.sharp_positions += int(round(sn))
                t.sharp_llr = _add_lists(t.sharp_llr, [float(x) for x in llr])
    if c.draft_hist is not None:
        hist = c.draft_hist.sum(axis=0)
        if hist.any():
            stats.draft_hist = _add_lists(stats.draft_hist, hist.tolist())
    t0, t1 = int(c.t_ns.min()), int(c.t_ns.max())
    stats.t_first_ns = t0 if stats.t_first_ns is None else min(stats.t_first_ns, t0)
    stats.t_last_ns = t1 if stats.t_last_ns is None else max(stats.t_last_ns, t1)


def _pit_columns(c: VerifyColumns, verified: np.ndarray) -> list[np.ndarray]:
    """Per entry: the positions the whole-distribution test covers, its PIT sum and variance,
    the acceptance rule's, the positions outside the truncation, the residual rule's and the
    sharpness test's (zeros where an entry carries none)."""
    zero = np.zeros(len(verified))
    if c.pit_sum is None or c.pit_var is None:
        out = [zero, zero, zero]
    else:
        has = np.isfinite(c.pit_sum) & np.isfinite(c.pit_var)
        out = [np.where(has, verified, 0), np.where(has, c.pit_sum, 0.0),
               np.where(has, c.pit_var, 0.0)]
    # the acceptance rule: the draft positions verify tested (the first accepted + 1, at most
    # the drafts) and how many it accepted, where the entry carries its sums
    outside = zero if c.num_outside is None else np.nan_to_num(c.num_outside, nan=0.0)
    if c.accept_expected is None or c.accept_var is None:
        out += [zero, zero, zero, zero, outside]
    else:
        has = np.isfinite(c.accept_expected) & np.isfinite(c.accept_var)
        trials = np.minimum(c.num_accepted + 1, c.num_drafted)
        out += [np.where(has, trials, 0), np.where(has, c.num_accepted, 0),
                np.where(has, c.accept_expected, 0.0), np.where(has, c.accept_var, 0.0),
                outside]
    # the residual rule: rejections read, their PIT sum and variance
    if c.resid_pit is None or c.resid_var is None:
        out += [zero, zero, zero]
    else:
        has = np.isfinite(c.resid_pit) & np.isfinite(c.resid_var)
        out += [has.astype(np.float64), np.where(has, c.resid_pit, 0.0),
                np.where(has, c.resid_var, 0.0)]
    # the sharpness test: positions read, then one log-ratio sum per alternative
    if c.sharp_positions is None or c.sharp_llr is None:
        return out + [zero] * (1 + len(sharp.GRID))
    has = np.isfinite(c.sharp_positions)
    return out + [np.where(has, c.sharp_positions, 0.0)] + \
        [np.where(has, c.sharp_llr[:, i], 0.0) for i in range(c.sharp_llr.shape[1])]
