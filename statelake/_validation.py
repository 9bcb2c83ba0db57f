"""Argument checks shared by every backend: a bad call fails before any I/O."""

from __future__ import annotations

from collections.abc import Sequence

from .errors import InvalidArgument, PayloadTooLarge, VnodeOutOfRange


def check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(f"{name} must be >= 0, got {value}")
    if value >= 2**63:
        raise InvalidArgument(f"{name} must fit in 63 bits, got {value}")
    return value


def check_vnode(vnode: object, capacity: int) -> int:
    if isinstance(vnode, bool) or not isinstance(vnode, int):
        raise InvalidArgument(f"vnode must be an int, got {type(vnode).__name__}")
    if not 0 <= vnode < capacity:
        raise VnodeOutOfRange(vnode, capacity)
    return vnode


def check_payload(data: object, limit: int | None) -> bytes:
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise InvalidArgument(
            f"data must be bytes (or bytearray/memoryview), got {type(data).__name__}"
        )
    if limit is not None and len(data) > limit:
        raise PayloadTooLarge(len(data), limit)
    return data


def check_vnodes(vnodes: Sequence[int], capacity: int) -> list[int]:
    if isinstance(vnodes, (str, bytes)) or not isinstance(vnodes, Sequence):
        raise InvalidArgument(f"vnodes must be a sequence of ints, got {type(vnodes).__name__}")
    return [check_vnode(v, capacity) for v in vnodes]


def check_capacity(capacity: object) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
        raise InvalidArgument(f"vnode_capacity must be a positive int, got {capacity!r}")
    if capacity > 2**31 - 1:
        raise InvalidArgument(f"vnode_capacity must fit in 31 bits, got {capacity}")
    return capacity
