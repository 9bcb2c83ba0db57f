"""Spark benchmark: a state-history query through the data source vs ``spark.read.parquet``.

:func:`run` builds a packed-layout store of ``n_rows`` partials with the
distributed writer (:func:`statelake.spark.write_partials`: executors write
the files, one Delta commit per epoch), then times the same history query
(epoch filter, group by epoch, count and sum of sizes) through
``format("statelake")`` and through ``spark.read.parquet`` over the very same
data files. ``jobs/benchmark.py`` calls it; the target is a ratio within 2x.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Any

__all__ = ["run"]

_QUERY = (
    "SELECT epoch, count(*) AS partials, sum(payload_size) AS bytes "
    "FROM {view} WHERE epoch >= {lo} GROUP BY epoch ORDER BY epoch"
)


def _time(fn: Any, repeats: int) -> tuple[float, Any]:
    fn()  # warm up: first planning starts Python workers, JIT, file cache
    times = []
    result = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def run(
    n_rows: int = 100_000,
    *,
    epochs: int = 100,
    payload_bytes: int = 64,
    repeats: int = 3,
    root: str | None = None,
    spark: Any = None,
    keep: bool = False,
) -> dict[str, Any]:
    """Build a store of ``n_rows`` partials and time a history query both ways.

    ``epochs`` epochs of ``n_rows // epochs`` vnodes each, ``payload_bytes``
    per payload. ``root``: where to build the store (default: a temp
    folder, deleted afterwards unless ``keep``). ``spark``: a session to use
    (default: :func:`statelake.spark.local_session`, stopped afterwards).
    Returns the figures: build time, median query seconds for each path,
    ``ratio`` = data source / parquet, and whether both gave the same rows.
    """
    from statelake.spark import local_session, write_partials

    own_spark = spark is None
    session = spark if spark is not None else local_session("statelake-bench")
    folder = root or tempfile.mkdtemp(prefix="statelake-bench-")
    store = os.path.join(folder, "store")
    vnodes = max(1, n_rows // epochs)
    try:
        t0 = time.perf_counter()
        df = session.range(0, vnodes * epochs, numPartitions=2).selectExpr(
            f"id div {vnodes} AS epoch",
            f"CAST(id % {vnodes} AS INT) AS vnode",
            f"CAST(rpad(CAST(id AS STRING), {payload_bytes}, 'x') AS BINARY) AS payload",
        )
        report = write_partials(
            df, store, writer="bench", assignment_version=1, vnode_capacity=vnodes, layout="packed"
        )
        build_s = time.perf_counter() - t0
        lo = epochs // 2
        session.read.format("statelake").load(store).createOrReplaceTempView("bench_source")
        session.read.parquet(os.path.join(store, "partials")).createOrReplaceTempView(
            "bench_parquet"
        )
        src_s, src_rows = _time(
            lambda: session.sql(_QUERY.format(view="bench_source", lo=lo)).collect(), repeats
        )
        pq_s, pq_rows = _time(
            lambda: session.sql(_QUERY.format(view="bench_parquet", lo=lo)).collect(), repeats
        )
        same = [tuple(r) for r in src_rows] == [tuple(r) for r in pq_rows]
        return {
            "rows": report.rows,
            "epochs": epochs,
            "vnodes_per_epoch": vnodes,
            "files": report.files,
            "commits": report.commits,
            "build_seconds": round(build_s, 3),
            "query": _QUERY.format(view="<table>", lo=lo),
            "datasource_seconds": round(src_s, 4),
            "parquet_seconds": round(pq_s, 4),
            "ratio": round(src_s / pq_s, 3) if pq_s > 0 else float("inf"),
            "target_ratio": 2.0,
            "same_result": same,
            "repeats": repeats,
        }
    finally:
        if own_spark:
            session.stop()
        if root is None and not keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000), indent=2))
