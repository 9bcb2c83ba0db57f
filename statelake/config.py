"""A shippable store configuration: small, immutable, picklable; opens backends anywhere.

:class:`StoreConfig` is to statelake what Flink's ``StateBackend`` object is
to a job: not the state itself but a light, serializable description of
where it lives and how to open it. Build one on the driver, send it to Spark
executors or ``spawn``ed worker processes (it pickles to a few hundred
bytes), and call :meth:`StoreConfig.open` there.

Opening is thread-safe and, by default, cached per process: every thread
asking for the same ``(config, instance_id)`` gets the same
:class:`~statelake.DeltaStateBackend` (itself thread-safe and group-
committing), created once under a lock. A cached backend that was closed is
replaced on the next open.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ._validation import check_capacity
from .checkpoint import CODECS, CheckpointManager
from .delta import DeltaStateBackend, TableSettings
from .delta._backend import DEFAULT_MAX_PARTIAL_BYTES
from .delta._storage import normalize_uri, redact
from .errors import InvalidArgument
from .handles import DeltaHandleStore

__all__ = ["StorageOptions", "StoreConfig", "close_cached"]


class StorageOptions(Mapping[str, str]):
    """An immutable, hashable, picklable ``str -> str`` mapping whose repr hides secrets."""

    __slots__ = ("_items",)

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        items = dict(options or {})
        for k, v in items.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise InvalidArgument("storage options must map str to str")
        self._items: tuple[tuple[str, str], ...] = tuple(sorted(items.items()))

    def __getitem__(self, key: str) -> str:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StorageOptions):
            return self._items == other._items
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __repr__(self) -> str:
        return repr(redact(dict(self._items)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (StorageOptions, (dict(self._items),))


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    """Where a state store lives and how to open it. Immutable and picklable.

    * ``uri``: the store root (local path, ``s3://``, ``gs://``, ``az://``);
      a local path is made absolute here, so a process with another working
      directory opens the same store.
    * ``storage_options``: credentials and endpoints for delta-rs and the
      file layer; values of secret-looking keys are shown as ``***`` in
      ``repr`` (and so in logs and Spark UIs), never in clear.
    * ``layout``: ``"card"`` or ``"packed"`` for a new store; ``None`` (the
      default) adopts the stored layout, creating ``"card"``.
    * ``vnode_capacity``: required to create a store; ``None`` adopts it.
    * ``vacuum_retention_hours``: VACUUM on prune (default ``None``: never,
      time travel keeps working until maintenance vacuums).
    * ``settings``: Delta table properties at creation (log retention...).
    * ``max_partial_bytes``: per-partial size limit (default 256 MiB).
    * ``retain_checkpoints``: checkpoints a :class:`CheckpointManager`
      keeps (default 10; ``None`` keeps all).
    * ``compression``: checkpoint codec (``None`` adopts the store's).
    """

    uri: str
    storage_options: Mapping[str, str] = field(default_factory=StorageOptions)
    layout: str | None = None
    vnode_capacity: int | None = None
    vacuum_retention_hours: float | None = None
    settings: TableSettings | None = None
    max_partial_bytes: int | None = DEFAULT_MAX_PARTIAL_BYTES
    retain_checkpoints: int | None = 10
    compression: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "uri", normalize_uri(os.fspath(self.uri)))
        if not isinstance(self.storage_options, StorageOptions):
            object.__setattr__(self, "storage_options", StorageOptions(self.storage_options))
        if self.layout is not None and self.layout not in ("card", "packed"):
            raise InvalidArgument(f"layout must be 'card' or 'packed', got {self.layout!r}")
        if self.vnode_capacity is not None:
            check_capacity(self.vnode_capacity)
        if self.compression is not None and self.compression not in CODECS:
            raise InvalidArgument(f"compression must be one of {CODECS}, got {self.compression!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Explicit, so frozen slotted instances pickle the same on every Python version.
        return (_rebuild, ({f.name: getattr(self, f.name) for f in fields(self)},))

    # -- factories -------------------------------------------------------------------
    def open(self, *, instance_id: str, cached: bool = True) -> DeltaStateBackend:
        """A backend on this store for ``instance_id``.

        ``cached=True`` (default): one shared backend per ``(config,
        instance_id)`` in this process, created once even when many threads
        ask at the same moment; do not close it while others use it (or
        call :func:`close_cached`). ``cached=False``: a new backend the
        caller owns and closes.
        """
        if not cached:
            return self._new_backend(instance_id)
        key = (self, instance_id)
        with _cache_lock:
            lock = _key_locks.setdefault(key, threading.Lock())
        with lock:
            backend = _cache.get(key)
            if backend is None or backend._closed:
                backend = self._new_backend(instance_id)
                _cache[key] = backend
            return backend

    def _new_backend(self, instance_id: str) -> DeltaStateBackend:
        return DeltaStateBackend(
            self.uri,
            instance_id=instance_id,
            vnode_capacity=self.vnode_capacity,
            storage_options=dict(self.storage_options),
            layout=self.layout,
            max_partial_bytes=self.max_partial_bytes,
            vacuum_retention_hours=self.vacuum_retention_hours,
            settings=self.settings,
        )

    def handle_store(self, *, instance_id: str) -> DeltaHandleStore:
        """A new :class:`DeltaHandleStore` on this store root (shares its fence)."""
        return DeltaHandleStore(
            self.uri,
            instance_id=instance_id,
            storage_options=dict(self.storage_options),
            settings=self.settings,
        )

    def checkpoint_manager(self, *, instance_id: str, **options: Any) -> CheckpointManager:
        """A new :class:`CheckpointManager` on the (cached) backend of ``instance_id``.

        ``retain`` and ``compression`` default to this config's values; other
        keyword options go to :class:`CheckpointManager` unchanged.
        """
        options.setdefault("retain", self.retain_checkpoints)
        options.setdefault("compression", self.compression)
        return CheckpointManager(self.open(instance_id=instance_id), **options)


def _rebuild(values: dict[str, Any]) -> StoreConfig:
    return StoreConfig(**values)


_cache_lock = threading.Lock()
_key_locks: dict[tuple[StoreConfig, str], threading.Lock] = {}
_cache: dict[tuple[StoreConfig, str], DeltaStateBackend] = {}


def close_cached() -> None:
    """Close every backend :meth:`StoreConfig.open` cached in this process."""
    with _cache_lock:
        backends = list(_cache.values())
        _cache.clear()
    for backend in backends:
        backend.close()
