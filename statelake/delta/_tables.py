"""Creating, opening and validating the two Delta tables of a store."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs
from deltalake import DeltaTable

from .. import _schemas
from ..errors import CorruptState, InvalidArgument, NotAStateStore, StorageError
from ._log import retry_listing
from ._storage import Storage

KEY_TABLE = "statelake.table"
KEY_FORMAT = "statelake.formatVersion"
KEY_LAYOUT = "statelake.layout"
KEY_CAPACITY = "statelake.vnodeCapacity"


@dataclass(frozen=True, slots=True, kw_only=True)
class TableSettings:
    """Delta table properties statelake sets when it creates a store.

    ``checkpoint_interval``: commits between Delta checkpoints of the
    partials table (a cold open replays at most this many JSON commits).
    ``control_checkpoint_interval``: the same for the control table, lower
    because every MERGE there replays the log since the last checkpoint and
    the table is tiny, so its checkpoints cost next to nothing.
    ``log_retention_hours``: how long log entries (and so time travel) are
    kept before expired-log cleanup removes them.
    ``deleted_file_retention_hours``: how long files removed by prune are
    kept for time travel before VACUUM may delete them.
    """

    checkpoint_interval: int = 100
    control_checkpoint_interval: int = 10
    log_retention_hours: int = 24 * 7
    deleted_file_retention_hours: int = 24 * 7

    def configuration(self, table: str) -> dict[str, str | None]:
        interval = (
            self.control_checkpoint_interval
            if table == _schemas.CONTROL
            else self.checkpoint_interval
        )
        return {
            "delta.checkpointInterval": str(interval),
            "delta.logRetentionDuration": f"interval {self.log_retention_hours} hours",
            "delta.deletedFileRetentionDuration": (
                f"interval {self.deleted_file_retention_hours} hours"
            ),
            "delta.enableExpiredLogCleanup": "true",
        }


def _log_exists(storage: Storage, rel: str) -> bool:
    return storage.exists(f"{rel}/_delta_log") if rel else storage.exists("_delta_log")


def ensure_table(
    storage: Storage,
    table: str,
    *,
    layout: str,
    vnode_capacity: int | None,
    settings: TableSettings,
    create: bool,
) -> DeltaTable:
    """Open ``<root>/<table>``, creating it first if it does not exist (and ``create``)."""
    uri = storage.uri(table)
    if not _log_exists(storage, table):
        if not create:
            raise NotAStateStore(f"no statelake {table} table here", uri=uri)
        if vnode_capacity is None:
            raise InvalidArgument("vnode_capacity is required to create a new store")
        config = settings.configuration(table)
        config.update(
            {
                KEY_TABLE: table,
                KEY_FORMAT: str(_schemas.FORMAT_VERSION),
                KEY_LAYOUT: layout,
                KEY_CAPACITY: str(vnode_capacity),
            }
        )
        try:
            DeltaTable.create(
                uri,
                schema=_schemas.arrow_schema(table),
                mode="error",
                partition_by=_schemas.partition_by(table, layout) or None,
                name=f"statelake_{table}",
                description=_schemas.spec(table)["description"],
                configuration=config,
                storage_options=storage.options,
                raise_if_key_not_exists=False,
            )
        except Exception as exc:
            # Another process may have created it first: that is fine, open it below.
            if not _log_exists(storage, table):
                raise StorageError(f"cannot create the {table} table: {exc}", uri=uri) from exc
    try:
        dt = retry_listing(lambda: DeltaTable(uri, storage_options=storage.options))
    except Exception as exc:
        gap = _log_gap(storage, table)
        if gap is not None:
            raise CorruptState(
                f"the {table} table's Delta log is missing commit {gap} "
                "(deleted or lost); the table cannot be read past it",
                path=storage.uri(f"{table}/_delta_log"),
            ) from exc
        raise StorageError(f"cannot open the {table} table: {exc}", uri=uri) from exc
    validate(dt, table, uri)
    return dt


def _log_gap(storage: Storage, table: str) -> str | None:
    """The first missing ``NNN.json`` after the latest checkpoint, if the log has a gap.

    delta-rs reports a gap as a generic kernel error; a person needs the file name.
    """
    fs, base = storage.filesystem()
    try:
        infos = fs.get_file_info(pafs.FileSelector(f"{base}/{table}/_delta_log"))
    except OSError:
        return None
    commits, checkpoints = set(), set()
    for info in infos:
        name = info.base_name
        stem = name.split(".", 1)[0]
        if not stem.isdigit():
            continue
        if name.endswith(".json") and name.count(".") == 1:
            commits.add(int(stem))
        elif ".checkpoint" in name:
            checkpoints.add(int(stem))
    if not commits:
        return None
    start = max(checkpoints, default=-1) + 1 if checkpoints else min(commits)
    if not checkpoints and start != 0:
        return f"{0:020d}.json"
    for version in range(start, max(commits) + 1):
        if version not in commits:
            return f"{version:020d}.json"
    return None


def validate(dt: DeltaTable, table: str, uri: str) -> None:
    config = dt.metadata().configuration
    if config.get(KEY_TABLE) != table:
        raise NotAStateStore(
            f"the Delta table is not a statelake {table} table "
            f"(table property {KEY_TABLE}={config.get(KEY_TABLE)!r})",
            uri=uri,
        )
    found = [f.name for f in dt.schema().fields]
    expected = _schemas.field_names(table)
    if found != expected:
        raise NotAStateStore(
            f"the {table} table has a different schema: expected columns {expected}, found {found}",
            uri=uri,
        )
    version = int(config.get(KEY_FORMAT) or 0)
    if version > _schemas.FORMAT_VERSION:
        raise NotAStateStore(
            f"the {table} table has format version {version}; this statelake reads "
            f"up to {_schemas.FORMAT_VERSION} (upgrade statelake)",
            uri=uri,
        )


def store_properties(dt: DeltaTable) -> tuple[str, int]:
    config = dt.metadata().configuration
    layout = config.get(KEY_LAYOUT) or "card"
    capacity = int(config.get(KEY_CAPACITY) or 0)
    return layout, capacity
