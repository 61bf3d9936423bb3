"""Regression: the SkidBuffer component under both simulators (proves the sim/ flow)."""

from pathlib import Path

from chipotle.hw.stream_util import SkidBuffer
from chipotle.sim import generate_verilog, run_cocotb

TB = Path(__file__).parent


def test_skid_buffer_rtl(sim):
    verilog = generate_verilog(SkidBuffer(16), name="skid_buffer")
    run = run_cocotb(
        sim=sim, verilog=verilog, toplevel="skid_buffer", test_module="cocotb_skid",
        test_dir=TB, extra_env={"SKID_WIDTH": "16"},
    )
    assert len(run.passed) == 5
