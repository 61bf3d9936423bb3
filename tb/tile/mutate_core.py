"""Mutation check of the tile-core bench: run cocotb_core tests on a mutated ``TileCore``.

A mutation replaces the n-th occurrence of a text in the source of one component's
``elaborate`` or of the controller's ``predecode`` function (in memory: nothing is edited),
the tile core is elaborated with it and the chosen cocotb tests run under Icarus on
``core_small`` (``--config``: another bench configuration); a useful bench fails.  Not
part of the regression (``docs/tile.md``, "The benches can fail").

Example::

    .venv/bin/python tb/tile/mutate_core.py KvStore \\
        "with m.Elif(cmd.pos >= capacity_r):" "with m.Elif(C(0, 1)):" --tests kv_append
"""

from __future__ import annotations

import argparse
import inspect
import sys
import textwrap
from pathlib import Path

TB = Path(__file__).resolve().parent
sys.path[:0] = [str(TB.parent), str(TB)]

from tbcore import CORE_CONFIGS  # noqa: E402

import chipotle.hw.tile.controller as controller  # noqa: E402
import chipotle.hw.tile.kvstore as kvstore  # noqa: E402
import chipotle.hw.tile.matrix as matrix  # noqa: E402
import chipotle.hw.tile.vector as vector  # noqa: E402
from chipotle.hw.tile.tile import TileCore  # noqa: E402
from chipotle.sim import generate_verilog, run_cocotb  # noqa: E402

COMPONENTS = {"KvStore": kvstore, "Controller": controller, "MatrixWriteback": matrix,
              "VectorUnit": vector, "predecode": controller}


def mutate(component: str, old: str, new: str, occurrence: int = 1) -> None:
    """Replace the `occurrence`-th `old` by `new` in ``component.elaborate`` (in memory), or
    in the function `component` of its module (``predecode``).

    Raises
    ------
    ValueError
        If the component is unknown or `old` does not occur that often.
    """
    if component not in COMPONENTS:
        raise ValueError(f"`component` must be one of {sorted(COMPONENTS)}, not {component!r}")
    module = COMPONENTS[component]
    cls = getattr(module, component)
    is_function = inspect.isfunction(cls)
    src = textwrap.dedent(inspect.getsource(cls if is_function else cls.elaborate))
    i = -1
    for _ in range(occurrence):
        i = src.find(old, i + 1)
        if i < 0:
            raise ValueError(f"`{old}` occurs fewer than {occurrence} times in "
                             f"{component}" + ("" if is_function else ".elaborate"))
    ns = dict(vars(module))
    exec(src[:i] + new + src[i + len(old):], ns)   # noqa: S102 (our own source)
    if is_function:
        setattr(module, component, ns[component])   # elaborate looks it up in the module
    else:
        cls.elaborate = ns["elaborate"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("component", choices=sorted(COMPONENTS))
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--occurrence", type=int, default=1)
    ap.add_argument("--tests", default="kv_append", help="comma-separated cocotb tests")
    ap.add_argument("--config", default="core_small", choices=sorted(CORE_CONFIGS),
                    help="the bench configuration (default: core_small; core_small_l3: the "
                         "SRAM read/write port at latency 3)")
    args = ap.parse_args(argv)
    mutate(args.component, args.old, args.new, args.occurrence)
    config = args.config
    run = run_cocotb(sim="icarus", verilog=generate_verilog(TileCore(CORE_CONFIGS[config]),
                                                            name="tile_core"),
                     toplevel="tile_core", test_module="cocotb_core", test_dir=TB,
                     testcase=args.tests.split(","), extra_env={"TILE_CONFIG": config},
                     check=False)
    print(f"passed {run.passed}, failed {run.failed}")
    return 0 if run.failed else 1     # success = the mutation was caught


if __name__ == "__main__":
    sys.exit(main())
