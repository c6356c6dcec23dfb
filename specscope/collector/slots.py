"""One slot at zero: a batch row (or an engine's slot) whose drafts are accepted far less often
than the other rows', while the pooled rate only looks like a harder workload (llama.cpp #27572:
with two slots, one at 0 of 136,713 drafts and the pooled rate merely halved; vLLM #55357 and
vllm-ascend #16980 are batch-row variants). Pure; stdlib only.

The same test runs across an engine's ranks, where a run has several: llama.cpp's slots are its
ranks when its log is imported, and a data-parallel rank whose drafts all fail is the same
failure at another scale.

Each row is compared with the others pooled: flagged where its acceptance rate is under
``RATIO`` of theirs and its rejections exceed theirs by Fisher's exact one-sided test at
``exact.ALPHA`` divided by the number of rows judged (Bonferroni: a false alarm at most at
``ALPHA`` per evaluation, whatever the number of rows). Rows are filled in admission order, so a
row holds whatever requests it holds: one whose requests' drafts all fail (a different workload
kept in one row) reads the same, and the anomaly says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .. import schema
from ..exact import ALPHA, one_sided_excess

#: a row is "at zero" under this share of the other rows' acceptance rate
RATIO = 0.1
#: draft tokens a row needs before it is judged
MIN_DRAFTS = 100
#: rows counted per run (a wider batch's later rows pool into the last)
MAX_ROWS = 64


@dataclass(frozen=True)
class SlotFinding:
    """A row whose acceptance is far below the others'."""

    slot: int
    draft_tokens: int
    accepted: int
    rest_draft_tokens: int
    rest_accepted: int
    p_value: float

    @property
    def rate(self) -> float:
        return self.accepted / self.draft_tokens

    @property
    def rest_rate(self) -> float:
        return self.rest_accepted / self.rest_draft_tokens


def slot_outliers(drafted: Sequence[int], accepted: Sequence[int], *, alpha: float = ALPHA,
                  ratio: float = RATIO, min_drafts: int = MIN_DRAFTS) -> list[SlotFinding]:
    """The rows (index into ``drafted``/``accepted``: draft tokens and accepted ones per row)
    at zero against the others pooled."""
    judged = [i for i, d in enumerate(drafted) if d >= min_drafts]
    if len(judged) < 2:
        return []
    total_d, total_a = sum(drafted), sum(accepted)
    out = []
    for i in judged:
        d, a = drafted[i], accepted[i]
        rest_d, rest_a = total_d - d, total_a - a
        if not rest_d or not rest_a or a / d >= ratio * rest_a / rest_d:
            continue  # (the exact test only where the rate is far below: its cost grows with a)
        _, p = one_sided_excess(d - a, d, rest_d - rest_a, rest_d)
        if p < alpha / len(judged):
            out.append(SlotFinding(i, d, a, rest_d, rest_a, p))
    return out


def rank_counts(records: Iterable[Any]) -> dict[int, tuple[int, int]]:
    """Draft tokens and accepted ones per rank (llama.cpp's slot, where its log was imported):
    from the verify steps where the records have them, else from the requests' own counts."""
    records = list(records)
    out: dict[int, tuple[int, int]] = {}
    steps = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    for r in steps:
        for e in r.entries:
            if e.num_drafted > 0:
                d, a = out.get(r.rank, (0, 0))
                out[r.rank] = (d + e.num_drafted, a + min(max(e.num_accepted, 0), e.num_drafted))
    if not steps:
        for q in records:
            if isinstance(q, schema.RequestRecord) and q.num_draft_tokens and \
                    q.num_accepted is not None:
                d, a = out.get(q.rank, (0, 0))
                out[q.rank] = (d + q.num_draft_tokens, a + min(q.num_accepted, q.num_draft_tokens))
    return out
