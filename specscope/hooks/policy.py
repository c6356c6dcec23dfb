"""Statistics policies: which verify steps get the sampling-truth and draft-health statistics.
Stdlib and numpy; never imports the collector (the decision rule comes from ``specscope.exact``).

A policy is a plain function ``step -> bool`` (``every_step``, ``every_n``), or ``UntilDecided``:
every step until each sampling class the engine has served has the evidence its check needs
(PASS or FAIL, by the collector's own rule), then one step in ``every``. A class it has not seen (a new
mode, a request with top-k where none had asked for it) gets every step again until it too has
decided. The drain side tells it what the statistics found; the hot path asks it one cheap
question per step.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence, cast

import numpy as np

from .. import pit, sampling
from ..sharp import GRID as SHARP_GRID
from ..sharp import decide as sharp_decide
from ..exact import (ALPHA, FAIL, INCONCLUSIVE, PASS, PASS_ALPHA, decide_rate, positions_to_detect,
                     tie_margin, truth_state)
#: drafted positions after which a draft-probability check is decided (the half-precision
#: ceiling's sample, ``exact.positions_to_detect(0.75)``)
DRAFT_POSITIONS = cast(int, positions_to_detect(0.75))  # an int: 0.75 < 1
DRAFT = -1  #: the draft-health "class"


def class_codes(temperature: Any, top_p: Any = None, top_k: Any = None) -> np.ndarray:
    """Each row's sampling class as a code (``specscope.sampling.code`` on the host arrays, in
    specscope's terms: top_k 0 and top_p 1.0 are off; a few array operations, no per-row
    Python where the engine hands numpy arrays)."""
    return np.asarray(sampling.code(
        np.asarray(temperature, dtype=np.float64),
        None if top_p is None else np.asarray(top_p, dtype=np.float64),
        None if top_k is None else np.asarray(top_k, dtype=np.int64)), dtype=np.int64)


def classes(temperature: Any, top_p: Any = None, top_k: Any = None) -> set[int]:
    """The sampling classes present in one batch."""
    code = class_codes(temperature, top_p, top_k)
    if code.size == 0:
        return set()
    return set(np.flatnonzero(np.bincount(code, minlength=8)).tolist())


def budget_rows(batch: int, cap: int | None, turn: int, policy: Any, temperature: Any,
                top_p: Any = None, top_k: Any = None) -> tuple[np.ndarray | None, int]:
    """The rows of a step whose statistics are computed under a budget of ``cap`` rows, as a
    sorted index array (None: every row), and where the next step's turn begins. Rows of a
    class ``policy`` is still deciding (its ``deciding``) go first; otherwise the rows take
    turns in windows of ``cap`` consecutive rows (a view of the logits, nothing copied), so
    every row is sampled in time."""
    if cap is None or batch <= cap:
        return None, turn
    start = turn if turn + cap <= batch else batch - cap
    following = 0 if start + cap >= batch else start + cap
    deciding = getattr(policy, "deciding", None)
    mask = deciding(temperature, top_p, top_k) if deciding is not None else None
    if mask is None or mask.all() or not mask.any():
        return np.arange(start, start + cap), following
    order = (np.arange(batch) + turn) % batch
    order = np.concatenate([order[mask[order]], order[~mask[order]]])
    return np.sort(order[:cap]), following


def _fresh() -> list[float]:
    """A class's totals before any statistics (``UntilDecided.totals``)."""
    return [0, 0, 0.0, 0, 0.0, 0.0, 0, 0, 0.0, 0.0, 0, 0.0, 0.0, 0.0] + [0.0] * len(SHARP_GRID)


class UntilDecided:
    """Every verify step until the checks have decided, then one step in ``every``.

    A sampled class is decided where its check is: PASS (the fault ruled out at its size,
    ``exact.truth_state``, the collector's own rule) or FAIL; one whose expected rate is too
    close to greedy to tell apart, or that has not decided by ``undecidable_positions``, stops
    asking then. Where the statistics carry the whole-distribution test (``specscope.pit``), a
    sampled class decides only where that test has decided too (or either has failed), and the
    same for the sharpness test (``specscope.sharp``). The greedy class is decided where its check passes or fails, or at its first
    mismatch beyond ``tie_margin``. Drafted positions with a draft probability decide at
    ``DRAFT_POSITIONS``.
    """

    def __init__(self, every: int = 32, *, alpha: float = ALPHA, min_excess: float = 0.05,
                 undecidable_positions: int = 4096, margin: float | None = None,
                 pass_alpha: float = PASS_ALPHA) -> None:
        if every < 1:
            raise ValueError("every must be >= 1")
        self.every = every
        self.alpha = alpha
        self.min_excess = min_excess
        self.undecidable_positions = undecidable_positions
        self.tie_margin = tie_margin("") if margin is None else margin
        self.pass_alpha = pass_alpha
        #: class -> [positions, argmax hits, expected, PIT positions, PIT sum, PIT variance,
        #: acceptance trials, accepted, expected accepted, its variance, rejections read by the
        #: residual rule, their PIT sum and variance, sharpness positions, then its log-ratio
        #: sums, one per alternative on ``sharp.GRID``] (``_fresh``)
        self.totals: dict[int, list[float]] = {}
        self.draft_positions = 0
        self.decided: set[int] = set()
        #: ``decided`` as an array, replaced whole by the drain side: read by the hot path
        self._decided_codes = np.zeros(0, dtype=np.int64)
        self._lock = threading.Lock()
        self.num_full_steps = 0  #: steps that got statistics because a class was undecided

    # the hot path ---------------------------------------------------------------------------
    def __call__(self, step: int) -> bool:
        """Without the batch's parameters: every step while anything seen is undecided."""
        return step % self.every == 0 or not self._all_decided()

    def wants(self, step: int, temperature: Any = None, top_p: Any = None,
              top_k: Any = None) -> bool:
        if step % self.every == 0:
            return True
        if temperature is None:
            return not self._all_decided()
        present = classes(temperature, top_p, top_k)
        if DRAFT in self.totals and DRAFT not in self.decided:
            present.add(DRAFT)
        want = not present <= self.decided
        if want:
            self.num_full_steps += 1
        return want

    def deciding(self, temperature: Any, top_p: Any = None, top_k: Any = None) -> np.ndarray:
        """Per row: is its sampling class still deciding? (The recorder's row budget takes
        these rows first.)"""
        return ~np.isin(class_codes(temperature, top_p, top_k), self._decided_codes)

    def _all_decided(self) -> bool:
        seen = set(self.totals)
        return bool(seen) and seen <= self.decided

    # the drain side -------------------------------------------------------------------------
    def observe(self, temperature: Sequence[float], top_p: Sequence[float] | None,
                top_k: Sequence[int] | None, num_verified: np.ndarray | None,
                num_top1: np.ndarray | None, expected_top1: np.ndarray | None,
                draft_positions: int = 0, structural: bool = False,
                pit_sum: np.ndarray | None = None, pit_var: np.ndarray | None = None,
                accept: tuple | None = None, sharp: tuple | None = None,
                resid: tuple | None = None) -> None:
        """What one drain's statistics held, per entry (entries without statistics have 0
        positions; ``pit_sum`` NaN where an entry has no whole-distribution figures; ``accept``:
        the acceptance rule's (trials, accepted, expected, variance) per entry, NaN expected
        where it has none; ``sharp``: the sharpness test's (positions, [N, grid] log-ratio
        sums), NaN positions where it has none; ``resid``: the residual rule's (PIT, variance)
        per entry, NaN where it has none);
        ``structural``: a greedy mismatch beyond the tie margin was seen."""
        with self._lock:
            if draft_positions:
                self.totals.setdefault(DRAFT, _fresh())[0] += \
                    draft_positions
            if num_verified is not None and len(num_verified):
                assert num_top1 is not None and expected_top1 is not None  # given together
                code = class_codes(temperature, top_p, top_k)
                has_pit = np.zeros(len(num_verified), dtype=bool) if pit_sum is None or \
                    pit_var is None else np.isfinite(pit_sum) & np.isfinite(pit_var)
                for c in np.unique(code[num_verified > 0]).tolist():
                    rows = (code == c) & (num_verified > 0)
                    acc = self.totals.setdefault(c, _fresh())
                    acc[0] += int(num_verified[rows].sum())
                    acc[1] += int(num_top1[rows].sum())
                    acc[2] += float(expected_top1[rows].sum())
                    with_pit = rows & has_pit
                    if with_pit.any():
                        assert pit_sum is not None and pit_var is not None  # has_pit
                        acc[3] += int(num_verified[with_pit].sum())
                        acc[4] += float(pit_sum[with_pit].sum())
                        acc[5] += float(pit_var[with_pit].sum())
                    if accept is not None:
                        trials, hits, expected, var = accept
                        tried = rows & np.isfinite(expected)
                        if tried.any():
                            acc[6] += int(trials[tried].sum())
                            acc[7] += int(hits[tried].sum())
                            acc[8] += float(expected[tried].sum())
                            acc[9] += float(var[tried].sum())
                    if resid is not None:
                        read = rows & np.isfinite(resid[0])
                        if read.any():
                            acc[10] += int(read.sum())
                            acc[11] += float(resid[0][read].sum())
                            acc[12] += float(resid[1][read].sum())
                    if sharp is not None:
                        read = rows & np.isfinite(sharp[0])
                        if read.any():
                            acc[13] += float(sharp[0][read].sum())
                            for i, x in enumerate(sharp[1][read].sum(axis=0).tolist()):
                                acc[14 + i] += x
            if structural:
                self.totals.setdefault(0, _fresh())
                self.decided.add(0)
            for c, acc in self.totals.items():
                if c not in self.decided and self._decides(c, *acc):
                    self.decided.add(c)
            self._decided_codes = np.array(sorted(self.decided), dtype=np.int64)

    def _decides(self, c: int, n: float, k: float, expected: float, pit_n: float = 0,
                 pit_sum: float = 0.0, pit_var: float = 0.0, trials: float = 0,
                 hits: float = 0, accept_expected: float = 0.0,
                 accept_var: float = 0.0, resid_n: float = 0, resid_sum: float = 0.0,
                 resid_var: float = 0.0, sharp_n: float = 0.0, *sharp_llr: float) -> bool:
        if c == DRAFT:
            return n >= DRAFT_POSITIONS
        if not n:
            return False
        if n >= self.undecidable_positions:
            return True
        if c == 0:
            tie = 0.01
            return decide_rate(int(k), int(n), 1.0 - tie, 1.0 - tie - self.min_excess,
                               alpha=self.alpha, pass_alpha=self.pass_alpha).state != INCONCLUSIVE
        exp = min(1.0, max(0.0, expected / n))
        state = truth_state(int(k), int(n), exp, self.min_excess, alpha=self.alpha,
                            pass_alpha=self.pass_alpha)
        dist = pit.decide(pit_sum, int(pit_n), pit_var, alpha=self.alpha,
                          pass_alpha=self.pass_alpha).state if pit_n else None
        rule = pit.decide_sum(hits - accept_expected, int(trials), accept_var, 1.0,
                              alpha=self.alpha, pass_alpha=self.pass_alpha,
                              pass_shift=pit.ACCEPT_PASS_SHIFT,
                              fail_shift=pit.ACCEPT_FAIL_SHIFT).state if trials else None
        resid = pit.decide(resid_sum, int(resid_n), resid_var, alpha=self.alpha,
                           pass_alpha=self.pass_alpha,
                           pass_shift=pit.RESID_PASS_SHIFT).state if resid_n else None
        sharpness = sharp_decide(sharp_llr, int(sharp_n), alpha=self.alpha,
                                 pass_alpha=self.pass_alpha).state if sharp_n else None
        if FAIL in (state, dist, rule, resid, sharpness):
            return True
        top1 = state != INCONCLUSIVE or (1.0 - exp <= self.min_excess and n >= 512)
        # the sharpness test too: a temperature applied wrongly moves the top-1 share and the
        # PIT too little to keep the statistics coming by themselves
        return top1 and dist in (None, PASS) and rule in (None, PASS) and \
            resid in (None, PASS) and sharpness in (None, PASS)

    def state(self) -> dict[str, Any]:
        """What it has decided, for tests and the engine's log."""
        with self._lock:
            return {"decided": sorted(self.decided), "totals": {c: list(v) for c, v in self.totals.items()},
                    "full_steps": self.num_full_steps}
