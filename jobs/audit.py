"""Audit a store with Spark SQL: every sealed epoch must have every vnode's partial, valid.

::

    python -m jobs.audit                         # the pipeline's store, ./statelake-data/store
    python -m jobs.audit --store s3://bucket/app -o aws_region=eu-west-1 --json

The anomaly kinds are those of ``statelake verify`` (:mod:`statelake.audit`),
computed here as Spark SQL over the ``statelake`` data source views, so the
audit scales with the cluster rather than one process:

* ``gap``: a sealed epoch lacks a partial for a vnode its marker lists;
* ``stale``: a sealed epoch's effective partial (highest assignment version)
  is below the fence recorded in its marker;
* ``conflict``: different CRC-32 (or size) at the same epoch/vnode/version;
* ``duplicate``: identical rows repeated at the same epoch/vnode/version;
* ``double_seal``: more than one commit marker for one epoch;
* ``unsealed``: partials of an epoch with no marker, older than the latest
  sealed epoch;
* ``corrupt``: a payload whose CRC-32 does not match its ``payload_crc32``,
  or a data file that cannot be read.

Exit status: 0 when clean (warnings allowed), 1 when any error kind was
found (gap, stale, conflict, double_seal, corrupt), 2 on a usage or storage
error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

if __package__ in (None, ""):  # spark-submit jobs/audit.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs._common import Progress, add_store_arguments, print_rows, print_summary, storage_options

# The vocabulary and the exit rule are the library audit's (`statelake verify`): one source.
from statelake.audit import ERROR_KINDS, KINDS

__all__ = ["CHECKS", "ERROR_KINDS", "KINDS", "main", "run_audit"]

# Each check returns rows (epoch, vnode, detail); views come from statelake.spark.create_views.
CHECKS: dict[str, str] = {
    "gap": """
        WITH listed AS (SELECT epoch, explode(vnodes) AS vnode FROM statelake_commits)
        SELECT l.epoch, l.vnode,
               concat('sealed epoch lists vnode ', l.vnode, ' but has no partial for it') AS detail
        FROM listed l
        LEFT ANTI JOIN (SELECT DISTINCT epoch, vnode FROM statelake_partials) p
          ON p.epoch = l.epoch AND p.vnode = l.vnode
    """,
    "stale": """
        WITH listed AS (
          SELECT epoch, assignment_version AS fence, explode(vnodes) AS vnode
          FROM statelake_commits
        )
        SELECT l.epoch, l.vnode,
               concat('effective partial at assignment version ', p.top,
                      ' < fence ', l.fence, ' recorded at sealing') AS detail
        FROM listed l
        JOIN (SELECT epoch, vnode, max(assignment_version) AS top
              FROM statelake_partials GROUP BY epoch, vnode) p
          ON p.epoch = l.epoch AND p.vnode = l.vnode
        WHERE p.top < l.fence
    """,
    "conflict": """
        SELECT epoch, vnode,
               concat(count(DISTINCT payload_crc32, payload_size),
                      ' different payloads at assignment version ', assignment_version) AS detail
        FROM statelake_partials GROUP BY epoch, vnode, assignment_version
        HAVING count(DISTINCT payload_crc32, payload_size) > 1
    """,
    "duplicate": """
        SELECT epoch, vnode,
               concat(count(*), ' identical rows at assignment version ', assignment_version)
                 AS detail
        FROM statelake_partials
        GROUP BY epoch, vnode, assignment_version, payload_crc32, payload_size
        HAVING count(*) > 1
    """,
    "double_seal": """
        SELECT epoch, CAST(NULL AS INT) AS vnode,
               concat(count(*), ' commit markers, committers ',
                      array_join(sort_array(collect_list(committer)), ', ')) AS detail
        FROM statelake_commits GROUP BY epoch HAVING count(*) > 1
    """,
    "unsealed": """
        SELECT p.epoch, CAST(NULL AS INT) AS vnode,
               concat(count(*), ' partials but no commit marker; latest sealed epoch is ',
                      max(s.latest)) AS detail
        FROM statelake_partials p
        CROSS JOIN (SELECT max(epoch) AS latest FROM statelake_commits) s
        LEFT ANTI JOIN statelake_commits c ON c.epoch = p.epoch
        WHERE p.epoch < s.latest
        GROUP BY p.epoch
    """,
    "corrupt": """
        SELECT epoch, vnode,
               concat('payload CRC-32 ', crc32(payload), ' != stored ', payload_crc32,
                      ' at assignment version ', assignment_version) AS detail
        FROM statelake_partials
        WHERE crc32(payload) != payload_crc32 OR length(payload) != payload_size
    """,
}


def run_audit(
    spark: Any,
    store: str,
    *,
    storage_options: dict[str, str] | None = None,
    version: int | None = None,
    timestamp: str | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Run every check; ``(anomalies by kind, facts about the store)``."""
    from statelake.spark import create_views

    say = progress or (lambda *_a, **_k: None)
    create_views(
        spark, store, storage_options=storage_options, version=version, timestamp=timestamp
    )
    # Cache the two small scans: every check reads them.
    spark.sql("CACHE TABLE statelake_partials")
    spark.sql("CACHE TABLE statelake_control")
    facts_row = spark.sql(
        "SELECT (SELECT count(*) FROM statelake_partials) AS partials, "
        "(SELECT count(DISTINCT epoch) FROM statelake_partials) AS epochs, "
        "(SELECT count(*) FROM statelake_commits) AS markers, "
        "(SELECT max(epoch) FROM statelake_commits) AS latest_sealed, "
        "(SELECT max(assignment_version) FROM statelake_control WHERE kind = 'fence') AS fence"
    ).first()
    facts = facts_row.asDict() if facts_row is not None else {}
    found: dict[str, list[dict[str, Any]]] = {}
    for kind in KINDS:
        say(f"check {kind}", advance=True)
        rows = spark.sql(CHECKS[kind]).orderBy("epoch", "vnode").collect()
        found[kind] = [
            {"kind": kind, "epoch": r["epoch"], "vnode": r["vnode"], "detail": r["detail"]}
            for r in rows
        ]
    spark.sql("UNCACHE TABLE IF EXISTS statelake_partials")
    spark.sql("UNCACHE TABLE IF EXISTS statelake_control")
    return found, facts


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jobs.audit",
        description="Audit a statelake store with Spark SQL (gaps, stale, conflicting, "
        "duplicate and unsealed partials, double seals). Exit 1 on errors.",
    )
    add_store_arguments(p)
    p.add_argument("--version", type=int, help="audit both tables as of this table version")
    p.add_argument("--timestamp", help="audit as of this instant (ISO-8601, UTC if naive)")
    p.add_argument("--limit", type=int, default=10, help="anomalies listed per kind")
    p.add_argument("--json", action="store_true", help="print one JSON report on stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    options = storage_options(args)
    progress = Progress(total=len(KINDS), stream=sys.stderr)
    store = args.store if "://" in args.store else os.path.abspath(args.store)
    if "://" not in store and not os.path.isdir(os.path.join(store, "partials")):
        print(f"no statelake store at {store} (run python -m jobs.pipeline first)", file=sys.stderr)
        return 2
    progress(f"starting local Spark; auditing {store}")
    from pyspark.sql import SparkSession

    from statelake.spark import local_session

    owned = SparkSession.getActiveSession() is None  # a caller's session is left running
    spark = local_session("statelake-audit")
    try:
        try:
            found, facts = run_audit(
                spark,
                store,
                storage_options=options,
                version=args.version,
                timestamp=args.timestamp,
                progress=progress,
            )
        except Exception as exc:
            lines = [line for line in str(exc).splitlines() if line.strip()]
            text = lines[0] if lines else type(exc).__name__
            found = {k: [] for k in KINDS}
            found["corrupt"] = [
                {"kind": "corrupt", "epoch": None, "vnode": None, "detail": f"cannot read: {text}"}
            ]
            facts = {}
        errors = sum(len(found[k]) for k in ERROR_KINDS)
        warnings = sum(len(v) for k, v in found.items() if k not in ERROR_KINDS)
        if args.json:
            print(
                json.dumps(
                    {
                        "store": store,
                        "facts": facts,
                        "anomalies": [a for k in KINDS for a in found[k]],
                        "counts": {k: len(found[k]) for k in KINDS},
                        "errors": errors,
                        "warnings": warnings,
                        "ok": errors == 0,
                    },
                    default=str,
                )
            )
        else:
            for kind in KINDS:
                if found[kind]:
                    severity = "error" if kind in ERROR_KINDS else "warning"
                    print_rows(
                        f"{kind} ({severity}): {len(found[kind])}",
                        ["epoch", "vnode", "detail"],
                        [(a["epoch"], a["vnode"], a["detail"]) for a in found[kind][: args.limit]],
                    )
            print_summary(
                "statelake audit",
                {
                    "store": store,
                    **{k: v for k, v in facts.items()},
                    **{f"anomalies: {k}": len(found[k]) for k in KINDS},
                    "verdict": "OK" if errors == 0 else f"FAILED ({errors} errors)",
                    "time": f"{progress.elapsed():.1f}s",
                },
            )
        return 1 if errors else 0
    finally:
        if owned:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
