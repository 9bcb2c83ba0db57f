"""The StateBackend contract, once, against every engine (memory, Delta card/packed, S3)."""

from __future__ import annotations

import pytest

from statelake import (
    ConflictingPartial,
    InvalidArgument,
    SplitBrainCommit,
    StaleVersion,
    VnodeOutOfRange,
)
from tests.conftest import BackendFactory


def test_round_trip_returns_written_bytes(make_backend: BackendFactory) -> None:
    """A written partial reads back byte for byte; an unwritten one is None."""
    b = make_backend()
    b.write_partial(3, 7, 0, b"\x00partial\xff")
    assert b.read_partial(3, 7) == b"\x00partial\xff"
    assert b.read_partial(4, 7) is None
    assert b.read_partial(3, 8) is None


def test_replaying_identical_bytes_is_harmless(make_backend: BackendFactory) -> None:
    """write_partial is idempotent for the same bytes."""
    b = make_backend()
    for _ in range(3):
        b.write_partial(1, 1, 0, b"same")
    assert b.read_partial(1, 1) == b"same"


def test_conflicting_bytes_at_same_version_are_reported(make_backend: BackendFactory) -> None:
    """Different bytes at the same (vnode, epoch, version) raise and keep the first."""
    b = make_backend()
    b.write_partial(1, 1, 0, b"first")
    with pytest.raises(ConflictingPartial) as info:
        b.write_partial(1, 1, 0, b"second")
    assert (info.value.vnode, info.value.epoch, info.value.assignment_version) == (1, 1, 0)
    assert b.read_partial(1, 1) == b"first"


def test_newer_assignment_version_wins_and_stale_cannot_shadow_it(
    make_backend: BackendFactory,
) -> None:
    """Once version 2 wrote (vnode, epoch), a later write at version 1 changes nothing."""
    b = make_backend()
    b.write_partial(0, 5, 2, b"new-leader")
    b.write_partial(0, 5, 1, b"old-leader")
    assert b.read_partial(0, 5) == b"new-leader"


def test_epoch_complete_requires_every_listed_vnode(make_backend: BackendFactory) -> None:
    """Sealing fails while a vnode lacks a partial and succeeds once all are durable."""
    b = make_backend()
    b.write_partial(0, 1, 0, b"a")
    assert b.epoch_complete(1, [0, 1]) is False
    assert b.committed_epochs() == []
    b.write_partial(1, 1, 0, b"b")
    assert b.epoch_complete(1, [0, 1]) is True
    assert b.committed_epochs() == [1]


def test_epoch_complete_is_idempotent_for_the_winner(make_backend: BackendFactory) -> None:
    """The instance that sealed an epoch hears True again, forever."""
    b = make_backend()
    b.write_partial(0, 2, 0, b"x")
    assert b.epoch_complete(2, [0]) is True
    assert b.epoch_complete(2, [0]) is True
    assert b.epoch_complete(2, [0, 1]) is True  # already sealed: the marker decides


def test_epoch_complete_detects_split_brain_on_fast_path(make_backend: BackendFactory) -> None:
    """A second instance asking to seal a sealed epoch gets SplitBrainCommit with the facts."""
    a = make_backend(instance_id="leader-a")
    a.write_partial(0, 3, 0, b"x")
    assert a.epoch_complete(3, [0]) is True
    b = make_backend(instance_id="leader-b")
    with pytest.raises(SplitBrainCommit) as info:
        b.epoch_complete(3, [0])
    assert info.value.committer == "leader-a"
    assert info.value.self_id == "leader-b"


def test_stale_writer_is_rejected_with_both_versions(make_backend: BackendFactory) -> None:
    """A write below the fence raises StaleVersion(caller, authoritative) and writes nothing."""
    b = make_backend()
    b.set_authoritative_version(5)
    with pytest.raises(StaleVersion) as info:
        b.write_partial(0, 1, 4, b"stale")
    assert (info.value.caller, info.value.authoritative) == (4, 5)
    assert b.read_partial(0, 1) is None
    b.write_partial(0, 1, 5, b"current")
    b.write_partial(1, 1, 6, b"newer")
    assert b.read_partial(0, 1) == b"current"


def test_fence_is_monotonic(make_backend: BackendFactory) -> None:
    """Raising the fence never lowers it; a repeat is a no-op."""
    b = make_backend()
    assert b.authoritative_version() == 0
    b.set_authoritative_version(3)
    b.set_authoritative_version(1)
    b.set_authoritative_version(3)
    assert b.authoritative_version() == 3


def test_fence_is_shared_by_every_instance_on_the_store(make_backend: BackendFactory) -> None:
    """A second instance sees the fence without being told and rejects stale writers."""
    a = make_backend(instance_id="a")
    a.set_authoritative_version(7)
    b = make_backend(instance_id="b")
    assert b.authoritative_version() == 7
    with pytest.raises(StaleVersion):
        b.write_partial(0, 1, 6, b"x")


def test_epoch_complete_rejects_partials_older_than_the_fence(make_backend: BackendFactory) -> None:
    """An epoch is sealed only with partials at a version no older than the fence."""
    b = make_backend()
    b.write_partial(0, 4, 1, b"old")
    b.set_authoritative_version(2)
    assert b.epoch_complete(4, [0]) is False
    b.write_partial(0, 4, 2, b"new")
    assert b.epoch_complete(4, [0]) is True
    assert b.read_partial(0, 4) == b"new"


def test_vnode_range_is_checked(make_backend: BackendFactory) -> None:
    """vnode >= capacity raises VnodeOutOfRange(vnode, capacity) on every call taking one."""
    b = make_backend(vnode_capacity=4)
    with pytest.raises(VnodeOutOfRange) as info:
        b.write_partial(4, 1, 0, b"x")
    assert (info.value.vnode, info.value.capacity) == (4, 4)
    with pytest.raises(VnodeOutOfRange):
        b.read_partial(9, 1)
    with pytest.raises(VnodeOutOfRange):
        b.epoch_complete(1, [0, 4])
    assert b.read_partial(3, 1) is None


@pytest.mark.parametrize(
    ("vnode", "epoch", "version", "data"),
    [
        (0, -1, 0, b"x"),
        (0, 1, -1, b"x"),
        (-1, 1, 0, b"x"),
        (0, 1, 0, "text, not bytes"),
        (0, 1, 0, None),
        (0, True, 0, b"x"),
    ],
)
def test_bad_arguments_fail_before_anything_is_written(
    make_backend: BackendFactory, vnode: object, epoch: object, version: object, data: object
) -> None:
    """Negative numbers, non-bytes data and bools are InvalidArgument; nothing is stored."""
    b = make_backend()
    with pytest.raises(InvalidArgument):
        b.write_partial(vnode, epoch, version, data)  # type: ignore[arg-type]
    assert b.read_partial(0, 1) is None
    with pytest.raises(InvalidArgument):
        b.prune_before(-1)
    with pytest.raises(InvalidArgument):
        b.set_authoritative_version(-2)


def test_prune_before_drops_old_epochs_and_keeps_the_fence(make_backend: BackendFactory) -> None:
    """Epochs below the horizon vanish from reads and commits; newer ones and the fence stay."""
    b = make_backend()
    b.set_authoritative_version(1)
    for epoch in range(4):
        b.write_partial(0, epoch, 1, f"e{epoch}".encode())
        assert b.epoch_complete(epoch, [0])
    b.prune_before(2)
    assert b.committed_epochs() == [2, 3]
    assert b.read_partial(0, 1) is None
    assert b.read_partial(0, 2) == b"e2"
    assert b.authoritative_version() == 1
    b.prune_before(2)  # repeat is harmless
    assert b.committed_epochs() == [2, 3]


def test_write_partials_batch_matches_single_writes(make_backend: BackendFactory) -> None:
    """The batch API stores every vnode of the epoch, all-or-nothing on bad input."""
    b = make_backend()
    b.write_partials(9, 0, {v: bytes([v]) * 10 for v in range(8)})
    assert [b.read_partial(v, 9) for v in range(8)] == [bytes([v]) * 10 for v in range(8)]
    assert b.epoch_complete(9, list(range(8)))
    with pytest.raises(VnodeOutOfRange):
        b.write_partials(10, 0, {0: b"ok", 99: b"bad"})
    assert b.read_partial(0, 10) is None


def test_empty_payload_is_a_valid_partial(make_backend: BackendFactory) -> None:
    """Zero bytes is state too: it reads back as b'' (not None) and counts for sealing."""
    b = make_backend()
    b.write_partial(2, 1, 0, b"")
    assert b.read_partial(2, 1) == b""
    assert b.epoch_complete(1, [2])
