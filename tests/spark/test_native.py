"""The native format("delta") path: runs only where the Delta Lake jars are on the classpath."""

from __future__ import annotations

from typing import Any

import pytest

from statelake.spark import delta_jars_available, find_delta_jars, read_table, table_history

from .conftest import StoreFactory

pytestmark = [
    pytest.mark.spark,
    pytest.mark.delta_jars,
    pytest.mark.skipif(
        not find_delta_jars(),
        reason="Delta Lake jars are not on Spark's classpath (the Maven repository is not "
        "reachable here); set STATELAKE_DELTA_JARS to a folder of delta-spark jars to run",
    ),
]


def test_native_path_reads_the_same_rows_as_the_data_source(
    spark: Any, make_store: StoreFactory
) -> None:
    """format('delta') and format('statelake') agree on both tables and on time travel."""
    assert delta_jars_available(spark)
    uri = make_store("card", epochs=3, vnodes=4, prune_before=1)
    for table in ("partials", "control"):
        native = read_table(spark, uri, table, native=True).collect()
        ours = read_table(spark, uri, table, native=False).collect()
        assert sorted(map(str, native)) == sorted(map(str, ours))
    old = read_table(spark, uri, version=1, native=True).where("epoch = 0").count()
    assert old == 4
    assert table_history(spark, uri, native=True).count() >= 4
