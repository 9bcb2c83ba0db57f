"""Crash test: real worker processes SIGKILLed at random instants, the store checked after.

The driver and worker live in ``jobs/soak.py`` (``python -m jobs.soak crash``
runs it at full length); here it runs scaled down. See that module for the
kill points and the checks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.soak import run_crash
from tests.reliability.conftest import FULL_LENGTH

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("layout", ["card", "packed"])
def test_sigkilled_workers_lose_nothing_acknowledged_and_never_double_seal(
    tmp_path: Path, seed: int, layout: str
) -> None:
    """SIGKILL at random instants (mid-commit, mid-MERGE) never loses an ack or double-seals."""
    epochs = 500 if FULL_LENGTH else (150 if layout == "card" else 80)
    report = run_crash(
        str(tmp_path / "store"),
        work_dir=tmp_path / "work",
        workers=3,
        vnodes=6,
        epochs=epochs,
        seed=seed,
        kill_every_s=2.0,
        kill_prob=0.01,
        time_limit_s=3600 if FULL_LENGTH else 120,
        layout=layout,
        echo=print,
    )
    kills = report.driver_kills + sum(report.self_kills.values())
    assert kills >= 5, f"seed={seed}: too few kills to mean anything: {report}"
    assert report.sealed_epochs >= epochs // 4, f"seed={seed}: little progress: {report}"
    assert report.audit.startswith(("statelake.audit ok", "direct")), report.audit


@pytest.mark.s3
def test_sigkilled_workers_on_s3_lose_nothing_acknowledged(
    tmp_path: Path, seed: int, s3_store: tuple[str, dict[str, str]]
) -> None:
    """The same crash run against the S3-compatible server (conditional-put commits)."""
    uri, options = s3_store
    report = run_crash(
        uri,
        storage_options=options,
        work_dir=tmp_path / "work",
        workers=3,
        vnodes=6,
        epochs=300 if FULL_LENGTH else 40,
        seed=seed,
        kill_every_s=5.0,  # a restart on S3 takes seconds: kill less often
        kill_prob=0.01,
        time_limit_s=3600 if FULL_LENGTH else 75,
        echo=print,
    )
    assert report.driver_kills + sum(report.self_kills.values()) >= 3, report
    assert report.sealed_epochs >= 5, f"seed={seed}: little progress: {report}"
