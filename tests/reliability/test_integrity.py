"""Integrity: damaged or foreign stores and bad input get a specific error, naming what and where.

Every case also checks "no half-written state": the failing call changed no
table version and left no new file behind.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from statelake import (
    CorruptState,
    DeltaStateBackend,
    NotAStateStore,
    PayloadTooLarge,
)

ROOT = Path(__file__).resolve().parents[2]


def _store(root: Path, *, layout: str = "card", epochs: int = 3, vnodes: int = 4) -> None:
    b = DeltaStateBackend(root, instance_id="a", vnode_capacity=vnodes, layout=layout)
    for e in range(1, epochs + 1):
        b.write_partials(e, 1, {v: f"payload-{v}-{e}".encode() * 8 for v in range(vnodes)})
        assert b.epoch_complete(e, range(vnodes))  # type: ignore[arg-type]
    b.close()


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _data_file(root: Path, epoch: int, vnode: int) -> Path:
    hits = glob.glob(str(root / "partials" / f"epoch={epoch}" / f"vnode={vnode}" / "*.parquet"))
    assert len(hits) == 1, hits
    return Path(hits[0])


def _open(root: Path) -> DeltaStateBackend:
    return DeltaStateBackend(root, instance_id="reader", vnode_capacity=None, create=False)


def test_corrupted_payload_byte_is_corrupt_state_naming_the_file(tmp_path: Path) -> None:
    """A flipped payload byte fails the crc32 check: CorruptState naming vnode, epoch and file."""
    root = tmp_path / "store"
    _store(root)
    target = _data_file(root, 2, 1)
    raw = bytearray(target.read_bytes())
    at = raw.find(b"payload-1-2")
    assert at > 0
    raw[at] ^= 0xFF
    target.write_bytes(bytes(raw))
    before = _files(root)
    b = _open(root)
    versions = b.table_versions()
    with pytest.raises(CorruptState) as info:
        b.read_partial(1, 2)
    assert info.value.path is not None and info.value.path.endswith(target.name)
    assert "checksum mismatch for vnode 1 epoch 2" in str(info.value)
    assert b.read_partial(2, 2) == b"payload-2-2" * 8  # the damage stays local
    with pytest.raises(CorruptState):
        b.read_epoch(2)
    assert b.table_versions() == versions
    b.close()
    assert _files(root) == before


def test_truncated_data_file_is_corrupt_state_naming_the_file(tmp_path: Path) -> None:
    """A data file cut short is reported unreadable, with its path."""
    root = tmp_path / "store"
    _store(root)
    target = _data_file(root, 3, 0)
    target.write_bytes(target.read_bytes()[:20])
    b = _open(root)
    with pytest.raises(CorruptState) as info:
        b.read_partial(0, 3)
    assert "unreadable data file" in str(info.value)
    assert info.value.path is not None and info.value.path.endswith(target.name)
    b.close()


def test_missing_data_file_is_corrupt_state_naming_the_file(tmp_path: Path) -> None:
    """A data file the log references but storage lost: CorruptState 'missing', with its path."""
    root = tmp_path / "store"
    _store(root)
    target = _data_file(root, 1, 3)
    target.unlink()
    b = _open(root)
    with pytest.raises(CorruptState) as info:
        b.read_partial(3, 1)
    assert "missing" in str(info.value)
    assert info.value.path is not None and info.value.path.endswith(target.name)
    assert b.read_partial(2, 1) == b"payload-2-1" * 8
    b.close()


def test_missing_packed_data_file_is_corrupt_state_naming_the_file(tmp_path: Path) -> None:
    """Packed layout: a lost file holding several vnodes is reported for each of them."""
    root = tmp_path / "store"
    _store(root, layout="packed")
    files = glob.glob(str(root / "partials" / "epoch=2" / "*.parquet"))
    assert files
    for f in files:
        os.remove(f)
    b = _open(root)
    with pytest.raises(CorruptState) as info:
        b.read_partial(0, 2)
    assert "missing" in str(info.value) and "epoch=2" in str(info.value.path)
    assert b.read_partial(0, 1) == b"payload-0-1" * 8
    b.close()


def test_deleted_log_commit_is_corrupt_state_naming_the_missing_commit(tmp_path: Path) -> None:
    """A commit file deleted from the middle of _delta_log: CorruptState naming the gap."""
    root = tmp_path / "store"
    _store(root)
    log_dir = root / "partials" / "_delta_log"
    victim = log_dir / f"{2:020d}.json"
    victim.unlink()
    before = _files(root)
    with pytest.raises(CorruptState) as info:
        _open(root)
    assert victim.name in str(info.value)
    assert info.value.path is not None and "partials/_delta_log" in info.value.path
    assert _files(root) == before  # opening did not try to "repair" anything


def test_deleted_control_log_commit_is_corrupt_state(tmp_path: Path) -> None:
    """The same for the control table: the gap is named, nothing is guessed."""
    root = tmp_path / "store"
    _store(root)
    victim = root / "control" / "_delta_log" / f"{1:020d}.json"
    victim.unlink()
    with pytest.raises(CorruptState) as info:
        _open(root)
    assert victim.name in str(info.value)


def test_foreign_delta_table_is_not_a_state_store_and_nothing_is_created(tmp_path: Path) -> None:
    """A plain Delta table where 'partials' should be: NotAStateStore, no control table made."""
    root = tmp_path / "store"
    write_deltalake(str(root / "partials"), pa.table({"x": [1, 2, 3]}))
    with pytest.raises(NotAStateStore) as info:
        DeltaStateBackend(root, instance_id="a", vnode_capacity=4)
    assert "partials" in str(info.value) and info.value.uri is not None
    assert not (root / "control").exists()


def test_table_with_a_different_schema_is_not_a_state_store(tmp_path: Path) -> None:
    """Right table properties, different columns: NotAStateStore listing expected vs found."""
    root = tmp_path / "store"
    _store(root)
    real = DeltaTable(str(root / "partials")).metadata().configuration
    shutil.rmtree(root / "partials")
    DeltaTable.create(
        str(root / "partials"),
        schema=pa.schema([("epoch", pa.int64()), ("vnode", pa.int32()), ("blob", pa.binary())]),
        configuration=dict(real),
        raise_if_key_not_exists=False,
    )
    before = _files(root)
    with pytest.raises(NotAStateStore) as info:
        DeltaStateBackend(root, instance_id="a", vnode_capacity=4)
    msg = str(info.value)
    assert "different schema" in msg and "blob" in msg and "payload" in msg
    assert info.value.uri is not None and info.value.uri.endswith("partials")
    assert _files(root) == before


def test_store_root_that_is_itself_a_delta_table_is_rejected(tmp_path: Path) -> None:
    """Pointing statelake at a Delta table (not a store folder) is NotAStateStore."""
    root = tmp_path / "table"
    write_deltalake(str(root), pa.table({"x": [1]}))
    with pytest.raises(NotAStateStore):
        DeltaStateBackend(root, instance_id="a", vnode_capacity=4)
    assert not (root / "partials").exists()


@pytest.mark.parametrize("layout", ["card", "packed"])
def test_payload_over_max_size_is_rejected_before_anything_is_written(
    tmp_path: Path, layout: str
) -> None:
    """PayloadTooLarge carries size and limit; a batch with one oversized payload writes nothing."""
    root = tmp_path / "store"
    b = DeltaStateBackend(
        root, instance_id="a", vnode_capacity=4, layout=layout, max_partial_bytes=1024
    )
    versions = b.table_versions()
    before = _files(root)
    with pytest.raises(PayloadTooLarge) as info:
        b.write_partial(0, 1, 1, b"x" * 1025)
    assert (info.value.size, info.value.limit) == (1025, 1024)
    assert "max_partial_bytes=1024" in str(info.value)
    with pytest.raises(PayloadTooLarge):
        b.write_partials(1, 1, {0: b"ok", 1: b"y" * 5000, 2: b"ok"})
    assert b.table_versions() == versions
    assert _files(root) == before
    assert b.read_partial(0, 1) is None
    b.write_partial(0, 1, 1, b"x" * 1024)  # exactly the limit is fine
    assert b.read_partial(0, 1) == b"x" * 1024
    b.close()


_READ_ONLY_PROBE = r"""
import json, sys
from statelake import DeltaStateBackend, StateBackendError
root = sys.argv[1]
out = {}
try:
    b = DeltaStateBackend(root, instance_id="ro", vnode_capacity=4)
    out["opened"] = True
    try:
        b.write_partial(0, 9, 1, b"new")
        out["write"] = "ok"
    except StateBackendError as exc:
        out["write"] = [type(exc).__name__, str(exc), getattr(exc, "uri", None)]
    out["read"] = b.read_partial(1, 1).decode()
    b.close()
except StateBackendError as exc:
    out["open"] = [type(exc).__name__, str(exc), getattr(exc, "uri", None)]
try:
    b = DeltaStateBackend(root, instance_id="ro2", vnode_capacity=None, create=False)
    out["read_only_open"] = b.read_partial(1, 1).decode()
    b.close()
except StateBackendError as exc:
    out["read_only_open"] = [type(exc).__name__, str(exc)]
print(json.dumps(out))
"""


def _run_read_only(store: Path, mount: Path) -> dict[str, object]:
    """Run the probe in a child that sees ``store`` through a read-only bind mount.

    Tests may run as root, where chmod does not stop writes; a read-only
    bind mount does (EROFS), and ``unshare --mount`` keeps it private to the
    child, so nothing is left mounted whatever happens.
    """
    if os.geteuid() != 0:
        for p in [store, *store.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
        cmd = [sys.executable, "-c", _READ_ONLY_PROBE, str(store)]
    else:
        if shutil.which("unshare") is None:
            pytest.skip("running as root without unshare(1): no way to make a read-only mount")
        mount.mkdir()
        script = (
            f'mount --bind "{store}" "{mount}" && mount -o remount,bind,ro "{mount}" && '
            f'exec "{sys.executable}" -c "$0" "{mount}"'
        )
        cmd = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            _READ_ONLY_PROBE,
        ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    if os.geteuid() == 0 and proc.returncode != 0 and "mount" in proc.stderr:
        pytest.skip(f"cannot make a read-only bind mount here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_read_only_location_fails_writes_with_storage_error_and_still_reads(
    tmp_path: Path,
) -> None:
    """On a read-only store a write is a StorageError naming the place; reads keep working."""
    store = tmp_path / "store"
    _store(store)
    before = _files(store)
    out = _run_read_only(store, tmp_path / "ro")
    if "open" in out:  # refused at open: must say read-only and where
        kind, msg, uri = out["open"]  # type: ignore[misc]
        assert kind == "StorageError" and ("read-only" in msg or "permission" in msg), out
        assert uri, out
    else:
        kind, msg, uri = out["write"]  # type: ignore[misc]
        assert kind == "StorageError" and ("read-only" in msg or "permission" in msg), out
        assert uri, out
        assert out["read"] == "payload-1-1" * 8
    assert out["read_only_open"] == "payload-1-1" * 8, out
    if os.geteuid() != 0:
        for p in [store, *store.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)
    assert _files(store) == before


def test_read_only_location_for_a_new_store_is_storage_error(tmp_path: Path) -> None:
    """Creating a store where nothing can be written names the folder and the reason."""
    parent = tmp_path / "parent"
    parent.mkdir()
    out = _run_read_only(parent, tmp_path / "ro")
    # The probe's root exists (the mount) but is empty: creation must fail cleanly.
    kind, msg, uri = out["open"]  # type: ignore[misc]
    assert kind == "StorageError" and ("read-only" in msg or "permission" in msg), out
    assert uri, out
    assert not any(parent.iterdir())
