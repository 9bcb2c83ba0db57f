"""DeltaHandleStore: Flink StateHandleStore semantics on a real Delta table."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from statelake import DeltaStateBackend, StaleVersion
from statelake.handles import (
    DeltaHandleStore,
    HandleExists,
    HandleNotFound,
    PossiblyInconsistent,
    ResourceVersionMismatch,
)


@pytest.fixture
def store(store_uri: str) -> DeltaHandleStore:
    return DeltaHandleStore(store_uri, instance_id="leader")


def test_add_then_get_returns_state_and_resource_version(store: DeltaHandleStore) -> None:
    """add stores the bytes; get/exists/list_names/get_all see them with the same version."""
    rv = store.add("checkpoint-7", b"s3://bucket/cp/7", assignment_version=0)
    handle = store.get("checkpoint-7")
    assert handle.state == b"s3://bucket/cp/7"
    assert handle.resource_version == rv == store.exists("checkpoint-7")
    assert handle.writer == "leader"
    assert store.list_names() == ["checkpoint-7"]
    assert [h.name for h in store.get_all()] == ["checkpoint-7"]


def test_add_fails_when_name_exists(store: DeltaHandleStore) -> None:
    """A second add of the same name raises HandleExists and leaves the entry unchanged."""
    rv = store.add("a", b"1", assignment_version=0)
    with pytest.raises(HandleExists) as info:
        store.add("a", b"2", assignment_version=0)
    assert info.value.resource_version == rv
    assert store.get("a").state == b"1"


def test_replace_requires_current_resource_version(store: DeltaHandleStore) -> None:
    """replace with the current version succeeds and bumps it; a stale version is rejected."""
    rv1 = store.add("a", b"1", assignment_version=0)
    rv2 = store.replace("a", rv1, b"2", assignment_version=0)
    assert rv2 > rv1
    with pytest.raises(ResourceVersionMismatch) as info:
        store.replace("a", rv1, b"3", assignment_version=0)
    assert (info.value.expected, info.value.found) == (rv1, rv2)
    assert store.get("a").state == b"2"
    with pytest.raises(HandleNotFound):
        store.replace("missing", 1, b"x", assignment_version=0)


def test_resource_versions_never_repeat_after_remove_and_re_add(store: DeltaHandleStore) -> None:
    """A removed and re-added name gets a new version, so an old replace cannot hit it (no ABA)."""
    rv1 = store.add("a", b"1", assignment_version=0)
    assert store.release_and_try_remove("a", assignment_version=0)
    rv2 = store.add("a", b"2", assignment_version=0)
    assert rv2 > rv1
    with pytest.raises(ResourceVersionMismatch):
        store.replace("a", rv1, b"old", assignment_version=0)


def test_exists_and_get_on_missing_name(store: DeltaHandleStore) -> None:
    """exists returns None and get raises HandleNotFound for a name never added."""
    assert store.exists("nope") is None
    with pytest.raises(HandleNotFound):
        store.get("nope")


def test_release_and_try_remove_semantics(store: DeltaHandleStore) -> None:
    """Removing returns True (also for a missing name); a changed entry is kept and gives False."""
    rv = store.add("a", b"1", assignment_version=0)
    store.replace("a", rv, b"2", assignment_version=0)
    assert store.release_and_try_remove("a", assignment_version=0, resource_version=rv) is False
    assert store.exists("a") is not None
    assert store.release_and_try_remove("a", assignment_version=0) is True
    assert store.exists("a") is None
    assert store.release_and_try_remove("a", assignment_version=0) is True


def test_clear_removes_every_entry_but_history_keeps_them(store: DeltaHandleStore) -> None:
    """clear empties the store; time travel to the version before still shows the entries."""
    for n in ("x", "y", "z"):
        store.add(n, n.encode(), assignment_version=0)
    before = store.version()
    store.clear(assignment_version=0)
    assert store.list_names() == []
    assert store.list_names(as_of=before) == ["x", "y", "z"]
    store.clear(assignment_version=0)  # idempotent on an empty store


def test_time_travel_reads_each_resource_version(store: DeltaHandleStore) -> None:
    """get(name, as_of=rv) shows the entry exactly as written at that resource version."""
    rv1 = store.add("a", b"one", assignment_version=0)
    rv2 = store.replace("a", rv1, b"two", assignment_version=0)
    assert store.get("a", as_of=rv1).state == b"one"
    assert store.get("a", as_of=rv2).state == b"two"
    assert store.exists("a", as_of=0) is None


def test_stale_leader_is_rejected_by_the_control_table_fence(store_uri: str) -> None:
    """Mutations below the durable fence (set through the backend) raise StaleVersion."""
    store = DeltaHandleStore(store_uri, instance_id="old-leader")
    rv = store.add("a", b"1", assignment_version=1)
    with DeltaStateBackend(store_uri, instance_id="coord", vnode_capacity=4) as backend:
        backend.set_authoritative_version(2)
    for mutation in (
        lambda: store.add("b", b"x", assignment_version=1),
        lambda: store.replace("a", rv, b"x", assignment_version=1),
        lambda: store.release_and_try_remove("a", assignment_version=1),
        lambda: store.clear(assignment_version=1),
    ):
        with pytest.raises(StaleVersion) as info:
            mutation()
        assert (info.value.caller, info.value.authoritative) == (1, 2)
    assert store.get("a").state == b"1"
    new_leader = DeltaHandleStore(store_uri, instance_id="new-leader")
    assert new_leader.replace("a", rv, b"2", assignment_version=2) > rv


def test_fence_raised_between_decision_and_commit_is_still_respected(store_uri: str) -> None:
    """A row written by a newer leader is never overwritten by an older one, even mid-race."""
    old = DeltaHandleStore(store_uri, instance_id="old")
    rv = old.add("a", b"1", assignment_version=1)
    new = DeltaHandleStore(store_uri, instance_id="new")
    with DeltaStateBackend(store_uri, instance_id="coord", vnode_capacity=4) as backend:

        def new_leader_takes_over(op: str) -> None:
            old._before_commit = None
            backend.set_authoritative_version(2)
            new.replace("a", rv, b"new", assignment_version=2)

        old._before_commit = new_leader_takes_over
        with pytest.raises(StaleVersion):
            old.replace("a", rv, b"stale", assignment_version=1)
    assert old.get("a").state == b"new"


def test_concurrent_adds_of_one_name_have_exactly_one_winner(store_uri: str) -> None:
    """Racing instances adding the same name: exactly one succeeds, the rest see HandleExists."""
    stores = [DeltaHandleStore(store_uri, instance_id=f"n{i}") for i in range(4)]
    outcomes: list[str] = []
    barrier = threading.Barrier(len(stores))

    def run(s: DeltaHandleStore) -> None:
        barrier.wait()
        try:
            s.add("leader-pointer", s.instance_id.encode(), assignment_version=0)
            outcomes.append("won")
        except HandleExists:
            outcomes.append("exists")

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["exists", "exists", "exists", "won"]
    winner = stores[0].get("leader-pointer")
    assert winner.state == winner.writer.encode()


def test_concurrent_replaces_with_same_version_have_exactly_one_winner(store_uri: str) -> None:
    """Compare-and-set: of racing replaces from one resource version, exactly one lands."""
    rv = DeltaHandleStore(store_uri, instance_id="seed").add("p", b"0", assignment_version=0)
    stores = [DeltaHandleStore(store_uri, instance_id=f"n{i}") for i in range(3)]
    outcomes: list[str] = []
    barrier = threading.Barrier(len(stores))

    def run(s: DeltaHandleStore) -> None:
        barrier.wait()
        try:
            s.replace("p", rv, s.instance_id.encode(), assignment_version=0)
            outcomes.append("won")
        except ResourceVersionMismatch:
            outcomes.append("lost")

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["lost", "lost", "won"]


def test_repr_redacts_storage_secrets(store_uri: str) -> None:
    """Secrets in storage options never reach repr."""
    s = DeltaHandleStore(
        store_uri, instance_id="a", storage_options={"aws_secret_access_key": "hunter2"}
    )
    assert "hunter2" not in repr(s)


@pytest.fixture
def freeze() -> Iterator[list[Path]]:
    """Make folders immutable (a real fault even for root); always thawed afterwards."""
    frozen: list[Path] = []
    yield frozen
    for p in frozen:
        _set_immutable(p, False)


def _set_immutable(path: Path, on: bool) -> bool:
    if os.geteuid() != 0:
        os.chmod(path, 0o555 if on else 0o755)
        return True
    if shutil.which("chattr") is None:
        return False
    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True)
    return done.returncode == 0


def test_storage_fault_at_commit_raises_possibly_inconsistent(
    store_uri: str, freeze: list[Path]
) -> None:
    """A log folder turned read-only mid-operation gives PossiblyInconsistent, resolvable later."""
    store = DeltaHandleStore(store_uri, instance_id="leader")
    rv = store.add("a", b"1", assignment_version=0)
    log_dir = Path(store_uri) / "handles" / "_delta_log"
    probe = log_dir / "probe"

    def fault(op: str) -> None:
        store._before_commit = None
        if not _set_immutable(log_dir, True):
            pytest.skip("cannot make a folder read-only here")
        freeze.append(log_dir)
        try:
            probe.write_bytes(b"")
        except OSError:
            return
        pytest.skip("read-only folder is still writable (privileged user)")

    store._before_commit = fault
    with pytest.raises(PossiblyInconsistent) as info:
        store.replace("a", rv, b"2", assignment_version=0)
    err = info.value
    assert (err.operation, err.name, err.base_version) == ("replace", "a", rv)
    _set_immutable(log_dir, False)
    # Resolve by re-reading: it did not land, the entry is unchanged, and a retry works.
    assert store.resolve(err) is False
    assert store.get("a").state == b"1"
    assert store.replace("a", rv, b"2", assignment_version=0) > rv


def test_resolve_recognises_a_landed_commit_by_its_token(store_uri: str) -> None:
    """resolve() is True only for the attempt whose token is in commit base + 1."""
    store = DeltaHandleStore(store_uri, instance_id="leader")
    rv = store.add("a", b"1", assignment_version=0)
    err = PossiblyInconsistent(
        operation="add", name="a", base_version=rv - 1, token="not-ours", uri=store_uri
    )
    assert store.resolve(err) is False
    log_line = (Path(store_uri) / "handles" / "_delta_log" / f"{rv:020d}.json").read_text()
    token = (
        next(line for line in log_line.splitlines() if "commitInfo" in line)
        .split('"statelake.token":"')[1]
        .split('"')[0]
    )
    err = PossiblyInconsistent(
        operation="add", name="a", base_version=rv - 1, token=token, uri=store_uri
    )
    assert store.resolve(err) is True


def test_bad_arguments_fail_before_any_write(store: DeltaHandleStore) -> None:
    """Empty names, non-bytes state and negative versions are rejected up front."""
    from statelake import InvalidArgument

    before = store.version()
    with pytest.raises(InvalidArgument):
        store.add("", b"x", assignment_version=0)
    with pytest.raises(InvalidArgument):
        store.add("a", "text", assignment_version=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        store.add("a", b"x", assignment_version=-1)
    assert store.version() == before


@pytest.mark.s3
def test_handle_store_semantics_on_s3(s3_store: tuple[str, dict[str, str]]) -> None:
    """add/replace CAS, fence and time travel hold on an S3-compatible object store."""
    uri, options = s3_store
    store = DeltaHandleStore(uri, instance_id="leader", storage_options=options)
    rv1 = store.add("a", b"1", assignment_version=0)
    with pytest.raises(HandleExists):
        store.add("a", b"x", assignment_version=0)
    rv2 = store.replace("a", rv1, b"2", assignment_version=0)
    with pytest.raises(ResourceVersionMismatch):
        store.replace("a", rv1, b"3", assignment_version=0)
    assert store.get("a", as_of=rv1).state == b"1"
    assert store.get("a").resource_version == rv2
    other = DeltaHandleStore(uri, instance_id="other", storage_options=options)
    assert other.list_names() == ["a"]
