"""The control table: commit markers and the fence, changed only through MERGE.

Every change is a delta-rs MERGE committed with ``max_commit_retries=0``: if
any other commit landed on the control table since we read it, the commit
fails instead of being rebased, and the caller re-reads the table and decides
again. That turns each MERGE into a compare-and-set on the whole control
table, which is what makes "exactly one instance seals an epoch" and "the
fence never goes down" hold across processes and machines.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.table import TableMerger

from .. import _schemas
from ._log import LogDelta
from ._partials import read_file
from ._storage import Storage

COMMIT = "commit"
FENCE = "fence"
FENCE_EPOCH = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class Marker:
    """One row of the control table."""

    kind: str
    epoch: int
    committer: str
    assignment_version: int
    updated_at: datetime
    vnodes: tuple[int, ...] | None
    token: str


def marker_table(markers: list[Marker]) -> pa.Table:
    schema = _schemas.arrow_schema(_schemas.CONTROL)
    return pa.table(
        {
            "kind": [m.kind for m in markers],
            "epoch": [m.epoch for m in markers],
            "committer": [m.committer for m in markers],
            "assignment_version": [m.assignment_version for m in markers],
            "updated_at": [m.updated_at for m in markers],
            "vnodes": [list(m.vnodes) if m.vnodes is not None else None for m in markers],
            "token": [m.token for m in markers],
        },
        schema=schema,
    )


def markers_of(table: pa.Table) -> list[Marker]:
    d = table.to_pydict()
    return [
        Marker(
            kind=d["kind"][i],
            epoch=int(d["epoch"][i]),
            committer=d["committer"][i],
            assignment_version=int(d["assignment_version"][i]),
            updated_at=d["updated_at"][i],
            vnodes=tuple(d["vnodes"][i]) if d["vnodes"][i] is not None else None,
            token=d["token"][i],
        )
        for i in range(table.num_rows)
    ]


def cas_merge(
    dt: DeltaTable,
    base: int,
    source: pa.Table,
    predicate: str,
    clauses: Callable[[TableMerger], TableMerger],
    *,
    custom_metadata: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """A MERGE committed as a compare-and-set on table version ``base``.

    It runs against exactly version ``base`` with no commit retries, so if
    any commit landed after ``base`` it fails instead of being rebased:
    returns None (lost the race, nothing landed; re-read and decide again).
    Any other error is raised: the commit may or may not have landed, and
    only the caller knows how to find out.
    """
    if dt.version() != base:
        dt.load_as_version(base)
    merger = dt.merge(
        source,
        predicate,
        source_alias="s",
        target_alias="t",
        streamed_exec=False,
        commit_properties=CommitProperties(max_commit_retries=0, custom_metadata=custom_metadata),
    )
    try:
        return dict(clauses(merger).execute())
    except CommitFailedError:
        return None


class ControlState:
    """The control table's rows, kept in step with its log (files are read once)."""

    def __init__(self, storage: Storage, table: str = _schemas.CONTROL) -> None:
        self.storage = storage
        self.table = table
        self.lock = threading.RLock()
        self.version = -1
        self._files: dict[str, list[Marker]] = {}
        self._commits: dict[int, list[Marker]] = {}
        self._fence = 0

    def apply(self, delta: LogDelta) -> None:
        with self.lock:
            if delta.reset:
                self._files.clear()
            for path in delta.removed:
                self._files.pop(path, None)
            for entry in delta.added:
                if entry.path not in self._files:
                    rows = read_file(self.storage, self.table, entry.path)
                    self._files[entry.path] = markers_of(rows)
            self.version = delta.version
            self._reindex()

    def _reindex(self) -> None:
        commits: dict[int, list[Marker]] = {}
        fence = 0
        for rows in self._files.values():
            for m in rows:
                if m.kind == COMMIT:
                    commits.setdefault(m.epoch, []).append(m)
                elif m.kind == FENCE:
                    fence = max(fence, m.assignment_version)
        for ms in commits.values():
            ms.sort(key=lambda m: (m.updated_at, m.token))
        self._commits = commits
        self._fence = fence

    def rows(self) -> list[Marker]:
        with self.lock:
            return [m for rows in self._files.values() for m in rows]

    def fence(self) -> int:
        with self.lock:
            return self._fence

    def commits(self) -> dict[int, list[Marker]]:
        """Commit markers by epoch, oldest first; more than one per epoch is an anomaly."""
        with self.lock:
            return {e: list(ms) for e, ms in self._commits.items()}

    def commit_marker(self, epoch: int) -> Marker | None:
        with self.lock:
            ms = self._commits.get(epoch)
            return ms[0] if ms else None

    def committed_epochs(self) -> list[int]:
        with self.lock:
            return sorted(self._commits)

    def file_count(self) -> int:
        with self.lock:
            return len(self._files)
