"""Where the command meets its environment: object stores, terminals, process exit."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Run, build_store


@pytest.mark.s3
def test_storage_options_from_flags_json_env_and_aws_env(statelake: Run) -> None:
    """s3:// opens with options from --storage-option, STATELAKE_STORAGE_OPTIONS or AWS_*."""
    try:
        from tests.s3server import fresh_s3_store
    except ImportError as exc:  # pragma: no cover - harness missing
        pytest.skip(f"S3 test server harness unavailable: {exc}")
    uri, options = fresh_s3_store()
    build_store(uri, epochs=3, capacity=2, unsealed=[2], storage_options=options)
    flags = [f"--storage-option={k}={v}" for k, v in options.items()]
    doc = statelake("status", uri, *flags, "--json").json()
    assert doc["sealed"] == {"count": 2, "first": 0, "latest": 1}
    as_json = {"STATELAKE_STORAGE_OPTIONS": json.dumps(options)}
    assert statelake("epochs", uri, "--json", env=as_json).json()["epochs"][1]["epoch"] == 1
    aws = {k.upper(): v for k, v in options.items()}
    shown = statelake("show", uri, "--epoch", "1", "--vnode", "0", "--hex", "--json", env=aws)
    assert bytes.fromhex(shown.json()["partials"][0]["payload_hex"]) == b"epoch 1 vnode 0"
    statelake("verify", uri, env=as_json)
    # Flags win over the environment: a wrong endpoint flag makes the store unreachable.
    broken = statelake(
        "status", uri, "-o", "AWS_ENDPOINT_URL=http://127.0.0.1:9", env=as_json, code=None
    )
    assert broken.code in (3, 5)
    assert (
        "AWS_SECRET_ACCESS_KEY" not in broken.stderr
        and "statelake-test-secret" not in broken.stderr
    )


def _run_on_tty(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the command with stdout and stderr on a pseudo-terminal; (exit code, output)."""
    exe = str(Path(sys.executable).with_name("statelake"))
    leader, follower = pty.openpty()
    proc = subprocess.Popen([exe, *args], stdout=follower, stderr=follower, env=env, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return proc.wait(timeout=120), b"".join(chunks).decode(errors="replace")


def test_colour_only_on_a_terminal_without_no_color(statelake: Run, healthy_store: str) -> None:
    """ANSI colour appears on a terminal, never in a pipe, and NO_COLOR turns it off."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm-256color"
    code, text = _run_on_tty(["epochs", healthy_store], env)
    assert code == 0 and "\x1b[" in text and "coordinator-1" in text
    code, text = _run_on_tty(["epochs", healthy_store], {**env, "NO_COLOR": "1"})
    assert code == 0 and "\x1b[" not in text
    piped = subprocess.run(
        [str(Path(sys.executable).with_name("statelake")), "epochs", healthy_store],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert piped.returncode == 0 and "\x1b[" not in piped.stdout


def test_progress_bar_draws_on_a_terminal_during_verify(tmp_path: Path) -> None:
    """verify draws a progress bar on a terminal's stderr while it reads payloads."""
    uri = tmp_path / "store"
    build_store(uri, epochs=8, capacity=8)
    env = {**os.environ, "TERM": "xterm-256color", "NO_COLOR": "1"}
    code, text = _run_on_tty(["verify", str(uri)], env)
    assert code == 0 and "checking payloads" in text and "OK:" in text


def test_interpreter_teardown_after_a_command_exits_cleanly(healthy_store: str) -> None:
    """Without the console script's os._exit, full interpreter teardown still exits 0."""
    script = (
        "import sys; from statelake._cli._app import main; "
        f"sys.exit(main(['verify', {healthy_store!r}]) or main(['show', {healthy_store!r}, "
        "'--epoch', '2', '--hex']))"
    )
    for _ in range(8):
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
