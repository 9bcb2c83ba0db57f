"""Fixtures for the `statelake` command tests: the installed command, real stores.

Every test runs the console script installed by the package (a real
subprocess, a real exit code) against stores built with
:class:`~statelake.DeltaStateBackend` on local disk. Anomalies are planted
the way they happen in the field: a second commit marker appended straight
to the control table, rows committed around the backend's checks, a data
file deleted or overwritten on storage.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from statelake import DeltaStateBackend
from statelake.audit import load_snapshot

CLI_TIMEOUT = 120


def _executable() -> str:
    beside = Path(sys.executable).with_name("statelake")
    if beside.exists():
        return str(beside)
    found = shutil.which("statelake")
    if found is None:
        pytest.fail("the `statelake` command is not installed: run `pip install -e .`")
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """One finished run of the command."""

    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


Run = Callable[..., Result]


@pytest.fixture(scope="session")
def statelake() -> Run:
    """``statelake(*args, code=0, env=None)``: run the command, check its exit code.

    Every run also checks that no traceback reached the terminal and that the
    process did not abort (delta-rs/pyarrow teardown crashes exit with 134).
    """
    exe = _executable()

    def run(
        *args: str | os.PathLike[str],
        code: int | None = 0,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> Result:
        argv = tuple(os.fspath(a) for a in args)
        full_env = {k: v for k, v in os.environ.items() if k != "STATELAKE_STORAGE_OPTIONS"}
        full_env["NO_COLOR"] = "1"
        full_env.update(env or {})
        proc = subprocess.run(
            [exe, *argv],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=CLI_TIMEOUT,
            input=stdin,
            check=False,
        )
        result = Result(args=argv, code=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
        where = f"statelake {' '.join(argv)}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        assert proc.returncode not in (134, -6), f"the process aborted at exit: {where}"
        assert "Traceback" not in proc.stderr, f"a traceback reached the user: {where}"
        if code is not None:
            assert proc.returncode == code, f"exit code {proc.returncode}, expected {code}: {where}"
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("statelake: "), (
                f"an error must be one line on stderr: {where}"
            )
        return result

    return run


def build_store(
    uri: str | os.PathLike[str],
    *,
    epochs: int = 5,
    capacity: int = 4,
    unsealed: Iterable[int] = (),
    missing: Mapping[int, Iterable[int]] | None = None,
    layout: str = "card",
    payload: Callable[[int, int], bytes] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Partials for every vnode of epochs ``0..epochs-1``, all sealed except ``unsealed``.

    ``missing`` maps an epoch to vnodes left unwritten (list such epochs as unsealed).
    """
    make = payload or (lambda e, v: f"epoch {e} vnode {v}".encode())
    skip = set(unsealed)
    holes = {e: set(vs) for e, vs in (missing or {}).items()}
    backend = DeltaStateBackend(
        os.fspath(uri),
        instance_id="coordinator-1",
        vnode_capacity=capacity,
        layout=layout,
        storage_options=storage_options,
    )
    try:
        for epoch in range(epochs):
            vnodes = [v for v in range(capacity) if v not in holes.get(epoch, ())]
            backend.write_partials(epoch, 1, {v: make(epoch, v) for v in vnodes})
            if epoch not in skip:
                assert backend.epoch_complete(epoch, range(capacity))
    finally:
        backend.close()


def plant_rows(
    uri: str | os.PathLike[str], epoch: int, parts: Mapping[int, list[tuple[int, bytes]]]
) -> None:
    """Commit rows straight to the log, past the backend's idempotence and conflict checks.

    ``parts`` maps vnode -> [(assignment_version, payload), ...]; each row is its
    own data file, all in one commit (what a buggy or foreign writer leaves).
    """
    from statelake.delta._partials import new_partial

    backend = DeltaStateBackend(
        os.fspath(uri), instance_id="rogue-writer", vnode_capacity=None, create=False
    )
    try:
        files = []
        for vnode, rows in parts.items():
            for version, data in rows:
                part = new_partial(
                    epoch=epoch,
                    vnode=vnode,
                    assignment_version=version,
                    writer="rogue-writer",
                    payload=data,
                )
                files.append((backend._write_file([part]), [part]))
        backend._commit_files(files)
    finally:
        backend.close()


def append_marker(
    uri: str | os.PathLike[str],
    epoch: int,
    *,
    committer: str,
    vnodes: Iterable[int],
    assignment_version: int = 0,
) -> None:
    """Append a commit marker to the control table directly (no MERGE, no checks)."""
    from deltalake import write_deltalake

    from statelake.delta._control import COMMIT, Marker, marker_table

    marker = Marker(
        kind=COMMIT,
        epoch=epoch,
        committer=committer,
        assignment_version=assignment_version,
        updated_at=datetime.now(timezone.utc),
        vnodes=tuple(vnodes),
        token=f"planted-{committer}-{epoch}",
    )
    write_deltalake(f"{os.fspath(uri)}/control", marker_table([marker]), mode="append")


def data_file(uri: str | os.PathLike[str], epoch: int, vnode: int) -> Path:
    """The local data file holding the (first) partial of ``vnode`` at ``epoch``."""
    snap = load_snapshot(os.fspath(uri))
    row = snap.epoch_rows(epoch)[vnode][0]
    return Path(os.fspath(uri)) / "partials" / row.path


def tree(uri: str | os.PathLike[str]) -> dict[str, int]:
    """Every file under the store with its size: compares a store before and after."""
    root = Path(os.fspath(uri))
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def healthy_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Epochs 0-5 over 4 vnodes, all sealed except 5 (the newest, in flight)."""
    uri = str(tmp_path_factory.mktemp("cli") / "healthy")
    build_store(uri, epochs=6, unsealed=[5])
    return uri
