"""vLLM V1: a general plugin (entry point ``vllm.general_plugins``) that, when the user opts in
with ``SPECSCOPE_VLLM=1``, patches every engine process:

- ``GPUModelRunner._sample`` names the batch for the verify call inside it: the request ids
  (``input_batch.req_ids``) and each request's temperature, top-p and top-k from the input
  batch's host-side arrays (``temperature_cpu``, ``top_p_cpu``, ``top_k_cpu``; vLLM keeps them
  on the host to build its device tensors, so reading them adds no sync);
- ``RejectionSampler.forward`` is timed as the ``verify_sample`` phase (CUDA events, resolved
  later) and recorded per request: drafted and accepted counts and the mode the batch ran
  (``all_greedy`` / ``all_random`` from the sampling metadata, host booleans; in a mixed
  batch, per row from its temperature, as vLLM's sampler chooses). Accepted counts come from
  the output token ids on the device (placeholder -1 after the last committed token): no host
  sync.

Outside ``_sample`` (a direct call), requests are named by their row and their temperatures
recorded as unknown (NaN).
"""

from __future__ import annotations

import contextvars
import math
import os
from typing import Any

from ... import schema

PLACEHOLDER_TOKEN_ID = -1
_BATCH: contextvars.ContextVar[dict | None] = contextvars.ContextVar("specscope_vllm_batch",
                                                                    default=None)


def batch_mode(sampling_metadata: Any) -> str:
    if getattr(sampling_metadata, "all_greedy", False):
        return schema.GREEDY
    if getattr(sampling_metadata, "all_random", False):
        return schema.SPECULATIVE_SAMPLING
    return "mixed"


def batch_facts(input_batch: Any, num_reqs: int) -> dict | None:
    """Request ids and sampling parameters of the first ``num_reqs`` rows, host values only."""
    import numpy as np

    try:
        ids = [str(r) for r in list(input_batch.req_ids)[:num_reqs]]
        facts = {"ids": ids}
        for key, attr, dtype in (("temperature", "temperature_cpu", np.float64),
                                 ("top_p", "top_p_cpu", np.float64), ("top_k", "top_k_cpu", np.int64)):
            arr = getattr(input_batch, attr, None)
            if arr is not None:  # host arrays: copied as arrays, no per-request Python work
                facts[key] = np.array(arr[:num_reqs], dtype=dtype)
        vocab = getattr(input_batch, "vocab_size", None)
        if "top_k" in facts:  # vLLM stores "no top-k" as the vocabulary size
            k = facts["top_k"]
            facts["top_k"] = np.where((k <= 0) | ((k >= vocab) if vocab else False), 0, k)
        return facts if len(ids) == num_reqs else None
    except Exception:
        return None


def record_rejection(recorder: Any, metadata: Any, sampling_metadata: Any, output_token_ids: Any,
                     facts: dict | None = None) -> None:
    """One RejectionSampler.forward call as a verify-step record."""
    num_drafted = list(metadata.num_draft_tokens)
    n = len(num_drafted)
    accepted = (output_token_ids != PLACEHOLDER_TOKEN_ID).sum(dim=1) - 1  # bonus excluded
    mode = batch_mode(sampling_metadata)
    if facts is not None and len(facts["ids"]) == n:
        ids, temps = facts["ids"], facts.get("temperature")
        top_p, vocab_k = facts.get("top_p"), facts.get("top_k")
        if temps is None:
            temps = [math.nan] * n
        elif mode == "mixed":  # vLLM picks argmax or sampling per row
            mode = [schema.GREEDY if t <= 1e-5 else schema.SPECULATIVE_SAMPLING
                    for t in temps.tolist()]
    else:
        ids = [f"row{i}" for i in range(n)]
        temps = [0.0 if mode == schema.GREEDY else math.nan] * n
        top_p = vocab_k = None
    recorder.record_verify(
        request_ids=ids, num_accepted=accepted, num_drafted=max(num_drafted) if num_drafted else 0,
        temperature=temps, top_p=top_p, top_k=vocab_k, mode_used=mode)


def install(recorder: Any = None) -> list[str]:
    from vllm.v1.sample import rejection_sampler as module  # type: ignore

    from ..guard import SPECSCOPE_ERRORS
    from . import LazyRecorder, default_recorder

    cls = module.RejectionSampler
    if getattr(cls.forward, "_specscope", False):
        return []
    original = cls.forward
    lazy = LazyRecorder(recorder)

    def make(metadata):
        return lambda: default_recorder(
            "vllm", algorithm="unknown", num_steps=max(metadata.num_draft_tokens, default=0),
            verify_mode=schema.SPECULATIVE_SAMPLING)

    def forward(self, metadata, draft_probs, logits, sampling_metadata, *args, **kwargs):
        with lazy.phase(make(metadata), "verify_sample"):
            out = original(self, metadata, draft_probs, logits, sampling_metadata, *args, **kwargs)
        lazy.record(make(metadata), lambda rec: record_rejection(
            rec, metadata, sampling_metadata, out.sampled_token_ids, _BATCH.get()))
        return out

    forward._specscope = True
    forward._specscope_recorder = lazy
    cls.forward = forward
    patched = ["vllm.v1.sample.rejection_sampler.RejectionSampler.forward"]
    try:
        from vllm.v1.worker import gpu_model_runner as runner_mod  # type: ignore
    except Exception:  # the worker module needs a GPU build; the sampler hook still works
        return patched
    runner = runner_mod.GPUModelRunner
    if not getattr(runner._sample, "_specscope", False):
        sample = runner._sample

        def _sample(self, logits, spec_decode_metadata, *args, **kwargs):
            token = None
            if spec_decode_metadata is not None:
                try:
                    facts = batch_facts(self.input_batch,
                                        len(spec_decode_metadata.num_draft_tokens))
                    token = _BATCH.set(facts)
                except SPECSCOPE_ERRORS:
                    lazy.count_error()
            try:
                return sample(self, logits, spec_decode_metadata, *args, **kwargs)
            finally:
                if token is not None:
                    _BATCH.reset(token)

        _sample._specscope = True
        _sample._specscope_recorder = lazy
        runner._sample = _sample
        patched.append("vllm.v1.worker.gpu_model_runner.GPUModelRunner._sample")
    return patched


def register() -> None:
    """The ``vllm.general_plugins`` entry point: patches only when SPECSCOPE_VLLM=1."""
    if os.environ.get("SPECSCOPE_VLLM") != "1":
        return
    from . import covered

    if not covered("vllm"):
        import warnings
        from importlib import metadata

        warnings.warn(f"specscope: vllm {metadata.version('vllm')} is not a covered release; "
                      "not patching, the engine runs untouched", RuntimeWarning, stacklevel=2)
        return
    install()
