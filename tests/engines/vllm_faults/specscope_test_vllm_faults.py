"""Faults seeded into a real vLLM for the tests. Inert unless a test asks: the faults named in
``SPECSCOPE_TEST_FAULT`` (comma-separated) are on from the start; those named in the file
``SPECSCOPE_TEST_FAULT_FILE`` are read at every call, so a test can switch them on and off while
the server runs (clean phase, then faulted phase, one server).

- ``silent_greedy``: verify commits the target's argmax for every request while the sampling
  metadata that reaches the rejection sampler still says "random" (the ROCm incident: sampled
  requests silently verified greedily). The bonus token is still sampled, as vLLM samples it
  apart from verify.
- ``top_p_greedy``: only the requests that ask for top-p are verified greedily (their
  temperature reaches the rejection sampler as 0), the seed's "top-p falls back to argmax"; the
  rest sample honestly.
- ``lossy``: where verify rejected a draft token, the rejected draft token is committed in
  place of the token verify drew: a lossy verify that vLLM's counters (accepted drafts per row)
  do not see.
- ``draft_prob_one``: under ``draft_sample_method: probabilistic``, the draft's probabilities
  are replaced by a one-hot at the token it drafted (its top-1 probability hard-coded to 1.0).
- ``temperature_twice``: verify scores the target at the square of each sampled request's
  temperature (the temperature applied in two places); vLLM samples the bonus token apart from
  verify, at the right temperature.
- ``top_p_ignored``: verify drops top-p (a sampling setting lost under speculation): the
  rejection sampler sees no top-p, so requests that asked for it verify against the whole
  distribution.
- ``residual_argmax``: where verify rejects a draft token, it commits the residual's argmax
  (the most probable token of max(p - q, 0), the draft token left out under prompt lookup) in
  place of a draw from it; accepted and bonus tokens stay honest, so only the tokens that
  replace a rejected draft are wrong.
- ``penalties_ignored``: verify scores the drafted positions without presence, frequency or
  repetition penalties (TensorRT-LLM #17701's shape); the bonus token, sampled apart from
  verify, is still penalised.
- ``penalty_drafts_uncounted``: verify's penalties count the output before the step but not
  the tokens drafted before each position in it (a per-step, not per-token, count: SGLang
  #33643's shape).
- ``row_drafts_rejected``: in a verify step of two or more requests, batch row 1's drafts are all
  rejected (its first token kept, the rest of its row dropped): one row at zero while the
  pooled acceptance only drops (llama.cpp #27572's slot at zero, as a batch row).
- ``acceptance_decay``: acceptance that ages: from the verify step the fault is switched on,
  at its s-th step each row's drafts are all rejected with probability s / ``DECAY_STEPS``
  (its first token kept), the engine serving on as if nothing were wrong (SGLang #37326's
  shape, in minutes instead of a day).
- ``break_specscope``: what specscope runs on the engine's hot path (reading the verify inputs,
  recording the step, timing the phase, building a request's record) raises ``SystemExit``, to
  show that vLLM serves regardless and the failures are counted.

And one repair, ``SPECSCOPE_TEST_FIX=cpu_expand``: vLLM 0.32's CPU build expands the per-request
temperature, top-p and top-k to per-token tensors in its rejection sampler with a C++ kernel
that writes into an int64 copy of the float32 (or int32) output and never copies it back, so
verification reads uninitialised memory as temperature, top-p and top-k whenever a batch holds
a request with temperature > 0 (greedy-only batches skip it). Sampled requests then verify
against a distribution that is not theirs, and greedy rows of mixed batches commit tokens that
are not the argmax; a garbage top-k is the "index out of bounds" crash. The repair replaces
``expand_batch_to_tokens`` with the same expansion in plain torch, so the tests can tell a
clean vLLM from a faulted one; without it specscope flags the defect (a test holds that too).

Nothing here is specscope's: the tests need engines that go wrong the way real ones did.
"""

import dataclasses
import os


#: acceptance_decay: verify steps over which every row's drafts come to be rejected, and the
#: steps served since the fault was switched on
DECAY_STEPS = 800
AGE = [0]
_GEN = []


def _decay_gen():
    import torch

    if not _GEN:
        _GEN.append(torch.Generator().manual_seed(0))
    return _GEN[0]


def _active(name):
    if name in os.environ.get("SPECSCOPE_TEST_FAULT", "").split(","):
        return True
    path = os.environ.get("SPECSCOPE_TEST_FAULT_FILE")
    if not path:
        return False
    try:
        with open(path) as f:
            return name in f.read().split(",")
    except OSError:
        return False


def _repair_cpu_expand(rs):
    import torch

    def expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
        counts = torch.diff(cu_num_tokens, prepend=cu_num_tokens.new_zeros(1))
        out = x.repeat_interleave(counts.to(x.device), output_size=num_tokens)
        return torch.where(out == replace_from, torch.full_like(out, replace_to), out)

    rs.expand_batch_to_tokens = expand_batch_to_tokens


def register():
    if "cpu_expand" in os.environ.get("SPECSCOPE_TEST_FIX", "").split(","):
        from vllm.v1.sample import rejection_sampler as rs

        _repair_cpu_expand(rs)
    if not (os.environ.get("SPECSCOPE_TEST_FAULT") or os.environ.get("SPECSCOPE_TEST_FAULT_FILE")):
        return
    import torch
    from vllm.v1.sample import rejection_sampler as rs

    sample = rs.rejection_sample

    def _metadata(args, kwargs, change):
        if "sampling_metadata" in kwargs:
            kwargs["sampling_metadata"] = change(kwargs["sampling_metadata"])
        else:
            args[7] = change(args[7])

    def _top_p_greedy(md):
        if md.all_greedy or md.top_p is None or md.temperature is None:
            return md
        temperature = md.temperature.clone()
        temperature[md.top_p.to(temperature.device) < 1.0] = 0.0
        return dataclasses.replace(md, temperature=temperature, all_random=False)

    def _temperature_twice(md):
        if md.all_greedy or md.temperature is None:
            return md
        t = md.temperature
        return dataclasses.replace(md, temperature=torch.where(t > 0, t * t, t))

    def rejection_sample(*args, **kwargs):
        args = list(args)
        if _active("silent_greedy"):
            _metadata(args, kwargs, lambda md: dataclasses.replace(
                md, all_greedy=True, all_random=False))
        elif _active("top_p_greedy"):
            _metadata(args, kwargs, _top_p_greedy)
        out = sample(*args, **kwargs)
        if _active("lossy"):
            draft = kwargs.get("draft_token_ids", args[0] if args else None)
            nums = kwargs.get("num_draft_tokens", args[1] if len(args) > 1 else None)
            start = 0
            for row, n in enumerate(nums):
                accepted = int((out[row] != -1).sum()) - 1
                if 0 <= accepted < n:  # a rejection at this position: commit the draft token
                    out[row, accepted] = draft[start + accepted]
                start += n
        if _active("row_drafts_rejected") and out.shape[0] > 1:
            out[1, 1:] = -1  # (vLLM's placeholder) row 1 keeps its first token only
        if _active("acceptance_decay"):
            AGE[0] += 1
            cut = torch.rand(out.shape[0], generator=_decay_gen()) < AGE[0] / DECAY_STEPS
            out[cut.to(out.device), 1:] = -1
        else:
            AGE[0] = 0
        return out

    rs.rejection_sample = rejection_sample

    recover = rs.sample_recovered_tokens

    def sample_recovered_tokens(max_spec_len, num_draft_tokens, cu_num_draft_tokens,
                                draft_token_ids, draft_probs, target_probs, *args, **kwargs):
        out = recover(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                      draft_probs, target_probs, *args, **kwargs)
        if not _active("residual_argmax"):
            return out
        if draft_probs is None:  # a deterministic draft (prompt lookup): p without the draft
            residual = target_probs.clone()
            residual.scatter_(-1, draft_token_ids.long().unsqueeze(-1), 0.0)
        else:
            residual = (target_probs - draft_probs).clamp_min(0.0)
        return residual.argmax(dim=-1).to(out.dtype)

    rs.sample_recovered_tokens = sample_recovered_tokens

    # the faults of other shapes act where verify turns the target's logits into the
    # distribution it samples from (temperature, top-k, top-p): RejectionSampler.forward calls
    # this module-level function before rejection_sample
    constrain = rs.apply_sampling_constraints

    def apply_sampling_constraints(logits, cu_num_draft_tokens, sampling_metadata):
        md = sampling_metadata
        if _active("temperature_twice"):
            md = _temperature_twice(md)
        if _active("top_p_ignored"):
            md = dataclasses.replace(md, top_p=None)
        return constrain(logits, cu_num_draft_tokens, md)

    rs.apply_sampling_constraints = apply_sampling_constraints

    sampler = rs.RejectionSampler
    penalise, combine = sampler.apply_penalties, sampler._combine_outputs_with_spec_tokens

    def apply_penalties(logits, *args, **kwargs):
        return logits if _active("penalties_ignored") else penalise(logits, *args, **kwargs)

    def combine_outputs(output_token_ids, spec_token_ids=None):
        if _active("penalty_drafts_uncounted") and spec_token_ids is not None:
            return [out for out, spec in zip(output_token_ids, spec_token_ids) for _ in spec]
        return combine(output_token_ids, spec_token_ids)

    sampler.apply_penalties = staticmethod(apply_penalties)
    sampler._combine_outputs_with_spec_tokens = staticmethod(combine_outputs)

    from vllm.v1.spec_decode import llm_base_proposer as lbp

    proposer = lbp.SpecDecodeBaseProposer
    draw = proposer._sample_from_logits

    def _sample_from_logits(self, logits, sampling_metadata):
        ids, probs = draw(self, logits, sampling_metadata)
        if probs is not None and _active("draft_prob_one"):
            probs = torch.zeros_like(probs).scatter_(-1, ids.long().unsqueeze(-1), 1.0)
        return ids, probs

    proposer._sample_from_logits = _sample_from_logits

    # break_specscope: what specscope runs on the hot path raises while the fault is on
    import specscope.hooks.engines.vllm as adapter
    import specscope.hooks.engines.vllm_requests as requests
    from specscope.hooks.recorder import Recorder

    def breakable(original):
        def call(*args, **kwargs):
            if _active("break_specscope"):
                raise SystemExit("seeded failure")
            return original(*args, **kwargs)
        return call

    for owner, name in ((adapter, "gather_inputs"), (adapter, "record_rejection"),
                        (requests, "request_record"), (Recorder, "phase")):
        setattr(owner, name, breakable(getattr(owner, name)))
