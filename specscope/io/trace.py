"""Trace files: a crash-safe JSONL stream, and one reader for JSONL and Parquet traces.

Imports only stdlib and the schema at module level; pyarrow is imported when Parquet is used.
A JSONL trace is one header line then one record per line, flushed per batch, so a writer
killed with SIGKILL leaves everything but its unflushed tail readable.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from .. import schema
from . import codec
from ..schema import Problem, TraceError

HEADER_KIND = "header"


@dataclass
class Trace:
    """Records read from one or more trace files, and what could not be read."""

    records: list[schema.Record] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    truncated_tail: int = 0  #: records lost to an unfinished last line (a killed writer)

    def of(self, cls: type) -> list[Any]:
        return [r for r in self.records if type(r) is cls]

    @property
    def num_dropped(self) -> int:
        return len(self.problems)


class TraceWriter:
    """Appends records (and VerifyColumns, expanded) to a JSONL trace; a Recorder or Collector
    sink. Thread-safe.

    ``fsync=True`` also forces each batch to disk (survives power loss, not only kill -9).
    """

    accepts_columns = True

    def __init__(self, path: str | os.PathLike, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w", encoding="utf-8")
        self._lock = threading.Lock()
        self._fsync = fsync
        self.num_written = 0
        self._write_text(json.dumps({"kind": HEADER_KIND, "schema_version": schema.SCHEMA_VERSION,
                                     "created_ns": time.time_ns()}) + "\n")

    def write(self, records: Sequence[Any]) -> None:  # (records, and VerifyColumns)
        from .columns import VerifyColumns
        from .intervals import BATCHES

        chunks: list[str] = []  #: text ending in a newline
        lines: list[str] = []
        n = 0
        for r in records:
            if isinstance(r, BATCHES):  # straight from columns, no object per row
                if lines:
                    chunks.append("\n".join(lines) + "\n")
                    lines = []
                chunks.append(r.json_text())
                n += len(r)
                continue
            if isinstance(r, VerifyColumns):
                recs = r.to_records()
                lines.extend(json.dumps(codec.to_dict(x), separators=(",", ":")) for x in recs)
                n += len(recs)
            else:
                lines.append(json.dumps(codec.to_dict(r), separators=(",", ":")))
                n += 1
        if lines:
            chunks.append("\n".join(lines) + "\n")
        self._write_text("".join(chunks))
        self.num_written += n

    def _write_text(self, text: str) -> None:
        """Whole lines (each ending in a newline), written and flushed at once."""
        if not text:
            return
        with self._lock:
            self._f.write(text)
            self._f.flush()
            if self._fsync:
                os.fsync(self._f.fileno())

    def flush(self) -> None:
        with self._lock:
            self._f.flush()

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def is_parquet_path(path: str | os.PathLike) -> bool:
    """Whether a trace at ``path`` is (or is to be) Parquet: a ``.parquet`` name or a directory."""
    if "://" in os.fspath(path):  # a filesystem URI: a store
        return True
    p = Path(path)
    return p.suffix == ".parquet" or p.is_dir()


def open_writer(path: str | os.PathLike, **options: Any) -> Any:
    """A streaming trace writer whose format follows the name: a rolling Parquet directory for
    ``.parquet`` (or an existing directory), crash-safe JSONL otherwise. ``options`` go to the
    Parquet writer (``roll_records``, ``roll_s``)."""
    if is_parquet_path(path):
        from .parquet import ParquetTraceWriter

        return ParquetTraceWriter(path, **options)
    return TraceWriter(path)  # JSONL is flushed per batch already: nothing to roll


def write_trace(path: str | os.PathLike, records: Iterable[schema.Record]) -> str | Path:
    """Write records to a new trace in one go: Parquet for ``.parquet``, JSONL otherwise."""
    if is_parquet_path(path):
        from .parquet import write_parquet

        return write_parquet(records, path)
    with TraceWriter(path) as w:
        w.write(list(records))
    return Path(path)


def _check_version(data: dict, where: str) -> None:
    version = data.get("schema_version")
    if version not in schema.READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in schema.READABLE_VERSIONS)
        raise TraceError(f"{where}: trace schema version {version!r} is not readable; this "
                         f"specscope reads schema version(s) {readable}")


def iter_jsonl(path: str | os.PathLike, problems: list[Problem] | None = None,
               trace: Trace | None = None) -> Iterator[Any]:
    """Stream records from a JSONL trace line by line (bounded memory), skipping and reporting
    lines that do not parse; an unfinished last line (a killed writer) is counted apart."""
    name = str(path)
    problems = problems if problems is not None else []
    header_seen = False
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            is_tail = not raw.endswith(b"\n")
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                if is_tail:
                    problems.append(Problem(name, lineno, "truncated last line (writer stopped "
                                                          "mid-write); record dropped"))
                    if trace is not None:
                        trace.truncated_tail += 1
                else:
                    problems.append(Problem(name, lineno, f"not JSON: {exc}"))
                continue
            if not header_seen:
                if not isinstance(obj, dict) or obj.get("kind") != HEADER_KIND:
                    raise TraceError(f"{name}:{lineno}: not a specscope trace (no header line)")
                _check_version(obj, f"{name}:{lineno}")
                header_seen = True
                continue
            if isinstance(obj, dict) and obj.get("kind") == HEADER_KIND:
                _check_version(obj, f"{name}:{lineno}")  # concatenated traces
                continue
            try:
                yield codec.from_dict(obj)
            except codec.SchemaError as exc:
                problems.append(Problem(name, lineno, str(exc)))
    if not header_seen:
        raise TraceError(f"{name}: empty file, not a specscope trace")


def split_selection(path: str | os.PathLike) -> tuple[str, Any]:
    """``store#node=n3,since=2026-12-01`` -> (``store``, its Where); a plain path -> (path, None)."""
    from .store import Where

    text = os.fspath(path)
    if "#" not in text or os.path.exists(text):
        return text, None
    base, _, sel = text.rpartition("#")
    return base, Where.parse(sel)


def read_trace(paths: str | os.PathLike | Sequence[str | os.PathLike], where: Any = None) -> Trace:
    """Read JSONL traces and/or Parquet trace directories into one Trace.

    ``where`` (an ``io.store.Where``), or a selection after ``#`` in a path
    (``store#node=n3,since=2026-12-01``), keeps the records of the dates, configurations,
    runs and nodes it names: a Parquet store reads only those partitions."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    trace = Trace()
    for p in paths:
        text, sel = split_selection(p)
        sel = where.merge(sel) if where and sel else (sel or where)
        p = Path(text)
        if "://" in text or sniff(p) == "parquet":
            from .parquet import read_parquet
            trace.records.extend(read_parquet(text, sel or None))
        elif sel:
            records = list(iter_jsonl(p, trace.problems, trace))
            runs = {r.run_id: r for r in records if isinstance(r, schema.RunRecord)}
            trace.records.extend(r for r in records if sel.admits_record(r, runs))
        else:
            trace.records.extend(iter_jsonl(p, trace.problems, trace))
    return trace


def compact(paths: str | os.PathLike | Sequence[str | os.PathLike],
            out_dir: str | os.PathLike, where: Any = None) -> str | Path:
    """Compact traces (JSONL or Parquet; ``where`` selects) into a Parquet store."""
    from .parquet import write_parquet

    return write_parquet(read_trace(paths, where).records, out_dir)


def sniff(path: Path) -> str:
    """"parquet" or "jsonl" by content; a name that says otherwise is a TraceError naming it."""
    path = Path(path)
    if path.is_dir():
        return "parquet"
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    kind = "parquet" if head == b"PAR1" else "jsonl"
    if path.suffix == ".parquet" and kind != "parquet":
        raise TraceError(f"{path}: named .parquet but it is not a Parquet file (it starts like "
                         "text; a JSONL trace?): rename it to .jsonl to read it")
    if path.suffix in (".jsonl", ".json") and kind == "parquet":
        raise TraceError(f"{path}: named {path.suffix} but it is a Parquet file: rename it to "
                         ".parquet to read it")
    return kind


def dumps_records(records: Iterable[schema.Record]) -> str:
    """Records as JSONL text with a header, for tests and pipes."""
    buf = io.StringIO()
    buf.write(json.dumps({"kind": HEADER_KIND, "schema_version": schema.SCHEMA_VERSION}) + "\n")
    for r in records:
        buf.write(json.dumps(codec.to_dict(r)) + "\n")
    return buf.getvalue()

