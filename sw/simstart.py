"""The simulator's first start-up hook: Ctrl-C ends a simulator process quietly.

`quiet_interrupt` runs inside the simulator (Verilator's model or Icarus's ``vvp``) as the
first of its embedded Python's entry points (``$PYGPI_USERS``,
`chipotle.sim.chiprun.PYGPI_USERS`), before cocotb is imported.  It lives in a module of its
own that imports only `os` and `signal`, so that it is installed about 1 ms after the
interpreter's own start-up instead of the 38 ms it took to import ``chipotle.sim.chiprun``
(``python -X importtime``): a Ctrl-C in that window printed the embedded Python's
``KeyboardInterrupt`` traceback under the host command's ``chipotle: interrupted`` (session
40's fresh user: 3 of 20 interrupts about 2 s into ``make sim``).
"""

from __future__ import annotations

import os
import signal

__all__ = ["quiet_interrupt"]


def quiet_interrupt() -> None:
    """Make SIGINT end this process at once and quietly (``os._exit(130)``, nothing printed).

    A SIGINT the process inherited as ignored stays ignored: a job started in the
    background of a non-interactive shell ignores Ctrl-C, and so then does its simulator
    (before, the simulator ended with status 130 while the host command, ignoring the
    signal, reported a failed simulation with a traceback).
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    signal.signal(signal.SIGINT, lambda *_: os._exit(130))
