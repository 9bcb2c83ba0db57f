"""StoreConfig: small, immutable, picklable; opens backends in threads and spawned processes."""

from __future__ import annotations

import dataclasses
import multiprocessing
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from statelake import DeltaStateBackend, InvalidArgument
from statelake.config import StoreConfig, close_cached

SECRET = "wJalrXUtnFEMI-not-a-real-secret"


@pytest.fixture(autouse=True)
def _close_cached_backends() -> Iterator[None]:
    yield
    close_cached()


def _config(root: str) -> StoreConfig:
    return StoreConfig(
        uri=root,
        storage_options={"aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": SECRET},
        vnode_capacity=8,
        layout="card",
    )


def test_pickle_round_trip_preserves_every_field(store_uri: str) -> None:
    """A pickled config is equal (and hashes equal) to the original, secrets included."""
    config = _config(store_uri)
    blob = pickle.dumps(config)
    back = pickle.loads(blob)
    assert back == config and hash(back) == hash(config)
    assert back.storage_options["aws_secret_access_key"] == SECRET
    assert len(blob) < 1024  # light enough to ship with every task


def test_repr_redacts_secrets(store_uri: str) -> None:
    """repr shows the key id but never the secret, also through a backend it opens."""
    config = _config(store_uri)
    assert SECRET not in repr(config)
    assert "AKIDEXAMPLE" in repr(config)
    assert SECRET not in repr(config.open(instance_id="a"))


def test_config_is_immutable(store_uri: str) -> None:
    """Fields cannot be reassigned and the storage options cannot be mutated."""
    config = _config(store_uri)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.uri = "/elsewhere"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.storage_options["x"] = "y"  # type: ignore[index]


def test_relative_uri_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local path is resolved when the config is built, not where it is opened."""
    monkeypatch.chdir(tmp_path)
    assert StoreConfig(uri="store").uri == str(tmp_path / "store")


def test_bad_values_are_rejected_up_front(store_uri: str) -> None:
    """An unknown layout, codec or a bad capacity fails when the config is built."""
    with pytest.raises(InvalidArgument):
        StoreConfig(uri=store_uri, layout="columnar")
    with pytest.raises(InvalidArgument):
        StoreConfig(uri=store_uri, compression="gzip")
    with pytest.raises(InvalidArgument):
        StoreConfig(uri=store_uri, vnode_capacity=0)


def test_concurrent_open_from_many_threads_creates_one_backend(store_uri: str) -> None:
    """Threads opening the same config at once share one backend and one new store."""
    config = _config(store_uri)
    barrier = threading.Barrier(8)
    got: list[DeltaStateBackend] = []
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            got.append(config.open(instance_id="worker"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({id(b) for b in got}) == 1
    got[0].write_partial(0, 1, 0, b"x")
    assert got[0].epoch_complete(1, [0])


def test_uncached_opens_from_threads_share_the_store(store_uri: str) -> None:
    """Separate backends created concurrently (uncached) all open one consistent store."""
    config = _config(store_uri)
    barrier = threading.Barrier(4)
    got: list[DeltaStateBackend] = []

    def run(i: int) -> None:
        barrier.wait()
        backend = config.open(instance_id=f"w{i}", cached=False)
        backend.write_partial(i, 0, 0, b"%d" % i)
        got.append(backend)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert got[0].read_epoch(0) == {i: b"%d" % i for i in range(4)}
    finally:
        for b in got:
            b.close()


def test_closed_cached_backend_is_replaced(store_uri: str) -> None:
    """Opening after the cached backend was closed gives a fresh, open one."""
    config = _config(store_uri)
    first = config.open(instance_id="a")
    first.close()
    second = config.open(instance_id="a")
    assert second is not first
    assert second.committed_epochs() == []


def _child(blob: bytes) -> tuple[str, list[int]]:
    config = pickle.loads(blob)
    backend = config.open(instance_id="executor-1")
    manager = config.checkpoint_manager(instance_id="executor-1")
    assert manager.backend is backend  # the cached backend of this process
    manager.put(b"k", b"from-child")
    manager.checkpoint()
    handles = config.handle_store(instance_id="executor-1")
    handles.add("latest", b"%d" % backend.committed_epochs()[-1], assignment_version=0)
    return repr(config), backend.committed_epochs()


def test_pickled_config_opens_in_a_spawned_process(store_uri: str) -> None:
    """A config shipped to a spawn process opens the same store there (like a Spark executor)."""
    config = _config(store_uri)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        child_repr, epochs = pool.apply(_child, (pickle.dumps(config),))
    assert SECRET not in child_repr
    assert epochs == [0]
    backend = config.open(instance_id="driver")
    assert sorted(backend.read_epoch(0)) == list(range(8))
    assert config.handle_store(instance_id="driver").get("latest").state == b"0"
    assert config.checkpoint_manager(instance_id="driver").state_at() == {b"k": b"from-child"}
