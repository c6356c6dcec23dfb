"""A fleet's traces: per-configuration and per-node aggregates over a store (``io.store``),
on DuckDB (embedded, the default) or Spark (a cluster), from one SQL text."""

from __future__ import annotations

from ..io.store import Where
from .query import GROUPS, FleetFigures, figures, format_figures, histogram_sql

ENGINES = ("duckdb", "spark")


def fleet_figures(uri, by=("config", "node"), where: Where = Where(), *, engine: str = "duckdb",
                  master: str = "local[2]", spark=None) -> list[FleetFigures]:
    """Per-group figures of a store on ``engine`` (duckdb or spark)."""
    if engine == "duckdb":
        from . import duck

        return duck.fleet_figures(uri, by, where)
    if engine == "spark":
        from . import spark as sp

        return sp.fleet_figures(uri, by, where, spark=spark, master=master)
    raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")


__all__ = ["ENGINES", "GROUPS", "FleetFigures", "Where", "figures", "fleet_figures", "format_figures",
           "histogram_sql"]
