"""Top-2 margins recomputed: the target model run over a reference's prompt and output.

``specscope diverge`` needs the reference's top-1 minus top-2 logit at each output position
(tie-flip or structural). A reference decoded by specscope's own decoder records them; one
that did not (an older trace, a run recorded without them) gets them here with ``--recompute
MODEL``: one forward pass of the target over prompt + output, the margins read at every output
position. The prompt comes from the shipped prompt set by the request's prompt id, tokenized
as the workload tokenizes it; a request whose prompt is not in the set, or whose rebuilt prompt
has another length than the record's, keeps no margins (its verdict stays unknown).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

import torch

from .. import schema
from .models import ModelPair


@dataclasses.dataclass
class Recomputed:
    records: list[schema.Record]  #: the input records, those recomputed replaced
    recomputed: int = 0
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)  #: why -> requests


def _prompts(pair: ModelPair) -> dict[str, list[int]]:
    from .workload import _encode, load_prompts

    return {p["id"]: _encode(pair, p["prompt"], p.get("messages"), p.get("context_tokens", 0))
            for p in load_prompts(long=True)}


@torch.inference_mode()
def margins_of(pair: ModelPair, prompt: list[int], output: list[int]) -> tuple[list[float], list[int]]:
    """Per output token: the target's top-1 minus top-2 logit at its position, and its second
    choice (one forward pass over prompt + output)."""
    ids = torch.tensor([prompt + output[:-1]], dtype=torch.long)
    logits = pair.target(input_ids=ids).logits[0, len(prompt) - 1:].float()
    top = torch.topk(logits, 2, dim=-1)
    return ((top.values[:, 0] - top.values[:, 1]).tolist(), top.indices[:, 1].tolist())


def recompute(records: Iterable[schema.Record], pair: ModelPair, runs: set[str] | None = None) -> Recomputed:
    """Fill in the margins of every greedy request record without them (of ``runs`` only, when
    given: the reference runs)."""
    prompts = _prompts(pair)
    out = Recomputed([])
    for r in records:
        if (isinstance(r, schema.RequestRecord) and r.temperature == 0 and not r.top2_margins
                and r.output_token_ids and (runs is None or r.run_id in runs)):
            prompt = prompts.get(r.prompt_id)
            why = ("prompt not in the shipped prompt set" if prompt is None else
                   "rebuilt prompt's length differs from the record's"
                   if r.num_prompt_tokens and len(prompt) != r.num_prompt_tokens else None)
            if why:
                out.skipped[why] = out.skipped.get(why, 0) + 1
            else:
                margins, seconds = margins_of(pair, prompt, list(r.output_token_ids))
                r = dataclasses.replace(r, top2_margins=tuple(margins), second_token_ids=tuple(seconds))
                out.recomputed += 1
        out.records.append(r)
    return out
