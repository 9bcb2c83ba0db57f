"""What every command needs: the store URI, storage options, time travel, openers.

Storage options come from three places, later ones winning: standard
``AWS_*`` environment variables (for ``s3://`` stores), the
``STATELAKE_STORAGE_OPTIONS`` environment variable (a JSON object), and
repeated ``--storage-option KEY=VALUE`` flags. They are handed to delta-rs
and the file layer and never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ._errors import EXIT_USAGE, CliError
from ._output import Output

if TYPE_CHECKING:
    from ..audit import StoreSnapshot
    from ..delta import DeltaStateBackend

__all__ = [
    "AWS_ENVIRONMENT",
    "Context",
    "as_of_arg",
    "non_negative_int",
    "parse_interval_hours",
    "storage_options",
]

AWS_ENVIRONMENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
    "AWS_S3_ALLOW_UNSAFE_RENAME",
    "AWS_CONDITIONAL_PUT",
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
)
"""Environment variables copied into the storage options of ``s3://`` stores."""


def storage_options(
    flags: list[str] | None, uri: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Merge environment and flags (see the module doc); CliError(EXIT_USAGE) if malformed."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    if uri.startswith(("s3://", "s3a://")):
        out.update({k.lower(): env[k] for k in AWS_ENVIRONMENT if env.get(k)})
    raw = env.get("STATELAKE_STORAGE_OPTIONS")
    if raw:
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise CliError(
                f"STATELAKE_STORAGE_OPTIONS is not valid JSON: {exc}", EXIT_USAGE
            ) from exc
        if not isinstance(doc, dict):
            raise CliError(
                "STATELAKE_STORAGE_OPTIONS must be a JSON object of option names to values",
                EXIT_USAGE,
            )
        out.update(
            {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in doc.items()}
        )
    for flag in flags or ():
        key, sep, value = flag.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--storage-option expects KEY=VALUE, got {flag!r}", EXIT_USAGE)
        out[key.strip()] = value
    return out


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def as_of_arg(text: str) -> int | datetime:
    """argparse type for ``--as-of``: a table version or an ISO-8601 time (UTC if no zone)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a table version (e.g. 12) or an ISO-8601 time "
            f"(e.g. 2026-11-21T13:00:00Z), got {text!r}"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*$", re.IGNORECASE)
_UNIT_HOURS = {
    "second": 1 / 3600,
    "sec": 1 / 3600,
    "minute": 1 / 60,
    "min": 1 / 60,
    "hour": 1.0,
    "day": 24.0,
    "week": 24.0 * 7,
}


def parse_interval_hours(text: str | None) -> float | None:
    """Hours in a Delta interval property (``interval 168 hours``); None if absent or odd."""
    if not text:
        return None
    m = _INTERVAL.match(text)
    if not m:
        return None
    unit = _UNIT_HOURS.get(m.group(2).lower())
    return None if unit is None else float(m.group(1)) * unit


@dataclass(slots=True, kw_only=True)
class Context:
    """One run of one command: parsed arguments, output, and how to reach the store."""

    args: argparse.Namespace
    out: Output

    @property
    def uri(self) -> str:
        return str(self.args.uri)

    @property
    def options(self) -> dict[str, str]:
        return storage_options(self.args.storage_option, self.uri)

    def snapshot(
        self,
        *,
        partials_as_of: int | datetime | None = None,
        control_as_of: int | datetime | None = None,
    ) -> StoreSnapshot:
        """Both tables, read-only, with a progress bar while packed files are read."""
        from ..audit import load_snapshot

        with self.out.progress() as progress:
            return load_snapshot(
                self.uri,
                storage_options=self.options,
                partials_as_of=partials_as_of,
                control_as_of=control_as_of,
                progress=progress,
            )

    def snapshot_as_of(self, as_of: int | datetime | None, *, table: str) -> StoreSnapshot:
        """A snapshot where ``--as-of`` VERSION is a version of ``table``.

        The other table is read as of the time that version was committed,
        so the two agree (a sealed epoch's partials were committed before
        its marker). A point in time applies to both tables.
        """
        if not isinstance(as_of, int):
            return self.snapshot(partials_as_of=as_of, control_as_of=as_of)
        from ..audit import commit_time
        from ..delta._storage import Storage

        when = commit_time(Storage(self.uri, self.options), table, as_of)
        if table == "control":
            return self.snapshot(partials_as_of=when, control_as_of=as_of)
        return self.snapshot(partials_as_of=as_of, control_as_of=when)

    @contextmanager
    def backend(self) -> Iterator[DeltaStateBackend]:
        """The store opened for a maintenance write; never creates anything."""
        from ..delta import DeltaStateBackend

        backend = DeltaStateBackend(
            self.uri,
            instance_id=self.args.instance_id or default_instance_id(),
            vnode_capacity=None,
            storage_options=self.options,
            create=False,
        )
        try:
            yield backend
        finally:
            backend.close()


def default_instance_id() -> str:
    """Who the command acts as when it writes: recorded as committer of its changes."""
    return f"statelake-cli@{socket.gethostname()}:{os.getpid()}"
