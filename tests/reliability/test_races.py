"""Multi-process races on one store: exactly one winner per epoch, on disk and on S3."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from statelake import DeltaStateBackend
from tests.reliability._procs import finish, start

pytestmark = pytest.mark.slow

RACERS = 4
EPOCHS = 12
VNODES = 4


def _race(uri: str, options: dict[str, str]) -> None:
    prep = DeltaStateBackend(
        uri, instance_id="writer", vnode_capacity=VNODES, storage_options=options
    )
    for epoch in range(1, EPOCHS + 1):
        prep.write_partials(epoch, 1, {v: f"{v}@{epoch}".encode() for v in range(VNODES)})
    prep.close()
    cfg = {
        "uri": uri,
        "storage_options": options,
        "vnodes": VNODES,
        "epochs": list(range(1, EPOCHS + 1)),
        "start_at": time.time() + 8,
    }
    procs = [start("racer", {**cfg, "id": f"racer-{i}"}) for i in range(RACERS)]
    results = [finish(p) for p in procs]
    check = DeltaStateBackend(
        uri, instance_id="checker", vnode_capacity=None, storage_options=options, create=False
    )
    markers = check.commit_markers()
    check.close()
    for epoch in range(1, EPOCHS + 1):
        outcomes = {r["id"]: r["results"][str(epoch)] for r in results}
        winners = [i for i, o in outcomes.items() if o == "won"]
        assert len(winners) == 1, f"epoch {epoch}: {outcomes}"
        losers = {i: o for i, o in outcomes.items() if i != winners[0]}
        assert all(o == f"lost:{winners[0]}" for o in losers.values()), (
            f"epoch {epoch}: every loser must get SplitBrainCommit naming the winner: {outcomes}"
        )
        assert [m.committer for m in markers[epoch]] == winners, f"epoch {epoch}: {markers[epoch]}"


def test_racing_processes_seal_each_epoch_exactly_once_on_local_disk(tmp_path: Path) -> None:
    """4 processes race epoch_complete on 12 epochs: one winner each, the rest SplitBrainCommit."""
    _race(str(tmp_path / "store"), {})


@pytest.mark.s3
def test_racing_processes_seal_each_epoch_exactly_once_on_s3(
    s3_store: tuple[str, dict[str, str]],
) -> None:
    """The same race on the S3 server: conditional puts make the control MERGE a CAS."""
    uri, options = s3_store
    _race(uri, options)
