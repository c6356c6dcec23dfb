"""The Recorder: what an engine calls inside its verify path. Imports only stdlib and torch.

Hot-path rules: no host-device synchronisation (device data leaves through non-blocking copies
into a preallocated pinned ring, made complete by an event that the drain side polls); a full
ring drops and counts, it never blocks; an exception inside a hook is caught and counted, and
the recorder disables itself past ``max_errors``. Nothing here ever raises into the engine.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Any, Callable, Iterable, Protocol, Sequence

import numpy as np
import torch

from .. import schema
from ..io.columns import VerifyColumns
from . import stats as _stats
from .drain import StepMeta, host_copy
from .drainside import BUSY_INTERVAL_S, HEALTH_BUSY_S, IDLE_S, DrainSide  # noqa: F401
from .timing import PhaseTimer

StepPolicy = Callable[[int], bool]


def every_step(step: int) -> bool:
    """Statistics on every verify step."""
    return True


def every_n(n: int) -> StepPolicy:
    """A policy that computes sampling-truth statistics on one step in ``n``."""
    if n < 1:
        raise ValueError("n must be >= 1")
    return lambda step: step % n == 0


class Sink(Protocol):
    """Where drained records go (a trace writer, a collector, a network client).

    A sink whose ``accepts_columns`` is true receives verify steps as ``VerifyColumns`` (one
    per drain, no Python object per request entry); any other gets ``VerifyStepRecord``s.
    """

    def write(self, records: Sequence[Any]) -> None: ...

    def close(self) -> None: ...


#: the most requests of one verify step that get the statistics by default: at batch 64 the
#: deciding phase then costs under 2% of the sampling kernel on two CPU cores
DEFAULT_STATS_ROWS = 8

class Recorder(DrainSide):
    """Records verify steps, requests, phases and fallbacks of one engine rank.

    ``run`` is the run's metadata. ``max_batch`` and ``max_depth`` size the ring (the widest batch
    and deepest draft it accepts; larger batches are dropped and counted). ``stats_policy`` picks
    the steps whose sampling-truth statistics are computed (their cost is a few passes over the
    vocabulary per drafted position, and a top-k of it under top-k/top-p). ``max_stats_rows`` is
    their budget: the most requests of one step that get them (rows of a sampling class the
    policy has not decided go first, the rest take turns; None: every row). ``sinks`` receive drained
    records; call ``start()`` for a background drain thread, or ``drain()`` yourself.
    """

    def __init__(
        self,
        run: schema.RunRecord,
        *,
        rank: int = 0,
        device: str | torch.device = "cpu",
        max_batch: int = 1024,
        ring_slots: int = 64,
        max_pending_records: int = 1_000_000,
        stats_policy: StepPolicy = every_step,
        sinks: Iterable[Sink] = (),
        max_errors: int = 100,
        clock_ns: Callable[[], int] = time.time_ns,
        max_columns_entries: int = 1 << 16,
        max_stats_rows: int | None = DEFAULT_STATS_ROWS,
    ) -> None:
        # every record this process writes names its node (hostname, or $SPECSCOPE_NODE)
        self.run = run if run.node else dataclasses.replace(run, node=schema.default_node())
        self.node = self.run.node
        self.rank = rank
        self.device = torch.device(device)
        self.stats_policy = stats_policy
        self.sinks = list(sinks)
        self.max_errors = max_errors
        self.clock_ns = clock_ns
        self.enabled = True
        self.max_batch = max_batch
        self.max_pending_records = max_pending_records
        self.max_columns_entries = max_columns_entries  #: entries per drained VerifyColumns
        if max_stats_rows is not None and max_stats_rows < 1:
            raise ValueError("max_stats_rows must be >= 1 (None: every row)")
        self.max_stats_rows = max_stats_rows
        self._rows_turn = 0  #: where the next step's rows begin, so every row takes its turn
        self._scratch: torch.Tensor | None = None  #: see _scratch_for
        self._cuda = self.device.type == "cuda"
        self._host = torch.zeros(ring_slots, max_batch, _stats.ROW_WIDTH, dtype=torch.float32,
                                 pin_memory=self._cuda)
        self._host_np = self._host.numpy()  # the same memory, read by the drain side
        # the common step (no statistics, draft counts known on the host) sends only the
        # accepted counts: one small copy instead of a packed row per request
        self._acc = torch.zeros(ring_slots, max_batch, dtype=torch.int64, pin_memory=self._cuda)
        self._acc_np = self._acc.numpy()
        self._acc_slots = list(self._acc.unbind(0))  # per-slot views, made once
        self._free: collections.deque[int] = collections.deque(range(ring_slots))
        self._pending: collections.deque[tuple] = collections.deque()
        self._out: collections.deque[Any] = collections.deque()
        self._drain_lock = threading.Lock()
        self._step = 0
        self._asked: tuple[int, bool] | None = None  #: (step, the policy's answer for it)
        self.num_recorded = 0
        self.num_dropped_ring_full = 0
        self.num_dropped_batch_too_large = 0
        self.num_dropped_out_full = 0
        self.num_hook_errors = 0
        self.num_sink_errors = 0
        self.phases = PhaseTimer(run_id=run.run_id, rank=rank, device=self.device, node=self.node,
                                 emit=self._emit, on_error=self.count_error,
                                 is_enabled=lambda: self.enabled)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  #: set by the hot path when half the ring is waiting
        self._wake_at = max(1, ring_slots // 2)
        self._quiet = True  #: the drain's last wake found nothing: it sleeps its long interval
        self._last_ns = 0  #: when the last step drained was recorded (``clock_ns``)
        self._closed = False
        self._health_state: tuple | None = None  #: the counters as last written
        self._health_at = time.monotonic()
        self._beside: list[Any] = []  #: cumulative figures written with each health record
        self._out.append(self.run)

    # ----------------------------------------------------------------- hot path
    def record_verify(
        self,
        *,
        request_ids: Sequence[str],
        num_accepted: torch.Tensor,
        num_drafted: int | torch.Tensor | Sequence[int],
        temperature: Sequence[float],
        top_p: Sequence[float] | None = None,
        top_k: Sequence[int] | None = None,
        mode_used: str | Sequence[str] | None = None,
        num_draft_tokens: int | torch.Tensor | None = None,
        committed_tokens: torch.Tensor | None = None,
        target_logits: torch.Tensor | None = None,
        draft_top1_probs: torch.Tensor | None = None,
        step: int | None = None,
        logits_processed: bool = False,
        draft_depth: int | None = None,
        depth_reason: str = "",
        draft_tokens: torch.Tensor | None = None,
        draft_token_probs: torch.Tensor | None = None,
        draft_probs: torch.Tensor | None = None,
    ) -> None:
        """Record one verify step of a batch. Never syncs, never blocks, never raises.

        ``num_accepted`` (device, ``[B]``): accepted draft tokens per request, bonus excluded.
        ``num_drafted``: draft tokens per request, one for the batch or per request (host ints
        or a device tensor): an n-gram drafter proposes per request.
        ``temperature``/``top_p``/``top_k``: the requested sampling parameters, host values.
        ``mode_used``: the sampling mode the verify code path ran, one or per request; by
        default the mode requested. ``committed_tokens`` ``[B, P]`` with ``target_logits``
        ``[B, P, V]`` (P = drafted + 1 positions along the verified path) enable the
        sampling-truth statistics; ``draft_top1_probs`` ``[B, D]`` the draft-health histogram.
        ``logits_processed``: the logits already are the sampling distribution's (temperature and
        top-k/top-p applied, as Hugging Face's logits processors leave them), so the statistics
        take them as they are. ``draft_depth``: the k this step ran with (an adaptive policy
        changes it; ``depth_reason`` says why, on the step where it changed).
        ``draft_tokens`` ``[B, D]`` (-1 where a row drafted fewer), with the sampling-truth
        inputs, enable the acceptance-rule statistics; ``draft_token_probs`` ``[B, D]``: the
        draft's probability of each (None: a deterministic draft, or a verify that accepts a
        draft only where a sample of the target equals it). ``draft_probs`` ``[B, D, V]``: the
        draft's whole distribution at each drafted position, where the engine has it: the
        residual rule for a sampled draft needs it (a deterministic draft's is one-hot).
        """
        if not self.enabled:
            return
        try:
            self._record_verify(request_ids, num_accepted, num_drafted, temperature, top_p, top_k,
                                mode_used, num_draft_tokens, committed_tokens, target_logits,
                                draft_top1_probs, step, logits_processed, draft_depth,
                                depth_reason, draft_tokens, draft_token_probs, draft_probs)
        except (Exception, SystemExit):
            self.count_error()

    def _record_verify(self, request_ids, num_accepted, num_drafted, temperature, top_p, top_k,
                       mode_used, num_draft_tokens, committed_tokens, target_logits,
                       draft_top1_probs, step, logits_processed=False, draft_depth=None,
                       depth_reason="", draft_tokens=None, draft_token_probs=None,
                       draft_probs=None) -> None:
        batch = len(request_ids)
        if step is None:
            step = self._step
        self._step = step + 1
        if batch > self.max_batch:
            self.num_dropped_batch_too_large += 1
            return
        try:
            idx = self._free.popleft()
        except IndexError:
            self.num_dropped_ring_full += 1
            return
        try:
            sampled = self._wants(step, temperature, top_p, top_k)
            has_truth = sampled and committed_tokens is not None and target_logits is not None
            has_hist = sampled and draft_top1_probs is not None
            lite = None
            if not (has_truth or has_hist) and isinstance(num_drafted, int) and \
                    (num_draft_tokens is None or isinstance(num_draft_tokens, int)):
                lite = (num_drafted, num_drafted if num_draft_tokens is None else num_draft_tokens)
                on_device = num_accepted.is_cuda
                if num_accepted.device.type == "cpu":
                    # host memory already: a plain numpy copy, no torch dispatch (which would
                    # release and retake the GIL). No device exists on this branch, so nothing
                    # here can wait on one; the sync guard, which flags .numpy() to catch device
                    # reads, is told so.
                    with torch._C.DisableTorchFunction():
                        self._acc_np[idx, :batch] = num_accepted.numpy()
                else:
                    src = num_accepted if num_accepted.dtype == torch.int64 \
                        else num_accepted.to(torch.int64)  # convert on the device, then copy
                    self._acc_slots[idx][:batch].copy_(src, non_blocking=True)
            else:
                if logits_processed:  # greedy rows stay greedy; sampled rows use the logits as given
                    stat_t, stat_p, stat_k = [1.0 if t > 0 else 0.0 for t in temperature], None, None
                else:
                    stat_t, stat_p, stat_k = temperature, top_p, top_k
                rows = self._stats_rows(batch, stat_t, stat_p, stat_k) if has_truth else None
                packed = self._pack(batch, num_accepted, num_drafted, num_draft_tokens, stat_t,
                                    stat_p, stat_k, committed_tokens, target_logits,
                                    draft_top1_probs, sampled, rows,
                                    None if logits_processed else draft_tokens,
                                    draft_token_probs, draft_probs)
                self._host[idx, :batch].copy_(packed, non_blocking=True)
                on_device = packed.is_cuda
            event = None
            if on_device:
                event = torch.cuda.Event()
                event.record()
        except BaseException:
            self._free.append(idx)
            raise
        meta = StepMeta(step, self.clock_ns(), tuple(request_ids), host_copy(temperature),
                        host_copy(top_p), host_copy(top_k),
                        mode_used if isinstance(mode_used, (str, type(None))) else tuple(mode_used),
                        has_truth, has_hist, -1 if draft_depth is None else int(draft_depth),
                        depth_reason, lite)
        self._pending.append((idx, batch, event, meta))
        waiting = len(self._pending)
        # the first step after a quiet spell wakes the drain at once (it sleeps its long
        # interval then); while busy it wakes every BUSY_INTERVAL_S, or at half a ring
        if (waiting >= self._wake_at or (waiting == 1 and self._quiet)) \
                and not self._wake.is_set():
            self._wake.set()

    def _scratch_for(self, logits: torch.Tensor) -> torch.Tensor:
        """A float32 buffer the size of ``logits``, kept between steps: the statistics' working
        copy under the row budget (at most ``max_stats_rows`` rows of logits) is not a fresh
        allocation every step."""
        n = logits.numel()
        if self._scratch is None or self._scratch.numel() < n or \
                self._scratch.device != logits.device:
            self._scratch = torch.empty(n, dtype=torch.float32, device=logits.device)
        return self._scratch[:n].view(logits.shape)

    def _stats_rows(self, batch: int, temperature: Any, top_p: Any, top_k: Any) -> Any:
        """This step's rows under the statistics budget (``policy.budget_rows``), or None."""
        from .policy import budget_rows

        rows, self._rows_turn = budget_rows(batch, self.max_stats_rows, self._rows_turn,
                                            self.stats_policy, temperature, top_p, top_k)
        return rows

    def _pack(self, batch, num_accepted, num_drafted, num_draft_tokens, temperature, top_p,
              top_k, committed, logits, draft_top1, sampled: bool, rows: Any = None,
              draft_tokens: Any = None, draft_q: Any = None,
              draft_probs: Any = None) -> torch.Tensor:
        dev = num_accepted.device
        cols = torch.zeros(batch, _stats.ROW_WIDTH, dtype=torch.float32, device=dev)
        if isinstance(num_drafted, (list, tuple)):
            num_drafted = self._to_device(num_drafted, torch.float32, dev)
        if isinstance(num_draft_tokens, (list, tuple)):
            num_draft_tokens = self._to_device(num_draft_tokens, torch.float32, dev)
        cols[:, _stats.COL_NUM_ACCEPTED] = num_accepted
        cols[:, _stats.COL_NUM_DRAFTED] = num_drafted
        cols[:, _stats.COL_NUM_DRAFT_TOKENS] = (num_drafted if num_draft_tokens is None
                                                else num_draft_tokens)
        if sampled:
            if committed is not None and logits is not None:
                acc = num_accepted
                if rows is not None:  # the step's budget: these rows only
                    pick = self._to_device(rows.tolist(), torch.long, dev)
                    logits, committed, acc = _rows_of(rows, pick, logits, committed, num_accepted)
                    if draft_tokens is not None:
                        (draft_tokens,) = _rows_of(rows, pick, draft_tokens)
                    if draft_q is not None:
                        (draft_q,) = _rows_of(rows, pick, draft_q)
                    if draft_probs is not None:
                        (draft_probs,) = _rows_of(rows, pick, draft_probs)
                    temperature, top_p, top_k = (None if v is None else [v[i] for i in rows]
                                                 for v in (temperature, top_p, top_k))
                temps = self._to_device(temperature, torch.float32, dev)
                tp = self._to_device(top_p, torch.float32, dev) if _active(top_p, 1.0) else None
                tk = self._to_device(top_k, torch.long, dev) if _active(top_k, 0) else None
                cut = None  # only the rows that asked for top-k or top-p take the truncated path
                if tp is not None or tk is not None:
                    cut = self._to_device([i for i in range(len(temperature)) if temperature[i] > 0
                                           and ((top_p is not None and top_p[i] < 1.0) or
                                                (top_k is not None and top_k[i] > 0))],
                                          torch.long, dev)
                out = _stats.verify_columns(logits, committed, acc, temps, tp, tk,
                                            scratch=self._scratch_for(logits) if rows is not None
                                            else None, truncated=cut,
                                            draft_tokens=draft_tokens,
                                            draft_token_probs=draft_q,
                                            draft_probs=draft_probs)
                if rows is not None:  # the other rows keep 0 verified positions: no statistics
                    out = torch.zeros(batch, out.shape[1], device=dev).index_copy_(0, pick, out)
                cols[:, _stats.COL_NUM_VERIFIED:_stats.COL_HIST] = out[:, :4]
                cols[:, _stats.COL_MISMATCH_MARGIN:] = out[:, 4:]
            if draft_top1 is not None:
                cols[:, _stats.COL_HIST:_stats.COL_MISMATCH_MARGIN] = \
                    _stats.draft_hist_columns(draft_top1)
        return cols

    def wants_stats(self, step: int | None = None, temperature: Any = None, top_p: Any = None,
                    top_k: Any = None) -> bool:
        """Whether the statistics policy samples ``step`` (by default the next verify step): an
        adapter asks before copying what only the statistics need. A policy that decides by
        the batch's sampling classes (``UntilDecided``) is given its parameters."""
        try:
            return self.enabled and self._wants(self._step if step is None else step,
                                                temperature, top_p, top_k)
        except (Exception, SystemExit):
            self.count_error()
            return False

    def _wants(self, step: int, temperature: Any, top_p: Any, top_k: Any) -> bool:
        # an adapter asks before the step (wants_stats) and the step asks again: the policy is
        # asked once per step, so both get the same answer and nothing is computed twice
        if self._asked is not None and self._asked[0] == step:
            return self._asked[1]
        wants = getattr(self.stats_policy, "wants", None)
        answer = bool(wants(step, temperature, top_p, top_k)) if wants is not None \
            else bool(self.stats_policy(step))
        self._asked = (step, answer)
        return answer

    def _tell_policy(self, cols: list[VerifyColumns]) -> None:
        """The drain side: what the statistics found, to a policy that decides from it."""
        observe = getattr(self.stats_policy, "observe", None)
        if observe is None:
            return
        for c in cols:
            if c.num_verified is None and c.draft_hist is None:
                continue
            hist = int(c.draft_hist.sum()) if c.draft_hist is not None else 0
            observe(c.temperature, c.top_p, c.top_k, c.num_verified, c.num_top1,
                    c.expected_top1, draft_positions=hist, pit_sum=c.pit_sum,
                    pit_var=c.pit_var, accept=None if c.accept_expected is None else (
                        np.minimum(c.num_accepted + 1, c.num_drafted), c.num_accepted,
                        c.accept_expected, c.accept_var),
                    sharp=None if c.sharp_positions is None or c.sharp_llr is None
                    else (c.sharp_positions, c.sharp_llr),
                    resid=None if c.resid_pit is None or c.resid_var is None
                    else (c.resid_pit, c.resid_var))

    def _to_device(self, values, dtype, dev) -> torch.Tensor:
        host = torch.tensor(values, dtype=dtype)
        if dev.type == "cuda":
            return host.pin_memory().to(dev, non_blocking=True)
        return host

    def record_request(self, record: schema.RequestRecord) -> None:
        """Record a finished request (host values only), stamped with this node."""
        self._emit(record if record.node else dataclasses.replace(record, node=self.node))

    def record_fallback(self, *, reason: str, request_id: str = "", temperature: float = 0.0,
                        top_p: float = 1.0, top_k: int = 0, mode_requested: str = "",
                        count: int = 1, step: int | None = None) -> None:
        """Record that verify fell back from the requested mode to argmax, and why."""
        if not self.enabled:
            return
        try:
            self._emit(schema.FallbackRecord(
                run_id=self.run.run_id, rank=self.rank, node=self.node,
                step=self._step if step is None else step, t_ns=self.clock_ns(), reason=reason,
                request_id=request_id, temperature=temperature, top_p=top_p, top_k=top_k,
                mode_requested=mode_requested, count=count))
        except (Exception, SystemExit):
            self.count_error()

    def phase(self, name: str, step: int | None = None):
        """Context manager timing one phase: CUDA events on a GPU, perf_counter_ns on the CPU."""
        return self.phases.phase(name, self._step if step is None else step)

    def _emit(self, record: Any) -> None:
        if not self.enabled:
            return
        if len(self._out) >= self.max_pending_records:
            self.num_dropped_out_full += 1
            return
        self._out.append(record)

    def count_error(self) -> None:
        """Count a failure inside specscope's hooks; past ``max_errors`` the recorder stops."""
        self.num_hook_errors += 1
        if self.num_hook_errors >= self.max_errors:
            self.enabled = False

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _rows_of(rows: Any, pick: torch.Tensor, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """``tensors`` at ``rows``: a view where the rows are consecutive, else a gather."""
    if rows[-1] - rows[0] + 1 == len(rows):
        return [t[int(rows[0]):int(rows[-1]) + 1] for t in tensors]
    return [t.index_select(0, pick) for t in tensors]


def _active(values: Sequence[float] | None, neutral: float) -> bool:
    return values is not None and any(v != neutral for v in values)
