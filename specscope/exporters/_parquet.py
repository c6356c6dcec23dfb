"""Parquet compaction of traces: one file per record kind, verify steps flattened per request.

Imports pyarrow (the ``parquet`` extra). The schema version travels in each file's metadata.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from .. import schema
from .trace import TraceError, read_trace

_VERSION_KEY = b"specscope_schema_version"
_STEP_FIELDS = ("run_id", "config_id", "rank", "step", "t_ns", "batch_size")
_JSON_FIELDS = {"env_flags", "host", "labels", "evidence", "values", "metrics", "config"}


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - depends on the install
        raise SystemExit("Parquet needs pyarrow: pip install 'specscope[parquet]'") from None
    return pa, pq


def _rows(records: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        kind = schema.KIND_OF[type(r)]
        if kind == "verify":
            base = {f: getattr(r, f) for f in _STEP_FIELDS}
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


def write_parquet(records: Iterable[Any], out_dir: str | os.PathLike) -> Path:
    """Write records as ``out_dir/<kind>.parquet`` files."""
    pa, pq = _pa()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for kind, rows in _rows(records).items():
        table = pa.Table.from_pylist(rows)
        meta = {_VERSION_KEY: str(schema.SCHEMA_VERSION).encode(), b"specscope_kind": kind.encode()}
        table = table.replace_schema_metadata(meta)
        pq.write_table(table, out / f"{kind}.parquet", compression="zstd")
    return out


def compact(paths: str | os.PathLike | list, out_dir: str | os.PathLike) -> Path:
    """Compact JSONL traces into a Parquet trace directory."""
    return write_parquet(read_trace(paths).records, out_dir)


def read_parquet(path: str | os.PathLike) -> list[Any]:
    """Read a Parquet trace directory (or one ``<kind>.parquet`` file) back into records."""
    pa, pq = _pa()
    path = Path(path)
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise TraceError(f"{path}: no .parquet files")
    records: list[Any] = []
    for f in files:
        table = pq.read_table(f)
        meta = table.schema.metadata or {}
        version = meta.get(_VERSION_KEY)
        if version is None or int(version) not in schema.READABLE_VERSIONS:
            readable = ", ".join(str(v) for v in schema.READABLE_VERSIONS)
            raise TraceError(f"{f}: trace schema version {version!r} is not readable; this "
                             f"specscope reads schema version(s) {readable}")
        kind = meta.get(b"specscope_kind", f.stem.encode()).decode()
        rows = table.to_pylist()
        if kind == "verify":
            records.extend(_unflatten_verify(rows))
            continue
        for row in rows:
            for k in _JSON_FIELDS & row.keys():
                row[k] = json.loads(row[k]) if row[k] else {}
            records.append(schema.from_dict({"kind": kind, **row}))
    return records


def _unflatten_verify(rows: list[dict[str, Any]]) -> list[schema.VerifyStepRecord]:
    steps: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        key = tuple(row[f] for f in _STEP_FIELDS)
        steps.setdefault(key, []).append(row)
    out = []
    for key, group in steps.items():
        base = dict(zip(_STEP_FIELDS, key))
        entries = [{k: v for k, v in row.items() if k not in _STEP_FIELDS} for row in group]
        out.append(schema.from_dict({"kind": "verify", **base, "entries": entries}))
    return out
