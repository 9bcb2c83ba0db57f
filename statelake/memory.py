"""The in-process reference backend: the model the tests compare engines to."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ._validation import check_capacity, check_int, check_payload, check_vnode, check_vnodes
from .backend import StateBackend
from .errors import ConflictingPartial, SplitBrainCommit, StaleVersion

__all__ = ["InMemoryBackend"]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Row:
    assignment_version: int
    data: bytes


@dataclass(slots=True)
class _Store:
    """What instances viewing the same in-memory store share."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    rows: dict[tuple[int, int], dict[int, _Row]] = field(default_factory=dict)
    commits: dict[int, str] = field(default_factory=dict)
    fence: int = 0


class InMemoryBackend(StateBackend):
    """A thread-safe backend that keeps everything in a dict.

    It fences nothing by default (``fencing=False``: :meth:`authoritative_version`
    is always 0, as for a single-node deployment). With ``fencing=True`` it
    models the full contract of the durable engines, which is how the tests
    use it as the reference.
    """

    def __init__(
        self,
        *,
        vnode_capacity: int,
        instance_id: str = "memory",
        fencing: bool = False,
        max_partial_bytes: int | None = None,
    ) -> None:
        self.vnode_capacity = check_capacity(vnode_capacity)
        self.instance_id = instance_id
        self.fencing = fencing
        self.max_partial_bytes = max_partial_bytes
        self._store = _Store()

    def view_as(self, instance_id: str) -> InMemoryBackend:
        """Another instance on the same store (a second coordinator, for split-brain tests)."""
        other = InMemoryBackend(
            vnode_capacity=self.vnode_capacity,
            instance_id=instance_id,
            fencing=self.fencing,
            max_partial_bytes=self.max_partial_bytes,
        )
        other._store = self._store
        return other

    def write_partial(self, vnode: int, epoch: int, assignment_version: int, data: bytes) -> None:
        self.write_partials(epoch, assignment_version, {vnode: data})

    def write_partials(
        self, epoch: int, assignment_version: int, partials: Mapping[int, bytes]
    ) -> None:
        check_int("epoch", epoch)
        check_int("assignment_version", assignment_version)
        checked = {
            check_vnode(v, self.vnode_capacity): check_payload(d, self.max_partial_bytes)
            for v, d in partials.items()
        }
        with self._store.lock:
            if assignment_version < self._store.fence:
                raise StaleVersion(assignment_version, self._store.fence)
            for vnode, data in checked.items():
                existing = self._store.rows.get((epoch, vnode), {}).get(assignment_version)
                if existing is not None and existing.data != data:
                    raise ConflictingPartial(vnode, epoch, assignment_version)
            for vnode, data in checked.items():
                versions = self._store.rows.setdefault((epoch, vnode), {})
                versions.setdefault(
                    assignment_version, _Row(assignment_version=assignment_version, data=data)
                )

    def read_partial(self, vnode: int, epoch: int) -> bytes | None:
        check_vnode(vnode, self.vnode_capacity)
        check_int("epoch", epoch)
        with self._store.lock:
            versions = self._store.rows.get((epoch, vnode))
            if not versions:
                return None
            return versions[max(versions)].data

    def epoch_complete(self, epoch: int, vnodes: Sequence[int]) -> bool:
        check_int("epoch", epoch)
        listed = check_vnodes(vnodes, self.vnode_capacity)
        with self._store.lock:
            committer = self._store.commits.get(epoch)
            if committer is not None:
                if committer != self.instance_id:
                    raise SplitBrainCommit(committer, self.instance_id, epoch)
                return True
            for vnode in listed:
                versions = self._store.rows.get((epoch, vnode))
                if not versions or max(versions) < self._store.fence:
                    return False
            self._store.commits[epoch] = self.instance_id
            return True

    def prune_before(self, before: int) -> None:
        check_int("before", before)
        with self._store.lock:
            self._store.rows = {k: v for k, v in self._store.rows.items() if k[0] >= before}
            self._store.commits = {e: c for e, c in self._store.commits.items() if e >= before}

    def set_authoritative_version(self, version: int) -> None:
        check_int("version", version)
        if not self.fencing:
            return
        with self._store.lock:
            self._store.fence = max(self._store.fence, version)

    def authoritative_version(self) -> int:
        return self._store.fence

    def committed_epochs(self) -> list[int]:
        with self._store.lock:
            return sorted(self._store.commits)

    def seal_as(self, epoch: int, committer: str) -> None:
        """Record a commit marker by another instance (tests pre-seed races with it)."""
        with self._store.lock:
            self._store.commits.setdefault(epoch, committer)
