"""History helpers that work without the Delta jars (delta-rs fallback)."""

from __future__ import annotations

from typing import Any

import pytest

from statelake.spark import last_version_with_epoch, read_table, table_history, vacuum_store

from .conftest import StoreFactory

pytestmark = pytest.mark.spark


def test_history_and_last_version_with_pruned_epoch_allow_time_travel(
    spark: Any, make_store: StoreFactory
) -> None:
    """The fallback history lists every commit; the version it finds still holds the epoch."""
    uri = make_store("packed", epochs=3, vnodes=2, prune_before=2)
    ops = [r.operation for r in table_history(spark, uri, native=False).collect()]
    assert "DELETE" in ops and len(ops) >= 4
    version = last_version_with_epoch(uri, 0)
    assert version is not None
    rows = read_table(spark, uri, version=version, native=False).where("epoch = 0").collect()
    assert sorted(bytes(r.payload) for r in rows) == [b"e0v0", b"e0v1"]
    assert read_table(spark, uri, native=False).where("epoch = 0").count() == 0
    doomed = vacuum_store(spark, uri, retention_hours=0, dry_run=True, native=False)
    assert doomed and all(p.startswith(("partials/", "control/")) for p in doomed)
    assert read_table(spark, uri, version=version, native=False).where("epoch = 0").count() == 2
