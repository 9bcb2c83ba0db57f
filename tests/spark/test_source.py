"""The statelake data source: both tables, both layouts, time travel, pushdown, partitions."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from statelake import DeltaStateBackend
from statelake.spark import create_views, spark_schema
from statelake.spark._source import Bounds, ScanFile, parse_options, plan_partitions, plan_scan

from .conftest import StoreFactory

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("layout", ["card", "packed"])
def test_data_source_reads_both_tables_with_the_json_schema(
    spark: Any, make_store: StoreFactory, layout: str
) -> None:
    """Every partial and every control row comes back, typed as schemas/*.json says."""
    uri = make_store(layout, epochs=3, vnodes=4)
    partials = spark.read.format("statelake").load(uri)
    assert partials.schema == spark_schema("partials")
    rows = {(r.epoch, r.vnode): bytes(r.payload) for r in partials.collect()}
    assert rows == {(e, v): f"e{e}v{v}".encode() for e in range(3) for v in range(4)}
    control = spark.read.format("statelake").option("table", "control").option("uri", uri).load()
    assert control.schema == spark_schema("control")
    got = sorted((r.kind, r.epoch, r.assignment_version) for r in control.collect())
    assert got == [("commit", 0, 1), ("commit", 1, 1), ("commit", 2, 1), ("fence", -1, 1)]
    assert all(r.vnodes == [0, 1, 2, 3] for r in control.collect() if r.kind == "commit")


def test_time_travel_reads_a_pruned_epoch_by_version_and_by_timestamp(
    spark: Any, tmp_path: Path
) -> None:
    """versionAsOf and timestampAsOf see an epoch that prune has since deleted."""
    uri = str(tmp_path / "store")
    b = DeltaStateBackend(uri, instance_id="a", vnode_capacity=2)
    b.write_partials(0, 0, {0: b"old0", 1: b"old1"})
    assert b.epoch_complete(0, [0, 1])
    version = b.table_versions()["partials"]
    time.sleep(1.1)
    instant = datetime.now(timezone.utc)
    time.sleep(1.1)
    b.write_partials(1, 0, {0: b"new0", 1: b"new1"})
    assert b.epoch_complete(1, [0, 1])
    b.prune_before(1)
    b.close()
    reader = spark.read.format("statelake")
    assert reader.load(uri).where("epoch = 0").count() == 0
    by_version = reader.option("versionAsOf", version).load(uri).where("epoch = 0").collect()
    assert sorted(bytes(r.payload) for r in by_version) == [b"old0", b"old1"]
    at = spark.read.format("statelake").option("timestampAsOf", instant.isoformat()).load(uri)
    assert sorted((r.epoch, bytes(r.payload)) for r in at.collect()) == [(0, b"old0"), (0, b"old1")]


@pytest.mark.parametrize("layout", ["card", "packed"])
def test_epoch_and_vnode_filters_open_only_matching_files(
    spark: Any, make_store: StoreFactory, layout: str
) -> None:
    """Files of other epochs are never opened: deleting them breaks only unfiltered reads."""
    uri = make_store(layout, epochs=4, vnodes=4)
    opts = parse_options({"path": uri})
    _, all_files = plan_scan(opts, {})
    b = Bounds()
    assert b.add(_filter("EqualTo", "epoch", 2))
    _, matching = plan_scan(opts, {"epoch": b})
    assert {f.partition["epoch"] for f in matching} == {"2"}
    assert 0 < len(matching) < len(all_files)
    # Remove every data file of the other epochs: a pushed-down read never notices.
    for f in all_files:
        if f.partition["epoch"] != "2":
            os.remove(os.path.join(uri, "partials", f.path))
    df = spark.read.format("statelake").load(uri)
    rows = df.where("epoch = 2 AND vnode IN (1, 3)").select("vnode", "payload").collect()
    assert sorted((r.vnode, bytes(r.payload)) for r in rows) == [(1, b"e2v1"), (3, b"e2v3")]
    assert df.where("epoch >= 2 AND epoch < 3").count() == 4
    with pytest.raises(Exception, match="missing"):
        spark.read.format("statelake").load(uri).select("payload").collect()


def _filter(kind: str, column: str, value: Any) -> Any:
    from pyspark.sql import datasource

    return getattr(datasource, kind)((column,), value)


def test_small_files_are_grouped_into_few_spark_partitions(
    spark: Any, make_store: StoreFactory
) -> None:
    """Dozens of tiny card files make a couple of partitions, not one per file."""
    uri = make_store("card", epochs=6, vnodes=8)
    df = spark.read.format("statelake").option("minPartitions", "2").load(uri)
    assert df.rdd.getNumPartitions() == 2
    assert df.count() == 48
    files = [ScanFile(path=f"f{i}", size=100, partition={}) for i in range(10)]
    groups = plan_partitions(files, max_partition_bytes=250, min_partitions=1)
    assert len(groups) == 4 and sum(map(len, groups)) == 10


def test_views_answer_sql_over_sealed_epochs(spark: Any, make_store: StoreFactory) -> None:
    """create_views gives partials, commits and sealed partials views SQL can join."""
    uri = make_store("packed", epochs=3, vnodes=4, prune_before=1)
    names = create_views(spark, uri)
    assert {"statelake_partials", "statelake_commits", "statelake_sealed_partials"} <= set(names)
    sealed = spark.sql(
        "SELECT epoch, count(*) AS n, min(sealed_version) AS fence FROM statelake_sealed_partials "
        "GROUP BY epoch ORDER BY epoch"
    ).collect()
    assert [(r.epoch, r.n, r.fence) for r in sealed] == [(1, 4, 1), (2, 4, 1)]
    commits = spark.sql("SELECT epoch, committer FROM statelake_commits ORDER BY epoch").collect()
    assert [(r.epoch, r.committer) for r in commits] == [(1, "node-a"), (2, "node-a")]


def test_view_queries_without_filters_after_filtered_ones_see_every_row(
    spark: Any, make_store: StoreFactory
) -> None:
    """A filtered query does not leak its pruned scan into a later unfiltered one."""
    uri = make_store("card", epochs=3, vnodes=4)
    create_views(spark, uri)
    count = lambda sql: spark.sql(sql).first()[0]  # noqa: E731
    assert count("SELECT count(*) FROM statelake_partials WHERE epoch = 1") == 4
    assert count("SELECT count(*) FROM statelake_partials") == 12
    assert count("SELECT count(*) FROM statelake_partials WHERE vnode = 0") == 3
    assert count("SELECT count(*) FROM statelake_partials") == 12
