"""fence, prune and vacuum: dry runs change nothing and say what they would do; --yes does it."""

from __future__ import annotations

from pathlib import Path

import pytest

from statelake import DeltaStateBackend, StaleVersion
from statelake.audit import load_snapshot

from .conftest import Run, build_store, tree


@pytest.fixture
def store(tmp_path: Path) -> Path:
    uri = tmp_path / "store"
    build_store(uri, epochs=5, unsealed=[2])
    return uri


def test_fence_shows_and_raises_the_authoritative_version_only_with_yes(
    statelake: Run, store: Path
) -> None:
    """fence --raise-to is a dry run until --yes; then writers below the fence are refused."""
    assert "authoritative version 0" in statelake("fence", store).stdout
    before = tree(store)
    dry = statelake("fence", store, "--raise-to", "7")
    assert "would raise the authoritative version from 0 to 7" in dry.stdout
    assert "dry run" in dry.stdout
    assert tree(store) == before
    doc = statelake("fence", store, "--raise-to", "7", "--yes", "--json").json()
    assert doc["changed"] is True and doc["authoritative_version"] == 7
    shown = statelake("fence", store, "--json").json()
    assert shown["authoritative_version"] == 7 and shown["set_by"].startswith("statelake-cli@")
    backend = DeltaStateBackend(str(store), instance_id="w", vnode_capacity=None, create=False)
    try:
        with pytest.raises(StaleVersion):
            backend.write_partial(0, 9, 6, b"late")
    finally:
        backend.close()


def test_fence_never_goes_down(statelake: Run, store: Path) -> None:
    """Raising the fence to a lower value is a no-op that says so, with or without --yes."""
    statelake("fence", store, "--raise-to", "5", "--yes", "--instance-id", "ops-alice")
    before = tree(store)
    out = statelake("fence", store, "--raise-to", "3", "--yes").stdout
    assert "already 5" in out and "never goes down" in out
    assert tree(store) == before
    assert "raised by ops-alice" in statelake("fence", store).stdout


def test_prune_dry_run_lists_what_goes_and_changes_nothing(statelake: Run, store: Path) -> None:
    """prune without --yes names the markers, rows and bytes it would delete; nothing changes."""
    before = tree(store)
    doc = statelake("prune", store, "--before", "3", "--json").json()
    assert doc["dry_run"] is True and doc["changed"] is False
    assert doc["commit_markers"] == [0, 1] and doc["partial_epochs"] == [0, 1, 2]
    assert doc["partial_rows"] == 12 and doc["files"] == 12
    assert doc["kept_sealed_epochs"] == [3, 4]
    out = statelake("prune", store, "--before", "3").stdout
    assert "would delete 2 commit marker(s) (epochs 0-1) and 12 partial row(s)" in out
    assert tree(store) == before


def test_prune_with_yes_deletes_epochs_below_and_keeps_the_fence(
    statelake: Run, store: Path
) -> None:
    """prune --yes deletes markers and partials below N; the fence and newer epochs stay."""
    statelake("fence", store, "--raise-to", "1", "--yes")
    doc = statelake("prune", store, "--before", "3", "--yes", "--json").json()
    assert doc["changed"] is True
    snap = load_snapshot(str(store))
    assert snap.sealed_epochs() == [3, 4] and snap.partial_epochs() == [3, 4]
    assert snap.authoritative_version == 1
    assert "nothing to prune" in statelake("prune", store, "--before", "3", "--yes").stdout


def test_prune_refuses_to_remove_every_sealed_epoch_without_force(
    statelake: Run, store: Path
) -> None:
    """Pruning past the latest sealed epoch exits 7 and changes nothing unless --force."""
    before = tree(store)
    result = statelake("prune", store, "--before", "9", "--yes", code=7)
    assert "would remove every sealed epoch" in result.stderr
    assert tree(store) == before
    statelake("prune", store, "--before", "9", "--yes", "--force")
    assert load_snapshot(str(store)).sealed_epochs() == []


def test_vacuum_dry_run_lists_files_and_yes_deletes_them(statelake: Run, store: Path) -> None:
    """After prune: default retention keeps files; retention 0 lists them, --yes deletes them."""
    statelake("prune", store, "--before", "3", "--yes")
    assert "nothing to vacuum with a retention of 168 h" in statelake("vacuum", store).stdout
    before = tree(store)
    doc = statelake("vacuum", store, "--retention-hours", "0", "--json").json()
    assert doc["dry_run"] is True and doc["file_count"] >= 12
    assert all((store / path).exists() for path in doc["files"])
    out = statelake("vacuum", store, "--retention-hours", "0").stdout
    assert f"would delete {doc['file_count']} file(s)" in out and "time travel" in out
    assert tree(store) == before
    done = statelake("vacuum", store, "--retention-hours", "0", "--yes", "--json").json()
    assert done["changed"] is True
    assert not any((store / path).exists() for path in doc["files"])
    statelake("verify", store)  # the live state is intact
    statelake("vacuum", store, "--retention-hours", "-1", code=2)
