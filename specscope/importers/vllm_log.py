"""vLLM server logs, every era of the spec-decode line, into specscope records.

Eras: V0 ``Speculative metrics:`` (cumulative counters since start, differenced here); early
V1 ``SpecDecoding metrics: Draft acceptance rate: nan%, Accepted: N tokens, Drafted: N tokens``;
V1 with ``Mean acceptance length`` and ``Per-position acceptance rate``; current V1 adding
``Accepted/Drafted throughput`` and ``Avg Draft acceptance rate``. Also ``SpecDecodeWorker stage
times`` (phase timings) and ``Engine NNN:`` throughput lines, behind ``(APIServer pid=N)`` or
``(Worker_TP0 pid=N)`` prefixes, amid any other output.

Mapping (vLLM's "acceptance length" includes the bonus token, as specscope's does): drafts =
drafted tokens / k with k = the number of per-position rates; accepted per position = rate x
drafts, rounded (the log prints 3 decimals). Where k is not printed, drafts stay null.

V0's "Number of accepted tokens" is not a prefix count (see ``_v0``): committed tokens come from
"Number of emitted tokens", and V0's own "Draft acceptance rate" is kept as reported.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from .. import schema
from ..schema import Problem
from ._common import ImportResult, file_year, num, run_record, to_ns

PREFIX = re.compile(r"^\((?P<proc>[A-Za-z][A-Za-z0-9]*)(?:_TP(?P<tp>\d+))?(?:_\w+)?"
                    r"(?: pid=(?P<pid>\d+))?\)\s*")
STAMP = re.compile(r"(?:INFO|WARNING|DEBUG|ERROR)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.\d+)?")
FIELD = {
    "mean_al": re.compile(r"Mean acceptance length: ([\d.]+|nan)"),
    "accepted": re.compile(r"Accepted: (\d+) tokens"),
    "drafted": re.compile(r"Drafted: (\d+) tokens"),
    "per_pos": re.compile(r"Per-position acceptance rate: ([\d., nan]+?)(?:,\s*[A-Z]|$)"),
    "rate": re.compile(r"(?:Avg )?Draft acceptance rate: ([\d.]+|nan)(%?)"),
}
V0 = re.compile(r"Speculative metrics: Draft acceptance rate: ([\d.]+|nan), System efficiency: "
                r"([\d.]+|nan), Number of speculative tokens: (\d+), Number of accepted tokens: "
                r"(\d+), Number of draft tokens: (\d+), Number of emitted tokens: (\d+)")
STAGES = re.compile(r"SpecDecodeWorker stage times: (.*)")
ENGINE = re.compile(r"Engine (\d+): (.*)")
GAUGE = re.compile(r"([A-Za-z][A-Za-z /]+?): ([\d.]+) ?(tokens/s|reqs|%)?(?:,|$)")
MARKERS = ("SpecDecoding metrics", "Speculative metrics", "SpecDecodeWorker stage times",
           "Engine 0")


def sniff(head: str) -> bool:
    return any(m in head for m in MARKERS)


def parse(path: str | os.PathLike, run_id: str, emit=None) -> ImportResult:
    res = ImportResult("vllm-log", emit=emit)
    year = file_year(path)
    name = str(path)
    v0_prev: dict[int, tuple[int, int, int]] = {}  #: rank -> last cumulative counters
    k_seen = 0
    last_t = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, raw in enumerate(f, start=1):
            res.lines_read += 1
            if "metrics" not in raw and "Engine " not in raw and "SpecDecodeWorker" not in raw:
                continue  # fast path: most server lines are something else
            line = raw.rstrip("\n")
            m = PREFIX.match(line)
            rank = int(m.group("tp")) if m and m.group("tp") else 0
            body = line[m.end():] if m else line
            if not any(marker in body for marker in MARKERS):
                continue
            st = STAMP.search(body)
            t_ns = 0
            if st:
                try:
                    mo, d, hh, mm, ss = (int(x) for x in st.groups())
                    t_ns = to_ns(_dt.datetime(year, mo, d, hh, mm, ss))
                except ValueError:
                    res.problems.append(Problem(name, lineno, "bad timestamp; line kept without time"))
            try:
                if "SpecDecoding metrics" in body:
                    rec, k = _v1(body, run_id, rank, t_ns, last_t)
                    k_seen = max(k_seen, k)
                    res.add(rec)
                    last_t = t_ns or last_t
                elif "Speculative metrics" in body:
                    mv = V0.search(body)
                    if not mv:
                        raise ValueError("unrecognised V0 'Speculative metrics' line")
                    res.add(_v0(mv, v0_prev.get(rank), run_id, rank, t_ns))
                    v0_prev[rank] = tuple(int(mv.group(i)) for i in (4, 5, 6))
                    k_seen = max(k_seen, int(mv.group(3)))
                elif "SpecDecodeWorker stage times" in body:
                    res.extend(_stages(body, run_id, rank, t_ns))
                else:
                    me = ENGINE.search(body)
                    if me:
                        values = {}
                        for gname, gval, unit in GAUGE.findall(me.group(2)):
                            key = gname.strip().lower().replace(" ", "_")
                            values[key + {"tokens/s": "_tok_s", "%": "_pct", "reqs": ""}.get(unit, "")] = float(gval)
                        res.add(schema.SampleRecord(
                            run_id=run_id, rank=int(me.group(1)), t_ns=t_ns, values=values,
                            source="vllm-engine"))
            except (ValueError, ZeroDivisionError) as exc:
                res.problems.append(Problem(name, lineno, str(exc)))
    res.add(run_record(run_id, "vllm", "vllm-log", path, num_steps=k_seen))
    return res


def _v0(mv: re.Match, prev: tuple[int, int, int] | None, run_id: str, rank: int,
        t_ns: int) -> schema.SpecCountsRecord:
    """One V0 ``Speculative metrics`` line, differenced against the rank's previous one.

    V0's "accepted tokens" counts every draft token that matched the target, also after an
    earlier position was rejected: it is not what the engine committed. What it committed is
    "emitted tokens" (one bonus or correction token per step included), so a step's accepted
    prefix is emitted - drafts, with drafts = draft tokens / k. V0's own acceptance rate (from
    the non-prefix count) is kept as the engine's reported figure.
    """
    k = int(mv.group(3))
    now = (int(mv.group(4)), int(mv.group(5)), int(mv.group(6)))
    if prev is None or any(n < p for n, p in zip(now, prev)):  # first line, or a restart
        prev = (0, 0, 0)
    _, drafted, emitted = (n - p for n, p in zip(now, prev))
    drafts = drafted // k if k and drafted % k == 0 else None
    accepted = emitted - drafts if drafts is not None and emitted >= drafts else None
    if drafts is not None and accepted is None and drafted:
        raise ValueError(f"V0 line: {emitted} emitted tokens over {drafts} drafts (fewer "
                         "than one per step): counts kept out")
    return schema.SpecCountsRecord(
        run_id=run_id, rank=rank, t_ns=t_ns, num_drafts=drafts,
        draft_tokens=drafted if accepted is not None else None, accepted_tokens=accepted,
        reported_acceptance_rate=num(mv.group(1)), source="vllm-v0")


def _v1(body: str, run_id: str, rank: int, t_ns: int, last_t: int | None):
    got = {k: rx.search(body) for k, rx in FIELD.items()}
    if not got["accepted"] or not got["drafted"]:
        raise ValueError("SpecDecoding line without 'Accepted: N tokens, Drafted: N tokens'")
    accepted, drafted = int(got["accepted"].group(1)), int(got["drafted"].group(1))
    rates = []
    if got["per_pos"]:
        rates = [num(x) for x in got["per_pos"].group(1).split(",") if x.strip()]
    k = len(rates)
    drafts = drafted // k if k and drafted % k == 0 else None
    per_pos = tuple(round(r * drafts) for r in rates) if drafts is not None and None not in rates else ()
    rate = None
    if got["rate"]:
        rate = num(got["rate"].group(1))
        if rate is not None and got["rate"].group(2) == "%":
            rate /= 100
    interval = (t_ns - last_t) / 1e9 if last_t and t_ns else None
    return schema.SpecCountsRecord(
        run_id=run_id, rank=rank, t_ns=t_ns, interval_s=interval, num_drafts=drafts,
        draft_tokens=drafted, accepted_tokens=accepted, accepted_per_pos=per_pos,
        reported_mean_acceptance_length=num(got["mean_al"].group(1)) if got["mean_al"] else None,
        reported_acceptance_rate=rate, source="vllm-v1"), k


STAGE_PHASE = {"average_time_per_proposal_tok_ms": "draft_per_token",
               "scoring_time_ms": "verify_forward", "verification_time_ms": "verify_sample"}


def _stages(body: str, run_id: str, rank: int, t_ns: int) -> list[schema.PhaseRecord]:
    out = []
    for key, value in re.findall(r"(\w+)=([\d.]+)", STAGES.search(body).group(1)):
        out.append(schema.PhaseRecord(run_id=run_id, rank=rank, step=-1,
                                      phase=STAGE_PHASE.get(key, key), device="",
                                      t_start_ns=t_ns, duration_ns=int(float(value) * 1e6),
                                      clock="reported_average"))
    if not out:
        raise ValueError("stage-times line without name=value pairs")
    return out
