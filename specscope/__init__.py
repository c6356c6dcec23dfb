"""specscope: observability and profiling for speculative decoding (EAGLE / MTP draft-then-verify).

The public API, re-exported lazily so that ``import specscope`` stays light: the hooks pull in
torch only when used, the collector and exporters never do.
"""

from __future__ import annotations

from typing import Any

from .schema import SCHEMA_VERSION

__version__ = "0.1.0"

_LAZY = {
    "Recorder": ("specscope.hooks", "Recorder"),
    "forbid_sync": ("specscope.hooks", "forbid_sync"),
    "every_n": ("specscope.hooks", "every_n"),
    "TraceWriter": ("specscope.io.trace", "TraceWriter"),
    "read_trace": ("specscope.io.trace", "read_trace"),
    "build_report": ("specscope.collector.report", "build_report"),
    "SpecStats": ("specscope.collector.stats", "SpecStats"),
    "open": ("specscope.notebook", "open"),
}

__all__ = ["SCHEMA_VERSION", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'specscope' has no attribute {name!r}")
