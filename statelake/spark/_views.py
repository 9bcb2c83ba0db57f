"""``register`` and ``create_views``: type SQL over a store right away."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pyspark.sql import SparkSession

from .. import _schemas
from ._native import read_table
from ._source import StatelakeDataSource

__all__ = ["VIEWS", "create_views", "register"]

VIEWS = (
    "statelake_partials",
    "statelake_control",
    "statelake_commits",
    "statelake_effective_partials",
    "statelake_sealed_partials",
)


def register(spark: SparkSession) -> None:
    """Register ``format("statelake")`` on ``spark`` and enable Python filter pushdown.

    Idempotent. Pushdown is a session setting Spark requires for any Python
    data source that prunes files (without it the source would read every file).
    """
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(StatelakeDataSource)


def create_views(
    spark: SparkSession,
    uri: str,
    *,
    storage_options: Mapping[str, str] | None = None,
    version: int | None = None,
    timestamp: datetime | str | None = None,
    native: bool | None = None,
    prefix: str = "statelake_",
) -> list[str]:
    """Create temp views over the store at ``uri`` and return their names.

    * ``statelake_partials``: every row of the partials table (all versions
      of every (epoch, vnode) that are still live).
    * ``statelake_control``: the control table as stored (markers and fence).
    * ``statelake_commits``: the commit markers (one row per sealed epoch;
      more than one is a ``double_seal`` anomaly).
    * ``statelake_effective_partials``: per (epoch, vnode) the rows at the
      highest assignment version, i.e. what ``read_partial`` returns.
    * ``statelake_sealed_partials``: sealed epochs joined to the effective
      partial of each vnode their marker lists, with the marker's fence
      (``sealed_version``) and committer; one row per (epoch, vnode).

    ``version`` / ``timestamp`` pin the PARTIALS and CONTROL tables to a
    past table version / instant (time travel; a version number applies to
    both tables only if you mean the same number on each, so prefer a
    timestamp for a consistent view of both). ``native`` picks
    ``format("delta")`` (None: when the jars are present). ``prefix`` renames
    the views (e.g. to look at two stores side by side).
    """
    register(spark)
    partials = read_table(
        spark,
        uri,
        _schemas.PARTIALS,
        version=version,
        timestamp=timestamp,
        storage_options=storage_options,
        native=native,
    )
    control = read_table(
        spark,
        uri,
        _schemas.CONTROL,
        version=version,
        timestamp=timestamp,
        storage_options=storage_options,
        native=native,
    )
    p = prefix
    partials.createOrReplaceTempView(f"{p}partials")
    control.createOrReplaceTempView(f"{p}control")
    spark.sql(
        f"""
        CREATE OR REPLACE TEMP VIEW {p}commits AS
        SELECT epoch, committer, assignment_version, updated_at AS sealed_at, vnodes, token
        FROM {p}control WHERE kind = 'commit'
        """
    )
    spark.sql(
        f"""
        CREATE OR REPLACE TEMP VIEW {p}effective_partials AS
        SELECT epoch, vnode, assignment_version, writer, written_at, payload_size,
               payload_crc32, payload
        FROM (
          SELECT *, max(assignment_version) OVER (PARTITION BY epoch, vnode) AS top_version
          FROM {p}partials
        ) WHERE assignment_version = top_version
        """
    )
    spark.sql(
        f"""
        CREATE OR REPLACE TEMP VIEW {p}sealed_partials AS
        WITH listed AS (
          SELECT epoch, committer, assignment_version AS sealed_version, sealed_at,
                 explode(vnodes) AS vnode
          FROM {p}commits
        ), effective AS (
          SELECT *, row_number() OVER (PARTITION BY epoch, vnode ORDER BY written_at) AS rn
          FROM {p}effective_partials
        )
        SELECT l.epoch, l.vnode, l.committer, l.sealed_version, l.sealed_at,
               e.assignment_version, e.writer, e.written_at, e.payload_size,
               e.payload_crc32, e.payload
        FROM listed l JOIN effective e
          ON e.epoch = l.epoch AND e.vnode = l.vnode AND e.rn = 1
        """
    )
    return [f"{p}{name[len('statelake_') :]}" for name in VIEWS]
