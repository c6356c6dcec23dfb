"""llama.cpp speculative-decoding output: ``llama-server`` logs and the ``llama-speculative``
summary.

- Per request (``slot print_timing: id S | task T |``, or the multi-line print that follows
  it): ``draft acceptance rate = R ( A accepted / G generated)``, in newer builds
  ``draft acceptance = R (...)`` with ``mean acceptance length = L`` (or ``mean len = L``) and
  ``acceptance rate per position = (p1, p2, ...)``. Per-position rates are accepted at position
  i over verify steps, already unconditional: they are kept as printed, never multiplied
  again. Steps come from L only where one whole number fits its rounding.
- Per drafting implementation (``statistics <impl>: #calls... #gen drafts = D, #acc drafts =
  .., #gen tokens = G, #acc tokens = A[, #mean acc len = L]``): counters since the slot's
  speculative context began, differenced per (slot, implementation) into windows in file order.
- ``llama-speculative``: ``n_draft``, ``n_drafted``, ``n_accept``, ``accept = P%``.

Drafts are the verify steps that had a draft (``#gen drafts``); acceptance length is
1 + accepted / drafts, bonus included, as llama.cpp defines it.
"""

from __future__ import annotations

import os
import re

from .. import schema
from ..schema import Problem
from ._common import ImportResult, num, run_record, steps_from_mean

SLOT = re.compile(r"print_timing: id\s+(\d+) \| task (-?\d+)")
ACCEPT = re.compile(r"draft acceptance(?: rate)? = ([\d.]+) \(\s*(\d+) accepted /\s*(\d+) generated\)"
                    r"(?:, mean (?:acceptance length|len) =\s*([\d.]+))?"
                    r"(?:, acceptance rate per position = \(([^)]*)\))?")
STATS = re.compile(r"statistics\s+([\w.-]+): #calls(?:\(b,g,a\))? =\s*([\d ]+?), #gen drafts =\s*(\d+), "
                   r"#acc drafts =\s*(\d+), #gen tokens =\s*(\d+), #acc tokens =\s*(\d+)"
                   r"(?:, #mean acc len =\s*([\d.]+))?(?:, #acc rate/pos = \(([^)]*)\))?")
SUMMARY = re.compile(r"^\s*(?:\w+:\s+)?(n_draft|n_drafted|n_accept|n_predict|accept)\s*=\s*([\d.]+)%?\s*$")
MARKERS = ("draft acceptance", "statistics ", "n_drafted")


def sniff(head: str) -> bool:
    return "draft acceptance" in head or bool(STATS.search(head)) or "n_drafted" in head


def _rates(text: str | None) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip()) if text else ()


def parse(path: str | os.PathLike, run_id: str, emit=None) -> ImportResult:
    res = ImportResult("llamacpp-log", emit=emit)
    name = str(path)
    slot, task = "0", None
    prev: dict[tuple[str, str], tuple[int, int, int]] = {}
    summary: dict[str, float] = {}
    requests: list[schema.RequestRecord] = []
    k_seen = 0
    n_stats = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            res.lines_read += 1
            if not any(m in line for m in ("print_timing", "draft acceptance", "statistics", "n_", "accept")):
                continue
            m = SLOT.search(line)
            if m:
                slot, task = m.group(1), m.group(2)
            try:
                if "draft acceptance" in line:
                    a = ACCEPT.search(line)
                    if not a:
                        raise ValueError("unrecognised 'draft acceptance' line")
                    rec = _request(res, a, run_id, slot, task, len(requests), name, lineno)
                    requests.append(rec)
                    res.add(rec)
                    k_seen = max(k_seen, len(_rates(a.group(5))))
                elif "statistics" in line and "#gen drafts" in line:
                    s = STATS.search(line)
                    if not s:
                        raise ValueError("unrecognised 'statistics' line")
                    res.add(_stats(res, s, prev, run_id, slot, name, lineno))
                    k_seen = max(k_seen, len(_rates(s.group(8))))
                    n_stats += 1
                else:
                    sm = SUMMARY.match(line)
                    if sm:
                        summary[sm.group(1)] = float(sm.group(2))
            except ValueError as exc:
                res.problems.append(Problem(name, lineno, str(exc)))
    if "n_drafted" in summary and "n_accept" in summary:
        drafted, accepted = int(summary["n_drafted"]), int(summary["n_accept"])
        if "accept" in summary and drafted:
            res.identity("accept % = 100 x n_accept / n_drafted", summary["accept"],
                         100 * accepted / drafted, file=name, tol=0.0006)
        res.add(schema.SpecCountsRecord(
            run_id=run_id, t_ns=0, draft_tokens=drafted, accepted_tokens=accepted,
            reported_acceptance_rate=summary["accept"] / 100 if "accept" in summary else None,
            source="llama-speculative"))
        k_seen = max(k_seen, int(summary.get("n_draft", 0)))
    elif requests and not n_stats:  # only per-request lines: the run's counts are their sum
        res.add(schema.SpecCountsRecord(
            run_id=run_id, t_ns=0, draft_tokens=sum(r.num_draft_tokens or 0 for r in requests),
            accepted_tokens=sum(r.num_accepted_tokens or 0 for r in requests),
            num_drafts=sum(r.num_verify_steps for r in requests)
            if all(r.num_verify_steps for r in requests) else None,
            source=f"llamacpp-log: sum over {len(requests)} requests"))
    if n_stats:
        res.trap("llamacpp-cumulative", "llama.cpp 'statistics' lines count since the slot's "
                 "speculative context began: windows are their differences per slot and "
                 "implementation")
    res.add(run_record(run_id, "llama.cpp", "llamacpp-log", path, num_steps=k_seen))
    return res


def _request(res: ImportResult, a: re.Match, run_id: str, slot: str, task: str | None, n: int,
             name: str, lineno: int) -> schema.RequestRecord:
    rate, accepted, drafted = float(a.group(1)), int(a.group(2)), int(a.group(3))
    mean_len, rates = num(a.group(4)), _rates(a.group(5))
    if drafted:
        res.identity("acceptance rate = accepted / generated", rate, accepted / drafted,
                     line=lineno, file=name, tol=6e-6)
    if mean_len is not None and rates:
        res.identity("mean acceptance length = 1 + sum of per-position rates (unconditional)",
                     mean_len, 1 + sum(rates), line=lineno, file=name, tol=0.006 + 0.0005 * len(rates))
    if rates:
        res.identity("per-position acceptance is non-increasing (chain drafting)",
                     sum(1 for x, y in zip(rates, rates[1:]) if y > x + 1e-9), 0, line=lineno, file=name)
    steps = steps_from_mean(accepted, mean_len)
    return schema.RequestRecord(
        run_id=run_id, rank=int(slot), request_id=f"task-{task}" if task is not None else f"request-{n}",
        t_arrival_ns=0, t_first_token_ns=0, t_finish_ns=0, num_prompt_tokens=0, num_output_tokens=0,
        num_verify_steps=steps, num_draft_tokens=drafted, num_accepted_tokens=accepted)


def _stats(res: ImportResult, s: re.Match, prev: dict, run_id: str, slot: str, name: str,
           lineno: int) -> schema.SpecCountsRecord:
    impl = s.group(1)
    drafts, acc_drafts, gen, acc = (int(s.group(i)) for i in (3, 4, 5, 6))
    mean_len = num(s.group(7))
    res.identity("#acc drafts <= #gen drafts", min(acc_drafts, drafts), acc_drafts, line=lineno, file=name)
    if mean_len is not None and drafts:
        res.identity("#mean acc len = 1 + #acc tokens / #gen drafts", mean_len, 1 + acc / drafts,
                     line=lineno, file=name, tol=0.006)
    key = (slot, impl)
    now = (drafts, gen, acc)
    before = prev.get(key, (0, 0, 0))
    if any(x < y for x, y in zip(now, before)):  # counters went back: a restart
        before = (0, 0, 0)
    prev[key] = now
    d, g, a = (x - y for x, y in zip(now, before))
    return schema.SpecCountsRecord(
        run_id=run_id, rank=int(slot), t_ns=0, num_drafts=d, draft_tokens=g, accepted_tokens=a,
        reported_mean_acceptance_length=mean_len, source=f"llamacpp-{impl}")
