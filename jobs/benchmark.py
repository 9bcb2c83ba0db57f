"""Benchmark job: statelake against baselines measured in the same run.

Every figure is printed next to a baseline measured moments before or after
on the same machine and data, because absolute numbers on a shared 2-core
machine wander; the ratios are what the README quotes.

    python -m jobs.benchmark                 # the full run (several minutes)
    python -m jobs.benchmark --quick         # a small smoke run
    python -m jobs.benchmark --json out.json # also write machine-readable results

Sections: write throughput (raw file-per-partial baseline, naive one
``write_deltalake`` append per partial, statelake card and packed layouts,
the batch API), ``epoch_complete`` latency, ``read_partial`` and full-epoch
recovery on a store with a long history, cold open after many commits, and a
Spark history query through the statelake data source against
``spark.read.parquet`` over the same files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from jobs._common import Progress, print_rows, print_summary

VNODES = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteResult:
    method: str
    threads: int
    payload_bytes: int
    partials: int
    seconds: float
    failed: int
    commits: int | None

    @property
    def per_second(self) -> float:
        return (self.partials - self.failed) / self.seconds if self.seconds else 0.0


def _run_threads(
    threads: int, work: Callable[[int, int], None], items: Callable[[int], range]
) -> tuple[float, int]:
    """Run ``work(thread, item)`` for each thread's ``items(thread)``; (seconds, failures)."""
    failures = [0] * threads
    barrier = threading.Barrier(threads + 1)

    def run(t: int) -> None:
        barrier.wait()
        for i in items(t):
            try:
                work(t, i)
            except Exception:
                failures[t] += 1

    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    barrier.wait()
    start = time.perf_counter()
    for th in pool:
        th.join()
    return time.perf_counter() - start, sum(failures)


def _share(threads: int, total: int) -> Callable[[int], range]:
    """Items 0..total-1 dealt round-robin over the threads."""
    return lambda t: range(t, total, threads)


def bench_raw(root: str, threads: int, total: int, payload: bytes) -> WriteResult:
    """Baseline: one object per partial through the same storage layer, no table at all."""
    from statelake.delta._storage import Storage

    storage = Storage(root)

    def work(_t: int, i: int) -> None:
        epoch, vnode = divmod(i, VNODES)
        storage.write(f"raw/epoch={epoch}/vnode={vnode}/part-{uuid.uuid4().hex}.bin", payload)

    seconds, failed = _run_threads(threads, work, _share(threads, total))
    return WriteResult(
        method="raw files",
        threads=threads,
        payload_bytes=len(payload),
        partials=total,
        seconds=seconds,
        failed=failed,
        commits=None,
    )


def bench_naive(root: str, threads: int, total: int, payload: bytes) -> WriteResult:
    """Baseline: one ``write_deltalake`` append (one Delta commit) per partial."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from statelake import _schemas

    uri = os.path.join(root, "naive")
    schema = _schemas.arrow_schema(_schemas.PARTIALS)
    DeltaTable.create(uri, schema=schema, partition_by=["epoch", "vnode"])

    def work(_t: int, i: int) -> None:
        epoch, vnode = divmod(i, VNODES)
        row = pa.table(
            {
                "epoch": [epoch],
                "vnode": pa.array([vnode], pa.int32()),
                "assignment_version": [0],
                "writer": ["naive"],
                "written_at": pa.array([time.time_ns() // 1000], pa.int64()).cast(
                    pa.timestamp("us", tz="UTC")
                ),
                "payload_size": [len(payload)],
                "payload_crc32": [0],
                "payload": [payload],
            },
            schema=schema,
        )
        write_deltalake(uri, row, mode="append")

    seconds, failed = _run_threads(threads, work, _share(threads, total))
    commits = DeltaTable(uri).version()
    return WriteResult(
        method="naive append",
        threads=threads,
        payload_bytes=len(payload),
        partials=total,
        seconds=seconds,
        failed=failed,
        commits=commits,
    )


def bench_statelake(
    root: str, layout: str, threads: int, total: int, payload: bytes, *, batch: bool = False
) -> WriteResult:
    """statelake's write_partial (or write_partials per thread and epoch with ``batch``)."""
    from statelake import DeltaStateBackend

    backend = DeltaStateBackend(
        os.path.join(root, f"{layout}-{threads}-{batch}-{len(payload)}"),
        instance_id="bench",
        vnode_capacity=VNODES,
        layout=layout,
    )
    start_version = backend.table_versions()["partials"]
    if batch:
        # Each thread owns a slice of the vnodes and writes all of its slice per call.
        epochs = max(1, total // VNODES)

        def work(t: int, i: int) -> None:
            mine = {v: payload for v in range(t, VNODES, threads)}
            backend.write_partials(i, 0, mine)

        seconds, failed_calls = _run_threads(threads, work, lambda _t: range(epochs))
        partials = epochs * VNODES
        failed = failed_calls
    else:

        def work(_t: int, i: int) -> None:
            epoch, vnode = divmod(i, VNODES)
            backend.write_partial(vnode, epoch, 0, payload)

        seconds, failed = _run_threads(threads, work, _share(threads, total))
        partials = total
    commits = backend.table_versions()["partials"] - start_version
    backend.close()
    name = f"statelake {layout}" + (" batch" if batch else "")
    return WriteResult(
        method=name,
        threads=threads,
        payload_bytes=len(payload),
        partials=partials,
        seconds=seconds,
        failed=failed,
        commits=commits,
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_epoch_complete(root: str, epochs: int) -> dict[str, float]:
    """Latency of sealing an epoch of 256 vnodes (partials already durable)."""
    from statelake import DeltaStateBackend

    backend = DeltaStateBackend(
        os.path.join(root, "seal"), instance_id="coord", vnode_capacity=VNODES
    )
    vnodes = list(range(VNODES))
    latencies = []
    for epoch in range(epochs):
        backend.write_partials(epoch, 0, {v: b"x" * 64 for v in vnodes})
        start = time.perf_counter()
        assert backend.epoch_complete(epoch, vnodes)
        latencies.append((time.perf_counter() - start) * 1000)
    backend.close()
    return {
        "p50_ms": _pct(latencies, 0.5),
        "p99_ms": _pct(latencies, 0.99),
        "samples": len(latencies),
    }


def bench_history(
    root: str, layout: str, epochs: int, vnodes: int, reads: int, progress: Progress
) -> dict[str, float]:
    """read_partial and full-epoch recovery on a store with ``epochs`` sealed epochs."""
    from statelake import DeltaStateBackend

    uri = os.path.join(root, f"history-{layout}")
    backend = DeltaStateBackend(uri, instance_id="hist", vnode_capacity=vnodes, layout=layout)
    listed = list(range(vnodes))
    payload = os.urandom(4096)
    for epoch in range(epochs):
        backend.write_partials(epoch, 0, {v: payload for v in listed})
        backend.epoch_complete(epoch, listed)
        if epoch % 200 == 199:
            progress(f"  history ({layout}): {epoch + 1}/{epochs} epochs sealed")
    import random

    rng = random.Random(7)
    warm = []
    for _ in range(reads):
        vnode, epoch = rng.randrange(vnodes), rng.randrange(epochs)
        start = time.perf_counter()
        assert backend.read_partial(vnode, epoch) == payload
        warm.append((time.perf_counter() - start) * 1000)
    latest = backend.latest_sealed_epoch()
    assert latest is not None
    recovery = []
    for _ in range(5):
        start = time.perf_counter()
        assert len(backend.read_epoch(latest)) == vnodes
        recovery.append((time.perf_counter() - start) * 1000)
    baseline = []
    # Baseline for reads: open and read one raw file of the same size.
    raw = os.path.join(root, "raw-read.bin")
    with open(raw, "wb") as f:
        f.write(payload)
    for _ in range(reads):
        start = time.perf_counter()
        with open(raw, "rb") as f:
            f.read()
        baseline.append((time.perf_counter() - start) * 1000)
    backend.close()
    return {
        "epochs": epochs,
        "vnodes": vnodes,
        "read_p50_ms": _pct(warm, 0.5),
        "read_p99_ms": _pct(warm, 0.99),
        "raw_file_read_p50_ms": _pct(baseline, 0.5),
        "recovery_ms": statistics.median(recovery),
    }


def bench_cold_open(root: str, commits: int, progress: Progress) -> dict[str, float]:
    """Open time of a store whose partials table has ``commits`` commits of history."""
    from statelake import DeltaStateBackend

    uri = os.path.join(root, "long-log")
    backend = DeltaStateBackend(uri, instance_id="w", vnode_capacity=16)
    for i in range(commits):
        backend.write_partial(i % 16, i // 16, 0, b"p")
        if i % 2000 == 1999:
            progress(f"  cold open: {i + 1}/{commits} commits")
    version = backend.table_versions()["partials"]
    backend.close()
    opens = []
    for _ in range(5):
        start = time.perf_counter()
        b = DeltaStateBackend(uri, instance_id="reader", vnode_capacity=None)
        opens.append((time.perf_counter() - start) * 1000)
        b.close()
    log_files = len(
        [f for f in os.listdir(os.path.join(uri, "partials", "_delta_log")) if f.endswith(".json")]
    )
    return {"commits": version, "open_ms": statistics.median(opens), "json_log_files": log_files}


def _ratio(result: dict[str, Any], baseline: dict[str, Any]) -> str:
    return f"{result['per_second'] / baseline['per_second']:.2f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run for tests")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--dir", help="work folder (default: a temporary folder, removed after)")
    parser.add_argument("--skip-spark", action="store_true", help="skip the Spark history query")
    parser.add_argument("--skip-naive", action="store_true", help="skip the slow naive baseline")
    args = parser.parse_args(argv)

    quick = args.quick
    root = args.dir or tempfile.mkdtemp(prefix="statelake-bench-")
    os.makedirs(root, exist_ok=True)
    progress = Progress(total=6)
    results: dict[str, Any] = {"quick": quick, "machine": {"cpus": os.cpu_count()}}
    try:
        # 1. Write throughput.
        progress("write throughput", advance=True)
        writes: list[WriteResult] = []
        thread_counts = (1, 8, 32)
        sizes = (4096, 65536)
        for size in sizes:
            payload = os.urandom(size)
            total = (256 if quick else 2048) if size == 4096 else (128 if quick else 512)
            for threads in thread_counts:
                writes.append(bench_raw(root, threads, total, payload))
                writes.append(bench_statelake(root, "card", threads, total, payload))
                writes.append(bench_statelake(root, "packed", threads, total, payload))
                writes.append(bench_statelake(root, "packed", threads, total, payload, batch=True))
                if not args.skip_naive:
                    naive_total = 16 if quick else (64 if threads == 1 else 128)
                    writes.append(
                        bench_naive(
                            os.path.join(root, f"n{size}-{threads}"), threads, naive_total, payload
                        )
                    )
                progress(f"  {size // 1024} KiB, {threads} threads done")
        rows = []
        for w in writes:
            raw = next(
                r
                for r in writes
                if r.method == "raw files"
                and r.threads == w.threads
                and r.payload_bytes == w.payload_bytes
            )
            rows.append(
                [
                    f"{w.payload_bytes // 1024} KiB",
                    w.threads,
                    w.method,
                    w.partials,
                    f"{w.per_second:,.0f}",
                    f"{w.per_second / raw.per_second:.2f}x",
                    w.failed,
                    "" if w.commits is None else w.commits,
                ]
            )
        print_rows(
            "Write throughput (partials/s; ratio against raw files, same threads and size)",
            ["size", "threads", "method", "partials", "per s", "vs raw", "failed", "commits"],
            rows,
        )
        results["writes"] = [{**asdict(w), "per_second": w.per_second} for w in writes]

        # 2. epoch_complete.
        progress("epoch_complete latency, 256 vnodes", advance=True)
        seal = bench_epoch_complete(root, 20 if quick else 100)
        print_rows(
            "epoch_complete, 256 vnodes (ms)",
            ["p50", "p99", "samples"],
            [[f"{seal['p50_ms']:.1f}", f"{seal['p99_ms']:.1f}", seal["samples"]]],
        )
        results["epoch_complete"] = seal

        # 3. Reads on a long history.
        progress("reads on a long history", advance=True)
        history = {}
        for layout in ("card", "packed"):
            history[layout] = bench_history(
                root, layout, 50 if quick else 1000, 16, 200 if quick else 2000, progress
            )
        print_rows(
            "read_partial and full-epoch recovery (ms)",
            [
                "layout",
                "epochs",
                "vnodes",
                "read p50",
                "read p99",
                "raw file read p50",
                "recovery (read_epoch)",
            ],
            [
                [
                    k,
                    h["epochs"],
                    h["vnodes"],
                    f"{h['read_p50_ms']:.2f}",
                    f"{h['read_p99_ms']:.2f}",
                    f"{h['raw_file_read_p50_ms']:.3f}",
                    f"{h['recovery_ms']:.1f}",
                ]
                for k, h in history.items()
            ],
        )
        results["history"] = history

        # 4. Cold open.
        progress("cold open after many commits", advance=True)
        cold = bench_cold_open(root, 300 if quick else 10_000, progress)
        print_rows(
            "Cold open",
            ["commits", "open (ms)", "JSON log files left"],
            [[cold["commits"], f"{cold['open_ms']:.1f}", cold["json_log_files"]]],
        )
        results["cold_open"] = cold

        # 5. Spark history query.
        progress("Spark history query", advance=True)
        if args.skip_spark:
            results["spark"] = {"skipped": "--skip-spark"}
        else:
            try:
                from jobs import _spark_bench
            except ImportError as exc:
                results["spark"] = {"skipped": f"Spark benchmark unavailable: {exc}"}
            else:
                spark = _spark_bench.run(n_rows=10_000 if quick else 100_000)
                results["spark"] = spark
                print_rows("Spark history query", list(spark), [list(spark.values())])

        progress("done", advance=True)
        card32 = next(
            r
            for r in results["writes"]
            if r["method"] == "statelake card" and r["threads"] == 32 and r["payload_bytes"] == 4096
        )
        raw32 = next(
            r
            for r in results["writes"]
            if r["method"] == "raw files" and r["threads"] == 32 and r["payload_bytes"] == 4096
        )
        packed32 = next(
            r
            for r in results["writes"]
            if r["method"] == "statelake packed"
            and r["threads"] == 32
            and r["payload_bytes"] == 4096
        )
        failed = sum(w["failed"] for w in results["writes"] if w["method"].startswith("statelake"))
        summary = {
            "card, 32 threads, 4 KiB vs raw": _ratio(card32, raw32),
            "packed, 32 threads, 4 KiB vs raw": _ratio(packed32, raw32),
            "failed statelake calls": failed,
            "epoch_complete p50": f"{seal['p50_ms']:.1f} ms",
            "read_partial p50 (card)": f"{history['card']['read_p50_ms']:.2f} ms",
            "cold open": f"{cold['open_ms']:.1f} ms after {cold['commits']} commits",
        }
        results["summary"] = summary
        print_summary("statelake benchmark", summary)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
            print(f"\nJSON written to {args.json}")
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
