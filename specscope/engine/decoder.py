"""The reference speculative decoder: draft-then-verify over any Hugging Face causal LM pair.

Chain drafting (topk = 1) with greedy, target-only temperature or full speculative sampling;
EAGLE-style tree drafting (topk > 1) with greedy or target-only temperature sampling. Batched,
KV-cached, with the specscope hooks inside. Faults that reproduce real incidents are switches.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import schema
from . import sampling
from .kv import BatchKV, causal, feed_pending
from .tree import draft_tree, walk_tree

FAULTS = ("silent_greedy", "topk_fallback", "draft_prob_shortcut")


@dataclass
class SpecConfig:
    """A speculative-decoding configuration, named as engines name theirs."""

    algorithm: str = "draft-model"  #: label only: "eagle", "mtp", "draft-model"
    num_steps: int = 3  #: draft depth (0 = no speculation)
    topk: int = 1  #: draft branching (1 = chain)
    #: tokens in one verify pass, the root (last committed token) included, as SGLang counts
    #: them: num_steps + 1 for a chain; a tree verifies num_draft_tokens - 1 draft nodes
    num_draft_tokens: int = 0
    verify_mode: str = ""  #: for temperature > 0; default speculative sampling (chain) / target-only (tree)
    renorm_kernels: bool = True  #: False mirrors a backend without top-p/top-k renorm kernels
    fault: str = ""  #: one of FAULTS, or ""

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
        if self.fault == "topk_fallback":
            self.renorm_kernels = False

    @property
    def config_id(self) -> str:
        if self.num_steps == 0:
            return "no-spec"
        return f"{self.algorithm}-s{self.num_steps}-k{self.topk}-d{self.num_draft_tokens}"

    @property
    def budget(self) -> int:
        """Draft tokens verified per step (root excluded)."""
        return max(0, self.num_draft_tokens - 1)


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    prompt_id: str = ""


@dataclass
class Output:
    request_id: str
    token_ids: list[int]
    finish_reason: str
    record: schema.RequestRecord | None = None
    chunks: list[tuple[int, int]] = field(default_factory=list)  #: (time ns, tokens)


class SpeculativeDecoder:
    """Decodes batches of requests with a target model and (optionally) a draft model."""

    def __init__(self, target: torch.nn.Module, draft: torch.nn.Module | None, config: SpecConfig,
                 *, recorder=None, eos_ids: tuple[int, ...] = (), seed: int = 0,
                 device: str | torch.device = "cpu", run_id: str = "") -> None:
        if config.num_steps and draft is None:
            raise ValueError("speculation needs a draft model")
        self.target, self.draft, self.cfg = target, draft, config
        self.recorder = recorder
        self.eos = set(eos_ids)
        self.device = torch.device(device)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.run_id = run_id or (recorder.run.run_id if recorder else "")
        self.rank = recorder.rank if recorder else 0
        self.step = 0
        self._warned = False

    # ------------------------------------------------------------------ helpers
    def _phase(self, name: str):
        if self.recorder is None:
            return _NullPhase()
        return self.recorder.phase(name, self.step)

    def _row_modes(self, reqs: list[Request]) -> tuple[list[int], list[str]]:
        """Per row: the verify branch actually taken (0 argmax, 1 target-only, 2 speculative)
        and the mode the engine reports."""
        codes, used = [], []
        configured = 2 if self.cfg.verify_mode == schema.SPECULATIVE_SAMPLING else 1
        for r in reqs:
            truncating = r.top_p < 1.0 or r.top_k > 0
            if r.temperature <= 0:
                codes.append(0), used.append(schema.GREEDY)
            elif truncating and not self.cfg.renorm_kernels:
                codes.append(0), used.append(schema.FALLBACK_ARGMAX)
            elif self.cfg.fault == "silent_greedy":  # argmax, while reporting the sampler
                codes.append(0), used.append(self.cfg.verify_mode)
            else:
                codes.append(configured), used.append(self.cfg.verify_mode)
        return codes, used

    def _fallbacks(self, reqs: list[Request], used: list[str]) -> None:
        for r, u in zip(reqs, used):
            if u != schema.FALLBACK_ARGMAX:
                continue
            reason = "top_p_unsupported" if r.top_p < 1.0 else "top_k_unsupported"
            if not self._warned:
                warnings.warn(f"{reason.replace('_', ' ')} by the verify kernels: falling back "
                              "to argmax", RuntimeWarning, stacklevel=3)
                self._warned = True
            if self.recorder is not None:
                self.recorder.record_fallback(reason=reason, request_id=r.request_id,
                                              temperature=r.temperature, top_p=r.top_p,
                                              top_k=r.top_k, mode_requested=self.cfg.verify_mode,
                                              step=self.step)

    # ------------------------------------------------------------------ decode
    @torch.inference_mode()
    def generate(self, requests: list[Request],
                 on_chunk: Callable[[str, list[int]], None] | None = None) -> list[Output]:
        """Decode one batch to completion; returns outputs in request order."""
        dev = self.device
        reqs = list(requests)
        t_arrival = time.time_ns()
        committed = [list(r.prompt_ids) for r in reqs]
        n_prompt = [len(r.prompt_ids) for r in reqs]
        outputs = {r.request_id: Output(r.request_id, [], "") for r in reqs}
        first_ns: dict[str, int] = {}
        kv_t = BatchKV(self.target, len(reqs), dev)
        kv_d = BatchKV(self.draft, len(reqs), dev) if self.cfg.num_steps else None
        cached_t = [0] * len(reqs)
        cached_d = [0] * len(reqs)
        active = list(range(len(reqs)))  # indices into reqs, aligned with batch rows

        def row_params(rows: list[int]):
            rs = [reqs[i] for i in rows]
            return (torch.tensor([r.temperature for r in rs], device=dev),
                    torch.tensor([r.top_p for r in rs], device=dev),
                    torch.tensor([r.top_k for r in rs], device=dev),
                    sampling.needs_truncation([r.top_p for r in rs], [r.top_k for r in rs]))

        def commit(row_pos: int, new: list[int]) -> bool:
            """Append tokens to a request; True when it finished."""
            i = active[row_pos]
            r, out = reqs[i], outputs[reqs[i].request_id]
            room = r.max_new_tokens - len(out.token_ids)
            take = new[:room]
            for j, tok in enumerate(take):
                if tok in self.eos:
                    take = take[:j + 1]
                    out.finish_reason = "stop"
                    break
            now = time.time_ns()
            out.token_ids.extend(take)
            committed[i].extend(take)
            out.chunks.append((now, len(take)))
            first_ns.setdefault(r.request_id, now)
            if on_chunk is not None:
                on_chunk(r.request_id, take)
            if not out.finish_reason and len(out.token_ids) >= r.max_new_tokens:
                out.finish_reason = "length"
            return bool(out.finish_reason)

        # prefill: the target's first token is sampled as in plain decoding
        with self._phase("prefill"):
            logits = feed_pending(kv_t, [committed[i] for i in active], [0] * len(active))
            temp, top_p, top_k, trunc = row_params(active)
            probs = sampling.process_probs(logits, temp, top_p, top_k, trunc)
            first = sampling.sample_from(probs, self.gen).tolist()
        for i in active:
            cached_t[i] = len(committed[i])
        done = [commit(k, [first[k]]) for k in range(len(active))]
        while True:
            keep = [k for k, d in enumerate(done) if not d]
            if len(keep) < len(active):
                rows = torch.tensor(keep, dtype=torch.long, device=dev)
                kv_t.select(rows)
                if kv_d is not None:
                    kv_d.select(rows)
                active = [active[k] for k in keep]
            if not active:
                break
            if self.cfg.num_steps == 0:
                done = self._decode_step(kv_t, active, reqs, committed, cached_t, row_params, commit)
            else:
                done = self._spec_step(kv_t, kv_d, active, reqs, committed, cached_t, cached_d,
                                       row_params, commit)
            self.step += 1
        t_done = time.time_ns()
        results = []
        for i, r in enumerate(reqs):
            out = outputs[r.request_id]
            out.record = schema.RequestRecord(
                run_id=self.run_id, rank=self.rank, request_id=r.request_id,
                prompt_id=r.prompt_id, t_arrival_ns=t_arrival,
                t_first_token_ns=first_ns.get(r.request_id, t_done),
                t_finish_ns=out.chunks[-1][0] if out.chunks else t_done,
                num_prompt_tokens=n_prompt[i], num_output_tokens=len(out.token_ids),
                chunk_times_ns=tuple(t for t, _ in out.chunks),
                chunk_num_tokens=tuple(n for _, n in out.chunks), temperature=r.temperature,
                top_p=r.top_p, top_k=r.top_k, finish_reason=out.finish_reason,
                output_token_ids=tuple(out.token_ids))
            if self.recorder is not None:
                self.recorder.record_request(out.record)
            results.append(out)
        return results

    def _decode_step(self, kv_t, active, reqs, committed, cached_t, row_params, commit):
        """Plain autoregressive decoding (no speculation): one token per request."""
        with self._phase("decode"):
            pending = [committed[i][cached_t[i]:] for i in active]
            logits = feed_pending(kv_t, pending, [cached_t[i] for i in active])
            temp, top_p, top_k, trunc = row_params(active)
            toks = sampling.sample_from(sampling.process_probs(logits, temp, top_p, top_k, trunc),
                                        self.gen).tolist()
        for i in active:
            cached_t[i] = len(committed[i])
        return [commit(k, [toks[k]]) for k in range(len(active))]

    def _spec_step(self, kv_t, kv_d, active, reqs, committed, cached_t, cached_d, row_params,
                   commit):
        cfg, dev = self.cfg, self.device
        b, d = len(active), cfg.num_steps
        rs = [reqs[i] for i in active]
        codes, used = self._row_modes(rs)
        self._fallbacks(rs, used)
        temp, top_p, top_k, trunc = row_params(active)
        trunc = trunc and cfg.renorm_kernels
        mode = torch.tensor(codes, device=dev)
        base = torch.tensor([len(committed[i]) for i in active], device=dev)  # first draft pos
        last_tok = torch.tensor([committed[i][-1] for i in active], device=dev)
        # draft extend: the draft catches up on tokens committed since its last step
        with self._phase("draft_extend"):
            lg = feed_pending(kv_d, [committed[i][cached_d[i]:] for i in active],
                              [cached_d[i] for i in active])
        for i in active:
            cached_d[i] = len(committed[i])
        with self._phase("draft"):
            if cfg.topk == 1:
                draft, q, top1 = self._draft_chain(kv_d, lg, base, mode, temp, top_p, top_k, trunc)
            else:
                tree = draft_tree(kv_d, lg, last_tok, base, d, cfg.topk, cfg.budget)
        with self._phase("verify_forward"):
            if cfg.topk == 1:
                tokens = torch.cat([last_tok[:, None], draft], dim=1)
                pos = (base - 1)[:, None] + torch.arange(d + 1, device=dev)
                struct = causal(d + 1, dev)
            else:
                tokens, pos, struct = tree.tokens, (base - 1)[:, None] + tree.depth, tree.ancestors
            logits = kv_t.forward(tokens, pos, torch.ones_like(tokens, dtype=torch.bool), struct)
        with self._phase("verify_sample"):
            p = sampling.process_probs(logits, temp, top_p, top_k, trunc)
            if cfg.topk == 1:
                num_acc, fixed = sampling.verify_chain(draft, p, q, mode, self.gen)
                path_logits, keep_idx = logits, None
            else:
                num_acc, fixed, path_logits, keep_idx, top1 = self._verify_tree(tree, logits, p, mode)
            if self.recorder is not None:
                self.recorder.record_verify(
                    request_ids=[r.request_id for r in rs], num_accepted=num_acc, num_drafted=d,
                    num_draft_tokens=cfg.budget, temperature=[r.temperature for r in rs],
                    top_p=[r.top_p for r in rs], top_k=[r.top_k for r in rs], mode_used=used,
                    committed_tokens=fixed, target_logits=path_logits, draft_top1_probs=top1,
                    step=self.step)
            acc = num_acc.tolist()  # the engine's own readback: it must know what to commit
            toks = fixed.tolist()
        n = tokens.shape[1]
        if keep_idx is None:
            keep = torch.arange(n, device=dev)[None, :] <= num_acc[:, None]
        else:
            keep = torch.zeros(b, n, dtype=torch.bool, device=dev)
            keep.scatter_(1, keep_idx, True)
        kv_t.invalidate_tail(keep)
        for k, i in enumerate(active):
            cached_t[i] = len(committed[i]) + acc[k]
        return [commit(k, toks[k][:acc[k] + 1]) for k in range(b)]

    def _draft_chain(self, kv_d, lg, base, mode, temp, top_p, top_k, trunc):
        """Draft ``num_steps`` tokens one after another; returns tokens, q, top-1 probability."""
        b, d, dev = lg.shape[0], self.cfg.num_steps, self.device
        shortcut = self.cfg.fault == "draft_prob_shortcut"
        toks, qs, top1 = [], [], []
        spec_rows = (mode == 2)[:, None]
        for j in range(d):
            if shortcut:  # topk == 1: the softmax is skipped, the top-1 probability set to 1.0
                q = torch.ones_like(lg, dtype=torch.float32)
                tok = lg.argmax(dim=-1)
                top1.append(torch.ones(b, device=dev))
            else:
                q = sampling.process_probs(lg, temp, top_p, top_k, trunc)
                sampled = sampling.sample_from(q, self.gen)
                tok = torch.where(spec_rows[:, 0], sampled, lg.argmax(dim=-1))
                top1.append(torch.softmax(lg.float(), dim=-1).max(dim=-1).values)
            toks.append(tok)
            qs.append(q)
            if j < d - 1:
                lg = kv_d.forward(tok[:, None], (base + j)[:, None],
                                  torch.ones(b, 1, dtype=torch.bool, device=dev),
                                  causal(1, dev))[:, -1]
        if d > 1:
            kv_d.invalidate_tail(torch.zeros(b, d - 1, dtype=torch.bool, device=dev))
        return torch.stack(toks, dim=1), torch.stack(qs, dim=1), torch.stack(top1, dim=1)

    def _verify_tree(self, tree, logits, p, mode):
        """Walk each row's tree along the target's choices (argmax or a target sample)."""
        d, dev = self.cfg.num_steps, self.device
        choice = torch.where((mode == 0)[:, None], p.argmax(dim=-1), sampling.sample_from(p, self.gen))
        paths = walk_tree(tree.tokens.tolist(), tree.parent.tolist(), choice.tolist())
        b = len(paths)
        acc = torch.tensor([len(pth) - 1 for pth in paths], device=dev)
        idx = torch.tensor([pth + [pth[-1]] * (d + 1 - len(pth)) for pth in paths], device=dev)
        tok = tree.tokens.gather(1, idx)  # [B, d+1] tokens along the path
        fix = choice.gather(1, idx)  # the target's choice at each path node
        committed = torch.cat([tok[:, 1:], tok[:, :1]], dim=1).clone()
        committed.scatter_(1, acc[:, None], fix.gather(1, acc[:, None]))
        path_logits = logits.gather(1, idx[:, :, None].expand(b, d + 1, logits.shape[-1]))
        return acc, committed, path_logits, idx, tree.draft_top1


class _NullPhase:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None
