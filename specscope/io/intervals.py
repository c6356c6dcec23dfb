"""Counter intervals and gauge samples as columns: what log importers build, a line or a block
at a time, instead of one SpecCountsRecord / SampleRecord object per line.

Two forms share each class. Row form: one Python list per field, appended line by line.
Block form (``of_arrays``): numpy arrays for a whole block read at once, where a column of
``None`` means the field is unknown on every row and a float NaN means unknown on that row
(the schema keeps unknowns null, so NaN is never a value here). ``json_text()`` writes each
row exactly as ``json.dumps(codec.to_dict(record), separators=(",", ":"))`` would, without
building the record; ``to_records()`` rebuilds the records for everything else; ``table(pa)``
gives the Parquet table the record path would give.

Imports only numpy, json and the schema.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from .. import schema

_FLOAT = ("interval_s", "reported_mean_acceptance_length", "reported_acceptance_rate",
          "reported_weight")


class CountsColumns:
    """N spec-decode counter intervals of one (run, source) as columns."""

    FIELDS = ("rank", "t_ns", "interval_s", "num_drafts", "num_draft_tokens", "num_accepted",
              "accepted_per_pos", "reported_mean_acceptance_length", "reported_acceptance_rate",
              "reported_weight", "drafted_per_pos")
    PER_POS = ("accepted_per_pos", "drafted_per_pos")
    record_type = schema.SpecCountsRecord

    __slots__ = ("run_id", "source", "cols", "dense", "texts")

    def __init__(self, run_id: str, source: str) -> None:
        self.run_id = run_id
        self.source = source
        self.cols: list[Any] = [[] for _ in self.FIELDS]  #: one list per field, FIELDS order
        self.dense = False
        self.texts: dict[str, Sequence[str]] = {}

    @classmethod
    def of_arrays(cls, run_id: str, source: str, texts: dict[str, Sequence[str]] | None = None,
                  **arrays: Any) -> "CountsColumns":
        """A block as arrays, by field name: ints int64 (no unknowns), floats float64 (NaN =
        unknown), ``accepted_per_pos`` and ``drafted_per_pos`` (n, k) int64 arrays; a field left out is unknown on
        every row. ``rank`` and ``t_ns`` are required. ``texts`` may give a field's values as
        the JSON text its array's values write (integers read from a source without leading
        zeros are): the JSON lines then reuse it."""
        c = cls(run_id, source)
        c.dense = True
        c.texts = texts or {}
        c.cols = [arrays.get(f) for f in cls.FIELDS]
        n = len(c.cols[0])
        for name, col in zip(cls.FIELDS, c.cols):
            if col is not None and len(col) != n:
                raise ValueError(f"column {name} has {len(col)} rows, not {n}")
        return c

    def append(self, *row: Any) -> None:
        """One interval, its values in FIELDS order (row form)."""
        for col, v in zip(self.cols, row):
            col.append(v)

    def extend(self, *columns: list) -> None:
        """Many intervals, one equally long list per field in FIELDS order (row form)."""
        for col, values in zip(self.cols, columns):
            col.extend(values)

    def __len__(self) -> int:
        return len(self.cols[0])

    def _lists(self) -> list[list]:
        """The columns as lists of Python values (None for unknown)."""
        if not self.dense:
            return self.cols
        n = len(self)
        out = []
        for name, col in zip(self.FIELDS, self.cols):
            if col is None:
                out.append([() if name in self.PER_POS else None] * n)
            elif name in _FLOAT:
                out.append(_nan_none(col))
            else:
                out.append(col.tolist())
        return out

    def to_records(self) -> list[schema.SpecCountsRecord]:
        rid, src, names = self.run_id, self.source, self.FIELDS
        out = []
        for row in zip(*self._lists()):
            r = dict(zip(names, row))
            for name in self.PER_POS:  # columns may hold lists
                r[name] = tuple(r[name])
            out.append(schema.SpecCountsRecord(run_id=rid, source=src, **r))
        return out

    def json_text(self) -> str:
        """Every row as a JSON line, each ending in a newline."""
        head = '{"kind":"spec_counts","run_id":' + json.dumps(self.run_id) + ',"rank":'
        tail = ',"source":' + json.dumps(self.source) + "}\n"
        if not self.dense:
            return "".join(self._row_lines(head, tail))
        parts: list = [head]
        for name, col in zip(self.FIELDS, self.cols):
            if name != "rank":
                parts.append(f',"{name}":')
            if name in self.PER_POS:
                k = 0 if col is None else col.shape[1]
                parts.append("[")
                for i in range(k):
                    parts += [col[:, i], ","] if i < k - 1 else [col[:, i]]
                parts.append("]")
            else:
                parts.append("null" if col is None else self.texts.get(name, col))
        parts.append(tail)
        return _join_rows(parts, len(self))

    def _row_lines(self, head: str, tail: str) -> list[str]:
        rank, t, iv, nd, dt, at, pp, al, rate, w, dp = self.cols
        pp_s, dp_s = _list_texts(pp), _list_texts(dp)
        return [f'{head}{a},"t_ns":{b},"interval_s":{c},"num_drafts":{d},"num_draft_tokens":{e},'
                f'"num_accepted":{f},"accepted_per_pos":{g},"reported_mean_acceptance_length":'
                f'{h},"reported_acceptance_rate":{i},"reported_weight":{j},"drafted_per_pos":{k}{tail}'
                for a, b, c, d, e, f, g, h, i, j, k in zip(rank, t, _j(iv), _j(nd), _j(dt), _j(at), pp_s,
                                                           _j(al), _j(rate), _j(w), dp_s)]

    def table(self, pa: Any) -> Any:
        """The spec_counts Parquet table, laid out as the record path lays out the records."""
        n = len(self)
        data: dict[str, Any] = {"run_id": pa.array([self.run_id] * n, pa.string())}
        for name, values in zip(self.FIELDS, self.cols):
            if name in self.PER_POS:
                if self.dense and values is not None:
                    k = values.shape[1]
                    data[name] = pa.ListArray.from_arrays(
                        pa.array(np.arange(0, n * k + 1, k, dtype=np.int32)),
                        pa.array(np.ascontiguousarray(values, dtype=np.int64).ravel()))
                else:
                    data[name] = pa.array([list(v) for v in (values or [()] * n)], pa.list_(pa.int64()))
                continue
            kind = pa.float64() if name in _FLOAT else pa.int64()
            if not self.dense:
                data[name] = pa.array(values, kind)
            elif values is None:
                data[name] = pa.nulls(n, kind)
            elif name in _FLOAT:
                data[name] = pa.array(values, kind, mask=np.isnan(values))
            else:
                data[name] = pa.array(values, kind)
        data["source"] = pa.array([self.source] * n, pa.string())
        return pa.table(data)


class SampleColumns:
    """N gauge samples of one (run, source) with the same gauge names, as columns (block form
    only): ``values`` is an (n, len(names)) float array, NaN where a row lacks that gauge."""

    record_type = schema.SampleRecord
    __slots__ = ("run_id", "source", "rank", "t_ns", "names", "values")

    def __init__(self, run_id: str, source: str, rank: np.ndarray, t_ns: np.ndarray,
                 names: list[str], values: np.ndarray) -> None:
        if values.shape != (len(rank), len(names)) or len(t_ns) != len(rank):
            raise ValueError(f"sample columns of {len(rank)} rows: values {values.shape}, "
                             f"{len(names)} names, {len(t_ns)} times")
        self.run_id, self.source = run_id, source
        self.rank, self.t_ns, self.names, self.values = rank, t_ns, list(names), values

    def __len__(self) -> int:
        return len(self.rank)

    def _dicts(self) -> list[dict[str, float]]:
        names, rows = self.names, self.values.tolist()
        if not np.isnan(self.values).any():
            return [dict(zip(names, row)) for row in rows]
        return [{k: v for k, v in zip(names, row) if v == v} for row in rows]

    def to_records(self) -> list[schema.SampleRecord]:
        rid, src = self.run_id, self.source
        return [schema.SampleRecord(run_id=rid, rank=r, t_ns=t, values=v, source=src)
                for r, t, v in zip(self.rank.tolist(), self.t_ns.tolist(), self._dicts())]

    def _value_literals(self, sep: str, colon: str) -> list[str] | None:
        """The text around each gauge's value in a row's values object, as ``json.dumps``
        writes it with these separators; None where rows differ (a gauge missing somewhere)."""
        if not self.names or np.isnan(self.values).any():
            return None
        keys = [json.dumps(k) + colon for k in self.names]
        return ["{" + keys[0]] + [sep + k for k in keys[1:]] + ["}"]

    def _value_texts(self, sep: str, colon: str) -> list[str]:
        """Each row's values object as ``json.dumps`` writes it with these separators."""
        literals = self._value_literals(sep, colon)
        if literals is None:
            return [json.dumps(d, separators=(sep, colon)) for d in self._dicts()]
        return _interleave(literals, [_text(self.values[:, i]) for i in range(len(self.names))],
                           len(self), rows=True)

    def json_text(self) -> str:
        """Every row as a JSON line, each ending in a newline."""
        head = '{"kind":"sample","run_id":' + json.dumps(self.run_id) + ',"rank":'
        tail = ',"source":' + json.dumps(self.source) + "}\n"
        parts: list = [head, self.rank, ',"t_ns":', self.t_ns, ',"values":']
        literals = self._value_literals(",", ":")
        if literals is None:
            parts.append(self._value_texts(",", ":"))
        else:
            for i, lit in enumerate(literals[:-1]):
                parts += [lit, self.values[:, i]]
            parts.append(literals[-1])
        parts.append(tail)
        return _join_rows(parts, len(self))

    def table(self, pa: Any) -> Any:
        n = len(self)
        return pa.table({
            "run_id": pa.array([self.run_id] * n, pa.string()),
            "rank": pa.array(self.rank, pa.int64()), "t_ns": pa.array(self.t_ns, pa.int64()),
            "values": pa.array(self._value_texts(", ", ": "), pa.string()),
            "source": pa.array([self.source] * n, pa.string())})


BATCHES = (CountsColumns, SampleColumns)


def _join_rows(parts: list, n: int) -> str:
    """n rows, each the concatenation of ``parts``: literal text (a str) and columns (an array
    of numbers, written as JSON, or a sequence of n texts). A constant array is written once,
    into the text around it."""
    literals, texts = [""], []
    for part in parts:
        if isinstance(part, str):
            literals[-1] += part
        elif isinstance(part, np.ndarray) and _constant(part):
            literals[-1] += _text(part[:1])[0]
        else:
            texts.append(_text(part) if isinstance(part, np.ndarray) else part)
            literals.append("")
    return _interleave(literals, texts, n)


def _interleave(literals: list[str], texts: list, n: int, rows: bool = False) -> Any:
    """Row i is literals[0] + texts[0][i] + literals[1] + ... + texts[-1][i] + literals[-1]:
    all n rows as one string (or, with ``rows``, a list of them: rows of JSON text, which never
    holds a raw newline), built by slice assignment and one join, at C speed, with no
    formatting call per row."""
    if len(literals) != len(texts) + 1:
        raise ValueError("one more literal than text columns")
    if rows:
        literals = literals[:-1] + [literals[-1] + "\n"]
    per = len(literals) + len(texts)
    pieces: list[str] = [""] * (n * per)
    for j, lit in enumerate(literals):
        pieces[2 * j::per] = [lit] * n
    for j, col in enumerate(texts):
        pieces[2 * j + 1::per] = col
    text = "".join(pieces)
    return text.split("\n")[:-1] if rows else text


def _constant(col: np.ndarray) -> bool:
    """Every value the same, bit for bit (so -0.0 is not 0.0; a NaN column is not constant)."""
    if col.dtype.kind == "f":
        if len(col) == 0 or np.isnan(col[0]):
            return False
        col = np.ascontiguousarray(col, dtype=np.float64).view(np.int64)
    return len(col) > 0 and col[0] == col[-1] and bool((col == col[0]).all())


def _list_texts(rows: Sequence[Any]) -> list[str]:
    """Lists or tuples of ints as ``json`` writes them, compactly."""
    return [str(x).replace(" ", "") if type(x) is list else "[" + ",".join(map(str, x)) + "]"
            for x in rows]


def _nan_none(a: np.ndarray) -> list:
    return [None if x != x else x for x in a.tolist()] if np.isnan(a).any() else a.tolist()


def _text(col: np.ndarray) -> list[str]:
    """A numeric column as JSON text: ints and floats by repr, NaN as null. A column of few
    distinct values (rounded figures, intervals to the second) is written through its distinct
    values, one repr each; a constant one (one rank, one second) as its one text."""
    n = len(col)
    if n > 64 and col.dtype.kind == "f":
        # distinct bit patterns, so -0.0 keeps its sign as ``json`` writes it
        bits, index = np.unique(np.ascontiguousarray(col, dtype=np.float64).view(np.int64),
                                return_inverse=True)
        if len(bits) * 4 < n:
            texts = ["null" if v != v else repr(v) for v in bits.view(np.float64).tolist()]
            return list(map(texts.__getitem__, index.tolist()))
    if n > 1 and _constant(col):
        return [_text(col[:1])[0]] * n
    values = col.tolist()
    if col.dtype.kind == "f" and np.isnan(col).any():
        return ["null" if v != v else repr(v) for v in values]
    return list(map(repr, values))


def _j(values: list) -> list[str]:
    """Numbers or None as ``json`` writes them (floats by repr, None as null)."""
    if None not in values:  # the common case: one C loop (repr of an int or float is its JSON)
        return list(map(repr, values))
    return ["null" if v is None else repr(v) for v in values]
