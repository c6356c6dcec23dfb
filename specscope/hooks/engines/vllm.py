"""vLLM V1: a general plugin (entry point ``vllm.general_plugins``) that, when the user opts in
with ``SPECSCOPE_VLLM=1``, wraps ``RejectionSampler.forward`` in every engine process and
records per request the drafted and accepted counts and the batch's sampling mode
(``all_greedy`` / ``all_random`` from the sampling metadata, host booleans). Accepted counts are
computed on the device from the output token ids (placeholder -1 after the last committed
token): no host sync. The rejection sampler does not see request ids, so requests are named by
their row in the batch; per-request temperatures are device tensors there and are not read
(recorded as NaN, "unknown").
"""

from __future__ import annotations

import math
import os
from typing import Any

from ... import schema

PLACEHOLDER_TOKEN_ID = -1


def batch_mode(sampling_metadata: Any) -> str:
    if getattr(sampling_metadata, "all_greedy", False):
        return schema.GREEDY
    if getattr(sampling_metadata, "all_random", False):
        return schema.SPECULATIVE_SAMPLING
    return "mixed"


def record_rejection(recorder: Any, metadata: Any, sampling_metadata: Any, output_token_ids: Any) -> None:
    """One RejectionSampler.forward call as a verify-step record."""
    num_drafted = list(metadata.num_draft_tokens)
    accepted = (output_token_ids != PLACEHOLDER_TOKEN_ID).sum(dim=1) - 1  # bonus excluded
    mode = batch_mode(sampling_metadata)
    temps = [0.0 if mode == schema.GREEDY else math.nan] * len(num_drafted)
    recorder.record_verify(
        request_ids=[f"row{i}" for i in range(len(num_drafted))], num_accepted=accepted,
        num_drafted=max(num_drafted) if num_drafted else 0, temperature=temps, mode_used=mode)


def install(recorder: Any = None) -> list[str]:
    from vllm.v1.sample import rejection_sampler as module  # type: ignore

    from . import LazyRecorder, default_recorder

    cls = module.RejectionSampler
    if getattr(cls.forward, "_specscope", False):
        return []
    original = cls.forward
    lazy = LazyRecorder(recorder)

    def forward(self, metadata, draft_probs, logits, sampling_metadata, *args, **kwargs):
        out = original(self, metadata, draft_probs, logits, sampling_metadata, *args, **kwargs)
        lazy.record(
            lambda: default_recorder(
                "vllm", algorithm="unknown", num_steps=max(metadata.num_draft_tokens, default=0),
                verify_mode=schema.SPECULATIVE_SAMPLING),
            lambda rec: record_rejection(rec, metadata, sampling_metadata, out.sampled_token_ids))
        return out

    forward._specscope = True
    cls.forward = forward
    return ["vllm.v1.sample.rejection_sampler.RejectionSampler.forward"]


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
