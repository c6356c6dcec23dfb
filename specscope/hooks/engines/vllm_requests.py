"""vLLM V1's API-server side: each finished request as a RequestRecord of the server's run.
Stdlib only at import; vLLM's modules are imported when installing.

Patch points (``vllm.v1.engine.output_processor.OutputProcessor``):
``_update_stats_from_output(req_state, engine_core_output, engine_core_timestamp, ...)`` gives
each output chunk (its new tokens, at the engine core's monotonic timestamp), and
``_update_stats_from_finished(req_state, finish_reason, iteration_stats)`` the request's end.
vLLM keeps the timeline in ``req_state.stats`` (frontend wall-clock arrival, first-token latency,
engine-core first and last token times) only when it logs statistics (the default; not with
``--disable-log-stats``). The request's own acceptance comes from
``req_state.spec_decode_metrics`` when the server runs with
``--per-request-spec-decode-metrics summary|detailed``; otherwise it stays unknown (None).
``AsyncLLM.__init__`` and ``LLMEngine.__init__`` give the configuration for the run record.
``vllm.v1.spec_decode.metrics.SpecDecodingProm.observe(stats, engine_idx)`` is where vLLM adds
each step's speculative counts to the /metrics counters: the same counts, summed here, are
written with each health record as an EngineCountsRecord, so a trace holds vLLM's own figures
beside the verify steps the worker's hooks recorded (absent with ``--disable-log-stats``).
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any

from ... import schema

#: requests whose chunks are kept while they run; past this the oldest are forgotten (aborted
#: requests never finish, and this must not grow without bound inside the engine)
MAX_OPEN_REQUESTS = 8192


def request_record(run_id: str, req_state: Any, finish_reason: Any,
                   chunks: list[tuple[float, int]]) -> schema.RequestRecord | None:
    """A finished request from vLLM's request state; None without its timeline."""
    stats = getattr(req_state, "stats", None)
    if stats is None or not getattr(stats, "arrival_time", 0.0):
        return None
    arrival = int(stats.arrival_time * 1e9)
    first_ts = float(getattr(stats, "first_token_ts", 0.0) or 0.0)
    ttft = float(getattr(stats, "first_token_latency", 0.0) or 0.0)
    t_first = arrival + int(ttft * 1e9) if ttft > 0 else 0
    last_ts = float(getattr(stats, "last_token_ts", 0.0) or 0.0)
    t_finish = t_first + int((last_ts - first_ts) * 1e9) if t_first and last_ts else 0
    times, counts = [], []
    if t_first and first_ts:
        for ts, n in chunks:
            times.append(t_first + int((ts - first_ts) * 1e9))
            counts.append(int(n))
    spec = getattr(req_state, "spec_decode_metrics", None)
    steps = drafted = accepted = None
    hist: tuple[int, ...] = ()
    if spec is not None:
        h = [int(x) for x in getattr(spec, "histogram", [])]
        steps = sum(h)
        drafted = int(getattr(spec, "num_draft_tokens", 0))
        accepted = sum(j * c for j, c in enumerate(h))
        hist = (0, *h)  # index = tokens committed in the step, bonus included
    reason = getattr(finish_reason, "name", None) or str(finish_reason or "")
    temperature = getattr(req_state, "temperature", None)
    top_p = getattr(req_state, "top_p", None)
    return schema.RequestRecord(
        run_id=run_id, rank=0, request_id=str(req_state.request_id), t_arrival_ns=arrival,
        t_first_token_ns=t_first, t_finish_ns=t_finish,
        num_prompt_tokens=int(getattr(req_state, "prompt_len", 0) or 0),
        num_output_tokens=int(getattr(stats, "num_generation_tokens", 0) or 0),
        chunk_times_ns=tuple(times), chunk_num_tokens=tuple(counts),
        temperature=float(temperature) if temperature is not None else 0.0,
        top_p=float(top_p) if top_p is not None else 1.0, finish_reason=reason.lower(),
        num_verify_steps=steps, num_draft_tokens=drafted, num_accepted=accepted,
        accept_len_hist=hist)


class EngineCounts:
    """vLLM's speculative counters as its /metrics exports them, summed over engines; attached
    to the recorder, which writes them with each health record."""

    def __init__(self) -> None:
        self.num_drafts = self.draft_tokens = self.accepted_tokens = 0
        self.per_pos: list[int] = []
        self.attached = False  #: to the process's recorder, once it exists

    def observe(self, stats: Any) -> None:
        self.num_drafts += int(stats.num_drafts)
        self.draft_tokens += int(stats.num_draft_tokens)
        self.accepted_tokens += int(stats.num_accepted_tokens)
        per_pos = [int(x) for x in stats.num_accepted_tokens_per_pos]
        self.per_pos += [0] * (len(per_pos) - len(self.per_pos))
        for i, n in enumerate(per_pos):
            self.per_pos[i] += n

    def state(self) -> tuple:
        return (self.num_drafts, self.draft_tokens, self.accepted_tokens)

    def record(self, recorder: Any, final: bool) -> schema.EngineCountsRecord:
        return schema.EngineCountsRecord(
            run_id=recorder.run.run_id, engine="vllm", num_drafts=self.num_drafts,
            num_draft_tokens=self.draft_tokens, num_accepted=self.accepted_tokens,
            accepted_per_pos=tuple(self.per_pos), node=recorder.node, pid=os.getpid(),
            t_ns=time.time_ns(), final=final)


def install(config: dict[str, Any], *, patch: Any, make: Any, run_fields: Any) -> list[str]:
    """Patch the API server's request bookkeeping. From the adapter: ``config``, its shared slot
    for the run record's fields; ``patch(owner, name, make_wrapper, patched, label)``; ``make``,
    the recorder factory; ``run_fields(vllm_config)``. Returns what was patched."""
    from vllm.v1.engine import output_processor as op  # type: ignore

    from ..guard import SPECSCOPE_ERRORS
    from . import LazyRecorder

    lazy = LazyRecorder()
    _patch = patch
    open_chunks: collections.OrderedDict[str, list] = collections.OrderedDict()
    patched: list[str] = []

    def wrap_init(original):
        def __init__(self, vllm_config, *args, **kwargs):
            try:
                config.setdefault("fields", run_fields(vllm_config))
            except SPECSCOPE_ERRORS:
                lazy.count_error()
            return original(self, vllm_config, *args, **kwargs)
        return __init__

    for mod_name, cls_name in (("vllm.v1.engine.async_llm", "AsyncLLM"),
                               ("vllm.v1.engine.llm_engine", "LLMEngine")):
        try:
            import importlib

            cls = getattr(importlib.import_module(mod_name), cls_name)
            _patch(cls, "__init__", wrap_init, patched, f"{mod_name}.{cls_name}.__init__")
        except SPECSCOPE_ERRORS:
            lazy.count_error()

    def wrap_output(original):
        def _update_stats_from_output(self, req_state, engine_core_output, engine_core_timestamp,
                                      iteration_stats, *args, **kwargs):
            result = original(self, req_state, engine_core_output, engine_core_timestamp,
                              iteration_stats, *args, **kwargs)
            if iteration_stats is not None:
                try:
                    n = len(engine_core_output.new_token_ids)
                    if n:
                        rid = req_state.request_id
                        got = open_chunks.get(rid)
                        if got is None:
                            got = open_chunks[rid] = []
                            if len(open_chunks) > MAX_OPEN_REQUESTS:
                                open_chunks.popitem(last=False)
                        got.append((engine_core_timestamp, n))
                except SPECSCOPE_ERRORS:
                    lazy.count_error()
            return result
        return _update_stats_from_output

    def wrap_finished(original):
        def _update_stats_from_finished(self, req_state, finish_reason, iteration_stats,
                                        *args, **kwargs):
            result = original(self, req_state, finish_reason, iteration_stats, *args, **kwargs)
            if iteration_stats is not None:
                try:
                    chunks = open_chunks.pop(req_state.request_id, [])
                    lazy.record(make, lambda rec: _emit(rec, req_state, finish_reason, chunks))
                except SPECSCOPE_ERRORS:
                    lazy.count_error()
            return result
        return _update_stats_from_finished

    cls = op.OutputProcessor
    _patch(cls, "_update_stats_from_output", wrap_output, patched,
           "vllm.v1.engine.output_processor.OutputProcessor._update_stats_from_output")
    _patch(cls, "_update_stats_from_finished", wrap_finished, patched,
           "vllm.v1.engine.output_processor.OutputProcessor._update_stats_from_finished")
    counts = EngineCounts()

    def wrap_observe(original):
        def observe(self, spec_decoding_stats, *args, **kwargs):
            result = original(self, spec_decoding_stats, *args, **kwargs)
            try:
                counts.observe(spec_decoding_stats)
                if not counts.attached:
                    counts.attached = True
                    lazy.record(make, lambda rec: rec.attach(counts))
            except SPECSCOPE_ERRORS:
                lazy.count_error()
            return result
        return observe

    try:
        from vllm.v1.spec_decode import metrics as spec_metrics  # type: ignore

        _patch(spec_metrics.SpecDecodingProm, "observe", wrap_observe, patched,
               "vllm.v1.spec_decode.metrics.SpecDecodingProm.observe")
    except SPECSCOPE_ERRORS:  # requests are recorded without vLLM's own counts
        lazy.count_error()
    return patched


def _emit(recorder: Any, req_state: Any, finish_reason: Any, chunks: list) -> None:
    record = request_record(recorder.run.run_id, req_state, finish_reason, chunks)
    if record is not None:
        recorder.record_request(record)
