"""Prometheus text exposition (format 0.0.4, and the OpenMetrics lines engines emit): the one
parser every part of specscope uses. Stdlib only.

Label values may hold ``}``, ``,``, ``"`` and the escapes ``\\\\``, ``\\"`` and ``\\n``;
values may be ``NaN``, ``+Inf``/``-Inf`` or carry exponents; a sample may end in a timestamp
(milliseconds). ``*_created`` series are reported like any other sample: they are timestamps,
and what they mean is the caller's mapping to decide. A label set seen before is parsed once
(pages repeat the same label sets on every scrape), so a page costs about a microsecond a line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping, NamedTuple

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNESCAPE = re.compile(r'\\(.)')
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}
_EMPTY: Mapping[str, str] = MappingProxyType({})
_new = tuple.__new__  # a Sample without the Python-level __new__ of a named tuple
_CACHE_MAX = 1 << 16


class ExpositionError(ValueError):
    """A line that is not a Prometheus sample, comment or blank line."""


class Sample(NamedTuple):
    """One sample line (a named tuple: cheap to make, a page has thousands)."""

    name: str
    labels: Mapping[str, str]  #: read-only; shared between samples with the same label set
    value: float
    timestamp_ms: int | None = None


@dataclass
class Exposition:
    """A parsed page: its samples, the declared family types, and the lines it skipped."""

    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  #: family -> counter, gauge, ...
    problems: list[tuple[int, str]] = field(default_factory=list)  #: (line number, why)


class Parser:
    """Parses lines; keeps a bounded cache of the label sets it has seen."""

    def __init__(self) -> None:
        self._labels: dict[str, Mapping[str, str]] = {}
        self._names: set[str] = set()
        self._heads: dict[str, tuple[str, Mapping[str, str]]] = {}

    def labels(self, block: str | None) -> Mapping[str, str]:
        if not block:
            return _EMPTY
        got = self._labels.get(block)
        if got is None:
            got = MappingProxyType(_parse_labels(block))
            if len(self._labels) >= _CACHE_MAX:
                self._labels.clear()
            self._labels[block] = got
        return got

    def line(self, line: str) -> Sample | None:
        """One line as a Sample; None for a comment or blank line; ExpositionError otherwise."""
        if not line or line[0] == "#":
            return None
        # values and timestamps never hold "}": the last one closes the label set, however many
        # a quoted label value holds
        close = line.rfind("}")
        if close >= 0:
            head, rest = line[:close + 1], line[close + 1:]
            known = self._heads.get(head)
            if known is None:
                known = self._head(head, line)
            if not rest[:1].isspace():
                raise ExpositionError(f"not a Prometheus sample line: {line[:80]!r}")
            name, labels = known
        else:
            bits = line.split(None, 1)
            if not bits:
                return None
            name, rest, labels = bits[0], bits[1] if len(bits) > 1 else "", _EMPTY
            if name not in self._names:
                self._check_name(name, line)
        parts = rest.split()
        if not parts or len(parts) > 2:
            raise ExpositionError(f"not a Prometheus sample line: {line[:80]!r}")
        try:
            v = float(parts[0])
            ts = int(float(parts[1])) if len(parts) == 2 else None
        except ValueError:
            raise ExpositionError(f"bad value in {line[:80]!r}") from None
        return _new(Sample, (name, labels, v, ts))

    def _head(self, head: str, line: str) -> tuple[str, Mapping[str, str]]:
        """Name and labels of ``name{...}``, parsed once per distinct head."""
        brace = head.find("{")
        if brace < 0:
            raise ExpositionError(f"not a Prometheus sample line: {line[:80]!r}")
        name = head[:brace].rstrip()
        self._check_name(name, line)
        known = (name, self.labels(head[brace + 1:-1]))
        if len(self._heads) >= _CACHE_MAX:
            self._heads.clear()
        self._heads[head] = known
        return known

    def _check_name(self, name: str, line: str) -> None:
        if not _NAME.fullmatch(name):
            raise ExpositionError(f"not a Prometheus sample line: {line[:80]!r}")
        if len(self._names) >= _CACHE_MAX:
            self._names.clear()
        self._names.add(name)

    def parse(self, text: str) -> Exposition:
        out = Exposition()
        self.feed(text.split("\n"), out)  # lines end in \n alone: a \r may sit in a value
        return out

    def feed(self, lines: Iterable[str], out: Exposition, first_line: int = 1) -> Exposition:
        samples, types, problems = out.samples, out.types, out.problems
        line_of = self.line
        for lineno, line in enumerate(lines, start=first_line):
            if line[:1] == "#":
                if line.startswith("# TYPE "):
                    parts = line.split()
                    if len(parts) >= 4:
                        types[parts[2]] = parts[3]
                continue
            try:
                s = line_of(line)
            except ExpositionError as exc:
                problems.append((lineno, str(exc)))
                continue
            if s is not None:
                samples.append(s)
        return out


def _parse_labels(block: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos, end = 0, len(block)
    while pos < end:
        if not block[pos:].strip():
            break
        m = _PAIR.match(block, pos)
        if m is None:
            raise ExpositionError(f"bad label set {{{block[:80]}}}")
        value = m.group(2)
        if "\\" in value:
            value = _UNESCAPE.sub(lambda e: _ESCAPES.get(e.group(1), "\\" + e.group(1)), value)
        out[m.group(1)] = value
        pos = m.end()
    return out


_DEFAULT = Parser()


def parse(text: str, parser: Parser | None = None) -> Exposition:
    """Parse a whole page (a scrape, a file)."""
    return (parser or _DEFAULT).parse(text)


def parse_families(text: str, families: Iterable[str]) -> Exposition:
    """Parse only the lines of ``families`` (exact names) in a page, in page order: the
    families' common prefixes are found with ``str.find`` and only the lines they start are
    read, so a 2,000-line page whose few lines matter costs little more than reading it."""
    wanted = set(families)
    groups: dict[str, list[str]] = {}
    for n in wanted:
        groups.setdefault(n[:6], []).append(n)
    found: list[tuple[int, str]] = []
    for names in groups.values():
        prefix = os.path.commonprefix(names)
        i = text.find(prefix)
        while i >= 0:
            if i == 0 or text[i - 1] == "\n":
                nl = text.find("\n", i)
                line = text[i:] if nl < 0 else text[i:nl]
                m = _NAME.match(line)
                if m is not None and m.group(0) in wanted:
                    found.append((i, line))
            i = text.find(prefix, i + len(prefix))
    found.sort()
    out = Exposition()
    _DEFAULT.feed((line for _, line in found), out)
    return out


_NAME = re.compile(r"[^{ \t]+")


def parse_line(line: str, parser: Parser | None = None) -> Sample | None:
    """Parse one line: a Sample, None for comments and blanks, ExpositionError otherwise."""
    return (parser or _DEFAULT).line(line)
