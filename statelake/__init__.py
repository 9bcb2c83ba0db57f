"""statelake: a stream processor's state backend on Delta Lake tables."""

from .backend import AsOf, AsyncStateBackend, StateBackend
from .delta import DeltaStateBackend, TableSettings
from .errors import (
    AmbiguousCommit,
    ConflictingPartial,
    CorruptState,
    InvalidArgument,
    NotAStateStore,
    PayloadTooLarge,
    SplitBrainCommit,
    StaleVersion,
    StateBackendError,
    StorageError,
    VnodeOutOfRange,
)
from .memory import InMemoryBackend

__version__ = "0.1.0"

__all__ = [
    "AmbiguousCommit",
    "AsOf",
    "AsyncStateBackend",
    "ConflictingPartial",
    "CorruptState",
    "DeltaStateBackend",
    "InMemoryBackend",
    "InvalidArgument",
    "NotAStateStore",
    "PayloadTooLarge",
    "SplitBrainCommit",
    "StaleVersion",
    "StateBackend",
    "StateBackendError",
    "StorageError",
    "TableSettings",
    "VnodeOutOfRange",
    "__version__",
]
