"""vLLM V1: a general plugin (entry point ``vllm.general_plugins``) that, when the user opts in
with ``SPECSCOPE_VLLM=1``, patches every process of one vLLM server (one run for all of them).
Stdlib and torch at import; vLLM's modules are imported only when installing.

In the engine-core process:

- ``GPUModelRunner._sample`` (the CPU runner inherits it) names the verify call's batch: the
  request ids (``input_batch.req_ids``), each request's temperature, top-p and top-k from the
  input batch's host arrays (``temperature_cpu``, ``top_p_cpu``, ``top_k_cpu``: vLLM keeps them
  on the host to build its device tensors, so reading them adds no sync), and the engine's
  configuration (the run record);
- ``RejectionSampler.forward`` is timed as the ``verify_sample`` phase and recorded per request
  with a draft: each row's own draft count (``metadata.num_draft_tokens``, host ints: n-gram
  proposes per request, often nothing, and a row without a draft is no verify entry, as vLLM's
  counters count it), accepted counts from the output token ids on the device (placeholder -1
  after the last committed token), and the mode the sampling metadata says it ran. A call that
  does not come through ``_sample`` (vLLM's warm-up, profile and dummy batches) is no verify
  step and is not recorded.
- On the steps the statistics policy samples (every step until each sampling class's checks have
  decided, then one in ``SPECSCOPE_STATS_EVERY``, default 32), the seeds' checks: the target's raw logits at each row's verified positions are copied before
  vLLM processes them in place, and with the committed tokens give sampling truth; with
  ``draft_sample_method: probabilistic``, ``draft_probs`` give the draft's top-1 probability per
  drafted position (draft health). Logits processors (penalties, bad words, min tokens) are not
  replayed: the statistics describe temperature, top-p and top-k only.

In the API-server process (``vllm_requests``): each finished request with its timeline.
"""

from __future__ import annotations

import contextvars
import math
import os
import time
from typing import Any

from ... import sampling, schema

PLACEHOLDER_TOKEN_ID = -1
#: speculative_config.method -> specscope's algorithm label
ALGORITHMS = {"draft_model": "draft-model", "ngram": "ngram", "ngram_gpu": "ngram",
              "eagle": "eagle", "eagle3": "eagle", "mtp": "mtp", "suffix": "suffix",
              "medusa": "medusa", "mlp_speculator": "mlp-speculator"}
DEFAULT_STATS_EVERY = 32
_BATCH: contextvars.ContextVar[dict | None] = contextvars.ContextVar("specscope_vllm_batch",
                                                                    default=None)
#: the engine configuration, once a hook has seen it (AsyncLLM / LLMEngine / the model runner)
_CONFIG: dict[str, Any] = {}


def engine_version() -> str:
    """vLLM's version from the package it imports, else from the distribution providing it."""
    from . import installed_version

    return installed_version("vllm")


def run_fields(vllm_config: Any) -> dict[str, Any]:
    """The run record's fields from vLLM's configuration; a field vLLM does not have is left
    at the record's default."""
    model_cfg = getattr(vllm_config, "model_config", None)
    spec = getattr(vllm_config, "speculative_config", None)
    model = str(getattr(model_cfg, "served_model_name", "") or getattr(model_cfg, "model", ""))
    served = getattr(model_cfg, "served_model_name", None)
    if isinstance(served, (list, tuple)):
        model = str(served[0])
    k = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0
    method = str(getattr(spec, "method", "") or "") if spec is not None else ""
    labels = {"dtype": str(getattr(model_cfg, "dtype", "")).replace("torch.", "")}
    for key in ("rejection_sample_method", "draft_sample_method"):
        value = getattr(spec, key, None) if spec is not None else None
        if value is not None:
            labels[key] = str(value)
    if spec is not None and getattr(spec, "method", None) is not None:
        labels["method"] = method
    draft = getattr(getattr(spec, "draft_model_config", None), "model", None) or \
        getattr(spec, "model", None)
    algorithm = ALGORITHMS.get(method, method or "none") if k else "none"
    return {
        "model": os.path.basename(model.rstrip("/")) or model,
        "draft_model": "" if draft is None else os.path.basename(str(draft).rstrip("/")),
        "algorithm": algorithm, "num_steps": k, "topk": 1 if k else 0,
        "num_verify_tokens": k + 1 if k else 0, "verify_mode": schema.SPECULATIVE_SAMPLING,
        "config_id": f"vllm-{algorithm}-k{k}" if k else "vllm-none",
        "backend": str(getattr(getattr(vllm_config, "device_config", None), "device_type", "")),
        "engine_version": engine_version(), "labels": labels,
    }


def stats_policy():
    """Which verify steps get the sampling-truth and draft-health statistics: every step until
    each sampling class served has decided its checks, then one in ``SPECSCOPE_STATS_EVERY``
    (default 32; ``hooks.policy.UntilDecided``). ``SPECSCOPE_STATS_ADAPTIVE=0`` keeps the fixed
    one in N from the first step."""
    from ..policy import UntilDecided
    from ..recorder import every_n

    try:
        n = int(os.environ.get("SPECSCOPE_STATS_EVERY", DEFAULT_STATS_EVERY))
    except ValueError:
        n = DEFAULT_STATS_EVERY
    if os.environ.get("SPECSCOPE_STATS_ADAPTIVE", "1") == "0":
        return every_n(max(1, n))
    return UntilDecided(every=max(1, n))


def make_recorder(process: str):
    """A factory for this process's recorder: vLLM's run, from the configuration once seen."""
    from . import default_recorder

    def make():
        fields = dict(_CONFIG.get("fields") or {"config_id": "vllm"})
        return default_recorder("vllm", process=process, stats_policy=stats_policy(), **fields)
    return make


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
        facts: dict[str, Any] = {"ids": ids}
        for key, attr, dtype in (("temperature", "temperature_cpu", np.float64),
                                 ("top_p", "top_p_cpu", np.float64), ("top_k", "top_k_cpu", np.int64)):
            arr = getattr(input_batch, attr, None)
            if arr is not None:  # host arrays: copied as arrays, no per-request Python work
                facts[key] = np.array(arr[:num_reqs], dtype=dtype)
        vocab = getattr(input_batch, "vocab_size", None)
        if "top_k" in facts:  # vLLM stores "no top-k" as the vocabulary size: off is 0 here
            k = facts["top_k"]
            on = sampling.code(1.0, None, k, engine="vllm", vocab_size=vocab) & sampling.TOP_K
            facts["top_k"] = np.where(on, k, 0)
        return facts if len(ids) == num_reqs else None
    except Exception:
        return None


def processed(sampling_metadata: Any) -> bool:
    """Whether penalties, bad words or an allowed-token mask change the logits before verify:
    the raw logits the statistics read are then not the distribution verify used (a greedy
    request may rightly commit another token than their argmax), so the step keeps no
    sampling-truth statistics."""
    return (getattr(sampling_metadata, "no_penalties", True) is False
            or getattr(sampling_metadata, "allowed_token_ids_mask", None) is not None
            or bool(getattr(sampling_metadata, "bad_words_token_ids", None)))


def gather_inputs(metadata: Any, draft_probs: Any, logits: Any) -> dict:
    """What the statistics need from the verify call's inputs, read before vLLM changes them:
    the target logits at each row's ``drafted + 1`` positions, ``[B, P, V]`` (P = the widest
    row's drafts + 1; rows are contiguous in ``logits``), the draft's top-1 probability per
    drafted position, ``[B, P - 1]`` (-1 where a row drafted fewer: not counted), and for the
    acceptance rule each row's draft tokens (-1 past its drafts) with, under probabilistic
    drafting, the draft's probability of each and its whole distribution there (the residual
    rule's q; without ``draft_probs`` the draft is one-hot)."""
    import torch

    nums = [int(n) for n in metadata.num_draft_tokens]
    width = max(nums) + 1
    starts, at = [], 0
    for n in nums:
        starts.append(at)
        at += n + 1
    dev = logits.device
    pos = torch.arange(width)
    lim = torch.tensor(nums)
    rows = torch.tensor(starts)[:, None] + torch.minimum(pos[None, :], lim[:, None])
    out = {"logits": logits[rows.to(dev, non_blocking=True)]}
    ids = getattr(metadata, "draft_token_ids", None)
    cu = torch.tensor([s - i for i, s in enumerate(starts)])  # start of each row's drafts
    didx = (cu[:, None] + torch.minimum(pos[None, :-1], (lim - 1).clamp_min(0)[:, None])) \
        .clamp_max(max(sum(nums) - 1, 0)).to(dev, non_blocking=True)
    drafted = (pos[None, :-1] < lim[:, None]).to(dev, non_blocking=True)
    if ids is not None and ids.dim() == 1 and ids.shape[0] == sum(nums) and sum(nums):
        tokens = ids[didx]
        out["draft_tokens"] = torch.where(drafted, tokens, torch.full_like(tokens, -1))
        if draft_probs is not None and draft_probs.dim() == 2:
            out["draft_q"] = draft_probs[didx, tokens.clamp_min(0).long()]
            # the draft's whole distribution, for the residual rule's q at each row's first
            # rejected position (gathered once verify has run: vLLM only reads draft_probs)
            out["draft_src"] = (draft_probs, didx)
    if draft_probs is not None and draft_probs.dim() == 2:
        top1 = draft_probs.amax(dim=-1)  # [num_tokens], row-major by request
        cu = torch.tensor([s - i for i, s in enumerate(starts)])  # start of each row's drafts
        didx = cu[:, None] + torch.minimum(pos[None, :-1], (lim - 1).clamp_min(0)[:, None])
        valid = (pos[None, :-1] < lim[:, None]).to(dev, non_blocking=True)
        picked = top1[didx.clamp_max(max(top1.shape[0] - 1, 0)).to(dev, non_blocking=True)]
        out["draft_top1"] = torch.where(valid, picked, torch.full_like(picked, -1.0))
    return out


def rejected_q(draft_probs: Any, didx: Any, accepted: Any, index: Any = None) -> Any:
    """The draft's distribution at each row's first rejected position (``[B, V]``, gathered on
    the device), as the ``[B, P - 1, V]`` view the residual rule reads at that position only
    (``stats.residual_columns``): one row of the vocabulary per request, not one per draft."""
    if index is not None:
        didx = didx[index]
    j = accepted.long().clamp(0, didx.shape[1] - 1)
    q = draft_probs[didx.gather(1, j[:, None])[:, 0]]
    return q[:, None, :].expand(-1, didx.shape[1], -1)


def record_rejection(recorder: Any, metadata: Any, sampling_metadata: Any, output_token_ids: Any,
                     facts: dict, inputs: dict | None = None) -> None:
    """One RejectionSampler.forward call as a verify-step record: the rows that drafted."""
    import torch

    nums = [int(n) for n in metadata.num_draft_tokens]
    keep = [i for i, n in enumerate(nums) if n > 0]
    if len(facts["ids"]) != len(nums):  # counted as a hook error: a verify step not recorded
        raise ValueError(f"verify batch of {len(nums)} rows named by {len(facts['ids'])} ids")
    if not keep:
        return
    out = output_token_ids
    accepted = (out != PLACEHOLDER_TOKEN_ID).sum(dim=1) - 1  # bonus excluded
    mode: Any = batch_mode(sampling_metadata)
    temps, top_p, top_k = facts.get("temperature"), facts.get("top_p"), facts.get("top_k")
    if temps is None:
        temps = [math.nan] * len(nums)
    elif mode == "mixed":  # vLLM picks argmax or sampling per row
        mode = [schema.GREEDY if t <= 1e-5 else schema.SPECULATIVE_SAMPLING
                for t in temps.tolist()]
    truth: dict[str, Any] = {}
    if inputs is not None and not processed(sampling_metadata):
        truth["target_logits"] = inputs["logits"]
        truth["committed_tokens"] = out[:, :inputs["logits"].shape[1]]
        if "draft_top1" in inputs:
            truth["draft_top1_probs"] = inputs["draft_top1"]
        if "draft_tokens" in inputs:
            truth["draft_tokens"] = inputs["draft_tokens"]
            if "draft_q" in inputs:
                truth["draft_token_probs"] = inputs["draft_q"]
    ids = facts["ids"]
    drafted: Any = nums
    if len(keep) < len(nums):  # rows without a draft are no verify entries
        index = torch.tensor(keep, device=out.device) if out.device.type == "cpu" else \
            torch.tensor(keep).to(out.device, non_blocking=True)
        accepted = accepted[index]
        truth = {k: v[index] for k, v in truth.items()}
        ids = [ids[i] for i in keep]
        drafted = [nums[i] for i in keep]
        temps = [temps[i] for i in keep]
        top_p = None if top_p is None else [top_p[i] for i in keep]
        top_k = None if top_k is None else [top_k[i] for i in keep]
        if isinstance(mode, list):
            mode = [mode[i] for i in keep]
    if inputs is not None and "draft_tokens" in truth and "draft_src" in inputs:
        src, didx = inputs["draft_src"]
        truth["draft_probs"] = rejected_q(src, didx, accepted,
                                          index if len(keep) < len(nums) else None)
    uniform = min(drafted) == max(drafted)
    recorder.record_verify(
        request_ids=ids, num_accepted=accepted,
        num_drafted=drafted[0] if uniform else list(drafted),
        temperature=list(temps) if not hasattr(temps, "tolist") else temps.tolist(),
        top_p=None if top_p is None else list(top_p),
        top_k=None if top_k is None else list(top_k), mode_used=mode,
        draft_depth=max(drafted), **truth)


def _patch(owner: Any, name: str, make_wrapper: Any, patched: list[str], label: str) -> None:
    original = getattr(owner, name)
    if getattr(original, "_specscope", False):
        return
    wrapper = make_wrapper(original)
    wrapper._specscope = True
    setattr(owner, name, wrapper)
    patched.append(label)


def install(recorder: Any = None) -> list[str]:
    """Patch the verify path (and, where importable, the runner and the API server's request
    bookkeeping); returns what was patched."""
    from vllm.v1.sample import rejection_sampler as module  # type: ignore

    from ..guard import SPECSCOPE_ERRORS
    from . import LazyRecorder

    lazy = LazyRecorder(recorder)
    make = make_recorder("engine")
    patched: list[str] = []

    def wrap_forward(original):
        def forward(self, metadata, draft_probs, logits, sampling_metadata, *args, **kwargs):
            facts = _BATCH.get()
            if facts is None:  # warm-up, profile and dummy batches: not verify steps
                return original(self, metadata, draft_probs, logits, sampling_metadata,
                                *args, **kwargs)
            inputs = None
            try:
                rec = lazy.get(make)
                if rec is not None and rec.enabled and rec.wants_stats(
                        temperature=facts.get("temperature"), top_p=facts.get("top_p"),
                        top_k=facts.get("top_k")):
                    inputs = gather_inputs(metadata, draft_probs, logits)
            except SPECSCOPE_ERRORS:
                lazy.count_error()
            with lazy.phase(make, "verify_sample"):
                out = original(self, metadata, draft_probs, logits, sampling_metadata,
                               *args, **kwargs)
            lazy.record(make, lambda rec: record_rejection(
                rec, metadata, sampling_metadata, out.sampled_token_ids, facts, inputs))
            return out
        forward._specscope_recorder = lazy  # type: ignore[attr-defined]
        return forward

    _patch(module.RejectionSampler, "forward", wrap_forward, patched,
           "vllm.v1.sample.rejection_sampler.RejectionSampler.forward")
    try:
        from vllm.v1.worker import gpu_model_runner as runner_mod  # type: ignore
    except Exception:  # the sampler hook alone records nothing: it needs the batch's names
        return patched

    def wrap_sample(sample):
        def _sample(self, logits, spec_decode_metadata, *args, **kwargs):
            token = None
            if spec_decode_metadata is not None:
                try:
                    if "fields" not in _CONFIG and getattr(self, "vllm_config", None) is not None:
                        _CONFIG["fields"] = run_fields(self.vllm_config)
                    facts = batch_facts(self.input_batch,
                                        len(spec_decode_metadata.num_draft_tokens))
                    if facts is not None:
                        token = _BATCH.set(facts)
                    elif lazy.recorder is not None:  # past warm-up: a verify step unrecorded
                        lazy.count_error()
                except SPECSCOPE_ERRORS:
                    lazy.count_error()
            try:
                return sample(self, logits, spec_decode_metadata, *args, **kwargs)
            finally:
                if token is not None:
                    _BATCH.reset(token)
        _sample._specscope_recorder = lazy  # type: ignore[attr-defined]
        return _sample

    _patch(runner_mod.GPUModelRunner, "_sample", wrap_sample, patched,
           "vllm.v1.worker.gpu_model_runner.GPUModelRunner._sample")
    try:
        from vllm.v1.engine import output_processor  # type: ignore  # noqa: F401
    except ImportError:  # no V1 front end in this process: the verify path alone is recorded
        return patched
    try:
        from . import vllm_requests

        patched += vllm_requests.install(_CONFIG, patch=_patch, make=make_recorder("api"),
                                        run_fields=run_fields)
    except SPECSCOPE_ERRORS:  # the verify path is recorded without the request timelines
        lazy.count_error()
    return patched


def register() -> None:
    """The ``vllm.general_plugins`` entry point: patches only when SPECSCOPE_VLLM=1. Nothing
    here raises into vLLM, ``SystemExit`` included: a failure is reported on stderr and the
    engine runs untouched."""
    try:
        _register()
    except (Exception, SystemExit) as exc:
        try:
            import sys

            print(f"specscope: vLLM adapter not installed ({type(exc).__name__}: {exc}); the "
                  "engine runs untouched", file=sys.stderr)
        except (Exception, SystemExit):
            pass


def _register() -> None:
    if os.environ.get("SPECSCOPE_VLLM") != "1":
        return
    # one run for every process of this server: the first process to load the plugin names it,
    # the processes it spawns inherit the name
    os.environ.setdefault("SPECSCOPE_RUN_ID", f"vllm-{os.getpid()}-{time.time_ns() // 10**6}")
    from . import covered

    version = engine_version()
    if not covered("vllm", version):
        import warnings

        warnings.warn(f"specscope: vllm {version or '(version unknown)'} is not a covered "
                      "release; not patching, the engine runs untouched", RuntimeWarning,
                      stacklevel=2)
        return
    install()
