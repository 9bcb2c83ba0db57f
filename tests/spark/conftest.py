"""A real local Spark session per test module, and small stores to read."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statelake import DeltaStateBackend

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local session per module (2 cores, UI off); stopped after the module."""
    if shutil.which("java") is None:
        pytest.skip("Java is not installed: Spark tests need a JVM")
    from statelake.spark import local_session

    session = local_session("statelake-tests", cores=2, shuffle_partitions=2)
    yield session
    session.stop()


StoreFactory = Callable[..., str]


@pytest.fixture
def make_store(tmp_path: Path) -> StoreFactory:
    """``make_store(layout, epochs=3, vnodes=4, prune_before=None)``: sealed epochs on disk.

    The partial of (epoch e, vnode v) is ``b"e{e}v{v}"`` at assignment version 1.
    """

    def build(
        layout: str = "card", *, epochs: int = 3, vnodes: int = 4, prune_before: int | None = None
    ) -> str:
        uri = str(tmp_path / f"store-{layout}")
        b = DeltaStateBackend(uri, instance_id="node-a", vnode_capacity=vnodes, layout=layout)
        try:
            b.set_authoritative_version(1)
            for e in range(epochs):
                b.write_partials(e, 1, {v: f"e{e}v{v}".encode() for v in range(vnodes)})
                assert b.epoch_complete(e, list(range(vnodes)))
            if prune_before is not None:
                b.prune_before(prune_before)
        finally:
            b.close()
        return uri

    return build
