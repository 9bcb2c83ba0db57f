"""Argument parsing, dispatch and error handling of the ``statelake`` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn

from ._context import Context, as_of_arg, non_negative_int
from ._errors import (
    EXIT_CORRUPT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NOT_A_STORE,
    EXIT_STORAGE,
    EXIT_USAGE,
    CliError,
)
from ._errors import __doc__ as _EXIT_DOC
from ._output import Output

__all__ = ["build_parser", "main"]

_DESCRIPTION = """\
Inspect, debug and maintain a statelake store (the 'partials' and 'control'
Delta tables under one root: a local path, s3://, gs:// or az://).

Storage options: --storage-option KEY=VALUE (repeatable), the
STATELAKE_STORAGE_OPTIONS environment variable (a JSON object), and for s3://
the standard AWS_* variables (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ...).
Flags win over STATELAKE_STORAGE_OPTIONS, which wins over AWS_*.
"""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)


def _common() -> _Parser:
    p = _Parser(add_help=False)
    p.add_argument("uri", metavar="URI", help="store root: a local path, s3://, gs:// or az://")
    p.add_argument(
        "--storage-option",
        "-o",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="storage option for delta-rs and the file layer (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    return p


def _writer() -> _Parser:
    p = _Parser(add_help=False)
    p.add_argument("--yes", action="store_true", help="do it (default: dry run, change nothing)")
    p.add_argument(
        "--instance-id",
        metavar="ID",
        help="identity recorded as the committer (default: statelake-cli@HOST:PID)",
    )
    return p


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(
        prog="statelake",
        description=_DESCRIPTION,
        epilog=_exit_codes_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"statelake {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    common = [_common()]
    writer = [_common(), _writer()]

    sub.add_parser(
        "status",
        parents=common,
        help="versions, sealed epochs, fence, sizes and health warnings",
        description="Summary of the store and quick health checks (no payload is read).",
    )

    p = sub.add_parser(
        "epochs",
        parents=common,
        help="sealed epochs with committer, time and vnode coverage",
        description="Sealed epochs with committer, time and vnode coverage.",
    )
    p.add_argument(
        "--as-of",
        type=as_of_arg,
        metavar="VERSION|TIME",
        help="a control-table version (partials read as of its commit time) or an ISO-8601 time",
    )
    p.add_argument("--all", action="store_true", help="include epochs that were never sealed")

    p = sub.add_parser(
        "show",
        parents=common,
        help="partials of one epoch: metadata, and the bytes on request",
        description=(
            "Partials of one epoch: size, writer, assignment version, time; the effective "
            "payload as a hex dump, raw into a file, or decoded."
        ),
    )
    p.add_argument("--epoch", type=non_negative_int, required=True, metavar="N")
    p.add_argument("--vnode", type=non_negative_int, metavar="V", help="only this vnode")
    p.add_argument(
        "--as-of",
        type=as_of_arg,
        metavar="VERSION|TIME",
        help="a partials-table version (control read as of its commit time) or an ISO-8601 time",
    )
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--hex", action="store_true", help="hex dump of the effective payload(s)")
    shape.add_argument(
        "--raw-to",
        metavar="FILE",
        help="write the raw payload to FILE ('-' for stdout); needs --vnode",
    )
    shape.add_argument(
        "--decode",
        metavar="CODEC",
        choices=["auto", "utf8", "json", "gzip", "zlib", "zstd", "lz4", "base64"],
        help="decode the payload: auto, utf8, json, gzip, zlib, zstd, lz4, base64",
    )

    p = sub.add_parser(
        "diff",
        parents=common,
        help="what changed between two epochs, vnode by vnode",
        description="Compare the effective partials of two epochs vnode by vnode.",
    )
    p.add_argument(
        "--epoch",
        type=non_negative_int,
        action="append",
        required=True,
        metavar="N",
        help="give twice: --epoch A --epoch B",
    )
    p.add_argument("--all", action="store_true", help="list unchanged vnodes too")

    p = sub.add_parser(
        "history",
        parents=common,
        help="Delta history of both tables: operation, time, metrics",
        description="The Delta history of the store's tables, newest first.",
    )
    p.add_argument("--table", choices=["all", "partials", "control"], default="all")
    p.add_argument(
        "--limit",
        type=non_negative_int,
        default=20,
        metavar="N",
        help="latest N commits per table (default 20)",
    )

    p = sub.add_parser(
        "fence",
        parents=writer,
        help="show the authoritative version, or raise it (dry run unless --yes)",
        description="Show the fence (authoritative version); --raise-to raises it (never lowers).",
    )
    p.add_argument("--raise-to", type=non_negative_int, metavar="V")

    p = sub.add_parser(
        "prune",
        parents=writer,
        help="delete epochs below N (dry run unless --yes)",
        description=(
            "Delete commit markers and partials of epochs below N (never the fence). Refuses "
            "to remove every sealed epoch unless --force. Files stay until `vacuum`."
        ),
    )
    p.add_argument("--before", type=non_negative_int, required=True, metavar="N")
    p.add_argument("--force", action="store_true", help="allow removing every sealed epoch")

    p = sub.add_parser(
        "vacuum",
        parents=writer,
        help="delete unreferenced files past retention (dry run unless --yes)",
        description=(
            "Delete data files no current version references, removed more than the "
            "retention ago (default: the table's delta.deletedFileRetentionDuration)."
        ),
    )
    p.add_argument("--retention-hours", type=float, metavar="H")

    p = sub.add_parser(
        "verify",
        parents=common,
        help="audit every sealed epoch; exit 1 on anomalies",
        description=(
            "Audit the store: gap, stale, conflict, double_seal, corrupt (errors, exit 1) and "
            "duplicate, unsealed (warnings)."
        ),
    )
    p.add_argument("--no-payloads", action="store_true", help="only check that data files exist")
    p.add_argument("--strict", action="store_true", help="warnings fail too")
    return parser


def _exit_codes_epilog() -> str:
    doc = _EXIT_DOC or ""
    table = doc[doc.index("=====") :].rstrip()
    lines = [f"  {line}" for line in table.splitlines() if "=====" not in line]
    return "exit codes:\n" + "\n".join(lines)


def _commands() -> dict[str, Callable[[Context], int]]:
    from ._inspect import cmd_diff, cmd_epochs, cmd_history, cmd_show, cmd_status
    from ._maintain import cmd_fence, cmd_prune, cmd_vacuum, cmd_verify

    return {
        "status": cmd_status,
        "epochs": cmd_epochs,
        "show": cmd_show,
        "diff": cmd_diff,
        "history": cmd_history,
        "fence": cmd_fence,
        "prune": cmd_prune,
        "vacuum": cmd_vacuum,
        "verify": cmd_verify,
    }


def _exit_code(exc: BaseException) -> int | None:
    from ..errors import CorruptState, InvalidArgument, NotAStateStore, StateBackendError

    if isinstance(exc, CliError):
        return exc.code
    if isinstance(exc, NotAStateStore):
        return EXIT_NOT_A_STORE
    if isinstance(exc, InvalidArgument):
        return EXIT_USAGE
    if isinstance(exc, CorruptState):
        return EXIT_CORRUPT
    if isinstance(exc, StateBackendError):
        return EXIT_STORAGE
    if isinstance(exc, OSError):  # --raw-to FILE, a local path we cannot read
        return EXIT_STORAGE
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code (see ``statelake --help``)."""
    json_mode = "--json" in (sys.argv[1:] if argv is None else argv)
    out = Output(json_mode=json_mode)
    try:
        args = build_parser().parse_args(argv)
        out = Output(json_mode=args.json)
        return _commands()[args.command](Context(args=args, out=out))
    except KeyboardInterrupt:
        out.note("statelake: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `statelake history | head`: the reader left; not an error worth a message.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        code = _exit_code(exc)
        message = " ".join(str(exc).split()) or type(exc).__name__
        if code is None:
            code = EXIT_INTERNAL
            message = f"internal error ({type(exc).__name__}): {message}"
            if os.environ.get("STATELAKE_DEBUG"):
                traceback.print_exc()
            else:
                message += " [set STATELAKE_DEBUG=1 for the traceback]"
        out.note(f"statelake: error: {message}")
        if out.json_mode:
            doc = {"error": {"message": message, "type": type(exc).__name__, "exit_code": code}}
            sys.stdout.write(json.dumps(doc) + "\n")
        return code
