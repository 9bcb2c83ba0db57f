"""The state-backend contract.

A :class:`StateBackend` persists one *partial* (opaque bytes) per *vnode* per
*epoch*. A checkpoint coordinator calls :meth:`StateBackend.epoch_complete`
once every worker has written its partials; the call seals the epoch with a
compare-and-set commit marker, so two coordinators that both believe they
lead can never both seal it. A durable assignment-version *fence* rejects
writers of a deposed leader.

One instance is shared by many worker threads: every implementation is
thread-safe. :class:`AsyncStateBackend` is the asyncio twin.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

__all__ = ["AsOf", "AsyncStateBackend", "StateBackend"]

AsOf = int | datetime
"""A point in a table's history: a Delta table version or a point in time."""


class StateBackend(ABC):
    """A pluggable, thread-safe state store for streaming operators."""

    @abstractmethod
    def write_partial(self, vnode: int, epoch: int, assignment_version: int, data: bytes) -> None:
        """Persist ``data`` as the partial of ``vnode`` at ``epoch``.

        ``assignment_version`` is the assignment version the writer observed
        when it started this write. A fencing backend raises
        :class:`~statelake.errors.StaleVersion` when it is older than the
        durable fence. Idempotent: replaying the same bytes changes nothing;
        different bytes at the same ``(vnode, epoch, assignment_version)``
        raise :class:`~statelake.errors.ConflictingPartial`. Returns only
        once the partial is durable.
        """

    def write_partials(
        self, epoch: int, assignment_version: int, partials: Mapping[int, bytes]
    ) -> None:
        """Persist the partials of many vnodes of one epoch (vnode -> bytes).

        Same semantics as calling :meth:`write_partial` for each vnode; a
        backend may make it one storage commit. All arguments are checked
        before anything is written.
        """
        for vnode, data in partials.items():
            self.write_partial(vnode, epoch, assignment_version, data)

    @abstractmethod
    def read_partial(self, vnode: int, epoch: int) -> bytes | None:
        """Return the partial of ``vnode`` at ``epoch``, or ``None``.

        When several assignment versions wrote the same ``(vnode, epoch)``,
        the highest version wins: a stale writer can never shadow a newer one.
        """

    @abstractmethod
    def epoch_complete(self, epoch: int, vnodes: Sequence[int]) -> bool:
        """Durability barrier: seal ``epoch`` iff every listed vnode has a partial.

        Returns ``True`` once the epoch is sealed by this instance (again
        ``True`` on every later call), ``False`` if some vnode has no partial
        at an assignment version at least the fence. Raises
        :class:`~statelake.errors.SplitBrainCommit` if another instance
        sealed it.
        """

    @abstractmethod
    def prune_before(self, before: int) -> None:
        """Garbage-collect every partial and commit marker with ``epoch < before``.

        Required, with no default: a backend that keeps state forever leaks
        it. The fence is never pruned.
        """

    @abstractmethod
    def set_authoritative_version(self, version: int) -> None:
        """Raise the fence to ``version``; monotonic (a lower value is a no-op)."""

    @abstractmethod
    def authoritative_version(self) -> int:
        """The current fence. ``0`` means the fence is disabled."""

    @abstractmethod
    def committed_epochs(self) -> list[int]:
        """Sealed epochs still retained, ascending."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources (threads, open handles). Idempotent."""

    def __enter__(self) -> StateBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncStateBackend:
    """The asyncio twin of a :class:`StateBackend`.

    Same method names, as coroutines. Blocking storage calls run on worker
    threads (``asyncio.to_thread``), so many coroutines writing at once are
    group-committed by the wrapped backend exactly as threads are.

    >>> backend = AsyncStateBackend(InMemoryBackend(vnode_capacity=4))  # doctest: +SKIP
    >>> await backend.write_partial(0, 1, 0, b"state")                   # doctest: +SKIP
    """

    def __init__(self, backend: StateBackend) -> None:
        self.sync = backend

    async def write_partial(
        self, vnode: int, epoch: int, assignment_version: int, data: bytes
    ) -> None:
        await asyncio.to_thread(self.sync.write_partial, vnode, epoch, assignment_version, data)

    async def write_partials(
        self, epoch: int, assignment_version: int, partials: Mapping[int, bytes]
    ) -> None:
        await asyncio.to_thread(self.sync.write_partials, epoch, assignment_version, partials)

    async def read_partial(self, vnode: int, epoch: int, **kwargs: Any) -> bytes | None:
        return await asyncio.to_thread(self.sync.read_partial, vnode, epoch, **kwargs)

    async def epoch_complete(self, epoch: int, vnodes: Sequence[int]) -> bool:
        return await asyncio.to_thread(self.sync.epoch_complete, epoch, list(vnodes))

    async def prune_before(self, before: int) -> None:
        await asyncio.to_thread(self.sync.prune_before, before)

    async def set_authoritative_version(self, version: int) -> None:
        await asyncio.to_thread(self.sync.set_authoritative_version, version)

    async def authoritative_version(self) -> int:
        return await asyncio.to_thread(self.sync.authoritative_version)

    async def committed_epochs(self, **kwargs: Any) -> list[int]:
        return await asyncio.to_thread(self.sync.committed_epochs, **kwargs)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncStateBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
