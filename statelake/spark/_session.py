"""A local SparkSession with settings that suit statelake jobs and tests."""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

__all__ = ["find_delta_jars", "local_session"]

_DELTA_JAR_PATTERNS = ("delta-spark_*.jar", "delta-core_*.jar")


def find_delta_jars() -> list[str]:
    """Delta Lake jars this Spark can load without downloading anything.

    Looks at ``$STATELAKE_DELTA_JARS`` (paths separated by ``os.pathsep``: jar
    files or folders), then PySpark's own ``jars/`` folder and
    ``$SPARK_HOME/jars``. Empty when none are found (the Maven repository is
    never consulted: it is not reachable from every machine).
    """
    found: list[str] = []
    for item in filter(None, os.environ.get("STATELAKE_DELTA_JARS", "").split(os.pathsep)):
        if os.path.isdir(item):
            found += sorted(glob.glob(os.path.join(item, "*.jar")))
        elif os.path.isfile(item):
            found.append(item)
    if found:
        return found
    import pyspark

    folders = [os.path.join(os.path.dirname(pyspark.__file__), "jars")]
    if os.environ.get("SPARK_HOME"):
        folders.append(os.path.join(os.environ["SPARK_HOME"], "jars"))
    for folder in folders:
        for pattern in _DELTA_JAR_PATTERNS:
            found += sorted(glob.glob(os.path.join(folder, pattern)))
    return found


def local_session(
    app_name: str = "statelake",
    *,
    cores: int | None = None,
    shuffle_partitions: int = 4,
    delta: bool | None = None,
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession for statelake on this machine, with the data source registered.

    Under ``spark-submit`` (or any already running gateway) the master and
    resources come from there; otherwise the session runs ``local[cores]``
    (default: every core). Settings and why:

    * ``spark.sql.shuffle.partitions`` = ``shuffle_partitions`` (default 4):
      state-history queries aggregate a few thousand rows; 200 tasks would
      dominate their run time on a laptop.
    * the web UI off, session time zone UTC (statelake stores UTC instants),
      Python filter pushdown on (the data source prunes files with it).
    * Python workers run this interpreter, so executors import the same
      ``statelake`` as the driver.
    * ``delta``: configure the Delta Lake extension and catalog. ``None``
      (default) does it when :func:`find_delta_jars` finds jars; ``False``
      never; ``True`` always (the jars must then be on the classpath some
      other way, e.g. a cluster image).
    """
    from . import register

    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    builder = SparkSession.builder.appName(app_name)
    if not under_submit:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = builder.master(f"local[{cores}]" if cores else "local[*]")
        builder = builder.config(
            "spark.driver.memory", os.environ.get("STATELAKE_DRIVER_MEMORY", "2g")
        )
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    }
    jars = find_delta_jars() if delta is None else []
    if delta or jars:
        if jars:
            settings["spark.jars"] = ",".join(jars)
        settings["spark.sql.extensions"] = "io.delta.sql.DeltaSparkSessionExtension"
        settings["spark.sql.catalog.spark_catalog"] = (
            "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        # statelake's own retention rules decide what VACUUM may delete.
        settings["spark.databricks.delta.retentionDurationCheck.enabled"] = "false"
    settings.update(config or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("STATELAKE_SPARK_LOG_LEVEL", "ERROR"))
    register(spark)
    return spark
