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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
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


def open_table(
    uri: str, storage_options: dict[str, str], as_of: int | datetime | None = None
) -> DeltaTable:
    try:
        if isinstance(as_of, int):
            return DeltaTable(uri, version=as_of, storage_options=storage_options)
        table = DeltaTable(uri, storage_options=storage_options)
        if as_of is not None:
            table.load_as_version(as_of)
        return table
    except Exception as exc:  # delta-rs raises several unrelated types here
        what = f"version {as_of}" if as_of is not None else "the latest version"
        raise StorageError(f"cannot load {what} of the Delta table: {exc}", uri=uri) from exc


def entries_of(table: DeltaTable) -> list[FileEntry]:
    """Every live file of a loaded delta-rs table, with partition values and stats."""
    actions = table.get_add_actions(flatten=True)
    cols = {name: actions.column(name).to_pylist() for name in actions.column_names}
    part_cols = [c for c in cols if c.startswith("partition.")]
    min_cols = [c for c in cols if c.startswith("min.")]
    max_cols = [c for c in cols if c.startswith("max.")]
    out = []
    for i, path in enumerate(cols["path"]):
        out.append(
            FileEntry(
                path=unquote(path),
                size=int(cols["size_bytes"][i] or 0),
                partition={
                    c[len("partition.") :]: None if cols[c][i] is None else str(cols[c][i])
                    for c in part_cols
                },
                num_records=cols["num_records"][i] if "num_records" in cols else None,
                min_values={c[4:]: cols[c][i] for c in min_cols if cols[c][i] is not None},
                max_values={c[4:]: cols[c][i] for c in max_cols if cols[c][i] is not None},
            )
        )
    return out


class LogFollower:
    """Tracks one table's version and live files, incrementally."""

    def __init__(self, storage: Storage, table: str) -> None:
        self.storage = storage
        self.table = table
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
                added=entries_of(table),
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
