"""The fleet query on DuckDB, embedded: SQL over the store's hive layout (``io.store``'s glob),
the filters pruning
partitions before a file is opened, two integer columns read from the rest, nothing of the
trace held in memory but the histogram it returns."""

from __future__ import annotations

import os
from typing import Any, Sequence

from ..io.store import Where, layout_glob, open_store
from .query import FleetFigures, figures, histogram_sql


def _source(uri: str, con: Any) -> str:
    """The ``read_parquet`` call over a store's verify parts (fleet layout only)."""
    store = open_store(uri)
    if store.local:
        root = store.root
    else:  # any fsspec filesystem, registered with DuckDB under its protocol
        import fsspec

        fs, root = fsspec.core.url_to_fs(uri)
        con.register_filesystem(fs)
        proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        root = f"{proto}://{root.lstrip('/')}" if proto != "file" else root
    glob = f"{root.rstrip('/')}/{layout_glob('verify')}"  # DuckDB decodes the %XX in node
    return (f"read_parquet('{glob}', hive_partitioning = true, hive_types_autocast = false, "
            "union_by_name = true)")


def histogram(uri: str | os.PathLike, by: Sequence[str], where: Where = Where(), *,
              threads: int | None = None, sql: str | None = None) -> list[tuple]:
    """The histogram rows ``(*group, drafted, accepted, n)`` of a store, on DuckDB (``sql``:
    another query over the same ``verify`` view, as ``aging.py``'s)."""
    import duckdb

    con = duckdb.connect()
    try:
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        try:
            con.execute(f"CREATE VIEW verify AS SELECT * FROM {_source(os.fspath(uri), con)}")
            return con.execute(sql or histogram_sql(by, where)).fetchall()
        except duckdb.IOException as exc:
            if "No files found" in str(exc):  # no verify part in the fleet layout: no rows
                return []
            raise
    finally:
        con.close()


def fleet_figures(uri: str | os.PathLike, by: Sequence[str], where: Where = Where()) -> list[FleetFigures]:
    """Per-group figures of a store, on DuckDB."""
    return figures(histogram(uri, by, where), by)
