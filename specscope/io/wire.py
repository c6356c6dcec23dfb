"""Record batches between engine processes and a collector over ZeroMQ (PUSH -> PULL).

Imports stdlib, numpy and the schema; pyzmq when a socket is made. Never torch or dash.

A message is columnar (format 3): ``MAGIC``, a little-endian uint32 header length, a JSON
header, then raw array buffers. The header carries the sender pid, the non-verify records as
JSON objects (few: runs, requests, phases) and, per VerifyColumns, where each array lies in
the payload. Verify entries therefore cross as a handful of numpy buffers, decoded with
``np.frombuffer``: no Python object per entry on either side. numpy buffers rather than Arrow
IPC keep pyarrow out of the engine process. The JSON format of schema versions 1-2
(``{"v": .., "pid": .., "records": [..]}``) is still accepted, so an engine and its collector
can be upgraded one at a time.

The sockets that carry these messages are in ``specscope.io.transport``.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Sequence

import numpy as np

from .. import schema
from . import codec
from .columns import (ACCEPT_ARRAYS, AGGREGATE_ARRAYS, DETAIL_ARRAYS, HAS_HIST, HAS_TRUTH, OPTIONAL_ARRAYS,
                      PIT_ARRAYS, RESID_ARRAYS, SHARP_ARRAYS, STEP_ARRAYS, WIDTHS, Strings,
                      VerifyColumns)

MAX_MESSAGE_BYTES = 16 * 2**20
MAX_ENTRIES = 1 << 16  #: verify entries per message (~9 MiB with every array)
MAGIC = b"SSW\x03"
WIRE_VERSION = 3  #: the columnar format; the JSON format carried schema versions 1-2
JSON_VERSIONS = (1, 2, 3)

#: array -> dtype on the wire; receivers widen to the VerifyColumns dtypes
WIRE_DTYPES = {
    "t_ns": "<i8", "num_drafted": "<i4", "num_draft_tokens": "<i4", "num_accepted": "<i4",
    "mode_requested": "i1", "mode_used": "i1", "num_verified": "<i4", "num_top1": "<i4",
    "expected_top1": "<f8", "var_top1": "<f8", "draft_hist": "<i4",
    "seq": "<i4", "step": "<i8", "batch_size": "<i4", "draft_depth": "<i4",
    "temperature": "<f8", "top_p": "<f8", "top_k": "<i4", "flags": "i1", "step_sizes": "<i4",
    "pit_sum": "<f8", "pit_var": "<f8", "accept_expected": "<f8", "accept_var": "<f8",
    "num_outside": "<f8", "sharp_positions": "<f8", "sharp_llr": "<f8",
    "resid_pit": "<f8", "resid_var": "<f8",
}
TRUTH_ARRAYS = ("num_verified", "num_top1", "expected_top1", "var_top1")
LOCAL_DTYPES = {
    "mode_requested": np.int8, "mode_used": np.int8, "flags": np.int8,
    "expected_top1": np.float64, "var_top1": np.float64, "temperature": np.float64,
    "top_p": np.float64, "pit_sum": np.float64, "pit_var": np.float64,
    "accept_expected": np.float64, "accept_var": np.float64, "num_outside": np.float64,
    "sharp_positions": np.float64, "sharp_llr": np.float64,
    "resid_pit": np.float64, "resid_var": np.float64,
}
_HEADER = struct.Struct("<I")


class WireError(ValueError):
    """A message the receiver cannot use; ``reason`` is the counter it is filed under."""

    def __init__(self, reason: str, entries: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.entries = entries


# ----------------------------------------------------------------------------- encoding
def encode(items: Sequence[Any], pid: int | None = None) -> list[bytes]:
    """Records and VerifyColumns as columnar messages (verify entries chunked by MAX_ENTRIES)."""
    return [m for m, _ in messages(items, pid)]


def messages(items: Sequence[Any], pid: int | None = None) -> list[tuple[bytes, int]]:
    """(message, records and verify entries it holds) of the columnar format."""
    pid = os.getpid() if pid is None else pid
    records = [codec.to_dict(r) for r in items if not isinstance(r, VerifyColumns)]
    chunks: list[VerifyColumns] = []
    for c in items:
        if isinstance(c, VerifyColumns) and len(c):
            chunks.extend(_chunks(c))
    out = []
    first = True
    todo: list[VerifyColumns | None] = list(chunks) or [None]  # records alone: one message
    for c in todo:
        header: dict[str, Any] = {"v": WIRE_VERSION, "pid": pid, "records": records if first else []}
        buffers: list[bytes] = []
        if c is not None:
            header["columns"] = [_column_header(c, buffers)]
        out.append((_frame(header, buffers), len(header["records"]) + (len(c) if c else 0)))
        first = False
    return out


def _chunks(c: VerifyColumns) -> list[VerifyColumns]:
    n = len(c)
    if n <= MAX_ENTRIES:
        return [c]
    c = c.per_entry()
    out = []
    for start in range(0, n, MAX_ENTRIES):
        sl = slice(start, start + MAX_ENTRIES)
        arrays: dict[str, Any] = {a: (None if getattr(c, a) is None else getattr(c, a)[sl])
                                  for a in (*AGGREGATE_ARRAYS, *DETAIL_ARRAYS, *OPTIONAL_ARRAYS)}
        part = VerifyColumns(
            run_id=c.run_id, config_id=c.config_id, rank=c.rank, node=c.node, num_steps=0,
            mode_names=c.mode_names, **arrays)
        if c.request_ids is not None:
            part.request_ids = Strings.of(c.request_ids.tolist()[sl])
        if c.depth_reasons:
            part.depth_reasons = dict(c.depth_reasons)
        if part.seq is not None:
            part.num_steps = int(np.count_nonzero(np.diff(part.seq))) + 1
        out.append(part)
    if c.seq is None:  # aggregates only: keep the step count on the first chunk
        out[0].num_steps = c.num_steps
    return out


def _column_header(c: VerifyColumns, buffers: list) -> dict[str, Any]:
    """Describe ``c`` and append its buffers. Step-level fields (one value per verify step) go
    once per step with the step sizes; all-zero statistics blocks are left out."""
    offset = sum(memoryview(b).nbytes for b in buffers)
    n = len(c)
    arrays: dict[str, list] = {}
    flags = c.flags
    has_truth = c.num_verified is not None and (
        bool((flags & HAS_TRUTH).any()) if flags is not None else bool(c.num_verified.any()))
    has_hist = c.draft_hist is not None and (
        bool((flags & HAS_HIST).any()) if flags is not None else bool(c.draft_hist.any()))
    starts: slice | np.ndarray | None = None
    if c.step_sizes is not None:
        starts = slice(None)  # already one value per step
        sizes = np.ascontiguousarray(c.step_sizes, dtype=WIRE_DTYPES["step_sizes"])
    elif c.seq is not None and n:
        starts = np.flatnonzero(np.concatenate(([True], c.seq[1:] != c.seq[:-1])))
        sizes = np.diff(np.append(starts, n)).astype(WIRE_DTYPES["step_sizes"])
    if starts is not None:
        arrays["step_sizes"] = [WIRE_DTYPES["step_sizes"], offset, sizes.nbytes]
        buffers.append(sizes)
        offset += sizes.nbytes
    names = list(AGGREGATE_ARRAYS) + [a for a in DETAIL_ARRAYS + OPTIONAL_ARRAYS
                                      if getattr(c, a) is not None]
    for name in names:
        if (name == "draft_hist" and not has_hist) or (name in TRUTH_ARRAYS and not has_truth):
            continue  # all zeros: the receiver fills them
        arr = getattr(c, name)
        per_step = starts is not None and name in STEP_ARRAYS
        if per_step and c.step_sizes is None:
            arr = arr[starts]
        arr = np.ascontiguousarray(arr, dtype=WIRE_DTYPES[name])
        arrays[name] = [WIRE_DTYPES[name], offset, arr.nbytes] + (["step"] if per_step else [])
        buffers.append(arr)
        offset += arr.nbytes
    head: dict[str, Any] = {"run_id": c.run_id, "config_id": c.config_id, "rank": c.rank,
                            "num_steps": c.num_steps, "n": n, "modes": list(c.mode_names),
                            "arrays": arrays}
    if c.node:
        head["node"] = c.node
    if c.depth_reasons:
        head["depth_reasons"] = {str(k): v for k, v in c.depth_reasons.items()}
    if c.request_ids is not None:
        head["ids"] = [offset, len(c.request_ids.blob)]
        buffers.append(c.request_ids.blob)
    return head


def _frame(header: dict[str, Any], buffers: list) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    # numpy arrays join through the buffer protocol: one copy into the message
    return b"".join([MAGIC, _HEADER.pack(len(head)), head, *buffers])


JSON_ENTRIES = 1 << 13  #: verify entries per JSON message (~2 MiB)


def encode_json(items: Sequence[Any], pid: int | None = None) -> list[bytes]:
    """The previous format: JSON messages, every record an object (verify columns expanded),
    split so that no message holds more than JSON_ENTRIES verify entries."""
    return [m for m, _ in _json_messages(items, pid)]


def _json_messages(items: Sequence[Any], pid: int | None) -> list[tuple[bytes, int]]:
    """(message, records and entries it holds) of the JSON format."""
    from .columns import expand

    pid = os.getpid() if pid is None else pid
    messages: list[tuple[list[dict[str, Any]], int]] = []
    batch: list[dict[str, Any]] = []
    entries, count = 0, 0
    for r in expand(items):
        n = len(r.entries) if isinstance(r, schema.VerifyStepRecord) else 1
        if batch and entries + n > JSON_ENTRIES:
            messages.append((batch, count))
            batch, entries, count = [], 0, 0
        batch.append(codec.to_dict(r))
        entries += n
        count += n if isinstance(r, schema.VerifyStepRecord) else 1
    if batch:
        messages.append((batch, count))
    return [(json.dumps({"v": 2, "pid": pid, "records": m}, separators=(",", ":")).encode(), c)
            for m, c in messages]


# ----------------------------------------------------------------------------- decoding
def decode_batch(msg: bytes | memoryview,
                 max_bytes: int = MAX_MESSAGE_BYTES) -> tuple[int, list[Any], int]:
    """(sender pid, records and VerifyColumns, records skipped) of one message, either format;
    raises WireError (a ValueError) naming the reason when the message is unusable. A
    memoryview is read in place: the arrays decoded from it are views of the message."""
    if len(msg) > max_bytes:
        raise WireError("oversized")
    if bytes(msg[:4]) == MAGIC:
        return _decode_columnar(memoryview(msg))
    return _decode_json(bytes(msg))


def _decode_json(msg: bytes) -> tuple[int, list[Any], int]:
    try:
        data = json.loads(msg)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise WireError("malformed") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise WireError("malformed")
    if data.get("v") not in JSON_VERSIONS:
        raise WireError("version")
    pid = data["pid"] if isinstance(data.get("pid"), int) else 0
    records, skipped = _records(data["records"])
    return pid, records, skipped


def _records(items: list) -> tuple[list[Any], int]:
    records, skipped = [], 0
    for item in items:
        try:
            records.append(codec.from_dict(item))
        except (codec.SchemaError, TypeError, ValueError):
            skipped += 1
    return records, skipped


def _decode_columnar(msg: memoryview) -> tuple[int, list[Any], int]:
    if len(msg) < 8:
        raise WireError("malformed")
    (head_len,) = _HEADER.unpack_from(msg, 4)
    start = 8 + head_len
    if start > len(msg):
        raise WireError("malformed")
    try:
        header = json.loads(bytes(msg[8:start]))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise WireError("malformed") from None
    if not isinstance(header, dict):
        raise WireError("malformed")
    if header.get("v") != WIRE_VERSION:
        raise WireError("version")
    payload = msg[start:]
    pid = header["pid"] if isinstance(header.get("pid"), int) else 0
    items = header.get("records", [])
    columns = header.get("columns", [])
    if not isinstance(items, list) or not isinstance(columns, list):
        raise WireError("malformed")
    decoded = []
    for head in columns:  # all or nothing: a message is rejected whole
        decoded.append(_columns(head, payload))
    records, skipped = _records(items)
    return pid, records + decoded, skipped


def _array(spec: Any, name: str, payload: memoryview, sizes: Any, n: int) -> np.ndarray:
    """One array of a columnar block, checked against the payload, widened to its local type."""
    if not isinstance(spec, list) or len(spec) not in (3, 4) or spec[0] != WIRE_DTYPES[name]:
        raise WireError("malformed", n)
    _, offset, nbytes = spec[:3]
    count = len(sizes) if sizes is not None else n
    if name == "step_sizes":
        count = nbytes // 4 if isinstance(nbytes, int) else -1
    width = WIDTHS.get(name, 1)
    dtype = np.dtype(spec[0])
    if not (isinstance(offset, int) and isinstance(nbytes, int)) or offset < 0 or count < 0 \
            or nbytes != count * width * dtype.itemsize or offset + nbytes > len(payload):
        raise WireError("malformed", n)
    arr = np.frombuffer(payload, dtype=dtype, count=count * width, offset=offset)
    local = np.dtype(LOCAL_DTYPES.get(name, np.int64))
    if local.kind != dtype.kind:  # integers stay as narrow as they came: no copy
        arr = arr.astype(local)
    elif not dtype.isnative:
        arr = arr.astype(dtype.newbyteorder("="))
    return arr.reshape(count, width) if width > 1 else arr


def _columns(head: Any, payload: memoryview) -> VerifyColumns:
    if not isinstance(head, dict):
        raise WireError("malformed")
    n = head.get("n")
    if not isinstance(n, int) or n < 0 or n > MAX_ENTRIES:
        raise WireError("malformed")
    try:
        arrays = head["arrays"]
        modes = tuple(str(m) for m in head["modes"])
        run_id, config_id = str(head["run_id"]), str(head["config_id"])
        rank, num_steps = int(head["rank"]), int(head["num_steps"])
        node = str(head.get("node", ""))
        if not isinstance(arrays, dict) or not modes or len(modes) > 127:
            raise TypeError
    except (KeyError, TypeError, ValueError):
        raise WireError("malformed", n) from None
    fields: dict[str, Any] = {}
    step_level: set[str] = set()
    sizes = None
    if "step_sizes" in arrays:
        sizes = _array(arrays["step_sizes"], "step_sizes", payload, None, n)
        if (sizes < 0).any() or int(sizes.sum()) != n:
            raise WireError("malformed", n)
    for name, spec in arrays.items():
        if name == "step_sizes":
            continue
        if name not in WIRE_DTYPES:
            raise WireError("malformed", n)
        per_step = isinstance(spec, list) and len(spec) == 4 and spec[3] == "step"
        if per_step and (sizes is None or name not in STEP_ARRAYS):
            raise WireError("malformed", n)
        fields[name] = _array(spec, name, payload, sizes if per_step else None, n)
        if per_step:
            step_level.add(name)
    truth = [a for a in TRUTH_ARRAYS if a in fields]
    if truth and len(truth) != len(TRUTH_ARRAYS):
        raise WireError("malformed", n)
    for name in ("draft_hist",) + TRUTH_ARRAYS:
        fields.setdefault(name, None)  # left out: all zero
    for pair in (PIT_ARRAYS, ACCEPT_ARRAYS, SHARP_ARRAYS, RESID_ARRAYS):
        if len([a for a in pair if a in fields]) == 1:  # both or neither
            raise WireError("malformed", n)
    missing = [a for a in AGGREGATE_ARRAYS if a not in fields]
    if missing or (sizes is not None and
                   step_level != {a for a in STEP_ARRAYS if a in fields}):
        raise WireError("malformed", n)
    for code in ("mode_requested", "mode_used"):
        if n and (fields[code].min() < 0 or fields[code].max() >= len(modes)):
            raise WireError("malformed", n)
    cols = VerifyColumns(run_id=run_id, config_id=config_id, rank=rank, node=node,
                         num_steps=num_steps, mode_names=modes, step_sizes=sizes,
                         **{a: fields[a] for a in AGGREGATE_ARRAYS},
                         **{a: fields[a] for a in OPTIONAL_ARRAYS if a in fields})
    detail = [a for a in DETAIL_ARRAYS if a in fields]
    if detail:
        if len(detail) != len(DETAIL_ARRAYS) or not isinstance(head.get("ids"), list):
            raise WireError("malformed", n)
        try:
            offset, nbytes = (int(v) for v in head["ids"])
        except (TypeError, ValueError):
            raise WireError("malformed", n) from None
        if offset < 0 or nbytes < 0 or offset + nbytes > len(payload):
            raise WireError("malformed", n)
        blob = bytes(payload[offset:offset + nbytes])
        ids = Strings(blob, n)
        try:
            ids.check()  # split into strings only when a trace needs them
        except ValueError:
            raise WireError("malformed", n) from None
        for a in detail:
            setattr(cols, a, fields[a])
        cols.request_ids = ids
        reasons = head.get("depth_reasons")
        if reasons is not None:
            try:
                cols.depth_reasons = {int(k): str(v) for k, v in dict(reasons).items()}
            except (TypeError, ValueError):
                raise WireError("malformed", n) from None
    return cols
