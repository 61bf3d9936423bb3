"""Regression: the SkidBuffer component under both simulators (proves the sim/ flow)."""

from pathlib import Path

import pytest

from chipotle.hw.stream_util import SkidBuffer
from chipotle.sim import generate_verilog, run_cocotb

TB = Path(__file__).parent


@pytest.mark.rtl
def test_skid_buffer_rtl(sim):
    verilog = generate_verilog(SkidBuffer(16), name="skid_buffer")
    run = run_cocotb(
        sim=sim, verilog=verilog, toplevel="skid_buffer", test_module="cocotb_skid",
        test_dir=TB, extra_env={"SKID_WIDTH": "16"},
    )
    assert len(run.passed) == 5


@pytest.mark.rtl
def test_waves_dump(sim):
    """``waves=True`` (what ``WAVES=1`` selects) leaves a waveform in the build folder."""
    verilog = generate_verilog(SkidBuffer(8), name="skid_buffer_waves")
    run = run_cocotb(
        sim=sim, verilog=verilog, toplevel="skid_buffer_waves", test_module="cocotb_skid",
        test_dir=TB, testcase="full_throughput", extra_env={"SKID_WIDTH": "8"}, waves=True,
    )
    dump = run.build_dir / ("dump.vcd" if sim == "verilator" else "skid_buffer_waves.fst")
    dump.unlink(missing_ok=True)
    run_cocotb(
        sim=sim, verilog=verilog, toplevel="skid_buffer_waves", test_module="cocotb_skid",
        test_dir=TB, testcase="full_throughput", extra_env={"SKID_WIDTH": "8"}, waves=True,
    )
    # 420 ns of a small design: a few hundred bytes of FST, tens of kilobytes of VCD.
    assert dump.is_file() and dump.stat().st_size > 500, dump
