"""verify and statelake.audit: every anomaly kind is found, named and sets the exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from statelake.audit import ERROR_KINDS, KINDS, WARNING_KINDS, audit

from .conftest import Run, append_marker, build_store, data_file, plant_rows


def test_kinds_are_the_shared_vocabulary_split_into_errors_and_warnings() -> None:
    """KINDS is the vocabulary shared with the Spark audit job; errors and warnings partition it."""
    assert set(KINDS) == {
        "gap",
        "stale",
        "conflict",
        "duplicate",
        "double_seal",
        "unsealed",
        "corrupt",
    }
    assert {"gap", "stale", "conflict", "double_seal", "corrupt"} == ERROR_KINDS
    assert set(KINDS) == ERROR_KINDS | WARNING_KINDS and not ERROR_KINDS & WARNING_KINDS


def test_verify_passes_a_healthy_store(statelake: Run, healthy_store: str) -> None:
    """A store written only through the backend verifies clean with exit code 0."""
    out = statelake("verify", healthy_store).stdout
    assert out.startswith("OK: 5 sealed epoch(s), 24 partial(s) in 24 file(s), 24 payload(s)")
    doc = statelake("verify", healthy_store, "--json").json()
    assert (
        doc["ok"] is True and doc["anomalies"] == [] and doc["examined"]["payloads_checked"] == 24
    )
    assert audit(healthy_store).ok


@pytest.fixture(scope="module")
def broken_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One planted anomaly of every kind, each at its own epoch (epochs 0-9, capacity 4)."""
    uri = tmp_path_factory.mktemp("cli") / "broken"
    build_store(uri, epochs=10, unsealed=[1, 2, 3, 4, 9], missing={2: [3]})
    # epoch 1: unsealed, older than the latest sealed epoch (8) -> warning
    # epoch 2: sealed by a marker listing vnode 3, which was never written
    append_marker(uri, 2, committer="coordinator-1", vnodes=[0, 1, 2, 3])
    # epoch 3: the marker says the fence was 2 when sealed, the partials are at version 1
    append_marker(uri, 3, committer="coordinator-1", vnodes=[0, 1, 2, 3], assignment_version=2)
    # epoch 4: two different payloads at the same (epoch, vnode, version), and a duplicate
    plant_rows(uri, 4, {1: [(1, b"other bytes")], 2: [(1, b"epoch 4 vnode 2")]})
    append_marker(uri, 4, committer="coordinator-1", vnodes=[0, 1, 2, 3])
    # epoch 5: a second commit marker by another coordinator (split brain reached the table)
    append_marker(uri, 5, committer="coordinator-2", vnodes=[0, 1, 2, 3])
    # epoch 6: a data file deleted from storage; epoch 7: a payload overwritten in place
    data_file(uri, 6, 2).unlink()
    bad = data_file(uri, 7, 1)
    bad.write_bytes(bad.read_bytes().replace(b"epoch 7 vnode 1", b"epoch 7 vnode X"))
    return uri


def test_audit_finds_every_planted_anomaly_at_its_epoch(broken_store: Path) -> None:
    """gap, stale, conflict, duplicate, double_seal, unsealed, corrupt: each found where planted."""
    report = audit(str(broken_store))
    found = {(a.kind, a.epoch, a.vnode) for a in report.anomalies}
    assert found == {
        ("unsealed", 1, None),
        ("gap", 2, 3),
        ("stale", 3, 0),
        ("stale", 3, 1),
        ("stale", 3, 2),
        ("stale", 3, 3),
        ("conflict", 4, 1),
        ("duplicate", 4, 2),
        ("double_seal", 5, None),
        ("corrupt", 6, 2),
        ("corrupt", 7, 1),
    }
    assert {a.kind for a in report.anomalies} == set(KINDS)
    assert not report.ok
    assert {a.kind for a in report.warnings} == {"unsealed", "duplicate"}


def test_verify_exits_1_and_names_each_anomaly(statelake: Run, broken_store: Path) -> None:
    """verify prints one line per anomaly and a FAILED summary, with exit code 1."""
    result = statelake("verify", broken_store, code=1)
    assert "FAILED:" in result.stdout
    for kind in KINDS:
        assert kind in result.stdout
    assert "checksum mismatch" in result.stdout and "missing" in result.stdout
    doc = statelake("verify", broken_store, "--json", code=1).json()
    assert doc["ok"] is False and doc["counts"]["double_seal"] == 1
    assert {a["severity"] for a in doc["anomalies"] if a["kind"] == "duplicate"} == {"warning"}


def test_verify_without_payloads_still_finds_missing_files(
    statelake: Run, broken_store: Path
) -> None:
    """--no-payloads skips reading payloads (the overwritten one passes) but checks files exist."""
    doc = statelake("verify", broken_store, "--no-payloads", "--json", code=1).json()
    corrupt = {(a["epoch"], a["vnode"]) for a in doc["anomalies"] if a["kind"] == "corrupt"}
    assert corrupt == {(6, 2)}
    assert doc["examined"]["payloads_checked"] == 0


def test_verify_checks_packed_stores_too(statelake: Run, tmp_path: Path) -> None:
    """The packed layout (many vnodes per file) audits clean, and a gap in it is found."""
    uri = tmp_path / "store"
    build_store(uri, epochs=3, capacity=3, layout="packed", unsealed=[2], missing={2: [1]})
    statelake("verify", uri)
    append_marker(uri, 2, committer="coordinator-1", vnodes=[0, 1, 2])
    doc = statelake("verify", uri, "--json", code=1).json()
    assert [(a["kind"], a["epoch"], a["vnode"]) for a in doc["anomalies"]] == [("gap", 2, 1)]


def test_warnings_alone_pass_unless_strict(statelake: Run, tmp_path: Path) -> None:
    """Only warnings (an abandoned epoch): exit 0, and exit 1 with --strict."""
    uri = tmp_path / "store"
    build_store(uri, epochs=3, capacity=2, unsealed=[1])
    out = statelake("verify", uri).stdout
    assert "unsealed" in out and "OK:" in out and "1 warning(s)" in out
    statelake("verify", uri, "--strict", code=1)
    assert audit(str(uri)).ok


def test_status_reports_double_seal_without_reading_payloads(
    statelake: Run, broken_store: Path
) -> None:
    """status' quick health check already names the double seal and the conflict (exit 0)."""
    doc = statelake("status", broken_store, "--json").json()
    kinds = {w["kind"] for w in doc["warnings"]}
    assert {"double_seal", "conflict", "unsealed", "stale"} <= kinds
