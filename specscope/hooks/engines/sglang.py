"""SGLang: wrap EAGLE verify (``eagle_utils.eagle_sample``) and record, per request, the
accepted count and whether the greedy verify path ran for requests that asked for sampling
(the HIP-without-rejection-sampling case). No host sync: counts stay device tensors; request
parameters come from the requests' own host-side sampling params. The call itself is timed as
the ``verify_sample`` phase.

On the steps the statistics policy samples, sampling truth: the target's logits
(``logits_output.next_token_logits``, copied on the device before the call) at each accepted
path's nodes (``accept_index``, -1 past the last) against the tokens committed there
(``predict`` at those nodes). Draft health is not recorded: SGLang's EAGLE verify samples from
the target alone and no draft probabilities reach it.
"""

from __future__ import annotations

from typing import Any

from ... import schema


def verify_mode_used(module: Any, batch: Any) -> str:
    """The verify path eagle_sample takes for this batch, by SGLang's own predicate."""
    try:
        from sglang.srt.server_args import get_spec  # type: ignore

        rejection = bool(get_spec().speculative_use_rejection_sampling)
    except Exception:
        rejection = False
    greedy = module._verify_uses_greedy(
        is_all_greedy=bool(batch.sampling_info.is_all_greedy), is_cpu=bool(module._is_cpu),
        is_hip=bool(module._is_hip), is_xpu=bool(module._is_xpu), use_rejection_sampling=rejection)
    if greedy:
        return schema.GREEDY
    return schema.SPECULATIVE_SAMPLING if rejection else schema.TARGET_TEMPERATURE


def truth_inputs(logits: Any, predict: Any, accept_index: Any) -> dict:
    """Target logits ``[B, P, V]`` at each request's accepted path and the tokens committed
    there ``[B, P]`` (-1 past the last), from eagle_sample's outputs; device tensors only."""
    import torch

    index = accept_index.long()
    rows = index.clamp_min(0)
    committed = torch.where(index >= 0, predict.long().reshape(-1)[rows],
                            torch.full_like(rows, -1))
    return {"target_logits": logits[rows], "committed_tokens": committed}


def record_eagle_sample(recorder: Any, verify_input: Any, batch: Any, result: tuple,
                        mode_used: str, logits: Any = None) -> None:
    """Turn one eagle_sample call into a verify-step record; ``logits``: the target's logits
    as they were before the call (sampled steps only)."""
    predict, num_correct_drafts, accept_index = result
    reqs = list(batch.reqs)
    if not reqs:
        return
    params = [r.sampling_params for r in reqs]
    temps = [float(getattr(p, "temperature", 0.0) or 0.0) for p in params]
    used = [schema.GREEDY if t <= 0 else mode_used for t in temps]
    truth = {} if logits is None else truth_inputs(logits, predict, accept_index)
    recorder.record_verify(
        request_ids=[str(r.rid) for r in reqs], num_accepted=num_correct_drafts,
        num_drafted=int(verify_input.spec_steps), num_draft_tokens=int(verify_input.draft_token_num) - 1,
        temperature=temps, top_p=[float(getattr(p, "top_p", 1.0) or 1.0) for p in params],
        top_k=[max(0, int(getattr(p, "top_k", 0) or 0)) for p in params], mode_used=used,
        **truth)


def install(recorder: Any = None) -> list[str]:
    import sglang.srt.speculative.eagle_utils as module  # type: ignore

    from ..guard import SPECSCOPE_ERRORS
    from . import LazyRecorder, default_recorder

    if getattr(module.eagle_sample, "_specscope", False):
        return []
    original = module.eagle_sample
    lazy = LazyRecorder(recorder)

    def eagle_sample(verify_input, batch, logits_output, *args, **kwargs):
        def make():
            return default_recorder(
                "sglang", algorithm="eagle", num_steps=int(verify_input.spec_steps),
                topk=int(verify_input.topk), num_draft_tokens=int(verify_input.draft_token_num),
                backend="hip" if module._is_hip else ("cuda" if module._is_cuda else "cpu"),
                verify_mode=schema.TARGET_TEMPERATURE)

        logits = None
        try:
            rec = lazy.get(make)
            if rec is not None and rec.enabled and rec.wants_stats():
                logits = logits_output.next_token_logits.detach().clone()  # on the device
        except SPECSCOPE_ERRORS:
            lazy.count_error()
        with lazy.phase(make, "verify_sample"):  # CUDA events on a GPU: no sync
            result = original(verify_input, batch, logits_output, *args, **kwargs)
        lazy.record(make, lambda rec: record_eagle_sample(
            rec, verify_input, batch, result, verify_mode_used(module, batch), logits))
        return result

    eagle_sample._specscope = True
    eagle_sample._specscope_recorder = lazy
    module.eagle_sample = eagle_sample
    return ["sglang.srt.speculative.eagle_utils.eagle_sample"]
