"""A handle store on Delta Lake: named, versioned state handles with leader-only updates.

:class:`DeltaHandleStore` keeps small named entries ("state handles", for
example the pointer to the latest completed checkpoint) in a third Delta
table, ``<root>/handles``, beside a store's ``partials`` and ``control``
tables. It follows the semantics of Flink's ``StateHandleStore``:

* ``add`` fails with :class:`HandleExists` if the name is taken;
* ``replace`` succeeds only if the caller's resource version is the current
  one (:class:`ResourceVersionMismatch` otherwise: an update snuck in);
* ``exists`` returns the current resource version (or ``None``), ``get``,
  ``get_all`` and ``list_names`` read, with Delta time travel via ``as_of``;
* ``release_and_try_remove`` and ``clear`` remove entries;
* only the leader may change entries: every mutation carries the caller's
  assignment version and is rejected with :class:`~statelake.StaleVersion`
  when it is below the store's durable fence (the fence row of the same
  root's ``control`` table, raised with
  :meth:`DeltaStateBackend.set_authoritative_version`).

How a change is made: the decision (does the name exist, does the version
match, is the fence respected) is taken on one snapshot of the handles table,
version ``V``, and the change is a delta-rs MERGE committed against exactly
``V`` with ``max_commit_retries=0``. If anything else committed since, the
commit fails and the store re-reads and decides again: a compare-and-set on
the whole table. Because the commit lands at ``V + 1`` or not at all, the new
resource version is ``V + 1``: globally increasing, and also the table
version that shows the entry as written (``get(name, as_of=rv)``).

Ambiguous writes: when the commit step fails with a storage fault (not a
lost race), the store reads commit ``V + 1`` of the log. If it holds this
attempt's token the write landed and the call returns normally; if it holds
another writer's commit the write did not land and the store decides again.
If the log cannot prove either (the commit file is absent or unreadable), the
call raises :class:`PossiblyInconsistent`; the caller resolves it by
re-reading, e.g. with :meth:`DeltaHandleStore.resolve` once storage is back.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from . import _schemas
from ._validation import check_int
from .backend import AsOf
from .delta._backend import _check_as_of, _sleep_backoff
from .delta._control import ControlState, cas_merge
from .delta._log import LogDelta, LogFollower, entries_of, open_table
from .delta._partials import read_file
from .delta._storage import Storage, redact
from .delta._tables import TableSettings, ensure_table
from .errors import (
    InvalidArgument,
    NotAStateStore,
    StaleVersion,
    StateBackendError,
    StorageError,
)

__all__ = [
    "DeltaHandleStore",
    "Handle",
    "HandleExists",
    "HandleNotFound",
    "PossiblyInconsistent",
    "ResourceVersionMismatch",
]

HANDLES = "handles"
_Entries = list[tuple[str, bytes]]
_ATTEMPTS = 200
_TOKEN_KEY = "statelake.token"


class HandleExists(StateBackendError):
    """``add`` found the name already taken (Flink's ``AlreadyExistException``)."""

    def __init__(self, name: str, resource_version: int) -> None:
        self.name = name
        self.resource_version = resource_version
        super().__init__(
            f"handle {name!r} already exists (resource version {resource_version}); "
            "use replace() with that version to change it"
        )


class HandleNotFound(StateBackendError, KeyError):
    """The named handle does not exist (Flink's ``NotExistException``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"handle {name!r} does not exist")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ResourceVersionMismatch(StateBackendError):
    """``replace``'s expected resource version is not the current one."""

    def __init__(self, name: str, expected: int, found: int) -> None:
        self.name = name
        self.expected = expected
        self.found = found
        super().__init__(
            f"handle {name!r} changed concurrently: expected resource version "
            f"{expected}, found {found}; re-read it and decide again"
        )


class PossiblyInconsistent(StorageError):
    """A storage fault hit the commit and the log cannot tell whether it landed.

    Nothing was discarded. ``base_version`` is the handles-table version the
    write was decided on and ``token`` the id of the attempt; the write
    landed iff commit ``base_version + 1`` carries ``token``.
    :meth:`DeltaHandleStore.resolve` answers that once storage is readable.
    """

    def __init__(
        self, *, operation: str, name: str | None, base_version: int, token: str, uri: str
    ) -> None:
        self.operation = operation
        self.name = name
        self.base_version = base_version
        self.token = token
        what = f"{operation} of handle {name!r}" if name is not None else operation
        super().__init__(
            f"{what} may or may not have been committed (a storage fault hit the commit "
            f"on top of table version {base_version}); re-read to resolve it",
            uri=uri,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Handle:
    """One stored entry: the handle bytes and the facts of its last write."""

    name: str
    state: bytes
    resource_version: int
    writer: str
    assignment_version: int
    updated_at: datetime


def _handles_of(table: pa.Table) -> list[Handle]:
    d = table.to_pydict()
    return [
        Handle(
            name=d["name"][i],
            state=bytes(d["state"][i]),
            resource_version=int(d["resource_version"][i]),
            writer=d["writer"][i],
            assignment_version=int(d["assignment_version"][i]),
            updated_at=d["updated_at"][i],
        )
        for i in range(table.num_rows)
    ]


class _Rows:
    """The handles table's live rows by data file, kept in step with its log."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.version = -1
        self._files: dict[str, list[Handle]] = {}

    def apply(self, delta: LogDelta) -> None:
        if delta.reset:
            self._files.clear()
        for path in delta.removed:
            self._files.pop(path, None)
        for entry in delta.added:
            if entry.path not in self._files:
                self._files[entry.path] = _handles_of(read_file(self.storage, HANDLES, entry.path))
        self.version = delta.version

    def by_name(self) -> dict[str, Handle]:
        return {h.name: h for rows in self._files.values() for h in rows}


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"handle name must be a non-empty string, got {name!r}")
    return name


def _check_state(state: object) -> bytes:
    if isinstance(state, (bytearray, memoryview)):
        state = bytes(state)
    if not isinstance(state, bytes):
        raise InvalidArgument(f"handle state must be bytes, got {type(state).__name__}")
    return state


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class DeltaHandleStore:
    """Named, versioned state handles in ``<root>/handles`` (see the module doc).

    ``uri`` is a store root (the same one a :class:`~statelake.DeltaStateBackend`
    uses, so the fence is shared); the handles table is created on first use.
    ``instance_id`` is recorded as the writer of each change.
    ``storage_options`` go to delta-rs and the file layer and are never
    printed. ``settings`` are the Delta table properties used at creation.

    Thread-safe: mutations of one instance are serialized; instances in other
    threads, processes or machines race through the compare-and-set.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        instance_id: str,
        storage_options: Mapping[str, str] | None = None,
        settings: TableSettings | None = None,
    ) -> None:
        if not isinstance(instance_id, str) or not instance_id.strip():
            raise InvalidArgument(f"instance_id must be a non-empty string, got {instance_id!r}")
        self.instance_id = instance_id
        self.storage = Storage(os.fspath(uri), storage_options)
        self.uri = self.storage.root
        self.storage.check_writable()
        if self.storage.exists("_delta_log"):
            raise NotAStateStore(
                "the URI is itself a Delta table; a statelake store is a folder of tables",
                uri=self.uri,
            )
        # vnode_capacity is a property of the partials table; the handles table has none.
        self._dt: DeltaTable = ensure_table(
            self.storage,
            HANDLES,
            layout="card",
            vnode_capacity=0,
            settings=settings or TableSettings(),
            create=True,
        )
        self._lock = threading.RLock()
        self._rows = _Rows(self.storage)
        self._log = LogFollower(self.storage, HANDLES)
        self._control = ControlState(self.storage)
        self._control_log = LogFollower(self.storage, _schemas.CONTROL)
        # Test seam: called between the decision and the MERGE (inject races and faults here).
        self._before_commit: Callable[[str], None] | None = None

    def __repr__(self) -> str:
        return (
            f"DeltaHandleStore({self.uri!r}, instance_id={self.instance_id!r}, "
            f"storage_options={redact(self.storage.options)!r})"
        )

    # -- reading -----------------------------------------------------------------
    def _refresh(self) -> None:
        with self._lock:
            delta = self._log.poll()
            if delta is not None:
                self._rows.apply(delta)

    def _fence(self) -> int:
        """The durable fence of this store root (0 while there is no control table)."""
        with self._control.lock:
            if self._control_log.version < 0 and not self.storage.exists(
                f"{_schemas.CONTROL}/_delta_log"
            ):
                return 0
            delta = self._control_log.poll()
            if delta is not None:
                self._control.apply(delta)
            return self._control.fence()

    def _snapshot(self, as_of: AsOf | None) -> dict[str, Handle]:
        if as_of is None:
            with self._lock:
                self._refresh()
                return self._rows.by_name()
        _check_as_of(as_of)
        dt = open_table(self.storage.uri(HANDLES), self.storage.options, as_of)
        rows = _Rows(self.storage)
        rows.apply(LogDelta(version=dt.version(), added=entries_of(dt), removed=[], reset=True))
        return rows.by_name()

    def exists(self, name: str, *, as_of: AsOf | None = None) -> int | None:
        """The current resource version of ``name``, or ``None`` if it does not exist."""
        handle = self._snapshot(as_of).get(_check_name(name))
        return handle.resource_version if handle is not None else None

    def get(self, name: str, *, as_of: AsOf | None = None) -> Handle:
        """The entry ``name``; :class:`HandleNotFound` if it does not exist."""
        handle = self._snapshot(as_of).get(_check_name(name))
        if handle is None:
            raise HandleNotFound(name)
        return handle

    def get_all(self, *, as_of: AsOf | None = None) -> list[Handle]:
        """Every entry, sorted by name."""
        snap = self._snapshot(as_of)
        return [snap[n] for n in sorted(snap)]

    def list_names(self, *, as_of: AsOf | None = None) -> list[str]:
        """Every entry's name, sorted."""
        return sorted(self._snapshot(as_of))

    def version(self) -> int:
        """The handles table's current Delta version."""
        with self._lock:
            self._refresh()
            return self._rows.version

    # -- mutations ---------------------------------------------------------------
    def add(self, name: str, state: bytes, *, assignment_version: int) -> int:
        """Create ``name`` holding ``state``; returns its resource version.

        Raises :class:`HandleExists` if the name is taken, :class:`StaleVersion`
        if ``assignment_version`` is below the fence.
        """
        _check_name(name)
        data = _check_state(state)

        def decide(snap: dict[str, Handle]) -> _Entries | None:
            if name in snap:
                raise HandleExists(name, snap[name].resource_version)
            return [(name, data)]

        return self._mutate(
            "add",
            name,
            assignment_version,
            decide,
            "t.name = s.name",
            lambda m: m.when_not_matched_insert_all(),
        )

    def replace(
        self, name: str, resource_version: int, state: bytes, *, assignment_version: int
    ) -> int:
        """Replace ``name``'s state if its resource version is still ``resource_version``.

        Returns the new resource version. Raises :class:`HandleNotFound`,
        :class:`ResourceVersionMismatch` or :class:`StaleVersion`.
        """
        _check_name(name)
        check_int("resource_version", resource_version)
        data = _check_state(state)

        def decide(snap: dict[str, Handle]) -> _Entries | None:
            current = snap.get(name)
            if current is None:
                raise HandleNotFound(name)
            if current.resource_version != resource_version:
                raise ResourceVersionMismatch(name, resource_version, current.resource_version)
            return [(name, data)]

        return self._mutate(
            "replace",
            name,
            assignment_version,
            decide,
            "t.name = s.name",
            lambda m: m.when_matched_update_all(
                predicate=f"t.resource_version = {resource_version} "
                f"AND t.assignment_version <= {assignment_version}"
            ),
        )

    def release_and_try_remove(
        self, name: str, *, assignment_version: int, resource_version: int | None = None
    ) -> bool:
        """Remove ``name``; ``True`` if it is gone (also if it never existed).

        This store takes no per-reader locks (Flink allows an empty release),
        so the only reason not to remove is a changed entry: with
        ``resource_version`` given, returns ``False`` without removing when
        the entry's version differs.
        """
        _check_name(name)
        if resource_version is not None:
            check_int("resource_version", resource_version)
        removed = True

        def decide(snap: dict[str, Handle]) -> _Entries | None:
            nonlocal removed
            current = snap.get(name)
            if current is None:
                return None
            if resource_version is not None and current.resource_version != resource_version:
                removed = False
                return None
            return [(name, current.state)]

        self._mutate(
            "remove",
            name,
            assignment_version,
            decide,
            "t.name = s.name",
            lambda m: m.when_matched_delete(
                predicate=f"t.assignment_version <= {assignment_version}"
            ),
        )
        return removed

    def clear(self, *, assignment_version: int) -> None:
        """Remove every entry (destructive; the table's history keeps them for time travel)."""

        def decide(snap: dict[str, Handle]) -> _Entries | None:
            if not snap:
                return None
            return [(h.name, h.state) for h in snap.values()]

        self._mutate(
            "clear",
            None,
            assignment_version,
            decide,
            "t.name = s.name",
            lambda m: m.when_matched_delete(
                predicate=f"t.assignment_version <= {assignment_version}"
            ),
        )

    def resolve(self, error: PossiblyInconsistent) -> bool:
        """Did the write behind ``error`` land? Reads commit ``base_version + 1``.

        ``False`` when that commit is another writer's or absent. On local
        disk and object stores with put-if-absent commits, a commit that is
        absent once the fault has cleared does not appear later.
        """
        landed = self._probe(error.base_version, error.token)
        return landed is True

    # -- the compare-and-set -------------------------------------------------------
    def _source(
        self, entries: _Entries, *, base: int, assignment_version: int, token: str
    ) -> pa.Table:
        now = datetime.now(timezone.utc)
        rv = base + 1  # the commit lands at base + 1 or not at all
        return pa.table(
            {
                "name": [n for n, _ in entries],
                "state": [s for _, s in entries],
                "resource_version": [rv] * len(entries),
                "writer": [self.instance_id] * len(entries),
                "assignment_version": [assignment_version] * len(entries),
                "updated_at": [now] * len(entries),
                "token": [token] * len(entries),
            },
            schema=_schemas.arrow_schema(HANDLES),
        )

    def _mutate(
        self,
        operation: str,
        name: str | None,
        assignment_version: int,
        decide: Callable[[dict[str, Handle]], _Entries | None],
        predicate: str,
        clauses: Callable[[Any], Any],
    ) -> int:
        check_int("assignment_version", assignment_version)
        with self._lock:
            for attempt in range(_ATTEMPTS):
                self._refresh()
                fence = self._fence()
                if assignment_version < fence:
                    raise StaleVersion(assignment_version, fence)
                base = self._rows.version
                entries = decide(self._rows.by_name())
                if entries is None:
                    current = self._rows.by_name().get(name) if name is not None else None
                    return current.resource_version if current is not None else base
                token = uuid.uuid4().hex
                source = self._source(
                    entries, base=base, assignment_version=assignment_version, token=token
                )
                if self._before_commit is not None:
                    self._before_commit(operation)
                if self._merge(operation, name, base, token, source, predicate, clauses):
                    self._refresh()
                    return base + 1
                _sleep_backoff(attempt)
        raise StorageError(
            f"could not {operation} handle {name!r}: the handles table kept changing "
            f"({_ATTEMPTS} attempts)",
            uri=self.storage.uri(HANDLES),
        )

    def _merge(
        self,
        operation: str,
        name: str | None,
        base: int,
        token: str,
        source: pa.Table,
        predicate: str,
        clauses: Callable[[Any], Any],
    ) -> bool:
        """One MERGE against exactly version ``base``: True if it landed, False if it lost."""
        try:
            result = cas_merge(
                self._dt,
                base,
                source,
                predicate,
                clauses,
                custom_metadata={_TOKEN_KEY: token, "statelake.writer": self.instance_id},
            )
            # None: lost the race, nothing landed; the caller re-reads and decides again.
            return result is not None
        except Exception as exc:
            landed = self._probe(base, token)
            if landed is None:
                raise PossiblyInconsistent(
                    operation=operation,
                    name=name,
                    base_version=base,
                    token=token,
                    uri=self.storage.uri(HANDLES),
                ) from exc
            return landed

    def _probe(self, base: int, token: str) -> bool | None:
        """Whose is commit ``base + 1``? True: ours; False: another's; None: cannot tell."""
        rel = f"{HANDLES}/_delta_log/{base + 1:020d}.json"
        for attempt in range(3):
            try:
                raw = self.storage.read_if_exists(rel)
            except StorageError:
                _sleep_backoff(attempt)
                continue
            if raw is None:
                return None
            for line in raw.splitlines():
                if not line.strip():
                    continue
                try:
                    action = json.loads(line)
                except ValueError:
                    return None  # torn read: not proof either way
                info = action.get("commitInfo")
                if info is not None:
                    return bool(info.get(_TOKEN_KEY) == token)
            return False
        return None

    def close(self) -> None:
        """Nothing to release (no background threads); present for symmetry."""

    def __enter__(self) -> DeltaHandleStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
