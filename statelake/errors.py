"""The statelake error hierarchy.

Every error statelake raises derives from :class:`StateBackendError`. Each
subclass names the invariant that was broken and keeps the facts of the case
as attributes, so callers can branch on them without parsing messages.
"""

from __future__ import annotations

__all__ = [
    "AmbiguousCommit",
    "ConflictingPartial",
    "CorruptState",
    "InvalidArgument",
    "NotAStateStore",
    "PayloadTooLarge",
    "SplitBrainCommit",
    "StaleVersion",
    "StateBackendError",
    "StorageError",
    "VnodeOutOfRange",
]


class StateBackendError(Exception):
    """Root of every error raised by statelake."""


class InvalidArgument(StateBackendError, ValueError):
    """An argument was rejected before anything was written."""


class VnodeOutOfRange(InvalidArgument):
    """A vnode id is outside ``[0, capacity)``."""

    def __init__(self, vnode: int, capacity: int) -> None:
        self.vnode = vnode
        self.capacity = capacity
        super().__init__(f"vnode {vnode} is out of range: expected 0 <= vnode < {capacity}")


class PayloadTooLarge(InvalidArgument):
    """A partial is larger than the store's configured maximum."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"partial of {size} bytes exceeds max_partial_bytes={limit}; "
            "raise the limit when opening the backend or split the state"
        )


class StaleVersion(StateBackendError):
    """A writer's assignment version is behind the durable fence.

    The writer belongs to a deposed leader: it must stop writing and re-read
    its assignment.
    """

    def __init__(self, caller: int, authoritative: int) -> None:
        self.caller = caller
        self.authoritative = authoritative
        super().__init__(
            f"stale assignment version: caller has {caller}, "
            f"authoritative version is {authoritative}"
        )


class SplitBrainCommit(StateBackendError):
    """Another instance already sealed this epoch.

    Two coordinators believed they led the same checkpoint; the one that
    receives this error lost the compare-and-set and must step down.
    """

    def __init__(self, committer: str, self_id: str, epoch: int | None = None) -> None:
        self.committer = committer
        self.self_id = self_id
        self.epoch = epoch
        where = f"epoch {epoch}" if epoch is not None else "the epoch"
        super().__init__(
            f"split brain: {where} was sealed by {committer!r}, not by this instance {self_id!r}"
        )


class ConflictingPartial(StateBackendError):
    """Different bytes were written for the same (vnode, epoch, assignment_version).

    Replaying identical bytes is harmless; different bytes mean an upstream
    bug (two writers believed they owned the same vnode at the same version),
    so statelake reports it instead of picking one.
    """

    def __init__(self, vnode: int, epoch: int, assignment_version: int, detail: str = "") -> None:
        self.vnode = vnode
        self.epoch = epoch
        self.assignment_version = assignment_version
        msg = (
            f"conflicting partial for vnode {vnode}, epoch {epoch}, assignment version "
            f"{assignment_version}: a different payload is already stored"
        )
        super().__init__(f"{msg} ({detail})" if detail else msg)


class StorageError(StateBackendError):
    """The storage layer failed (unreachable, permission denied, read-only...)."""

    def __init__(self, message: str, *, uri: str | None = None) -> None:
        self.uri = uri
        super().__init__(f"{message} [{uri}]" if uri else message)


class NotAStateStore(StorageError):
    """The URI holds something that is not a statelake store (or another table)."""


class AmbiguousCommit(StorageError):
    """A commit may or may not have landed and re-reading could not tell.

    statelake re-reads the log after any storage fault at the commit step;
    this error is raised only when that re-read itself keeps failing. The
    next call on the backend resolves the outcome.
    """


class CorruptState(StateBackendError):
    """Stored state fails an integrity check (checksum, missing file, schema)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{message} [{path}]" if path else message)
