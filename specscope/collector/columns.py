"""Columnar verify entries: the collector's fast ingest path. Never imports torch or dash.

One VerifyColumns holds N request-step entries of one (run, config, rank) as numpy arrays;
``observe_columns`` folds them into a SpecStats with a handful of vectorised operations, so
ingest costs nanoseconds per entry instead of a Python loop per entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .. import schema
from .stats import SpecStats, TruthStats, _add_lists

MODES = schema.SAMPLING_MODES
MODE_CODE = {m: i for i, m in enumerate(MODES)}


@dataclass
class VerifyColumns:
    """N verify entries of one (run_id, config_id, rank)."""

    run_id: str
    config_id: str
    rank: int
    num_steps: int  #: verify-step records these entries came from
    t_ns: np.ndarray  #: int64 [N], the step's host time per entry
    num_drafted: np.ndarray  #: int64 [N]
    num_draft_tokens: np.ndarray  #: int64 [N]
    num_accepted: np.ndarray  #: int64 [N]
    mode_requested: np.ndarray  #: int8 [N], index into MODES
    mode_used: np.ndarray  #: int8 [N]
    num_verified: np.ndarray  #: int64 [N]
    num_top1: np.ndarray  #: int64 [N]
    expected_top1: np.ndarray  #: float64 [N]
    var_top1: np.ndarray  #: float64 [N]
    draft_hist: np.ndarray  #: int64 [N, DRAFT_HIST_BINS] (zeros where not sampled)

    def __len__(self) -> int:
        return int(self.num_drafted.shape[0])

    @classmethod
    def from_records(cls, records: Iterable[schema.VerifyStepRecord]) -> list["VerifyColumns"]:
        """Group verify-step records by (run, config, rank) into columns."""
        groups: dict[tuple, list] = {}
        steps: dict[tuple, int] = {}
        for r in records:
            key = (r.run_id, r.config_id, r.rank)
            rows = groups.setdefault(key, [])
            steps[key] = steps.get(key, 0) + 1
            for e in r.entries:
                hist = e.draft_top1_hist if len(e.draft_top1_hist) == schema.DRAFT_HIST_BINS \
                    else (0,) * schema.DRAFT_HIST_BINS
                rows.append((r.t_ns, e.num_drafted, e.num_draft_tokens, e.num_accepted,
                             MODE_CODE.get(e.mode_requested, 0), MODE_CODE.get(e.mode_used, 0),
                             e.num_verified, e.num_top1, e.expected_top1, e.var_top1, hist))
        out = []
        for key, rows in groups.items():
            cols = list(zip(*rows)) if rows else [()] * 11
            out.append(cls(
                run_id=key[0], config_id=key[1], rank=key[2], num_steps=steps[key],
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
                draft_hist=np.asarray(cols[10], dtype=np.int64).reshape(-1, schema.DRAFT_HIST_BINS)))
        return out


def _tail_counts(values: np.ndarray) -> list[int]:
    """[count(values > p) for p in 0..max-1]: drafted/accepted per position from lengths."""
    if not values.size or values.max() <= 0:
        return []
    bc = np.bincount(values)
    return np.cumsum(bc[::-1])[::-1][1:].tolist()


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
    n_modes = len(MODES)
    pair = c.mode_requested.astype(np.int64) * n_modes + c.mode_used
    for code, n in enumerate(np.bincount(pair, minlength=n_modes * n_modes).tolist()):
        if n:
            stats.modes[(MODES[code // n_modes], MODES[code % n_modes])] += n
    sampled = c.num_verified > 0
    if sampled.any():
        req = c.mode_requested
        if req.min() == req.max():  # the usual batch: one requested mode, no grouping needed
            all_rows = bool(sampled.all())
            sums = [(w if all_rows else w[sampled]).sum()
                    for w in (c.num_verified, c.num_top1, c.expected_top1, c.var_top1)]
            groups = [(int(req[0]), sums)]
        else:
            r = req[sampled].astype(np.int64)
            per = [np.bincount(r, weights=w[sampled], minlength=n_modes)
                   for w in (c.num_verified, c.num_top1, c.expected_top1, c.var_top1)]
            groups = [(code, [p[code] for p in per]) for code in np.flatnonzero(per[0]).tolist()]
        for code, (nv, nt, ex, var) in groups:
            t = stats.truth.setdefault(MODES[code], TruthStats())
            t.num_verified += int(nv)
            t.num_top1 += int(nt)
            t.expected_top1 += float(ex)
            t.var_top1 += float(var)
    hist = c.draft_hist.sum(axis=0)
    if hist.any():
        stats.draft_hist = _add_lists(stats.draft_hist, hist.tolist())
    t0, t1 = int(c.t_ns.min()), int(c.t_ns.max())
    stats.t_first_ns = t0 if stats.t_first_ns is None else min(stats.t_first_ns, t0)
    stats.t_last_ns = t1 if stats.t_last_ns is None else max(stats.t_last_ns, t1)
