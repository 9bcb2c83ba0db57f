"""User mistakes end in one clear line on stderr and a specific exit code, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statelake import DeltaStateBackend

from .conftest import Run


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["status", "{missing}"], 3, "the path does not exist"),
        (["status", "{store}/partials"], 3, "this is a Delta table, not a statelake store"),
        (["status", "{empty}"], 3, "no statelake store here"),
        (["status", "ftp://host/store"], 2, "unsupported store URI scheme 'ftp'"),
        (["show", "{store}", "--epoch", "99"], 4, "epoch 99 not found"),
        (["show", "{store}", "--epoch", "1", "--vnode", "9"], 2, "vnode 9 is out of range"),
        (["show", "{store}", "--epoch", "-1"], 2, "expected a non-negative integer"),
        (["show", "{store}", "--epoch", "1", "--raw-to", "x"], 2, "give --vnode too"),
        (["diff", "{store}", "--epoch", "1"], 2, "exactly two epochs"),
        (["diff", "{store}", "--epoch", "1", "--epoch", "42"], 4, "epoch 42 not found"),
        (["epochs", "{store}", "--as-of", "99"], 2, "has no version 99"),
        (["epochs", "{store}", "--as-of", "last tuesday"], 2, "ISO-8601 time"),
        (["epochs", "{store}", "--as-of", "2001-01-01"], 2, "has no version at 2001-01-01"),
        (["status", "{store}", "--storage-option", "novalue"], 2, "expects KEY=VALUE"),
        (["frobnicate", "{store}"], 2, "invalid choice"),
        (["status"], 2, "required: URI"),
        (["prune", "{store}"], 2, "--before"),
    ],
)
def test_user_mistake_is_one_line_and_a_specific_exit_code(
    statelake: Run, healthy_store: str, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    """Each mistake exits with its documented code and says what was wrong in one line."""
    (tmp_path / "empty").mkdir()
    fill = {
        "store": healthy_store,
        "missing": str(tmp_path / "nope"),
        "empty": str(tmp_path / "empty"),
    }
    result = statelake(*[a.format(**fill) for a in args], code=code)
    assert message in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "nope").exists()  # inspecting never creates a store


def test_json_mode_also_prints_the_error_as_json(statelake: Run, healthy_store: str) -> None:
    """With --json a failure also prints {"error": ...} on stdout for scripts."""
    result = statelake("show", healthy_store, "--epoch", "77", "--json", code=4)
    doc = json.loads(result.stdout)
    assert doc["error"]["exit_code"] == 4 and "epoch 77 not found" in doc["error"]["message"]


def test_bad_storage_options_environment_is_a_usage_error(
    statelake: Run, healthy_store: str
) -> None:
    """STATELAKE_STORAGE_OPTIONS that is not a JSON object is rejected with exit code 2."""
    bad = statelake("status", healthy_store, env={"STATELAKE_STORAGE_OPTIONS": "{nope"}, code=2)
    assert "not valid JSON" in bad.stderr
    wrong = statelake("status", healthy_store, env={"STATELAKE_STORAGE_OPTIONS": "[1]"}, code=2)
    assert "must be a JSON object" in wrong.stderr
    statelake("status", healthy_store, env={"STATELAKE_STORAGE_OPTIONS": "{}"})


def test_corrupt_payload_on_show_is_exit_code_6(statelake: Run, tmp_path: Path) -> None:
    """Reading a payload whose bytes no longer match its CRC-32 fails with exit code 6."""
    uri = tmp_path / "store"
    backend = DeltaStateBackend(str(uri), instance_id="c1", vnode_capacity=1)
    try:
        backend.write_partial(0, 0, 1, b"precious-state-bytes")
    finally:
        backend.close()
    (path,) = (uri / "partials").rglob("*.parquet")
    path.write_bytes(path.read_bytes().replace(b"precious", b"PRECIOUS"))
    statelake("show", uri, "--epoch", "0")  # metadata alone is still readable
    result = statelake("show", uri, "--epoch", "0", "--vnode", "0", "--hex", code=6)
    assert "checksum mismatch" in result.stderr


def test_unwritable_raw_target_is_a_storage_error(
    statelake: Run, healthy_store: str, tmp_path: Path
) -> None:
    """--raw-to into a folder that does not exist fails cleanly (exit 5), nothing half-written."""
    target = tmp_path / "no" / "such" / "dir" / "out.bin"
    result = statelake(
        "show", healthy_store, "--epoch", "1", "--vnode", "0", "--raw-to", target, code=5
    )
    assert "No such file or directory" in result.stderr
