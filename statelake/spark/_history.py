"""Finding past table versions from the Delta log (for time travel to pruned epochs)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from urllib.parse import unquote

from .. import _schemas

__all__ = ["last_version_with_epoch"]


def last_version_with_epoch(
    uri: str,
    epoch: int,
    *,
    storage_options: Mapping[str, str] | None = None,
) -> int | None:
    """The newest partials-table version whose snapshot still holds ``epoch``'s files.

    Reads the JSON commits of the log (``_delta_log/NNN.json``) in order:
    the first commit adding a file under ``epoch=<epoch>/`` opens the range,
    the first commit removing one (prune's DELETE) closes it. ``None`` when
    the epoch was never written or its commits are gone (log cleanup).
    Time-travel to the result with ``versionAsOf``.
    """
    from ..delta._log import open_table
    from ..delta._storage import Storage

    storage = Storage(uri, storage_options)
    latest = open_table(storage.uri(_schemas.PARTIALS), storage.options).version()
    prefix = f"epoch={epoch}/"
    first_add: int | None = None
    for version in range(latest + 1):
        raw = storage.read_if_exists(f"{_schemas.PARTIALS}/_delta_log/{version:020d}.json")
        if raw is None:
            continue
        for line in raw.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action and unquote(action["add"]["path"]).startswith(prefix):
                first_add = version if first_add is None else first_add
            elif (
                "remove" in action
                and first_add is not None
                and unquote(action["remove"]["path"]).startswith(prefix)
            ):
                return version - 1
    return latest if first_add is not None else None
