"""Hugging Face assisted generation: record every verify step of
``model.generate(..., assistant_model=...)`` with one context manager. Stdlib and torch at
import; transformers is imported when attaching (the user's process already has it).

    with specscope.hooks.hf.attach(recorder, model):
        model.generate(input_ids, assistant_model=draft, max_new_tokens=64)

Patch points (transformers 5.x, ``transformers.generation.candidate_generator``):
``AssistedCandidateGenerator.get_candidates`` (the draft: its candidate length) and
``update_candidate_strategy(input_ids, scores, num_matches)``, which the assisted-decoding loop
calls after each verify with the accepted count (bonus excluded) and the target's processed
scores. Nothing here syncs: lengths are tensor shapes, ``num_matches`` is already a host int.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any, Iterator

import torch

from .. import schema
from .guard import SPECSCOPE_ERRORS, guarded_phase

_ids = itertools.count()


def _mode(cfg: Any, has_draft_logits: bool) -> tuple[float, str]:
    """(requested temperature, mode used) of a generation config."""
    if not getattr(cfg, "do_sample", False):
        return 0.0, schema.GREEDY
    temperature = float(getattr(cfg, "temperature", 1.0) or 1.0)
    return temperature, (schema.SPECULATIVE_SAMPLING if has_draft_logits else schema.TARGET_TEMPERATURE)


class _Request:
    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.t_arrival_ns = time.time_ns()
        self.chunks: list[tuple[int, int]] = []
        self.prompt_len = 0


@contextlib.contextmanager
def attach(recorder: Any, model: Any = None) -> Iterator[None]:
    """Record assisted-generation steps (and, with ``model``, each generate call as a request)."""
    from transformers.generation import candidate_generator as cg

    cls = cg.AssistedCandidateGenerator
    orig_get, orig_update = cls.get_candidates, cls.update_candidate_strategy
    state: dict[str, Any] = {"request": None, "draft_phase": None}

    def get_candidates(self, input_ids, *args, **kwargs):
        with guarded_phase(lambda: recorder.phase("draft"), recorder.count_error):
            out = orig_get(self, input_ids, *args, **kwargs)
        try:
            self._specscope_lengths = (input_ids.shape[1], out[0].shape[1], out[1] is not None)
            state["t_verify"] = (time.time_ns(), time.perf_counter_ns())
        except SPECSCOPE_ERRORS:
            recorder.count_error()
        return out

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        try:
            _record_step(self, recorder, state, input_ids, scores, num_matches)
        except SPECSCOPE_ERRORS:
            recorder.count_error()
        return orig_update(self, input_ids, scores, num_matches)

    cls.get_candidates = get_candidates
    cls.update_candidate_strategy = update_candidate_strategy
    orig_generate = None
    if model is not None:
        orig_generate = model.generate

        def generate(*args, **kwargs):
            req = _Request(f"hf-{next(_ids)}")
            inputs = kwargs.get("input_ids", args[0] if args else None)
            req.prompt_len = int(inputs.shape[-1]) if isinstance(inputs, torch.Tensor) else 0
            state["request"] = req
            try:
                return orig_generate(*args, **kwargs)
            finally:
                state["request"] = None
                _finish(recorder, req)

        model.generate = generate
    try:
        yield
    finally:
        cls.get_candidates, cls.update_candidate_strategy = orig_get, orig_update
        if model is not None:
            model.generate = orig_generate


def _record_step(gen: Any, recorder: Any, state: dict, input_ids: torch.Tensor,
                 scores: torch.Tensor, num_matches: Any) -> None:
    cur, cand_len, has_logits = gen._specscope_lengths
    drafted = cand_len - cur
    accepted = int(num_matches) if not isinstance(num_matches, torch.Tensor) else None
    temperature, mode = _mode(gen.generation_config, has_logits)
    req = state.get("request")
    request_id = req.request_id if req else "hf"
    dev = scores.device
    if accepted is None:  # a tensor count: keep it on the device, no readback
        n_acc = num_matches.reshape(1).to(dev)
        committed, logits = None, None
    else:
        n_acc = torch.full((1,), accepted, dtype=torch.long, device=dev)
        width = drafted + 1
        committed = torch.zeros(1, width, dtype=torch.long, device=dev)
        new = input_ids[:, cur:cur + accepted + 1].to(dev)
        committed[:, :new.shape[1]] = new
        logits = scores[:, :width]
    # the scores are already the sampling distribution's logits (temperature, top-k/top-p
    # applied by the logits processors): the statistics use them as they are
    recorder.record_verify(
        request_ids=[request_id], num_accepted=n_acc, num_drafted=drafted,
        temperature=[temperature], top_p=[float(getattr(gen.generation_config, "top_p", 1.0) or 1.0)],
        top_k=[int(getattr(gen.generation_config, "top_k", 0) or 0)], mode_used=mode,
        committed_tokens=committed if logits is not None else None, target_logits=logits,
        logits_processed=True)
    if req is not None and accepted is not None:
        req.chunks.append((time.time_ns(), accepted + 1))
    t_verify = state.pop("t_verify", None)
    if t_verify is not None:  # the target's verify forward and acceptance, host clock
        recorder.phases.record_host("verify", recorder._step - 1, t_verify[0],
                                    time.perf_counter_ns() - t_verify[1])


def _finish(recorder: Any, req: _Request) -> None:
    try:
        now = time.time_ns()
        chunks = req.chunks
        recorder.record_request(schema.RequestRecord(
            run_id=recorder.run.run_id, rank=recorder.rank, request_id=req.request_id,
            t_arrival_ns=req.t_arrival_ns, t_first_token_ns=chunks[0][0] if chunks else now,
            t_finish_ns=chunks[-1][0] if chunks else now, num_prompt_tokens=req.prompt_len,
            num_output_tokens=sum(n for _, n in chunks),
            chunk_times_ns=tuple(t for t, _ in chunks), chunk_num_tokens=tuple(n for _, n in chunks)))
    except SPECSCOPE_ERRORS:
        recorder.count_error()
