"""The reference speculative decoder: draft-then-verify over any Hugging Face causal LM pair.

Chain drafting (topk = 1) with greedy, target-only temperature or full speculative sampling;
EAGLE-style tree drafting (topk > 1) with greedy or target-only temperature sampling. Batched,
KV-cached, with the specscope hooks inside. Faults that reproduce real incidents are switches.
"""

from __future__ import annotations

import time
import warnings
from typing import Callable

import torch

from .. import schema
from . import logprobs, ngram, sampling
from .batch import Batch, Output, Request, Row  # noqa: F401 (Output, Request re-exported)
from .config import DECAY_STEPS, FAULTS, SpecConfig, row_modes  # noqa: F401 (re-exported)
from .kv import BatchKV, causal, feed_pending, like_lengths
from .policy import parse_policy
from .prefix import PrefixCache, seeded
from .tree import draft_tree, walk_tree


class SpeculativeDecoder:
    """Decodes batches of requests with a target model and (optionally) a draft model."""

    def __init__(self, target: torch.nn.Module, draft: torch.nn.Module | None, config: SpecConfig,
                 *, recorder=None, eos_ids: tuple[int, ...] = (), seed: int = 0,
                 device: str | torch.device = "cpu", run_id: str = "", policy=None,
                 detokenize: Callable[[list[int]], str] | None = None,
                 context: int | None = None, prefix_cache: PrefixCache | None = None) -> None:
        """``detokenize``: output tokens -> text, for the request records (none: no text).
        ``context``: the served context (max_model_len), where a server sets one.
        ``prefix_cache``: the target's prefix cache (none: every prompt prefilled whole; the
        ``prefix_cache_full_hit`` fault brings one of its own)."""
        if config.uses_draft_model and draft is None:
            raise ValueError("speculation needs a draft model")
        #: k per step (engine/policy.py): the config's, unless one is given
        self.policy = policy if policy is not None else parse_policy(config.policy, config.num_steps)
        self.target, self.draft, self.cfg = target, draft, config
        self.recorder, self.detokenize = recorder, detokenize
        self.eos = set(eos_ids)
        self.device = torch.device(device)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        #: the acceptance_decay fault's own draws (the sampling streams stay the clean run's)
        self._decay_gen = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.run_id = run_id or (recorder.run.run_id if recorder else "")
        self.rank = recorder.rank if recorder else 0
        self.step_index = 0
        self._warned = False
        self.context = context
        self.prefix_cache = prefix_cache if prefix_cache is not None or \
            config.fault != "prefix_cache_full_hit" else PrefixCache()

    # ------------------------------------------------------------------ helpers
    def _phase(self, name: str):
        if self.recorder is None:
            return _NullPhase()
        return self.recorder.phase(name, self.step_index)

    @staticmethod
    def _top2(rows: list[Row], logits: torch.Tensor) -> None:
        """A target-only run's reference figures for each row's next token (diverge reads them)."""
        for row, (margin, second) in zip(rows, sampling.top2(logits)):
            row.margins.append(margin)
            row.seconds.append(second)

    def _gens(self, rows: list[Row], draft: bool = False) -> sampling.Generators:
        """Where the rows' draws come from: the batch's generator, or per row where a row has a
        seed of its own. ``draft``: the draft's draws (the seeded ``seed_ignored_in_draft``
        fault takes them from the batch's generator)."""
        if all(row.gen is None for row in rows) or (
                draft and self.cfg.fault == "seed_ignored_in_draft"):
            return self.gen
        return [self.gen if row.gen is None else row.gen for row in rows]

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
                                              step=self.step_index)

    # ------------------------------------------------------------------ decode
    def new_batch(self) -> Batch:
        """An empty running batch; requests join it with ``admit`` and leave when finished."""
        dev = self.device
        return Batch(BatchKV(self.target, 0, dev),
                     BatchKV(self.draft, 0, dev) if self.cfg.uses_draft_model else None)

    @torch.inference_mode()
    def admit(self, batch: Batch, requests: list[Request],
              on_chunk: Callable[[str, list[int]], None] | None = None) -> list[Output]:
        """Prefill ``requests`` and join them to ``batch`` between verify steps.

        The target's first token is sampled as in plain decoding. Returns the requests that
        finished with it.
        """
        if not requests:
            return []
        dev, now = self.device, time.time_ns()
        # prompts of like length prefill together: one long prompt must not pad every other
        # row of its wave to its length (rows join the batch in this order)
        rows = [Row(r, list(r.prompt_ids), Output(r.request_id, [], ""), r.arrival_ns or now,
                     None if r.seed is None else
                     torch.Generator(device=dev).manual_seed(r.seed))
                for r in requests]
        cache = self.prefix_cache
        hits = {id(row): hit for row in rows
                for hit in [cache.lookup(row.committed) if cache is not None else (0, [])]
                if hit[0]}
        warm = [row for row in rows if id(row) in hits]  # each from its cached prefix, alone
        groups = like_lengths(cold, lambda row: len(row.committed)) if (
            cold := [row for row in rows if id(row) not in hits]) else []
        rows = warm + [row for group in groups for row in group]
        kv_t = BatchKV(self.target, 0, dev)
        with self._phase("prefill"):
            parts = []
            for row in warm:
                n, layers = hits[id(row)]
                pending = row.committed[n:]
                if n == len(row.committed):  # found whole: its last token computed again, for
                    n -= 1  # its logits (the fault: from an input slot never written, token 0)
                    layers = [(k[:, :, :n], v[:, :, :n]) for k, v in layers]
                    pending = [0] if self.cfg.fault == "prefix_cache_full_hit" else \
                        row.committed[n:]
                kv_r = seeded(self.target, layers, dev)
                parts.append(feed_pending(kv_r, [pending], [n]))
                kv_t.merge(kv_r)
            for group in groups:
                kv_g = BatchKV(self.target, len(group), dev)
                parts.append(feed_pending(kv_g, [row.committed for row in group], [0] * len(group)))
                kv_t.merge(kv_g)
            logits = self._penalized(rows, torch.cat(parts))  # min_tokens from the first token
            temp, top_p, top_k, trunc = self._params(rows)
            probs = sampling.process_probs(logits, temp, top_p, top_k, trunc)
            first = sampling.sample_from(probs, self._gens(rows)).tolist()
            if not self.cfg.num_steps:
                self._top2(rows, logits)
        for k, row in enumerate(rows):
            if cache is not None:
                cache.store(row.committed, kv_t, k)
            row.cached_t = len(row.committed)
            if row.req.prompt_logprobs is not None:  # a scoring pass of its own (no cache)
                row.out.prompt_logprobs = logprobs.prompt(
                    self.target, row.req.prompt_ids, row.req.prompt_logprobs,
                    shift=self.cfg.fault == "prompt_logprobs_shifted")
        batch.kv_t.merge(kv_t)
        if batch.kv_d is not None:
            batch.kv_d.merge(BatchKV(self.draft, len(rows), dev))
        base = len(batch.rows)
        batch.rows.extend(rows)
        done = [self._commit(row, [tok], on_chunk, self._lps(row, logits[k:k + 1], [tok]))
                for k, (row, tok) in enumerate(zip(rows, first))]
        return self._retire(batch, [False] * base + done)

    @torch.inference_mode()
    def step(self, batch: Batch,
             on_chunk: Callable[[str, list[int]], None] | None = None) -> list[Output]:
        """One decode (or draft-and-verify) step for every request in ``batch``; returns the
        requests that finished."""
        if not batch.rows:
            return []
        b = len(batch.rows)
        k, why = self.policy.choose(b) if self.cfg.num_steps else (0, "")
        t0 = time.perf_counter()
        if k == 0:
            done, acc = self._decode_step(batch, on_chunk, policy_off=bool(self.cfg.num_steps),
                                          why=why), ()
        else:
            done, acc = self._spec_step(batch, on_chunk, k, why)
        self.policy.observe(k, b, time.perf_counter() - t0, acc)
        self.step_index += 1
        finished = self._retire(batch, done)
        batch.kv_t.compact()
        if batch.kv_d is not None:
            batch.kv_d.compact()
        return finished

    def generate(self, requests: list[Request],
                 on_chunk: Callable[[str, list[int]], None] | None = None) -> list[Output]:
        """Decode one batch to completion; returns outputs in request order."""
        batch = self.new_batch()
        done = {o.request_id: o for o in self.admit(batch, list(requests), on_chunk)}
        while batch.rows:
            done.update((o.request_id, o) for o in self.step(batch, on_chunk))
        return [done[r.request_id] for r in requests]

    def cancel(self, batch: Batch, request_ids: set[str]) -> list[Output]:
        """Remove requests from the batch before they finish (finish reason ``abort``)."""
        done = [row.req.request_id in request_ids for row in batch.rows]
        for row, d in zip(batch.rows, done):
            if d:
                row.out.finish_reason = "abort"
        return self._retire(batch, done)

    def _params(self, rows: list[Row]):
        dev, rs = self.device, [row.req for row in rows]
        return (torch.tensor([r.temperature for r in rs], device=dev),
                torch.tensor([r.top_p for r in rs], device=dev),
                torch.tensor([r.top_k for r in rs], device=dev),
                sampling.needs_truncation([r.top_p for r in rs], [r.top_k for r in rs]))

    def _penalized(self, rows: list[Row], logits: torch.Tensor, tokens=None, sees=None):
        """``logits`` with each row's presence and frequency penalties (``sampling.penalize``)
        and its end-of-sequence and stop tokens masked below its min_tokens
        (``sampling.hold_eos``)."""
        logits = sampling.penalize(logits, [row.out.token_ids for row in rows],
                                   [row.req.presence_penalty for row in rows],
                                   [row.req.frequency_penalty for row in rows], tokens, sees,
                                   first_only=self.cfg.fault == "penalty_first_only")
        return sampling.hold_eos(logits, [len(row.out.token_ids) for row in rows],
                                 [row.req.min_new_tokens for row in rows],
                                 [self.eos | row.req.stop_token_ids for row in rows], sees,
                                 first_only=self.cfg.fault == "min_tokens_first_only")

    @staticmethod
    def _lps(row: Row, logits: torch.Tensor, tokens: list[int]) -> list | None:
        """The committed tokens' log-probabilities where the request asked for them."""
        k = row.req.top_logprobs
        return None if k is None else logprobs.committed(logits, tokens, k)

    def _commit(self, row: Row, new: list[int], on_chunk, lps: list | None = None) -> bool:
        """Append tokens to a request (with their log-probabilities where asked); True when it
        finished."""
        r, out = row.req, row.out
        # length_past_step: max_tokens checked once per step, after the whole step is committed
        take = (list(new) if self.cfg.fault == "length_past_step"
                else new[:r.max_new_tokens - len(out.token_ids)])
        # stop_token_past_step: stop tokens looked for only at the step's last token
        last_only = self.cfg.fault == "stop_token_past_step"
        for j, tok in enumerate(take):
            if (tok in self.eos and not r.ignore_eos) or (
                    tok in r.stop_token_ids and (not last_only or j == len(take) - 1)):
                take = take[:j + 1]
                out.finish_reason = "stop"
                break
        if r.stop is not None and take:
            keep = r.stop(out.token_ids + take, len(take))
            if keep is not None:
                take = take[:max(0, keep - len(out.token_ids))]
                out.finish_reason = "stop"
        now = time.time_ns()
        if lps is not None:
            out.logprobs.extend(lps[:len(take)])
        out.token_ids.extend(take)
        row.committed.extend(take)
        out.chunks.append((now, len(take)))
        row.first_ns = row.first_ns or now
        if on_chunk is not None:
            on_chunk(r.request_id, take)
        if not out.finish_reason and len(out.token_ids) >= r.max_new_tokens:
            out.finish_reason = "length"
        return bool(out.finish_reason)

    def _retire(self, batch: Batch, done: list[bool]) -> list[Output]:
        """Remove finished rows from the batch (and its caches); write their request records."""
        if not any(done):
            return []
        keep = [k for k, d in enumerate(done) if not d]
        finished = [batch.rows[k] for k, d in enumerate(done) if d]
        rows = torch.tensor(keep, dtype=torch.long, device=self.device)
        batch.kv_t.select(rows)
        if batch.kv_d is not None:
            batch.kv_d.select(rows)
        batch.rows = [batch.rows[k] for k in keep]
        for row in finished:
            r, out = row.req, row.out
            out.record = schema.RequestRecord(
                run_id=self.run_id, rank=self.rank, request_id=r.request_id,
                prompt_id=r.prompt_id, category=r.category, t_arrival_ns=row.t_arrival,
                t_first_token_ns=row.first_ns, t_finish_ns=out.chunks[-1][0],
                num_prompt_tokens=len(r.prompt_ids), num_output_tokens=len(out.token_ids),
                chunk_times_ns=tuple(t for t, _ in out.chunks),
                chunk_num_tokens=tuple(n for _, n in out.chunks), temperature=r.temperature,
                top_p=r.top_p, top_k=r.top_k, finish_reason=out.finish_reason,
                output_token_ids=tuple(out.token_ids), num_verify_steps=row.verify_steps,
                output_text=self.detokenize(out.token_ids) if self.detokenize else "",
                num_draft_tokens=row.drafted, num_accepted=row.accepted,
                accept_len_hist=tuple(row.accept_len_hist),
                top2_margins=tuple(row.margins[:len(out.token_ids)]),
                second_token_ids=tuple(row.seconds[:len(out.token_ids)]))
            if self.recorder is not None:
                self.recorder.record_request(out.record)
        return [row.out for row in finished]

    def _decode_step(self, batch: Batch, on_chunk, policy_off: bool = False,
                     why: str = "", depth: int = 0) -> list[bool]:
        """Plain autoregressive decoding (no speculation): one token per request. With
        ``policy_off`` (a speculative run whose policy chose k = 0, or a prompt-lookup step
        where no request found a match: ``depth`` is then the k it ran with) the step is
        recorded as a verify step with nothing drafted, its depth and, on a change, the reason."""
        rows = batch.rows
        with self._phase("decode"):
            pending = [row.committed[row.cached_t:] for row in rows]
            raw = feed_pending(batch.kv_t, pending, [row.cached_t for row in rows])
            logits = self._penalized(rows, raw)
            temp, top_p, top_k, trunc = self._params(rows)
            toks = sampling.sample_from(sampling.process_probs(logits, temp, top_p, top_k, trunc),
                                        self._gens(rows)).tolist()
            if not self.cfg.num_steps:
                self._top2(rows, logits)
        if policy_off and self.recorder is not None:
            rs = [row.req for row in rows]
            self.recorder.record_verify(
                request_ids=[r.request_id for r in rs], num_accepted=torch.zeros(len(rs), dtype=torch.long),
                num_drafted=0, num_draft_tokens=0, temperature=[r.temperature for r in rs],
                top_p=[r.top_p for r in rs], top_k=[r.top_k for r in rs], step=self.step_index,
                draft_depth=depth, depth_reason=why)
        for row in rows:
            row.cached_t = len(row.committed)
        return [self._commit(row, [tok], on_chunk, self._lps(row, raw[k:k + 1], [tok]))
                for k, (row, tok) in enumerate(zip(rows, toks))]

    def _spec_step(self, batch: Batch, on_chunk, d: int, why: str = ""):
        """Draft ``d`` tokens per request and verify them; (finished flags, accepted per row)."""
        cfg, dev = self.cfg, self.device
        kv_t, kv_d, rows = batch.kv_t, batch.kv_d, batch.rows
        b = len(rows)
        rs = [row.req for row in rows]
        codes, used = row_modes(self.cfg, rs)
        self._fallbacks(rs, used)
        temp, top_p, top_k, trunc = self._params(rows)
        trunc = trunc and cfg.renorm_kernels
        mode = torch.tensor(codes, device=dev)
        base = torch.tensor([len(row.committed) for row in rows], device=dev)  # first draft pos
        last_tok = torch.tensor([row.committed[-1] for row in rows], device=dev)
        lengths = None
        if kv_d is None:  # n-gram: look the drafts up; a step where none matched decodes plainly
            with self._phase("draft"):
                draft, q, lens = ngram.draft_batch([row.committed for row in rows], d,
                                                   self.target.config.vocab_size, dev)
            if not draft.shape[1]:  # speculation is on at depth d; nothing matched this step
                return self._decode_step(batch, on_chunk, policy_off=True, why=why, depth=d), ()
            d, top1, lengths = draft.shape[1], None, torch.tensor(lens, device=dev)
        else:
            # draft extend: the draft catches up on tokens committed since its last step (all
            # of them after steps with speculation off: the catch-up is this step's)
            with self._phase("draft_extend"):
                lg = feed_pending(kv_d, [row.committed[row.cached_d:] for row in rows],
                                  [row.cached_d for row in rows])
            for row in rows:
                row.cached_d = len(row.committed)
            lens = [d] * b
            with self._phase("draft"):
                if cfg.topk == 1:
                    draft, q, top1 = self._draft_chain(kv_d, lg, base, mode, temp, top_p, top_k,
                                                       trunc, d, self._gens(rows, draft=True))
                else:
                    tree = draft_tree(kv_d, lg, last_tok, base, d, cfg.topk, cfg.budget)
        with self._phase("verify_forward"):
            if cfg.topk == 1:
                tokens = torch.cat([last_tok[:, None], draft], dim=1)
                pos = (base - 1)[:, None] + torch.arange(d + 1, device=dev)
                struct = causal(d + 1, dev)
            else:
                tokens, pos, struct = tree.tokens, (base - 1)[:, None] + tree.depth, tree.ancestors
            raw = kv_t.forward(tokens, pos, torch.ones_like(tokens, dtype=torch.bool), struct)
            logits = self._penalized(rows, raw, tokens, struct)
        with self._phase("verify_sample"):
            if cfg.fault == "temperature_twice":
                p = sampling.process_probs(logits, temp * temp, top_p, top_k, trunc)
            elif cfg.fault == "top_p_ignored":
                p = sampling.process_probs(logits, temp, torch.ones_like(top_p), top_k, trunc)
            else:
                p = sampling.process_probs(logits, temp, top_p, top_k, trunc)
            if cfg.topk == 1:
                num_acc, fixed = sampling.verify_chain(draft, p, q, mode, self._gens(rows),
                                                       lengths, fault=cfg.fault)
                if cfg.fault == "row_drafts_rejected" and b > 1:  # batch row 1: none accepted
                    num_acc = num_acc.clone()  # (its first position's token still committed)
                    num_acc[1] = 0
                elif cfg.fault == "acceptance_decay":  # a share of rows growing with steps served
                    cut = torch.rand(b, generator=self._decay_gen, device=dev) < \
                        self.step_index / DECAY_STEPS
                    num_acc = torch.where(cut, torch.zeros_like(num_acc), num_acc)
                path_logits, keep_idx = logits, None
                if cfg.fault == "greedy_second_choice" and self.step_index % 8 == 3:
                    fixed = sampling.second_choice(fixed, logits, num_acc, mode)
            else:
                num_acc, fixed, path_logits, keep_idx, top1 = self._verify_tree(
                    tree, logits, p, mode, self._gens(rows))
            drafted = q_drafted = q_full = None
            if self.recorder is not None and cfg.topk == 1:
                # the acceptance rule's inputs: each row's draft tokens (-1 past a short n-gram
                # draft) and, where verify runs speculative sampling, the draft's probability
                # of each (target-only and greedy rows accept on equality: 1)
                drafted = draft if lengths is None else torch.where(
                    torch.arange(d, device=dev)[None, :] < lengths[:, None], draft,
                    torch.full_like(draft, -1))
                q_drafted = torch.where((mode == 2)[:, None],
                                        q.gather(-1, draft[..., None])[..., 0],
                                        torch.ones(b, d, device=dev))
                q_full = q  # the residual rule of a sampled draft reads its whole distribution
            if self.recorder is not None:
                self.recorder.record_verify(
                    request_ids=[r.request_id for r in rs], num_accepted=num_acc,
                    num_drafted=d if lengths is None else lens,
                    num_draft_tokens=cfg.budget if cfg.topk > 1 else (d if lengths is None else lens),
                    temperature=[r.temperature for r in rs],
                    top_p=[r.top_p for r in rs], top_k=[r.top_k for r in rs], mode_used=used,
                    committed_tokens=fixed, target_logits=path_logits, draft_top1_probs=top1,
                    step=self.step_index, draft_depth=d, depth_reason=why,
                    draft_tokens=drafted, draft_token_probs=q_drafted, draft_probs=q_full)
            acc = num_acc.tolist()  # the engine's own readback: it must know what to commit
            toks = fixed.tolist()
            if cfg.fault == "batch_row_mixup" and b > 1:  # the last row's own token: row 0's
                toks[-1][acc[-1]] = toks[0][acc[0]]
        for row, a, n in zip(rows, acc, lens):  # the request's own figures, from the host copy
            if not n:  # an n-gram row that drafted nothing: no draft of its own, as engines count
                continue
            row.verify_steps += 1
            row.drafted += n
            row.accepted += a
            hist = row.accept_len_hist
            hist.extend([0] * (a + 2 - len(hist)))
            hist[a + 1] += 1
        n = tokens.shape[1]
        if keep_idx is None:
            keep = torch.arange(n, device=dev)[None, :] <= num_acc[:, None]
        else:
            keep = torch.zeros(b, n, dtype=torch.bool, device=dev)
            keep.scatter_(1, keep_idx, True)
        kv_t.invalidate_tail(keep)
        shifted = [cfg.fault == "logprobs_at_limit" and self.context is not None
                   and len(row.committed) + d + 1 >= self.context for row in rows]
        for k, row in enumerate(rows):
            row.cached_t = len(row.committed) + acc[k]
        return [self._commit(row, toks[k][:acc[k] + 1], on_chunk,
                             self._lps(row, torch.cat([raw[k][1:], raw[k][-1:]]) if shifted[k]
                                       else raw[k], toks[k][:acc[k] + 1])
                             if keep_idx is None else None)
                for k, row in enumerate(rows)], acc

    def _draft_chain(self, kv_d, lg, base, mode, temp, top_p, top_k, trunc, d, gens):
        """Draft ``d`` tokens one after another; returns tokens, q, top-1 probability."""
        b, dev = lg.shape[0], self.device
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
                sampled = sampling.sample_from(q, gens)
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

    def _verify_tree(self, tree, logits, p, mode, gens):
        """Walk each row's tree along the target's choices (argmax or a target sample)."""
        d, dev = self.cfg.num_steps, self.device
        choice = torch.where((mode == 0)[:, None], p.argmax(dim=-1), sampling.sample_from(p, gens))
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
