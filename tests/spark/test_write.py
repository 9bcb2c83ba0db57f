"""Distributed writes: executors write files, one Delta commit per epoch, fence and idempotence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statelake import ConflictingPartial, DeltaStateBackend, StaleVersion
from statelake.spark import write_partials

pytestmark = pytest.mark.spark


def _rows(spark: Any, epochs: int, vnodes: int, tweak: int | None = None) -> Any:
    extra = f"CASE WHEN id = {tweak} THEN 'x' ELSE '' END" if tweak is not None else "''"
    return spark.range(0, epochs * vnodes, numPartitions=2).selectExpr(
        f"id div {vnodes} AS epoch",
        f"CAST(id % {vnodes} AS INT) AS vnode",
        f"CAST(concat('p', id, {extra}) AS BINARY) AS payload",
    )


@pytest.mark.parametrize("layout", ["card", "packed"])
def test_distributed_write_makes_one_commit_per_epoch(
    spark: Any, tmp_path: Path, layout: str
) -> None:
    """Rows from 2 tasks land as exactly one partials commit per epoch, readable by the backend."""
    uri = str(tmp_path / "store")
    report = write_partials(
        _rows(spark, 3, 8), uri, writer="job", assignment_version=1, vnode_capacity=8, layout=layout
    )
    assert report.commits == 3 and report.epochs == (0, 1, 2)
    assert report.written == 24 and report.skipped == 0
    assert report.table_version == 3  # version 0 created the table, then one commit per epoch
    b = DeltaStateBackend(uri, instance_id="reader", vnode_capacity=None)
    try:
        assert b.read_epoch(2) == {v: f"p{16 + v}".encode() for v in range(8)}
        assert b.epoch_complete(2, list(range(8)))
    finally:
        b.close()


def test_distributed_write_skips_replays_and_rejects_conflicts(spark: Any, tmp_path: Path) -> None:
    """A replay commits nothing; different bytes at the same version raise ConflictingPartial."""
    uri = str(tmp_path / "store")
    write_partials(_rows(spark, 2, 4), uri, writer="job", assignment_version=1, vnode_capacity=4)
    again = write_partials(_rows(spark, 2, 4), uri, writer="job", assignment_version=1)
    assert again.written == 0 and again.skipped == 8 and again.commits == 0
    with pytest.raises(ConflictingPartial) as info:
        write_partials(_rows(spark, 2, 4, tweak=5), uri, writer="job", assignment_version=1)
    assert (info.value.epoch, info.value.vnode) == (1, 1)
    b = DeltaStateBackend(uri, instance_id="reader", vnode_capacity=None)
    try:
        assert b.read_partial(1, 1) == b"p5"
        assert b.table_versions()["partials"] == 2
    finally:
        b.close()


def test_distributed_write_rejects_rows_below_the_durable_fence(spark: Any, tmp_path: Path) -> None:
    """A version below the fence raises StaleVersion and commits nothing (column or argument)."""
    uri = str(tmp_path / "store")
    b = DeltaStateBackend(uri, instance_id="leader", vnode_capacity=4, layout="packed")
    b.set_authoritative_version(5)
    with pytest.raises(StaleVersion):
        write_partials(_rows(spark, 1, 4), uri, writer="old", assignment_version=4)
    stale = _rows(spark, 1, 4).selectExpr("*", "CAST(vnode + 3 AS LONG) AS assignment_version")
    with pytest.raises(StaleVersion) as info:
        write_partials(stale, uri, writer="old")
    assert info.value.authoritative == 5
    try:
        assert b.table_versions()["partials"] == 0
        assert b.read_epoch(0) == {}
    finally:
        b.close()
