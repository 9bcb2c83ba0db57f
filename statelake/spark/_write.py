"""Distributed writes: executors write partials' data files, the driver commits once per epoch.

:func:`write_partials` takes a DataFrame of ``(epoch, vnode, payload[,
assignment_version])`` rows computed anywhere in a Spark job. Executors
encode and upload the Parquet data files (the same encoding and Delta
statistics as :meth:`DeltaStateBackend.write_partials`, via
:func:`statelake.delta._partials.encode`) and send back only small
descriptions. The driver then judges every row with the same rules as
``write_partial`` and makes ONE Delta commit per epoch through the
backend's own commit path (app-transaction ids, retries, ambiguous commits
re-read):

* fence: a row whose assignment version is below the durable fence raises
  :class:`~statelake.errors.StaleVersion`, checked before the job and again
  right before committing; nothing is committed then.
* idempotence: a row identical (same bytes) to one already stored at the
  same (epoch, vnode, assignment_version), or repeated in the DataFrame,
  is skipped; different bytes at the same key raise
  :class:`~statelake.errors.ConflictingPartial` before anything is committed.

Data files of a failed call are deleted (best effort); files never
committed are invisible to readers either way.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pyspark.sql import DataFrame

from .. import _schemas
from ..errors import ConflictingPartial, InvalidArgument, StaleVersion

__all__ = ["WriteReport", "write_partials"]

_MAX_FILE_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteReport:
    """What one distributed write did."""

    rows: int
    """Rows in the DataFrame."""
    written: int
    """Partials committed (new rows)."""
    skipped: int
    """Rows identical to a stored partial (or repeated in the input), not written again."""
    epochs: tuple[int, ...]
    """Epochs that received a commit."""
    commits: int
    """Delta commits made on the partials table (one per epoch in ``epochs``)."""
    files: int
    """Data files committed."""
    table_version: int
    """The partials table's version after the last commit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Settings:
    uri: str
    storage_options: dict[str, str]
    layout: str
    capacity: int
    writer: str
    default_version: int | None
    max_bytes: int | None


def _executor_write(settings: _Settings) -> Any:
    """The per-partition function: encode and upload files, return their descriptions.

    Runs on executors with pyarrow only (no delta-rs call), so it works in
    Python workers forked from Spark's daemon.
    """

    def run(rows: Iterator[Any]) -> Iterator[tuple[str, int, int, str, str, str]]:
        from ..delta._partials import NewPartial, encode
        from ..delta._storage import Storage

        storage = Storage(settings.uri, settings.storage_options)
        by_epoch: dict[int, list[NewPartial]] = {}
        now = datetime.now(timezone.utc)
        for row in rows:
            epoch, vnode, payload = row[0], row[1], row[2]
            version = row[3] if len(row) > 3 else settings.default_version
            _check_row(epoch, vnode, version, payload, settings)
            data = bytes(payload)
            by_epoch.setdefault(int(epoch), []).append(
                NewPartial(
                    epoch=int(epoch),
                    vnode=int(vnode),
                    assignment_version=int(version),  # type: ignore[arg-type]  # checked above
                    writer=settings.writer,
                    written_at=now,
                    payload=data,
                    crc32=zlib.crc32(data),
                )
            )
        for epoch in sorted(by_epoch):
            for group in _file_groups(by_epoch[epoch], settings.layout):
                rel, blob, partition, stats = encode(group, settings.layout)
                storage.write(f"{_schemas.PARTIALS}/{rel}", blob)
                described = [
                    [p.vnode, p.assignment_version, p.crc32, len(p.payload)] for p in group
                ]
                yield rel, len(blob), epoch, json.dumps(partition), stats, json.dumps(described)

    return run


def _check_row(epoch: Any, vnode: Any, version: Any, payload: Any, s: _Settings) -> None:
    if epoch is None or int(epoch) < 0:
        raise InvalidArgument(f"epoch must be >= 0, got {epoch!r}")
    if vnode is None or not 0 <= int(vnode) < s.capacity:
        raise InvalidArgument(
            f"vnode {vnode!r} is out of range: expected 0 <= vnode < {s.capacity}"
        )
    if version is None or int(version) < 0:
        raise InvalidArgument(
            f"assignment_version must be >= 0, got {version!r} (pass assignment_version= "
            "or add an assignment_version column)"
        )
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"payload must be binary, got {type(payload).__name__}")
    if s.max_bytes is not None and len(payload) > s.max_bytes:
        raise InvalidArgument(
            f"partial of {len(payload)} bytes exceeds max_partial_bytes={s.max_bytes}"
        )


def _file_groups(parts: list[Any], layout: str) -> Iterator[list[Any]]:
    """card: one file per partial; packed: files of one epoch up to ~128 MiB."""
    if layout == "card":
        for p in parts:
            yield [p]
        return
    group: list[Any] = []
    size = 0
    for p in sorted(parts, key=lambda p: (p.vnode, p.assignment_version)):
        if group and size + len(p.payload) > _MAX_FILE_BYTES:
            yield group
            group, size = [], 0
        group.append(p)
        size += len(p.payload)
    if group:
        yield group


@dataclass(frozen=True, slots=True, kw_only=True)
class _File:
    path: str
    size: int
    epoch: int
    partition: dict[str, str]
    stats: str
    rows: list[tuple[int, int, int, int]]  # vnode, assignment_version, crc32, size


def write_partials(
    df: DataFrame,
    uri: str,
    *,
    writer: str,
    assignment_version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    vnode_capacity: int | None = None,
    layout: str | None = None,
    max_partial_bytes: int | None = None,
) -> WriteReport:
    """Write the partials in ``df`` to the store at ``uri``: one Delta commit per epoch.

    ``df`` has columns ``epoch`` (long), ``vnode`` (int), ``payload``
    (binary) and optionally ``assignment_version`` (long); without that
    column every row uses ``assignment_version``. ``writer`` is recorded as
    the writer of every row. ``vnode_capacity`` and ``layout`` are needed
    only to create a new store (an existing store's values are adopted).
    Returns a :class:`WriteReport`. Raises ``StaleVersion`` /
    ``ConflictingPartial`` as ``write_partial`` does, with nothing committed.
    """
    from ..delta import DeltaStateBackend
    from ..delta._backend import DEFAULT_MAX_PARTIAL_BYTES
    from ..delta._log import FileEntry

    missing = {"epoch", "vnode", "payload"} - set(df.columns)
    if missing:
        raise InvalidArgument(f"the DataFrame lacks columns {sorted(missing)}")
    has_version = "assignment_version" in df.columns
    if not has_version and assignment_version is None:
        raise InvalidArgument("pass assignment_version= or add an assignment_version column")
    backend = DeltaStateBackend(
        uri,
        instance_id=writer,
        vnode_capacity=vnode_capacity,
        storage_options=storage_options,
        layout=layout,
        max_partial_bytes=max_partial_bytes or DEFAULT_MAX_PARTIAL_BYTES,
    )
    try:
        fence = backend.authoritative_version()
        if assignment_version is not None and not has_version and assignment_version < fence:
            raise StaleVersion(assignment_version, fence)  # fail before any executor work
        settings = _Settings(
            uri=backend.uri,
            storage_options=dict(storage_options or {}),
            layout=backend.layout,
            capacity=backend.vnode_capacity,
            writer=writer,
            default_version=assignment_version,
            max_bytes=backend.max_partial_bytes,
        )
        cols = ["epoch", "vnode", "payload"] + (["assignment_version"] if has_version else [])
        source = df.select(
            df["epoch"].cast("long"),
            df["vnode"].cast("int"),
            df["payload"].cast("binary"),
            *([df["assignment_version"].cast("long")] if has_version else []),
        ).toDF(*cols)
        described = source.rdd.mapPartitions(_executor_write(settings)).collect()
        files = [
            _File(
                path=path,
                size=int(size),
                epoch=int(epoch),
                partition=json.loads(partition),
                stats=stats,
                rows=[(int(a), int(b), int(c), int(d)) for a, b, c, d in json.loads(rows)],
            )
            for path, size, epoch, partition, stats, rows in described
        ]
        try:
            keep = _judge(backend, files)
            backend._refresh_control()
            fence = backend.authoritative_version()
            for f in files:
                for _, version, _, _ in f.rows:
                    if version < fence:
                        raise StaleVersion(version, fence)
            plan = _rewrite_mixed(backend, files, keep)
        except BaseException:
            _delete(backend, files)
            raise
        by_epoch: dict[int, list[_File]] = {}
        for f in plan:
            by_epoch.setdefault(f.epoch, []).append(f)
        for epoch in sorted(by_epoch):
            entries: list[tuple[FileEntry, list[Any]]] = [
                (
                    FileEntry(
                        path=f.path,
                        size=f.size,
                        partition=dict(f.partition),
                        num_records=len(f.rows),
                        stats_json=f.stats,
                    ),
                    [],
                )
                for f in by_epoch[epoch]
            ]
            backend._commit_files(entries)  # the backend's commit: retries, ambiguity re-read
        versions = backend.table_versions()
        written = sum(len(f.rows) for f in plan)
        total = sum(len(f.rows) for f in files)
        return WriteReport(
            rows=total,
            written=written,
            skipped=total - written,
            epochs=tuple(sorted(by_epoch)),
            commits=len(by_epoch),
            files=len(plan),
            table_version=versions[_schemas.PARTIALS],
        )
    finally:
        backend.close()


def _payload_of_new(backend: Any, f: _File, row: int) -> bytes:
    from ..delta._partials import read_file

    t = read_file(backend.storage, _schemas.PARTIALS, f.path, ["payload"])
    return bytes(t.column("payload")[row].as_py())


def _judge(backend: Any, files: list[_File]) -> dict[str, list[bool]]:
    """Which rows of each new file to commit: new rows True, identical replays False.

    Raises ConflictingPartial for different bytes at a stored or repeated key.
    """
    from ..delta._partials import read_payload

    backend._refresh_partials()
    keep: dict[str, list[bool]] = {}
    seen: dict[tuple[int, int, int], tuple[int, int, _File, int]] = {}
    for f in files:
        flags = []
        for i, (vnode, version, crc, size) in enumerate(f.rows):
            key = (f.epoch, vnode, version)
            if key in seen:
                crc0, size0, f0, i0 = seen[key]
                same = (crc0, size0) == (crc, size) and _payload_of_new(
                    backend, f0, i0
                ) == _payload_of_new(backend, f, i)
                if not same:
                    raise ConflictingPartial(
                        vnode, f.epoch, version, "the DataFrame holds two different payloads"
                    )
                flags.append(False)
                continue
            seen[key] = (crc, size, f, i)
            stored = False
            for row in backend._index.rows(f.epoch, vnode):
                if row.assignment_version != version:
                    continue
                if (row.payload_crc32, row.payload_size) == (crc, size) and read_payload(
                    backend.storage, _schemas.PARTIALS, row
                ) == _payload_of_new(backend, f, i):
                    stored = True
                    break
                raise ConflictingPartial(vnode, f.epoch, version)
            flags.append(not stored)
        keep[f.path] = flags
    return keep


def _rewrite_mixed(backend: Any, files: list[_File], keep: dict[str, list[bool]]) -> list[_File]:
    """Files to commit: new files as they are, replay-only files deleted, mixed ones rewritten."""
    from ..delta._partials import NewPartial, encode, read_file

    out: list[_File] = []
    for f in files:
        flags = keep[f.path]
        if all(flags):
            out.append(f)
            continue
        rel_old = f"{_schemas.PARTIALS}/{f.path}"
        if any(flags):
            t = read_file(backend.storage, _schemas.PARTIALS, f.path).to_pydict()
            parts = [
                NewPartial(
                    epoch=f.epoch,
                    vnode=f.rows[i][0],
                    assignment_version=f.rows[i][1],
                    writer=t["writer"][i],
                    written_at=t["written_at"][i],
                    payload=bytes(t["payload"][i]),
                    crc32=f.rows[i][2],
                )
                for i, flag in enumerate(flags)
                if flag
            ]
            rel, blob, partition, stats = encode(parts, backend.layout)
            backend.storage.write(f"{_schemas.PARTIALS}/{rel}", blob)
            out.append(
                _File(
                    path=rel,
                    size=len(blob),
                    epoch=f.epoch,
                    partition=dict(partition),
                    stats=stats,
                    rows=[(p.vnode, p.assignment_version, p.crc32, len(p.payload)) for p in parts],
                )
            )
        backend.storage.delete(rel_old)
    return out


def _delete(backend: Any, files: list[_File]) -> None:
    for f in files:
        backend.storage.delete(f"{_schemas.PARTIALS}/{f.path}")
