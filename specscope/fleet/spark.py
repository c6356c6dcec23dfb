"""The fleet query on Spark: the same SQL text as DuckDB's, over the same hive layout, for
stores bigger than one machine reads in time. ``master`` is any Spark master URL
(``spark://host:7077``, ``k8s://...``, ``yarn``; ``local[N]`` runs in this process's JVM).

Spark reads ``s3a://`` and ``gs://`` stores with its own Hadoop connectors (their jars and
credentials are the cluster's); the path is given as is. Needs pyspark (the ``cluster`` extra)
and Java 17 or newer.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from ..io.store import Where, layout_glob
from .query import FleetFigures, figures, histogram_sql


def session(master: str = "local[2]", *, app: str = "specscope-fleet",
            conf: dict[str, str] | None = None) -> Any:
    """A SparkSession on ``master`` with what the fleet query needs (partition values kept as
    strings, no web UI); bound to 127.0.0.1 for a local master."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app)
    settings = {"spark.sql.sources.partitionColumnTypeInference.enabled": "false",
                "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": "8"}
    if master.startswith(("local", "spark://127.", "spark://localhost")):
        settings |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    for k, v in (settings | (conf or {})).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _root(uri: str) -> str:
    if "://" in uri:
        return uri.rstrip("/")
    return os.path.abspath(uri)


def histogram(uri: str | os.PathLike, by: Sequence[str], where: Where = Where(), *,
              spark: Any = None, master: str = "local[2]", sql: str | None = None) -> list[tuple]:
    """The histogram rows ``(*group, drafted, accepted, n)`` of a store, on Spark (``sql``:
    another query over the same ``verify`` view)."""
    own = spark is None
    spark = spark or session(master)
    try:
        root = _root(os.fspath(uri))
        try:
            df = (spark.read.option("basePath", f"{root}/verify")
                  .parquet(f"{root}/{layout_glob('verify')}"))  # Spark decodes the %XX in node
        except Exception as exc:  # pyspark's AnalysisException: nothing matched the layout
            if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
                return []
            raise
        df.createOrReplaceTempView("verify")
        rows = spark.sql(sql or histogram_sql(by, where)).collect()
        return [tuple(r) for r in rows]
    finally:
        if own:
            spark.stop()


def fleet_figures(uri: str | os.PathLike, by: Sequence[str], where: Where = Where(), *,
                  spark: Any = None, master: str = "local[2]") -> list[FleetFigures]:
    """Per-group figures of a store, on Spark."""
    return figures(histogram(uri, by, where, spark=spark, master=master), by)
