"""A request to the reference decoder, what it returns, and the running batch: each request in
flight aligned with a row of both caches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import schema
from .kv import BatchKV


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    prompt_id: str = ""
    category: str = ""  #: workload category of its prompt ("math", "translation", ...)
    arrival_ns: int = 0  #: when the request arrived (0: when it joins the batch)
    ignore_eos: bool = False  #: decode to max_new_tokens even past an end-of-sequence token
    #: stop strings, where the request has any: given the output token ids so far and how many
    #: the last step added, how many tokens to keep (the request stops there), or None
    stop: Callable[[list[int], int], int | None] | None = None
    #: return each committed token's raw log-probability with this many alternatives (None:
    #: none asked; chains and target-only decoding; a tree's are not returned)
    top_logprobs: int | None = None
    presence_penalty: float = 0.0  #: OpenAI's, over the output so far (``sampling.penalize``)
    frequency_penalty: float = 0.0
    #: its end-of-sequence tokens masked until the output has this many (vLLM's min_tokens)
    min_new_tokens: int = 0
    #: tokens that end it as an end-of-sequence token does (vLLM's stop_token_ids)
    stop_token_ids: frozenset[int] = frozenset()
    #: its own random seed (OpenAI's ``seed``): its draws come from a generator of its own, so
    #: the same request sent again in a batch of the same shape gives the same tokens
    seed: int | None = None
    #: return each prompt token's log-probability with this many alternatives (vLLM's
    #: ``prompt_logprobs``); None: none asked
    prompt_logprobs: int | None = None


@dataclass
class Output:
    request_id: str
    token_ids: list[int]
    finish_reason: str
    record: schema.RequestRecord | None = None
    chunks: list[tuple[int, int]] = field(default_factory=list)  #: (time ns, tokens)
    #: per output token where asked (``Request.top_logprobs``): ``logprobs.Logprob``
    logprobs: list = field(default_factory=list)
    #: per prompt token where asked (``Request.prompt_logprobs``): None, then ``logprobs.Logprob``
    prompt_logprobs: list | None = None


@dataclass
class Row:
    """One request in flight, aligned with a batch row of both caches."""

    req: Request
    committed: list[int]  #: prompt and output tokens so far
    out: Output
    t_arrival: int
    gen: torch.Generator | None = None  #: the request's own, where it has a seed
    cached_t: int = 0  #: committed tokens the target's cache holds
    cached_d: int = 0  #: committed tokens the draft's cache holds
    first_ns: int = 0
    verify_steps: int = 0  #: verify steps this request took part in
    drafted: int = 0  #: draft tokens proposed for it
    accepted: int = 0  #: of those, accepted (bonus excluded)
    accept_len_hist: list[int] = field(default_factory=list)  #: steps by tokens committed
    margins: list[float] = field(default_factory=list)  #: target-only: top-1 - top-2 logit per token
    seconds: list[int] = field(default_factory=list)  #: target-only: the target's second choice


@dataclass
class Batch:
    """The running batch: rows in cache order; requests join and leave between steps."""

    kv_t: BatchKV
    kv_d: BatchKV | None
    rows: list[Row] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)


