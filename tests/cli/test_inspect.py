"""The read-only commands against a real store: status, epochs, show, diff, history."""

from __future__ import annotations

from pathlib import Path

from statelake import DeltaStateBackend

from .conftest import Run, build_store, tree


def test_help_lists_every_command_and_the_exit_codes(statelake: Run) -> None:
    """`statelake --help` names all nine commands and documents the exit codes."""
    out = statelake("--help").stdout
    for command in (
        "status",
        "epochs",
        "show",
        "diff",
        "history",
        "fence",
        "prune",
        "vacuum",
        "verify",
    ):
        assert command in out
    assert "exit codes" in out and "not a statelake store" in out
    assert statelake("--version").stdout.startswith("statelake ")


def test_status_reports_versions_sealed_range_fence_and_sizes(
    statelake: Run, healthy_store: str
) -> None:
    """status shows table versions, the sealed range, the fence, layout, capacity and sizes."""
    out = statelake("status", healthy_store).stdout
    assert "partials v6, control v5" in out
    assert "5 epochs (0-4), latest 4" in out
    assert "card, vnode capacity 4" in out
    assert "authoritative version 0" in out
    assert "24 rows in 24 files over 6 epochs (0-5)" in out
    doc = statelake("status", healthy_store, "--json").json()
    assert doc["versions"] == {"partials": 6, "control": 5}
    assert doc["sealed"] == {"count": 5, "first": 0, "latest": 4}
    assert doc["partials"]["rows"] == 24 and doc["partials"]["epochs"] == 6
    assert doc["partials"]["payload_bytes"] == sum(
        len(f"epoch {e} vnode {v}") for e in range(6) for v in range(4)
    )
    assert doc["layout"] == "card" and doc["vnode_capacity"] == 4
    assert doc["retention"]["log_hours"] == 168
    assert doc["warnings"] == []


def test_status_warns_about_unsealed_epochs_stale_rows_and_retention(
    statelake: Run, tmp_path: Path
) -> None:
    """Health warnings: an abandoned epoch, superseded rows, and retention breaking time travel."""
    from statelake.delta import TableSettings

    uri = tmp_path / "store"
    backend = DeltaStateBackend(
        str(uri),
        instance_id="c1",
        vnode_capacity=2,
        settings=TableSettings(log_retention_hours=48, deleted_file_retention_hours=1),
    )
    try:
        for epoch in range(4):
            backend.write_partials(epoch, 1, {0: b"a", 1: b"b"})
        backend.write_partials(3, 2, {0: b"newer"})  # supersedes vnode 0 at epoch 3
        backend.epoch_complete(0, [0, 1])
        backend.epoch_complete(3, [0, 1])
    finally:
        backend.close()
    doc = statelake("status", uri, "--json").json()
    kinds = [w["kind"] for w in doc["warnings"]]
    assert kinds.count("unsealed") == 2  # epochs 1 and 2 are older than the sealed epoch 3
    assert "stale_rows" in kinds and "retention" in kinds
    out = statelake("status", uri).stdout
    assert out.count("older than the latest sealed epoch 3") == 2
    assert "1 superseded row(s)" in out
    assert "time travel to versions older than 1 h fails" in out


def test_epochs_lists_sealed_epochs_with_committer_and_coverage(
    statelake: Run, healthy_store: str
) -> None:
    """epochs lists each sealed epoch with committer, time, fence and vnode coverage."""
    out = statelake("epochs", healthy_store).stdout
    lines = [line for line in out.splitlines() if "coordinator-1" in line]
    assert len(lines) == 5 and all("4/4" in line for line in lines)
    doc = statelake("epochs", healthy_store, "--json").json()
    assert [e["epoch"] for e in doc["epochs"]] == [0, 1, 2, 3, 4]
    first = doc["epochs"][0]
    assert first["committer"] == "coordinator-1" and first["vnodes_present"] == 4
    assert first["sealed_at"].endswith("Z")
    everything = statelake("epochs", healthy_store, "--all", "--json").json()
    assert [(e["epoch"], e["sealed"]) for e in everything["epochs"]][-1] == (5, False)


def test_epochs_as_of_a_version_or_time_shows_the_past(statelake: Run, healthy_store: str) -> None:
    """--as-of VERSION reads the control table at that version; a time reads both tables then."""
    doc = statelake("epochs", healthy_store, "--as-of", "2", "--json").json()
    assert [e["epoch"] for e in doc["epochs"]] == [0, 1]
    assert doc["versions"]["control"] == 2
    # Partials are read as of the marker's commit: epoch 1 was fully written by then.
    assert doc["epochs"][1]["vnodes_present"] == 4
    now = statelake("epochs", healthy_store, "--as-of", "2999-01-01T00:00:00Z", "--json").json()
    assert len(now["epochs"]) == 5


def test_show_lists_partial_metadata_of_an_epoch(statelake: Run, healthy_store: str) -> None:
    """show --epoch lists every vnode's size, writer, assignment version, time and state."""
    doc = statelake("show", healthy_store, "--epoch", "3", "--json").json()
    assert [p["vnode"] for p in doc["partials"]] == [0, 1, 2, 3]
    p = doc["partials"][2]
    assert p["writer"] == "coordinator-1" and p["assignment_version"] == 1
    assert p["payload_size"] == len(b"epoch 3 vnode 2") and p["state"] == "effective"
    assert doc["markers"][0]["committer"] == "coordinator-1"
    out = statelake("show", healthy_store, "--epoch", "5").stdout
    assert "epoch 5: not sealed" in out and "coordinator-1" in out


def test_show_prints_bytes_as_hex_raw_or_decoded(
    statelake: Run, healthy_store: str, tmp_path: Path
) -> None:
    """--hex dumps the payload, --raw-to writes it byte for byte, --decode shows it as text."""
    hexed = statelake("show", healthy_store, "--epoch", "2", "--vnode", "1", "--hex").stdout
    assert "65 70 6f 63 68 20 32" in hexed and "|epoch 2 vnode 1|" in hexed
    target = tmp_path / "payload.bin"
    statelake("show", healthy_store, "--epoch", "2", "--vnode", "1", "--raw-to", target)
    assert target.read_bytes() == b"epoch 2 vnode 1"
    raw = statelake("show", healthy_store, "--epoch", "2", "--vnode", "1", "--raw-to", "-")
    assert raw.stdout == "epoch 2 vnode 1"
    decoded = statelake("show", healthy_store, "--epoch", "2", "--vnode", "1", "--decode", "utf8")
    assert "decoded as utf8" in decoded.stdout and "epoch 2 vnode 1" in decoded.stdout
    doc = statelake("show", healthy_store, "--epoch", "2", "--vnode", "1", "--hex", "--json").json()
    assert bytes.fromhex(doc["partials"][0]["payload_hex"]) == b"epoch 2 vnode 1"


def test_show_decodes_compressed_payloads_by_magic_number(statelake: Run, tmp_path: Path) -> None:
    """--decode auto recognises zstd and gzip payloads and shows the text inside."""
    import gzip

    import zstandard

    def payload(epoch: int, vnode: int) -> bytes:
        text = f'{{"epoch": {epoch}, "vnode": {vnode}}}'.encode()
        return zstandard.ZstdCompressor().compress(text) if vnode == 0 else gzip.compress(text)

    uri = tmp_path / "store"
    build_store(uri, epochs=1, capacity=2, payload=payload)
    doc = statelake("show", uri, "--epoch", "0", "--decode", "auto", "--json").json()
    assert [(p["codec"], p["decoded"]) for p in doc["partials"]] == [
        ("zstd", '{"epoch": 0, "vnode": 0}'),
        ("gzip", '{"epoch": 0, "vnode": 1}'),
    ]


def test_show_as_of_reads_an_epoch_pruned_since(statelake: Run, tmp_path: Path) -> None:
    """show --as-of an old partials version still shows an epoch that prune deleted since."""
    uri = tmp_path / "store"
    build_store(uri, epochs=3)
    statelake("prune", uri, "--before", "2", "--yes")
    statelake("show", uri, "--epoch", "0", code=4)
    doc = statelake(
        "show", uri, "--epoch", "0", "--as-of", "3", "--vnode", "3", "--hex", "--json"
    ).json()
    assert bytes.fromhex(doc["partials"][0]["payload_hex"]) == b"epoch 0 vnode 3"
    assert doc["markers"][0]["committer"] == "coordinator-1"


def test_diff_compares_two_epochs_vnode_by_vnode(statelake: Run, tmp_path: Path) -> None:
    """diff reports changed, unchanged, added and removed vnodes between two epochs."""
    uri = tmp_path / "store"
    backend = DeltaStateBackend(str(uri), instance_id="c1", vnode_capacity=4)
    try:
        backend.write_partials(1, 1, {0: b"same", 1: b"old", 2: b"gone"})
        backend.write_partials(2, 1, {0: b"same", 1: b"new!", 3: b"fresh"})
    finally:
        backend.close()
    doc = statelake("diff", uri, "--epoch", "1", "--epoch", "2", "--json").json()
    assert doc["counts"] == {"changed": 1, "same": 1, "added": 1, "removed": 1}
    status = {v["vnode"]: v["status"] for v in doc["vnodes"]}
    assert status == {0: "same", 1: "changed", 2: "removed", 3: "added"}
    out = statelake("diff", uri, "--epoch", "1", "--epoch", "2").stdout
    assert "1 changed, 1 same, 1 only in 2, 1 only in 1" in out
    assert "same" not in out.split("\n", 3)[-1]  # unchanged vnodes are listed only with --all


def test_history_shows_operations_of_both_tables_newest_first(
    statelake: Run, healthy_store: str
) -> None:
    """history lists WRITE and MERGE commits with versions, times and metrics, newest first."""
    doc = statelake("history", healthy_store, "--json").json()
    ops = {(h["table"], h["operation"]) for h in doc["history"]}
    assert ("partials", "WRITE") in ops and ("control", "MERGE") in ops
    times = [h["timestamp"] for h in doc["history"]]
    assert times == sorted(times, reverse=True)
    write = next(h for h in doc["history"] if h["operation"] == "WRITE")
    assert write["metrics"]["num_added_files"] == 4 and write["writer"] == "coordinator-1"
    out = statelake("history", healthy_store, "--table", "control", "--limit", "2").stdout
    assert out.count("MERGE") == 2 and "partials" not in out


def test_read_only_commands_never_change_the_store(statelake: Run, healthy_store: str) -> None:
    """status, epochs, show, diff, history and verify leave every file as it was."""
    before = tree(healthy_store)
    statelake("status", healthy_store)
    statelake("epochs", healthy_store, "--all")
    statelake("show", healthy_store, "--epoch", "1", "--hex")
    statelake("diff", healthy_store, "--epoch", "1", "--epoch", "2")
    statelake("history", healthy_store)
    statelake("verify", healthy_store)
    assert tree(healthy_store) == before
