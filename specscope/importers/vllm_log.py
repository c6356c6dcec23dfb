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
import functools
import os
import re

import numpy as np

from .. import schema
from ..io.intervals import CountsColumns
from ..schema import Problem
from ._common import (ImportResult, Tally, file_year, fixed, fixed_number, marked_lines, num, run_record,
                      steps_from_mean, to_ns)

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
           "Engine 0", "non-default args")
#: the speculative settings the server's ``non-default args`` line shows that change what its
#: acceptance means (forced: ``synthetic``; lossy: ``block``, ``fly``): kept as run labels
SPEC_SETTINGS = re.compile(r"'(rejection_sample_method|synthetic_acceptance_length|"
                           r"synthetic_acceptance_rates|method|num_speculative_tokens)': "
                           r"('[^']*'|\[[^\]]*\]|[\d.]+)")
#: the current release's whole line, prefix, time and logger included, in one match
LINE_V1 = re.compile(
    r"(?:\([A-Za-z][A-Za-z0-9]*(?:_TP(\d+))?(?:_\w+)?(?: pid=\d+)?\)[ \t]*)?"
    r"(?:INFO|WARNING|DEBUG|ERROR)[ \t]+(\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[[\w.]+:\d+\] "
    r"SpecDecoding metrics: Mean acceptance length: ([\d.]+|nan), Accepted throughput: "
    r"[\d.]+ tokens/s, Drafted throughput: [\d.]+ tokens/s, Accepted: (\d+) tokens, "
    r"Drafted: (\d+) tokens, Per-position acceptance rate: ([\d., na]*?), "
    r"Avg Draft acceptance rate: ([\d.]+|nan)%")


def sniff(head: str) -> bool:
    return any(m in head for m in MARKERS)


def parse(path: str | os.PathLike, run_id: str, emit=None) -> ImportResult:
    res = ImportResult("vllm-log", emit=emit)
    reader = _Reader(res, run_id, file_year(path), str(path))
    # a block of nothing but current V1 lines is read whole, as columns (_dense)
    for lineno, line in marked_lines(path, MARKERS, res, whole_block=functools.partial(_dense, reader)):
        m = LINE_V1.match(line) if "SpecDecoding metrics: Mean" in line else None
        if m:  # the current release's line: one match gives every field
            reader.fast(m, lineno)
        else:
            reader.line(line, lineno)
    return reader.finish(path)


@functools.lru_cache(maxsize=16)
def _block_v1(k: int, d_al: int, d_pp: int, d_rate: int) -> re.Pattern:
    """The current release's line from its level on, with exactly ``k`` per-position rates and
    each figure printed with the given number of decimals (read exactly by ``fixed``): starting
    with a literal, sre skips ahead at C speed, so one findall over a whole block whose every
    line is such a line gives its fields line by line."""
    pp = rf"\d{{1,{15 - d_pp}}}\.\d{{{d_pp}}}"
    return re.compile(
        r"INFO (\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[[\w.]+:\d+\] SpecDecoding metrics: Mean "
        rf"acceptance length: {fixed_number(d_al)}, Accepted throughput: [\d.]+ tokens/s, Drafted "
        r"throughput: [\d.]+ tokens/s, Accepted: (0|[1-9]\d*) tokens, Drafted: (0|[1-9]\d*) tokens, "
        rf"Per-position acceptance rate: ((?:{pp}, ){{{k - 1}}}{pp}), Avg Draft acceptance rate: "
        rf"{fixed_number(d_rate)}%")


BLOCK_TP = re.compile(r"_TP(\d+)[^\n]*?SpecDecoding metrics: Mean")
BLOCK_SHAPE = re.compile(r"length: \d+\.(\d+), .*rate: ((?:\d+\.\d+, )*\d+\.(\d+)), Avg Draft "
                         r"acceptance rate: \d+\.(\d+)%")


def _dense(reader: "_Reader", text: str, base: int) -> bool:
    """Read a block whose every line is a current-release SpecDecoding line with one draft
    depth k (drafts = drafted / k, agreeing with the line's mean acceptance length) as arrays:
    one regex over the whole block, numpy over what it gives, no object per line. False where
    the block needs the line path (other lines, a varying k, nan, a bad time), which gives the
    same records."""
    n = text.count("\n")
    if not n or text.count("SpecDecoding metrics: Mean") != n:
        return False
    first = BLOCK_SHAPE.search(text, 0, text.find("\n"))
    if not first:
        return False
    k = first.group(2).count(",") + 1
    d_al, d_pp, d_rate = (len(first.group(i)) for i in (1, 3, 4))
    found = _block_v1(k, d_al, d_pp, d_rate).findall(text)
    tp = BLOCK_TP.findall(text) if "_TP" in text else None
    if len(found) != n or (tp is not None and len(tp) != n):
        return False
    stamp, al_s, acc_s, dr_s, pp_s, rate_s = zip(*found)
    when = {st: reader.stamp_ns(st) for st in set(stamp)}
    if 0 in when.values():
        return False
    t = np.fromiter(map(when.__getitem__, stamp), np.int64, n)
    acc = np.fromstring(",".join(acc_s), np.int64, sep=",")
    dr = np.fromstring(",".join(dr_s), np.int64, sep=",")
    al = fixed(al_s, d_al)
    drafts = dr // k
    with np.errstate(divide="ignore", invalid="ignore"):
        agree = (dr % k == 0) & (drafts > 0) & (np.abs(1 + acc / drafts - al) <= 0.005 + 1e-9)
    if not agree.all():
        return False
    rate = fixed(rate_s, d_rate) / 100
    per_pos = np.rint(fixed(pp_s, d_pp).reshape(n, k) * drafts[:, None]).astype(np.int64)
    interval = np.diff(t, prepend=reader.last_t or 0) / 1e9
    if not reader.last_t:
        interval[0] = np.nan
    rank = np.fromstring(",".join(tp), np.int64, sep=",") if tp else np.zeros(n, np.int64)
    reader.block(CountsColumns.of_arrays(
        reader.run_id, "vllm-v1", rank=rank, t_ns=t, interval_s=interval, num_drafts=drafts,
        num_draft_tokens=dr, num_accepted=acc, accepted_per_pos=per_pos,
        reported_mean_acceptance_length=al, reported_acceptance_rate=rate,
        texts={"num_draft_tokens": dr_s, "num_accepted": acc_s}))  # whole numbers, no leading 0
    reader.last_t = int(t[-1])
    reader.k_seen = max(reader.k_seen, k)

    tally = reader.tally
    tally["al"].held += n
    _bulk(tally["rate"], (dr > 0) & ~np.isnan(rate), rate, acc / np.maximum(dr, 1), 0.0005, reader, base)
    if k > 1:
        rising = (np.diff(per_pos, axis=1) > 0).sum(axis=1)
        _bulk(tally["order"], np.ones(n, bool), rising.astype(float), np.zeros(n), 0, reader, base)
    else:
        tally["order"].held += n
    return True


def _bulk(t: Tally, mask: np.ndarray, left: np.ndarray, right: np.ndarray, tol: float,
          reader: "_Reader", base: int) -> None:
    """Tally an identity over a block's rows at once; failing rows are observed one by one,
    so their lines are named."""
    miss = np.abs(left - right)
    ok = mask & (miss <= tol + 1e-9)
    t.held += int(ok.sum())
    bad = np.flatnonzero(mask & ~ok)
    if bad.size:
        t.failed += int(bad.size)
        t.worst = max(t.worst, float(miss[bad].max()))
        for i in bad[:max(0, 5 - len(t.first_failures))].tolist():
            t.first_failures.append(f"{reader.name}:{base + i}: {left[i]:g} vs {right[i]:g}")


VARYING_K = ("drafted / k disagrees with the line's mean acceptance length: the draft depth "
             "varied, so drafts come from the mean (where exact) and per-position rates are "
             "approximate")


class _Reader:
    """The state of one log's import: counters to difference, timestamps seen, the columns."""

    def __init__(self, res: ImportResult, run_id: str, year: int, name: str) -> None:
        self.res, self.run_id, self.year, self.name = res, run_id, year, name
        self.v0_prev: dict[int, tuple[int, int, int]] = {}  #: rank -> last cumulative counters
        self.k_seen = 0
        self.labels: dict[str, str] = {}  #: speculative settings from the start-up line
        self.last_t: int | None = None
        self.stamps: dict[str, int] = {}  #: stamp text -> ns (a log repeats each second)
        self.cols = CountsColumns(run_id, "vllm-v1")
        self.tally = {key: res.tally(text) for key, text in V1_IDENTITIES.items()}

    def stamp_ns(self, stamp: str) -> int:
        """ns since the epoch of a month-day time in the log's year; 0 where it does not parse."""
        t_ns = self.stamps.get(stamp, -1)
        if t_ns < 0:
            try:
                mo, d, hh, mm, ss = (int(x) for x in re.findall(r"\d+", stamp)[:5])
                t_ns = to_ns(_dt.datetime(self.year, mo, d, hh, mm, ss))
            except ValueError:
                t_ns = 0
            self.stamps[stamp] = t_ns
        return t_ns

    def time(self, stamp: str, lineno: int) -> int:
        t_ns = self.stamp_ns(stamp)
        if not t_ns:
            self.res.problems.append(Problem(self.name, lineno, "bad timestamp; line kept without time"))
        return t_ns

    def block(self, cols: CountsColumns) -> None:
        """A block's intervals at once, after the rows read line by line before it."""
        if len(self.cols):
            self.res.add(self.cols)
            self.cols = CountsColumns(self.run_id, "vllm-v1")
        self.res.add(cols)

    def fast(self, m: re.Match, lineno: int) -> None:
        tp, stamp, al, acc, dr, pp, rate = m.groups()
        t_ns = self.time(stamp, lineno)
        rates = [num(x) for x in pp.split(",")] if pp.strip() else []
        rate_f = num(rate)
        self.v1(int(tp or 0), t_ns, int(acc), int(dr), rates, num(al),
                None if rate_f is None else rate_f / 100, lineno)

    def v1(self, rank: int, t_ns: int, accepted: int, drafted: int, rates: list, mean_al: float | None,
           rate: float | None, lineno: int) -> None:
        k = len(rates)
        drafts, varied = _drafts(accepted, drafted, k, mean_al)
        per_pos = tuple(round(r * drafts) for r in rates) if drafts is not None and None not in rates else ()
        interval = (t_ns - self.last_t) / 1e9 if self.last_t and t_ns else None
        self.cols.append(rank, t_ns, interval, drafts, drafted, accepted, per_pos, mean_al, rate, None, ())
        if len(self.cols) >= self.res.batch:
            self.res.add(self.cols)
            self.cols = CountsColumns(self.run_id, "vllm-v1")
        self.last_t = t_ns or self.last_t
        self.k_seen = max(self.k_seen, k)
        t = self.tally
        if drafted and rate is not None:
            t["rate"].observe(rate, accepted / drafted, 0.0005, self.name, lineno)
        if drafts and mean_al is not None:
            t["al"].observe(mean_al, 1 + accepted / drafts, 0.005, self.name, lineno)
        if per_pos:
            t["order"].observe(sum(1 for a, b in zip(per_pos, per_pos[1:]) if b > a), 0, 0, self.name, lineno)
        if varied:
            self.res.trap("varying-k", VARYING_K)

    def line(self, line: str, lineno: int) -> None:
        res, run_id = self.res, self.run_id
        m = PREFIX.match(line)
        rank = int(m.group("tp")) if m and m.group("tp") else 0
        body = line[m.end():] if m else line
        if not any(marker in body for marker in MARKERS):
            return
        st = STAMP.search(body, 0, 64)
        t_ns = self.time(st.group(0), lineno) if st else 0
        try:
            if "SpecDecoding metrics" in body:
                accepted, drafted, rates, mean_al, rate = _v1_fields(body)
                self.v1(rank, t_ns, accepted, drafted, rates, mean_al, rate, lineno)
            elif "Speculative metrics" in body:
                mv = V0.search(body)
                if not mv:
                    raise ValueError("unrecognised V0 'Speculative metrics' line")
                rec = _v0(mv, self.v0_prev.get(rank), run_id, rank, t_ns)
                res.add(rec)
                _v0_identities(res, mv, self.v0_prev.get(rank), rec, self.name, lineno)
                res.trap("vllm-v0-accepted", "vLLM V0's 'Number of accepted tokens' counts every "
                         "matching draft token, also after a rejection (not a prefix count): "
                         "committed tokens come from 'Number of emitted tokens'; V0's own "
                         "acceptance rate is kept as the engine's figure")
                self.v0_prev[rank] = (int(mv.group(4)), int(mv.group(5)), int(mv.group(6)))
                self.k_seen = max(self.k_seen, int(mv.group(3)))
            elif "SpecDecodeWorker stage times" in body:
                res.extend(_stages(body, run_id, rank, t_ns))
            elif "non-default args" in body:
                spec = body[body.find("'speculative_config'"):] if "'speculative_config'" in body else ""
                for key, value in SPEC_SETTINGS.findall(spec[:spec.find("}") + 1]):
                    self.labels.setdefault(key, value.strip("'").replace(" ", ""))
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
            res.problems.append(Problem(self.name, lineno, str(exc)))

    def finish(self, path: str | os.PathLike) -> ImportResult:
        if len(self.cols):
            self.res.add(self.cols)
        self.res.add(run_record(self.run_id, "vllm", "vllm-log", path, num_steps=self.k_seen,
                                labels=self.labels))
        method = self.labels.get("rejection_sample_method", "")
        if method == "synthetic":
            self.res.trap("forced", "rejection_sample_method 'synthetic': acceptance follows "
                          "the configured schedule (benchmarking), not the draft against its target")
        elif method in ("block", "fly"):
            self.res.trap("lossy", f"rejection_sample_method '{method}': verification is not "
                          "per-token lossless by configuration; output-quality checks carry the verdict")
        return self.res


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
        num_draft_tokens=drafted if accepted is not None else None, num_accepted=accepted,
        reported_acceptance_rate=num(mv.group(1)), source="vllm-v0")


def _drafts(accepted: int, drafted: int, k: int, mean_al: float | None) -> tuple[int | None, bool]:
    """Drafts in one interval, and whether the draft depth evidently varied.

    drafted / k holds only when every draft had k tokens; it is kept when the line's own mean
    acceptance length (1 + accepted / drafts, two decimals) agrees with it. Where they disagree
    the depth varied (per-batch-size k, n-gram drafts): drafts come from the mean acceptance
    length where one whole number fits its rounding, else stay unknown.
    """
    by_k = drafted // k if k and drafted % k == 0 else None
    if mean_al is None or accepted == 0:
        return by_k, False
    if by_k and abs(1 + accepted / by_k - mean_al) <= 0.005 + 1e-9:
        return by_k, False
    return steps_from_mean(accepted, mean_al), bool(k)


def _v0_identities(res: ImportResult, mv: re.Match, prev: tuple[int, int, int] | None,
                   rec: schema.SpecCountsRecord, name: str, lineno: int) -> None:
    """A prefix count would equal emitted - drafts; V0's accepted count does not (its trap)."""
    k, now = int(mv.group(3)), (int(mv.group(4)), int(mv.group(5)), int(mv.group(6)))
    if prev is None or any(n < p for n, p in zip(now, prev)):
        prev = (0, 0, 0)
    accepted_v0 = now[0] - prev[0]
    if rec.num_drafts:
        res.identity("accepted tokens = emitted - drafts (a prefix count; V0's is not)",
                     accepted_v0, rec.num_accepted, line=lineno, file=name)
    eff = num(mv.group(2))
    if now[1] and k and now[1] % k == 0 and eff is not None:  # a cumulative figure
        res.identity("system efficiency = emitted / (drafts x (k + 1)) (3 decimals)", eff,
                     now[2] / (now[1] // k * (k + 1)), line=lineno, file=name, tol=0.0005)


def _v1_fields(body: str) -> tuple[int, int, list, float | None, float | None]:
    """accepted, drafted, per-position rates, mean acceptance length, rate (a fraction), field
    by field: every release's order (the current one is matched whole by LINE_V1 first)."""
    got = {k: rx.search(body) for k, rx in FIELD.items()}
    if not got["accepted"] or not got["drafted"]:
        raise ValueError("SpecDecoding line without 'Accepted: N tokens, Drafted: N tokens'")
    rates = []
    if got["per_pos"]:
        rates = [num(x) for x in got["per_pos"].group(1).split(",") if x.strip()]
    rate = None
    if got["rate"]:
        rate = num(got["rate"].group(1))
        if rate is not None and got["rate"].group(2) == "%":
            rate /= 100
    mean_al = num(got["mean_al"].group(1)) if got["mean_al"] else None
    return int(got["accepted"].group(1)), int(got["drafted"].group(1)), rates, mean_al, rate


V1_IDENTITIES = {"rate": "acceptance rate = accepted / drafted (1 decimal, %)",
                 "al": "mean acceptance length = 1 + accepted / drafts (2 decimals)",
                 "order": "per-position acceptance is non-increasing (chain drafting)"}


STAGE_PHASE = {"average_time_per_proposal_tok_ms": "draft_per_token",
               "scoring_time_ms": "verify_forward", "verification_time_ms": "verify_sample"}


def _stages(body: str, run_id: str, rank: int, t_ns: int) -> list[schema.PhaseRecord]:
    out: list[schema.PhaseRecord] = []
    found = STAGES.search(body)
    assert found is not None  # the caller saw "SpecDecodeWorker stage times" in it
    for key, value in re.findall(r"(\w+)=([\d.]+)", found.group(1)):
        out.append(schema.PhaseRecord(run_id=run_id, rank=rank, step=-1,
                                      phase=STAGE_PHASE.get(key, key), device="",
                                      t_start_ns=t_ns, duration_ns=int(float(value) * 1e6),
                                      clock="reported_average"))
    if not out:
        raise ValueError("stage-times line without name=value pairs")
    return out
