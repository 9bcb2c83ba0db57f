"""The partials table: encoding data files, and an index of its live rows.

Two layouts, chosen when the store is created and recorded in the table's
configuration (``statelake.layout``):

* ``card`` (default): partitioned by ``epoch`` and ``vnode``; each accepted
  partial is one small Parquet file. Every row's facts (assignment version,
  size, CRC-32) are in the file's Delta statistics, so the index is built
  from the log alone.
* ``packed``: partitioned by ``epoch``; one file holds every partial of a
  group commit, ``vnode`` is a column with min/max statistics. Rows of files
  this process did not write are resolved by reading their small metadata
  columns once.
"""

from __future__ import annotations

import json
import threading
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache

import pyarrow as pa
import pyarrow.parquet as pq

from .. import _schemas
from ..errors import CorruptState
from ._log import FileEntry, LogDelta
from ._parquet import Column, encode_table
from ._storage import Storage

_META_COLUMNS = ["assignment_version", "payload_size", "payload_crc32"]
INDEX_STATS = (*_META_COLUMNS, "vnode")
"""The file statistics the index reads: a row's facts when the file holds one row."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartialRow:
    """Where one stored partial lives and the facts needed to judge it."""

    epoch: int
    vnode: int
    assignment_version: int
    payload_size: int
    payload_crc32: int
    path: str
    row: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NewPartial:
    """A partial accepted by write_partial, not yet committed."""

    epoch: int
    vnode: int
    assignment_version: int
    writer: str
    written_at: datetime
    payload: bytes
    crc32: int


def new_partial(
    *, epoch: int, vnode: int, assignment_version: int, writer: str, payload: bytes
) -> NewPartial:
    return NewPartial(
        epoch=epoch,
        vnode=vnode,
        assignment_version=assignment_version,
        writer=writer,
        written_at=datetime.now(timezone.utc),
        payload=payload,
        crc32=zlib.crc32(payload),
    )


def _file_name() -> str:
    return f"part-{uuid.uuid4().hex}.parquet"


def encode(parts: list[NewPartial], layout: str) -> tuple[str, bytes, dict[str, str], str]:
    """Encode partials of ONE partition into a Parquet file.

    Returns ``(relative path, file bytes, partition values, stats JSON)``.
    """
    first = parts[0]
    values: dict[str, list[object]] = {
        "assignment_version": [p.assignment_version for p in parts],
        "writer": [p.writer for p in parts],
        "written_at": [_micros(p.written_at) for p in parts],
        "payload_size": [len(p.payload) for p in parts],
        "payload_crc32": [p.crc32 for p in parts],
        "payload": [p.payload for p in parts],
    }
    if layout == "card":
        partition = {"epoch": str(first.epoch), "vnode": str(first.vnode)}
        rel = f"epoch={first.epoch}/vnode={first.vnode}/{_file_name()}"
    else:
        values["vnode"] = [p.vnode for p in parts]
        partition = {"epoch": str(first.epoch)}
        rel = f"epoch={first.epoch}/{_file_name()}"
    columns = _file_columns(layout)
    blob = encode_table(columns, [values[c.name] for c in columns])
    stats = _stats(parts, layout)
    return rel, blob, partition, stats


_KINDS = {
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.string(): "string",
    pa.binary(): "binary",
    pa.timestamp("us", tz="UTC"): "timestamp_us",
}


@cache
def _file_columns(layout: str) -> tuple[Column, ...]:
    schema = _schemas.file_schema(_schemas.PARTIALS, layout)
    return tuple(Column(name=f.name, kind=_KINDS[f.type]) for f in schema)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _micros(t: datetime) -> int:
    delta = t - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_NULLS = {
    layout: json.dumps({n: 0 for n in _schemas.file_schema(_schemas.PARTIALS, layout).names})
    for layout in _schemas.LAYOUTS
}


def _stats(parts: list[NewPartial], layout: str) -> str:
    """Delta file statistics (numRecords, min/max of the numeric columns, null counts)."""
    versions = [p.assignment_version for p in parts]
    sizes = [len(p.payload) for p in parts]
    crcs = [p.crc32 for p in parts]
    lo = (
        f'"assignment_version":{min(versions)},"payload_size":{min(sizes)},'
        f'"payload_crc32":{min(crcs)}'
    )
    hi = (
        f'"assignment_version":{max(versions)},"payload_size":{max(sizes)},'
        f'"payload_crc32":{max(crcs)}'
    )
    if layout == "packed":
        vnodes = [p.vnode for p in parts]
        lo += f',"vnode":{min(vnodes)}'
        hi += f',"vnode":{max(vnodes)}'
    return (
        f'{{"numRecords":{len(parts)},"minValues":{{{lo}}},"maxValues":{{{hi}}},'
        f'"nullCount":{_NULLS[layout]}}}'
    )


def rows_of_new_file(path: str, parts: list[NewPartial]) -> list[PartialRow]:
    return [
        PartialRow(
            epoch=p.epoch,
            vnode=p.vnode,
            assignment_version=p.assignment_version,
            payload_size=len(p.payload),
            payload_crc32=p.crc32,
            path=path,
            row=i,
        )
        for i, p in enumerate(parts)
    ]


def read_file(
    storage: Storage, table: str, path: str, columns: list[str] | None = None
) -> pa.Table:
    """Read one data file of ``table``; a missing or unreadable file is CorruptState."""
    rel = f"{table}/{path}"
    try:
        raw = storage.read(rel)
    except FileNotFoundError as exc:
        raise CorruptState(
            "data file referenced by the Delta log is missing", path=storage.uri(rel)
        ) from exc
    try:
        # No pre-buffering, no threads: with the defaults, an arrow pool thread still
        # winding down while the interpreter finalizes aborts the process at exit
        # (std::terminate, exit code 134; ~2% of runs with pyarrow 26, 0 of 300
        # without). Found by the CLI tests; the files are small, threads gain nothing.
        return pq.read_table(
            pa.BufferReader(raw), columns=columns, use_threads=False, pre_buffer=False
        )
    except (pa.ArrowException, OSError) as exc:
        raise CorruptState(f"unreadable data file ({exc})", path=storage.uri(rel)) from exc


def _rows_from_stats(entry: FileEntry) -> list[PartialRow] | None:
    if entry.num_records != 1:
        return None
    mins, maxs = entry.min_values, entry.max_values
    if any(k not in mins or mins[k] != maxs.get(k) for k in _META_COLUMNS):
        return None
    vnode = entry.partition.get("vnode")
    if vnode is None:
        vnode = mins.get("vnode")
    if vnode is None:
        return None
    return [
        PartialRow(
            epoch=int(entry.partition["epoch"] or 0),
            vnode=int(vnode),
            assignment_version=int(mins["assignment_version"]),
            payload_size=int(mins["payload_size"]),
            payload_crc32=int(mins["payload_crc32"]),
            path=entry.path,
            row=0,
        )
    ]


class PartialsIndex:
    """Live rows of the partials table by (epoch, vnode), kept in step with the log."""

    def __init__(self, storage: Storage, table: str = _schemas.PARTIALS) -> None:
        self.storage = storage
        self.table = table
        self.lock = threading.RLock()
        self.version = -1
        self._entries: dict[str, FileEntry] = {}
        self._file_rows: dict[str, list[PartialRow]] = {}
        self._rows: dict[int, dict[int, list[PartialRow]]] = {}
        self._unresolved: dict[int, set[str]] = {}

    # -- maintenance ---------------------------------------------------------
    def apply(self, delta: LogDelta) -> None:
        with self.lock:
            if delta.reset:
                self._entries.clear()
                self._file_rows.clear()
                self._rows.clear()
                self._unresolved.clear()
            for path in delta.removed:
                self._drop(path)
            for entry in delta.added:
                self._add(entry)
            self.version = max(self.version, delta.version) if not delta.reset else delta.version

    def add_own(self, files: Iterable[tuple[FileEntry, list[NewPartial]]]) -> None:
        """Record files this process just committed (no need to read them back)."""
        with self.lock:
            for entry, parts in files:
                self._entries[entry.path] = entry
                self._insert(entry.path, rows_of_new_file(entry.path, parts))

    def _add(self, entry: FileEntry) -> None:
        if entry.path in self._entries:
            return
        self._entries[entry.path] = entry
        # Rows are worked out per epoch on first use: opening a store with a long
        # history only groups its files by epoch.
        epoch = int(entry.partition.get("epoch") or 0)
        self._unresolved.setdefault(epoch, set()).add(entry.path)

    def _insert(self, path: str, rows: list[PartialRow]) -> None:
        self._file_rows[path] = rows
        for r in rows:
            self._rows.setdefault(r.epoch, {}).setdefault(r.vnode, []).append(r)

    def _drop(self, path: str) -> None:
        entry = self._entries.pop(path, None)
        if entry is None:
            return
        epoch = int(entry.partition.get("epoch") or 0)
        pending = self._unresolved.get(epoch)
        if pending is not None:
            pending.discard(path)
        for r in self._file_rows.pop(path, []):
            by_vnode = self._rows.get(r.epoch)
            if by_vnode is None:
                continue
            rows = by_vnode.get(r.vnode, [])
            rows[:] = [x for x in rows if x.path != path]
            if not rows:
                by_vnode.pop(r.vnode, None)
            if not by_vnode:
                self._rows.pop(r.epoch, None)

    def _resolve(self, epoch: int) -> None:
        pending = self._unresolved.pop(epoch, None)
        if not pending:
            return
        for path in sorted(pending):
            entry = self._entries[path]
            from_stats = _rows_from_stats(entry)
            if from_stats is not None:
                self._insert(path, from_stats)
                continue
            cols = ["assignment_version", "payload_size", "payload_crc32"]
            if "vnode" not in entry.partition:
                cols = ["vnode", *cols]
            t = read_file(self.storage, self.table, path, cols).to_pydict()
            rows = []
            for i in range(len(t["assignment_version"])):
                vnode = t["vnode"][i] if "vnode" in t else int(entry.partition["vnode"] or 0)
                rows.append(
                    PartialRow(
                        epoch=epoch,
                        vnode=int(vnode),
                        assignment_version=int(t["assignment_version"][i]),
                        payload_size=int(t["payload_size"][i]),
                        payload_crc32=int(t["payload_crc32"][i]),
                        path=path,
                        row=i,
                    )
                )
            self._insert(path, rows)

    # -- queries ---------------------------------------------------------------
    def rows(self, epoch: int, vnode: int) -> list[PartialRow]:
        with self.lock:
            self._resolve(epoch)
            return list(self._rows.get(epoch, {}).get(vnode, ()))

    def rows_at(self, epoch: int, vnode: int, version: int) -> list[PartialRow]:
        """Rows stored for exactly (epoch, vnode, assignment version): the idempotence check."""
        with self.lock:
            if epoch in self._unresolved:
                self._resolve(epoch)
            by_vnode = self._rows.get(epoch)
            rows = by_vnode.get(vnode) if by_vnode else None
            if not rows:
                return []
            return [r for r in rows if r.assignment_version == version]

    def epoch_rows(self, epoch: int) -> dict[int, list[PartialRow]]:
        with self.lock:
            self._resolve(epoch)
            return {v: list(rows) for v, rows in self._rows.get(epoch, {}).items()}

    def epochs(self) -> list[int]:
        with self.lock:
            return sorted(set(self._rows) | {e for e, p in self._unresolved.items() if p})

    def file_count(self) -> int:
        with self.lock:
            return len(self._entries)

    def entries(self) -> list[FileEntry]:
        with self.lock:
            return list(self._entries.values())


def best(rows: list[PartialRow]) -> list[PartialRow]:
    """Rows at the highest assignment version (normally exactly one)."""
    if not rows:
        return []
    top = max(r.assignment_version for r in rows)
    return [r for r in rows if r.assignment_version == top]


def read_payload(storage: Storage, table: str, row: PartialRow) -> bytes:
    """Read and verify the bytes of one stored partial."""
    t = read_file(storage, table, row.path, ["payload", "payload_crc32"])
    if row.row >= t.num_rows:
        raise CorruptState(
            f"data file has {t.num_rows} rows, the log promised row {row.row}",
            path=storage.uri(f"{table}/{row.path}"),
        )
    payload = t.column("payload")[row.row].as_py()
    crc = zlib.crc32(payload)
    if crc != row.payload_crc32 or crc != t.column("payload_crc32")[row.row].as_py():
        raise CorruptState(
            f"checksum mismatch for vnode {row.vnode} epoch {row.epoch}: "
            f"expected crc32 {row.payload_crc32}, found {crc}",
            path=storage.uri(f"{table}/{row.path}"),
        )
    return bytes(payload)
