"""Soak: many threads writing, sealing and pruning for a while; memory and open files stay flat."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.soak import run_soak
from tests.reliability.conftest import FULL_LENGTH

pytestmark = pytest.mark.slow

RSS_TOLERANCE_MIB = 48.0  # trend over the second half of the run (warm-up excluded)
FD_TOLERANCE = 8


def test_soak_keeps_memory_and_open_files_flat(tmp_path: Path, seed: int) -> None:
    """16 threads for 45 s (10 min with STATELAKE_FULL_LENGTH=1): no RSS or fd growth trend."""
    report = run_soak(
        str(tmp_path / "store"),
        threads=16,
        duration_s=600 if FULL_LENGTH else 45,
        vnodes=64,
        seed=seed,
        sample_every_s=1.0,
    )
    assert report.writes > 1000, f"seed={seed}: too little work to judge: {report.writes}"
    assert report.seals > 0 and report.prunes > 0
    assert report.rss_growth_mib < RSS_TOLERANCE_MIB, f"seed={seed}: RSS grows: {report.samples}"
    assert report.fd_growth <= FD_TOLERANCE, f"seed={seed}: open files grow: {report.samples}"
