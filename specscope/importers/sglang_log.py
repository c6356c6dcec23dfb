"""SGLang server logs: ``Decode batch`` and ``Prefill batch`` lines into specscope records.

Handles ``Decode batch.`` and ``Decode batch,``; ``[time TPn EPn]``, ``[time TPn]`` or no
prefix; token-usage variants (``#token``, ``#full token``/``#swa token``, mamba), disaggregation
fields, trailing commas; ``accept len`` with or without ``accept rate``.

Mapping: SGLang's ``accept len`` is tokens committed per verify step per request, bonus token
included (specscope's acceptance length); the lines give no counts, so it lands as a reported
figure and pooled counts stay null. ``accept rate`` changed meaning between releases
(accept len / draft tokens, later accepted drafts / drafted): kept as reported, never reused.
"""

from __future__ import annotations

import datetime as _dt
import os
import re

from .. import schema
from ..schema import Problem
from ._common import ImportResult, marked_lines, num, run_record, to_ns

PREFIX = re.compile(r"^\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?"
                    r"(?: DP(?P<dp>\d+))?(?: TP(?P<tp>\d+))?(?: EP(?P<ep>\d+))?[^\]]*\]\s*")
KIND = re.compile(r"(Decode|Prefill) batch[.,]\s*")
PAIR = re.compile(r"\s*([^:,]+?):\s*([^,]*)")


def sniff(head: str) -> bool:
    return "Decode batch" in head or "Prefill batch" in head


def _fields(rest: str) -> dict[str, float]:
    out = {}
    for key, value in PAIR.findall(rest):
        key = key.strip().lstrip("#").strip().replace(" ", "_").replace("-", "_")
        key = key.replace("(token/s)", "tok_s").replace("_(token/s)", "_tok_s")
        v = value.strip()
        if v in ("True", "False"):
            out[key] = float(v == "True")
            continue
        f = num(v)
        if f is not None:
            out[key.replace("(", "").replace(")", "")] = f
    return out


def parse(path: str | os.PathLike, run_id: str, emit=None) -> ImportResult:
    res = ImportResult("sglang-log", emit=emit)
    name = str(path)
    stamps: dict[str, int] = {}
    for lineno, line in marked_lines(path, ("Decode batch", "Prefill batch"), res):
        m = PREFIX.match(line)
        body = line[m.end():] if m else line
        k = KIND.search(body)
        if not k:
            continue
        t_ns, rank = 0, 0
        if m:
            rank = int(m.group("tp") or 0)
            t_ns = stamps.get(m.group("time"), -1)
            if t_ns < 0:
                try:
                    t_ns = to_ns(_dt.datetime.strptime(m.group("time"), "%Y-%m-%d %H:%M:%S"))
                except ValueError:
                    t_ns = 0
                stamps[m.group("time")] = t_ns
            if not t_ns:
                res.problems.append(Problem(name, lineno, "bad timestamp; line kept without time"))
        values = _fields(body[k.end():])
        if not values:
            res.problems.append(Problem(name, lineno, f"{k.group(1)} batch line without fields"))
            continue
        if k.group(1) == "Decode" and "accept_len" in values:
            res.add(schema.SpecCountsRecord(
                run_id=run_id, rank=rank, t_ns=t_ns,
                reported_mean_acceptance_length=values.pop("accept_len"),
                reported_acceptance_rate=values.pop("accept_rate", None), source="sglang"))
        prefix = "decode_" if k.group(1) == "Decode" else "prefill_"
        res.add(schema.SampleRecord(
            run_id=run_id, rank=rank, t_ns=t_ns,
            values={prefix + key: v for key, v in values.items()}, source="sglang"))
    res.add(run_record(run_id, "sglang", "sglang-log", path))
    return res
