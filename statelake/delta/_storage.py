"""The object-store layer: data files and log files under one store root.

delta-rs commits the log; statelake writes and reads data files itself
(through this layer) so that the hot paths never go through the pyarrow
dataset scan that can abort the interpreter at exit (see README, "Known
hazards"). Local paths use plain ``os`` calls; ``s3://``, ``gs://`` and
``az://`` go through ``pyarrow.fs`` configured from the same
``storage_options`` dict delta-rs receives.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from ..errors import InvalidArgument, StorageError

_SECRET_HINTS = ("secret", "key", "token", "password", "sas", "credential")


def redact(options: Mapping[str, str] | None) -> dict[str, str]:
    """A copy of ``options`` safe to print: secret-looking values are masked."""
    out: dict[str, str] = {}
    for k, v in (options or {}).items():
        lowered = k.lower()
        hidden = any(h in lowered for h in _SECRET_HINTS) and "key_id" not in lowered
        out[k] = "***" if hidden else v
    return out


def _opt(options: Mapping[str, str], *names: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for n in names:
        if n.lower() in lowered:
            return lowered[n.lower()]
    for n in names:
        if n.upper() in os.environ:
            return os.environ[n.upper()]
    return None


def normalize_uri(uri: str | os.PathLike[str]) -> str:
    """An absolute local path or a ``scheme://`` URI, without a trailing slash."""
    text = os.fspath(uri)
    if not isinstance(text, str) or not text:
        raise InvalidArgument(f"store URI must be a non-empty string, got {uri!r}")
    parsed = urlparse(text)
    if parsed.scheme in ("", "file"):
        path = parsed.path if parsed.scheme == "file" else text
        return os.path.abspath(path).rstrip("/") or "/"
    if parsed.scheme in ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory"):
        return text.rstrip("/")
    raise InvalidArgument(
        f"unsupported store URI scheme {parsed.scheme!r} in {text!r}: "
        "use a local path, s3://, gs:// or az://"
    )


def is_local(uri: str) -> bool:
    return "://" not in uri


class Storage:
    """Reads and writes files relative to a store root (local or object store)."""

    def __init__(self, root: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.root = normalize_uri(root)
        self.options = dict(storage_options or {})
        self.local = is_local(self.root)
        self._fs: pafs.FileSystem | None = None
        self._made_dirs: set[str] = set()
        self._base = self.root
        if not self.local:
            self._fs, self._base = _remote_filesystem(self.root, self.options)

    def __repr__(self) -> str:
        return f"Storage({self.root!r}, storage_options={redact(self.options)!r})"

    def uri(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def _path(self, rel: str) -> str:
        return f"{self._base}/{rel}" if rel else self._base

    def write(self, rel: str, data: bytes | memoryview, *, fsync: bool = False) -> None:
        """Write a new immutable file (creating parent folders); ``fsync`` before returning."""
        path = self._path(rel)
        try:
            if self._fs is None:
                folder = os.path.dirname(path)
                if folder not in self._made_dirs:
                    os.makedirs(folder, exist_ok=True)
                    if len(self._made_dirs) >= 4096:  # bounded: a cache, not a registry
                        self._made_dirs.clear()
                    self._made_dirs.add(folder)
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                except FileNotFoundError:  # the folder was removed behind our back
                    os.makedirs(folder, exist_ok=True)
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                write_fd(fd, data, fsync=fsync)
            else:
                with self._fs.open_output_stream(path) as out:
                    out.write(data)
        except OSError as exc:
            raise _storage_error("cannot write", self.uri(rel), exc) from exc

    def read(self, rel: str) -> bytes:
        path = self._path(rel)
        try:
            if self._fs is None:
                with open(path, "rb") as f:
                    return f.read()
            with self._fs.open_input_file(path) as f:
                return bytes(f.read())
        except FileNotFoundError:
            raise
        except OSError as exc:
            if _is_not_found(exc):
                raise FileNotFoundError(errno.ENOENT, "not found", self.uri(rel)) from exc
            raise _storage_error("cannot read", self.uri(rel), exc) from exc

    def read_if_exists(self, rel: str) -> bytes | None:
        try:
            return self.read(rel)
        except FileNotFoundError:
            return None

    def exists(self, rel: str) -> bool:
        path = self._path(rel)
        if self._fs is None:
            return os.path.exists(path)
        try:
            info = self._fs.get_file_info(path)
        except OSError as exc:
            raise _storage_error("cannot stat", self.uri(rel), exc) from exc
        return bool(info.type != pafs.FileType.NotFound)

    def delete(self, rel: str) -> None:
        """Best-effort removal of a file (an orphaned data file)."""
        try:
            if self._fs is None:
                os.remove(self._path(rel))
            else:
                self._fs.delete_file(self._path(rel))
        except OSError:
            pass

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and the root path inside it (for engines that need one)."""
        if self._fs is None:
            return pafs.LocalFileSystem(), self._base
        return self._fs, self._base

    def check_writable(self) -> None:
        """Fail early with a clear error if the root cannot be created or written."""
        if self._fs is not None:
            return
        root = self.root
        if os.path.exists(root) and not os.path.isdir(root):
            raise StorageError("store URI points to a file, not a folder", uri=root)
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as exc:
            raise _storage_error("cannot create the store folder", root, exc) from exc
        if not os.access(root, os.W_OK | os.X_OK):
            raise StorageError("the store folder is not writable (read-only location?)", uri=root)


def write_fd(fd: int, data: bytes | memoryview, *, fsync: bool) -> None:
    """Write all of ``data`` to an open descriptor, optionally fsync, and close it."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _is_not_found(exc: OSError) -> bool:
    text = str(exc).lower()
    return "not found" in text or "nosuchkey" in text or "does not exist" in text


def _storage_error(what: str, uri: str, exc: OSError) -> StorageError:
    reason = exc.strerror or str(exc)
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM):
        reason = "permission denied"
    elif exc.errno == errno.EROFS:
        reason = "read-only file system"
    elif exc.errno == errno.ENOSPC:
        reason = "no space left on device"
    return StorageError(f"{what}: {reason}", uri=uri)


def _remote_filesystem(root: str, options: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    parsed = urlparse(root)
    base = f"{parsed.netloc}{parsed.path}".rstrip("/")
    scheme = parsed.scheme
    if scheme in ("s3", "s3a"):
        kwargs: dict[str, Any] = {}
        endpoint = _opt(options, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
        if endpoint:
            ep = urlparse(endpoint)
            kwargs["endpoint_override"] = ep.netloc or ep.path
            kwargs["scheme"] = ep.scheme or "https"
        if (_opt(options, "aws_allow_http", "allow_http") or "").lower() == "true":
            kwargs["scheme"] = "http"
        for key, names in {
            "access_key": ("aws_access_key_id", "access_key_id"),
            "secret_key": ("aws_secret_access_key", "secret_access_key"),
            "session_token": ("aws_session_token", "session_token"),
            "region": ("aws_region", "region", "aws_default_region"),
        }.items():
            value = _opt(options, *names)
            if value:
                kwargs[key] = value
        return pafs.S3FileSystem(**kwargs), base
    if scheme in ("gs", "gcs"):
        gkw: dict[str, Any] = {}
        token = _opt(options, "google_access_token")
        if token:
            gkw["access_token"] = token
        endpoint = _opt(options, "google_endpoint_url", "gcs_endpoint")
        if endpoint:
            ep = urlparse(endpoint)
            gkw["endpoint_override"] = ep.netloc
            gkw["scheme"] = ep.scheme or "https"
        return pafs.GcsFileSystem(**gkw), base
    if scheme in ("az", "abfs", "abfss"):
        account = _opt(options, "azure_storage_account_name", "account_name")
        if not account:
            raise InvalidArgument("az:// stores need storage option azure_storage_account_name")
        akw: dict[str, Any] = {"account_name": account}
        account_key = _opt(options, "azure_storage_account_key", "account_key")
        if account_key:
            akw["account_key"] = account_key
        return pafs.AzureFileSystem(**akw), base
    raise InvalidArgument(f"unsupported store URI {root!r}")
