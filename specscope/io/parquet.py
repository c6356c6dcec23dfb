"""Parquet trace datasets: one dataset per record kind, verify steps flattened per request,
in the fleet store's layout (``verify/date=D/config=C/run=R/node=N/part-<unique>.parquet``, see
``store``), so a directory of many runs and nodes is one query for DuckDB, Spark or pyarrow.

Imports pyarrow (the ``parquet`` extra). The schema version travels in each file's metadata.
The partition columns ``config`` and ``run`` are path-safe copies of ``config_id``/``run_id``,
which stay in the data unchanged; the node is in the path only (percent-encoded, whole) and
restored on reading. Every read goes through ``Store.parts`` (``pyarrow.dataset``, pruned by
one filter expression). Traces written before the fleet layout
(``verify/config=C/run=R/part-0.parquet``) read as before.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from .. import schema
from . import codec
from ..schema import TraceError
from .columns import (ACCEPT_ARRAYS, HAS_HIST, HAS_TRUTH, OPTIONAL_ARRAYS, PIT_ARRAYS,
                      RESID_ARRAYS, SHARP_ARRAYS, WIDTHS, VerifyColumns, expand)
from .intervals import BATCHES
from .store import UNKNOWN, Store, Where, day, open_store, partition_path, partition_values

_VERSION_KEY = b"specscope_schema_version"
_STEP_FIELDS = ("run_id", "config_id", "rank", "step", "t_ns", "batch_size", "draft_depth",
                "depth_reason")
_SEQ = "record_seq"
_JSON_FIELDS = {"env_flags", "host", "labels", "evidence", "values", "metrics", "config"}


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:  # depends on the install
        raise ModuleNotFoundError("Parquet traces need pyarrow: pip install 'specscope[parquet]'",
                                  name=exc.name) from None
    return pa, pq


def _rows(records: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seq = 0
    for r in expand(records):
        kind = schema.KIND_OF[type(r)]
        if kind == "verify":
            base = {f: getattr(r, f) for f in _STEP_FIELDS}
            base[_SEQ] = seq  # keeps record boundaries even where two steps share a key
            base["node"] = r.node  # the partition, taken out of the data by the writer
            seq += 1
            for e in r.entries:
                row = dict(base)
                for f in dataclasses.fields(e):
                    v = getattr(e, f.name)
                    row[f.name] = list(v) if isinstance(v, tuple) else v
                rows[kind].append(row)
            continue
        row = {}
        for f in dataclasses.fields(r):
            v = getattr(r, f.name)
            if f.name in _JSON_FIELDS:
                v = json.dumps(dict(v))
            elif isinstance(v, tuple):
                v = list(v)
            row[f.name] = v
        rows[kind].append(row)
    return rows


def write_parquet(records: Iterable[Any], out_dir: str | os.PathLike,
                  store: Store | None = None) -> str | Path:
    """Write records (and VerifyColumns) as a partitioned dataset per kind under ``out_dir`` (a
    path or filesystem URI, see ``store``).

    Each call adds new part files with names no other writer picks; a local part is written
    under a temporary name and renamed when complete, so a reader (or a writer killed mid-way)
    never sees half a file.
    """
    pa, pq = _pa()
    store = store or open_store(out_dir, create=True)
    items = list(records)
    columns = [r for r in items if isinstance(r, VerifyColumns)]
    batches = [r for r in items if isinstance(r, BATCHES)]
    configs: dict[str, str] = {}
    rows_by_kind = _rows(r for r in items if not isinstance(r, (VerifyColumns, *BATCHES)))
    for row in rows_by_kind.get("run", []):
        configs[row["run_id"]] = row.get("config_id", "")
    nodes = {row["run_id"]: row.get("node", "") for row in rows_by_kind.get("run", [])}
    parts: list[tuple[str, Any]] = []
    for kind, rows in rows_by_kind.items():
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            run_id = row.get("run_id", "")
            config = row.get("config_id", configs.get(run_id, ""))
            # in the path, not the data; a kind without a node takes its run's
            node = row.pop("node") if "node" in row else nodes.get(run_id, "")
            folder = partition_path(kind, day(schema.time_ns(row)), config, run_id, node)
            groups.setdefault(folder, []).append(row)
        for folder, part in groups.items():
            table = pa.Table.from_pylist(part)
            if kind == "verify":
                table = _float_columns(table, pa, OPTIONAL_ARRAYS)
            parts.append((folder, table))
    for c in columns:
        if len(c):
            t0 = int(c.t_ns[0]) if len(c.t_ns) else None
            parts.append((partition_path("verify", day(t0), c.config_id, c.run_id, c.node),
                          _columns_table(c, pa)))
    for cc in batches:
        if len(cc):
            kind = schema.KIND_OF[cc.record_type]
            parts.append((partition_path(kind, day(None), configs.get(cc.run_id, ""), cc.run_id,
                                         nodes.get(cc.run_id, "")), cc.table(pa)))
    for folder, table in parts:
        kind = folder.split("/", 1)[0]
        meta = {_VERSION_KEY: str(schema.SCHEMA_VERSION).encode(), b"specscope_kind": kind.encode()}
        store.write(folder, table.replace_schema_metadata(meta))
    return Path(store.root) if store.local else store.uri


def _float_columns(table: Any, pa: Any, names: Sequence[str]) -> Any:
    """``table`` with each of ``names`` as float64 (where every value was None, inferred as
    the null type; counts, inferred as integers): every part file of a kind keeps one
    schema."""
    for name in names:
        i = table.schema.get_field_index(name)
        want = pa.list_(pa.float64()) if name in WIDTHS else pa.float64()
        if i >= 0 and table.schema.field(i).type != want:
            table = table.set_column(i, name, table.column(i).cast(want))
    return table


def _columns_table(c: VerifyColumns, pa: Any) -> Any:
    """A verify table straight from columns: the same layout ``_rows`` gives, no row objects."""
    import numpy as np

    if not c.has_detail:
        raise ValueError("verify columns without per-entry detail cannot be stored as a trace")
    c = c.per_entry()
    flags, seq, ids, depth = c.flags, c.seq, c.request_ids, c.draft_depth
    if flags is None or seq is None or ids is None or depth is None:
        raise ValueError("verify columns without per-entry detail cannot be stored as a trace")
    n = len(c)
    drafted = c.num_drafted
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(drafted, out=offsets[1:])
    pos = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], drafted)
    per_pos = (pos < np.repeat(c.num_accepted, drafted)).astype(np.int64)
    has_hist = ((flags & HAS_HIST) != 0) & (c.draft_hist is not None)
    truth = ((flags & HAS_TRUTH) != 0) & (c.num_verified is not None)
    zero_i = np.zeros(n, dtype=np.int64)
    bins = schema.DRAFT_HIST_BINS
    hist_off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(has_hist, bins, 0), out=hist_off[1:])
    names = np.asarray(c.mode_names, dtype=object)
    zero_f = np.zeros(n)
    hist_values = (c.draft_hist[has_hist].ravel().astype(np.int64) if c.draft_hist is not None
                   else np.zeros(0, dtype=np.int64))

    def ints(a):
        return pa.array(np.asarray(a, dtype=np.int64))

    def stat(a, zero):
        return np.where(truth, a, zero) if a is not None else zero
    data = {
        "run_id": pa.array([c.run_id] * n, pa.string()),
        "config_id": pa.array([c.config_id] * n, pa.string()),
        "rank": pa.array(np.full(n, c.rank, dtype=np.int64)),
        "step": ints(c.step), "t_ns": ints(c.t_ns), "batch_size": ints(c.batch_size),
        "draft_depth": pa.array(np.asarray(depth, dtype=np.int64), mask=depth < 0),
        "depth_reason": pa.array([(c.depth_reasons or {}).get(q, "") for q in seq.tolist()]
                                 if c.depth_reasons else [""] * n, pa.string()),
        _SEQ: ints(seq),
        "request_id": pa.array(ids.tolist(), pa.string()),
        "num_drafted": ints(drafted), "num_draft_tokens": ints(c.num_draft_tokens),
        "num_accepted": ints(c.num_accepted),
        "accepted_per_pos": pa.ListArray.from_arrays(pa.array(offsets), pa.array(per_pos)),
        "temperature": pa.array(c.temperature), "top_p": pa.array(c.top_p),
        "top_k": ints(c.top_k),
        "mode_requested": pa.array(names[c.mode_requested.astype(np.int64)].tolist(), pa.string()),
        "mode_used": pa.array(names[c.mode_used.astype(np.int64)].tolist(), pa.string()),
        "num_verified": ints(stat(c.num_verified, zero_i)),
        "num_top1": ints(stat(c.num_top1, zero_i)),
        "expected_top1": pa.array(stat(c.expected_top1, zero_f)),
        "var_top1": pa.array(stat(c.var_top1, zero_f)),
        "draft_top1_hist": pa.ListArray.from_arrays(pa.array(hist_off), pa.array(hist_values)),
    }
    for name in OPTIONAL_ARRAYS:  # null where the entry has none
        if name in WIDTHS:
            continue
        values = getattr(c, name)
        values = np.full(n, np.nan) if values is None else np.where(truth, values, np.nan)
        data[name] = pa.array(values, pa.float64(), mask=np.isnan(values))
    # the sharpness test's log-ratio sums: a list per entry, null where it has none
    width = WIDTHS["sharp_llr"]
    has = np.isfinite(data["sharp_positions"].to_numpy(zero_copy_only=False)) & \
        (c.sharp_llr is not None)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(has, width, 0), out=offsets[1:])
    flat = c.sharp_llr[has].ravel().astype(np.float64) if c.sharp_llr is not None \
        else np.zeros(0)
    data["sharp_llr"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.float64()),
                                                 mask=pa.array(~has))
    return pa.table(data)


class ParquetTraceWriter:
    """A streaming Parquet trace: a directory of closed part files, rolled every
    ``roll_records`` records or ``roll_s`` seconds. A Recorder or Collector sink; thread-safe.

    What a ``kill -9`` loses is the part not yet rolled; every closed part stays readable.
    """

    accepts_columns = True

    def __init__(self, path: str | os.PathLike, *, roll_records: int = 50_000,
                 roll_s: float = 10.0) -> None:
        import threading
        import time

        _pa()  # fail at construction, not on the first roll
        self.store = open_store(path, create=True)
        self.path = Path(self.store.root) if self.store.local else self.store.uri
        self.roll_records = roll_records
        self.roll_s = roll_s
        self._clock = time.monotonic
        self._lock = threading.Lock()
        self._buf: list[Any] = []
        self._buffered = 0
        self._last_roll = self._clock()
        self.num_written = 0
        self.num_parts = 0

    def write(self, records: Sequence[Any]) -> None:
        with self._lock:
            self._buf.extend(records)
            self._buffered += sum(len(r) if isinstance(r, (VerifyColumns, *BATCHES)) else 1
                                  for r in records)
            if self._buffered >= self.roll_records or self._clock() - self._last_roll >= self.roll_s:
                self._roll()

    def _roll(self) -> None:
        if self._buf:
            write_parquet(self._buf, self.path, store=self.store)
            self.num_written += self._buffered
            self.num_parts += 1
        self._buf, self._buffered, self._last_roll = [], 0, self._clock()

    def flush(self) -> None:
        with self._lock:
            self._roll()

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> "ParquetTraceWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _files(path: str | os.PathLike, where: Where | None = None) -> tuple[Store, list[tuple[str, str]]]:
    """The store and its parts (pruned by ``where``) with each part's node, or one file."""
    text = os.fspath(path)
    if "://" not in text and Path(text).is_file():
        store = open_store(Path(text).parent)
        f = str(Path(text).resolve()).replace(os.sep, "/")
        return store, [(f, _node_of(partition_values(f)))]
    store = open_store(text)
    parts = store.parts(where=where)
    if where and (where.since or where.until):  # a run's record is kept whatever its start day
        parts = sorted({f: v for f, v in parts + store.parts("run", where, dates=False)}.items())
    if not parts and not where:
        raise TraceError(f"{text}: no .parquet files")
    return store, [(f, _node_of(values)) for f, values in parts]


def _node_of(values: dict[str, str]) -> str:
    node = values.get("node", "")
    return "" if node == UNKNOWN else node


def _check(f: str, meta: dict) -> str:
    version = meta.get(_VERSION_KEY)
    if version is None or int(version) not in schema.READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in schema.READABLE_VERSIONS)
        raise TraceError(f"{f}: trace schema version {version!r} is not readable; this "
                         f"specscope reads schema version(s) {readable}")
    return meta.get(b"specscope_kind", Path(f).stem.encode()).decode()


def read_parquet(path: str | os.PathLike, where: Where | None = None) -> list[Any]:
    """Read a Parquet trace dataset (or one file) back into records; ``where`` reads only the
    partitions it admits (date range, configurations, runs, nodes)."""
    pa, pq = _pa()
    records: list[Any] = []
    store, files = _files(path, where)
    for f, node in files:
        table = pq.read_table(f, partitioning=None, filesystem=store.fs)
        kind = _check(f, table.schema.metadata or {})
        rows = table.to_pylist()
        if node and "node" in {f.name for f in dataclasses.fields(schema.RECORD_TYPES[kind])}:
            for row in rows:
                row["node"] = node
        if kind == "verify":
            records.extend(_unflatten_verify(rows))
            continue
        for row in rows:
            for k in _JSON_FIELDS & row.keys():
                row[k] = json.loads(row[k]) if row[k] else {}
            if "kind" in row:  # a record's own kind field (an anomaly's) beside the record kind
                row[codec.FIELD_KIND] = row.pop("kind")
            records.append(codec.from_dict({"kind": kind, **row}))
    return records


def iter_verify_columns(path: str | os.PathLike, where: Where | None = None):
    """Verify entries of a Parquet trace as VerifyColumns, one row group at a time."""
    import numpy as np

    pa, pq = _pa()
    store, files = _files(path, where)
    cols = ["run_id", "config_id", "rank", "step", "t_ns", "num_drafted", "num_draft_tokens",
            "num_accepted", "mode_requested", "mode_used", "num_verified", "num_top1",
            "expected_top1", "var_top1", "draft_top1_hist"]
    depth_cols = [_SEQ, "draft_depth", "depth_reason"]  #: the steps' k (traces since they had it)
    for f, node in files:
        file_schema = pq.read_schema(f, filesystem=store.fs)
        meta = file_schema.metadata or {}
        if _check(f, meta) != "verify":
            continue
        has_depth = all(c in file_schema.names for c in depth_cols)
        # strings arrive dictionary-encoded: no per-row string objects on the fast path
        pf = pq.ParquetFile(store.fs.open_input_file(f),
                            read_dictionary=["run_id", "config_id", "mode_requested", "mode_used"])
        for group in range(pf.metadata.num_row_groups):  # one row group in memory at a time
            names = cols + depth_cols if has_depth else cols
            batch = pf.read_row_group(group, columns=names)
            if not batch.num_rows:
                continue
            col = {c: batch.column(i).combine_chunks() for i, c in enumerate(names)}
            arr = _numpy_getter(col, np)
            seq = depth = reasons = None
            if has_depth:
                seq = arr(_SEQ, np.int64)
                depth = np.nan_to_num(col["draft_depth"].to_numpy(zero_copy_only=False).astype(float),
                                      nan=-1).astype(np.int64)
                said = np.flatnonzero(np.asarray(col["depth_reason"].fill_null("").to_numpy(
                    zero_copy_only=False), dtype=object) != "")
                reasons = {int(seq[i]): col["depth_reason"][int(i)].as_py() for i in said}

            hist = _hist_matrix(col["draft_top1_hist"], len(batch), np)
            extra = {}  # the optional pairs (null -> NaN), each kept where any entry has it
            for pair in _OPTIONAL_PAIRS:
                if all(p in file_schema.names for p in pair):
                    got = pf.read_row_group(group, columns=list(pair))
                    extra.update({p: _llr_matrix(got.column(p).combine_chunks(), len(batch), np)
                                  if p in WIDTHS else got.column(p).combine_chunks().to_numpy(
                                      zero_copy_only=False).astype(np.float64) for p in pair})
            req = _codes(col["mode_requested"], np)
            used = _codes(col["mode_used"], np)
            runs = col["run_id"] if hasattr(col["run_id"], "indices") else col["run_id"].dictionary_encode()
            run_idx = runs.indices.to_numpy(zero_copy_only=False)
            ranks = arr("rank", np.int64)
            if len(runs.dictionary) == 1 and ranks.min() == ranks.max():
                keys = [(0, int(ranks[0]))]
            else:
                width = int(ranks.max()) + 1
                combined = np.unique(run_idx.astype(np.int64) * width + ranks)
                keys = [(int(c // width), int(c % width)) for c in combined]
            for ri, rank in keys:
                mask: Any = slice(None)
                first = 0
                if len(keys) > 1:
                    mask = (run_idx == ri) & (ranks == rank)
                    first = int(np.flatnonzero(mask)[0])
                yield VerifyColumns(
                    run_id=runs.dictionary[ri].as_py(), config_id=col["config_id"][first].as_py(),
                    rank=int(rank), node=node, num_steps=int(np.unique(arr("step", np.int64)[mask]).size),
                    t_ns=arr("t_ns", np.int64)[mask], num_drafted=arr("num_drafted", np.int64)[mask],
                    num_draft_tokens=arr("num_draft_tokens", np.int64)[mask],
                    num_accepted=arr("num_accepted", np.int64)[mask], mode_requested=req[mask],
                    mode_used=used[mask], num_verified=arr("num_verified", np.int64)[mask],
                    num_top1=arr("num_top1", np.int64)[mask],
                    expected_top1=arr("expected_top1", np.float64)[mask],
                    var_top1=arr("var_top1", np.float64)[mask], draft_hist=hist[mask],
                    **{p: extra[p][mask] for pair in _OPTIONAL_PAIRS
                       if pair[0] in extra and not np.isnan(extra[pair[0]][mask]).all()
                       for p in pair},
                    seq=None if seq is None else seq[mask],
                    draft_depth=None if depth is None else depth[mask], depth_reasons=reasons or None)


def _numpy_getter(col: dict, np):
    def arr(name: str, dtype):
        return col[name].to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    return arr


def _codes(column, np):
    """Sampling-mode strings as codes into schema.SAMPLING_MODES (unknown -> 0), vectorised."""
    enc = column if hasattr(column, "indices") else column.dictionary_encode()
    lookup = np.array([schema.SAMPLING_MODES.index(m) if m in schema.SAMPLING_MODES else 0
                       for m in enc.dictionary.to_pylist()] or [0], dtype=np.int8)
    return lookup[enc.indices.to_numpy(zero_copy_only=False)]


#: the optional arrays a verify part file may hold, in the groups that travel together
_OPTIONAL_PAIRS = (PIT_ARRAYS, ACCEPT_ARRAYS, ("num_outside",), SHARP_ARRAYS, RESID_ARRAYS)


def _llr_matrix(column, n: int, np):
    """The sharpness test's list column as an [n, width] float matrix (NaN where null)."""
    width = WIDTHS["sharp_llr"]
    full = np.full((n, width), np.nan)
    lengths = column.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    rows = lengths == width
    if rows.any():
        flat = column.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
        if ((lengths == 0) | rows).all():
            full[rows] = flat.reshape(-1, width)
        else:  # odd lengths: row by row
            for i, row in enumerate(column.to_pylist()):
                if row and len(row) == width:
                    full[i] = row
    return full


def _hist_matrix(column, n: int, np):
    """The list column of draft histograms as an [n, bins] matrix (zeros where empty)."""
    bins = schema.DRAFT_HIST_BINS
    lengths = column.value_lengths().to_numpy(zero_copy_only=False)
    flat = column.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    full = np.zeros((n, bins), dtype=np.int64)
    if ((lengths == 0) | (lengths == bins)).all():
        full[lengths == bins] = flat.reshape(-1, bins)
        return full
    for i, row in enumerate(column.to_pylist()):  # odd lengths: row by row
        if row and len(row) == bins:
            full[i] = row
    return full


#: optional counts stored as float64 columns (null where an entry has none): ints again on reading
_COUNTS = frozenset({"num_outside", "sharp_positions"})


def _unflatten_verify(rows: list[dict[str, Any]]) -> list[schema.VerifyStepRecord]:
    steps: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        key = (row.get(_SEQ),) + tuple(row.get(f) for f in _STEP_FIELDS + ("node",))
        steps.setdefault(key, []).append(row)
    out = []
    for key, group in steps.items():
        base = {k: v for k, v in zip(_STEP_FIELDS + ("node",), key[1:]) if v is not None}
        entries = [{k: int(v) if k in _COUNTS and v is not None else v for k, v in row.items()
                    if k not in _STEP_FIELDS and k not in (_SEQ, "node")} for row in group]
        out.append(codec.from_dict({"kind": "verify", **base, "entries": entries}))
    return out
