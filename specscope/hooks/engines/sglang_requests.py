"""SGLang's API server side: each finished request as a ``RequestRecord`` (arrival, first token
and finish times, prompt and output tokens, its own speculative counts), from the tokenizer
manager's per-output metrics callback (``TokenizerManager.collect_metrics``, which SGLang calls
with ``--enable-metrics``). Host values only; SGLang's own timestamps (``perf_counter``) are put
on the wall clock once per request.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from ... import sampling, schema
from ...sampling import TOP_K_ALL  # noqa: F401 (SGLang's "top_k off", re-exported)


def requested(params: Any) -> tuple[float, float, int]:
    """(temperature, top_p, top_k) a request asked for, in specscope's terms (temperature 0 =
    greedy, top_k 0 = off), from SGLang's ``SamplingParams`` (normalised or not: its top_k 1 is
    greedy, -1 and ``TOP_K_ALL`` are off), classed by ``specscope.sampling``."""
    temperature = getattr(params, "temperature", None)
    temperature = 1.0 if temperature is None else float(temperature)
    top_p = float(getattr(params, "top_p", None) or 1.0)
    top_k = getattr(params, "top_k", None)
    c = sampling.code(temperature, top_p, None if top_k is None else int(top_k), engine="sglang")
    if not c & sampling.SAMPLED:
        return 0.0, 1.0, 0
    return temperature, top_p, int(top_k) if top_k is not None and c & sampling.TOP_K else 0


def _at(ns_now: int, pc_now: float, pc: float) -> int:
    """A ``perf_counter`` reading as wall-clock ns (0 when SGLang did not set it)."""
    return int(ns_now - (pc_now - pc) * 1e9) if pc else 0


def _item(values: Any, i: int, default: Any = None) -> Any:
    try:
        return values[i] if values is not None and len(values) > i else default
    except TypeError:
        return default


def request_record(run_id: str, state: Any, recv_obj: Any, i: int,
                   num_draft_tokens: int) -> schema.RequestRecord:
    """One finished request from the tokenizer manager's state and the output batch ``i``."""
    stats = state.time_stats
    ns_now, pc_now = time.time_ns(), time.perf_counter()
    params = getattr(state.obj, "sampling_params", None) or {}
    if isinstance(params, list):
        params = params[0] if params else {}
    temperature, top_p, top_k = requested(SimpleNamespace(**params) if isinstance(params, dict)
                                          else params)
    steps = _item(getattr(recv_obj, "spec_verify_ct", None), i)
    accepted = _item(getattr(recv_obj, "spec_num_correct_drafts", None), i)
    reason = _item(getattr(recv_obj, "finished_reasons", None), i) or {}
    return schema.RequestRecord(
        run_id=run_id, rank=0, request_id=str(recv_obj.rids[i]),
        t_arrival_ns=_at(ns_now, pc_now, stats.created_time),
        t_first_token_ns=_at(ns_now, pc_now, stats.first_token_time),
        t_finish_ns=_at(ns_now, pc_now, stats.finished_time) or ns_now,
        num_prompt_tokens=int(_item(recv_obj.prompt_tokens, i, 0)),
        num_output_tokens=int(_item(getattr(recv_obj, "completion_tokens", None), i, 0)),
        temperature=temperature, top_p=top_p, top_k=top_k,
        finish_reason=str(reason.get("type", "")) if isinstance(reason, dict) else str(reason),
        num_verify_steps=None if steps is None else int(steps),
        num_draft_tokens=None if steps is None or num_draft_tokens <= 0
        else int(steps) * (num_draft_tokens - 1),
        num_accepted=None if accepted is None else int(accepted))


def install(lazy: Any, make: Any, num_draft_tokens: Any) -> list[str]:
    """Patch ``TokenizerManager.collect_metrics``; ``num_draft_tokens()`` gives SGLang's
    ``speculative_num_draft_tokens`` (0 without speculation)."""
    try:
        from sglang.srt.managers.tokenizer_manager import TokenizerManager  # type: ignore
    except (Exception, SystemExit):
        return []
    original = TokenizerManager.__dict__.get("collect_metrics")
    if original is None or getattr(original, "_specscope", False):
        return []

    def collect_metrics(self, state, recv_obj, i, *args, **kwargs):
        result = original(self, state, recv_obj, i, *args, **kwargs)
        if getattr(state, "finished", False):
            lazy.record(make, lambda rec: rec.record_request(request_record(
                rec.run.run_id, state, recv_obj, i, num_draft_tokens())))
        return result

    collect_metrics._specscope = True  # type: ignore[attr-defined]
    TokenizerManager.collect_metrics = collect_metrics
    return ["sglang.srt.managers.tokenizer_manager.TokenizerManager.collect_metrics"]
