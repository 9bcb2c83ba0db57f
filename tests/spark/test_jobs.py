"""The jobs: --help, the pipeline as a real process (crash, resume), audit and maintenance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobs import audit, maintenance
from jobs.pipeline import expected_state, merged_state
from statelake import DeltaStateBackend
from statelake.delta._control import COMMIT, Marker, marker_table

from .conftest import StoreFactory

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _job(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("name", ["pipeline", "maintenance", "audit"])
def test_every_job_explains_itself_with_help(name: str) -> None:
    """python -m jobs.<name> --help exits 0 and describes its options."""
    done = _job(f"jobs.{name}", "--help", timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage: python -m jobs." + name in done.stdout
    assert "--store" in done.stdout


def test_pipeline_resumes_after_a_crash_with_state_equal_to_a_recomputation(
    tmp_path: Path,
) -> None:
    """Crash mid-epoch, restart: exit 0, epochs go on, state equals an exactly-once recount."""
    data = str(tmp_path / "data")
    common = ["--data-dir", data, "--rows-per-batch", "200", "--keys", "50", "--vnodes", "4"]
    first = _job("jobs.pipeline", *common, "--epochs", "3", "--keep", "2", "--crash-after", "3")
    assert first.returncode == 17, first.stdout + first.stderr
    assert "epoch 1 sealed" in first.stderr and "simulating a crash" in first.stderr
    second = _job("jobs.pipeline", *common, "--epochs", "2", "--keep", "2")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resuming after sealed epoch 1" in second.stderr
    assert "epoch 2 sealed" in second.stderr and "epoch 3 sealed" in second.stderr
    assert "state matches recomputation : yes" in second.stdout
    assert "Time travel: pruned epoch" in second.stdout
    b = DeltaStateBackend(os.path.join(data, "store"), instance_id="check", vnode_capacity=None)
    try:
        assert b.latest_sealed_epoch() == 3
        assert b.committed_epochs() == [2, 3]
        assert b.authoritative_version() == 2  # the restart raised the fence
        state = merged_state(b.read_epoch(3))
        events = sum(v[0] for v in state.values())
        assert events == 4 * 200
        assert state == expected_state(events, 50)
    finally:
        b.close()


def test_audit_detects_a_planted_gap_and_double_seal(
    spark: Any, make_store: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clean store audits OK (exit 0); a deleted partial and a second marker exit 1."""
    uri = make_store("card", epochs=3, vnodes=4)
    assert audit.main(["--store", uri, "--json"]) == 0
    clean = json.loads(capsys.readouterr().out)
    assert clean["ok"] and clean["facts"]["markers"] == 3
    from deltalake import DeltaTable, write_deltalake

    DeltaTable(os.path.join(uri, "partials")).delete("epoch = 1 AND vnode = 2")
    first = DeltaStateBackend(uri, instance_id="x", vnode_capacity=None)
    marker = first.commit_markers()[2][0]
    first.close()
    twin = Marker(
        **{
            **{f: getattr(marker, f) for f in marker.__slots__},
            "committer": "intruder",
            "token": "t2",
        }
    )
    assert twin.kind == COMMIT
    write_deltalake(os.path.join(uri, "control"), marker_table([twin]), mode="append")
    assert audit.main(["--store", uri, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["gap"] == 1 and report["counts"]["double_seal"] == 1
    gap = next(a for a in report["anomalies"] if a["kind"] == "gap")
    assert (gap["epoch"], gap["vnode"]) == (1, 2)


def test_maintenance_changes_nothing_without_yes_and_prunes_and_vacuums_with_it(
    spark: Any, make_store: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dry run only reports; --yes prunes old epochs, checkpoints and vacuums."""
    uri = make_store("card", epochs=4, vnodes=2, prune_before=1)
    args = ["--store", uri, "--keep-last", "2", "--retention-hours", "0"]
    before = sorted(p for p in Path(uri).rglob("*.parquet"))
    assert maintenance.main(args) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "epochs to prune       : 1" in out
    assert sorted(p for p in Path(uri).rglob("*.parquet")) == before
    assert maintenance.main([*args, "--yes"]) == 0
    out = capsys.readouterr().out
    assert "epochs pruned" in out
    b = DeltaStateBackend(uri, instance_id="check", vnode_capacity=None)
    try:
        assert b.committed_epochs() == [2, 3]
        assert b.read_epoch(3) == {0: b"e3v0", 1: b"e3v1"}
    finally:
        b.close()
    data_files = [p for p in Path(uri, "partials").rglob("*.parquet") if "_delta_log" not in str(p)]
    assert len(data_files) == 4  # epochs 0 and 1 vacuumed away
