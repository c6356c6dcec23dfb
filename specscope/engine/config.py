"""A speculative-decoding configuration as engines name theirs (``SpecConfig``), checked when
made, and the faults the reference decoder can seed. Plain values: no torch here."""

from __future__ import annotations

from dataclasses import dataclass

from .. import schema
from .policy import parse_policy

#: silent_greedy_batch_gt2: silent greedy only when more than two requests verify together (a
#: fault confined to large batches, diluted in any per-run figure)
#: greedy_second_choice: at temperature 0, every 8th verify step commits the target's second
#: choice where it should commit its argmax (a structural divergence, not a numerical tie)
#: Faults that keep the top-1 share near honest and move where in the distribution committed
#: tokens fall (the whole-distribution test, ``specscope.pit``):
#: temperature_twice: verify scores the target at T*T (the temperature applied in two places)
#: top_p_ignored: verify samples the untruncated target for rows that asked for top-p (a
#: sampling setting dropped under speculation; the draft still truncates)
#: residual_argmax: the token that replaces a rejected draft is the residual's argmax, not a
#: sample of it (speculative sampling on a chain)
#: bonus_argmax: the bonus token after a fully accepted draft is the target's argmax, not a
#: sample (speculative sampling on a chain)
#: accept_ignores_q: the acceptance test compares a uniform draw with p alone, as if the draft
#: were deterministic, while the draft samples (speculative sampling on a chain): verify
#: accepts fewer drafts than min(1, p/q) gives (the acceptance rule's check)
#: Faults of a verify step's several tokens committed at once (the probe's stops class):
#: stop_past_step: stop strings looked for only at the end of each step's text (served by
#: ``specscope serve-engine``), so one completed inside a multi-token step is missed
#: length_past_step: max_tokens checked once per step, after all its tokens are committed
#: unset_temperature_greedy: a request with top-p or top-k and no temperature taken as greedy
#: (normalised to the greedy sentinel; served by ``specscope serve-engine``)
#: penalty_first_only: presence and frequency penalties applied at each verify pass's first
#: position only, its drafted positions verified unpenalised (the probe's penalties class)
#: min_tokens_first_only: a request's min_tokens (its end-of-sequence tokens masked until it
#: has that many) enforced at each verify pass's first position only: a drafted end of
#: sequence is accepted before min_tokens (the probe's stops class)
#: stop_token_past_step: a request's stop tokens (stop_token_ids) looked for only at each verify
#: step's last token, so one committed inside a multi-token step is missed
#: batch_row_mixup: with two or more requests in a verify step, the token verify draws for the
#: last row (its bonus or correction) is row 0's (a batch-row offset: the probe's prefix class)
#: seed_ignored_in_draft: a seeded request's draft tokens sampled from the batch's generator, not
#: its own (its verify draws are its own): the same seeded request twice gives different tokens
#: under speculative sampling (the probe's seed class; vLLM's probabilistic draft sampling
#: leaves seeds out, a to-do in its proposer's source)
#: prompt_logprobs_shifted: a request's prompt log-probabilities scored one position late (a
#: prefill chunk's offset): they disagree with the log-probabilities the same tokens got when
#: they were generated (the probe's rescore class; vLLM #53488 returned prompt log-probabilities
#: wildly wrong for some requests under MTP with chunked prefill)
#: logprobs_at_limit: the log-probabilities returned for tokens of a verify step that reaches the
#: end of the served context read one position late (the tokens are right): the figures near
#: max_model_len lie (the probe's limit class; needs the decoder's ``context``)
#: prefix_cache_full_hit: a prompt found whole in the prefix cache has its last token computed
#: again from an input slot never written (token 0), not from the token: a repeated prompt's
#: answer parts from its first (the probe's prefix class; brings a prefix cache of its own)
#: row_drafts_rejected: in a verify step of two or more requests, batch row 1's drafts are all
#: rejected (its first position's token committed, its output right): one row at zero while
#: the pooled acceptance only drops (``collector/slots.py``; llama.cpp #27572's slot at zero)
#: acceptance_decay: acceptance that ages with the steps served: at step s a row's drafts are
#: all rejected with probability s / DECAY_STEPS (its first position's token committed, its
#: output right), until a restart (a new decoder) (``collector/drift.py``; SGLang #37326)
FAULTS = ("silent_greedy", "topk_fallback", "draft_prob_shortcut", "silent_greedy_batch_gt2",
          "greedy_second_choice", "temperature_twice", "top_p_ignored", "residual_argmax",
          "bonus_argmax", "accept_ignores_q", "stop_past_step", "length_past_step",
          "unset_temperature_greedy", "batch_row_mixup", "penalty_first_only",
          "min_tokens_first_only", "stop_token_past_step", "seed_ignored_in_draft",
          "prompt_logprobs_shifted", "logprobs_at_limit", "prefix_cache_full_hit",
          "row_drafts_rejected", "acceptance_decay")
#: steps served over which ``acceptance_decay`` rejects every row's drafts (a tenth at a tenth)
DECAY_STEPS = 10000
#: the faults that live in speculative sampling's chain verify
CHAIN_FAULTS = ("draft_prob_shortcut", "residual_argmax", "bonus_argmax", "accept_ignores_q",
                "seed_ignored_in_draft", "row_drafts_rejected", "acceptance_decay")


@dataclass
class SpecConfig:
    """A speculative-decoding configuration, named as engines name theirs."""

    #: "ngram" drafts by prompt lookup (engine/ngram.py, no draft model, depth varies per
    #: request); any other name ("eagle", "mtp", "draft-model") is a label on the draft model
    algorithm: str = "draft-model"
    num_steps: int = 3  #: draft depth (0 = no speculation)
    topk: int = 1  #: draft branching (1 = chain)
    #: tokens in one verify pass, the root (last committed token) included, as SGLang counts
    #: them: num_steps + 1 for a chain; a tree verifies num_draft_tokens - 1 draft nodes
    num_draft_tokens: int = 0
    verify_mode: str = ""  #: for temperature > 0; default speculative sampling (chain) / target-only (tree)
    renorm_kernels: bool = True  #: False mirrors a backend without top-p/top-k renorm kernels
    fault: str = ""  #: one of FAULTS, or ""
    #: k per step: "fixed", "batch:B1=K1,B2=K2,..." or "adaptive" (engine/policy.py)
    policy: str = "fixed"

    def __post_init__(self) -> None:
        if self.fault and self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}; known: {', '.join(FAULTS)}")
        if self.num_steps < 0 or self.topk < 1:
            raise ValueError("num_steps must be >= 0 and topk >= 1")
        if self.topk == 1 or not self.num_draft_tokens:
            self.num_draft_tokens = self.num_steps * self.topk + 1 if self.num_steps else 0
        if self.num_steps and self.num_draft_tokens < 2:
            raise ValueError("num_draft_tokens must be >= 2 (root plus one draft token)")
        if not self.verify_mode:
            self.verify_mode = (schema.SPECULATIVE_SAMPLING if self.topk == 1
                                else schema.TARGET_TEMPERATURE)
        if self.verify_mode not in (schema.SPECULATIVE_SAMPLING, schema.TARGET_TEMPERATURE):
            raise ValueError(f"verify_mode must be {schema.SPECULATIVE_SAMPLING} or "
                             f"{schema.TARGET_TEMPERATURE}")
        if self.topk > 1 and self.verify_mode == schema.SPECULATIVE_SAMPLING:
            raise ValueError("speculative sampling needs a chain (topk 1); trees verify with "
                             "target-only temperature sampling")
        if self.algorithm == "ngram" and (self.topk != 1 or self.fault in (
                "draft_prob_shortcut", "seed_ignored_in_draft")):
            raise ValueError("an n-gram draft is a chain of looked-up tokens: --spec-topk 1, "
                             "and it has no draft probabilities to shortcut and no draws to "
                             "seed")
        if self.fault in CHAIN_FAULTS and self.topk != 1:
            # the shortcut it seeds skips the draft's softmax on the chain's (topk 1) fast path;
            # a tree would run honest, and a check passing it would look like a missed fault
            raise ValueError(f"the {self.fault} fault lives on the chain's verify: "
                             "--spec-topk 1")
        if self.fault == "topk_fallback":
            self.renorm_kernels = False
        self.policy = self.policy or "fixed"
        if self.policy != "fixed":
            parse_policy(self.policy, self.num_steps)  # a clear error now, not at the first step
            if self.topk != 1 or not self.num_steps:
                raise ValueError(f"--spec-policy {self.policy} needs a chain draft "
                                 "(--spec-topk 1, --spec-steps >= 1)")

    @property
    def config_id(self) -> str:
        if self.num_steps == 0:
            return "no-spec"
        tail = "" if self.policy == "fixed" else "-" + self.policy.replace(":", "").replace(",", "_").replace("=", "k")
        return f"{self.algorithm}-s{self.num_steps}-k{self.topk}-d{self.num_draft_tokens}{tail}"

    @property
    def uses_draft_model(self) -> bool:
        return bool(self.num_steps) and self.algorithm != "ngram"

    @property
    def budget(self) -> int:
        """Draft tokens verified per step (root excluded)."""
        return max(0, self.num_draft_tokens - 1)


def row_modes(cfg: SpecConfig, reqs: list) -> tuple[list[int], list[str]]:
    """Per request (each with ``temperature``, ``top_p``, ``top_k``) of a verify step: the
    verify branch actually taken (0 argmax, 1 target-only, 2 speculative) and the mode the
    engine reports (a seeded silent fault takes the argmax while reporting the sampler)."""
    codes, used = [], []
    configured = 2 if cfg.verify_mode == schema.SPECULATIVE_SAMPLING else 1
    for r in reqs:
        truncating = r.top_p < 1.0 or r.top_k > 0
        if r.temperature <= 0:
            code, mode = 0, schema.GREEDY
        elif truncating and not cfg.renorm_kernels:
            code, mode = 0, schema.FALLBACK_ARGMAX
        elif cfg.fault == "silent_greedy" or (  # argmax, while reporting the sampler
                cfg.fault == "silent_greedy_batch_gt2" and len(reqs) > 2):
            code, mode = 0, cfg.verify_mode
        else:
            code, mode = configured, cfg.verify_mode
        codes.append(code)
        used.append(mode)
    return codes, used
