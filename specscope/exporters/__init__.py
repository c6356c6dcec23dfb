"""Exporters: trace files (JSONL stream, Parquet). Imports pyarrow only when Parquet is used."""

from .trace import Problem, Trace, TraceError, TraceWriter, read_trace, write_trace

__all__ = ["Problem", "Trace", "TraceError", "TraceWriter", "read_trace", "write_trace"]
