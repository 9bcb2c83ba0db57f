"""One way to read, time-travel and vacuum a store from Spark, native or not.

Where the Delta Lake jars are on Spark's classpath (Databricks, or OSS
Spark configured with ``delta-spark``), the tables are read with
``format("delta")`` and maintained with ``DeltaTable`` / Delta SQL; everywhere
else the ``statelake`` data source and delta-rs do the same jobs. Callers
pass ``native=None`` (default) to pick automatically.

The native path takes storage credentials from the cluster's Hadoop
configuration (``spark.hadoop.fs.s3a.*`` ...), not from ``storage_options``;
``s3://`` roots are read as ``s3a://``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .. import _schemas
from ..errors import InvalidArgument
from ._source import FORMAT

__all__ = [
    "HISTORY_SCHEMA",
    "delta_jars_available",
    "read_table",
    "table_history",
    "use_native",
    "vacuum_store",
]

HISTORY_SCHEMA = StructType(
    [
        StructField("version", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("operation", StringType(), True),
        StructField("operationParameters", MapType(StringType(), StringType()), True),
    ]
)


_ALWAYS_TRUE_EPOCH = -(2**63)


def delta_jars_available(spark: SparkSession) -> bool:
    """True when this session can use ``format("delta")`` and ``DeltaTable``.

    Checks that the Delta classes load in the driver JVM and that the Delta
    SQL extension is configured (the catalog and ``VACUUM`` need it).
    """
    try:
        jvm = spark.sparkContext._jvm
        if jvm is None:
            return False
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName("io.delta.tables.DeltaTable", True, loader)
    except Exception:
        return False
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    return "DeltaSparkSessionExtension" in extensions


def use_native(spark: SparkSession, native: bool | None) -> bool:
    """Resolve ``native``: None = automatic; True without the jars is an error."""
    available = delta_jars_available(spark)
    if native and not available:
        raise InvalidArgument(
            "native Delta path requested but the Delta Lake jars are not on Spark's classpath "
            "(set STATELAKE_DELTA_JARS or use a cluster with delta-spark configured)"
        )
    return available if native is None else bool(native)


def _hadoop_uri(uri: str) -> str:
    return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri


def table_uri(uri: str, table: str) -> str:
    from ..delta._storage import normalize_uri

    return f"{normalize_uri(uri)}/{table}"


def read_table(
    spark: SparkSession,
    uri: str,
    table: str = _schemas.PARTIALS,
    *,
    version: int | None = None,
    timestamp: datetime | str | None = None,
    storage_options: Mapping[str, str] | None = None,
    native: bool | None = None,
) -> DataFrame:
    """A DataFrame over one table of the store, optionally at a past version or instant.

    Same columns either way (the schema in ``schemas/``).
    """
    if table not in (_schemas.PARTIALS, _schemas.CONTROL):
        raise InvalidArgument(f"table must be 'partials' or 'control', got {table!r}")
    if version is not None and timestamp is not None:
        raise InvalidArgument("give version or timestamp, not both")
    ts = timestamp.isoformat() if isinstance(timestamp, datetime) else timestamp
    if use_native(spark, native):
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", str(version))
        if ts is not None:
            reader = reader.option("timestampAsOf", ts)
        return reader.load(_hadoop_uri(table_uri(uri, table)))
    reader = spark.read.format(FORMAT).option("table", table)
    for key, value in (storage_options or {}).items():
        reader = reader.option(key, value)
    if version is not None:
        reader = reader.option("versionAsOf", str(version))
    if ts is not None:
        reader = reader.option("timestampAsOf", ts)
    df = reader.load(table_uri(uri, "").rstrip("/"))
    # Spark 4.1 caches the scan planned with the last pushed-down filters on the
    # relation and reuses it for a later query that pushes NO filter, so one
    # DataFrame queried with "epoch = 3" and then without a filter returned only
    # epoch 3. An always-true pushed filter makes every query plan its own scan.
    return df.where(df["epoch"] >= _ALWAYS_TRUE_EPOCH)


def table_history(
    spark: SparkSession,
    uri: str,
    table: str = _schemas.PARTIALS,
    *,
    storage_options: Mapping[str, str] | None = None,
    native: bool | None = None,
) -> DataFrame:
    """The Delta history of one table: version, timestamp, operation, operationParameters.

    Natively ``DeltaTable.history()``; otherwise delta-rs's ``history()``
    made into a DataFrame with the same leading columns, newest first.
    """
    if use_native(spark, native):
        from delta.tables import DeltaTable as SparkDeltaTable

        df = SparkDeltaTable.forPath(spark, _hadoop_uri(table_uri(uri, table))).history()
        return df.select("version", "timestamp", "operation", "operationParameters")
    from ..delta._log import open_table

    dt = open_table(table_uri(uri, table), dict(storage_options or {}))
    rows = []
    for h in dt.history():
        params = h.get("operationParameters") or {}
        rows.append(
            (
                int(h["version"]),
                datetime.fromtimestamp(int(h["timestamp"]) / 1000) if h.get("timestamp") else None,
                h.get("operation"),
                {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in params.items()},
            )
        )
    return spark.createDataFrame(rows, HISTORY_SCHEMA).orderBy("version", ascending=False)


def vacuum_store(
    spark: SparkSession,
    uri: str,
    *,
    retention_hours: float,
    dry_run: bool = True,
    storage_options: Mapping[str, str] | None = None,
    native: bool | None = None,
) -> list[str]:
    """VACUUM both tables: files unreferenced for ``retention_hours``. Dry-run by default.

    Returns the files deleted (or that would be). Time travel to versions
    older than the retention stops working once they are gone.
    """
    hours = max(0, int(retention_hours))
    if use_native(spark, native):
        out: list[str] = []
        for table in (_schemas.PARTIALS, _schemas.CONTROL):
            path = _hadoop_uri(table_uri(uri, table)).replace("`", "``")
            sql = f"VACUUM delta.`{path}` RETAIN {hours} HOURS" + (" DRY RUN" if dry_run else "")
            out += [str(r[0]) for r in spark.sql(sql).collect()]
        return out
    from ..delta import DeltaStateBackend

    backend = DeltaStateBackend(
        uri,
        instance_id="statelake-vacuum",
        vnode_capacity=None,
        storage_options=storage_options,
        create=False,
    )
    try:
        return backend.vacuum(retention_hours=hours, dry_run=dry_run)
    finally:
        backend.close()
