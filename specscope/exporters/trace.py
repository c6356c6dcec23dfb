"""Trace files: a crash-safe JSONL stream, compaction to Parquet, and one reader for both.

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

HEADER_KIND = "header"


class TraceError(ValueError):
    """A trace that cannot be read at all (wrong version, not a trace)."""


@dataclass
class Problem:
    """A line or record that was skipped, with where it was."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass
class Trace:
    """Records read from one or more trace files, and what could not be read."""

    records: list[Any] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    truncated_tail: int = 0  #: records lost to an unfinished last line (a killed writer)

    def of(self, cls: type) -> list[Any]:
        return [r for r in self.records if type(r) is cls]

    @property
    def num_dropped(self) -> int:
        return len(self.problems)


class TraceWriter:
    """Appends records to a JSONL trace; a Sink for the Recorder. Thread-safe.

    ``fsync=True`` also forces each batch to disk (survives power loss, not only kill -9).
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w", encoding="utf-8")
        self._lock = threading.Lock()
        self._fsync = fsync
        self.num_written = 0
        self._write_lines([json.dumps({"kind": HEADER_KIND, "schema_version": schema.SCHEMA_VERSION,
                                       "created_ns": time.time_ns()})])

    def write(self, records: Sequence[Any]) -> None:
        lines = [json.dumps(schema.to_dict(r), separators=(",", ":")) for r in records]
        self._write_lines(lines)
        self.num_written += len(lines)

    def _write_lines(self, lines: list[str]) -> None:
        if not lines:
            return
        with self._lock:
            self._f.write("\n".join(lines) + "\n")
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


def write_trace(path: str | os.PathLike, records: Iterable[Any]) -> Path:
    """Write records to a new JSONL trace in one go."""
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
                yield schema.from_dict(obj)
            except schema.SchemaError as exc:
                problems.append(Problem(name, lineno, str(exc)))
    if not header_seen:
        raise TraceError(f"{name}: empty file, not a specscope trace")


def read_trace(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> Trace:
    """Read JSONL traces and/or Parquet trace directories into one Trace."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    trace = Trace()
    for p in paths:
        p = Path(p)
        if p.is_dir() or p.suffix == ".parquet":
            from ._parquet import read_parquet
            trace.records.extend(read_parquet(p))
        else:
            trace.records.extend(iter_jsonl(p, trace.problems, trace))
    return trace


def dumps_records(records: Iterable[Any]) -> str:
    """Records as JSONL text with a header, for tests and pipes."""
    buf = io.StringIO()
    buf.write(json.dumps({"kind": HEADER_KIND, "schema_version": schema.SCHEMA_VERSION}) + "\n")
    for r in records:
        buf.write(json.dumps(schema.to_dict(r)) + "\n")
    return buf.getvalue()

