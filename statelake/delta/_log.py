"""Following a Delta table's log without reloading the table.

:class:`LogFollower` keeps the set of live data files of one table and moves
it forward by reading only the new ``_delta_log/NNN.json`` commits (one small
read per commit, one failed read to learn there is nothing new). A full load
through delta-rs happens on open, on time travel and when a commit file is
gone (log cleanup), never on the hot path.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import unquote

from deltalake import DeltaTable

from ..errors import CorruptState, StorageError
from ._storage import Storage


@dataclass(frozen=True, slots=True, kw_only=True)
class FileEntry:
    """One live data file of a table, as its add action describes it."""

    path: str
    size: int
    partition: dict[str, str | None]
    num_records: int | None = None
    min_values: dict[str, Any] = field(default_factory=dict)
    max_values: dict[str, Any] = field(default_factory=dict)
    stats_json: str = ""
    """The add action's raw statistics, kept for files this process is about to commit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogDelta:
    """What changed since the follower's previous version."""

    version: int
    added: list[FileEntry]
    removed: list[str]
    reset: bool = False
    configuration: dict[str, str] | None = None


def _entry_from_action(add: dict[str, Any]) -> FileEntry:
    stats_text = add.get("stats")
    stats: dict[str, Any] = json.loads(stats_text) if stats_text else {}
    return FileEntry(
        path=unquote(add["path"]),
        size=int(add.get("size") or 0),
        partition=dict(add.get("partitionValues") or {}),
        num_records=stats.get("numRecords"),
        min_values=stats.get("minValues") or {},
        max_values=stats.get("maxValues") or {},
    )


T = TypeVar("T")


def retry_listing(call: Callable[[], T], attempts: int = 8) -> T:
    """Run a delta-rs call that lists the log, retrying a torn listing.

    Listing a local ``_delta_log`` while another writer adds commits can see
    commit N+2 without N+1 (directory reads are not snapshots); delta-rs then
    fails with "Expected contiguous commit files". The log itself is fine, so
    listing again a moment later succeeds.
    """
    for attempt in range(attempts):
        try:
            return call()
        except Exception as exc:
            if "contiguous" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.005 * (attempt + 1))
    raise AssertionError("unreachable")


def open_table(
    uri: str, storage_options: dict[str, str], as_of: int | datetime | None = None
) -> DeltaTable:
    try:
        if isinstance(as_of, int):
            version = as_of
            return retry_listing(
                lambda: DeltaTable(uri, version=version, storage_options=storage_options)
            )
        table = retry_listing(lambda: DeltaTable(uri, storage_options=storage_options))
        if as_of is not None:
            moment = as_of
            retry_listing(lambda: table.load_as_version(moment))
        return table
    except Exception as exc:  # delta-rs raises several unrelated types here
        what = f"version {as_of}" if as_of is not None else "the latest version"
        raise StorageError(f"cannot load {what} of the Delta table: {exc}", uri=uri) from exc


def entries_of(table: DeltaTable, stat_columns: tuple[str, ...] | None = None) -> list[FileEntry]:
    """Every live file of a loaded delta-rs table, with partition values and stats.

    ``stat_columns`` limits the min/max statistics kept to those columns
    (``None`` keeps all): opening a store with many files stays cheap.
    """
    actions = table.get_add_actions(flatten=True)
    names = actions.column_names

    def wanted(prefix: str) -> list[str]:
        return [
            c
            for c in names
            if c.startswith(prefix) and (stat_columns is None or c[len(prefix) :] in stat_columns)
        ]

    part_cols = [c for c in names if c.startswith("partition.")]
    min_cols, max_cols = wanted("min."), wanted("max.")
    cols = {
        name: actions.column(name).to_pylist()
        for name in ["path", "size_bytes", "num_records", *part_cols, *min_cols, *max_cols]
        if name in names
    }
    parts = [(c[len("partition.") :], cols[c]) for c in part_cols]
    mins = [(c[4:], cols[c]) for c in min_cols]
    maxs = [(c[4:], cols[c]) for c in max_cols]
    records = cols.get("num_records")
    out = []
    for i, path in enumerate(cols["path"]):
        out.append(
            FileEntry(
                path=unquote(path),
                size=int(cols["size_bytes"][i] or 0),
                partition={k: None if v[i] is None else str(v[i]) for k, v in parts},
                num_records=records[i] if records is not None else None,
                min_values={k: v[i] for k, v in mins if v[i] is not None},
                max_values={k: v[i] for k, v in maxs if v[i] is not None},
            )
        )
    return out


class LogFollower:
    """Tracks one table's version and live files, incrementally."""

    def __init__(
        self, storage: Storage, table: str, stat_columns: tuple[str, ...] | None = None
    ) -> None:
        self.storage = storage
        self.table = table
        self.stat_columns = stat_columns
        self.uri = storage.uri(table)
        self.version = -1
        self._lock = threading.Lock()
        self._last_deep_check = time.monotonic()

    def _log_rel(self, version: int) -> str:
        return f"{self.table}/_delta_log/{version:020d}.json"

    def _behind_checkpoint(self) -> bool:
        """Every few seconds, check that log cleanup did not skip us past a checkpoint.

        Probing ``version + 1`` cannot tell "no new commit" from "that commit
        was cleaned up long ago"; ``_last_checkpoint`` can.
        """
        now = time.monotonic()
        if now - self._last_deep_check < 5.0:
            return False
        self._last_deep_check = now
        raw = self.storage.read_if_exists(f"{self.table}/_delta_log/_last_checkpoint")
        if raw is None:
            return False
        try:
            return int(json.loads(raw)["version"]) > self.version
        except (ValueError, KeyError, TypeError):
            return False

    def load(self) -> LogDelta:
        """Load the latest snapshot through delta-rs (used on open and after gaps)."""
        table = open_table(self.uri, self.storage.options)
        with self._lock:
            self.version = table.version()
            return LogDelta(
                version=self.version,
                added=entries_of(table, self.stat_columns),
                removed=[],
                reset=True,
                configuration=dict(table.metadata().configuration),
            )

    def poll(self) -> LogDelta | None:
        """Read the commits after the current version; ``None`` if there are none."""
        with self._lock:
            start = self.version
            added: dict[str, FileEntry] = {}
            removed: list[str] = []
            config: dict[str, str] | None = None
            version = start
            while True:
                raw = self.storage.read_if_exists(self._log_rel(version + 1))
                if raw is None:
                    break
                version += 1
                for line in raw.splitlines():
                    if not line.strip():
                        continue
                    try:
                        action = json.loads(line)
                    except ValueError as exc:
                        raise CorruptState(
                            f"unparseable Delta log commit {version}", path=self._log_rel(version)
                        ) from exc
                    if "add" in action:
                        entry = _entry_from_action(action["add"])
                        added[entry.path] = entry
                    elif "remove" in action:
                        path = unquote(action["remove"]["path"])
                        if added.pop(path, None) is None:
                            removed.append(path)
                    elif "metaData" in action:
                        config = dict(action["metaData"].get("configuration") or {})
            stale = version == start and self._behind_checkpoint()
        if start < 0 or stale:
            return self.load()
        if version == start:
            return None
        with self._lock:
            self.version = version
        return LogDelta(
            version=version, added=list(added.values()), removed=removed, configuration=config
        )
