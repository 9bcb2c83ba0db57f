"""Delta-engine specifics: time travel, durability of the fence, MERGE-only control, bad stores."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from statelake import (
    AsyncStateBackend,
    DeltaStateBackend,
    InvalidArgument,
    NotAStateStore,
    SplitBrainCommit,
    StorageError,
)


def _open(uri: str, instance_id: str = "a", **kw: object) -> DeltaStateBackend:
    return DeltaStateBackend(uri, instance_id=instance_id, vnode_capacity=8, **kw)  # type: ignore[arg-type]


def _log_operations(table_dir: Path) -> list[str]:
    ops = []
    for f in sorted((table_dir / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                ops.append(action["commitInfo"].get("operation", ""))
    return ops


def test_tables_are_created_with_partitioning_and_properties(store_uri: str) -> None:
    """First use creates partials (by epoch, vnode) and control, recording capacity and layout."""
    with _open(store_uri):
        pass
    partials = DeltaTable(f"{store_uri}/partials")
    assert partials.metadata().partition_columns == ["epoch", "vnode"]
    config = partials.metadata().configuration
    assert config["statelake.vnodeCapacity"] == "8"
    assert config["statelake.layout"] == "card"
    assert (
        DeltaTable(f"{store_uri}/control").metadata().configuration["statelake.table"] == "control"
    )


def test_reopening_adopts_stored_capacity_and_rejects_a_different_one(store_uri: str) -> None:
    """vnode_capacity=None adopts the stored value; a different value is a clear error."""
    _open(store_uri).close()
    with DeltaStateBackend(store_uri, instance_id="x", vnode_capacity=None) as b:
        assert b.vnode_capacity == 8
    with pytest.raises(InvalidArgument, match="vnode_capacity=8"):
        DeltaStateBackend(store_uri, instance_id="x", vnode_capacity=16)
    with pytest.raises(InvalidArgument, match="layout 'card'"):
        DeltaStateBackend(store_uri, instance_id="x", vnode_capacity=8, layout="packed")


def test_read_partial_time_travels_by_version_and_datetime(store_uri: str) -> None:
    """as_of reads the partials table as it was at a version or at a moment."""
    with _open(store_uri) as b:
        b.write_partial(0, 1, 0, b"v-one")
        version_after_first = b.table_versions()["partials"]
        time.sleep(0.05)
        moment = datetime.now(timezone.utc)
        time.sleep(0.05)
        b.write_partial(0, 1, 1, b"v-two")
        assert b.read_partial(0, 1) == b"v-two"
        assert b.read_partial(0, 1, as_of=version_after_first) == b"v-one"
        assert b.read_partial(0, 1, as_of=moment) == b"v-one"
        assert b.read_partial(0, 1, as_of=0) is None
        with pytest.raises(InvalidArgument):
            b.read_partial(0, 1, as_of="yesterday")  # type: ignore[arg-type]


def test_committed_epochs_time_travels_on_the_control_table(store_uri: str) -> None:
    """committed_epochs(as_of=control version) lists what was sealed then."""
    with _open(store_uri) as b:
        for e in range(3):
            b.write_partial(0, e, 0, b"x")
            b.epoch_complete(e, [0])
        v = b.table_versions()["control"]
        b.prune_before(2)
        assert b.committed_epochs() == [2]
        assert b.committed_epochs(as_of=v) == [0, 1, 2]
        assert b.latest_sealed_epoch() == 2


def test_prune_is_bounded_and_time_travel_survives_until_vacuum(store_uri: str) -> None:
    """Prune costs one commit per table; old versions read until vacuum removes their files."""
    with _open(store_uri) as b:
        for e in range(20):
            b.write_partials(e, 0, {v: f"{e}:{v}".encode() for v in range(8)})
            assert b.epoch_complete(e, list(range(8)))
        before = b.table_versions()
        b.prune_before(15)
        after = b.table_versions()
        assert after["partials"] - before["partials"] == 1
        assert after["control"] - before["control"] == 1
        assert b.read_partial(3, 2) is None
        assert b.read_partial(3, 2, as_of=before["partials"]) == b"2:3"
        assert b.committed_epochs() == list(range(15, 20))
        assert b.vacuum(retention_hours=0, dry_run=True)  # dry run lists, deletes nothing
        assert b.read_partial(3, 2, as_of=before["partials"]) == b"2:3"
        b.vacuum(retention_hours=0, dry_run=False)
        with pytest.raises(Exception, match=r"missing|not found|No such file"):
            b.read_partial(3, 2, as_of=before["partials"])
        assert b.read_partial(3, 16) == b"16:3"


def test_control_table_changes_only_through_merge(store_uri: str) -> None:
    """Every commit marker and fence change is a MERGE in the control table's log."""
    with _open(store_uri) as b:
        b.set_authoritative_version(1)
        for e in range(3):
            b.write_partial(0, e, 1, b"x")
            b.epoch_complete(e, [0])
        b.set_authoritative_version(2)
        b.prune_before(1)
    ops = _log_operations(Path(store_uri) / "control")
    assert ops[0] == "CREATE TABLE"
    assert ops[1:] and set(ops[1:]) == {"MERGE"}


def test_cas_loser_gets_split_brain_when_marker_appears_after_its_check(store_uri: str) -> None:
    """The TOCTOU branch: a rival seals between our check and our MERGE; we must not win."""
    a = _open(store_uri, "leader-a")
    b = _open(store_uri, "leader-b")
    a.write_partial(0, 1, 0, b"x")
    calls: list[int] = []

    def rival_seals_first(epoch: int) -> None:
        if not calls:
            calls.append(epoch)
            assert a.epoch_complete(epoch, [0]) is True

    b._before_marker_commit = rival_seals_first
    with pytest.raises(SplitBrainCommit) as info:
        b.epoch_complete(1, [0])
    assert calls == [1]
    assert (info.value.committer, info.value.self_id) == ("leader-a", "leader-b")
    assert a.epoch_complete(1, [0]) is True
    a.close()
    b.close()


def test_fence_raised_between_check_and_seal_is_respected(store_uri: str) -> None:
    """If the fence rises after our decision, the CAS fails and the re-read refuses to seal."""
    a = _open(store_uri, "coordinator")
    other = _open(store_uri, "new-leader")
    a.write_partial(0, 1, 0, b"old")
    raised: list[int] = []

    def depose(epoch: int) -> None:
        if not raised:
            raised.append(epoch)
            other.set_authoritative_version(1)

    a._before_marker_commit = depose
    assert a.epoch_complete(1, [0]) is False
    assert a.committed_epochs() == []
    a.close()
    other.close()


def test_uri_holding_another_delta_table_is_refused(tmp_path: Path) -> None:
    """A plain Delta table (at the root or as 'partials') is not a statelake store."""
    root = tmp_path / "someone-elses"
    write_deltalake(str(root), pa.table({"x": [1]}))
    with pytest.raises(NotAStateStore, match="itself a Delta table"):
        _open(str(root))
    other = tmp_path / "store"
    write_deltalake(str(other / "partials"), pa.table({"x": [1]}))
    with pytest.raises(NotAStateStore, match="not a statelake partials table"):
        _open(str(other))
    assert not (other / "control").exists()


def test_unusable_paths_get_clear_storage_errors(tmp_path: Path) -> None:
    """A file where the store should be, or an unsupported scheme, fails before writing."""
    a_file = tmp_path / "file"
    a_file.write_text("not a folder")
    with pytest.raises(StorageError, match="points to a file"):
        _open(str(a_file))
    with pytest.raises(InvalidArgument, match="unsupported store URI scheme"):
        _open("ftp://example/x")
    with pytest.raises(InvalidArgument, match="instance_id"):
        DeltaStateBackend(str(tmp_path / "s"), instance_id="", vnode_capacity=4)
    assert not (tmp_path / "s").exists()


def test_opening_without_create_does_not_create(tmp_path: Path) -> None:
    """create=False on an empty location reports that no store is there."""
    with pytest.raises(NotAStateStore):
        DeltaStateBackend(
            str(tmp_path / "nothing"), instance_id="a", vnode_capacity=None, create=False
        )
    assert not (tmp_path / "nothing" / "partials").exists()


def test_many_threads_writing_at_once_all_succeed_in_few_commits(store_uri: str) -> None:
    """Group commit: 16 threads x 32 writes, no call fails, far fewer commits than writes."""
    errors: list[BaseException] = []
    with _open(store_uri) as b:
        start = b.table_versions()["partials"]

        def worker(t: int) -> None:
            try:
                for i in range(32):
                    b.write_partial((t + i) % 8, 100 + t * 32 + i, 0, f"{t}-{i}".encode())
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        commits = b.table_versions()["partials"] - start
        assert 0 < commits < 16 * 32 / 2
        with _open(store_uri, "reader") as r:
            for t in range(16):
                for i in range(32):
                    assert r.read_partial((t + i) % 8, 100 + t * 32 + i) == f"{t}-{i}".encode()


def test_read_epoch_returns_every_vnode(store_uri: str) -> None:
    """The recovery read returns vnode -> bytes for a whole epoch, newest version per vnode."""
    with _open(store_uri) as b:
        b.write_partials(4, 0, {v: b"old" for v in range(8)})
        b.write_partial(2, 4, 1, b"new")
        got = b.read_epoch(4)
        assert got == {**{v: b"old" for v in range(8)}, 2: b"new"}
        assert b.read_epoch(5) == {}


def test_async_twin_has_the_same_semantics(store_uri: str) -> None:
    """AsyncStateBackend: coroutines with the same names and results."""

    async def scenario() -> tuple[bytes | None, bool, list[int]]:
        async with AsyncStateBackend(_open(store_uri)) as b:
            await asyncio.gather(*(b.write_partial(v, 1, 0, bytes([v])) for v in range(8)))
            sealed = await b.epoch_complete(1, list(range(8)))
            await b.set_authoritative_version(2)
            assert await b.authoritative_version() == 2
            return await b.read_partial(5, 1), sealed, await b.committed_epochs()

    assert asyncio.run(scenario()) == (b"\x05", True, [1])


def test_secrets_never_reach_repr(tmp_path: Path) -> None:
    """storage_options values that look secret are masked in repr."""
    b = DeltaStateBackend(
        str(tmp_path / "s"),
        instance_id="a",
        vnode_capacity=2,
        storage_options={"aws_secret_access_key": "hunter2", "aws_region": "eu-west-1"},
    )
    text = repr(b)
    b.close()
    assert "hunter2" not in text and "eu-west-1" in text


def test_closed_backend_refuses_calls(store_uri: str) -> None:
    """After close() every call raises instead of hanging on a stopped committer."""
    b = _open(store_uri)
    b.close()
    b.close()
    with pytest.raises(Exception, match="closed"):
        b.write_partial(0, 1, 0, b"x")
    assert os.path.isdir(store_uri)
