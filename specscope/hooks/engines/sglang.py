"""SGLang: wrap verify (``eagle_utils.eagle_sample``, the one function STANDALONE, EAGLE/EAGLE3
and NGRAM all verify through) and record, per request, the accepted count, what the request
asked for and what verify ran. No host sync: counts stay device tensors; request parameters come
from the requests' own host-side sampling params. The call itself is timed as the
``verify_sample`` phase.

What a request asked for is read the way SGLang reads it: its ``SamplingParams`` are normalised
on arrival, so temperature 0 arrives as ``top_k`` 1 (SGLang's greedy), and ``top_k`` "off" as
``1 << 30`` (the whole vocabulary). Where SGLang's own predicate (``_verify_uses_greedy``) sends
a batch down the argmax path on a request that asked for sampling (the CPU and XPU always, HIP
without rejection sampling), the request is recorded as used ``fallback-argmax`` and a fallback
with its reason.

On the steps the statistics policy samples, sampling truth: the target's logits
(``logits_output.next_token_logits``, copied before the call: verify adds penalties in place)
at each accepted path's nodes (``accept_index``, -1 past the last) against the tokens committed
there (``predict`` at those nodes). Draft health is not recorded: SGLang's verify samples from the
target alone and no draft probabilities reach it.

Modules that bound ``eagle_sample`` by name before the adapter installed (``ngram_worker``,
``eagle_worker_common``) are rebound too; and the workers' per-step host callback
(``on_verify_complete_cpu``) counts the verify steps SGLang served, so a server whose steps no
hook saw says so, in a warning and in its trace. Each finished request is recorded by the API
server process (``sglang_requests``); under ``specscope wrap`` every process of one server shares
the run.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from ... import schema
from .sglang_requests import TOP_K_ALL, requested  # noqa: F401 (re-exported)

#: engine verify steps served with no hook call before the adapter says so
UNSEEN_AFTER = 4


def _rejection_sampling() -> bool:
    for where in ("sglang.srt.runtime_context", "sglang.srt.server_args"):
        try:
            get_spec = (sys.modules.get(where) or __import__(where, fromlist=["_"])).get_spec
            return bool(get_spec().speculative_use_rejection_sampling)
        except Exception:
            continue
    return False


def verify_mode_used(module: Any, batch: Any) -> str:
    """The verify path eagle_sample takes for this batch, by SGLang's own predicate."""
    rejection = _rejection_sampling()
    greedy = module._verify_uses_greedy(
        is_all_greedy=bool(batch.sampling_info.is_all_greedy), is_cpu=bool(module._is_cpu),
        is_hip=bool(module._is_hip), is_xpu=bool(module._is_xpu), use_rejection_sampling=rejection)
    if greedy:
        return schema.GREEDY
    return schema.SPECULATIVE_SAMPLING if rejection else schema.TARGET_TEMPERATURE


def greedy_reason(module: Any) -> str:
    """Why SGLang's verify commits the argmax for every request on this platform."""
    if module._is_cpu:
        return "sglang_cpu_verify_argmax"
    if module._is_xpu:
        return "sglang_xpu_verify_argmax"
    if module._is_hip:
        return "sglang_hip_verify_argmax_without_rejection_sampling"
    return "sglang_verify_argmax"


def accepted_drafts(accept_index: Any) -> Any:
    """Accepted draft tokens per request, bonus excluded, on the device: the accepted path's
    nodes (``accept_index`` >= 0) less the root. Read from the path, not from eagle_sample's
    count, whose meaning changed between releases (0.5.21 returns it with the bonus included)."""
    import torch

    return ((accept_index >= 0).sum(dim=1) - 1).to(torch.int32)


def truth_inputs(logits: Any, predict: Any, accept_index: Any) -> dict:
    """Target logits ``[B, P, V]`` at each request's accepted path and the tokens committed
    there ``[B, P]`` (-1 past the last), from eagle_sample's outputs; device tensors only."""
    import torch

    index = accept_index.long()
    rows = index.clamp_min(0)
    committed = torch.where(index >= 0, predict.long().reshape(-1)[rows],
                            torch.full_like(rows, -1))
    return {"target_logits": logits[rows], "committed_tokens": committed}


def chain_drafts(verify_input: Any, batch: int) -> dict:
    """A chain's draft tokens ``[B, D]`` for the acceptance rule (its candidates past the root,
    in depth order); nothing for a tree, under rejection sampling, or where the input does not
    hold them. SGLang's target-only verify accepts a draft where a sample of the target equals
    it: the draft's probability plays no part (q = 1)."""
    try:
        if int(getattr(verify_input, "topk", 0) or 0) != 1 or _rejection_sampling():
            return {}  # a tree, or rejection sampling (which reads draft probabilities)
        tokens = verify_input.draft_token.reshape(batch, -1)
        return {"draft_tokens": tokens[:, 1:]}
    except Exception:  # an input of another shape: the step keeps its other statistics
        return {}


def _spec() -> Any:
    from sglang.srt.runtime_context import get_spec  # type: ignore

    return get_spec()


def run_fields(verify_input: Any, module: Any) -> dict[str, Any]:
    """The run record's configuration: SGLang's algorithm, chain/tree shape, model, backend, from
    its own settings (any process of the server gives the same), else from ``verify_input``."""
    algorithm, model, steps, topk, draft_tokens = "", "", None, None, None
    try:
        spec = _spec()
        algo = spec.speculative_algorithm
        algorithm = str(getattr(algo, "name", algo) or "")
        draft_tokens = spec.speculative_num_draft_tokens
        steps, topk = spec.speculative_num_steps, spec.speculative_eagle_topk
    except Exception:
        pass
    try:
        from sglang.srt.runtime_context import get_server_args

        args = get_server_args()
        model = str(getattr(args, "served_model_name", "") or getattr(args, "model_path", ""))
    except Exception:
        pass
    if not algorithm and verify_input is not None:
        algorithm = "NGRAM" if not hasattr(verify_input, "spec_steps") else "EAGLE"
    if draft_tokens is None and verify_input is not None:
        draft_tokens = verify_input.draft_token_num
    draft_tokens = int(draft_tokens or 0)
    if algorithm.upper() == "NGRAM" or steps is None:
        steps = getattr(verify_input, "spec_steps", None) or max(0, draft_tokens - 1)
    if algorithm.upper() == "NGRAM" or topk is None:
        topk = getattr(verify_input, "topk", 0) or 0
    backend = "hip" if module._is_hip else ("cuda" if module._is_cuda else
                                            ("xpu" if module._is_xpu else "cpu"))
    name = (algorithm or "unknown").lower()
    return {"algorithm": name, "config_id": f"sglang-{name}", "num_steps": int(steps),
            "topk": max(0, int(topk)), "num_verify_tokens": draft_tokens, "backend": backend,
            "model": model, "verify_mode": schema.TARGET_TEMPERATURE}


def record_eagle_sample(recorder: Any, verify_input: Any, batch: Any, result: tuple,
                        mode_used: str, logits: Any = None, reason: str = "") -> None:
    """Turn one eagle_sample call (predict, an accepted count, accept_index) into a verify-step record (and a fallback per request that
    asked for sampling and got the argmax); ``logits``: the target's logits as they were before
    the call (sampled steps only)."""
    predict, _, accept_index = result
    reqs = list(batch.reqs)
    if not reqs:
        return
    num_correct_drafts = accepted_drafts(accept_index)
    asked = [requested(r.sampling_params) for r in reqs]
    used = [schema.GREEDY if t <= 0 else
            (schema.FALLBACK_ARGMAX if mode_used == schema.GREEDY else mode_used)
            for t, _, _ in asked]
    truth = {} if logits is None else truth_inputs(logits, predict, accept_index)
    if truth:
        truth.update(chain_drafts(verify_input, len(reqs)))
    drafted = int(verify_input.draft_token_num) - 1  # what SGLang counts as proposed per step
    step = recorder._step
    recorder.record_verify(
        request_ids=[str(r.rid) for r in reqs], num_accepted=num_correct_drafts,
        num_drafted=drafted, num_draft_tokens=drafted, temperature=[a[0] for a in asked],
        top_p=[a[1] for a in asked], top_k=[a[2] for a in asked], mode_used=used, step=step,
        **truth)
    for r, (t, p, k), u in zip(reqs, asked, used):
        if u == schema.FALLBACK_ARGMAX:
            recorder.record_fallback(reason=reason, request_id=str(r.rid), temperature=t,
                                     top_p=p, top_k=k, mode_requested=schema.TARGET_TEMPERATURE,
                                     step=step)


class _Watch:
    """Verify steps SGLang served against those a hook saw; says so once when none were seen."""

    def __init__(self) -> None:
        self.engine_steps = 0
        self.hook_steps = 0
        self.warned = False

    def served(self, lazy: Any, make: Any) -> None:
        self.engine_steps += 1
        if self.warned or self.hook_steps or self.engine_steps < UNSEEN_AFTER:
            return
        self.warned = True
        message = (f"specscope: SGLang served {self.engine_steps} speculative verify steps and "
                   "no specscope hook saw them: this trace has no verify records")
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        lazy.record(make, lambda rec: rec._emit(schema.AnomalyRecord(
            run_id=rec.run.run_id, kind="unhooked_verify", severity="critical", message=message,
            t_ns=rec.clock_ns(), evidence={"engine_steps": self.engine_steps})))


def _rebind(original: Any, wrapper: Any) -> list[str]:
    """Modules already imported that bound ``eagle_sample`` by name: point them at the wrapper."""
    done = []
    for name, mod in list(sys.modules.items()):
        if name.startswith("sglang.") and getattr(mod, "eagle_sample", None) is original:
            mod.eagle_sample = wrapper  # type: ignore[attr-defined]
            done.append(f"{name}.eagle_sample")
    return done


def _watch_workers(watch: _Watch, lazy: Any, make_default: Any) -> list[str]:
    """Count SGLang's own verify steps at each speculative worker's per-step host callback."""
    import importlib

    from ..guard import SPECSCOPE_ERRORS

    done = []
    for module_name, cls_name in (("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2"),
                                  ("sglang.srt.speculative.ngram_worker", "NGRAMWorker")):
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
            original = cls.__dict__["on_verify_complete_cpu"]
        except (Exception, SystemExit):
            continue
        if getattr(original, "_specscope", False):
            continue

        def on_verify_complete_cpu(self, *args, _original=original, **kwargs):
            try:
                watch.served(lazy, make_default)
            except SPECSCOPE_ERRORS:
                lazy.count_error()
            return _original(self, *args, **kwargs)

        on_verify_complete_cpu._specscope = True  # type: ignore[attr-defined]
        cls.on_verify_complete_cpu = on_verify_complete_cpu
        done.append(f"{module_name}.{cls_name}.on_verify_complete_cpu")
    return done


def install(recorder: Any = None) -> list[str]:
    import sglang.srt.speculative.eagle_utils as module  # type: ignore

    from ..guard import SPECSCOPE_ERRORS
    from . import LazyRecorder, default_recorder

    if getattr(module.eagle_sample, "_specscope", False):
        return []
    original = module.eagle_sample
    lazy = LazyRecorder(recorder)
    watch = _Watch()

    def eagle_sample(verify_input, batch, logits_output, *args, **kwargs):
        def make():
            return default_recorder("sglang", **run_fields(verify_input, module))

        logits = None
        try:
            watch.hook_steps += 1
            rec = lazy.get(make)
            if rec is not None and rec.enabled and rec.wants_stats():
                logits = logits_output.next_token_logits.detach().clone()  # on the device
        except SPECSCOPE_ERRORS:
            lazy.count_error()
        with lazy.phase(make, "verify_sample"):  # CUDA events on a GPU: no sync
            result = original(verify_input, batch, logits_output, *args, **kwargs)
        lazy.record(make, lambda rec: record_eagle_sample(
            rec, verify_input, batch, result, verify_mode_used(module, batch), logits,
            greedy_reason(module)))
        return result

    def make_default():
        return default_recorder("sglang", **run_fields(None, module))

    def num_draft_tokens() -> int:
        try:
            return int(_spec().speculative_num_draft_tokens or 0)
        except Exception:
            return 0

    eagle_sample._specscope = True  # type: ignore[attr-defined]
    eagle_sample._specscope_recorder = lazy  # type: ignore[attr-defined]
    module.eagle_sample = eagle_sample
    patched = ["sglang.srt.speculative.eagle_utils.eagle_sample", *_rebind(original, eagle_sample)]
    from . import sglang_requests

    return (patched + _watch_workers(watch, lazy, make_default)
            + sglang_requests.install(lazy, make_default, num_draft_tokens))
