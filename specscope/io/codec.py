"""Records to plain dicts and back: the JSON form every trace, the wire and the store share.

Stdlib only, as ``schema``. A record's dict carries its ``kind`` (``schema.RECORD_TYPES``);
``from_dict`` reads the names of every readable schema version (``RENAMED``) and refuses what
does not fit with a ``SchemaError``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..schema import KIND_OF, RECORD_TYPES, VerifyEntry

_COUNTS_RENAMED = {"draft_tokens": "num_draft_tokens", "accepted_tokens": "num_accepted"}
#: fields schema 8 renamed, old name -> new, by record kind: a record of an older trace reads
#: under the new names (no old name is a field of schema 8, so no version needs consulting)
RENAMED: dict[str, dict[str, str]] = {
    "run": {"num_draft_tokens": "num_verify_tokens"},
    "request": {"num_accepted_tokens": "num_accepted"},
    "spec_counts": _COUNTS_RENAMED,
    "engine_counts": _COUNTS_RENAMED,
}


class SchemaError(ValueError):
    """A record that does not fit the schema."""


#: a record field named like the record tag (AnomalyRecord.kind) travels under this name
FIELD_KIND = "anomaly_kind"


def to_dict(record: Any) -> dict[str, Any]:
    """A record as a JSON-ready dict with its ``kind`` (the record's own ``kind`` field, an
    anomaly's, as ``anomaly_kind``)."""
    fields = _fields(record)
    if "kind" in fields:
        fields[FIELD_KIND] = fields.pop("kind")
    return {"kind": KIND_OF[type(record)], **fields}


_NAMES: dict[type, tuple[str, ...]] = {}
_PLAIN = (int, float, str, bool, type(None))


def _fields(record: Any) -> dict[str, Any]:
    cls = type(record)
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(record))
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(record, name)
        if type(value) in _PLAIN:  # most fields: no conversion (exact types, cheap test)
            pass
        elif isinstance(value, tuple):
            value = [_fields(v) for v in value] if value and dataclasses.is_dataclass(value[0]) else list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[name] = value
    return out


def from_dict(data: Mapping[str, Any]) -> Any:
    """Rebuild a record from ``to_dict`` output; raises SchemaError on a mismatch."""
    if not isinstance(data, Mapping):
        raise SchemaError(f"expected an object, got {type(data).__name__}")
    kind = data.get("kind")
    cls = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise SchemaError(f"unknown record kind {kind!r}; known: {', '.join(RECORD_TYPES)}")
    kwargs: dict[str, Any] = {}
    renamed = RENAMED.get(KIND_OF[cls], {})
    if renamed.keys() & data.keys():
        data = {renamed.get(k, k): v for k, v in data.items()}
    if FIELD_KIND in data:
        data = {k: v for k, v in data.items() if k not in ("kind", FIELD_KIND)} | \
            {"kind": kind, "_field_kind": data[FIELD_KIND]}
    for f in dataclasses.fields(cls):
        name = "_field_kind" if f.name == "kind" else f.name
        if name not in data:
            continue
        value = data[name]
        if f.name == "entries":
            value = tuple(_entry(v) for v in value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    unknown = set(data) - {f.name for f in dataclasses.fields(cls)} - {"kind", "_field_kind"}
    if unknown:
        raise SchemaError(f"{kind} record has unknown fields: {', '.join(sorted(unknown))}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise SchemaError(f"{kind} record: {exc}") from None


def _entry(data: Mapping[str, Any]) -> VerifyEntry:
    if not isinstance(data, Mapping):
        raise SchemaError("verify entry must be an object")
    names = {f.name for f in dataclasses.fields(VerifyEntry)}
    unknown = set(data) - names
    if unknown:
        raise SchemaError(f"verify entry has unknown fields: {', '.join(sorted(unknown))}")
    kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    try:
        return VerifyEntry(**kwargs)
    except TypeError as exc:
        raise SchemaError(f"verify entry: {exc}") from None
