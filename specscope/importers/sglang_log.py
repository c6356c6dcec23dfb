"""SGLang server logs: ``Decode batch`` and ``Prefill batch`` lines into specscope records.

Handles ``Decode batch.`` and ``Decode batch,``; ``[time TPn EPn]``, ``[time TPn]`` or no
prefix; token-usage variants (``#token``, ``#full token``/``#swa token``, mamba), disaggregation
fields, trailing commas; ``accept len`` with or without ``accept rate``.

Mapping: SGLang's ``accept len`` is tokens committed per verify step per request, bonus token
included (specscope's acceptance length), over the decode batches since the previous line; it
lands as a reported figure, weighted by the line's ``#running-req``. Counts come only where a
line is one batch: the log's ``server_args`` line says ``'decode_log_interval': 1``; each
request of the batch is then one request-step that drafted ``speculative_num_draft_tokens - 1``
tokens (as SGLang's own per-request counts take it), and ``accept len`` x ``#running-req``,
printed with 2 decimals, is the batch's committed tokens exactly while fewer than 100 requests
run (the rounding stays under half a token). Elsewhere the counts stay null. ``accept rate``
changed meaning between releases (accept len / draft tokens, later accepted drafts /
drafted): kept as reported, never reused.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import re
from typing import Any

import numpy as np

from .. import schema
from ..io.intervals import CountsColumns, SampleColumns
from ..schema import Problem
from ._common import ImportResult, fixed, fixed_number, marked_lines, num, run_record, to_ns

PREFIX = re.compile(r"^\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?"
                    r"(?: DP(?P<dp>\d+))?(?: TP(?P<tp>\d+))?(?: EP(?P<ep>\d+))?[^\]]*\]\s*")
KIND = re.compile(r"(Decode|Prefill) batch[.,]\s*")
SETTING = re.compile(r"'(decode_log_interval|speculative_num_draft_tokens)': (\d+)")
#: a batch of more running requests than this leaves accept len's rounding a token or more
EXACT_BELOW = 100
PAIR = re.compile(r"\s*([^:,]+?):\s*([^,]*)")


def sniff(head: str) -> bool:
    return "Decode batch" in head or "Prefill batch" in head


def _key(raw: str) -> str:
    key = raw.strip().lstrip("#").strip().replace(" ", "_").replace("-", "_")
    return key.replace("(token/s)", "tok_s").replace("_(token/s)", "_tok_s")


def _fields(rest: str) -> dict[str, float]:
    out = {}
    for key, value in PAIR.findall(rest):
        key = _key(key)
        v = value.strip()
        if v in ("True", "False"):
            out[key] = float(v == "True")
            continue
        f = num(v)
        if f is not None:
            out[key.replace("(", "").replace(")", "")] = f
    return out


def _drafted_per_step(settings: dict[str, int]) -> int | None:
    """Draft tokens each request-step of a log line drafted, where every line is one batch."""
    if settings.get("decode_log_interval") != 1 or "speculative_num_draft_tokens" not in settings:
        return None
    return settings["speculative_num_draft_tokens"] - 1


def _counts(values: dict[str, float], drafted: int | None) -> dict[str, Any]:
    running, length = values.get("running_req"), values.get("accept_len")
    if (drafted is None or running is None or length is None or not 0 < running < EXACT_BELOW
            or running != int(running)):
        return {}  # a count of requests that is not a whole number counts nothing
    running = int(running)
    return {"num_drafts": running, "num_draft_tokens": running * drafted,
            "num_accepted": round(length * running) - running}


def parse(path: str | os.PathLike, run_id: str, emit=None) -> ImportResult:
    res = ImportResult("sglang-log", emit=emit)
    name = str(path)
    stamps: dict[str, int] = {}
    settings: dict[str, int] = {}
    block = functools.partial(_dense, res, run_id, stamps, settings)
    for lineno, line in marked_lines(path, ("Decode batch", "Prefill batch", "server_args="), res,
                                     whole_block=block):
        if "server_args=" in line and "Decode batch" not in line:
            settings.update((k, int(v)) for k, v in SETTING.findall(line))
            continue
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
                run_id=run_id, rank=rank, t_ns=t_ns, **_counts(values, _drafted_per_step(settings)),
                reported_mean_acceptance_length=values.pop("accept_len"),
                reported_acceptance_rate=values.pop("accept_rate", None),
                reported_weight=values.get("running_req"), source="sglang"))
        prefix = "decode_" if k.group(1) == "Decode" else "prefill_"
        res.add(schema.SampleRecord(
            run_id=run_id, rank=rank, t_ns=t_ns,
            values={prefix + key: v for key, v in values.items()}, source="sglang"))
    res.add(run_record(run_id, "sglang", "sglang-log", path))
    return res


@functools.lru_cache(maxsize=32)
def _shape(raw_keys: tuple[str, ...], decimals: tuple[int, ...]) -> re.Pattern:
    """Every line of one shape: the prefix with a time, ``Decode batch``, these keys in this
    order with values printed with these decimals (read exactly by ``fixed``), to the end of
    the line. It starts with the newline before the line (the block is searched with one put
    in front), a literal sre skips to at C speed, so a match always starts a line."""
    pairs = ", ".join(re.escape(k.strip()) + ": " + fixed_number(d) for k, d in zip(raw_keys, decimals))
    return re.compile(r"\n\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?(?: DP\d+)?(?: TP(\d+))?"
                      r"(?: EP\d+)?[^\]\n]*\][ \t]*Decode batch[.,][ \t]*" + pairs + r",?[ \t]*(?=\n)")


def _dense(res: ImportResult, run_id: str, stamps: dict[str, int], settings: dict[str, int],
           text: str, base: int) -> bool:
    """Read a block of nothing but ``Decode batch`` lines of one shape (the first line's keys,
    in its order, every value a number) as columns: one anchored regex over the whole block,
    numpy over what it gives. False where the block needs the line path (other lines, another
    shape, a bad time, an unknown accept len), which gives the same records."""
    n = text.count("\n")
    if not n or text.count("Decode batch") != n:
        return False
    first = text[:text.find("\n")]
    k = KIND.search(first)
    if not k:
        return False
    pairs = PAIR.findall(first[k.end():])
    raw = tuple(key for key, _ in pairs)
    decimals = tuple(len(v.strip().partition(".")[2]) for _, v in pairs)
    keys = [_key(r).replace("(", "").replace(")", "") for r in raw]
    if "accept_len" not in keys or len(set(keys)) != len(keys):
        return False
    found = _shape(raw, decimals).findall("\n" + text)
    if len(found) != n:
        return False
    cols = list(zip(*found))
    for st in set(cols[0]) - stamps.keys():
        try:
            stamps[st] = to_ns(_dt.datetime.strptime(st, "%Y-%m-%d %H:%M:%S"))
        except ValueError:
            return False
    t = np.fromiter(map(stamps.__getitem__, cols[0]), np.int64, n)
    rank = np.fromstring(",".join(x or "0" for x in cols[1]), np.int64, sep=",")
    values = np.column_stack([fixed(c, d) for c, d in zip(cols[2:], decimals)])
    if values.shape != (n, len(keys)) or np.isinf(values).any():
        return False
    spec = {name: values[:, keys.index(name)] for name in ("accept_len", "accept_rate") if name in keys}
    if np.isnan(spec["accept_len"]).any():
        return False
    kept = [i for i, name in enumerate(keys) if name not in spec]
    counts = {}
    drafted = _drafted_per_step(settings)
    if drafted is not None and "running_req" in keys:
        running = values[:, keys.index("running_req")]
        if not ((running > 0) & (running < EXACT_BELOW) & (running == np.floor(running))).all():
            return False  # the line path gives these lines their counts one by one
        steps = running.astype(np.int64)
        counts = {"num_drafts": steps, "num_draft_tokens": steps * drafted,
                  "num_accepted": np.rint(spec["accept_len"] * running).astype(np.int64) - steps}
    res.add(CountsColumns.of_arrays(
        run_id, "sglang", rank=rank, t_ns=t, **counts,
        reported_mean_acceptance_length=spec["accept_len"],
        reported_acceptance_rate=spec.get("accept_rate"),
        reported_weight=values[:, keys.index("running_req")] if "running_req" in keys else None))
    res.add(SampleColumns(run_id, "sglang", rank, t, ["decode_" + keys[i] for i in kept],
                          np.ascontiguousarray(values[:, kept])))
    return True
