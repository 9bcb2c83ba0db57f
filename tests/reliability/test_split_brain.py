"""Split brain: a leader deposed by a fence raise while it writes and seals, in another process."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from jobs.soak import read_ledgers_file
from statelake import DeltaStateBackend
from tests.reliability._procs import finish, start

pytestmark = pytest.mark.slow

VNODES = 4


def _wait_for(path: Path, event: str, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and sum(e.get("ev") == event for e in read_ledgers_file(path)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path.name}: fewer than {count} {event!r} events after {timeout}s")


def _split_brain(tmp_path: Path, uri: str, options: dict[str, str], seed: int) -> None:
    base: dict[str, Any] = {"uri": uri, "storage_options": options, "vnodes": VNODES, "seed": seed}
    DeltaStateBackend(
        uri, instance_id="setup", vnode_capacity=VNODES, storage_options=options
    ).close()
    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    old = start(
        "leader",
        {
            **base,
            "id": "leader-A",
            "version": 1,
            "ledger": str(a_log),
            "first_epoch": 1,
            "seconds": 25,
        },
    )
    _wait_for(a_log, "sealed", 3)  # A is in full swing: writing and sealing
    time.sleep(seed % 100 / 200)  # land the fence raise at a seeded instant of A's loop
    new = start(
        "leader", {**base, "id": "leader-B", "version": 2, "ledger": str(b_log), "seconds": 12}
    )
    a_out, b_out = finish(old), finish(new)
    a_ev, b_ev = read_ledgers_file(a_log), read_ledgers_file(b_log)
    fenced_at = next(e["t"] for e in b_ev if e["ev"] == "fenced")
    owns_from = next(e["epoch"] for e in b_ev if e["ev"] == "owns_from")
    b_written = {(e["vnode"], e["epoch"]) for e in b_ev if e["ev"] == "write"}
    b_sealed = {e["epoch"] for e in b_ev if e["ev"] == "sealed"}
    a_sealed = {e["epoch"]: e for e in a_ev if e["ev"] == "sealed"}
    assert b_out["counts"]["sealed"] > 0, (seed, b_out)
    assert a_out["counts"]["stale"] > 0, f"seed={seed}: A was never told it is stale: {a_out}"

    check = DeltaStateBackend(
        uri, instance_id="checker", vnode_capacity=None, storage_options=options, create=False
    )
    markers = check.commit_markers()
    # 1. A's writes never become what read_partial returns where B wrote.
    for vnode, epoch in sorted(b_written):
        got = check.read_partial(vnode, epoch)
        assert got == f"leader-B:{vnode}:{epoch}".encode(), (
            f"seed={seed}: vnode {vnode} epoch {epoch} reads {got!r} after B wrote it"
        )
    # 2. A never seals after the fence moved past it.
    for epoch, ev in a_sealed.items():
        assert ev["started"] < fenced_at, (
            f"seed={seed}: A sealed epoch {epoch} in a call started after the fence was raised"
        )
        assert epoch < owns_from, f"seed={seed}: A sealed epoch {epoch} owned by B (>= {owns_from})"
    for epoch, ms in markers.items():
        assert len(ms) == 1, f"seed={seed}: epoch {epoch} has {len(ms)} markers"
        m = ms[0]
        if m.committer == "leader-A":
            assert m.assignment_version <= 1, f"seed={seed}: A sealed epoch {epoch} under fence 2"
        if epoch >= owns_from:
            assert m.committer == "leader-B", f"seed={seed}: epoch {epoch} sealed by {m.committer}"
            for vnode in range(VNODES):
                assert check.read_partial(vnode, epoch) == f"leader-B:{vnode}:{epoch}".encode()
    assert b_sealed <= set(markers), f"seed={seed}: B reported seals the store lacks"
    check.close()
    print(f"seed={seed} A={a_out} B={b_out} B owns from epoch {owns_from}")


def test_deposed_leader_never_overrides_or_seals_after_the_fence(tmp_path: Path, seed: int) -> None:
    """Leader A (v1) keeps writing and sealing while B (v2) raises the fence and takes over."""
    _split_brain(tmp_path, str(tmp_path / "store"), {}, seed)


@pytest.mark.s3
def test_deposed_leader_never_overrides_or_seals_after_the_fence_on_s3(
    tmp_path: Path, seed: int, s3_store: tuple[str, dict[str, str]]
) -> None:
    """The same deposition on the S3-compatible server."""
    uri, options = s3_store
    _split_brain(tmp_path, uri, options, seed)
