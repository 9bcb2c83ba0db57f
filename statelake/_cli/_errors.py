"""Exit codes of the ``statelake`` command and the error that carries one.

Scripts branch on these, so they are part of the command's contract:

=====  ==============================================================
code   meaning
=====  ==============================================================
0      success (verify: no error anomalies)
1      verify found error anomalies (or warnings, with --strict)
2      usage error: bad flag, bad --as-of, bad storage option, bad URI
3      not a statelake store (missing path, another Delta table, ...)
4      not found: the epoch or vnode is not in the store at that version
5      storage error: unreachable, permission denied, commit failed
6      corrupt state: missing data file or checksum mismatch on read
7      refused: the operation is unsafe without --force
70     internal error (a bug: set STATELAKE_DEBUG=1 for the traceback)
130    interrupted
=====  ==============================================================
"""

from __future__ import annotations

__all__ = [
    "EXIT_ANOMALIES",
    "EXIT_CORRUPT",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_A_STORE",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_STORAGE",
    "EXIT_USAGE",
    "CliError",
]

EXIT_OK = 0
EXIT_ANOMALIES = 1
EXIT_USAGE = 2
EXIT_NOT_A_STORE = 3
EXIT_NOT_FOUND = 4
EXIT_STORAGE = 5
EXIT_CORRUPT = 6
EXIT_REFUSED = 7
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A user-facing failure: one line on stderr and ``code`` as the exit status."""

    def __init__(self, message: str, code: int) -> None:
        self.code = code
        super().__init__(message)
