"""Read-only commands: status, epochs, show, diff, history.

None of them writes to the store; they read both tables through
:func:`statelake.audit.load_snapshot` (files resolved through the Delta log,
Parquet read directly).
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
import zlib
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ._context import Context, parse_interval_hours
from ._errors import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CliError
from ._output import Cell, fmt_bytes, fmt_ranges, fmt_time, hexdump

if TYPE_CHECKING:
    from ..audit import StoreSnapshot
    from ..delta._control import Marker
    from ..delta._partials import PartialRow
    from ..delta._storage import Storage

__all__ = ["CODECS", "cmd_diff", "cmd_epochs", "cmd_history", "cmd_show", "cmd_status"]


# -- status ----------------------------------------------------------------------------
def cmd_status(ctx: Context) -> int:
    from ..audit import audit_snapshot

    snap = ctx.snapshot()
    sealed = snap.sealed_epochs()
    rows = list(snap.all_rows())
    epochs = snap.partial_epochs()
    health = [a.to_dict() for a in audit_snapshot(snap, check_files=False).anomalies]
    health += _stale_rows(snap) + _retention(snap)
    retention = {
        "log_hours": parse_interval_hours(snap.configuration.get("delta.logRetentionDuration")),
        "deleted_file_hours": parse_interval_hours(
            snap.configuration.get("delta.deletedFileRetentionDuration")
        ),
        "checkpoint_interval": snap.configuration.get("delta.checkpointInterval"),
    }
    payload_bytes = sum(r.payload_size for r in rows)
    file_bytes = sum(e.size for e in snap.files)
    doc = {
        "uri": snap.uri,
        "layout": snap.layout,
        "vnode_capacity": snap.vnode_capacity,
        "versions": {"partials": snap.partials_version, "control": snap.control_version},
        "authoritative_version": snap.authoritative_version,
        "sealed": {
            "count": len(sealed),
            "first": sealed[0] if sealed else None,
            "latest": sealed[-1] if sealed else None,
        },
        "partials": {
            "rows": len(rows),
            "files": len(snap.files),
            "epochs": len(epochs),
            "first_epoch": epochs[0] if epochs else None,
            "last_epoch": epochs[-1] if epochs else None,
            "payload_bytes": payload_bytes,
            "file_bytes": file_bytes,
        },
        "retention": retention,
        "warnings": health,
    }
    out = ctx.out
    out.json(doc)
    fence = snap.authoritative_version
    out.fields(
        [
            ("store", snap.uri),
            ("layout", f"{snap.layout}, vnode capacity {snap.vnode_capacity}"),
            ("tables", f"partials v{snap.partials_version}, control v{snap.control_version}"),
            (
                "fence",
                f"authoritative version {fence}" + ("" if fence else " (disabled: never raised)"),
            ),
            (
                "sealed",
                (
                    f"{len(sealed)} epochs ({fmt_ranges(sealed)}), latest {sealed[-1]}",
                    "green",
                )
                if sealed
                else ("no sealed epoch", "yellow"),
            ),
            (
                "partials",
                f"{len(rows)} rows in {len(snap.files)} files over {len(epochs)} epochs"
                + (f" ({fmt_ranges(epochs)})" if epochs else "")
                + f", {fmt_bytes(payload_bytes)} payload, {fmt_bytes(file_bytes)} on storage",
            ),
            ("retention", _retention_text(retention)),
        ]
    )
    if health:
        out.line()
        out.line(f"health: {len(health)} finding(s)", "bold")
        out.table(
            ["severity", "kind", "epoch", "vnode", "detail"],
            [_health_row(h) for h in health],
        )
        out.line()
        out.line("run `statelake verify` for the full audit (it also reads every payload)", "dim")
    else:
        out.line()
        out.line("health: no findings (payloads not read; `statelake verify` reads them)", "green")
    return EXIT_OK


def _health_row(h: dict[str, Any]) -> list[Cell]:
    colour = "red" if h["severity"] == "error" else "yellow"
    return [
        (str(h["severity"]), colour),
        str(h["kind"]),
        "-" if h.get("epoch") is None else str(h["epoch"]),
        "-" if h.get("vnode") is None else str(h["vnode"]),
        str(h["detail"]),
    ]


def _retention_text(r: dict[str, Any]) -> str:
    def hours(v: float | None) -> str:
        return "?" if v is None else f"{v:g} h"

    return (
        f"log {hours(r['log_hours'])}, deleted files {hours(r['deleted_file_hours'])}, "
        f"checkpoint every {r['checkpoint_interval'] or '?'} commits"
    )


def _stale_rows(snap: StoreSnapshot) -> list[dict[str, Any]]:
    """Rows reads ignore: superseded by a newer assignment version, or below the fence."""
    superseded = 0
    fenced: set[int] = set()
    fenced_rows = 0
    latest = snap.latest_sealed()
    fence = snap.authoritative_version
    for epoch, by_vnode in snap.rows.items():
        for rows in by_vnode.values():
            top = max(r.assignment_version for r in rows)
            superseded += sum(1 for r in rows if r.assignment_version < top)
            if epoch not in snap.markers and (latest is None or epoch > latest):
                low = [r for r in rows if r.assignment_version == top and top < fence]
                if low:
                    fenced.add(epoch)
                    fenced_rows += len(low)
    out: list[dict[str, Any]] = []
    if superseded:
        out.append(
            _finding(
                "stale_rows",
                f"{superseded} superseded row(s): a newer assignment version rewrote the same "
                "epoch and vnode; reads ignore them",
            )
        )
    if fenced_rows:
        out.append(
            _finding(
                "stale_rows",
                f"{fenced_rows} row(s) in unsealed epoch(s) {fmt_ranges(sorted(fenced))} are "
                f"below the fence {fence} (a deposed writer's): these epochs cannot be "
                "sealed until current writers rewrite them",
            )
        )
    return out


def _retention(snap: StoreSnapshot) -> list[dict[str, Any]]:
    log_h = parse_interval_hours(snap.configuration.get("delta.logRetentionDuration"))
    file_h = parse_interval_hours(snap.configuration.get("delta.deletedFileRetentionDuration"))
    out: list[dict[str, Any]] = []
    if log_h is not None and file_h is not None and file_h < log_h:
        out.append(
            _finding(
                "retention",
                f"deleted files are kept {file_h:g} h but the log keeps versions {log_h:g} h: "
                f"after a VACUUM, time travel to versions older than {file_h:g} h fails "
                "although the log still lists them",
            )
        )
    if file_h is not None and file_h < 1:
        out.append(
            _finding(
                "retention",
                "deleted-file retention is under one hour: a VACUUM can remove files a "
                "slow reader or a time-travel query is about to open",
            )
        )
    return out


def _finding(kind: str, detail: str) -> dict[str, Any]:
    return {"kind": kind, "severity": "warning", "epoch": None, "vnode": None, "detail": detail}


# -- epochs ------------------------------------------------------------------------------
def cmd_epochs(ctx: Context) -> int:
    snap = ctx.snapshot_as_of(ctx.args.as_of, table="control")
    epochs = set(snap.markers)
    if ctx.args.all:
        epochs |= set(snap.partial_epochs())
    items = [_epoch_summary(snap, e) for e in sorted(epochs)]
    out = ctx.out
    out.json(
        {
            "uri": snap.uri,
            "versions": {"partials": snap.partials_version, "control": snap.control_version},
            "as_of": ctx.args.as_of,
            "epochs": items,
        }
    )
    title = f"control v{snap.control_version}, partials v{snap.partials_version}"
    if ctx.args.as_of is not None:
        title += f" (as of {_as_of_text(ctx.args.as_of)})"
    out.line(title, "dim")
    if not items:
        out.line("no sealed epochs" + ("" if ctx.args.all else " (--all lists unsealed ones)"))
        return EXIT_OK
    rows: list[list[Cell]] = []
    for it in items:
        listed = it["vnodes_listed"]
        cover = f"{it['vnodes_present']}/{listed if listed is not None else '?'}"
        complete = listed is not None and it["vnodes_present"] >= listed
        rows.append(
            [
                str(it["epoch"]),
                ("sealed", "green") if it["sealed"] else ("unsealed", "yellow"),
                fmt_time(it["sealed_at"]),
                it["committer"] or "-",
                "-" if it["fence"] is None else str(it["fence"]),
                (cover, "green" if complete else "red") if it["sealed"] else cover,
                str(it["rows"]),
                fmt_bytes(it["payload_bytes"]),
                ("double seal", "red") if it["markers"] > 1 else "",
            ]
        )
    out.table(
        ["epoch", "state", "sealed at", "committer", "fence", "coverage", "rows", "payload", ""],
        rows,
        right=(0, 4, 6, 7),
    )
    return EXIT_OK


def _as_of_text(as_of: int | datetime) -> str:
    return f"version {as_of}" if isinstance(as_of, int) else fmt_time(as_of)


def _epoch_summary(snap: StoreSnapshot, epoch: int) -> dict[str, Any]:
    markers = snap.markers.get(epoch, ())
    m = markers[0] if markers else None
    by_vnode = snap.epoch_rows(epoch)
    listed = list(m.vnodes) if m is not None and m.vnodes is not None else None
    present = [v for v in (listed if listed is not None else by_vnode) if v in by_vnode]
    all_rows = [r for rs in by_vnode.values() for r in rs]
    return {
        "epoch": epoch,
        "sealed": m is not None,
        "sealed_at": m.updated_at if m else None,
        "committer": m.committer if m else None,
        "fence": m.assignment_version if m else None,
        "vnodes_listed": len(listed) if listed is not None else None,
        "vnodes_present": len(present),
        "missing_vnodes": sorted(set(listed) - set(by_vnode)) if listed is not None else [],
        "rows": len(all_rows),
        "payload_bytes": sum(r.payload_size for r in all_rows),
        "markers": len(markers),
    }


# -- show ----------------------------------------------------------------------------------
def _decode_zstd(data: bytes) -> bytes:
    import zstandard

    return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))


def _decode_lz4(data: bytes) -> bytes:
    import lz4.frame

    return bytes(lz4.frame.decompress(data))


CODECS: dict[str, Callable[[bytes], bytes]] = {
    "utf8": lambda b: b,
    "json": lambda b: json.dumps(json.loads(b), indent=2, sort_keys=True).encode(),
    "gzip": gzip.decompress,
    "zlib": zlib.decompress,
    "zstd": _decode_zstd,
    "lz4": _decode_lz4,
    "base64": base64.b64decode,
}
"""``--decode`` codecs: bytes in, bytes out (shown as text when they are UTF-8)."""

_MAGIC = (
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\x04\x22\x4d\x18", "lz4"),
    (b"\x1f\x8b", "gzip"),
)


def _guess_codec(data: bytes) -> str:
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    stripped = data.lstrip()
    if stripped[:1] in (b"{", b"["):
        return "json"
    return "utf8"


def decode(data: bytes, codec: str) -> tuple[str, bytes]:
    """``(codec used, decoded bytes)``; ``auto`` picks by magic number."""
    name = _guess_codec(data) if codec == "auto" else codec
    try:
        return name, CODECS[name](data)
    except ImportError as exc:
        raise CliError(
            f"codec {name!r} needs a package that is not installed: {exc}", EXIT_USAGE
        ) from exc
    except Exception as exc:
        raise CliError(f"payload does not decode as {name}: {exc}", EXIT_USAGE) from exc


def cmd_show(ctx: Context) -> int:
    args = ctx.args
    if args.raw_to is not None and args.vnode is None:
        raise CliError("--raw-to writes one payload: give --vnode too", EXIT_USAGE)
    if args.raw_to == "-" and args.json:
        raise CliError(
            "--raw-to - writes the payload to stdout; it cannot be combined with --json", EXIT_USAGE
        )
    snap = ctx.snapshot_as_of(args.as_of, table="partials")
    epoch = args.epoch
    by_vnode = snap.epoch_rows(epoch)
    markers = snap.markers.get(epoch, ())
    if not by_vnode and not markers:
        raise CliError(_epoch_not_found(snap, epoch), EXIT_NOT_FOUND)
    if args.vnode is not None:
        if not 0 <= args.vnode < snap.vnode_capacity:
            raise CliError(
                f"vnode {args.vnode} is out of range: "
                f"the store has vnodes 0..{snap.vnode_capacity - 1}",
                EXIT_USAGE,
            )
        if args.vnode not in by_vnode:
            raise CliError(
                f"no partial for vnode {args.vnode} at epoch {epoch} in partials "
                f"v{snap.partials_version}",
                EXIT_NOT_FOUND,
            )
        by_vnode = {args.vnode: by_vnode[args.vnode]}
    want_bytes = args.hex or args.decode is not None or args.raw_to is not None
    items: list[dict[str, Any]] = []
    payloads: dict[int, bytes] = {}
    with ctx.out.progress() as progress:
        details = snap.row_details([r for rs in by_vnode.values() for r in rs], progress=progress)
    for rs in by_vnode.values():
        items += [_row_doc(r, rs, details[(r.path, r.row)]) for r in rs]
    if want_bytes:
        for vnode, rs in by_vnode.items():
            top = _effective(rs)
            payloads[vnode] = snap.payload(top)
    if args.raw_to is not None:
        data = payloads[args.vnode]
        if args.raw_to == "-":
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            with open(args.raw_to, "wb") as f:
                f.write(data)
        ctx.out.note(
            f"wrote {len(data)} bytes (vnode {args.vnode}, epoch {epoch}) to {args.raw_to}"
        )
        if args.raw_to == "-":
            return EXIT_OK
    decoded: dict[int, tuple[str, bytes]] = {}
    if args.decode is not None:
        decoded = {v: decode(data, args.decode) for v, data in payloads.items()}
    for item in items:
        vnode = item["vnode"]
        if item["state"] != "effective" or vnode not in payloads:
            continue
        if args.hex:
            item["payload_hex"] = payloads[vnode].hex()
        if vnode in decoded:
            codec, value = decoded[vnode]
            item["codec"] = codec
            try:
                item["decoded"] = value.decode("utf-8")
            except UnicodeDecodeError:
                item["decoded_hex"] = value.hex()

    out = ctx.out
    out.json(
        {
            "uri": snap.uri,
            "epoch": epoch,
            "versions": {"partials": snap.partials_version, "control": snap.control_version},
            "as_of": args.as_of,
            "markers": [_marker_doc(m) for m in markers],
            "partials": items,
        }
    )
    if markers:
        m = markers[0]
        out.line(
            f"epoch {epoch}: sealed by {m.committer} at {fmt_time(m.updated_at)} "
            f"(fence {m.assignment_version}, {len(m.vnodes or ())} vnodes listed)",
            "green",
        )
        for extra in markers[1:]:
            out.line(
                f"  DOUBLE SEAL: also sealed by {extra.committer} at {fmt_time(extra.updated_at)}",
                "red",
            )
    else:
        out.line(f"epoch {epoch}: not sealed", "yellow")
    out.line(f"partials v{snap.partials_version}, control v{snap.control_version}", "dim")
    if not items:
        out.line("no partials stored for this epoch", "red")
        return EXIT_OK
    out.table(
        ["vnode", "version", "writer", "written at", "size", "crc32", "state", "file"],
        [
            [
                str(it["vnode"]),
                str(it["assignment_version"]),
                str(it["writer"]),
                fmt_time(it["written_at"]),
                fmt_bytes(it["payload_size"]),
                f"{it['payload_crc32']:08x}",
                (it["state"], {"effective": "green", "conflict": "red"}.get(it["state"], "dim")),
                it["path"],
            ]
            for it in items
        ],
        right=(0, 1, 4),
    )
    for vnode, data in payloads.items():
        if args.hex:
            out.line()
            out.line(f"vnode {vnode}: {len(data)} bytes", "bold")
            for text in hexdump(data):
                out.line(text)
        if vnode in decoded:
            codec, value = decoded[vnode]
            out.line()
            out.line(f"vnode {vnode}: decoded as {codec} ({len(value)} bytes)", "bold")
            try:
                out.line(value.decode("utf-8"))
            except UnicodeDecodeError:
                for text in hexdump(value):
                    out.line(text)
    return EXIT_OK


def _effective(rows: tuple[PartialRow, ...]) -> PartialRow:
    top = max(r.assignment_version for r in rows)
    return next(r for r in rows if r.assignment_version == top)


def _row_doc(
    r: PartialRow, same_key: tuple[PartialRow, ...], details: dict[str, Any]
) -> dict[str, Any]:
    top = max(x.assignment_version for x in same_key)
    if r.assignment_version < top:
        state = "superseded"
    elif (
        len({(x.payload_crc32, x.payload_size) for x in same_key if x.assignment_version == top})
        > 1
    ):
        state = "conflict"
    elif r is not _effective(same_key):
        state = "duplicate"
    else:
        state = "effective"
    return {
        "vnode": r.vnode,
        "assignment_version": r.assignment_version,
        "writer": details["writer"],
        "written_at": details["written_at"],
        "payload_size": r.payload_size,
        "payload_crc32": r.payload_crc32,
        "state": state,
        "path": r.path,
    }


def _marker_doc(m: Marker) -> dict[str, Any]:
    return {
        "committer": m.committer,
        "sealed_at": m.updated_at,
        "fence": m.assignment_version,
        "vnodes": list(m.vnodes) if m.vnodes is not None else None,
    }


def _epoch_not_found(snap: StoreSnapshot, epoch: int) -> str:
    epochs = sorted(set(snap.partial_epochs()) | set(snap.markers))
    held = f"it holds epochs {fmt_ranges(epochs)}" if epochs else "it holds no epochs"
    return (
        f"epoch {epoch} not found (partials v{snap.partials_version}, "
        f"control v{snap.control_version}): {held}"
    )


# -- diff ------------------------------------------------------------------------------------
def cmd_diff(ctx: Context) -> int:
    args = ctx.args
    if len(args.epoch) != 2:
        raise CliError("diff needs exactly two epochs: --epoch A --epoch B", EXIT_USAGE)
    a, b = args.epoch
    snap = ctx.snapshot()
    for e in (a, b):
        if not snap.epoch_rows(e) and e not in snap.markers:
            raise CliError(_epoch_not_found(snap, e), EXIT_NOT_FOUND)
    rows_a, rows_b = snap.epoch_rows(a), snap.epoch_rows(b)
    changes: list[dict[str, Any]] = []
    for vnode in sorted(set(rows_a) | set(rows_b)):
        ra = _effective(rows_a[vnode]) if vnode in rows_a else None
        rb = _effective(rows_b[vnode]) if vnode in rows_b else None
        if ra is None:
            status = "added"
        elif rb is None:
            status = "removed"
        elif (ra.payload_crc32, ra.payload_size) == (rb.payload_crc32, rb.payload_size):
            status = "same"
        else:
            status = "changed"
        changes.append(
            {
                "vnode": vnode,
                "status": status,
                "a": _side(ra),
                "b": _side(rb),
            }
        )
    counts = {
        s: sum(1 for c in changes if c["status"] == s)
        for s in ("changed", "same", "added", "removed")
    }
    seal = {e: _marker_doc(snap.markers[e][0]) if e in snap.markers else None for e in (a, b)}
    out = ctx.out
    out.json(
        {
            "uri": snap.uri,
            "a": a,
            "b": b,
            "versions": {"partials": snap.partials_version, "control": snap.control_version},
            "sealed": {str(e): seal[e] for e in (a, b)},
            "counts": counts,
            "vnodes": changes,
        }
    )
    for e in (a, b):
        m = seal[e]
        state = f"sealed by {m['committer']} at {fmt_time(m['sealed_at'])}" if m else "not sealed"
        out.line(f"epoch {e}: {state}", "green" if m else "yellow")
    out.line(
        f"{counts['changed']} changed, {counts['same']} same, {counts['added']} only in {b}, "
        f"{counts['removed']} only in {a}",
        "bold",
    )
    shown = [c for c in changes if args.all or c["status"] != "same"]
    if shown:
        colour = {"changed": "yellow", "added": "green", "removed": "red", "same": "dim"}
        out.table(
            [
                "vnode",
                "status",
                f"size@{a}",
                f"size@{b}",
                f"crc32@{a}",
                f"crc32@{b}",
                f"version@{a}",
                f"version@{b}",
            ],
            [
                [
                    str(c["vnode"]),
                    (c["status"], colour[c["status"]]),
                    _fmt_side(c["a"], "payload_size"),
                    _fmt_side(c["b"], "payload_size"),
                    _fmt_side(c["a"], "payload_crc32"),
                    _fmt_side(c["b"], "payload_crc32"),
                    _fmt_side(c["a"], "assignment_version"),
                    _fmt_side(c["b"], "assignment_version"),
                ]
                for c in shown
            ],
            right=(0, 2, 3, 6, 7),
        )
    return EXIT_OK


def _side(r: PartialRow | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "assignment_version": r.assignment_version,
        "payload_size": r.payload_size,
        "payload_crc32": r.payload_crc32,
    }


def _fmt_side(side: dict[str, Any] | None, key: str) -> str:
    if side is None:
        return "-"
    if key == "payload_crc32":
        return f"{side[key]:08x}"
    if key == "payload_size":
        return fmt_bytes(side[key])
    return str(side[key])


# -- history ------------------------------------------------------------------------------------
_TIMING = ("time_ms", "_ms", "duration")


def cmd_history(ctx: Context) -> int:
    from ..audit import open_storage
    from ..delta._log import open_table
    from ..delta._tables import validate

    args = ctx.args
    storage = open_storage(ctx.uri, storage_options=ctx.options)
    tables = ["partials", "control"] if args.table == "all" else [args.table]
    entries: list[dict[str, Any]] = []
    for table in tables:
        dt = open_table(storage.uri(table), storage.options)
        validate(dt, table, storage.uri(table))
        for h in dt.history(args.limit):
            version = int(h.get("version", -1))
            metrics = {
                k: v
                for k, v in (h.get("operationMetrics") or {}).items()
                if isinstance(v, int) and not any(t in k for t in _TIMING)
            }
            if not metrics:
                metrics = _log_metrics(storage, table, version)
            entries.append(
                {
                    "table": table,
                    "version": version,
                    "timestamp": datetime.fromtimestamp(
                        int(h.get("timestamp") or 0) / 1000, tz=timezone.utc
                    ),
                    "operation": h.get("operation"),
                    "writer": h.get("statelake.writer"),
                    "parameters": h.get("operationParameters") or {},
                    "metrics": metrics,
                }
            )
    entries.sort(key=lambda e: (e["timestamp"], e["table"], e["version"]), reverse=True)
    out = ctx.out
    out.json({"uri": storage.root, "history": entries})
    out.table(
        ["time", "table", "version", "operation", "writer", "metrics"],
        [
            [
                fmt_time(e["timestamp"], ms=True),
                e["table"],
                str(e["version"]),
                (str(e["operation"]), "cyan"),
                e["writer"] or "-",
                _metrics_text(e["operation"], e["parameters"], e["metrics"]),
            ]
            for e in entries
        ],
        right=(2,),
    )
    return EXIT_OK


def _log_metrics(storage: Storage, table: str, version: int) -> dict[str, int]:
    """Files and bytes added/removed by one commit, counted from its log entry."""
    raw = storage.read_if_exists(f"{table}/_delta_log/{version:020d}.json")
    if raw is None:
        return {}
    added = removed = added_bytes = rows = 0
    for line in raw.splitlines():
        try:
            action = json.loads(line)
        except ValueError:
            continue
        if "add" in action:
            added += 1
            added_bytes += int(action["add"].get("size") or 0)
            stats = action["add"].get("stats")
            if stats:
                rows += int(json.loads(stats).get("numRecords") or 0)
        elif "remove" in action:
            removed += 1
    out = {"num_added_files": added, "num_removed_files": removed}
    if added:
        out["num_added_bytes"] = added_bytes
        out["num_added_rows"] = rows
    return out


_SHORT = {
    "num_added_files": "+files",
    "num_removed_files": "-files",
    "num_added_rows": "+rows",
    "num_target_rows_inserted": "inserted",
    "num_target_rows_updated": "updated",
    "num_target_rows_deleted": "deleted",
    "num_target_files_added": "+files",
    "num_target_files_removed": "-files",
    "num_deleted_rows": "deleted",
    "num_copied_rows": "copied",
    "numDeletedFiles": "files deleted",
    "numVacuumedDirectories": "dirs vacuumed",
    "numFilesToDelete": "files to delete",
}
_NOISE = ("num_source_rows", "num_output_rows", "num_target_files_scanned", "skipped")


def _metrics_text(operation: Any, params: dict[str, Any], metrics: dict[str, int]) -> str:
    """The metrics worth a glance, short: ``inserted 1, +files 1, where ...``."""
    parts = []
    for key, value in metrics.items():
        if key in ("num_added_bytes", "sizeOfDataToDelete"):
            parts.append(f"+{fmt_bytes(value)}" if key == "num_added_bytes" else fmt_bytes(value))
        elif value and not any(n in key for n in _NOISE):
            parts.append(f"{_SHORT.get(key, key)} {value}")
    predicate = params.get("predicate")
    if predicate and operation != "WRITE":
        parts.append(f"where {predicate}")
    return ", ".join(parts) or "-"
