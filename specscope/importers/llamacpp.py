"""llama.cpp speculative-decoding output: ``llama-server`` logs and the ``llama-speculative``
summary.

- Per request (``slot print_timing: id S | task T |``): ``draft acceptance rate = R ( A
  accepted / G generated)``, in newer builds ``draft acceptance = R (...)`` with ``mean
  acceptance length = L`` (or ``mean len = L``) and per-position rates, on the same line
  (``acceptance rate per position = (p1, ...)``) or, at ``-lv 4`` and up, on the next
  (``acc per pos = (p1, ...)``). Per-position rates are accepted at position i over the
  task's verify steps, already unconditional: kept as printed, never multiplied again.
- Per verify step, at ``-lv 5``: ``add accepted tokens: sampled=T, ids.size=N, n_draft=D``
  (N - 1 drafts accepted of D). The exact source: a task's steps are counted from them, and
  the run's drafts, drafted, accepted and per-position counts are summed from them, the draft
  depth of each step included (it varies: a draft never runs past the tokens left).
- Per drafting implementation (``statistics <impl>: #calls... #gen drafts = D, #acc drafts =
  .., #gen tokens = G, #acc tokens = A[, #mean acc len = L, #acc rate/pos = (...)]``):
  counters since the drafter began, differenced into windows in file order; per server in
  builds that print ``#calls(b,g,a)`` (one drafter serves every slot), per slot before.
- Configuration: ``adding speculative implementation 'X'`` and its ``n_max``; ``synthetic
  acceptance: n_max = K, mean length = L, rates = [...]`` (``--spec-synth-len`` /
  ``--spec-synth-rates``: acceptance forced for benchmarking, kept as run labels so every view
  says speed-only); a draft model loaded with no implementation added (``-md`` without
  ``--spec-type``: speculation off).
- ``llama-speculative``: ``n_draft``, ``n_drafted``, ``n_accept``, ``accept = P%``.

Drafts are the verify steps that had a draft; acceptance length is 1 + accepted / drafts,
bonus included, as llama.cpp defines it. The run's counts come from one kind of line only (per
step, else statistics, else per request), so no step is counted twice. Where the kind used
disagrees with the per-request lines' sums (the slots' own counters, which /metrics sums), a
trap names both figures and the lines, and the per-request sums are the run's counts.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field

from .. import schema
from ..schema import Problem
from ._common import ImportResult, num, run_record, steps_from_mean

SLOT = re.compile(r"\bid\s+(\d+) \| task (-?\d+) \|")
ACCEPT = re.compile(r"draft acceptance(?: rate)? = ([\d.]+) \(\s*(\d+) accepted /\s*(\d+) generated\)"
                    r"(?:, mean (?:acceptance length|len) =\s*([\d.]+))?"
                    r"(?:, acceptance rate per position = \(([^)]*)\))?")
ACC_POS = re.compile(r"acc per pos = \(([^)]*)\)")
STATS = re.compile(r"statistics\s+([\w.-]+): #calls(\(b,g,a\))? =\s*([\d ]+?), #gen drafts =\s*(\d+), "
                   r"#acc drafts =\s*(\d+), #gen tokens =\s*(\d+), #acc tokens =\s*(\d+)"
                   r"(?:, #mean acc len =\s*([\d.]+))?(?:, #acc rate/pos = \(([^)]*)\))?")
#: one verify step (``-lv 5``): ``ids.size`` tokens committed (accepted drafts + 1), of ``n_draft``
STEP = re.compile(r"add accepted tokens: sampled=-?\d+, ids\.size=(\d+), n_draft=(\d+)")
IMPL = re.compile(r"adding speculative implementation '([\w.-]+)'")
N_MAX = re.compile(r"- n_max=(\d+), n_min=\d+")
SYNTH = re.compile(r"synthetic acceptance: n_max = (\d+), mean length = ([\d.]+), rates = \[([^\]]*)\]")
SUMMARY = re.compile(r"^\s*(?:\w+:\s+)?(n_draft|n_drafted|n_accept|n_predict|accept)\s*=\s*([\d.]+)%?\s*$")
#: the server's own start-up lines: a log at ``-lv 5`` opens with thousands of them before any
#: speculative figure
STARTUP = ("llama_server: initializing", "common_params_print_info", "srv    load_model:",
           "main: server is listening", "slot launch_slot_", "llama_model_loader:")
WANTED = ("total time =", "draft acceptance", "acc per pos", "statistics", "add accepted", "n_",
          "accept", "speculative implementation", "synthetic acceptance", "loading draft model")


def sniff(head: str) -> bool:
    return ("draft acceptance" in head or bool(STATS.search(head)) or "n_drafted" in head
            or any(m in head for m in STARTUP))


def _rates(text: str | None) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip()) if text else ()


@dataclass
class _Log:
    """What a server log says, line by line."""

    steps: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=dict)
    requests: list[schema.RequestRecord] = field(default_factory=list)
    last: dict[tuple[str, str], int] = field(default_factory=dict)  #: task -> its request's index
    task_rates: dict[int, tuple[float, ...]] = field(default_factory=dict)  #: request index -> rates
    prev: dict[tuple, tuple[int, ...]] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)
    impls: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    draft_model: bool = False
    tasks: int = 0  #: finished tasks (their ``total time`` lines)
    stats_lines: list[int] = field(default_factory=list)  #: line numbers of 'statistics' lines
    request_lines: list[int] = field(default_factory=list)  #: of 'draft acceptance' lines
    k_seen: int = 0
    n_stats: int = 0


def parse(path: str | os.PathLike, run_id: str, emit=None) -> ImportResult:
    res = ImportResult("llamacpp-log", emit=emit)
    name = str(path)
    log = _Log()
    slot, task = "0", None
    stats: list[schema.SpecCountsRecord] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            res.lines_read += 1
            if not any(m in line for m in WANTED):
                continue
            m = SLOT.search(line)
            if m:
                slot, task = m.group(1), m.group(2)
            try:
                _line(res, log, line, run_id, slot, task, name, lineno, stats)
            except ValueError as exc:
                res.problems.append(Problem(name, lineno, str(exc)))
    for rec in log.requests:
        res.add(rec)
    _pooled(res, log, run_id, stats)
    _config_traps(res, log)
    k = max(log.k_seen, int(log.labels.get("spec_draft_n_max", 0) or 0))
    res.add(run_record(run_id, "llama.cpp", "llamacpp-log", path, num_steps=k,
                       algorithm="+".join(log.impls) if log.impls else "unknown", labels=log.labels))
    return res


def _line(res: ImportResult, log: _Log, line: str, run_id: str, slot: str, task: str | None,
          name: str, lineno: int, stats: list) -> None:
    if "add accepted tokens" in line:
        s = STEP.search(line)
        if not s:
            raise ValueError("unrecognised 'add accepted tokens' line")
        committed, drafted = int(s.group(1)), int(s.group(2))
        log.steps.setdefault((slot, str(task)), []).append((drafted, max(committed - 1, 0)))
    elif "draft acceptance" in line:
        a = ACCEPT.search(line)
        if not a:
            raise ValueError("unrecognised 'draft acceptance' line")
        key = (slot, str(task))
        rec = _request(res, a, run_id, slot, task, len(log.requests), name, lineno,
                       log.steps.get(key))
        log.last[key] = len(log.requests)
        log.request_lines.append(lineno)
        if a.group(5):
            log.task_rates[len(log.requests)] = _rates(a.group(5))
        log.requests.append(rec)
        log.k_seen = max(log.k_seen, len(_rates(a.group(5))))
    elif "acc per pos" in line:  # its own line in newer builds, after the request's line
        p = ACC_POS.search(line)
        index = log.last.get((slot, str(task)))
        if p and index is not None:
            rates = _rates(p.group(1))
            log.task_rates[index] = rates
            log.k_seen = max(log.k_seen, len(rates))
            _check_rates(res, log.requests[index], rates, log.steps.get((slot, str(task))), name, lineno)
    elif "statistics" in line and "#gen drafts" in line:
        s = STATS.search(line)
        if not s:
            raise ValueError("unrecognised 'statistics' line")
        stats.append(_stats(res, s, log.prev, run_id, slot, name, lineno))
        log.stats_lines.append(lineno)
        log.k_seen = max(log.k_seen, len(_rates(s.group(9))))
        log.n_stats += 1
    elif "speculative implementation" in line:
        i = IMPL.search(line)
        if i and i.group(1) not in log.impls:
            log.impls.append(i.group(1))
            log.labels["spec_type"] = ",".join(log.impls)
    elif "synthetic acceptance:" in line:
        s = SYNTH.search(line)
        if s:
            log.labels["spec_synth_len"] = s.group(2)
            log.labels["spec_synth_rates"] = s.group(3).replace(" ", "")
            log.labels["spec_draft_n_max"] = s.group(1)
    elif "loading draft model" in line:
        log.draft_model = True
    elif "total time =" in line:
        log.tasks += 1
    else:
        n = N_MAX.search(line)
        if n and log.impls:
            log.labels.setdefault("spec_draft_n_max", n.group(1))
            return
        sm = SUMMARY.match(line)
        if sm:
            log.summary[sm.group(1)] = float(sm.group(2))


def _pooled(res: ImportResult, log: _Log, run_id: str, stats: list) -> None:
    """The run's counts from the most exact lines it has: per-step lines, else the drafters'
    statistics windows, else the per-request lines' sum (never two of them, which would count
    a step twice)."""
    summary, requests = log.summary, log.requests
    steps = [s for task in log.steps.values() for s in task]
    if steps:
        if _disagree(res, log, "per-step lines", sum(d for d, _ in steps),
                     sum(a for _, a in steps), []):
            return
        depths = sorted({d for d, _ in steps})
        k = max(depths)
        per_pos = [sum(1 for _, a in steps if a > i) for i in range(k)]
        res.add(schema.SpecCountsRecord(
            run_id=run_id, t_ns=0, num_drafts=sum(1 for d, _ in steps if d > 0),
            num_draft_tokens=sum(d for d, _ in steps), num_accepted=sum(a for _, a in steps),
            accepted_per_pos=tuple(per_pos),
            drafted_per_pos=tuple(sum(1 for d, _ in steps if d > i) for i in range(k)),
            source=f"llamacpp-log: {len(steps)} verify steps"))
        log.k_seen = max(log.k_seen, k)
        if len(depths) > 1:
            reached = ", ".join(str(sum(1 for d, _ in steps if d > i)) for i in range(k))
            res.trap("varying-k", f"draft depth varied between steps ({depths[0]}..{k} tokens): "
                     f"drafts reaching each position were {reached}; per-position rates are over "
                     "the drafts that reached each position")
        return
    if stats:
        windows = coalesce(stats)
        # a statistics line gives both counts, so every window knows them
        if _disagree(res, log, "statistics lines", sum(w.num_draft_tokens or 0 for w in windows),
                     sum(w.num_accepted or 0 for w in windows), log.stats_lines):
            return
        for rec in windows:
            res.add(rec)
        res.trap("llamacpp-cumulative", "llama.cpp 'statistics' lines count since the drafter "
                 "began (per slot in older builds, per server since #calls(b,g,a)): windows are "
                 "their differences, a window joined to the next where a line came before the "
                 "steps it counts accepted were drafted (accepted above drafted)")
        return
    if "n_drafted" in summary and "n_accept" in summary:
        drafted, accepted = int(summary["n_drafted"]), int(summary["n_accept"])
        if "accept" in summary and drafted:
            res.identity("accept % = 100 x n_accept / n_drafted", summary["accept"],
                         100 * accepted / drafted, file=res.format, tol=0.0006)
        res.add(schema.SpecCountsRecord(
            run_id=run_id, t_ns=0, num_draft_tokens=drafted, num_accepted=accepted,
            reported_acceptance_rate=summary["accept"] / 100 if "accept" in summary else None,
            source="llama-speculative"))
        log.k_seen = max(log.k_seen, int(summary.get("n_draft", 0)))
    elif requests:  # only per-request lines: the run's counts are their sum
        req_steps = [r.num_verify_steps for r in requests if r.num_verify_steps]
        all_steps = len(req_steps) == len(requests)
        rates = [x for x in (log.task_rates.get(i) for i in range(len(requests))) if x]
        pp: tuple[int, ...] = ()
        if all_steps and len(rates) == len(requests) and len({len(r) for r in rates}) == 1:
            pp = tuple(sum(round(r[i] * n) for r, n in zip(rates, req_steps))
                       for i in range(len(rates[0])))
        res.add(schema.SpecCountsRecord(
            run_id=run_id, t_ns=0, num_draft_tokens=sum(r.num_draft_tokens or 0 for r in requests),
            num_accepted=sum(r.num_accepted or 0 for r in requests),
            num_drafts=sum(req_steps) if all_steps else None,
            accepted_per_pos=pp,
            source=f"llamacpp-log: sum over {len(requests)} requests"))


def coalesce(windows: list[schema.SpecCountsRecord]) -> list[schema.SpecCountsRecord]:
    """Differenced windows joined where one is not a window of its own: a 'statistics' line
    printed when one slot's request ends counts the tokens another slot's steps accepted of
    drafts an earlier line had already counted, so its window can hold more accepted than
    drafted tokens (or per-position counts above its drafts). Such a window is added to the
    next one of its drafter until the sum is consistent; totals are unchanged."""
    out: list[schema.SpecCountsRecord] = []
    pending: dict[tuple, schema.SpecCountsRecord] = {}
    for w in windows:
        key = (w.rank, w.source)
        p = pending.pop(key, None)
        if p is not None:
            pp = tuple(a + b for a, b in zip(p.accepted_per_pos, w.accepted_per_pos)) \
                if len(p.accepted_per_pos) == len(w.accepted_per_pos) else ()
            w = dataclasses.replace(w, num_drafts=(p.num_drafts or 0) + (w.num_drafts or 0),
                                    num_draft_tokens=(p.num_draft_tokens or 0) + (w.num_draft_tokens or 0),
                                    num_accepted=(p.num_accepted or 0) + (w.num_accepted or 0),
                                    accepted_per_pos=pp)
        if (w.num_accepted or 0) > (w.num_draft_tokens or 0) or \
                any(a > (w.num_drafts or 0) for a in w.accepted_per_pos):
            pending[key] = w
        else:
            out.append(w)
    return out + list(pending.values())


def _disagree(res: ImportResult, log: _Log, kind: str, drafted: int, accepted: int,
              lines: list[int]) -> bool:
    """Whether ``kind``'s totals disagree with the per-request lines' sums (the slots' own
    counters, which the server's /metrics counters also sum). If so, a trap names both figures
    and the lines, the run's counts come from the per-request lines, and True is returned."""
    requests = log.requests
    counts = [(r.num_draft_tokens, r.num_accepted) for r in requests
              if r.num_draft_tokens is not None and r.num_accepted is not None]
    if not requests or len(counts) < len(requests):
        return False
    req_d = sum(d for d, _ in counts)
    req_a = sum(a for _, a in counts)
    if (req_d, req_a) == (drafted, accepted):
        return False
    where = f" (lines {', '.join(map(str, lines[-3:]))})" if lines else ""
    res.trap("llamacpp-disagree",
             f"the {kind}{where} count {drafted} drafted and {accepted} accepted tokens; the "
             f"{len(requests)} per-request 'draft acceptance' lines (lines "
             f"{', '.join(map(str, log.request_lines[:3]))}{' ...' if len(requests) > 3 else ''}) "
             f"sum to {req_d} and {req_a}: the run's counts are the per-request lines', the "
             "slots' own counters that the server's /metrics counters sum")
    steps = [r.num_verify_steps for r in requests if r.num_verify_steps]
    res.add(schema.SpecCountsRecord(
        run_id=requests[0].run_id, t_ns=0, num_draft_tokens=req_d, num_accepted=req_a,
        num_drafts=sum(steps) if len(steps) == len(requests) else None,
        source=f"llamacpp-log: sum over {len(requests)} requests"))
    return True


def _config_traps(res: ImportResult, log: _Log) -> None:
    """What the server's configuration says that its counts cannot."""
    drafted = sum(r.num_draft_tokens or 0 for r in res.records if isinstance(r, schema.SpecCountsRecord))
    tasks = max(log.tasks, len(log.requests))
    if log.impls and tasks and not drafted:
        res.trap("nothing-drafted", f"speculation was configured ({', '.join(log.impls)}) and "
                 f"nothing was drafted over {tasks} requests: the drafter found no candidate "
                 "(ngram-simple's defaults need text that repeats in the prompt)")
    elif log.draft_model and not log.impls:
        res.trap("speculation-off", "a draft model was loaded but no speculative implementation "
                 "was added: -md without --spec-type leaves speculation off in this build")
    if "spec_synth_len" in log.labels:
        res.trap("forced", "acceptance is synthetic (--spec-synth-len / --spec-synth-rates: "
                 f"mean length {log.labels['spec_synth_len']}): a benchmarking setting, not a "
                 "measurement; its output is not valid")


def _request(res: ImportResult, a: re.Match, run_id: str, slot: str, task: str | None, n: int,
             name: str, lineno: int, steps: list[tuple[int, int]] | None) -> schema.RequestRecord:
    """A finished task's line; its verify steps from its per-step lines where the log has them
    (exact), else from the printed mean length where one whole number fits it."""
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
    if steps:
        res.identity("per-step lines' drafted tokens = the task's generated", sum(d for d, _ in steps),
                     drafted, line=lineno, file=name)
        res.identity("per-step lines' accepted tokens = the task's accepted", sum(x for _, x in steps),
                     accepted, line=lineno, file=name)
        if mean_len is not None:
            res.identity("mean len = 1 + accepted / the task's verify steps", mean_len,
                         1 + accepted / len(steps), line=lineno, file=name, tol=0.006)
        n_steps: int | None = len(steps)
    else:
        n_steps = steps_from_mean(accepted, mean_len)
    return schema.RequestRecord(
        run_id=run_id, rank=int(slot), request_id=f"task-{task}" if task is not None else f"request-{n}",
        t_arrival_ns=0, t_first_token_ns=0, t_finish_ns=0, num_prompt_tokens=0, num_output_tokens=0,
        num_verify_steps=n_steps, num_draft_tokens=drafted, num_accepted=accepted)


def _check_rates(res: ImportResult, rec: schema.RequestRecord, rates: tuple[float, ...],
                 steps: list[tuple[int, int]] | None, name: str, lineno: int) -> None:
    """A task's ``acc per pos`` line: accepted at each position over its verify steps."""
    res.identity("per-position acceptance is non-increasing (chain drafting)",
                 sum(1 for x, y in zip(rates, rates[1:]) if y > x + 1e-9), 0, line=lineno, file=name)
    if rec.num_verify_steps and rec.num_accepted is not None:
        res.identity("sum of per-position rate x steps = accepted tokens",
                     round(sum(r * rec.num_verify_steps for r in rates)), rec.num_accepted,
                     line=lineno, file=name, tol=len(rates))
    if steps:
        exact = tuple(sum(1 for _, x in steps if x > i) / len(steps) for i in range(len(rates)))
        res.identity("acc per pos = the per-step lines' accepted at each position / steps",
                     max(abs(x - y) for x, y in zip(rates, exact)), 0.0, line=lineno, file=name,
                     tol=0.0005 + 1e-9)


#: per-position rates print with 3 decimals: rate x calls recovers the count exactly below this
EXACT_CALLS = 1000


def _stats(res: ImportResult, s: re.Match, prev: dict, run_id: str, slot: str, name: str,
           lineno: int) -> schema.SpecCountsRecord:
    """One drafter's counters since it began, differenced into the window since its last line.
    Builds that print ``#calls(b,g,a)`` keep one drafter per server (its lines follow any
    slot's request); older ones one per slot."""
    impl, per_server = s.group(1), bool(s.group(2))
    calls = [int(x) for x in s.group(3).split()]
    drafts, acc_drafts, gen, acc = (int(s.group(i)) for i in (4, 5, 6, 7))
    mean_len, rates = num(s.group(8)), _rates(s.group(9))
    verified = calls[2] if per_server and len(calls) == 3 else drafts
    res.identity("#acc drafts <= #gen drafts", min(acc_drafts, drafts), acc_drafts, line=lineno, file=name)
    if mean_len is not None and verified:
        res.identity("#mean acc len = 1 + #acc tokens / verify calls", mean_len, 1 + acc / verified,
                     line=lineno, file=name, tol=0.006)
    per_pos = tuple(round(r * verified) for r in rates) if rates and verified < EXACT_CALLS else ()
    key = (impl,) if per_server else (slot, impl)
    now = (drafts, gen, acc, *per_pos)
    before = prev.get(key, (0,) * len(now))
    if len(before) != len(now) or any(x < y for x, y in zip(now, before)):  # a restart
        before = (0,) * len(now)
    prev[key] = now
    d, g, a, *pp = (x - y for x, y in zip(now, before))
    return schema.SpecCountsRecord(
        run_id=run_id, rank=0 if per_server else int(slot), t_ns=0, num_drafts=d, num_draft_tokens=g,
        num_accepted=a, accepted_per_pos=tuple(pp), reported_mean_acceptance_length=mean_len,
        source=f"llamacpp-{impl}")
