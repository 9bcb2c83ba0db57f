"""Shared fixtures: backends for the one contract suite, temporary stores."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statelake import DeltaStateBackend, InMemoryBackend, StateBackend

BackendFactory = Callable[..., StateBackend]

_counter = itertools.count()

# Engines the contract suite runs against. tests/reliability/ adds "delta_s3" (an
# S3-compatible server on loopback) through the `s3_store_uri` fixture below.
ENGINES = ["memory", "delta_card", "delta_packed", "delta_s3"]


@pytest.fixture
def store_uri(tmp_path: Path) -> str:
    """A fresh local store root."""
    return str(tmp_path / f"store-{next(_counter)}")


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_backend(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[BackendFactory]:
    """Factory of backends that share ONE store: ``make_backend(instance_id="a")``.

    For the in-memory engine every instance shares the same model object's
    state only when the same ``instance_id`` is asked for twice; a second
    instance id gets a view that records commits as that id (split-brain
    tests use it).
    """
    created: list[StateBackend] = []
    if engine == "memory":
        shared: dict[str, InMemoryBackend] = {}
        first: list[InMemoryBackend] = []

        def factory(
            instance_id: str = "node-a", vnode_capacity: int = 16, **kw: object
        ) -> StateBackend:
            if not first:
                b = InMemoryBackend(
                    vnode_capacity=vnode_capacity, instance_id=instance_id, fencing=True
                )
                first.append(b)
                shared[instance_id] = b
                return b
            if instance_id not in shared:
                shared[instance_id] = first[0].view_as(instance_id)
            return shared[instance_id]

        yield factory
        return

    if engine == "delta_s3":
        uri, options = request.getfixturevalue("s3_store")
    else:
        uri, options = str(tmp_path / "store"), {}
    layout = "packed" if engine == "delta_packed" else "card"

    def delta_factory(
        instance_id: str = "node-a", vnode_capacity: int = 16, **kw: object
    ) -> StateBackend:
        b = DeltaStateBackend(
            uri,
            instance_id=instance_id,
            vnode_capacity=vnode_capacity,
            storage_options=options,
            layout=layout,
            **kw,  # type: ignore[arg-type]
        )
        created.append(b)
        return b

    yield delta_factory
    for b in created:
        b.close()


@pytest.fixture
def s3_store() -> tuple[str, dict[str, str]]:
    """(uri, storage_options) of a fresh prefix on an S3-compatible server on loopback.

    Provided by tests/reliability (moto's server); skipped where it cannot start.
    """
    try:
        from tests.s3server import fresh_s3_store
    except ImportError as exc:  # pragma: no cover - until the S3 harness exists
        pytest.skip(f"S3 test server harness unavailable: {exc}")
    return fresh_s3_store()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("engine") == "delta_s3":
            item.add_marker(pytest.mark.s3)
    del config
