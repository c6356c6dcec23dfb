"""The model and speculation flags (``record``, ``profile``, ``serve-engine``), named as the
engines name theirs, and the ``SpecConfig`` they ask for."""

from __future__ import annotations

import argparse

#: the reference decoder's seeded faults (``engine.config.FAULTS``, which imports torch on the
#: way), for ``--fault``
FAULTS = ("silent_greedy", "topk_fallback", "draft_prob_shortcut", "silent_greedy_batch_gt2",
          "greedy_second_choice", "temperature_twice", "top_p_ignored", "residual_argmax",
          "bonus_argmax", "accept_ignores_q", "stop_past_step", "length_past_step",
          "unset_temperature_greedy", "batch_row_mixup", "penalty_first_only",
          "min_tokens_first_only", "stop_token_past_step", "seed_ignored_in_draft",
          "prompt_logprobs_shifted", "logprobs_at_limit", "prefix_cache_full_hit",
          "row_drafts_rejected", "acceptance_decay")


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """The model and speculation flags, named as the engines name theirs."""
    p.add_argument("--model", default="tiny", help="tiny | smollm2 | PATH to a local HF Llama "
                   "model directory (default: tiny)")
    p.add_argument("--draft", default="int:4", help="draft for smollm2/PATH: int:N (N-bit "
                   "rounded copy), layers:K (first K layers, shared head), bf16 or none "
                   "(default: int:4)")
    p.add_argument("--spec-algorithm", default="draft-model", help="eagle, mtp, draft-model (labels on the draft model) or ngram (prompt lookup: no draft model, depth up to --spec-steps)")
    p.add_argument("--spec-steps", type=int, default=3, help="draft depth (default 3)")
    p.add_argument("--spec-topk", type=int, default=1, help="draft branching; >1 drafts a tree")
    p.add_argument("--spec-draft-tokens", type=int, default=None, help="tokens per verify pass, "
                   "root included (steps+1 for a chain; tree budget); 0 = no speculation")
    p.add_argument("--spec-policy", default="fixed", help="k per step: fixed (--spec-steps "
                   "always), batch:B1=K1,B2=K2,... (k by running batch size: the K of the largest "
                   "B not above it; K=0 turns speculation off) or adaptive (k chosen from measured "
                   "acceptance and step times; off when speculation loses). Default: fixed")


def spec_config(args: argparse.Namespace):
    """The configuration the flags ask for (``--spec-draft-tokens 0``: no speculation), with
    the command's ``--verify-mode`` and ``--fault``."""
    from ..engine.decoder import SpecConfig

    steps = 0 if args.spec_draft_tokens == 0 else args.spec_steps
    return SpecConfig(algorithm=args.spec_algorithm, num_steps=steps, topk=args.spec_topk,
                      num_draft_tokens=args.spec_draft_tokens or 0,
                      verify_mode=args.verify_mode, fault=args.fault or "",
                      policy=args.spec_policy if steps else "fixed")
