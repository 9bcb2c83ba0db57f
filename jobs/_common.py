"""What every job shares: argument defaults, a progress display, the final summary."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

__all__ = [
    "DEFAULT_DATA_DIR",
    "Progress",
    "add_store_arguments",
    "print_rows",
    "print_summary",
    "storage_options",
]

DEFAULT_DATA_DIR = "./statelake-data"
"""Where the pipeline keeps its store and Spark checkpoint when no path is given."""


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store`` (default: the pipeline's store) and repeatable ``-o KEY=VALUE`` options."""
    parser.add_argument(
        "--store",
        default=os.path.join(DEFAULT_DATA_DIR, "store"),
        help="store root URI (default %(default)s, the pipeline's store)",
    )
    parser.add_argument(
        "-o",
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="storage option for object stores (repeatable; values never printed)",
    )


def storage_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``-o KEY=VALUE`` flags as a dict."""
    return dict(kv.split("=", 1) for kv in args.storage_option if "=" in kv)


class Progress:
    """Step-by-step progress lines on stderr: ``[  3.2s] step 2/4 vacuum: ...``.

    Plain lines (no cursor tricks), so the display reads the same in a
    terminal, a CI log and ``spark-submit`` output.
    """

    def __init__(self, total: int | None = None, *, stream: TextIO | None = None) -> None:
        self.total = total
        self.step = 0
        self.start = time.monotonic()
        self.stream = stream if stream is not None else sys.stderr

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def __call__(self, message: str, *, advance: bool = False) -> None:
        if advance:
            self.step += 1
        where = f" step {self.step}/{self.total}" if advance and self.total else ""
        print(f"[{self.elapsed():6.1f}s]{where} {message}", file=self.stream, flush=True)


def print_rows(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A small fixed-width table on stdout (query results, summaries)."""
    data = [["" if v is None else str(v) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in data:
        widths = [max(w, len(v)) for w, v in zip(widths, row, strict=False)]
    print(f"\n{title}")
    print("  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  " + "  ".join("-" * w for w in widths))
    for row in data:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)))
    if not data:
        print("  (no rows)")


def print_summary(title: str, facts: Mapping[str, Any]) -> None:
    """The closing summary of a job: one ``key: value`` per line."""
    width = max((len(k) for k in facts), default=0)
    print(f"\n== {title} ==")
    for key, value in facts.items():
        print(f"  {key.ljust(width)} : {value}")
    sys.stdout.flush()


def ensure_repo_on_path() -> None:
    """Under ``spark-submit jobs/x.py`` only ``jobs/`` is on sys.path: add the repo root."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
