"""The chip behind its UART bridge (``cocotb_uart.py``): SRAM round trips and line errors
under both simulators, and the toy model loaded and stepped through `UartBackend`, its
token and logits equal to isasim's, under Verilator."""

from __future__ import annotations

from pathlib import Path

import pytest

from chipotle.config import CONFIGS
from chipotle.sim import run_cocotb
from chipotle.sim.flow import generate_verilog_cached

TB = Path(__file__).parent
pytestmark = pytest.mark.rtl

#: Simulated clock and line rate: 4 cycles per bit keeps the runs short.
CLK_HZ, BAUD = 4_000_000, 1_000_000


def _verilog(config):
    from chipotle.hw.fpga import uart_chip_verilog
    return generate_verilog_cached(
        lambda: uart_chip_verilog(config, clk_hz=CLK_HZ, baud=BAUD, name="uart_chip"),
        "uart_chip", f"uart chip {config!r} {CLK_HZ} {BAUD}")


def test_uart_chip(sim):
    # Both benches under Verilator: the toy model's load and step (221k cycles) and the SRAM
    # round trip and line errors (91k).  Icarus runs the round trip only (about 2 minutes
    # with its build, the UART model Python per bit); the toy step through the UART, over
    # twice the cycles, is left to Verilator.  `toy_scenario` (the driver's whole toy
    # scenario) is longer still and runs only when asked for (docs/fpga.md).
    tests = ["sram_roundtrip", "toy_step"] if sim == "verilator" else ["sram_roundtrip"]
    # ports only (the bench drives clk, rst, rx and reads tx): under Verilator the tile is
    # then a hierarchy block, compiled once, and the model runs many times faster than
    # with every signal public (docs/performance.md, "Simulation speed")
    # Verilator's model at -O1, not the regression's -O0: its 312k cycles run faster by more
    # than the longer build costs (session 37, from a cold build cache, CCACHE_DISABLE=1,
    # two runs each: 83 / 91 s against 117 / 120 s, 126 / 144 against 151 / 156 CPU-s)
    run = run_cocotb(sim=sim, verilog=_verilog(CONFIGS["small"]), toplevel="uart_chip",
                     test_module="cocotb_uart", test_dir=TB, testcase=tests, public=False,
                     cxx_opt="-O1",
                     extra_env={"CHIP_CONFIG": "small", "CLK_HZ": str(CLK_HZ),
                                "BAUD": str(BAUD)})
    assert sorted(run.passed) == tests, run.passed
    if sim == "verilator":
        from chipotle.sim.bench_simspeed import build_record
        assert build_record(run.build_dir)["build"].startswith("hierarchical")
