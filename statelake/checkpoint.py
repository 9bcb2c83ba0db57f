"""A checkpoint manager: keyed operator state, incremental checkpoints as statelake partials.

:class:`CheckpointManager` holds an operator's keyed state in memory
(``bytes`` keys and values), tracks which keys changed, and checkpoints it
into a :class:`~statelake.StateBackend` as one partial per vnode per epoch:

* **Keys on vnodes.** A key lives on vnode ``crc32(key) % vnode_capacity``;
  every checkpoint writes one partial for *every* vnode of the store, so
  each sealed epoch is self-contained to read (an unchanged vnode costs a
  header of a few dozen bytes in an incremental checkpoint).
* **Full and incremental checkpoints.** A *full* checkpoint holds every key;
  an *incremental* one holds only the keys changed since the previous
  checkpoint: a ``put`` record with the new value, or a *tombstone* for a
  deleted key. A full checkpoint is taken first, after ``full_every - 1``
  incremental ones in a row, or when asked.
* **Self-describing payloads.** Each partial starts with a fixed header
  (:data:`MAGIC`, format version, kind, codec, epoch, base epoch, previous
  epoch, record count, raw length), so a reader needs nothing else: the
  codec (``none``, ``zstd``, ``lz4``) is recorded in every payload, and the
  chain an incremental checkpoint belongs to is spelled out (``prev`` is the
  checkpoint it applies on top of, ``base`` the full one the chain starts
  from). A manager opened with ``compression=None`` adopts the codec of the
  store's latest checkpoint (``zstd`` for a new store), which is how the
  codec is chosen once per store.
* **Restore.** :meth:`CheckpointManager.restore` loads the latest sealed
  checkpoint or any retained epoch (point-in-time recovery) by reading the
  chain from its base: full state, then each delta in order.
* **Retention.** With ``retain=N`` the manager keeps at least the last N
  sealed checkpoints. It calls ``prune_before`` with a floor no higher than
  the *base* epoch of any checkpoint that survives, so every retained
  checkpoint keeps its whole chain. That includes an older incremental left
  on a branch after a restore (it may hold back pruning until the floor
  passes it).
* **Interval.** :meth:`CheckpointManager.maybe_checkpoint` checkpoints when
  ``interval`` seconds passed since the last one and something changed.

Payload layout, big-endian::

    header  = MAGIC(4) format(u8) kind(u8) codec(u8) reserved(u8)
              epoch(u64) base(u64) prev(u64) records(u32) raw_length(u64)
    body    = codec-compressed(records)
    record  = op(u8: 1 put, 2 tombstone) key_length(u32) key [value_length(u32) value]
"""

from __future__ import annotations

import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ._validation import check_int
from .backend import StateBackend
from .errors import CorruptState, InvalidArgument, StateBackendError

__all__ = ["CODECS", "CheckpointInfo", "CheckpointManager", "decode_payload", "encode_payload"]

MAGIC = b"SLCK"
FORMAT = 1
FULL = "full"
INCREMENTAL = "incremental"
CODECS = ("none", "zstd", "lz4")
_KINDS = (FULL, INCREMENTAL)
_HEADER = struct.Struct(">4sBBBxQQQIQ")
_PUT = 1
_TOMBSTONE = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointInfo:
    """What one checkpoint wrote (or, after restore, what was loaded).

    ``raw_bytes`` is the size of the encoded records before compression,
    ``stored_bytes`` the size of the payloads written (headers included);
    ``compression_ratio`` is ``raw / stored`` (above 1 means compression
    paid off) and ``space_saving`` is ``1 - stored / raw``.
    """

    epoch: int
    kind: str
    base_epoch: int
    prev_epoch: int
    codec: str
    keys_written: int
    tombstones: int
    raw_bytes: int
    stored_bytes: int

    @property
    def compression_ratio(self) -> float:
        return self.raw_bytes / self.stored_bytes if self.stored_bytes else 1.0

    @property
    def space_saving(self) -> float:
        return 1.0 - self.stored_bytes / self.raw_bytes if self.raw_bytes else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class _Header:
    kind: str
    codec: str
    epoch: int
    base: int
    prev: int
    records: int
    raw_length: int


# -- encoding -------------------------------------------------------------------------
def _compressor(codec: str) -> tuple[Callable[[bytes], bytes], Callable[[bytes, int], bytes]]:
    if codec == "none":
        return (lambda b: b), (lambda b, n: b)
    if codec == "zstd":
        try:
            import zstandard
        except ImportError as exc:  # pragma: no cover - the compression extra is missing
            raise InvalidArgument(
                "zstd needs the 'zstandard' package (statelake[compression])"
            ) from exc
        return (
            lambda b: zstandard.ZstdCompressor(level=3).compress(b),
            lambda b, n: zstandard.ZstdDecompressor().decompress(b, max_output_size=n),
        )
    if codec == "lz4":
        try:
            import lz4.frame
        except ImportError as exc:  # pragma: no cover
            raise InvalidArgument("lz4 needs the 'lz4' package (statelake[compression])") from exc
        return (lambda b: bytes(lz4.frame.compress(b))), (
            lambda b, n: bytes(lz4.frame.decompress(b))
        )
    raise InvalidArgument(f"compression must be one of {CODECS}, got {codec!r}")


def encode_payload(
    records: Mapping[bytes, bytes | None],
    *,
    kind: str,
    codec: str,
    epoch: int,
    base: int,
    prev: int,
) -> tuple[bytes, int]:
    """Encode ``records`` (key -> value, ``None`` = tombstone); returns (payload, raw size)."""
    parts: list[bytes] = []
    for key in sorted(records):
        value = records[key]
        if value is None:
            parts.append(struct.pack(">BI", _TOMBSTONE, len(key)) + key)
        else:
            parts.append(
                struct.pack(">BI", _PUT, len(key)) + key + struct.pack(">I", len(value)) + value
            )
    raw = b"".join(parts)
    compress, _ = _compressor(codec)
    header = _HEADER.pack(
        MAGIC,
        FORMAT,
        _KINDS.index(kind),
        CODECS.index(codec),
        epoch,
        base,
        prev,
        len(records),
        len(raw),
    )
    return header + compress(raw), len(raw)


def _read_header(payload: bytes, where: str) -> _Header:
    if len(payload) < _HEADER.size:
        raise CorruptState(f"checkpoint payload too short ({len(payload)} bytes)", path=where)
    magic, fmt, kind, codec, epoch, base, prev, records, raw_len = _HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise CorruptState("not a checkpoint payload (bad magic)", path=where)
    if fmt > FORMAT:
        raise CorruptState(
            f"checkpoint format {fmt} is newer than this statelake ({FORMAT})", path=where
        )
    if kind >= len(_KINDS) or codec >= len(CODECS):
        raise CorruptState(f"unknown checkpoint kind {kind} or codec {codec}", path=where)
    return _Header(
        kind=_KINDS[kind],
        codec=CODECS[codec],
        epoch=epoch,
        base=base,
        prev=prev,
        records=records,
        raw_length=raw_len,
    )


def decode_payload(payload: bytes, where: str = "") -> tuple[_Header, dict[bytes, bytes | None]]:
    """The header and the records (key -> value, ``None`` = tombstone) of a payload."""
    header = _read_header(payload, where)
    _, decompress = _compressor(header.codec)
    try:
        raw = decompress(payload[_HEADER.size :], header.raw_length)
    except Exception as exc:
        raise CorruptState(
            f"cannot decompress {header.codec} checkpoint payload: {exc}", path=where
        ) from exc
    if len(raw) != header.raw_length:
        raise CorruptState(
            f"checkpoint body is {len(raw)} bytes, the header promised {header.raw_length}",
            path=where,
        )
    records: dict[bytes, bytes | None] = {}
    view, pos = memoryview(raw), 0
    try:
        for _ in range(header.records):
            op, klen = struct.unpack_from(">BI", view, pos)
            pos += 5
            key = bytes(view[pos : pos + klen])
            pos += klen
            if op == _PUT:
                (vlen,) = struct.unpack_from(">I", view, pos)
                pos += 4
                records[key] = bytes(view[pos : pos + vlen])
                pos += vlen
            elif op == _TOMBSTONE:
                records[key] = None
            else:
                raise CorruptState(f"unknown record op {op}", path=where)
    except struct.error as exc:
        raise CorruptState(f"truncated checkpoint body: {exc}", path=where) from exc
    if pos != len(raw):
        raise CorruptState("trailing bytes after the last checkpoint record", path=where)
    return header, records


def vnode_of(key: bytes, capacity: int) -> int:
    """The vnode a key lives on: ``crc32(key) % capacity`` (stable across processes)."""
    return zlib.crc32(key) % capacity


# -- the manager ----------------------------------------------------------------------
class CheckpointManager:
    """Keyed operator state in memory, checkpointed incrementally into a state backend.

    ``backend`` is any :class:`~statelake.StateBackend` with a
    ``vnode_capacity`` (the Delta engine in production). Keyword options:

    * ``compression``: ``"zstd"``, ``"lz4"`` or ``"none"``. Default ``None``
      adopts the codec of the store's latest checkpoint, ``zstd`` if there is
      none: one codec per store unless deliberately changed (readers never
      care, each payload names its codec).
    * ``full_every``: a full checkpoint at least every this many checkpoints
      (default 10; 1 makes every checkpoint full). Longer chains write less
      and restore more slowly.
    * ``retain``: keep at least the last this many sealed checkpoints
      (default 10; ``None`` keeps all). Older ones are pruned, but never the
      base of any checkpoint left retained: every epoch :meth:`checkpoints`
      lists can be restored.
    * ``interval``: seconds between checkpoints for :meth:`maybe_checkpoint`
      (default 60; ``None`` disables it).
    * ``assignment_version``: written with each partial (the fence applies).
    * ``clock``: time source for the interval (default ``time.monotonic``).

    The manager owns the epochs of its store: every sealed epoch must be a
    checkpoint payload (another kind of partial there reads as
    :class:`~statelake.CorruptState`). Give each operator its own store root.

    Thread-safe: one lock guards the state and the checkpoint step.
    """

    def __init__(
        self,
        backend: StateBackend,
        *,
        compression: str | None = None,
        full_every: int = 10,
        retain: int | None = 10,
        interval: float | None = 60.0,
        assignment_version: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if compression is not None:
            _compressor(compression)
        if isinstance(full_every, bool) or not isinstance(full_every, int) or full_every < 1:
            raise InvalidArgument(f"full_every must be an int >= 1, got {full_every!r}")
        if retain is not None and (
            isinstance(retain, bool) or not isinstance(retain, int) or retain < 1
        ):
            raise InvalidArgument(f"retain must be None or an int >= 1, got {retain!r}")
        if interval is not None and not interval > 0:
            raise InvalidArgument(f"interval must be None or > 0 seconds, got {interval!r}")
        check_int("assignment_version", assignment_version)
        capacity = getattr(backend, "vnode_capacity", None)
        if not isinstance(capacity, int) or capacity < 1:
            raise InvalidArgument("the backend must expose a positive vnode_capacity")
        self.backend = backend
        self.vnode_capacity = capacity
        self.full_every = full_every
        self.retain = retain
        self.interval = interval
        self.assignment_version = assignment_version
        self._clock = clock
        self._lock = threading.RLock()
        self._data: dict[bytes, bytes] = {}
        self._dirty: set[bytes] = set()
        self._prev: int | None = None  # epoch the next incremental applies on top of
        self._base: int | None = None
        self._chain = 0  # checkpoints in the current chain, the full one included
        self._last_time = clock()
        self._headers: dict[int, _Header] = {}
        latest = self._latest_header()
        self.compression = compression or (latest.codec if latest else "zstd")
        self.last: CheckpointInfo | None = None

    # -- keyed state ---------------------------------------------------------------
    def put(self, key: bytes, value: bytes) -> None:
        """Set ``key`` to ``value`` (marks it dirty)."""
        k, v = _check_bytes("key", key), _check_bytes("value", value)
        with self._lock:
            self._data[k] = v
            self._dirty.add(k)

    def delete(self, key: bytes) -> None:
        """Remove ``key`` (a tombstone in the next incremental checkpoint)."""
        k = _check_bytes("key", key)
        with self._lock:
            if self._data.pop(k, None) is not None or k in self._dirty:
                self._dirty.add(k)

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        with self._lock:
            return self._data.get(_check_bytes("key", key), default)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """A snapshot of every (key, value), in key order."""
        with self._lock:
            snap = sorted(self._data.items())
        return iter(snap)

    def state(self) -> dict[bytes, bytes]:
        """A copy of the whole in-memory state."""
        with self._lock:
            return dict(self._data)

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    @property
    def dirty_keys(self) -> int:
        """Keys changed (set or deleted) since the last checkpoint or restore."""
        with self._lock:
            return len(self._dirty)

    # -- checkpoints -------------------------------------------------------------------
    def checkpoint(self, epoch: int | None = None, *, full: bool | None = None) -> CheckpointInfo:
        """Write, seal and (per ``retain``) prune: returns what was written.

        ``epoch`` defaults to one past every epoch the store holds (sealed or
        not: a crashed attempt's partials are never overwritten); a given
        epoch must be above the latest sealed one. ``full=None`` picks full
        or incremental by ``full_every``; ``True``/``False`` forces it (an
        incremental one needs a previous checkpoint in this manager).
        """
        with self._lock:
            if epoch is None:
                epoch = self._next_epoch()
            else:
                check_int("epoch", epoch)
                latest = self._latest_sealed()
                if latest is not None and epoch <= latest:
                    raise InvalidArgument(
                        f"epoch {epoch} is not after the latest sealed checkpoint {latest}"
                    )
            if full is None:
                full = self._prev is None or self._chain >= self.full_every
            elif not full and self._prev is None:
                raise InvalidArgument("an incremental checkpoint needs a previous checkpoint")
            kind = FULL if full else INCREMENTAL
            base = epoch if full else self._base
            prev = epoch if full else self._prev
            assert base is not None and prev is not None
            by_vnode: list[dict[bytes, bytes | None]] = [{} for _ in range(self.vnode_capacity)]
            keys = self._data if full else self._dirty
            for key in keys:
                by_vnode[vnode_of(key, self.vnode_capacity)][key] = self._data.get(key)
            payloads: dict[int, bytes] = {}
            raw_total = 0
            for vnode, records in enumerate(by_vnode):
                payload, raw = encode_payload(
                    records, kind=kind, codec=self.compression, epoch=epoch, base=base, prev=prev
                )
                payloads[vnode] = payload
                raw_total += raw
            self.backend.write_partials(epoch, self.assignment_version, payloads)
            vnodes = list(range(self.vnode_capacity))
            if not self.backend.epoch_complete(epoch, vnodes):
                raise StateBackendError(
                    f"checkpoint {epoch} could not be sealed: a partial is missing or "
                    "below the fence"
                )
            tombstones = sum(1 for r in by_vnode for v in r.values() if v is None)
            info = CheckpointInfo(
                epoch=epoch,
                kind=kind,
                base_epoch=base,
                prev_epoch=prev,
                codec=self.compression,
                keys_written=len(keys) - tombstones,
                tombstones=tombstones,
                raw_bytes=raw_total,
                stored_bytes=sum(len(p) for p in payloads.values()),
            )
            self._headers[epoch] = _Header(
                kind=kind,
                codec=self.compression,
                epoch=epoch,
                base=base,
                prev=prev,
                records=0,
                raw_length=0,
            )
            self._dirty.clear()
            self._prev, self._base = epoch, base
            self._chain = 1 if full else self._chain + 1
            self._last_time = self._clock()
            self.last = info
            self._apply_retention()
            return info

    def maybe_checkpoint(self, now: float | None = None) -> CheckpointInfo | None:
        """Checkpoint if ``interval`` elapsed since the last one and something changed.

        ``now`` defaults to the manager's clock. With nothing dirty the timer
        restarts and no epoch is spent. Returns the checkpoint taken, or None.
        """
        if self.interval is None:
            return None
        with self._lock:
            now = self._clock() if now is None else now
            if now - self._last_time < self.interval:
                return None
            if not self._dirty and self._prev is not None:
                self._last_time = now
                return None
            info = self.checkpoint()
            self._last_time = now
            return info

    def checkpoints(self) -> list[int]:
        """Sealed checkpoint epochs still retained, ascending (restore targets)."""
        return list(self.backend.committed_epochs())

    def _apply_retention(self) -> None:
        """Prune below the highest floor that leaves every surviving sealed epoch restorable.

        ``prune_before(floor)`` drops a prefix: every sealed epoch at or above
        ``floor`` survives and stays a restore target, not only the last
        ``retain``. So the floor must sit at or below the base of *each*
        survivor. Starting at the oldest of the last ``retain``, walk the
        sealed epochs newest first, lowering the floor to the base of each
        epoch still at or above it. In a linear history bases never decrease
        with the epoch, so this changes nothing, but a branch breaks that
        order: after ``restore(0)`` an incremental epoch 4 on base 0 can sit
        below the newest chains. Previously the floor came from the last
        ``retain`` alone, so epoch 4 survived with its base pruned, and
        restoring it raised CorruptState. Such an epoch now holds its base
        until the floor passes it, and then it goes too.
        """
        if self.retain is None:
            return
        sealed = self.backend.committed_epochs()
        if len(sealed) <= self.retain:
            return
        floor = sealed[-self.retain]
        for e in reversed(sealed):
            if e < floor:
                break
            floor = min(floor, self._header_of(e).base)
        if floor > sealed[0]:
            self.backend.prune_before(floor)
            self._headers = {e: h for e, h in self._headers.items() if e >= floor}

    # -- restore ---------------------------------------------------------------------------
    def state_at(self, epoch: int | None = None) -> dict[bytes, bytes]:
        """The state as of sealed checkpoint ``epoch`` (default: the latest), without loading it."""
        return self._load(epoch)[0]

    def restore(self, epoch: int | None = None) -> int | None:
        """Replace the in-memory state by sealed checkpoint ``epoch`` (default: the latest).

        Returns the restored epoch, or None when the store has no checkpoint
        (the state is then empty). The next incremental checkpoint applies
        on top of the restored one, so restoring an older epoch and carrying
        on branches history without disturbing newer checkpoints.
        """
        with self._lock:
            data, header = self._load(epoch)
            self._data = data
            self._dirty.clear()
            self._last_time = self._clock()
            if header is None:
                self._prev = self._base = None
                self._chain = 0
                return None
            self._prev, self._base = header.epoch, header.base
            self._chain = self._chain_length(header)
            return header.epoch

    def _load(self, epoch: int | None) -> tuple[dict[bytes, bytes], _Header | None]:
        sealed = self.backend.committed_epochs()
        if epoch is None:
            if not sealed:
                return {}, None
            epoch = sealed[-1]
        check_int("epoch", epoch)
        if epoch not in sealed:
            raise InvalidArgument(
                f"epoch {epoch} is not a retained sealed checkpoint (retained: {sealed})"
            )
        chain: list[tuple[int, dict[int, bytes]]] = []
        header: _Header | None = None
        first: _Header | None = None
        e = epoch
        while True:
            parts = self._read_epoch(e)
            if len(parts) != self.vnode_capacity:
                raise CorruptState(
                    f"checkpoint {e} has partials for {len(parts)} of {self.vnode_capacity} vnodes "
                    f"(needed to restore epoch {epoch}: was its chain pruned?)"
                )
            chain.append((e, parts))
            header = _read_header(parts[0], f"epoch {e} vnode 0")
            self._headers[e] = header
            first = first or header
            if header.kind == FULL:
                break
            if header.prev >= e:
                raise CorruptState(f"checkpoint {e} points to a later checkpoint {header.prev}")
            e = header.prev
        data: dict[bytes, bytes] = {}
        # Oldest first: the full checkpoint lists every key, each delta then applies on top.
        for e, parts in reversed(chain):
            for vnode in sorted(parts):
                where = f"epoch {e} vnode {vnode}"
                h, records = decode_payload(parts[vnode], where)
                if h.epoch != e:
                    raise CorruptState(f"payload was written for epoch {h.epoch}", path=where)
                for key, value in records.items():
                    if value is None:
                        data.pop(key, None)
                    else:
                        data[key] = value
        return data, first

    def _chain_length(self, header: _Header) -> int:
        n, h = 1, header
        while h.kind != FULL:
            h = self._header_of(h.prev)
            n += 1
        return n

    # -- store reads -----------------------------------------------------------------------
    def _read_epoch(self, epoch: int) -> dict[int, bytes]:
        read_epoch: Any = getattr(self.backend, "read_epoch", None)
        if read_epoch is not None:
            return dict(read_epoch(epoch))
        out = {}
        for v in range(self.vnode_capacity):
            p = self.backend.read_partial(v, epoch)
            if p is not None:
                out[v] = p
        return out

    def _header_of(self, epoch: int) -> _Header:
        h = self._headers.get(epoch)
        if h is None:
            payload = self.backend.read_partial(0, epoch)
            if payload is None:
                raise CorruptState(f"checkpoint {epoch} has no partial for vnode 0")
            h = _read_header(payload, f"epoch {epoch} vnode 0")
            self._headers[epoch] = h
        return h

    def _latest_sealed(self) -> int | None:
        sealed = self.backend.committed_epochs()
        return sealed[-1] if sealed else None

    def _latest_header(self) -> _Header | None:
        latest = self._latest_sealed()
        return self._header_of(latest) if latest is not None else None

    def _next_epoch(self) -> int:
        latest = self._latest_sealed()
        epoch = 0 if latest is None else latest + 1
        if self._prev is not None:
            epoch = max(epoch, self._prev + 1)
        # Skip epochs holding partials of an attempt that crashed before sealing.
        while self._read_epoch(epoch):
            epoch += 1
        return epoch


def _check_bytes(what: str, value: object) -> bytes:
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise InvalidArgument(f"{what} must be bytes, got {type(value).__name__}")
    return value
