"""Reliability tests: seeds, scale, and the S3 server for crash/race runs.

Seeds: ``STATELAKE_SEED=<n>`` replays a run; otherwise a fresh seed is drawn
and printed (and every failure message names it).
Scale: ``STATELAKE_FULL_LENGTH=1`` runs the crash and soak tests at the
lengths of ``python -m jobs.soak`` instead of the scaled-down defaults.
"""

from __future__ import annotations

import os
import random

import pytest

FULL_LENGTH = os.environ.get("STATELAKE_FULL_LENGTH", "") not in ("", "0")


@pytest.fixture
def seed() -> int:
    """The run's seed, printed so a failure can be replayed with STATELAKE_SEED."""
    value = int(os.environ.get("STATELAKE_SEED") or random.randrange(2**31))
    print(f"seed={value} (replay: STATELAKE_SEED={value})")
    return value
