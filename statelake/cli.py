"""The ``statelake`` command: inspect, debug and maintain a store from a terminal.

``statelake --help`` lists the commands; ``statelake COMMAND --help`` their
options. The implementation lives in :mod:`statelake._cli`; heavy modules
(delta-rs, pyarrow, rich) are imported only by the command that needs them.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]


def main() -> None:
    """Console-script entry point: runs the command and exits with its code.

    The process ends with ``os._exit`` once stdout and stderr are flushed:
    native libraries (pyarrow's thread pools, delta-rs' runtime) tearing down
    during interpreter finalization have been seen to abort the process
    (exit code 134) after a successful command, and a script must be able to
    trust the exit code. The command holds nothing that needs ``atexit``.
    """
    from ._cli._app import main as run

    code = run()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away; the exit code still stands
        pass
    os._exit(code)


if __name__ == "__main__":
    main()
