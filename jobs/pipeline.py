"""The main pipeline: a Structured Streaming job whose keyed state lives in statelake.

Run it from the repository root::

    python -m jobs.pipeline              # 12 epochs into ./statelake-data, then SQL over history
    python -m jobs.pipeline --epochs 5   # run again: resumes from the last sealed epoch

What it does, per micro-batch (epoch = Spark's batch id):

1. reads a generated event stream (Spark's ``rate-micro-batch`` source:
   ``--rows-per-batch`` events per batch, values 0, 1, 2, ...; deterministic,
   so a replayed batch has the same events);
2. computes keyed aggregates (count, sum, max of the event value per key,
   ``key = value * 7919 % keys``), each key hashed onto a vnode
   (``pmod(xxhash64(key), vnodes)``);
3. folds them into the running state and persists ONE partial per vnode
   (the vnode's whole state, JSON) through :class:`DeltaStateBackend`;
4. seals the epoch with ``epoch_complete`` and prunes epochs older than
   the last ``--keep`` ones.

Stop it (or kill it) and start it again: it raises the assignment-version
fence (a new run is a new leader, so a half-written epoch of the old run is
superseded), reloads the state of the last sealed epoch, skips batches Spark
replays that are already sealed, and goes on. At the end it prints Spark SQL
over the state history, including a time-travel read of a pruned epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

if __package__ in (None, ""):  # spark-submit jobs/pipeline.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs._common import DEFAULT_DATA_DIR, Progress, print_rows, print_summary

__all__ = ["State", "decode_state", "encode_state", "expected_state", "main", "merged_state"]

KEY_MULTIPLIER = 7919

State = dict[int, dict[str, list[int]]]
"""vnode -> key -> [count, sum, max] (keys are strings: JSON object keys)."""


def encode_state(vnode_state: dict[str, list[int]], events: int) -> bytes:
    """One vnode's partial: deterministic JSON (sorted keys), so a replay is byte-identical."""
    doc = {"events": events, "keys": vnode_state}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def decode_state(payload: bytes) -> tuple[dict[str, list[int]], int]:
    doc = json.loads(payload)
    return {k: list(v) for k, v in doc["keys"].items()}, int(doc["events"])


def merged_state(by_vnode: dict[int, bytes]) -> dict[str, list[int]]:
    """All vnodes' partials folded into key -> [count, sum, max] (each key lives in one vnode)."""
    out: dict[str, list[int]] = {}
    for payload in by_vnode.values():
        keys, _ = decode_state(payload)
        for k, v in keys.items():
            if k in out:
                raise AssertionError(f"key {k} is in two vnodes")
            out[k] = v
    return out


def expected_state(events: int, keys: int) -> dict[str, list[int]]:
    """The state an exactly-once run over events ``0 .. events-1`` must hold (recomputed)."""
    out: dict[str, list[int]] = {}
    for value in range(events):
        k = str(value * KEY_MULTIPLIER % keys)
        agg = out.setdefault(k, [0, 0, -1])
        agg[0] += 1
        agg[1] += value
        agg[2] = max(agg[2], value)
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jobs.pipeline",
        description=(
            "Structured Streaming pipeline with its keyed state in statelake: one partial per "
            "vnode per micro-batch, sealed with epoch_complete, old epochs pruned; resumes "
            "after a stop; ends with Spark SQL over the state history (incl. time travel)."
        ),
    )
    p.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help="holds store/ and checkpoint/ (default %(default)s)",
    )
    p.add_argument("--store", help="store root URI (default DATA_DIR/store)")
    p.add_argument("--checkpoint", help="Spark checkpoint folder (default DATA_DIR/checkpoint)")
    p.add_argument(
        "--epochs", type=int, default=12, help="epochs to seal in this run (default %(default)s)"
    )
    p.add_argument(
        "--rows-per-batch",
        type=int,
        default=5000,
        help="events per micro-batch (default %(default)s)",
    )
    p.add_argument("--keys", type=int, default=1000, help="distinct keys (default %(default)s)")
    p.add_argument(
        "--vnodes", type=int, default=16, help="vnode capacity of a new store (default %(default)s)"
    )
    p.add_argument(
        "--keep", type=int, default=4, help="sealed epochs kept by pruning (default %(default)s)"
    )
    p.add_argument(
        "--layout", choices=["card", "packed"], default="card", help="layout of a new store"
    )
    p.add_argument(
        "--trigger-ms",
        type=int,
        default=500,
        help="micro-batch trigger interval (default %(default)s)",
    )
    p.add_argument("--cores", type=int, default=None, help="local Spark cores (default: all)")
    p.add_argument("--fresh", action="store_true", help="delete the store and checkpoint first")
    p.add_argument(
        "--no-sql", action="store_true", help="skip the SQL over state history at the end"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    p.add_argument("--crash-after", type=int, default=None, help=argparse.SUPPRESS)
    return p


class _StopRequested(Exception):
    """Raised by a batch that starts after the run had sealed its epochs (never committed)."""


@dataclass(slots=True, kw_only=True)
class _Run:
    """Mutable state of one pipeline run, shared with the foreachBatch callback."""

    args: argparse.Namespace
    backend: Any
    version: int
    vnodes: int
    state: State
    events: int
    last_sealed: int | None
    progress: Progress
    sealed: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    written: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


def _process_batch(run: _Run, batch_df: Any, batch_id: int) -> None:
    from pyspark.sql import functions as F

    if run.done.is_set():
        raise _StopRequested(f"batch {batch_id} started after the run finished")
    epoch = int(batch_id)
    if run.last_sealed is not None and epoch <= run.last_sealed:
        run.skipped.append(epoch)
        run.progress(f"epoch {epoch}: already sealed, replayed batch skipped")
        return
    expected = 0 if run.last_sealed is None else run.last_sealed + 1
    if epoch != expected:
        raise RuntimeError(
            f"Spark's checkpoint is at batch {epoch} but the store's next epoch is {expected}: "
            "the store and checkpoint do not belong together (use --fresh to start over)"
        )
    t0 = time.monotonic()
    keys = run.args.keys
    rows = (
        batch_df.select(((F.col("value") * KEY_MULTIPLIER) % keys).alias("key"), "value")
        .withColumn("vnode", F.expr(f"pmod(xxhash64(key), {run.vnodes})").cast("int"))
        .groupBy("vnode", "key")
        .agg(F.count("*").alias("n"), F.sum("value").alias("s"), F.max("value").alias("m"))
        .collect()
    )
    new_events = 0
    for r in rows:
        agg = run.state.setdefault(int(r["vnode"]), {}).setdefault(str(r["key"]), [0, 0, -1])
        agg[0] += int(r["n"])
        agg[1] += int(r["s"])
        agg[2] = max(agg[2], int(r["m"]))
        new_events += int(r["n"])
    run.events += new_events
    partials = {v: encode_state(run.state.get(v, {}), run.events) for v in range(run.vnodes)}
    run.backend.write_partials(epoch, run.version, partials)
    run.written += len(partials)
    if run.args.crash_after is not None and len(run.sealed) + 1 >= run.args.crash_after:
        run.progress(f"epoch {epoch}: partials written; simulating a crash before sealing")
        os._exit(17)
    if not run.backend.epoch_complete(epoch, list(range(run.vnodes))):
        raise RuntimeError(f"epoch {epoch} could not be sealed (a partial is missing or stale)")
    run.last_sealed = epoch
    run.sealed.append(epoch)
    pruned = ""
    before = epoch - run.args.keep + 1
    if before > 0:
        run.backend.prune_before(before)
        pruned = f", pruned < {before}"
    run.progress(
        f"epoch {epoch} sealed: {new_events:,} events, {len(partials)} partials, "
        f"{sum(map(len, partials.values())):,} bytes{pruned} ({time.monotonic() - t0:.2f}s)"
    )
    if len(run.sealed) >= run.args.epochs:
        run.done.set()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    progress = Progress()
    data_dir = os.path.abspath(args.data_dir)
    store = args.store or os.path.join(data_dir, "store")
    checkpoint = args.checkpoint or os.path.join(data_dir, "checkpoint")
    if args.fresh:
        for path in (store, checkpoint):
            if "://" not in path:
                shutil.rmtree(path, ignore_errors=True)
    progress(f"starting local Spark (store {store})")

    from statelake import DeltaStateBackend
    from statelake.spark import local_session

    spark = local_session("statelake-pipeline", cores=args.cores)
    backend = DeltaStateBackend(
        store,
        instance_id=f"pipeline-{uuid.uuid4().hex[:8]}",
        vnode_capacity=None if os.path.exists(os.path.join(store, "partials")) else args.vnodes,
        layout=None if os.path.exists(os.path.join(store, "partials")) else args.layout,
    )
    try:
        # A new run is a new leader: raise the fence so a half-written epoch of a
        # previous run (at an older version) is superseded, never mixed in.
        version = backend.authoritative_version() + 1
        backend.set_authoritative_version(version)
        last = backend.latest_sealed_epoch()
        state: State = {}
        events = 0
        if last is not None:
            for vnode, payload in backend.read_epoch(last).items():
                state[vnode], events = decode_state(payload)
            progress(f"resuming after sealed epoch {last}: {events:,} events in the state")
        run = _Run(
            args=args,
            backend=backend,
            version=version,
            vnodes=backend.vnode_capacity,
            state=state,
            events=events,
            last_sealed=last,
            progress=progress,
        )
        progress(f"assignment version {version}; streaming {args.epochs} epochs")
        started = time.monotonic()
        stream = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", args.rows_per_batch)
            .option("numPartitions", 2)
            .option("startTimestamp", 0)
            .load()
        )
        query = (
            stream.writeStream.foreachBatch(lambda df, bid: _process_batch(run, df, bid))
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{args.trigger_ms} milliseconds")
            .queryName("statelake_pipeline")
            .start()
        )
        deadline = time.monotonic() + args.timeout
        while query.isActive and not run.done.is_set() and time.monotonic() < deadline:
            run.done.wait(0.2)
        run.done.set()
        query.stop()
        failure = query.exception()
        if failure is not None and "_StopRequested" not in str(failure):
            progress(f"the streaming query failed: {failure}")
            return 1
        if len(run.sealed) < args.epochs:
            progress(f"timed out after {args.timeout:.0f}s with {len(run.sealed)} epochs sealed")
            return 1
        stream_seconds = time.monotonic() - started
        if not args.no_sql:
            _show_history(spark, store, progress)
        expected = expected_state(run.events, args.keys)
        consistent = merged_state(backend.read_epoch(run.last_sealed or 0)) == expected
        print_summary(
            "statelake pipeline",
            {
                "store": store,
                "epochs sealed this run": f"{len(run.sealed)} ({run.sealed[0]}..{run.sealed[-1]})"
                if run.sealed
                else "0",
                "replayed batches skipped": len(run.skipped),
                "partials written": run.written,
                "events in state": f"{run.events:,}",
                "state matches recomputation": "yes" if consistent else "NO",
                "assignment version": version,
                "table versions": backend.table_versions(),
                "streaming time": f"{stream_seconds:.1f}s "
                f"({stream_seconds / max(len(run.sealed), 1):.2f}s per epoch)",
                "total time": f"{progress.elapsed():.1f}s",
                "next": "run it again to resume, or: python -m jobs.audit --store " + store,
            },
        )
        return 0 if consistent else 1
    finally:
        backend.close()
        spark.stop()


def _show_history(spark: Any, store: str, progress: Progress) -> None:
    """Spark SQL over the state history, and a time-travel read of a pruned epoch."""
    from statelake.spark import create_views, last_version_with_epoch

    progress("Spark SQL over the state history")
    create_views(spark, store)
    queries = [
        (
            "Partials per retained epoch (statelake_partials)",
            "SELECT epoch, count(*) AS partials, sum(payload_size) AS bytes, "
            "max(assignment_version) AS version FROM statelake_partials "
            "GROUP BY epoch ORDER BY epoch",
        ),
        (
            "Sealed epochs (statelake_commits)",
            "SELECT epoch, committer, assignment_version AS fence, size(vnodes) AS vnodes, "
            "sealed_at FROM statelake_commits ORDER BY epoch",
        ),
        (
            "Biggest vnode states at the latest sealed epoch (statelake_sealed_partials)",
            "SELECT vnode, payload_size, "
            "get_json_object(cast(payload AS string), '$.events') AS events_total, "
            "size(map_keys(from_json(get_json_object(cast(payload AS string), '$.keys'), "
            "'map<string,array<long>>'))) AS keys "
            "FROM statelake_sealed_partials "
            "WHERE epoch = (SELECT max(epoch) FROM statelake_commits) "
            "ORDER BY payload_size DESC, vnode LIMIT 5",
        ),
    ]
    for title, sql in queries:
        df = spark.sql(sql)
        print_rows(title, df.columns, df.collect())
    retained = [r[0] for r in spark.sql("SELECT DISTINCT epoch FROM statelake_partials").collect()]
    if not retained or min(retained) == 0:
        print("\n(no epoch has been pruned yet: no time-travel example)")
        return
    pruned = min(retained) - 1
    version = last_version_with_epoch(store, pruned)
    if version is None:
        print(f"\n(epoch {pruned} is no longer in the table's history)")
        return
    spark.read.format("statelake").option("versionAsOf", version).load(
        store
    ).createOrReplaceTempView("partials_then")
    now = spark.sql(f"SELECT count(*) FROM statelake_partials WHERE epoch = {pruned}").first()
    try:
        df = spark.sql(
            "SELECT epoch, count(*) AS partials, sum(payload_size) AS bytes, "
            "max(CAST(get_json_object(CAST(payload AS string), '$.events') AS long)) AS events "
            f"FROM partials_then WHERE epoch = {pruned} GROUP BY epoch"
        )
        print_rows(
            f"Time travel: pruned epoch {pruned} read at partials version {version} "
            f"(rows of it in the current version: {now[0] if now else 0})",
            df.columns,
            df.collect(),
        )
    except Exception as exc:  # VACUUM may have removed the files since
        print(f"\n(time travel to version {version} failed, files vacuumed? {exc})")


if __name__ == "__main__":
    sys.exit(main())
