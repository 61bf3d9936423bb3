"""The ``chipotle`` command's entry point (``[project.scripts]`` in ``pyproject.toml``).

`main` imports `chipotle.cli` (Amaranth, numpy: about 0.3 s) only once it can catch Ctrl-C,
so an interrupt during those imports ends the command as one during the run does: the line
``chipotle: interrupted`` and exit status 130, not a ``KeyboardInterrupt`` traceback
(session 39's fresh user, interrupting ``make sim`` within its first 0.3 s).
"""

from __future__ import annotations

import signal
import sys

__all__ = ["main"]


def main() -> int:
    """Run ``chipotle`` with ``sys.argv[1:]`` (`chipotle.cli.main`); return the exit code."""
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        # a second interrupt (``timeout -s INT`` signals the command and then its process
        # group) is not to break the report
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.stderr.write("\nchipotle: interrupted\n")
        return 130
    return cli_main()
