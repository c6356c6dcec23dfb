"""Acceptance by context length: does acceptance hold as the context grows?

A drafter whose window is too short accepts less as context grows (acceptance length 2.3 at 2k
tokens and 1.1 at 20k have been reported). Each verify step of a request is placed at its
context length when it ran: the prompt, plus the first token (made at prefill), plus every
token committed by the request's earlier steps (accepted drafts and the bonus token each) —
all from the trace's own records, in step order. Buckets are log-spaced (powers of two:
0-63, 64-127, 128-255, ...). Per bucket: acceptance length (tokens committed per
request-step, bonus token included, pooled), the acceptance rate (accepted / drafted, pooled),
the request-steps and distinct prompts in it, and a bootstrap 95% interval over requests
(acceptance varies between prompts of one length, so a bucket of one prompt says little).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from .. import schema
from .counts import Acceptance, clamp

MIN_BUCKET = 64  #: the first bucket holds contexts below this many tokens


def bucket_of(n: int) -> int:
    """The bucket's lower edge: 0, 64, 128, 256, ... (powers of two from MIN_BUCKET)."""
    return 0 if n < MIN_BUCKET else 1 << (n.bit_length() - 1)


@dataclass
class ContextBucket:
    run_id: str
    lo: int  #: contexts from lo tokens ...
    hi: int  #: ... to below hi
    request_steps: int
    drafted: int
    accepted: int
    requests: int
    prompts: int
    acceptance_length: float | None
    ci: tuple[float, float] | None  #: bootstrap 95% over requests; None under 2 requests
    acceptance_rate: float | None


def _steps_in_order(records: list[Any]) -> list[schema.VerifyStepRecord]:
    from ..io.columns import expand

    steps = [r for r in expand(records) if isinstance(r, schema.VerifyStepRecord)]
    return sorted(steps, key=lambda v: (v.run_id, v.rank, v.step, v.t_ns))


def context_buckets(records: Iterable[Any], *, n_boot: int = 1000, seed: int = 0) -> list[ContextBucket]:
    """Per run and context bucket, the acceptance of the request-steps that ran there."""
    records = list(records)
    prompt_len = {(r.run_id, r.request_id): (r.num_prompt_tokens, r.prompt_id or r.request_id)
                  for r in records if isinstance(r, schema.RequestRecord)}
    done: dict[tuple[str, str], int] = defaultdict(int)  #: tokens committed by earlier steps
    # (run, bucket) -> request -> [drafts, drafted, accepted]
    cells: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    prompts: dict[tuple[str, int], set[str]] = defaultdict(set)
    for v in _steps_in_order(records):
        for e in v.entries:
            key = (v.run_id, e.request_id)
            if key not in prompt_len:
                continue
            n_prompt, prompt = prompt_len[key]
            context = n_prompt + 1 + done[key]
            drafted, accepted, _ = clamp(e.num_drafted, e.num_accepted)
            done[key] += accepted + 1
            if not drafted:
                continue
            cell = (v.run_id, bucket_of(context))
            c = cells[cell][e.request_id]
            c[0] += 1
            c[1] += drafted
            c[2] += accepted
            prompts[cell].add(prompt)
    rng = np.random.default_rng(seed)
    out = []
    for (run_id, lo), by_req in sorted(cells.items()):
        arr = np.array(list(by_req.values()), dtype=float)
        drafts, drafted, accepted = (int(x) for x in arr.sum(axis=0))
        counted = Acceptance(drafts, drafted, accepted)
        ci = None
        if len(arr) >= 2:
            idx = rng.integers(0, len(arr), (n_boot, len(arr)))
            boot = 1 + arr[idx, 2].sum(axis=1) / np.maximum(arr[idx, 0].sum(axis=1), 1)
            ci = (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)))
        out.append(ContextBucket(
            run_id, lo, MIN_BUCKET if lo == 0 else lo * 2, drafts, drafted, accepted,
            len(arr), len(prompts[(run_id, lo)]), counted.length, ci, counted.rate))
    return out


def bucket_dict(b: ContextBucket) -> dict[str, Any]:
    return {k: getattr(b, k) for k in ContextBucket.__dataclass_fields__}


def format_buckets(buckets: list[ContextBucket]) -> str:
    lines = ["Acceptance by context length at the step (prompt + tokens so far), log-spaced buckets.",
             "AL: tokens committed per request-step, bonus token included, pooled; 95% bootstrap",
             "interval over requests; prompts: distinct prompts with a step in the bucket.", ""]
    for run_id in dict.fromkeys(b.run_id for b in buckets):
        lines.append(f"== {run_id}")
        lines.append(f"  {'context':<12} {'req-steps':>9} {'requests':>8} {'prompts':>7} {'AL':>6}  "
                     f"{'95% CI':<15} {'rate':>6}")
        for b in (b for b in buckets if b.run_id == run_id):
            al = f"{b.acceptance_length:.3f}" if b.acceptance_length is not None else "n/a"
            ci = f"[{b.ci[0]:.2f}, {b.ci[1]:.2f}]" if b.ci else "n/a (1 request)"
            rate = f"{b.acceptance_rate:.3f}" if b.acceptance_rate is not None else "n/a"
            lines.append(f"  {f'{b.lo}-{b.hi - 1}':<12} {b.request_steps:>9} {b.requests:>8} "
                         f"{b.prompts:>7} {al:>6}  {ci:<15} {rate:>6}")
    return "\n".join(lines)
