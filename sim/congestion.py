"""Where a nextpnr router2 run finds congestion, by module, and where the placement put the logic.

Usage (from the top of the checkout)::

    .venv/bin/python -m chipotle.sim.congestion build/fpga/s12/r2/hm_congestion_by_net_2.csv \\
        --placed build/fpga/s12/r2/placed.json

Reads router2's ``--router2-heatmap PREFIX`` file ``PREFIX_congestion_by_net_<iter>.csv``
(lines ``net name,overuse``) and prints the overuse summed by the chip module each net
belongs to (its name's path below ``tile_0_0`` / ``core``, or below ``uart_chip``) and the
worst nets; with ``--placed`` (a design nextpnr wrote with ``--write`` after placement) also
the cell pins on each of the 3 worst nets (the driver's included: fan-out + 1) and the
flip-flops and LUT cells placed in each band of 16 device columns and of 16 device rows
(the ``X`` and ``Y`` of each cell's ``NEXTPNR_BEL``; on the LFE5U-85F the ``ulx3s`` chip's
block RAMs and IO reach X 120 and Y 89).  The figures of ``docs/fpga.md``, "Session 12"
and "Session 13".

Members
-------
by_module, bands
    The two tallies.
"""

from __future__ import annotations

import argparse
import collections
import re

from .paths import module_problem, read_input, read_json_input

__all__ = ["bands", "by_module", "main", "read_by_net", "check_placed"]

#: A line of router2's congestion-by-net file: the net's name, a comma, its overuse.
_ROW = re.compile(r"(.+),\s*(\d+)\s*")


def _module(net: str) -> str:
    m = (re.match(r"uart_chip\.chip\.tile_\d+_\d+\.(?:core\.)?(\w+)", net)
         or re.match(r"uart_chip\.(?:chip\.)?(\w+)", net))
    return m.group(1) if m else "(other)"


def by_module(rows: list[tuple[str, int]]) -> collections.Counter:
    """Sum ``(net, overuse)`` rows by module: a Counter of module name -> overuse."""
    total = collections.Counter()
    for net, over in rows:
        total[_module(net)] += over
    return total


def bands(placed: dict, axis: str = "Y", band: int = 16) -> dict[int, int]:
    """Count the ``TRELLIS_COMB`` and ``TRELLIS_FF`` cells of a placed nextpnr JSON by
    ``Y // band`` (`axis` ``"Y"``, device rows) or ``X // band`` (``"X"``, columns): a dict
    of band index -> cells, sorted by band.  Raises ValueError for another `axis`."""
    if axis not in ("X", "Y"):
        raise ValueError(f"axis must be 'X' or 'Y', not {axis!r}")
    group = 1 if axis == "X" else 2
    counts = collections.Counter()
    for top in placed["modules"].values():
        for cell in top["cells"].values():
            if cell["type"] not in ("TRELLIS_COMB", "TRELLIS_FF"):
                continue
            m = re.match(r"X(\d+)/Y(\d+)/", cell.get("attributes", {}).get("NEXTPNR_BEL", ""))
            if m:
                counts[int(m.group(group)) // band] += 1
    return dict(sorted(counts.items()))


def read_by_net(text: str, name: str) -> list[tuple[str, int]]:
    """The ``(net, overuse)`` rows of router2's congestion-by-net file `text` (`name`, its
    name for messages): a line ``net name,overuse`` per net with overuse, nothing else
    (the net's name is all before the last comma).  An
    empty file has no rows: router2 writes one for an iteration without overuse.

    Raises
    ------
    ValueError
        For a line of another form, naming the first (``x: line 1 is not 'net name,overuse'
        ...``): a file of something else.
    """
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _ROW.fullmatch(line)
        if m is None:
            raise ValueError(f"{name}: line {i} is not 'net name,overuse', a line of router2's "
                             f"--router2-heatmap *_congestion_by_net_<i>.csv: {line[:60]!r}")
        rows.append((m.group(1), int(m.group(2))))
    return rows


def check_placed(placed, name: str) -> None:
    """Check that `placed` (read from the file `name`) is a placement nextpnr wrote with
    ``--write``: a ``modules`` object whose first module (the top) has ``cells`` (each with a
    ``type`` and ``connections`` of bit lists) and ``netnames`` (each with ``bits``), and
    logic cells placed (``NEXTPNR_BEL``).

    Raises
    ------
    ValueError
        Naming what is missing (``x: not a nextpnr placement (no "modules" object)``); a
        netlist without ``NEXTPNR_BEL`` (Yosys's, before nextpnr) is named as one.
    """
    def refuse(why):
        raise ValueError(f"{name}: not a nextpnr placement ({why}; give the JSON nextpnr "
                         f"wrote with --write after placement)")
    mods = placed.get("modules") if isinstance(placed, dict) else None
    if not isinstance(mods, dict):
        refuse('no "modules" object')
    if not mods:
        refuse('its "modules" object is empty')
    for mod_name, mod in mods.items():
        problem = module_problem(mod, ports=False)
        if problem:
            refuse(f"module {mod_name!r}: {problem}")
    if not any("NEXTPNR_BEL" in cell.get("attributes", {})
               for mod in mods.values() for cell in mod["cells"].values()):
        refuse("no cell has a NEXTPNR_BEL: a netlist before placement")


def main(argv=None):
    """Print the tallies (the module's usage).

    Bad input ends the command with one ``error:`` line, exit status 2, before anything is
    printed: a ``--top`` below 1, a file that is missing, a folder or not text, a
    congestion-by-net file with a line other than ``net name,overuse``, a ``--placed`` file
    that is not a nextpnr placement (not JSON, no modules, no placed cells).
    """
    from chipotle.cli import ArgumentParser

    parser = ArgumentParser(prog="python -m chipotle.sim.congestion",
                            description=__doc__.split("\nMembers\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("by_net", help="router2's *_congestion_by_net_<i>.csv")
    parser.add_argument("--placed", help="nextpnr --write JSON of the placement")
    parser.add_argument("--top", type=int, default=10, help="worst nets to list (default 10)")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top must be 1 or more, not {args.top}")
    try:
        rows = read_by_net(read_input(args.by_net, "router2's *_congestion_by_net_<i>.csv"),
                           args.by_net)
        placed = None
        if args.placed is not None:
            placed = read_json_input(args.placed, "a nextpnr placement", "--placed")
            check_placed(placed, f"--placed {args.placed}")
    except ValueError as e:
        parser.refuse(str(e))
    total = sum(v for _, v in rows)
    print(f"{args.by_net}: {len(rows)} nets, overuse {total}"
          + ("" if rows else " (no congested net: router2 writes an empty file for an "
                             "iteration without overuse)"))
    for mod, v in by_module(rows).most_common():
        print(f"  {mod:24s} {v:8d}  {100 * v / max(total, 1):5.1f} %")
    if rows:
        print("worst nets:")
    for net, v in sorted(rows, key=lambda t: -t[1])[:args.top]:
        print(f"  {v:6d}  {net[:120]}")
    if placed is not None:
        top = next(iter(placed["modules"].values()))
        pins = collections.Counter(b for c in top["cells"].values()
                                   for bits in c["connections"].values() for b in bits)
        for net, _ in sorted(rows, key=lambda t: -t[1])[:3]:
            if net in top["netnames"]:
                print(f"  cell pins on {net[:80]}: "
                      f"{sum(pins[b] for b in top['netnames'][net]['bits'])}")
        for axis, what in (("X", "columns"), ("Y", "rows")):
            print(f"LUT and flip-flop cells per 16 device {what} ({axis} // 16): "
                  + ", ".join(f"{b}: {n}" for b, n in bands(placed, axis).items()))


if __name__ == "__main__":
    from chipotle.cli import run_main
    run_main(main)
