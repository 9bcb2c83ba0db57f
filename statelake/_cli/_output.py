"""Rendering for the ``statelake`` command: aligned tables, colour, JSON, progress.

Human output goes to stdout as plain aligned columns, coloured only when
stdout is a terminal and ``NO_COLOR`` is unset (https://no-color.org), so
pipes and files get stable text. ``--json`` replaces it with one JSON
document. Progress bars go to stderr, only when stderr is a terminal, and
need ``rich`` (the ``cli`` extra); without it scans run silently.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import IO, Any

__all__ = [
    "Cell",
    "Output",
    "fmt_bytes",
    "fmt_ranges",
    "fmt_time",
    "hexdump",
    "to_jsonable",
]

_STYLES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "cyan": "36",
}

Cell = str | tuple[str, str]
"""A table cell: plain text, or ``(text, style)`` with a style name from ``_STYLES``."""


def _colour_wanted(stream: IO[str]) -> bool:
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Output:
    """Where a command's results go; one instance per run.

    ``json_mode`` makes :meth:`json` the only thing written to stdout;
    the human helpers (:meth:`line`, :meth:`table`, :meth:`fields`) become
    no-ops so commands can call both unconditionally.
    """

    def __init__(
        self, *, json_mode: bool, stdout: IO[str] | None = None, stderr: IO[str] | None = None
    ) -> None:
        self.json_mode = json_mode
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.colour = _colour_wanted(self.stdout)

    # -- text ------------------------------------------------------------------
    def style(self, text: str, style: str | None) -> str:
        if not self.colour or not style:
            return text
        codes = ";".join(_STYLES[s] for s in style.split())
        return f"\x1b[{codes}m{text}\x1b[0m"

    def line(self, text: str = "", style: str | None = None) -> None:
        if not self.json_mode:
            self.stdout.write(self.style(text, style) + "\n")

    def note(self, text: str) -> None:
        """A side remark on stderr (keeps stdout clean for data)."""
        self.stderr.write(text + "\n")

    def fields(self, pairs: Sequence[tuple[str, Cell]]) -> None:
        """``key  value`` lines with the keys aligned."""
        if self.json_mode or not pairs:
            return
        width = max(len(k) for k, _ in pairs)
        for key, value in pairs:
            text, style = (value, None) if isinstance(value, str) else value
            self.stdout.write(
                f"{self.style(key.ljust(width), 'bold')}  {self.style(text, style)}\n"
            )

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[Cell]],
        *,
        right: Sequence[int] = (),
        indent: int = 0,
    ) -> None:
        """An aligned table; columns whose index is in ``right`` are right-aligned."""
        if self.json_mode:
            return
        plain = [[c if isinstance(c, str) else c[0] for c in row] for row in rows]
        widths = [len(h) for h in headers]
        for row in plain:
            for i, text in enumerate(row):
                widths[i] = max(widths[i], len(text))
        pad = " " * indent

        def render(cells: Sequence[str], styles: Sequence[str | None]) -> str:
            parts = []
            for i, (text, style) in enumerate(zip(cells, styles, strict=True)):
                last = i == len(cells) - 1
                aligned = (
                    text.rjust(widths[i])
                    if i in right
                    else (text if last else text.ljust(widths[i]))
                )
                parts.append(self.style(aligned, style))
            return (pad + "  ".join(parts)).rstrip() + "\n"

        self.stdout.write(render(list(headers), ["bold"] * len(headers)))
        for cells, texts in zip(rows, plain, strict=True):
            styles = [None if isinstance(c, str) else c[1] for c in cells]
            self.stdout.write(render(texts, styles))

    # -- json ------------------------------------------------------------------
    def json(self, doc: Mapping[str, Any]) -> None:
        if self.json_mode:
            self.stdout.write(json.dumps(to_jsonable(doc), indent=2, sort_keys=False) + "\n")

    # -- progress ----------------------------------------------------------------
    @contextmanager
    def progress(self) -> Iterator[Any]:
        """A ``progress(phase, done, total)`` callback drawing bars on stderr, or None."""
        isatty = getattr(self.stderr, "isatty", None)
        if not (isatty and isatty()):
            yield None
            return
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )
        except ImportError:  # the cli extra is not installed: scan silently
            yield None
            return
        console = Console(file=self.stderr, no_color="NO_COLOR" in os.environ)
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        tasks: dict[str, Any] = {}

        def advance(phase: str, done: int, total: int) -> None:
            # Started on the first report: a command that scans nothing draws nothing.
            if not tasks:
                bar.start()
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done)

        try:
            yield advance
        finally:
            if tasks:
                bar.stop()


def to_jsonable(value: Any) -> Any:
    """Datetimes as ISO-8601 UTC strings, tuples as lists, bytes as hex."""
    if isinstance(value, datetime):
        return fmt_time(value, iso=True)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def fmt_time(value: datetime | None, *, iso: bool = False, ms: bool = False) -> str:
    """UTC for people (``2026-11-21 13:34:10Z``, ``ms`` adds ``.123``); full ISO for JSON."""
    if value is None:
        return "-"
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    value = value.astimezone(timezone.utc)
    if iso:
        return value.isoformat().replace("+00:00", "Z")
    if ms:
        return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    return value.strftime("%Y-%m-%d %H:%M:%SZ")


def fmt_bytes(n: int) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 MiB``..."""
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit}"


def fmt_ranges(values: Sequence[int], *, limit: int = 8) -> str:
    """``0-3, 7, 9-12``; at most ``limit`` runs, then ``(+N more)``."""
    if not values:
        return "none"
    ordered = sorted(set(values))
    runs: list[tuple[int, int]] = []
    for v in ordered:
        if runs and v == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    more = len(runs) - limit
    return ", ".join(text) + (f" (+{more} more runs)" if more > 0 else "")


def hexdump(data: bytes, *, width: int = 16) -> list[str]:
    """``xxd``-style lines: offset, hex bytes, printable ASCII."""
    lines = []
    for off in range(0, len(data), width):
        chunk = data[off : off + width]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes.ljust(width * 3 - 1)}  |{text}|")
    return lines
