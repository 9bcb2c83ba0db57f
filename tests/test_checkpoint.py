"""CheckpointManager: incremental checkpoints, compression, restore and retention on Delta."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from statelake import CorruptState, DeltaStateBackend, InvalidArgument
from statelake.checkpoint import (
    CheckpointManager,
    decode_payload,
    encode_payload,
    vnode_of,
)

_stores = itertools.count()


def _backend(root: Path, capacity: int = 4) -> DeltaStateBackend:
    return DeltaStateBackend(
        str(root / f"cp-{next(_stores)}"), instance_id="op-1", vnode_capacity=capacity
    )


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4"])
def test_payload_round_trips_with_every_codec(codec: str) -> None:
    """encode/decode keep puts and tombstones and name the codec in the header."""
    records = {b"a": b"1" * 500, b"b": None, b"": b""}
    payload, raw = encode_payload(records, kind="incremental", codec=codec, epoch=7, base=3, prev=6)
    header, back = decode_payload(payload)
    assert back == records
    assert (header.codec, header.kind, header.epoch, header.base, header.prev) == (
        codec,
        "incremental",
        7,
        3,
        6,
    )
    assert header.raw_length == raw


def test_corrupt_payload_is_reported() -> None:
    """A payload with a bad magic or a truncated body raises CorruptState, never garbage."""
    payload, _ = encode_payload({b"k": b"v"}, kind="full", codec="zstd", epoch=1, base=1, prev=1)
    with pytest.raises(CorruptState):
        decode_payload(b"XXXX" + payload[4:])
    with pytest.raises(CorruptState):
        decode_payload(payload[:-3])


def test_incremental_checkpoint_writes_only_changed_keys(tmp_path: Path) -> None:
    """After a full checkpoint, the next one carries just the dirty keys and tombstones."""
    backend = _backend(tmp_path)
    m = CheckpointManager(backend, compression="zstd")
    for i in range(200):
        m.put(b"key-%d" % i, b"v" * 100)
    first = m.checkpoint()
    assert (first.kind, first.keys_written, first.tombstones) == ("full", 200, 0)
    m.put(b"key-1", b"changed")
    m.delete(b"key-2")
    m.delete(b"never-existed")
    assert m.dirty_keys == 2
    second = m.checkpoint()
    assert (second.kind, second.keys_written, second.tombstones) == ("incremental", 1, 1)
    assert (second.base_epoch, second.prev_epoch) == (first.epoch, first.epoch)
    assert second.raw_bytes < first.raw_bytes / 100
    assert m.dirty_keys == 0
    backend.close()


def test_compression_ratio_is_reported_and_codec_recorded_per_store(tmp_path: Path) -> None:
    """Compressible state reports a ratio > 1; a new manager adopts the store's codec."""
    backend = _backend(tmp_path)
    m = CheckpointManager(backend, compression="lz4")
    for i in range(300):
        m.put(b"user-%04d" % i, b'{"count": 1, "window": "2024-01-01T00:00"}' * 4)
    info = m.checkpoint()
    assert info.codec == "lz4"
    assert info.compression_ratio > 3
    assert 0.5 < info.space_saving < 1
    assert CheckpointManager(backend).compression == "lz4"
    assert CheckpointManager(_backend(tmp_path)).compression == "zstd"
    backend.close()


def test_restore_latest_and_point_in_time(tmp_path: Path) -> None:
    """A fresh manager restores the latest checkpoint, or any retained epoch on request."""
    backend = _backend(tmp_path)
    m = CheckpointManager(backend, full_every=3, retain=None)
    snapshots = {}
    for step in range(5):
        m.put(b"step", b"%d" % step)
        m.put(b"k%d" % step, b"x")
        if step == 3:
            m.delete(b"k0")
        snapshots[m.checkpoint().epoch] = m.state()
    fresh = CheckpointManager(backend)
    latest = fresh.restore()
    assert latest == max(snapshots)
    assert fresh.state() == snapshots[latest]
    for epoch, state in snapshots.items():
        assert fresh.state_at(epoch) == state
    assert fresh.restore(1) == 1
    assert fresh.state() == snapshots[1]
    with pytest.raises(InvalidArgument):
        fresh.restore(99)
    backend.close()


def test_restore_of_empty_store_gives_empty_state(tmp_path: Path) -> None:
    """With no checkpoint yet, restore returns None and leaves an empty state."""
    backend = _backend(tmp_path)
    m = CheckpointManager(backend)
    assert m.restore() is None
    assert m.state() == {}
    backend.close()


def test_retention_keeps_last_n_and_never_prunes_a_needed_base(tmp_path: Path) -> None:
    """retain=N prunes old checkpoints but keeps every chain's full base restorable."""
    backend = _backend(tmp_path)
    m = CheckpointManager(backend, full_every=4, retain=2)
    states = {}
    for step in range(11):
        m.put(b"n", b"%d" % step)
        states[m.checkpoint().epoch] = m.state()
    retained = m.checkpoints()
    assert len(retained) >= 2
    assert retained[0] > 0  # something was pruned
    assert m.last is not None
    assert retained[0] <= m.last.base_epoch
    for epoch in retained:
        assert m.state_at(epoch) == states[epoch]
    backend.close()


def test_retention_after_a_branch_keeps_every_retained_checkpoint_restorable(
    tmp_path: Path,
) -> None:
    """A restore-and-branch leaves an old chain that retention keeps whole, then prunes."""
    backend = _backend(tmp_path, capacity=3)
    m = CheckpointManager(backend, full_every=2, retain=3)
    states: dict[int, dict[bytes, bytes]] = {}

    def checkpoint(kind: str) -> int:
        m.put(b"k", b"%d" % len(states))
        info = m.checkpoint()
        assert info.kind == kind
        states[info.epoch] = m.state()
        return info.epoch

    for kind in ("full", "incremental", "full", "incremental"):  # epochs 0-3
        checkpoint(kind)
    assert m.restore(0) == 0
    branch = checkpoint("incremental")  # epoch 4, on base 0
    checkpoint("full")
    checkpoint("incremental")
    assert m.restore(2) == 2
    checkpoint("incremental")  # epoch 7 on base 2: the floor used to stop at 2, pruning 4's base
    assert branch in m.checkpoints()
    for epoch in m.checkpoints():
        assert m.state_at(epoch) == states[epoch]
    checkpoint("full")
    checkpoint("incremental")
    checkpoint("full")  # the last three no longer reach back: the branch and its base go
    assert m.checkpoints() == [8, 9, 10]
    for epoch in m.checkpoints():
        assert m.state_at(epoch) == states[epoch]
    backend.close()


def test_maybe_checkpoint_respects_the_interval(tmp_path: Path) -> None:
    """maybe_checkpoint fires once the interval passed and only when something changed."""
    backend = _backend(tmp_path)
    m = CheckpointManager(backend, interval=10.0, clock=lambda: 0.0)
    m.put(b"a", b"1")
    assert m.maybe_checkpoint(now=5.0) is None
    first = m.maybe_checkpoint(now=10.0)
    assert first is not None and first.kind == "full"
    assert m.maybe_checkpoint(now=25.0) is None  # nothing dirty: no epoch spent
    m.put(b"a", b"2")
    assert m.maybe_checkpoint(now=30.0) is None  # timer restarted at 25
    second = m.maybe_checkpoint(now=35.0)
    assert second is not None and second.kind == "incremental"
    backend.close()


def test_crashed_unsealed_attempt_is_never_overwritten(tmp_path: Path) -> None:
    """Partials of an epoch that was never sealed make the next checkpoint skip that epoch."""
    backend = _backend(tmp_path)
    m = CheckpointManager(backend)
    m.put(b"a", b"1")
    m.checkpoint()
    backend.write_partials(1, 0, {0: b"half-written attempt"})
    m.put(b"a", b"2")
    assert m.checkpoint().epoch == 2
    assert CheckpointManager(backend).state_at() == {b"a": b"2"}
    backend.close()


def test_keys_are_spread_over_vnodes(tmp_path: Path) -> None:
    """Keys hash onto every vnode and each sealed epoch has a partial for every vnode."""
    backend = _backend(tmp_path, capacity=8)
    m = CheckpointManager(backend)
    keys = [b"key-%d" % i for i in range(64)]
    assert {vnode_of(k, 8) for k in keys} == set(range(8))
    for k in keys:
        m.put(k, k)
    epoch = m.checkpoint().epoch
    assert sorted(backend.read_epoch(epoch)) == list(range(8))
    backend.close()


# -- the property ---------------------------------------------------------------------------
_keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"])
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), _keys, st.binary(max_size=40)),
        st.tuples(st.just("delete"), _keys, st.just(b"")),
        st.tuples(st.just("checkpoint"), st.sampled_from([None, True, False]), st.just(b"")),
        st.tuples(st.just("restore"), st.integers(0, 50), st.just(b"")),
    ),
    min_size=4,
    max_size=40,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=_ops,
    full_every=st.integers(1, 4),
    retain=st.sampled_from([None, 1, 2, 3]),
    codec=st.sampled_from(["zstd", "lz4", "none"]),
)
# Found by this test: after restoring epoch 0 and branching, epoch 4 (an incremental on base 0)
# stayed sealed once retention had pruned 0, so restoring epoch 4 hit a pruned chain.
@example(
    ops=[
        ("checkpoint", None, b""),
        ("checkpoint", None, b""),
        ("checkpoint", None, b""),
        ("checkpoint", None, b""),
        ("restore", 0, b""),
        ("checkpoint", None, b""),
        ("checkpoint", None, b""),
        ("checkpoint", None, b""),
        ("restore", 9, b""),
        ("checkpoint", None, b""),
    ],
    full_every=2,
    retain=3,
    codec="zstd",
)
def test_any_sequence_restores_exactly_each_retained_checkpoint(
    tmp_path: Path,
    ops: list[tuple[str, object, bytes]],
    full_every: int,
    retain: int | None,
    codec: str,
) -> None:
    """Random puts/deletes/checkpoints/restores: every retained epoch restores its exact state."""
    backend = _backend(tmp_path, capacity=3)
    try:
        m = CheckpointManager(backend, compression=codec, full_every=full_every, retain=retain)
        model: dict[bytes, bytes] = {}
        at_epoch: dict[int, dict[bytes, bytes]] = {}
        has_checkpoint = False
        for op, arg, value in ops:
            if op == "put":
                assert isinstance(arg, bytes)
                m.put(arg, value)
                model[arg] = value
            elif op == "delete":
                assert isinstance(arg, bytes)
                m.delete(arg)
                model.pop(arg, None)
            elif op == "checkpoint":
                if arg is False and not has_checkpoint:
                    arg = None
                info = m.checkpoint(full=arg if isinstance(arg, bool) else None)
                has_checkpoint = True
                at_epoch[info.epoch] = dict(model)
                if retain is not None:
                    # Pruning happens here; a broken chain must show now, before a later prune
                    # drops the evidence.
                    for epoch in m.checkpoints():
                        assert m.state_at(epoch) == at_epoch[epoch]
            else:
                retained = m.checkpoints()
                if not retained:
                    continue
                assert isinstance(arg, int)
                target = retained[arg % len(retained)]
                assert m.restore(target) == target
                model = dict(at_epoch[target])
                assert m.state() == model
            assert m.state() == model
        retained = m.checkpoints()
        if retain is not None and at_epoch:
            assert len(retained) >= min(retain, len(at_epoch))
        assert set(retained) <= set(at_epoch)
        for epoch in retained:
            assert m.state_at(epoch) == at_epoch[epoch]
        fresh = CheckpointManager(backend)
        latest = fresh.restore()
        assert latest == (max(at_epoch) if at_epoch else None)
        assert fresh.state() == (at_epoch[latest] if latest is not None else {})
    finally:
        backend.close()
