"""Field-driven merge for the collector's aggregates: each dataclass field declares how two
values of it combine (``by(rule)``), and ``merged`` applies every field's rule. A field without
a rule cannot be merged: ``merged`` raises rather than drop it. Never imports torch or dash.
"""

from __future__ import annotations

import functools
from dataclasses import field, fields
from typing import Any, Callable

RULE = "merge"  #: metadata key: the field's rule, rule(a's value, b's value) -> value
WHOLE = "merge_whole"  #: metadata key: the rule reads both aggregates, rule(a, b) -> value


def by(rule: Callable[[Any, Any], Any], **kwargs: Any) -> Any:
    """A dataclass field merged by ``rule`` (``field``'s other arguments as given)."""
    return field(metadata={RULE: rule}, **kwargs)


def by_whole(rule: Callable[[Any, Any], Any], **kwargs: Any) -> Any:
    """A dataclass field whose merged value reads both aggregates (a run of steps in time
    order: b follows a)."""
    return field(metadata={RULE: rule, WHOLE: True}, **kwargs)


def total(a: Any, b: Any) -> Any:
    """Counts and sums (numbers, Counters); ``joined`` for samples."""
    return a + b


def joined(a: Any, b: Any) -> Any:
    """Samples and records, a's then b's (lists, tuples)."""
    return a + b


def per_position(a: list, b: list) -> list:
    """Element-wise sums of two vectors of different lengths (per-position counts)."""
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


def earliest(a: Any, b: Any) -> Any:
    """The smaller, None where unknown."""
    return b if a is None else a if b is None else min(a, b)


def latest(a: Any, b: Any) -> Any:
    """The larger, None where unknown."""
    return b if a is None else a if b is None else max(a, b)


def every(a: bool, b: bool) -> bool:
    return a and b


def keyed(rule: Callable[[Any, Any], Any], fresh: Callable[[Any], Any] | None = None
          ) -> Callable[[dict, dict], dict]:
    """Dicts merged key by key, ``rule`` where both hold a key; a value only one side holds
    is taken as it is, or as ``fresh(value)`` (``list``: a copy the merged aggregate may
    extend without touching either side's)."""
    def merge_dicts(a: dict, b: dict) -> dict:
        out = dict(a) if fresh is None else {k: fresh(v) for k, v in a.items()}
        for k, v in b.items():
            out[k] = rule(out[k], v) if k in out else (v if fresh is None else fresh(v))
        return out
    return merge_dicts


def method(a: Any, b: Any) -> Any:
    """Values that merge themselves (``a.merge(b)``)."""
    return a.merge(b)


@functools.cache
def _rules(cls: type) -> tuple[tuple[str, Callable, bool], ...]:
    out = []
    for f in fields(cls):
        if RULE not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} declares no merge rule "
                            "(field(metadata={'merge': ...}), see collector/_merge.py)")
        out.append((f.name, f.metadata[RULE], bool(f.metadata.get(WHOLE))))
    return tuple(out)


def merged(a: Any, b: Any) -> Any:
    """A new aggregate of ``a``'s type holding both, every field by its declared rule."""
    cls: type = type(a)
    return cls(**{name: rule(a, b) if whole else rule(getattr(a, name), getattr(b, name))
                  for name, rule, whole in _rules(cls)})
