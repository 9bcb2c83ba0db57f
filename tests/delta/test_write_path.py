"""Group commit, the bounded log and the benchmark job."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from statelake import ConflictingPartial, DeltaStateBackend, StaleVersion, TableSettings

ROOT = Path(__file__).resolve().parents[2]


def test_errors_reach_only_the_calls_they_concern(store_uri: str) -> None:
    """In one group commit, a conflicting and a stale call fail; every other call commits."""
    backend = DeltaStateBackend(store_uri, instance_id="w", vnode_capacity=64)
    backend.write_partial(0, 1, 1, b"original")
    backend.set_authoritative_version(1)
    outcomes: dict[str, object] = {}
    barrier = threading.Barrier(35)  # 34 callers and this thread

    def call(name: str, vnode: int, version: int, data: bytes) -> None:
        barrier.wait()
        try:
            backend.write_partial(vnode, 1, version, data)
            outcomes[name] = "ok"
        except Exception as exc:
            outcomes[name] = type(exc)

    threads = [
        threading.Thread(target=call, args=(f"good{v}", v, 1, b"fine")) for v in range(1, 33)
    ]
    threads.append(threading.Thread(target=call, args=("conflict", 0, 1, b"different")))
    threads.append(threading.Thread(target=call, args=("stale", 40, 0, b"old")))
    for t in threads:
        t.start()
    barrier.wait()
    for t in threads:
        t.join()
    assert outcomes.pop("conflict") is ConflictingPartial
    assert outcomes.pop("stale") is StaleVersion
    assert set(outcomes.values()) == {"ok"}
    assert backend.read_partial(0, 1) == b"original"
    assert backend.read_partial(40, 1) is None
    assert all(backend.read_partial(v, 1) == b"fine" for v in range(1, 33))
    backend.close()


def test_concurrent_identical_writes_store_one_row(store_uri: str) -> None:
    """Eight threads replaying the same partial at once leave exactly one stored row."""
    backend = DeltaStateBackend(store_uri, instance_id="w", vnode_capacity=4)
    barrier = threading.Barrier(8)

    def replay() -> None:
        barrier.wait()
        backend.write_partial(2, 3, 0, b"same bytes")

    threads = [threading.Thread(target=replay) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(backend._index.rows(3, 2)) == 1
    assert backend.read_partial(2, 3) == b"same bytes"
    backend.close()


@pytest.mark.parametrize("layout", ["card", "packed"])
def test_log_stays_small_with_checkpoints_and_cleanup(store_uri: str, layout: str) -> None:
    """Checkpoints every N commits and expired-log cleanup bound the JSON log a cold open reads."""
    settings = TableSettings(checkpoint_interval=20, log_retention_hours=0)
    backend = DeltaStateBackend(
        store_uri, instance_id="w", vnode_capacity=4, layout=layout, settings=settings
    )
    for i in range(130):
        backend.write_partial(i % 4, i, 0, b"x")
    backend.close()
    log_dir = Path(store_uri) / "partials" / "_delta_log"
    json_files = sorted(log_dir.glob("*.json"))
    assert list(log_dir.glob("*.checkpoint.parquet"))
    assert len(json_files) <= 25, [p.name for p in json_files][:5]
    reopened = DeltaStateBackend(store_uri, instance_id="r", vnode_capacity=None)
    assert reopened.read_partial(1, 129) == b"x" and reopened.read_partial(2, 2) == b"x"
    reopened.close()


@pytest.mark.slow
def test_benchmark_job_prints_ratios_and_writes_json(tmp_path: Path) -> None:
    """The benchmark's smoke run reports every section, ratios to baselines, and no failed calls."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.benchmark", "--quick", "--skip-spark", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "vs raw" in proc.stdout and "epoch_complete" in proc.stdout
    results = json.loads(out.read_text())
    methods = {w["method"] for w in results["writes"]}
    assert {"raw files", "naive append", "statelake card", "statelake packed"} <= methods
    assert all(w["failed"] == 0 for w in results["writes"] if w["method"].startswith("statelake"))
    assert results["epoch_complete"]["samples"] > 0
    assert set(results["history"]) == {"card", "packed"}
    assert results["cold_open"]["commits"] >= 300
