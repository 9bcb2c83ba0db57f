"""Auditing a store: read both tables at one version and check every sealed epoch.

:func:`audit` is the check behind ``statelake verify`` and is meant to be
reused (schedulers, tests, notebooks). It never writes. It shares its
anomaly vocabulary with the Spark audit job, so a report from either names
the same problems the same way:

=============  ========  =====================================================
kind           severity  meaning
=============  ========  =====================================================
gap            error     a sealed epoch lacks a partial for a vnode its marker
                         lists (recovery would miss that vnode's state)
stale          error     a sealed epoch's effective partial (highest
                         assignment version) is below the fence recorded in
                         its marker (a deposed writer's state was sealed)
conflict       error     different payloads (CRC-32) at the same epoch, vnode
                         and assignment version (an upstream bug; reads fail)
duplicate      warning   identical rows repeated at the same key (harmless,
                         wastes space)
double_seal    error     more than one commit marker for one epoch (split
                         brain reached the table)
unsealed       warning   an epoch has partials but no marker and is older than
                         the latest sealed epoch (abandoned; prune removes it)
corrupt        error     a data file is missing or unreadable, or a payload
                         does not match its CRC-32
=============  ========  =====================================================

:func:`load_snapshot` is the read-only view the audit runs on: the live rows
of the partials table and the markers of the control table, each at a
version (or point in time) of its own. It resolves files through the Delta
log and reads Parquet files itself; it never goes through delta-rs' pyarrow
dataset scan (that can abort the interpreter at exit).
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from . import _schemas
from .delta._control import FENCE, ControlState, Marker
from .delta._log import FileEntry, LogDelta, entries_of, open_table
from .delta._partials import PartialRow, _rows_from_stats, best, read_file, read_payload
from .delta._storage import Storage
from .delta._tables import store_properties, validate
from .errors import CorruptState, InvalidArgument, NotAStateStore, StateBackendError

__all__ = [
    "ERROR_KINDS",
    "KINDS",
    "WARNING_KINDS",
    "Anomaly",
    "AuditReport",
    "Progress",
    "StoreSnapshot",
    "audit",
    "audit_snapshot",
    "commit_time",
    "load_snapshot",
    "open_storage",
]

KINDS: tuple[str, ...] = (
    "gap",
    "stale",
    "conflict",
    "duplicate",
    "double_seal",
    "unsealed",
    "corrupt",
)
"""Every anomaly kind, in the order reports list them."""

ERROR_KINDS: frozenset[str] = frozenset({"gap", "stale", "conflict", "double_seal", "corrupt"})
"""Kinds that make a report not ``ok``: recovery from the store may be wrong."""

WARNING_KINDS: frozenset[str] = frozenset(KINDS) - ERROR_KINDS
"""Kinds worth a look that do not endanger recovery (``duplicate``, ``unsealed``)."""

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: called as a long scan advances (for progress bars)."""

_READERS = 8  # parallel file reads; object stores are latency-bound


@dataclass(frozen=True, slots=True, kw_only=True)
class Anomaly:
    """One problem found by the audit.

    ``epoch`` and ``vnode`` are ``None`` when the anomaly is not about one
    (a double seal concerns a whole epoch; a missing packed file may hold
    many vnodes).
    """

    kind: str
    epoch: int | None
    vnode: int | None
    detail: str

    @property
    def severity(self) -> str:
        """``"error"`` for kinds in :data:`ERROR_KINDS`, else ``"warning"``."""
        return "error" if self.kind in ERROR_KINDS else "warning"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "epoch": self.epoch,
            "vnode": self.vnode,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditReport:
    """The outcome of :func:`audit`: anomalies (sorted) and what was examined."""

    uri: str
    partials_version: int
    control_version: int
    sealed_epochs: int
    partial_epochs: int
    partials: int
    files: int
    payloads_checked: int
    bytes_checked: int
    anomalies: tuple[Anomaly, ...] = ()

    @property
    def errors(self) -> tuple[Anomaly, ...]:
        return tuple(a for a in self.anomalies if a.kind in ERROR_KINDS)

    @property
    def warnings(self) -> tuple[Anomaly, ...]:
        return tuple(a for a in self.anomalies if a.kind not in ERROR_KINDS)

    @property
    def ok(self) -> bool:
        """True when no anomaly is an error (warnings alone keep a store ok)."""
        return not self.errors

    def counts(self) -> dict[str, int]:
        """Anomalies per kind, every kind present (0 when none)."""
        out = dict.fromkeys(KINDS, 0)
        for a in self.anomalies:
            out[a.kind] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "ok": self.ok,
            "versions": {"partials": self.partials_version, "control": self.control_version},
            "examined": {
                "sealed_epochs": self.sealed_epochs,
                "partial_epochs": self.partial_epochs,
                "partials": self.partials,
                "files": self.files,
                "payloads_checked": self.payloads_checked,
                "bytes_checked": self.bytes_checked,
            },
            "counts": self.counts(),
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "anomalies": [a.to_dict() for a in self.anomalies],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSnapshot:
    """Both tables of a store, read once at one version each; never written.

    ``entries`` maps each live data file's path to its log entry.
    ``rows`` maps epoch -> vnode -> every live row (duplicates and
    superseded assignment versions included, unlike a backend read).
    ``unreadable`` maps a data file's path to why its rows could not be
    listed (only packed files are read to list rows; card files carry their
    facts in the log). ``markers`` holds every commit marker by epoch,
    oldest first; more than one is a double seal. ``fence`` is the fence
    row, ``None`` while the fence was never raised.
    """

    uri: str
    storage: Storage
    layout: str
    vnode_capacity: int
    partials_version: int
    control_version: int
    configuration: Mapping[str, str]
    entries: Mapping[str, FileEntry]
    rows: Mapping[int, Mapping[int, tuple[PartialRow, ...]]]
    unreadable: Mapping[str, str]
    markers: Mapping[int, tuple[Marker, ...]]
    fence: Marker | None

    @property
    def files(self) -> tuple[FileEntry, ...]:
        """Every live data file of the partials table."""
        return tuple(self.entries.values())

    @property
    def authoritative_version(self) -> int:
        """The fence; 0 (disabled) when it was never raised."""
        return self.fence.assignment_version if self.fence is not None else 0

    def partial_epochs(self) -> list[int]:
        """Epochs holding at least one live data file, ascending."""
        epochs = set(self.rows)
        for path in self.unreadable:
            epoch = self.entries[path].partition.get("epoch")
            if epoch is not None:
                epochs.add(int(epoch))
        return sorted(epochs)

    def sealed_epochs(self) -> list[int]:
        return sorted(self.markers)

    def latest_sealed(self) -> int | None:
        return max(self.markers) if self.markers else None

    def epoch_rows(self, epoch: int) -> Mapping[int, tuple[PartialRow, ...]]:
        return self.rows.get(epoch, {})

    def all_rows(self) -> Iterable[PartialRow]:
        for by_vnode in self.rows.values():
            for rows in by_vnode.values():
                yield from rows

    def entry(self, path: str) -> FileEntry:
        return self.entries[path]

    def payload(self, row: PartialRow) -> bytes:
        """The verified bytes of one row (CorruptState on a missing file or bad CRC)."""
        return read_payload(self.storage, _schemas.PARTIALS, row)

    def row_details(
        self, rows: Iterable[PartialRow], *, progress: Progress | None = None
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """``writer`` and ``written_at`` of each row by ``(path, row)``; each file read once.

        These facts are not in the Delta log, so they cost one small read per
        data file (a few in parallel). CorruptState if a file is missing or short.
        """
        by_path: dict[str, list[PartialRow]] = {}
        for r in rows:
            by_path.setdefault(r.path, []).append(r)

        def read(path: str) -> tuple[str, list[Any], list[Any]]:
            t = read_file(self.storage, _schemas.PARTIALS, path, ["writer", "written_at"])
            return path, t.column("writer").to_pylist(), t.column("written_at").to_pylist()

        out: dict[tuple[str, int], dict[str, Any]] = {}
        with ThreadPoolExecutor(_READERS) as pool:
            for done, (path, writers, times) in enumerate(pool.map(read, by_path), 1):
                for r in by_path[path]:
                    if r.row >= len(writers):
                        raise CorruptState(
                            f"data file has {len(writers)} rows, the log promised row {r.row}",
                            path=self.storage.uri(f"{_schemas.PARTIALS}/{path}"),
                        )
                    out[(path, r.row)] = {"writer": writers[r.row], "written_at": times[r.row]}
                if progress is not None:
                    progress("reading partial metadata", done, len(by_path))
        return out


def open_storage(
    uri: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None
) -> Storage:
    """The file layer of the store at ``uri``, after checking a store is there.

    Raises :class:`~statelake.errors.NotAStateStore` with the reason a person
    can act on (no such path, a plain Delta table, an unrelated folder).
    """
    storage = Storage(os.fspath(uri), storage_options)
    if storage.exists(f"{_schemas.PARTIALS}/_delta_log") and storage.exists(
        f"{_schemas.CONTROL}/_delta_log"
    ):
        return storage
    if storage.exists("_delta_log"):
        raise NotAStateStore(
            "this is a Delta table, not a statelake store (a store is a folder holding "
            "'partials' and 'control' tables; pass the folder above it?)",
            uri=storage.root,
        )
    if storage.local and not os.path.exists(storage.root):
        raise NotAStateStore("no statelake store here: the path does not exist", uri=storage.root)
    raise NotAStateStore(
        "no statelake store here (expected 'partials/_delta_log' and 'control/_delta_log')",
        uri=storage.root,
    )


def _open_at(storage: Storage, table: str, as_of: int | datetime | None) -> Any:
    uri = storage.uri(table)
    latest = open_table(uri, storage.options)
    validate(latest, table, uri)
    if as_of is None:
        return latest
    if isinstance(as_of, bool) or not isinstance(as_of, (int, datetime)):
        raise InvalidArgument(f"as_of must be a table version or a datetime, got {as_of!r}")
    if isinstance(as_of, int) and not 0 <= as_of <= latest.version():
        raise InvalidArgument(
            f"the {table} table has no version {as_of} (versions 0..{latest.version()})"
        )
    when = as_of.isoformat() if isinstance(as_of, datetime) else f"version {as_of}"
    try:
        dt = open_table(uri, storage.options, as_of)
    except StateBackendError as exc:
        reason = str(exc.__cause__ or exc).splitlines()[0]
        raise InvalidArgument(f"cannot time-travel the {table} table to {when}: {reason}") from exc
    if isinstance(as_of, datetime):
        # delta-rs answers a time before the first commit with the first version.
        first = commit_time(storage, table, dt.version())
        if first is not None and as_of < first:
            raise InvalidArgument(
                f"the {table} table has no version at {when}: its oldest retained version "
                f"{dt.version()} was committed at {first.isoformat()}"
            )
    return dt


def commit_time(storage: Storage, table: str, version: int) -> datetime | None:
    """When ``version`` of ``table`` was committed (its log's commitInfo), or None.

    None when that log entry is gone (log cleanup) or does not exist yet.
    """
    raw = storage.read_if_exists(f"{table}/_delta_log/{version:020d}.json")
    if raw is None:
        return None
    for line in raw.splitlines():
        try:
            action = json.loads(line)
        except ValueError:
            continue
        info = action.get("commitInfo") if isinstance(action, dict) else None
        if isinstance(info, dict) and "timestamp" in info:
            return datetime.fromtimestamp(int(info["timestamp"]) / 1000, tz=timezone.utc)
    return None


def _resolve_rows(storage: Storage, entry: FileEntry) -> list[PartialRow]:
    """Rows of a file whose log statistics do not describe them (packed files)."""
    cols = ["assignment_version", "payload_size", "payload_crc32"]
    if "vnode" not in entry.partition:
        cols = ["vnode", *cols]
    t = read_file(storage, _schemas.PARTIALS, entry.path, cols).to_pydict()
    epoch = int(entry.partition.get("epoch") or 0)
    return [
        PartialRow(
            epoch=epoch,
            vnode=int(t["vnode"][i] if "vnode" in t else entry.partition["vnode"] or 0),
            assignment_version=int(t["assignment_version"][i]),
            payload_size=int(t["payload_size"][i]),
            payload_crc32=int(t["payload_crc32"][i]),
            path=entry.path,
            row=i,
        )
        for i in range(len(t["assignment_version"]))
    ]


def load_snapshot(
    uri: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, str] | None = None,
    partials_as_of: int | datetime | None = None,
    control_as_of: int | datetime | None = None,
    progress: Progress | None = None,
) -> StoreSnapshot:
    """Read the store at ``uri`` without writing anything.

    Each table is read at its latest version unless ``*_as_of`` names a
    version (an int) or a point in time (a timezone-aware datetime).
    Raises :class:`~statelake.errors.NotAStateStore` when ``uri`` holds no
    store and :class:`~statelake.errors.InvalidArgument` for a version or
    time the table cannot travel to.
    """
    storage = open_storage(uri, storage_options=storage_options)
    pt = _open_at(storage, _schemas.PARTIALS, partials_as_of)
    layout, capacity = store_properties(pt)
    files = tuple(entries_of(pt))
    rows: dict[int, dict[int, list[PartialRow]]] = {}
    unreadable: dict[str, str] = {}
    pending: list[FileEntry] = []
    for entry in files:
        stats_rows = _rows_from_stats(entry)
        if stats_rows is None:
            pending.append(entry)
            continue
        for r in stats_rows:
            rows.setdefault(r.epoch, {}).setdefault(r.vnode, []).append(r)

    def resolve(entry: FileEntry) -> tuple[FileEntry, list[PartialRow] | str]:
        try:
            return entry, _resolve_rows(storage, entry)
        except CorruptState as exc:
            return entry, str(exc)

    with ThreadPoolExecutor(_READERS) as pool:
        for done, (entry, result) in enumerate(pool.map(resolve, pending), 1):
            if isinstance(result, str):
                unreadable[entry.path] = result
            else:
                for r in result:
                    rows.setdefault(r.epoch, {}).setdefault(r.vnode, []).append(r)
            if progress is not None:
                progress("reading packed file metadata", done, len(pending))

    ct = _open_at(storage, _schemas.CONTROL, control_as_of)
    control = ControlState(storage)
    control.apply(LogDelta(version=ct.version(), added=entries_of(ct), removed=[], reset=True))
    fences = [m for m in control.rows() if m.kind == FENCE]
    return StoreSnapshot(
        uri=storage.root,
        storage=storage,
        layout=layout,
        vnode_capacity=capacity,
        partials_version=pt.version(),
        control_version=ct.version(),
        configuration=dict(pt.metadata().configuration),
        entries={e.path: e for e in files},
        rows={
            e: {v: tuple(rs) for v, rs in sorted(by_v.items())} for e, by_v in sorted(rows.items())
        },
        unreadable=unreadable,
        markers={e: tuple(ms) for e, ms in sorted(control.commits().items())},
        fence=max(fences, key=lambda m: m.assignment_version, default=None),
    )


def audit(
    uri: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, str] | None = None,
    check_payloads: bool = True,
    progress: Progress | None = None,
) -> AuditReport:
    """Audit the store at ``uri`` (latest versions of both tables).

    ``check_payloads`` (default True) reads every live data file and checks
    each payload against its CRC-32; False only checks that every file
    exists, which is much faster on an object store. See the module doc for
    the anomaly kinds. Raises only when the store cannot be read at all.
    """
    snap = load_snapshot(uri, storage_options=storage_options, progress=progress)
    return audit_snapshot(snap, check_payloads=check_payloads, progress=progress)


def audit_snapshot(
    snap: StoreSnapshot,
    *,
    check_payloads: bool = True,
    check_files: bool = True,
    progress: Progress | None = None,
) -> AuditReport:
    """:func:`audit` over an already loaded :class:`StoreSnapshot`.

    ``check_files=False`` skips the pass over data files entirely (only the
    log and the control table are judged; files that could not be listed
    are still reported): the quick health check of ``statelake status``.
    """
    found: list[Anomaly] = []
    found += _check_markers(snap)
    found += _check_rows(snap)
    checked = nbytes = 0
    if check_files:
        corrupt, checked, nbytes = _check_files(snap, check_payloads, progress)
        found += corrupt
    else:
        found += [
            Anomaly(kind="corrupt", epoch=_epoch_of(snap.entry(path)), vnode=None, detail=reason)
            for path, reason in snap.unreadable.items()
        ]
    order = {k: i for i, k in enumerate(KINDS)}
    found.sort(
        key=lambda a: (
            -1 if a.epoch is None else a.epoch,
            -1 if a.vnode is None else a.vnode,
            order[a.kind],
            a.detail,
        )
    )
    return AuditReport(
        uri=snap.uri,
        partials_version=snap.partials_version,
        control_version=snap.control_version,
        sealed_epochs=len(snap.markers),
        partial_epochs=len(snap.partial_epochs()),
        partials=sum(1 for _ in snap.all_rows()),
        files=len(snap.files),
        payloads_checked=checked,
        bytes_checked=nbytes,
        anomalies=tuple(found),
    )


def _epoch_of(entry: FileEntry) -> int | None:
    epoch = entry.partition.get("epoch")
    return None if epoch is None else int(epoch)


def _check_markers(snap: StoreSnapshot) -> list[Anomaly]:
    out: list[Anomaly] = []
    unreadable_epochs = {int(snap.entry(p).partition.get("epoch") or 0) for p in snap.unreadable}
    for epoch, markers in snap.markers.items():
        if len(markers) > 1:
            who = ", ".join(f"{m.committer!r} at {m.updated_at.isoformat()}" for m in markers)
            out.append(
                Anomaly(
                    kind="double_seal",
                    epoch=epoch,
                    vnode=None,
                    detail=f"{len(markers)} commit markers: {who}",
                )
            )
        marker = markers[0]  # the backend honours the oldest marker
        by_vnode = snap.epoch_rows(epoch)
        for vnode in marker.vnodes or ():
            top = best(list(by_vnode.get(vnode, ())))
            if not top:
                if epoch in unreadable_epochs:
                    continue  # reported as corrupt: the unreadable file may hold it
                out.append(
                    Anomaly(
                        kind="gap",
                        epoch=epoch,
                        vnode=vnode,
                        detail=f"sealed by {marker.committer!r} but no partial is stored",
                    )
                )
            elif top[0].assignment_version < marker.assignment_version:
                out.append(
                    Anomaly(
                        kind="stale",
                        epoch=epoch,
                        vnode=vnode,
                        detail=(
                            f"effective partial has assignment version "
                            f"{top[0].assignment_version}, below the fence "
                            f"{marker.assignment_version} recorded when the epoch was sealed"
                        ),
                    )
                )
    latest = snap.latest_sealed()
    if latest is not None:
        for epoch in snap.partial_epochs():
            if epoch < latest and epoch not in snap.markers:
                n = sum(len(rs) for rs in snap.epoch_rows(epoch).values())
                out.append(
                    Anomaly(
                        kind="unsealed",
                        epoch=epoch,
                        vnode=None,
                        detail=(
                            f"{n} partial(s) but no commit marker, older than the "
                            f"latest sealed epoch {latest}"
                        ),
                    )
                )
    return out


def _check_rows(snap: StoreSnapshot) -> list[Anomaly]:
    out: list[Anomaly] = []
    for epoch, by_vnode in snap.rows.items():
        for vnode, rows in by_vnode.items():
            by_version: dict[int, list[PartialRow]] = {}
            for r in rows:
                by_version.setdefault(r.assignment_version, []).append(r)
            for version, same in sorted(by_version.items()):
                if len(same) < 2:
                    continue
                payloads = {(r.payload_crc32, r.payload_size) for r in same}
                if len(payloads) > 1:
                    crcs = ", ".join(f"{c:08x}/{s} B" for c, s in sorted(payloads))
                    out.append(
                        Anomaly(
                            kind="conflict",
                            epoch=epoch,
                            vnode=vnode,
                            detail=(
                                f"{len(payloads)} different payloads at assignment version "
                                f"{version} (crc32/size: {crcs})"
                            ),
                        )
                    )
                else:
                    out.append(
                        Anomaly(
                            kind="duplicate",
                            epoch=epoch,
                            vnode=vnode,
                            detail=(f"{len(same)} identical rows at assignment version {version}"),
                        )
                    )
    return out


def _check_files(
    snap: StoreSnapshot, check_payloads: bool, progress: Progress | None
) -> tuple[list[Anomaly], int, int]:
    """Corrupt anomalies, payloads checked, bytes checked."""
    rows_by_file: dict[str, list[PartialRow]] = {}
    for r in snap.all_rows():
        rows_by_file.setdefault(r.path, []).append(r)
    storage = snap.storage

    def where(path: str) -> tuple[int | None, int | None]:
        part = snap.entry(path).partition
        rows = rows_by_file.get(path, [])
        epoch = part.get("epoch")
        vnode = part.get("vnode")
        if vnode is None and len({r.vnode for r in rows}) == 1:
            return rows[0].epoch, rows[0].vnode
        return (
            int(epoch) if epoch is not None else None,
            int(vnode) if vnode is not None else None,
        )

    def check(entry: FileEntry) -> tuple[list[Anomaly], int, int]:
        path = entry.path
        epoch, vnode = where(path)
        if path in snap.unreadable:
            detail = snap.unreadable[path]
            return [Anomaly(kind="corrupt", epoch=epoch, vnode=vnode, detail=detail)], 0, 0
        if not check_payloads:
            if storage.exists(f"{_schemas.PARTIALS}/{path}"):
                return [], 0, 0
            detail = f"data file referenced by the Delta log is missing: {path}"
            return [Anomaly(kind="corrupt", epoch=epoch, vnode=vnode, detail=detail)], 0, 0
        try:
            t = read_file(storage, _schemas.PARTIALS, path, ["payload", "payload_crc32"])
        except CorruptState as exc:
            return [Anomaly(kind="corrupt", epoch=epoch, vnode=vnode, detail=str(exc))], 0, 0
        payloads = t.column("payload").to_pylist()
        crcs = t.column("payload_crc32").to_pylist()
        bad: list[Anomaly] = []
        nbytes = 0
        for r in rows_by_file.get(path, []):
            if r.row >= len(payloads):
                bad.append(
                    Anomaly(
                        kind="corrupt",
                        epoch=r.epoch,
                        vnode=r.vnode,
                        detail=f"{path} has {len(payloads)} rows, the log promised row {r.row}",
                    )
                )
                continue
            data = payloads[r.row]
            nbytes += len(data)
            actual = zlib.crc32(data)
            if actual != r.payload_crc32 or actual != crcs[r.row]:
                bad.append(
                    Anomaly(
                        kind="corrupt",
                        epoch=r.epoch,
                        vnode=r.vnode,
                        detail=(
                            f"checksum mismatch in {path}: expected crc32 "
                            f"{r.payload_crc32:08x}, payload has {actual:08x}"
                        ),
                    )
                )
        return bad, len(rows_by_file.get(path, [])), nbytes

    out: list[Anomaly] = []
    checked = nbytes = 0
    phase = "checking payloads" if check_payloads else "checking data files exist"
    with ThreadPoolExecutor(_READERS) as pool:
        for done, (bad, n, b) in enumerate(pool.map(check, snap.files), 1):
            out += bad
            checked += n
            nbytes += b
            if progress is not None:
                progress(phase, done, len(snap.files))
    return out, checked, nbytes
