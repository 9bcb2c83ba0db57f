"""Commands that change the store (fence, prune, vacuum) and the audit (verify).

The destructive ones are dry runs unless ``--yes``: they compute and print
exactly what they would do from a read-only snapshot, and only with
``--yes`` open the store through :class:`~statelake.DeltaStateBackend` (the
same compare-and-set MERGE and DELETE paths the library uses, so a command
racing live writers is as safe as the library itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._context import Context, parse_interval_hours
from ._errors import EXIT_ANOMALIES, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, CliError
from ._output import Cell, fmt_bytes, fmt_ranges, fmt_time

if TYPE_CHECKING:
    from ..audit import StoreSnapshot

__all__ = ["cmd_fence", "cmd_prune", "cmd_vacuum", "cmd_verify"]

_LISTED = 20  # paths shown in human output; --json lists them all


def _dry_run_hint(ctx: Context) -> None:
    ctx.out.line("dry run: nothing was changed; re-run with --yes to do it", "yellow")


# -- fence --------------------------------------------------------------------------
def cmd_fence(ctx: Context) -> int:
    args = ctx.args
    snap = ctx.snapshot()
    current = snap.authoritative_version
    fence = snap.fence
    doc: dict[str, Any] = {
        "uri": snap.uri,
        "authoritative_version": current,
        "set_by": fence.committer if fence else None,
        "set_at": fence.updated_at if fence else None,
    }
    out = ctx.out
    target = args.raise_to
    if target is None:
        out.json(doc)
        if fence is None:
            out.line("authoritative version 0: the fence is disabled (never raised)")
        else:
            out.line(
                f"authoritative version {current} "
                f"(raised by {fence.committer} at {fmt_time(fence.updated_at)})"
            )
        return EXIT_OK
    doc.update({"raise_to": target, "dry_run": not args.yes, "changed": False})
    if target <= current:
        out.json(doc)
        out.line(
            f"authoritative version is already {current}: nothing to do "
            f"(the fence never goes down, so raising it to {target} is a no-op)"
        )
        return EXIT_OK
    plan = (
        f"raise the authoritative version from {current} to {target}: from then on writers "
        f"with an assignment version below {target} get StaleVersion, and epochs sealed "
        f"afterwards need partials written at version {target} or later"
    )
    if not args.yes:
        doc["plan"] = "would " + plan
        out.json(doc)
        out.line("would " + plan)
        _dry_run_hint(ctx)
        return EXIT_OK
    with ctx.backend() as backend:
        backend.set_authoritative_version(target)
        now = backend.authoritative_version()
        versions = backend.table_versions()
    doc.update({"changed": True, "authoritative_version": now, "versions": versions})
    out.json(doc)
    out.line(f"raised the authoritative version from {current} to {now}", "green")
    return EXIT_OK


# -- prune ----------------------------------------------------------------------------
def cmd_prune(ctx: Context) -> int:
    args = ctx.args
    before = args.before
    snap = ctx.snapshot()
    markers = [e for e in snap.sealed_epochs() if e < before]
    kept = [e for e in snap.sealed_epochs() if e >= before]
    epochs = [e for e in snap.partial_epochs() if e < before]
    files = [f for f in snap.files if int(f.partition.get("epoch") or 0) < before]
    rows = [r for e in epochs for rs in snap.epoch_rows(e).values() for r in rs]
    doc: dict[str, Any] = {
        "uri": snap.uri,
        "before": before,
        "dry_run": not args.yes,
        "changed": False,
        "commit_markers": markers,
        "partial_epochs": epochs,
        "partial_rows": len(rows),
        "files": len(files),
        "file_bytes": sum(f.size for f in files),
        "kept_sealed_epochs": kept,
    }
    out = ctx.out
    if not markers and not epochs:
        out.json(doc)
        out.line(f"nothing to prune: no epoch below {before}")
        return EXIT_OK
    latest = snap.latest_sealed()
    if latest is not None and not kept and not args.force:
        raise CliError(
            f"prune --before {before} would remove every sealed epoch (the latest is "
            f"{latest}): recovery would start from nothing. Use --before {latest} to keep "
            "the latest, or add --force",
            EXIT_REFUSED,
        )
    plan = (
        f"delete {len(markers)} commit marker(s) (epochs {fmt_ranges(markers)}) and "
        f"{len(rows)} partial row(s) in {len(files)} file(s), {fmt_bytes(doc['file_bytes'])}, "
        f"of epochs {fmt_ranges(epochs)}; keep sealed epochs {fmt_ranges(kept)}"
    )
    doc["plan"] = plan
    if not args.yes:
        out.json(doc)
        out.line("would " + plan)
        out.line(
            "the data files stay on storage (time travel keeps working) until "
            "`statelake vacuum` removes them after the retention period",
            "dim",
        )
        _dry_run_hint(ctx)
        return EXIT_OK
    with ctx.backend() as backend:
        backend.prune_before(before)
        versions = backend.table_versions()
    doc.update({"changed": True, "versions": versions})
    out.json(doc)
    out.line("pruned: " + plan, "green")
    out.line(f"now partials v{versions['partials']}, control v{versions['control']}", "dim")
    return EXIT_OK


# -- vacuum ----------------------------------------------------------------------------------
def cmd_vacuum(ctx: Context) -> int:
    args = ctx.args
    snap = ctx.snapshot()
    hours = args.retention_hours
    if hours is None:
        hours = parse_interval_hours(snap.configuration.get("delta.deletedFileRetentionDuration"))
        if hours is None:
            hours = 168.0
    if hours < 0:
        raise CliError(f"--retention-hours must be >= 0, got {hours:g}", EXIT_USAGE)
    with ctx.backend() as backend:
        doomed = backend.vacuum(retention_hours=hours, dry_run=True)
        sizes = _sizes(snap, doomed)
        doc: dict[str, Any] = {
            "uri": snap.uri,
            "retention_hours": hours,
            "dry_run": not args.yes,
            "changed": False,
            "files": doomed,
            "file_count": len(doomed),
            "file_bytes": sum(sizes.values()),
        }
        plan = (
            f"delete {len(doomed)} file(s), {fmt_bytes(doc['file_bytes'])}, that no current "
            f"version references and that were removed more than {hours:g} h ago; time "
            f"travel to versions older than {hours:g} h stops working"
        )
        doc["plan"] = plan
        out = ctx.out
        if not doomed:
            out.json(doc)
            out.line(f"nothing to vacuum with a retention of {hours:g} h")
            return EXIT_OK
        if args.yes:
            removed = backend.vacuum(retention_hours=hours, dry_run=False)
            doc.update({"changed": True, "files": removed, "file_count": len(removed)})
    out.json(doc)
    out.line(("vacuumed: " if args.yes else "would ") + plan, "green" if args.yes else None)
    for path in doc["files"][:_LISTED]:
        out.line(f"  {path}", "dim")
    if len(doc["files"]) > _LISTED:
        out.line(f"  ... and {len(doc['files']) - _LISTED} more (--json lists all)", "dim")
    if not args.yes:
        _dry_run_hint(ctx)
    return EXIT_OK


def _sizes(snap: StoreSnapshot, paths: list[str]) -> dict[str, int]:
    """Sizes of files about to be vacuumed (0 when they cannot be stat'ed)."""
    fs, base = snap.storage.filesystem()
    if not paths:
        return {}
    try:
        infos = fs.get_file_info([f"{base}/{p}" for p in paths])
    except OSError:
        return dict.fromkeys(paths, 0)
    return {p: int(i.size or 0) for p, i in zip(paths, infos, strict=True)}


# -- verify ---------------------------------------------------------------------------------
def cmd_verify(ctx: Context) -> int:
    from ..audit import audit_snapshot

    args = ctx.args
    snap = ctx.snapshot()
    with ctx.out.progress() as progress:
        report = audit_snapshot(snap, check_payloads=not args.no_payloads, progress=progress)
    failed = not report.ok or (args.strict and bool(report.anomalies))
    out = ctx.out
    out.json(report.to_dict())
    if report.anomalies:
        colour = {"error": "red", "warning": "yellow"}
        rows: list[list[Cell]] = [
            [
                (a.severity, colour[a.severity]),
                a.kind,
                "-" if a.epoch is None else str(a.epoch),
                "-" if a.vnode is None else str(a.vnode),
                a.detail,
            ]
            for a in report.anomalies
        ]
        out.table(["severity", "kind", "epoch", "vnode", "detail"], rows, right=(2, 3))
        out.line()
    what = (
        f"{report.sealed_epochs} sealed epoch(s), {report.partials} partial(s) in "
        f"{report.files} file(s), "
        + (
            "payloads not read (--no-payloads)"
            if args.no_payloads
            else f"{report.payloads_checked} payload(s) checked ({fmt_bytes(report.bytes_checked)})"
        )
    )
    if failed:
        out.line(
            f"FAILED: {len(report.errors)} error(s), {len(report.warnings)} warning(s); {what}",
            "red bold",
        )
        out.note(
            f"statelake: verify: {len(report.errors)} error(s), "
            f"{len(report.warnings)} warning(s) in {report.uri}"
        )
        return EXIT_ANOMALIES
    tail = f"; {len(report.warnings)} warning(s)" if report.warnings else ""
    out.line(f"OK: {what}{tail}", "green bold")
    return EXIT_OK
