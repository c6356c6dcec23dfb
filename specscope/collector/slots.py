"""One slot at zero: a batch row (or an engine's slot) whose drafts are accepted far less often
than the other rows', while the pooled rate only looks like a harder workload (llama.cpp #27572:
with two slots, one at 0 of 136,713 drafts and the pooled rate merely halved; vLLM #55357 and
vllm-ascend #16980 are batch-row variants). Pure; stdlib only.

The same test runs across an engine's ranks, where a run has several: llama.cpp's slots are its
ranks when its log is imported, and a data-parallel rank whose drafts all fail is the same
failure at another scale.

Each row is compared with the others pooled: flagged where its acceptance rate is under
``RATIO`` of theirs and its rejections exceed theirs by Fisher's exact one-sided test at
``exact.ALPHA`` divided by the number of rows judged (Bonferroni). The test reads each draft
token as an independent trial, which it is not: acceptance within a step is a prefix, and a
request keeps its row for many steps, so its error rate holds for exchangeable tokens only. What
keeps clean traffic quiet is the ratio: rows that hold different workloads differ by about
twice (two clean llama.cpp slots read 0.31 and 0.66), a row at zero by far more. A row that
held only requests whose drafts all fail (one long request alone in a row a burst reaches)
reads the same, and the anomaly says so. It runs over one run's records (``report``), not in the
live collector (over cumulative counts it would wait for a fault to outweigh all the clean
traffic before it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

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
    judged: int  #: rows judged (the Bonferroni divisor)

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
            out.append(SlotFinding(i, d, a, rest_d, rest_a, p, len(judged)))
    return out


def rank_counts(records: Iterable[schema.Record]) -> dict[tuple[str, int], tuple[int, int]]:
    """Draft tokens and accepted ones per (node, rank) (llama.cpp's slot, where its log was
    imported): from the verify steps where the records have any, else from the requests' own
    counts (never both: a rank with requests only is then left out)."""
    records = list(records)
    out: dict[tuple[str, int], tuple[int, int]] = {}

    def add(key: tuple[str, int], drafted: int, accepted: int) -> None:
        if drafted > 0:
            d, a = out.get(key, (0, 0))
            out[key] = (d + drafted, a + min(max(accepted, 0), drafted))

    steps = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    for r in steps:
        for e in r.entries:
            add((r.node, r.rank), e.num_drafted, e.num_accepted)
    if not steps:
        for q in records:
            if isinstance(q, schema.RequestRecord) and q.num_accepted is not None:
                add((q.node, q.rank), q.num_draft_tokens or 0, q.num_accepted)
    return out
