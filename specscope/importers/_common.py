"""Shared pieces of the importers: results, problems, run records. Never imports torch."""

from __future__ import annotations

import datetime as _dt
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import schema
from ..io.intervals import BATCHES
from ..schema import Problem


@dataclass
class Tally:
    """How often one identity held in a source, and its worst miss."""

    name: str  #: the identity, as a person writes it ("histogram sum = verify steps")
    held: int = 0
    failed: int = 0
    worst: float = 0.0  #: largest |left - right| seen where it failed
    first_failures: list[str] = field(default_factory=list)  #: "file:line: left vs right"

    @property
    def checked(self) -> int:
        return self.held + self.failed

    def observe(self, left: float, right: float, tol: float, file: str, line: int) -> None:
        """One instance of ``left == right`` within ``tol`` (the parsers' hot path)."""
        miss = abs(left - right)
        if miss <= tol + 1e-9:
            self.held += 1
            return
        self.failed += 1
        self.worst = max(self.worst, miss)
        if len(self.first_failures) < 5:
            self.first_failures.append(f"{file}:{line}: {left:g} vs {right:g}")


@dataclass
class ImportResult:
    """What one file gave: its records, the lines that were skipped and why.

    With ``emit`` set, records stream out in batches instead of piling up in ``records`` (large
    logs import in bounded memory); ``counts`` says how many of each kind went either way.
    """

    format: str
    records: list[schema.Record] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    lines_read: int = 0
    emit: Any = None  #: Callable[[list], None] | None
    counts: dict[str, int] = field(default_factory=dict)
    batch: int = 8192
    #: identities the source's own figures must satisfy, tallied as they are read
    identities: dict[str, Tally] = field(default_factory=dict)
    #: definitional traps that apply to this source: short id -> one-line explanation
    traps: dict[str, str] = field(default_factory=dict)
    _pending: int = 0  #: rows added since the last flush

    def identity(self, name: str, left: float | None, right: float | None, *, line: int = 0,
                 file: str = "", tol: float = 0.0) -> None:
        """Tally one instance of ``left == right`` (within ``tol``, absolute); unknowns skip."""
        if left is None or right is None:
            return
        self.tally(name).observe(left, right, tol, file, line)

    def tally(self, name: str) -> Tally:
        """The tally of one identity (made on first use; one that never runs is not listed)."""
        t = self.identities.get(name)
        if t is None:
            t = self.identities[name] = Tally(name)
        return t

    def trap(self, key: str, text: str) -> None:
        self.traps.setdefault(key, text)

    def add(self, record: Any) -> None:
        """One record, or a CountsColumns / SampleColumns batch of them (counted as its rows)."""
        batch = isinstance(record, BATCHES)
        n = len(record) if batch else 1
        kind = (record.record_type if batch else type(record)).__name__
        self.counts[kind] = self.counts.get(kind, 0) + n
        self.records.append(record)
        self._pending += n
        if self.emit is not None and self._pending >= self.batch:
            self.flush()

    def extend(self, records: Any) -> None:
        for r in records:
            self.add(r)

    def flush(self) -> None:
        if self.emit is not None and self.records:
            self.emit(self.records)
            self.records = []
            self._pending = 0


def run_record(run_id: str, engine: str, fmt: str, path: str | os.PathLike, *,
               num_steps: int = 0, algorithm: str = "unknown", model: str = "",
               backend: str = "", topk: int = 0, engine_version: str = "",
               labels: dict[str, str] | None = None) -> schema.RunRecord:
    return schema.RunRecord(
        run_id=run_id, config_id=f"{engine}-{algorithm}-s{num_steps}", algorithm=algorithm,
        num_steps=num_steps, topk=topk, num_verify_tokens=num_steps + 1 if num_steps else 0,
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


def steps_from_mean(accepted: int, mean_len: float | None, decimals: int = 2) -> int | None:
    """The one whole number of steps n with 1 + accepted / n printing as ``mean_len``.

    Engines print the mean acceptance length rounded; when exactly one integer fits the
    rounding interval the step count is exact, otherwise it is not known (None).
    """
    if mean_len is None or accepted <= 0:
        return None
    half = 0.5 * 10 ** -decimals
    lo_len, hi_len = mean_len - half - 1, mean_len + half - 1
    if hi_len <= 0:
        return None
    lo = math.ceil(accepted / hi_len - 1e-9)
    hi = math.floor(accepted / lo_len + 1e-9) if lo_len > 0 else lo + 2
    return lo if lo == hi and lo > 0 else None


def fixed_number(decimals: int) -> str:
    """A regex group for a figure printed with exactly ``decimals`` places (or ``nan``), short
    enough (15 digits) that ``fixed`` reads it exactly; no sign (a -0.0 would read as 0.0)."""
    if decimals:
        return rf"(\d{{1,{15 - decimals}}}\.\d{{{decimals}}}|nan)"
    return r"(\d{1,15}|nan)"


def fixed(texts: Sequence[str], decimals: int) -> np.ndarray:
    """Figures matched by ``fixed_number(decimals)`` as the floats ``float()`` reads (nan as
    NaN): without a nan, the whole number over the power of ten, both exact in a double, divided
    with one correct rounding, which is the correctly rounded decimal ``float()`` gives."""
    joined = ",".join(texts)
    if "n" in joined:
        return np.fromstring(joined, sep=",")
    return np.fromstring(joined.replace(".", ""), np.int64, sep=",") / 10 ** decimals


def blocks(path: str | os.PathLike, res: ImportResult, size: int = 1 << 22):
    """(number of its first line, text) of a file in blocks of whole lines; every line counted."""
    base = 1
    carry = ""
    with open(path, encoding="utf-8", errors="replace") as f:
        while True:
            chunk = f.read(size)
            text = carry + chunk
            if not chunk:
                if text:  # a last line without a newline
                    res.lines_read += 1
                    yield base, text
                return
            cut = text.rfind("\n") + 1
            if cut == 0:
                carry = text
                continue
            carry = text[cut:]
            text = text[:cut]
            yield base, text
            n = text.count("\n")
            res.lines_read += n
            base += n


def line_hits(text: str, markers: tuple[str, ...]) -> list[tuple[int, str]]:
    """(offset, line) of every line of ``text`` holding one of ``markers``, in order.

    ``str.find`` per marker over the whole block (C speed): no regex and no Python work runs
    on the other lines, so a log of mostly access lines reads at close to disk speed.
    """
    starts = set()
    for marker in markers:
        i = text.find(marker)
        while i >= 0:
            starts.add(text.rfind("\n", 0, i) + 1)
            end = text.find("\n", i)
            i = text.find(marker, end) if end >= 0 else -1
    out = []
    for start in sorted(starts):
        end = text.find("\n", start)
        out.append((start, text[start:end if end >= 0 else len(text)]))
    return out


def marked_lines(path: str | os.PathLike, markers: tuple[str, ...], res: ImportResult,
                 whole_block=None):
    """(line number, line) of every line holding one of ``markers``, every line counted.

    ``whole_block(text, first_line_number)``, when given, may take a block itself (returning
    True), and its lines are then not yielded.
    """
    for base, text in blocks(path, res):
        if whole_block is not None and whole_block(text, base):
            continue
        counted, lineno = 0, base
        for start, line in line_hits(text, markers):
            lineno += text.count("\n", counted, start)
            counted = start
            yield lineno, line
