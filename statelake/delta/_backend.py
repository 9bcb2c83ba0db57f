"""DeltaStateBackend: the contract on two Delta tables, through delta-rs."""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.table import TableMerger
from deltalake.transaction import AddAction, RemoveAction

from .. import _schemas
from .._validation import check_capacity, check_int, check_payload, check_vnode, check_vnodes
from ..backend import AsOf, StateBackend
from ..errors import (
    AmbiguousCommit,
    ConflictingPartial,
    InvalidArgument,
    NotAStateStore,
    SplitBrainCommit,
    StaleVersion,
    StateBackendError,
    StorageError,
)
from ._commit import commit_lines, put_if_absent, simple_protocol
from ._control import COMMIT, FENCE, FENCE_EPOCH, ControlState, Marker, cas_merge, marker_table
from ._log import FileEntry, LogDelta, LogFollower, entries_of, open_table, retry_listing
from ._partials import (
    INDEX_STATS,
    NewPartial,
    PartialRow,
    PartialsIndex,
    best,
    encode,
    new_partial,
    read_payload,
)
from ._storage import Storage, redact
from ._tables import TableSettings, ensure_table, store_properties

__all__ = ["DeltaStateBackend"]

log = logging.getLogger("statelake")

DEFAULT_MAX_PARTIAL_BYTES = 256 * 1024 * 1024
_CONTROL_ATTEMPTS = 200
_COMMIT_ATTEMPTS = 50


@dataclass(slots=True, kw_only=True)
class _Pending:
    """One write call waiting for the group commit."""

    parts: list[NewPartial]
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def finish(self, error: BaseException | None = None) -> None:
        self.error = error
        self.done.set()


class DeltaStateBackend(StateBackend):
    """The state backend on Delta Lake tables (embedded engine: delta-rs).

    ``uri`` is the store root (a local path, ``s3://``, ``gs://``, ``az://``)
    holding ``partials`` and ``control`` Delta tables, created on first use.

    Keyword options:

    * ``instance_id``: this coordinator/worker's identity, recorded as the
      writer of partials and the committer of sealed epochs. Two live
      instances must never share one.
    * ``vnode_capacity``: vnodes are ``0 .. capacity-1``; recorded when the
      store is created. ``None`` adopts the stored value on open.
    * ``storage_options``: passed to delta-rs and the file layer (S3/GCS/Azure
      credentials and endpoints); never printed.
    * ``layout``: ``"card"`` (one file per partial, the default) or
      ``"packed"`` (one file per group commit); chosen at creation.
    * ``max_partial_bytes``: larger payloads are rejected (default 256 MiB).
    * ``vacuum_retention_hours``: when set, ``prune_before`` also VACUUMs
      files older than this; time travel to versions older than that breaks.
      Default ``None``: prune never deletes files, time travel keeps working
      until a maintenance job vacuums.
    * ``settings``: Delta table properties used at creation (checkpoint
      interval, log retention); see :class:`TableSettings`.
    * ``max_batch``: most partials coalesced into one Delta commit.
    * ``fsync``: on local disk, fsync data files and commits before a write
      returns (survives power loss, not only process crashes). Default
      ``False``, like delta-rs's own local store.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        instance_id: str,
        vnode_capacity: int | None,
        storage_options: Mapping[str, str] | None = None,
        layout: str | None = None,
        max_partial_bytes: int | None = DEFAULT_MAX_PARTIAL_BYTES,
        vacuum_retention_hours: float | None = None,
        settings: TableSettings | None = None,
        max_batch: int = 4096,
        fsync: bool = False,
        create: bool = True,
    ) -> None:
        if not isinstance(instance_id, str) or not instance_id.strip():
            raise InvalidArgument(f"instance_id must be a non-empty string, got {instance_id!r}")
        if vnode_capacity is not None:
            check_capacity(vnode_capacity)
        if layout is not None and layout not in _schemas.LAYOUTS:
            raise InvalidArgument(f"layout must be one of {_schemas.LAYOUTS}, got {layout!r}")
        if max_partial_bytes is not None:
            check_int("max_partial_bytes", max_partial_bytes)
        self.instance_id = instance_id
        self.storage = Storage(os.fspath(uri), storage_options)
        self.uri = self.storage.root
        self.max_partial_bytes = max_partial_bytes
        self.vacuum_retention_hours = vacuum_retention_hours
        self.max_batch = max_batch
        self.fsync = fsync
        self._closed = False

        if create:
            self.storage.check_writable()
        if self.storage.exists("_delta_log"):
            raise NotAStateStore(
                "the URI is itself a Delta table; a statelake store is a folder "
                "holding 'partials' and 'control' tables",
                uri=self.uri,
            )
        settings = settings or TableSettings()
        self._pt = ensure_table(
            self.storage,
            _schemas.PARTIALS,
            layout=layout or "card",
            vnode_capacity=vnode_capacity,
            settings=settings,
            create=create,
        )
        stored_layout, stored_capacity = store_properties(self._pt)
        if layout is not None and layout != stored_layout:
            raise InvalidArgument(
                f"store was created with layout {stored_layout!r}, not {layout!r}",
            )
        if vnode_capacity is not None and vnode_capacity != stored_capacity:
            raise InvalidArgument(
                f"store was created with vnode_capacity={stored_capacity}, not {vnode_capacity}"
            )
        self.layout = stored_layout
        self.vnode_capacity = stored_capacity
        self._ct = ensure_table(
            self.storage,
            _schemas.CONTROL,
            layout="card",
            vnode_capacity=stored_capacity,
            settings=settings,
            create=create,
        )

        self._partials_log = LogFollower(self.storage, _schemas.PARTIALS, INDEX_STATS)
        self._control_log = LogFollower(self.storage, _schemas.CONTROL, ())
        self._index = PartialsIndex(self.storage)
        self._control = ControlState(self.storage)
        self._index.apply(_delta_from(self._pt, INDEX_STATS))
        self._partials_log.version = self._pt.version()
        self._control.apply(_delta_from(self._ct, ()))
        self._control_log.version = self._ct.version()

        # Group commit: one thread owns every partials commit of this process.
        self._app_id = f"statelake:{instance_id}:{uuid.uuid4().hex[:12]}"
        self._seq = 0
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._write_lock = threading.Lock()  # partials table: committer and prune
        self._control_lock = threading.Lock()
        self._uploader = ThreadPoolExecutor(max_workers=4, thread_name_prefix="statelake-upload")
        self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="statelake-ckpt")
        self._checkpoint_state = threading.Lock()
        self._checkpoint_wanted = False
        self._checkpoint_running = False
        self._checkpoint_table: DeltaTable | None = None
        self._fast_commits = self.storage.local and simple_protocol(self._pt)
        self._checkpoint_interval = int(
            self._pt.metadata().configuration.get("delta.checkpointInterval") or 100
        )
        self._committer = threading.Thread(
            target=self._commit_loop, name=f"statelake-commit-{instance_id}", daemon=True
        )
        self._committer.start()
        # Test seam: called between the seal decision and the MERGE (pre-seed races here).
        self._before_marker_commit: Callable[[int], None] | None = None

    def __repr__(self) -> str:
        return (
            f"DeltaStateBackend({self.uri!r}, instance_id={self.instance_id!r}, "
            f"vnode_capacity={self.vnode_capacity}, layout={self.layout!r}, "
            f"storage_options={redact(self.storage.options)!r})"
        )

    # -- refresh ---------------------------------------------------------------
    def _refresh_partials(self) -> None:
        with self._index.lock:
            delta = self._partials_log.poll()
            if delta is not None:
                self._index.apply(delta)

    def _refresh_control(self) -> None:
        with self._control.lock:
            delta = self._control_log.poll()
            if delta is not None:
                self._control.apply(delta)

    # -- writes ------------------------------------------------------------------
    def write_partial(self, vnode: int, epoch: int, assignment_version: int, data: bytes) -> None:
        self.write_partials(epoch, assignment_version, {vnode: data})

    def write_partials(
        self, epoch: int, assignment_version: int, partials: Mapping[int, bytes]
    ) -> None:
        self._check_open()
        check_int("epoch", epoch)
        check_int("assignment_version", assignment_version)
        if not isinstance(partials, Mapping):
            raise InvalidArgument(
                f"partials must be a mapping vnode -> bytes, got {type(partials).__name__}"
            )
        checked = {
            check_vnode(v, self.vnode_capacity): check_payload(d, self.max_partial_bytes)
            for v, d in partials.items()
        }
        fence = self._control.fence()
        if assignment_version < fence:
            raise StaleVersion(assignment_version, fence)
        parts = []
        for vnode, data in checked.items():
            part = new_partial(
                epoch=epoch,
                vnode=vnode,
                assignment_version=assignment_version,
                writer=self.instance_id,
                payload=data,
            )
            if not self._already_stored(part):
                parts.append(part)
        if not parts:
            return
        # The committer thread encodes, uploads and commits: one thread doing the
        # CPU-bound work avoids GIL convoys between dozens of writer threads.
        pending = _Pending(parts=parts)
        self._queue.put(pending)
        pending.done.wait()
        if pending.error is not None:
            raise pending.error

    def _write_file(self, parts: list[NewPartial]) -> FileEntry:
        rel, blob, partition, stats = encode(parts, self.layout)
        self.storage.write(f"{_schemas.PARTIALS}/{rel}", blob, fsync=self.fsync)
        return FileEntry(
            path=rel,
            size=len(blob),
            partition=dict(partition),
            num_records=len(parts),
            stats_json=stats,
        )

    def _already_stored(self, part: NewPartial) -> bool:
        """True if this exact partial is stored; ConflictingPartial if other bytes are."""
        for row in self._index.rows_at(part.epoch, part.vnode, part.assignment_version):
            # Same checksum: compare the bytes themselves before calling it a replay.
            if (
                row.payload_crc32 == part.crc32
                and row.payload_size == len(part.payload)
                and read_payload(self.storage, _schemas.PARTIALS, row) == part.payload
            ):
                return True
            raise ConflictingPartial(part.vnode, part.epoch, part.assignment_version)
        return False

    def _commit_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            count = len(first.parts)
            while count < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
                count += len(nxt.parts)
            try:
                self._commit_batch(batch)
            except BaseException as exc:  # never let the committer die silently
                log.exception("statelake group commit failed")
                for p in batch:
                    if not p.done.is_set():
                        p.finish(exc)

    def _commit_batch(self, batch: list[_Pending]) -> None:
        """Check, encode and commit one batch of write calls as a single Delta commit.

        Checks run here, against the freshest log, even though callers checked
        too: two calls racing on one key are only visible to each other here.
        An error reaches exactly the calls it concerns; the others commit.
        """
        self._refresh_control()
        fence = self._control.fence()
        self._refresh_partials()
        accepted: list[_Pending] = []
        parts: list[NewPartial] = []
        seen: dict[tuple[int, int, int], int] = {}
        for p in batch:
            try:
                version = p.parts[0].assignment_version
                if version < fence:
                    raise StaleVersion(version, fence)
                keep = []
                for part in p.parts:
                    key = (part.epoch, part.vnode, part.assignment_version)
                    if key in seen:
                        if seen[key] != part.crc32:
                            raise ConflictingPartial(
                                part.vnode,
                                part.epoch,
                                part.assignment_version,
                                "a concurrent call in this process wrote other bytes",
                            )
                        continue
                    if not self._already_stored(part):
                        keep.append(part)
            except StateBackendError as exc:
                p.finish(exc)
                continue
            for part in keep:
                seen[(part.epoch, part.vnode, part.assignment_version)] = part.crc32
            parts += keep
            accepted.append(p)
        files: list[tuple[FileEntry, list[NewPartial]]] = []
        try:
            if self.layout == "card":
                groups = [[part] for part in parts]
            else:
                by_epoch: dict[int, list[NewPartial]] = {}
                for part in parts:
                    by_epoch.setdefault(part.epoch, []).append(part)
                groups = list(by_epoch.values())
            if len(groups) > 1:
                # Uploads release the GIL: overlap them (the encode part stays serial).
                files += zip(self._uploader.map(self._write_file, groups), groups, strict=True)
            elif groups:
                files.append((self._write_file(groups[0]), groups[0]))
            committed = self._commit_files(files) if files else None
        except BaseException as exc:
            for entry, _ in files:
                self.storage.delete(f"{_schemas.PARTIALS}/{entry.path}")
            for p in accepted:
                p.finish(exc)
            return
        with self._index.lock:
            self._index.add_own(files)
            if committed is not None and self._partials_log.version == committed - 1:
                # Our own commit: the index already has its files, no need to read it back.
                self._partials_log.version = committed
                self._index.version = committed
        for p in accepted:
            p.finish()

    def _commit_files(self, files: list[tuple[FileEntry, list[NewPartial]]]) -> int | None:
        """One Delta commit adding ``files``; resolves ambiguous outcomes by re-reading.

        Returns the committed table version when it is known exactly.
        """
        now_ms = int(time.time() * 1000)
        if self._fast_commits:
            return self._commit_local(files, now_ms)
        actions: list[AddAction | RemoveAction] = [
            AddAction(
                path=entry.path,
                size=entry.size,
                partition_values=entry.partition,
                modification_time=now_ms,
                data_change=True,
                stats=entry.stats_json,
            )
            for entry, _ in files
        ]
        with self._write_lock:
            self._seq += 1
            seq = self._seq
            props = CommitProperties(
                app_transactions=[Transaction(app_id=self._app_id, version=seq)],
                max_commit_retries=100,
                custom_metadata={"statelake.writer": self.instance_id},
            )
            last: BaseException | None = None
            for attempt in range(_COMMIT_ATTEMPTS):
                try:
                    self._pt.create_write_transaction(
                        actions,
                        mode="append",
                        schema=_schemas.arrow_schema(_schemas.PARTIALS),
                        partition_by=_schemas.partition_by(_schemas.PARTIALS, self.layout),
                        commit_properties=props,
                    )
                    break
                except CommitFailedError as exc:
                    last = exc  # lost every race; the commit did not land
                except Exception as exc:
                    last = exc
                    if self._landed(seq):
                        break
                _sleep_backoff(attempt)
                self._try_update(self._pt)
            else:
                if self._landed(seq):
                    return None
                raise StorageError(
                    f"could not commit {len(actions)} partials after "
                    f"{_COMMIT_ATTEMPTS} attempts: {last}",
                    uri=self.storage.uri(_schemas.PARTIALS),
                )
            self._try_update(self._pt)
            return None

    def _commit_local(self, files: list[tuple[FileEntry, list[NewPartial]]], now_ms: int) -> int:
        """Append one commit to a local log ourselves (see ``_commit.py`` for why)."""
        adds = [
            {
                "path": entry.path,
                "partitionValues": entry.partition,
                "size": entry.size,
                "modificationTime": now_ms,
                "dataChange": True,
                "stats": entry.stats_json,
            }
            for entry, _ in files
        ]
        with self._write_lock:
            self._seq += 1
            body = commit_lines(
                adds=adds,
                app_id=self._app_id,
                txn_version=self._seq,
                partition_by=_schemas.partition_by(_schemas.PARTIALS, self.layout),
                now_ms=now_ms,
                writer=self.instance_id,
            )
            log_dir = os.path.join(self.storage.root, _schemas.PARTIALS, "_delta_log")
            for _ in range(10_000):
                self._refresh_partials()
                version = self._partials_log.version + 1
                try:
                    won = put_if_absent(
                        os.path.join(log_dir, f"{version:020d}.json"), body, fsync=self.fsync
                    )
                except OSError as exc:
                    raise StorageError(
                        f"cannot write Delta commit {version}: {exc.strerror or exc}",
                        uri=self.storage.uri(_schemas.PARTIALS),
                    ) from exc
                if won:
                    break
            else:  # pragma: no cover - would need 10,000 commits by others in between
                raise StorageError("could not append to the partials log", uri=self.uri)
            if version % self._checkpoint_interval == 0:
                self._request_checkpoint()
            return version

    def _request_checkpoint(self) -> None:
        """Checkpoint in the background: writers never wait for it.

        A checkpoint of a table with many files takes delta-rs tens to
        hundreds of milliseconds; done inline it stalled every writer once per
        ``checkpoint_interval`` commits. At most one runs at a time; requests
        made while it runs are folded into one more run at the latest version.
        """
        with self._checkpoint_state:
            self._checkpoint_wanted = True
            if self._checkpoint_running:
                return
            self._checkpoint_running = True
        self._background.submit(self._checkpoint_partials)

    def _checkpoint_partials(self) -> None:
        """Write a Delta checkpoint and drop expired log files (delta-rs does the work)."""
        while True:
            with self._checkpoint_state:
                if not self._checkpoint_wanted:
                    self._checkpoint_running = False
                    return
                self._checkpoint_wanted = False
            try:
                # Listing the log while our own committer appends to it can tear
                # (see retry_listing): hold the commit lock just while listing.
                with self._write_lock:
                    if self._checkpoint_table is None:
                        self._checkpoint_table = open_table(
                            self.storage.uri(_schemas.PARTIALS), self.storage.options
                        )
                    else:
                        retry_listing(self._checkpoint_table.update_incremental)
                self._checkpoint_table.create_checkpoint()
                self._checkpoint_table.cleanup_metadata()
            except Exception:
                log.warning("checkpointing the partials table failed; will retry", exc_info=True)

    def _landed(self, seq: int) -> bool:
        """Did our commit with app-transaction version ``seq`` reach the log?"""
        for attempt in range(10):
            try:
                retry_listing(self._pt.update_incremental)
                return (self._pt.transaction_version(self._app_id) or 0) >= seq
            except Exception:
                _sleep_backoff(attempt)
        raise AmbiguousCommit(
            "a partials commit may or may not have landed and the log cannot be read; "
            "the next call resolves it",
            uri=self.storage.uri(_schemas.PARTIALS),
        )

    @staticmethod
    def _try_update(dt: DeltaTable) -> None:
        try:
            retry_listing(dt.update_incremental)
        except Exception:
            log.debug("update_incremental failed; the next commit will retry", exc_info=True)

    # -- reads -------------------------------------------------------------------
    def read_partial(self, vnode: int, epoch: int, *, as_of: AsOf | None = None) -> bytes | None:
        self._check_open()
        check_vnode(vnode, self.vnode_capacity)
        check_int("epoch", epoch)
        if as_of is None:
            self._refresh_partials()
            index = self._index
        else:
            index = self._index_as_of(as_of)
        rows = best(index.rows(epoch, vnode))
        return self._payload_of(rows, vnode, epoch)

    def read_epoch(self, epoch: int, *, as_of: AsOf | None = None) -> dict[int, bytes]:
        """Every vnode's partial at ``epoch`` (the recovery read), vnode -> bytes."""
        self._check_open()
        check_int("epoch", epoch)
        if as_of is None:
            self._refresh_partials()
            index = self._index
        else:
            index = self._index_as_of(as_of)
        by_vnode = index.epoch_rows(epoch)
        out: dict[int, bytes] = {}
        for vnode in sorted(by_vnode):
            payload = self._payload_of(best(by_vnode[vnode]), vnode, epoch)
            if payload is not None:
                out[vnode] = payload
        return out

    def _payload_of(self, rows: list[PartialRow], vnode: int, epoch: int) -> bytes | None:
        if not rows:
            return None
        if len({(r.payload_crc32, r.payload_size) for r in rows}) > 1:
            raise ConflictingPartial(
                vnode, epoch, rows[0].assignment_version, "the store holds different payloads"
            )
        return read_payload(self.storage, _schemas.PARTIALS, rows[0])

    def _index_as_of(self, as_of: AsOf) -> PartialsIndex:
        _check_as_of(as_of)
        dt = open_table(self.storage.uri(_schemas.PARTIALS), self.storage.options, as_of)
        index = PartialsIndex(self.storage)
        index.apply(_delta_from(dt, INDEX_STATS))
        return index

    def committed_epochs(self, *, as_of: AsOf | None = None) -> list[int]:
        self._check_open()
        return self._control_as_of(as_of).committed_epochs()

    def latest_sealed_epoch(self, *, as_of: AsOf | None = None) -> int | None:
        """The highest sealed epoch still retained (where recovery starts), or None."""
        epochs = self.committed_epochs(as_of=as_of)
        return epochs[-1] if epochs else None

    def commit_markers(self, *, as_of: AsOf | None = None) -> dict[int, list[Marker]]:
        """Commit markers by epoch (with committer, time, vnodes); for audits and tools."""
        self._check_open()
        return self._control_as_of(as_of).commits()

    def _control_as_of(self, as_of: AsOf | None) -> ControlState:
        if as_of is None:
            self._refresh_control()
            return self._control
        _check_as_of(as_of)
        dt = open_table(self.storage.uri(_schemas.CONTROL), self.storage.options, as_of)
        state = ControlState(self.storage)
        state.apply(_delta_from(dt, ()))
        return state

    # -- sealing and the fence -------------------------------------------------------
    def epoch_complete(self, epoch: int, vnodes: Sequence[int]) -> bool:
        self._check_open()
        check_int("epoch", epoch)
        listed = check_vnodes(vnodes, self.vnode_capacity)
        with self._control_lock:
            for attempt in range(_CONTROL_ATTEMPTS):
                self._refresh_control()
                marker = self._control.commit_marker(epoch)
                if marker is not None:
                    return self._judge(marker, epoch)
                fence = self._control.fence()
                self._refresh_partials()
                rows = self._index.epoch_rows(epoch)
                for vnode in listed:
                    top = best(rows.get(vnode, []))
                    if not top or top[0].assignment_version < fence:
                        return False
                token = uuid.uuid4().hex
                new = Marker(
                    kind=COMMIT,
                    epoch=epoch,
                    committer=self.instance_id,
                    assignment_version=fence,
                    updated_at=datetime.now(timezone.utc),
                    vnodes=tuple(sorted(set(listed))),
                    token=token,
                )
                if self._before_marker_commit is not None:
                    self._before_marker_commit(epoch)
                outcome = self._control_merge(
                    marker_table([new]),
                    "t.kind = s.kind AND t.epoch = s.epoch",
                    lambda m: m.when_not_matched_insert_all(),
                )
                if outcome is None:
                    _sleep_backoff(attempt)
                    continue  # lost a race on the control table: re-read and decide again
                self._refresh_control()
                marker = self._control.commit_marker(epoch)
                if marker is None:
                    continue  # inserted nothing and nothing is there: decide again
                return self._judge(marker, epoch)
        raise StorageError(
            f"could not seal epoch {epoch}: the control table kept changing "
            f"({_CONTROL_ATTEMPTS} attempts)",
            uri=self.storage.uri(_schemas.CONTROL),
        )

    def _judge(self, marker: Marker, epoch: int) -> bool:
        # Returning True whenever a marker exists would swallow split brain:
        # only the instance named in the marker may hear that the epoch is sealed.
        if marker.committer != self.instance_id:
            raise SplitBrainCommit(marker.committer, self.instance_id, epoch)
        return True

    def set_authoritative_version(self, version: int) -> None:
        self._check_open()
        check_int("version", version)
        with self._control_lock:
            for attempt in range(_CONTROL_ATTEMPTS):
                self._refresh_control()
                if self._control.fence() >= version:
                    return  # monotonic: never lowers, a repeat is a no-op
                row = Marker(
                    kind=FENCE,
                    epoch=FENCE_EPOCH,
                    committer=self.instance_id,
                    assignment_version=version,
                    updated_at=datetime.now(timezone.utc),
                    vnodes=None,
                    token=uuid.uuid4().hex,
                )
                outcome = self._control_merge(
                    marker_table([row]),
                    "t.kind = s.kind AND t.epoch = s.epoch",
                    lambda m: m.when_matched_update_all(
                        predicate="s.assignment_version > t.assignment_version"
                    ).when_not_matched_insert_all(),
                )
                if outcome is None:
                    _sleep_backoff(attempt)
        self._refresh_control()
        if self._control.fence() < version:
            raise StorageError(
                f"could not raise the fence to {version}: the control table kept changing",
                uri=self.storage.uri(_schemas.CONTROL),
            )

    def authoritative_version(self) -> int:
        self._check_open()
        self._refresh_control()
        return self._control.fence()

    def _control_merge(
        self, source: pa.Table, predicate: str, clauses: Callable[[TableMerger], TableMerger]
    ) -> dict[str, object] | None:
        """A MERGE on the control table as a compare-and-set on its version.

        The MERGE runs against exactly the version our decision was based on,
        with no commit retries: if anything landed since, it fails and we
        return None so the caller re-reads. A storage fault (the commit file
        may or may not exist) is never guessed at: the caller re-reads too.
        """
        try:
            return cas_merge(self._ct, self._control.version, source, predicate, clauses)
        except Exception as exc:
            log.warning("control MERGE failed (%s); re-reading the control table", exc)
            self._try_update(self._ct)
            return None

    # -- pruning -----------------------------------------------------------------
    def prune_before(self, before: int) -> None:
        self._check_open()
        check_int("before", before)
        with self._control_lock:
            for attempt in range(_CONTROL_ATTEMPTS):
                self._refresh_control()
                doomed = [m for e, ms in self._control.commits().items() if e < before for m in ms]
                if not doomed:
                    break
                outcome = self._control_merge(
                    marker_table(doomed),
                    f"t.kind = s.kind AND t.epoch = s.epoch AND t.kind = '{COMMIT}' "
                    f"AND t.epoch < {before}",
                    lambda m: m.when_matched_delete(),
                )
                if outcome is None:
                    _sleep_backoff(attempt)
            else:
                raise StorageError(
                    f"could not prune commit markers below epoch {before}",
                    uri=self.storage.uri(_schemas.CONTROL),
                )
        with self._write_lock:
            self._refresh_partials()
            if any(e < before for e in self._index.epochs()):
                try:
                    retry_listing(self._pt.update_incremental)
                    self._pt.delete(f"epoch < {before}")
                except Exception as exc:
                    raise StorageError(
                        f"could not delete partials below epoch {before}: {exc}",
                        uri=self.storage.uri(_schemas.PARTIALS),
                    ) from exc
                self._try_update(self._pt)
        self._refresh_partials()
        if self.vacuum_retention_hours is not None:
            self.vacuum(retention_hours=self.vacuum_retention_hours, dry_run=False)

    def vacuum(self, *, retention_hours: float, dry_run: bool = True) -> list[str]:
        """Delete files no longer referenced by versions newer than the retention.

        Dry-run by default: returns what would be deleted. Time travel to
        versions older than ``retention_hours`` stops working once files go.
        """
        self._check_open()
        hours = max(0, int(retention_hours))
        removed: list[str] = []
        for name, dt in ((_schemas.PARTIALS, self._pt), (_schemas.CONTROL, self._ct)):
            lock = self._write_lock if name == _schemas.PARTIALS else self._control_lock
            with lock:
                self._try_update(dt)
                removed += [
                    f"{name}/{p}"
                    for p in dt.vacuum(
                        retention_hours=hours, dry_run=dry_run, enforce_retention_duration=False
                    )
                ]
        self._refresh_control()
        self._refresh_partials()
        return removed

    # -- lifecycle -------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise StateBackendError("the backend is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._committer.join(timeout=60)
        self._uploader.shutdown(wait=True)
        self._background.shutdown(wait=True)

    def table_versions(self) -> dict[str, int]:
        """Current Delta versions of the partials and control tables."""
        self._refresh_partials()
        self._refresh_control()
        return {_schemas.PARTIALS: self._index.version, _schemas.CONTROL: self._control.version}


def _delta_from(dt: DeltaTable, stat_columns: tuple[str, ...]) -> LogDelta:
    return LogDelta(
        version=dt.version(), added=entries_of(dt, stat_columns), removed=[], reset=True
    )


def _check_as_of(as_of: object) -> None:
    if isinstance(as_of, bool) or not isinstance(as_of, (int, datetime)):
        raise InvalidArgument(f"as_of must be a table version (int) or a datetime, got {as_of!r}")
    if isinstance(as_of, int) and as_of < 0:
        raise InvalidArgument(f"as_of version must be >= 0, got {as_of}")


def _sleep_backoff(attempt: int) -> None:
    time.sleep(min(0.2, 0.002 * (2 ** min(attempt, 7))) * (0.5 + random.random()))
