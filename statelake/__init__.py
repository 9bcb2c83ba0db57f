"""statelake: a stream processor's state backend on Delta Lake tables."""

from .backend import AsOf, AsyncStateBackend, StateBackend
from .checkpoint import CheckpointInfo, CheckpointManager
from .config import StoreConfig
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
from .handles import (
    DeltaHandleStore,
    Handle,
    HandleExists,
    HandleNotFound,
    PossiblyInconsistent,
    ResourceVersionMismatch,
)
from .memory import InMemoryBackend

__version__ = "0.1.0"

__all__ = [
    "AmbiguousCommit",
    "AsOf",
    "AsyncStateBackend",
    "CheckpointInfo",
    "CheckpointManager",
    "ConflictingPartial",
    "CorruptState",
    "DeltaHandleStore",
    "DeltaStateBackend",
    "Handle",
    "HandleExists",
    "HandleNotFound",
    "InMemoryBackend",
    "InvalidArgument",
    "NotAStateStore",
    "PayloadTooLarge",
    "PossiblyInconsistent",
    "ResourceVersionMismatch",
    "SplitBrainCommit",
    "StaleVersion",
    "StateBackend",
    "StateBackendError",
    "StorageError",
    "StoreConfig",
    "TableSettings",
    "VnodeOutOfRange",
    "__version__",
]
