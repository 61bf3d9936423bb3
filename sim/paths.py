"""The longest register-to-register paths of a synthesised ECP5 netlist, in seconds not hours.

Usage (from the top of the checkout)::

    .venv/bin/python -m chipotle.sim.paths build/fpga/<dir>/top.json [--top 20] [--module NAME]

Reads the Yosys JSON netlist that ``synth_ecp5`` writes (``top.json`` of
``python -m chipotle.sim.bitstream``) and lists the longest combinational paths from a start
point (a flip-flop's ``Q``, a block RAM's data output, a LUT RAM's write side) to an end
point (a flip-flop's data / enable / reset input, a block RAM's or LUT RAM's inputs), one
path per end-point signal, worst first, with every net on the way named by its RTL signal.

**This is a proxy, not a timing analysis.**  Delays come from a fixed per-cell model
(`CELL_NS`, rough ECP5 speed grade 6 figures: a LUT4 0.4 ns, a carry cell 0.4 ns in and
0.06 ns per carry bit, an unregistered ``MULT18X18D`` 4 ns, a ``DP16KD`` 5.6 ns clock to
output without output register) plus `NET_NS` per net for routing, which after placement is
1-2 ns a net and unknown here; dedicated wires (the carry chain's ``CIN``, the data
inputs of ``PFUMX`` / ``L6MUX21``) cost nothing.  The figures rank paths and show which
RTL signals they run through; only nextpnr (post-placement estimate, or routed) gives an
Fmax.  Cells' names in a Yosys netlist are made up from the RTL signal they drive
(``core.controller.a_val_LUT4_Z...``); `rtl_name` cuts them back to that signal.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CELL_NS", "NET_NS", "SETUP_NS", "Path_", "longest_paths", "rtl_name", "format_paths",
           "verilog_lines", "read_input", "read_json_input", "module_problem"]

#: Routing estimate per net (ns), except the carry chain's dedicated wires.
NET_NS = 1.0

#: Per cell type: clock-to-output (ns) of its outputs that start paths (cells without
#: combinational arcs), and the combinational arcs ``(input port, output port) -> ns``
#: (port names without their bit index: ``A`` is ``A0`` .. ``A17`` of a ``MULT18X18D``).
#: Inputs that are no arc's input are end points (setup `SETUP_NS`).
CELL_NS = {
    "TRELLIS_FF": (0.5, {}),
    "DP16KD": (5.6, {}),
    "TRELLIS_DPR16X4": (0.5, {("RAD", "DO"): 0.5}),
    "LUT4": (0.0, {(p, "Z"): 0.4 for p in "ABCD"}),
    "PFUMX": (0.0, {(p, "Z"): 0.25 for p in ("ALUT", "BLUT", "C0")}),
    "L6MUX21": (0.0, {(p, "Z"): 0.25 for p in ("D0", "D1", "SD")}),
    "CCU2C": (0.0, {**{(f"{p}{i}", o): 0.4 for p in "ABCD" for i in "01"
                       for o in ("S0", "S1", "COUT")},
                    ("CIN", "COUT"): 0.06, ("CIN", "S0"): 0.25, ("CIN", "S1"): 0.25}),
    "MULT18X18D": (0.0, {(p, "P"): 4.0 for p in ("A", "B", "C", "SIGNEDA", "SIGNEDB")}),
}
SETUP_NS = 0.1
#: Inputs fed by dedicated wires inside or between slices (no routing delay): the carry
#: chain, and the wide-function multiplexers' data inputs (a PFUMX joins the two LUT4 of its
#: slice, an L6MUX21 two PFUMX of neighbouring slices).
_CARRY_PINS = {("CCU2C", "CIN"), ("PFUMX", "ALUT"), ("PFUMX", "BLUT"), ("L6MUX21", "D0"),
               ("L6MUX21", "D1")}
_AUTONAME = re.compile(r"_(TRELLIS_FF|TRELLIS_DPR16X4|LUT4|CCU2C|PFUMX|L6MUX21|MULT18X18D|"
                       r"DP16KD|TRELLIS_IO)_.*$")


def rtl_name(name: str) -> str:
    """Cut a Yosys auto-generated net or cell name back to the RTL signal it starts from.

    ``core.controller.a_val_LUT4_Z_1_C`` -> ``core.controller.a_val``; names without such a
    suffix are returned unchanged.
    """
    return _AUTONAME.sub("", name)


@dataclass
class Path_:
    """One path: `delay_ns` (the proxy model's), `nets` the net names from start to end
    (Yosys auto-names, cut by `rtl_name`; consecutive repeats merged), `cells` the cell
    types on the way, `start` / `end` the start and end cells (``name (type.pin)``),
    `srcs` the RTL source of each cell on the way (its ``src`` attribute outside the
    Yosys cell library, e.g. ``chipotle_tile.v:6693.20-6693.36``, or a Python line such as
    ``.../hw/tile/vector.py:780`` from the board build's tile RTLIL; repeats merged)."""

    delay_ns: float
    nets: list[str]
    cells: list[str]
    start: str
    end: str
    srcs: list[str]


def _names(mods: dict, most: int = 10) -> str:
    """The modules of a netlist for a message: the first `most` sorted, then how many more."""
    names = sorted(mods)
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def module_problem(mod, ports: bool = True) -> str | None:
    """What keeps a reader of Yosys / nextpnr JSON from reading the module `mod` (the
    ``cells`` and ``netnames`` objects, each cell's ``type`` and ``connections`` of bit
    lists, with `ports` its ``port_directions`` too, each net's ``bits``), or None if nothing
    does: `longest_paths`'s netlists and ``chipotle.sim.congestion``'s placements."""
    if not isinstance(mod, dict):
        return "not an object"
    for key in ("cells", "netnames"):
        if not isinstance(mod.get(key), dict):
            return f'no "{key}" object'
    for name, cell in mod["cells"].items():
        if not (isinstance(cell, dict) and isinstance(cell.get("type"), str)
                and isinstance(cell.get("connections"), dict)
                and (not ports or isinstance(cell.get("port_directions"), dict))
                and isinstance(cell.get("attributes", {}), dict)
                and all(isinstance(b, list) for b in cell["connections"].values())):
            return (f'cell {name!r} lacks the "type", "connections"'
                    + (' and "port_directions"' if ports else "") + " of a netlist's cells")
    for name, net in mod["netnames"].items():
        if not (isinstance(net, dict) and isinstance(net.get("bits"), list)):
            return f'net {name!r} has no "bits" list'
    return None


def read_input(path: str, what: str, option: str | None = None) -> str:
    """Return the text of the file `path` that a command reads, `what` it should be (``"a
    Yosys JSON netlist"``), `option` the option that gave it (None for a positional
    argument).

    Raises
    ------
    ValueError
        In one line naming the file (``--verilog x.v: no such file``): for an empty `path`
        (``Path("")`` would be the current directory), a missing file, a folder, a file the
        OS does not let us read (its reason) and one that is not UTF-8 text.
    """
    given = f"{option} {path}" if option else str(path)
    if not str(path):
        raise ValueError(f"{option or 'the file name'} is empty: give {what}")
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{given}: is a folder, not {what}")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{given}: no such file") from None
    except OSError as e:
        raise ValueError(f"{given}: cannot be read ({e.strerror or e})") from None
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"{given}: not {what} (not text: byte {data[e.start]:#04x} at offset "
                         f"{e.start} is not UTF-8)") from None


def read_json_input(path: str, what: str, option: str | None = None):
    """Return the JSON value of the file `path` (`read_input`'s arguments).

    Raises
    ------
    ValueError
        As `read_input`, and for a file that is not JSON (``x: not <what> (not JSON:
        Expecting value, line 1 column 1)``).
    """
    text = read_input(path, what, option)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        given = f"{option} {path}" if option else str(path)
        raise ValueError(f"{given}: not {what} (not JSON: {e.msg}, line {e.lineno} column "
                         f"{e.colno})") from None
    except RecursionError:
        given = f"{option} {path}" if option else str(path)
        raise ValueError(f"{given}: not {what} (JSON nested too deep to read)") from None


def _base(pin: str) -> str:
    return pin.rstrip("0123456789") if not pin.startswith(("S", "Z")) else pin


def longest_paths(netlist: dict, top: str | None = None, n: int = 20,
                  net_ns: float = NET_NS, strict: bool = True) -> list[Path_]:
    """Return the `n` longest paths of `netlist` by the proxy delay model, worst first.

    Parameters
    ----------
    netlist : dict
        A Yosys JSON netlist (``write_json``) after ``synth_ecp5`` (flattened).
    top : str, optional
        The module to analyse; default: the one with the most cells.
    n : int
        Paths to return, at most one per sequence of RTL sources and end-point register
        (``r0`` .. ``r15`` count as one).
    net_ns : float
        Routing estimate per net (ns).
    strict : bool
        Raise on a cell type without a delay model; False: treat such cells (black boxes)
        as registers (their outputs start paths at 0 ns, their inputs end them).

    Returns
    -------
    list of `Path_`

    Raises
    ------
    ValueError
        If `netlist` is not a Yosys JSON netlist (``not a Yosys JSON netlist (...)``: no
        ``modules``, none in it, or the analysed module without the ``cells`` and
        ``netnames`` a netlist has), if `top` is not in the netlist, or with `strict` if it
        has a cell type without a delay model in `CELL_NS`.
    """
    mods = netlist.get("modules") if isinstance(netlist, dict) else None
    if not isinstance(mods, dict):
        raise ValueError('not a Yosys JSON netlist (no "modules" object)')
    if not mods:
        raise ValueError('not a Yosys JSON netlist (its "modules" object is empty)')
    if top is None:
        def size(name):
            cells = mods[name].get("cells") if isinstance(mods[name], dict) else None
            return len(cells) if isinstance(cells, dict) else -1
        top = max(mods, key=size)
    if top not in mods:
        raise ValueError(f"module {top!r} not in the netlist (has {_names(mods)})")
    mod = mods[top]
    problem = module_problem(mod)
    if problem:
        raise ValueError(f"not a Yosys JSON netlist (module {top!r}: {problem})")
    cells = mod["cells"]
    unknown = sorted({c["type"] for c in cells.values()} - set(CELL_NS)
                     - {"TRELLIS_IO", "EHXPLLL", "$scopeinfo"})
    if unknown and strict:
        raise ValueError(f"cell types without a delay model: {unknown} (CELL_NS has ECP5's)")
    model = {**{t: (0.0, {}) for t in unknown}, **CELL_NS}
    # bit -> best name (fewest '$', then shortest)
    names: dict[int, str] = {}
    for name, info in mod["netnames"].items():
        for b in info["bits"]:
            if isinstance(b, int):
                old = names.get(b)
                if old is None or (old.count("$"), len(old)) > (name.count("$"), len(name)):
                    names[b] = name
    driver: dict[int, tuple[str, str]] = {}                 # bit -> (cell, output pin)
    fanin: dict[tuple[str, str], list] = {}                 # (cell, out pin) -> [(bit, ns, wire)]
    sinks: list[tuple[str, str, int]] = []                  # end points: (cell, pin, bit)
    for cname, cell in cells.items():
        ctype = cell["type"]
        if ctype not in model:
            continue
        _, arcs = model[ctype]
        arc_in = {a for a, _ in arcs}
        ins, outs = [], []
        for port, bits in cell["connections"].items():
            d = cell["port_directions"].get(port)
            base = port.rstrip("0123456789") if ctype == "MULT18X18D" else port
            for i, b in enumerate(bits):
                pin = port if len(bits) == 1 else f"{port}{i}"
                if d == "output" and isinstance(b, int):
                    driver[b] = (cname, pin)
                    outs.append((base, pin))
                elif d == "input" and isinstance(b, int):
                    if base in arc_in:
                        ins.append((base, b, (ctype, port) in _CARRY_PINS))
                    elif port not in ("CLK", "CLKA", "CLKB", "WCK"):
                        sinks.append((cname, pin, b))
        for obase, opin in outs:
            fanin[(cname, opin)] = [(b, arcs[(ibase, obase)], carry)
                                    for ibase, b, carry in ins if (ibase, obase) in arcs]

    # arrival time at each bit's driver output (before its net), iterative DFS with memo
    arr: dict[int, float] = {}
    pred: dict[int, int | None] = {}
    onstack: set[int] = set()

    def arrival(bit):
        stack = [bit]
        while stack:
            b = stack[-1]
            if b in arr:
                stack.pop()
                continue
            drv = driver.get(b)
            ins = fanin.get(drv, []) if drv else []
            if not ins:
                arr[b] = model[cells[drv[0]]["type"]][0] if drv else 0.0
                pred[b] = None
                stack.pop()
                continue
            if b not in onstack:
                onstack.add(b)
                stack.extend(ib for ib, _, _ in ins if ib not in arr and ib not in onstack)
                continue
            best, bp = 0.0, None
            for ib, ns, carry in ins:
                if ib in arr:               # else a combinational loop: cut here
                    t = arr[ib] + (0.0 if carry else net_ns) + ns
                    if t > best:
                        best, bp = t, ib
            arr[b], pred[b] = best, bp
            onstack.discard(b)
            stack.pop()
        return arr[bit]

    ends = []
    for cname, pin, b in sinks:
        ends.append((arrival(b) + net_ns + SETUP_NS, cname, pin, b))
    ends.sort(key=lambda e: -e[0])
    out, seen = [], set()
    for t, cname, pin, b in ends:
        chain = []
        x = b
        while x is not None:
            chain.append(x)
            x = pred.get(x)
        chain.reverse()
        nets, types, srcs = [], [], []
        for x in chain:
            nm = rtl_name(names.get(x, f"bit{x}"))
            if not nets or nets[-1] != nm:
                nets.append(nm)
            drv = driver.get(x)
            if drv:
                types.append(cells[drv[0]]["type"])
                src = [r for r in cells[drv[0]].get("attributes", {}).get("src", "").split("|")
                       if r and not r.startswith("/share/")]
                if src and (not srcs or srcs[-1] != src[0]):
                    srcs.append(src[0])
        # one path per RTL source sequence and end register (array elements merged)
        key = (tuple(srcs), rtl_name(cname).rstrip("0123456789_"))
        if key in seen:
            continue
        seen.add(key)
        s = driver.get(chain[0])
        start = f"{rtl_name(s[0])} ({cells[s[0]]['type']}.{s[1]})" if s else f"bit{chain[0]}"
        out.append(Path_(round(t, 2), nets, types, start,
                         f"{rtl_name(cname)} ({cells[cname]['type']}.{pin})", srcs))
        if len(out) >= n:
            break
    return out


def verilog_lines(text: str) -> dict[int, str]:
    """Map each line number of a Verilog file to ``module: line`` (stripped), for `format_paths`."""
    out, mod = {}, "?"
    for i, line in enumerate(text.splitlines(), 1):
        t = line.strip()
        if t.startswith("module "):
            mod = t.split()[1].split("(")[0].lstrip("\\")
        out[i] = f"{mod}: {t}"
    return out


def format_paths(paths: list[Path_], verilog: dict[str, dict[int, str]] | None = None) -> str:
    """Return `paths` as text: per path the proxy delay, the cell count by type, the start
    and end cells and the RTL source lines on the way.

    `verilog` maps a Verilog file name of the ``src`` attributes (``chipotle_tile.v``) to
    `verilog_lines` of it; sources in it are printed as their line (``module: assign ...``).
    """
    verilog = verilog or {}
    lines = []
    for i, p in enumerate(paths, 1):
        counts = {}
        for t in p.cells:
            counts[t] = counts.get(t, 0) + 1
        lines.append(f"{i:3}. {p.delay_ns:6.2f} ns (proxy), {len(p.cells)} cells ("
                     + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + ")")
        lines.append(f"     from {p.start}")
        lines.append(f"     to   {p.end}")
        shown = []
        for src in p.srcs:
            f, _, pos = src.partition(":")
            line = verilog.get(f, {}).get(int(pos.split(".")[0])) if pos else None
            text = line if line else src
            if not shown or shown[-1] != text:
                shown.append(text)
        for text in shown:
            lines.append(f"       {text[:150]}")
    return "\n".join(lines)


def main(argv=None):
    """List the longest paths of a netlist (the module's usage).

    Bad input ends the command with one ``error:`` line, exit status 2, before anything is
    printed: a ``--top`` below 1, a ``--net-ns`` below 0 or not finite, a netlist or
    ``--verilog`` file that is missing, a folder or not text, a netlist that is not a Yosys
    JSON netlist (not JSON, no modules, a module without cells and nets), a ``--module`` the
    netlist does not have, and one with cell types the delay model lacks (e.g. iCE40's).
    """
    from chipotle.cli import ArgumentParser

    parser = ArgumentParser(prog="python -m chipotle.sim.paths", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("netlist", help="Yosys JSON netlist (top.json)")
    parser.add_argument("--top", type=int, default=20, help="paths to list (default 20)")
    parser.add_argument("--module", default=None, help="module (default: the largest)")
    parser.add_argument("--net-ns", type=float, default=NET_NS,
                        help=f"routing estimate per net in ns (default {NET_NS})")
    parser.add_argument("--verilog", action="append", default=None,
                        help="Verilog read by Yosys, to print source lines (default: the "
                        "*.v next to the netlist)")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top must be 1 or more, not {args.top}")
    if not (math.isfinite(args.net_ns) and args.net_ns >= 0):
        parser.error(f"--net-ns must be a finite number of ns, 0 or more, not {args.net_ns:g}")
    try:
        netlist = read_json_input(args.netlist, "a Yosys JSON netlist")
        verilog = {Path(v).name: verilog_lines(read_input(v, "a Verilog file", "--verilog"))
                   for v in args.verilog or ()}
    except ValueError as e:
        parser.refuse(str(e))
    mods = netlist.get("modules") if isinstance(netlist, dict) else None
    if args.module is not None and isinstance(mods, dict) and mods and args.module not in mods:
        parser.error(f"--module {args.module}: {args.netlist} has no such module (it has "
                     f"{_names(mods)})")
    try:
        found = longest_paths(netlist, args.module, args.top, args.net_ns)
    except ValueError as e:
        parser.refuse(f"{args.netlist}: {e}")
    if args.verilog is None:        # the Verilog beside the netlist, for its source lines
        for v in sorted(Path(args.netlist).parent.glob("*.v")):
            if v.is_file():
                verilog[v.name] = verilog_lines(v.read_bytes().decode(errors="replace"))
    print(f"Longest paths of {args.netlist} (proxy delay model: cells per CELL_NS, "
          f"{args.net_ns} ns a net; not a timing analysis):")
    print(format_paths(found, verilog) if found else
          "  none: the module has no path to a register or RAM input")


if __name__ == "__main__":
    from chipotle.cli import run_main
    run_main(main)
