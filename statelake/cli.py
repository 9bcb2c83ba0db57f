"""The ``statelake`` command: inspect, debug and maintain a store from a terminal.

``statelake --help`` lists the commands; ``statelake COMMAND --help`` their
options. The implementation lives in :mod:`statelake._cli`; heavy modules
(delta-rs, pyarrow, rich) are imported only by the command that needs them.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    """Console-script entry point: runs the command and exits with its code."""
    from ._cli._app import main as run

    sys.exit(run())


if __name__ == "__main__":
    main()
