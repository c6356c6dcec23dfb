"""Record I/O: trace files (JSONL, Parquet) and the wire between processes.

Sits directly above ``schema``: hooks, importers and the collector all use it, and it imports
none of them. Importing this package loads only the stdlib JSONL layer; Parquet (pyarrow),
the columnar form (numpy) and the wire (numpy, pyzmq) load when used.
"""

from .trace import (Trace, TraceWriter, dumps_records, is_parquet_path, iter_jsonl, open_writer,
                    read_trace, sniff, write_trace)

__all__ = ["Trace", "TraceWriter", "dumps_records", "is_parquet_path", "iter_jsonl",
           "open_writer", "read_trace", "sniff", "write_trace"]
