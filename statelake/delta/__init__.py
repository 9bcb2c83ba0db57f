"""The Delta Lake engine (delta-rs): tables, group commit, control MERGE."""

from ._backend import DeltaStateBackend
from ._tables import TableSettings

__all__ = ["DeltaStateBackend", "TableSettings"]
