"""Store maintenance: prune, compaction, checkpoint, vacuum. A dry run unless ``--yes``.

::

    python -m jobs.maintenance                       # show what would be done
    python -m jobs.maintenance --keep-last 3 --retention-hours 0 --yes

Steps, in order (each can be skipped with ``--no-<step>``):

1. **prune**: delete epochs older than the last ``--keep-last`` sealed
   epochs (or ``--prune-before EPOCH``) from both tables, through
   ``DeltaStateBackend.prune_before`` (the fence row is never touched);
2. **compact**: rewrite partitions holding several small files into one
   (delta-rs ``optimize.compact``; ``OPTIMIZE`` natively);
3. **checkpoint**: write a Delta checkpoint of both tables and clean up
   expired log files (cold opens replay fewer commits);
4. **vacuum**: delete data files unreferenced for ``--retention-hours``
   (default 168); time travel to older versions stops working.

Without ``--yes`` nothing is changed: every step reports what it would do.
Exit status 0 on success, 2 on a usage or storage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

if __package__ in (None, ""):  # spark-submit jobs/maintenance.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs._common import Progress, add_store_arguments, print_summary, storage_options

__all__ = ["main"]

STEPS = ("prune", "compact", "checkpoint", "vacuum")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jobs.maintenance",
        description="Prune old epochs, compact small files, checkpoint the logs and vacuum "
        "unreferenced files of a statelake store. Dry run unless --yes.",
    )
    add_store_arguments(p)
    p.add_argument(
        "--keep-last", type=int, default=10, help="sealed epochs to keep (default %(default)s)"
    )
    p.add_argument("--prune-before", type=int, help="prune epochs < this (overrides --keep-last)")
    p.add_argument(
        "--retention-hours",
        type=float,
        default=168.0,
        help="vacuum files unreferenced for this long (default %(default)s)",
    )
    for step in STEPS:
        p.add_argument(f"--no-{step}", action="store_true", help=f"skip the {step} step")
    p.add_argument("--yes", action="store_true", help="apply the changes (default: dry run)")
    return p


def _live_files(store: str, table: str, options: dict[str, str]) -> tuple[int, list[Any]]:
    from statelake.delta._log import entries_of, open_table
    from statelake.delta._storage import Storage

    storage = Storage(store, options)
    dt = open_table(storage.uri(table), storage.options)
    return dt.version(), entries_of(dt)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    options = storage_options(args)
    store = args.store if "://" in args.store else os.path.abspath(args.store)
    if "://" not in store and not os.path.isdir(os.path.join(store, "partials")):
        print(f"no statelake store at {store} (run python -m jobs.pipeline first)", file=sys.stderr)
        return 2
    steps = [s for s in STEPS if not getattr(args, f"no_{s}")]
    progress = Progress(total=len(steps))
    mode = "apply" if args.yes else "dry run"
    progress(f"maintenance of {store} ({mode}); starting local Spark")

    from pyspark.sql import SparkSession

    from statelake import DeltaStateBackend
    from statelake.delta._log import open_table
    from statelake.delta._storage import Storage
    from statelake.spark import delta_jars_available, local_session, vacuum_store

    owned = SparkSession.getActiveSession() is None  # a caller's session is left running
    spark = local_session("statelake-maintenance")
    native = delta_jars_available(spark)
    backend = DeltaStateBackend(
        store,
        instance_id="statelake-maintenance",
        vnode_capacity=None,
        storage_options=options,
        create=False,
    )
    storage = Storage(store, options)
    facts: dict[str, Any] = {
        "store": store,
        "mode": mode,
        "engine": "delta-spark" if native else "delta-rs",
    }
    try:
        before_versions = backend.table_versions()
        _, files_before = _live_files(store, "partials", options)
        facts["partials files before"] = len(files_before)
        if "prune" in steps:
            epochs = backend.committed_epochs()
            if args.prune_before is not None:
                before = args.prune_before
            elif epochs:
                before = epochs[-1] - args.keep_last + 1
            else:
                before = 0
            doomed_sealed = [e for e in epochs if e < before]
            doomed_any = sorted(
                {int(f.partition.get("epoch") or 0) for f in files_before} | set(epochs)
            )
            doomed_any = [e for e in doomed_any if e < before]
            if args.yes and doomed_any:
                backend.prune_before(before)
            verb = "pruned" if args.yes else "would prune"
            progress(
                f"prune: {verb} {len(doomed_any)} epochs < {before} ({len(doomed_sealed)} sealed)",
                advance=True,
            )
            facts["epochs pruned" if args.yes else "epochs to prune"] = len(doomed_any)
        if "compact" in steps:
            _, files = _live_files(store, "partials", options)
            per_partition: dict[tuple[tuple[str, str | None], ...], int] = {}
            for f in files:
                key = tuple(sorted(f.partition.items()))
                per_partition[key] = per_partition.get(key, 0) + 1
            crowded = {k: n for k, n in per_partition.items() if n > 1}
            merged = sum(crowded.values())
            if args.yes and crowded:
                if native:
                    path = storage.uri("partials").replace("`", "``")
                    spark.sql(f"OPTIMIZE delta.`{path}`").collect()
                else:
                    dt = open_table(storage.uri("partials"), storage.options)
                    dt.optimize.compact()
            verb = "compacted" if args.yes else "would compact"
            progress(f"compact: {verb} {merged} files in {len(crowded)} partitions", advance=True)
            facts["files compacted" if args.yes else "files to compact"] = merged
        if "checkpoint" in steps:
            done = []
            for table in ("partials", "control"):
                dt = open_table(storage.uri(table), storage.options)
                if args.yes:
                    dt.create_checkpoint()
                    dt.cleanup_metadata()
                done.append(f"{table}@{dt.version()}")
            verb = "wrote" if args.yes else "would write"
            progress(f"checkpoint: {verb} checkpoints {', '.join(done)}", advance=True)
            facts["checkpoints" if args.yes else "checkpoints to write"] = ", ".join(done)
        if "vacuum" in steps:
            removed = vacuum_store(
                spark,
                store,
                retention_hours=args.retention_hours,
                dry_run=not args.yes,
                storage_options=options,
                native=native,
            )
            verb = "deleted" if args.yes else "would delete"
            progress(
                f"vacuum: {verb} {len(removed)} files unreferenced for {args.retention_hours:g}h",
                advance=True,
            )
            facts["files vacuumed" if args.yes else "files to vacuum"] = len(removed)
        _, files_after = _live_files(store, "partials", options)
        facts["partials files after"] = len(files_after)
        facts["table versions"] = f"{before_versions} -> {backend.table_versions()}"
        facts["time"] = f"{progress.elapsed():.1f}s"
        if not args.yes:
            facts["next"] = "add --yes to apply"
        print_summary("statelake maintenance", facts)
        return 0
    finally:
        backend.close()
        if owned:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
