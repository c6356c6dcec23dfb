"""Where a speculative run's greedy output first differs from target-only decoding, and whether
that is a numerical tie or a fault.

Each greedy request (temperature 0) of a run is paired by prompt with the same prompt decoded
greedily without speculation (the trace's own reference run, as ``record`` writes it, or
another trace); two files of saved responses, which name no prompt, pair in file order. An
engine's margins come from its ``logprobs`` (vLLM with ``top_logprobs`` of 2 or more and
``return_tokens_as_token_ids``). Per pair:

- ``first_index``: the first output index where the two differ (a request that stopped where
  the other went on differs there too); None when identical.
- ``margin``: the reference's top-1 minus top-2 logit at that index (nats), and ``rank``: 1 or
  2 where the committed token is the reference's first or second choice, None where it is
  neither (or the reference did not record its top-2).
- ``verdict``: ``identical``; ``tie-flip`` where the committed token is the reference's second
  choice and the margin is within ``TIE_MARGIN`` for the target's dtype (batched verify,
  reduction order: expected and harmless); ``structural`` otherwise (the target was firmly
  against what was committed: a bug); ``unknown`` where the reference has no margins.
- after the divergence: ``lcs_ratio`` of the two continuations (difflib's matching ratio; 1 =
  the same text) and ``repetition`` of the speculative continuation (the share of its 4-grams
  that repeat an earlier one: a loop scores near 1).

The summary's verdict follows the rules of every check: FAIL on any structural divergence;
PASS only where the pairs rule a fault out, no structural divergence among at least
``PAIRS_TO_PASS`` pairs (13: a verify that structurally changes 30% or more of greedy outputs
would show in one of them but with chance under 1%); INCONCLUSIVE where fewer pairs were
compared, none exists, or a divergence's margin is unknown. Tie-flips alone never fail.

``TIE_MARGIN``: two logits no further apart than a few units in the last place of the dtype's
logits are a numerical tie (a margin of exactly 2 bfloat16 ulps, 0.25 nats, included: a
real vLLM's greedy answer flipped at one, against its target-only run). At the logit scale of a language model's top tokens (16-32) bfloat16's ulp is
0.125 and float16's 0.0156: 2 and 3 ulps give 0.25 and 0.05 nats; float32's ulp there is 2e-6,
and reductions over thousands of terms in another order move logits by about 1e-4: 1e-3.
How often a tie can happen at all, measured on SmolLM2's greedy target-only run (16 requests, 402
output positions, median margin 2.04 nats): 0.25% of positions below 0.001, 2.2% below 0.05,
10% below 0.25. A bfloat16 engine therefore meets a near-tie about once in ten tokens and may
flip it harmlessly; a float32 one about once in four hundred.
"""

from __future__ import annotations

import difflib
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence, cast

from .. import schema
from ..exact import TIE_MARGIN, TIE_SLACK, positions_to_rule_out

DEFAULT_DTYPE = "float32"
NGRAM = 4
#: the share of greedy requests a structural fault must reach to be ruled out by a PASS
FAULT_SHARE = 0.30
#: greedy pairs without a structural divergence that rule such a fault out (99%)
PAIRS_TO_PASS = cast(int, positions_to_rule_out(FAULT_SHARE))  # an int: FAULT_SHARE > 0


@dataclass
class Pair:
    """One greedy request against its reference."""

    request_id: str
    prompt_id: str
    first_index: int | None
    margin: float | None
    rank: int | None
    verdict: str
    lcs_ratio: float | None
    repetition: float | None
    reference_repetition: float | None
    committed_token: int | None
    reference_token: int | None


@dataclass
class DivergeResult:
    run_id: str
    reference_id: str
    dtype: str
    tie_margin: float
    pairs: list[Pair]
    paired_by: str = "prompt"  #: "prompt" (prompt or request id) or "order" (two response files)

    @property
    def diverged(self) -> list[Pair]:
        return [p for p in self.pairs if p.first_index is not None]

    @property
    def verdict(self) -> str:
        if any(p.verdict == "structural" for p in self.pairs):
            return "FAIL"
        if len(self.pairs) < PAIRS_TO_PASS or any(p.verdict == "unknown" for p in self.pairs):
            return "INCONCLUSIVE"
        return "PASS"

    def summary(self) -> dict[str, Any]:
        d = self.diverged
        return {"pairs": len(self.pairs), "identical": len(self.pairs) - len(d),
                "share_diverging": len(d) / len(self.pairs) if self.pairs else None,
                "median_first_index": (statistics.median(p.first_index for p in d
                                                         if p.first_index is not None)
                                       if d else None),
                "share_tie_flips": (sum(p.verdict == "tie-flip" for p in d) / len(d)) if d else None,
                "structural": sum(p.verdict == "structural" for p in d),
                "verdict": self.verdict,
                "need": (PAIRS_TO_PASS - len(self.pairs) if self.verdict == "INCONCLUSIVE"
                         and len(self.pairs) < PAIRS_TO_PASS else None),
                "rules_out": (f"rules out structural divergence in {FAULT_SHARE:.0%} or more of "
                              "greedy requests") if self.verdict == "PASS" else None}

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "reference_id": self.reference_id, "dtype": self.dtype,
                "paired_by": self.paired_by,
                "tie_margin": self.tie_margin, "summary": self.summary(),
                "pairs": [asdict(p) for p in self.pairs]}


def repetition(tokens: Sequence[int], n: int = NGRAM) -> float | None:
    """The share of ``tokens``' n-grams that repeat an earlier one (None under n + 1 tokens)."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    if len(grams) < 2:
        return None
    return 1 - len(set(grams)) / len(grams)


def compare_pair(req: schema.RequestRecord, ref: schema.RequestRecord, tie: float) -> Pair:
    a, b = list(req.output_token_ids), list(ref.output_token_ids)
    if not a or not b:  # a side without its tokens cannot be compared token by token
        return Pair(req.request_id, req.prompt_id, None, None, None, "unknown", None, None, None,
                    None, None)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None and len(a) != len(b) and "stop" in (req.finish_reason, ref.finish_reason):
        first = min(len(a), len(b))  # one stopped where the other went on
    if first is None:
        return Pair(req.request_id, req.prompt_id, None, None, None, "identical", None, None, None,
                    None, None)
    margin = ref.top2_margins[first] if first < len(ref.top2_margins) else None
    mine = a[first] if first < len(a) else None
    theirs = b[first] if first < len(b) else None
    rank = None
    if mine is not None and mine == theirs:
        rank = 1
    elif mine is not None and first < len(ref.second_token_ids) and ref.second_token_ids[first] == mine:
        rank = 2
    if margin is None:
        verdict = "unknown"
    elif rank == 2 and margin <= tie + TIE_SLACK:  # within the margin, as every check reads it
        verdict = "tie-flip"
    else:
        verdict = "structural"
    ca, cb = a[first:first + 512], b[first:first + 512]
    lcs = difflib.SequenceMatcher(None, ca, cb, autojunk=False).ratio() if ca or cb else None
    return Pair(req.request_id, req.prompt_id, first, margin, rank, verdict, lcs, repetition(ca),
                repetition(cb), mine, theirs)


def side_by_side(req: schema.RequestRecord, ref: schema.RequestRecord, first: int,
                 before: int = 60, after: int = 400) -> tuple[str, str, str]:
    """(shared context, this run's continuation, the reference's) from the divergence on: as
    text where both records carry it (split at the first differing character, the context
    the ``before`` characters ahead of it), else as token ids from index ``first``."""
    a, b = req.output_text, ref.output_text
    if a and b:
        cut = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        lead = a[max(0, cut - before):cut]
        return (("…" if cut > before else "") + lead, a[cut:cut + after], b[cut:cut + after])
    ids = lambda t: " ".join(map(str, t[first:first + after // 8]))  # noqa: E731
    lead = " ".join(map(str, req.output_token_ids[max(0, first - 8):first]))
    return (f"tokens …{lead}" if first else "", ids(req.output_token_ids), ids(ref.output_token_ids))


def worst(result: "DivergeResult") -> Pair | None:
    """The diverging request a reader should see first: structural before tie-flip, then the
    lowest LCS ratio after the divergence, then the earliest divergence."""
    order = {"structural": 0, "unknown": 1, "tie-flip": 2}
    found = sorted(result.diverged, key=lambda p: (order.get(p.verdict, 3), p.lcs_ratio if
                                                   p.lcs_ratio is not None else 1.0, p.first_index))
    return found[0] if found else None


def _dtype(run: schema.RunRecord | None) -> str:
    labels = run.labels if run is not None else {}
    for key in ("target_dtype", "dtype"):
        if labels.get(key) in TIE_MARGIN:
            return labels[key]
    return DEFAULT_DTYPE


def diverge(records: Iterable[schema.Record], reference: Iterable[Any] | None = None,
            run_id: str | None = None, dtype: str | None = None) -> list[DivergeResult]:
    """One result per measured run of ``records`` that has greedy requests, against
    ``reference`` (records of a target-only run) or the trace's own reference run; ``dtype``
    (the target's) sets the tie margin where the run record does not say it."""
    records = list(records)
    runs = {r.run_id: r for r in records if isinstance(r, schema.RunRecord)}
    ref_of = {r.labels.get("reference_for"): rid for rid, r in runs.items()
              if r.labels.get("role") == "reference"}
    requests: dict[str, list[schema.RequestRecord]] = {}
    for r in records:
        if isinstance(r, schema.RequestRecord):
            requests.setdefault(r.run_id, []).append(r)
    external = [r for r in reference or () if isinstance(r, schema.RequestRecord)]
    out = []
    for rid, run in runs.items():
        speculative = run.num_steps or any(q.num_verify_steps or q.num_draft_tokens
                                           for q in requests.get(rid, []))
        if run.labels.get("role") == "reference" or (run_id and rid != run_id) or not speculative:
            continue
        refs = [r for r in external or requests.get(ref_of.get(rid, "\0"), []) if r.temperature == 0]
        mine = [q for q in requests.get(rid, []) if q.temperature == 0]
        by_prompt = {r.prompt_id or r.request_id: r for r in refs}
        matched = [(q, by_prompt[q.prompt_id or q.request_id]) for q in mine
                   if (q.prompt_id or q.request_id) in by_prompt]
        paired_by = "prompt"
        if not matched and external and len(refs) == len(mine):
            # saved responses name no prompt: two files of the same prompts pair in file order
            matched, paired_by = list(zip(mine, refs)), "order"
        kind = dtype or _dtype(run)
        pairs = [compare_pair(q, r, TIE_MARGIN[kind]) for q, r in matched]
        ref_id = (external[0].run_id if external else ref_of.get(rid, "")) or ""
        out.append(DivergeResult(rid, ref_id, kind, TIE_MARGIN[kind], pairs, paired_by))
    return out


def format_diverge(results: list[DivergeResult], limit: int = 20) -> str:
    if not results:
        return "no speculative run with greedy requests and a reference to compare against"
    lines = []
    for res in results:
        s = res.summary()
        share = f"{s['share_diverging']:.0%}" if s["share_diverging"] is not None else "n/a"
        ties = f"{s['share_tie_flips']:.0%}" if s["share_tie_flips"] is not None else "n/a"
        lines.append(f"== {res.run_id} against {res.reference_id or '?'} ({res.dtype}: a tie is a "
                     f"margin within {res.tie_margin:g} nats; paired by {res.paired_by})")
        lines.append(f"  greedy pairs {s['pairs']}  identical {s['identical']}  diverging {share}  "
                     f"median first index {s['median_first_index']}  tie-flips {ties}  "
                     f"structural {s['structural']}  -> {s['verdict']}"
                     + (f" ({s['rules_out']})" if s["rules_out"] else "")
                     + (f" (need ~{s['need']} more greedy pairs)" if s["need"] else ""))
        for p in sorted(res.diverged, key=lambda p: (p.verdict != "structural", p.first_index))[:limit]:
            margin = f"{p.margin:.4g}" if p.margin is not None else "n/a"
            rank = {1: "1st", 2: "2nd", None: ">2nd or unknown"}[p.rank]
            lcs = f"{p.lcs_ratio:.2f}" if p.lcs_ratio is not None else "n/a"
            rep = f"{p.repetition:.2f}" if p.repetition is not None else "n/a"
            lines.append(f"  {p.verdict:<10} {p.request_id}: token {p.first_index}, reference margin "
                         f"{margin}, committed its {rank} choice; after it LCS {lcs}, repetition {rep}")
    return "\n".join(lines)
