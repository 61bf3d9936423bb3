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
import csv
import json
import re
from pathlib import Path

__all__ = ["bands", "by_module", "main"]


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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m chipotle.sim.congestion",
                                     description=__doc__.split("\nMembers\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("by_net", type=Path, help="router2's *_congestion_by_net_<i>.csv")
    parser.add_argument("--placed", type=Path, help="nextpnr --write JSON of the placement")
    parser.add_argument("--top", type=int, default=10, help="worst nets to list")
    args = parser.parse_args(argv)
    try:
        rows = [(r[0], int(r[1])) for r in csv.reader(args.by_net.open())
                if len(r) >= 2 and r[1].strip().lstrip("-").isdigit()]
    except OSError as e:
        parser.error(f"{args.by_net}: {e.strerror}")
    total = sum(v for _, v in rows)
    print(f"{args.by_net}: {len(rows)} nets, overuse {total}")
    for mod, v in by_module(rows).most_common():
        print(f"  {mod:24s} {v:8d}  {100 * v / max(total, 1):5.1f} %")
    print("worst nets:")
    for net, v in sorted(rows, key=lambda t: -t[1])[:args.top]:
        print(f"  {v:6d}  {net[:120]}")
    if args.placed:
        placed = json.loads(args.placed.read_text())
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
