"""Shared pieces of the importers: results, problems, run records. Never imports torch."""

from __future__ import annotations

import datetime as _dt
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import schema
from ..schema import Problem


@dataclass
class ImportResult:
    """What one file gave: its records, the lines that were skipped and why.

    With ``emit`` set, records stream out in batches instead of piling up in ``records`` (large
    logs import in bounded memory); ``counts`` says how many of each kind went either way.
    """

    format: str
    records: list[Any] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    lines_read: int = 0
    emit: Any = None  #: Callable[[list], None] | None
    counts: dict[str, int] = field(default_factory=dict)
    batch: int = 8192

    def add(self, record: Any) -> None:
        kind = type(record).__name__
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.records.append(record)
        if self.emit is not None and len(self.records) >= self.batch:
            self.flush()

    def extend(self, records: Any) -> None:
        for r in records:
            self.add(r)

    def flush(self) -> None:
        if self.emit is not None and self.records:
            self.emit(self.records)
            self.records = []


def run_record(run_id: str, engine: str, fmt: str, path: str | os.PathLike, *,
               num_steps: int = 0, algorithm: str = "unknown", model: str = "",
               backend: str = "", topk: int = 0, engine_version: str = "",
               labels: dict[str, str] | None = None) -> schema.RunRecord:
    return schema.RunRecord(
        run_id=run_id, config_id=f"{engine}-{algorithm}-s{num_steps}", algorithm=algorithm,
        num_steps=num_steps, topk=topk, num_draft_tokens=num_steps + 1 if num_steps else 0,
        backend=backend, model=model, engine=engine, engine_version=engine_version,
        labels={"source_format": fmt, "source_file": Path(path).name, **(labels or {})})


def load_json(path: str | os.PathLike, res: ImportResult) -> Any:
    """A whole-file JSON source (one object), counted as one line read."""
    import json

    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    res.lines_read = 1
    return data


def file_year(path: str | os.PathLike) -> int:
    """Logs that print month-day times without a year get the file's modification year."""
    try:
        return _dt.datetime.fromtimestamp(os.path.getmtime(path), _dt.timezone.utc).year
    except OSError:
        return 1970


def to_ns(stamp: _dt.datetime) -> int:
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=_dt.timezone.utc)
    return int(stamp.timestamp() * 1e9)


def num(text: str | None) -> float | None:
    """A float from the source, None for missing or nan (never invented)."""
    if text is None:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None
