"""cocotb test module for `test_simspeed.py`: ``hier_top`` (two chained ``hier_leaf``
instances, each registering ``a + 1``) built with ``run_cocotb(public=[("hier_leaf", "q")])``,
the ports and the named variables public."""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly


@cocotb.test()
async def named_signals_only(dut):
    """A build with ``public=[("hier_leaf", "q")]``: each instance's ``q`` is reachable (the
    first block's holds ``a + 1`` a cycle after ``a`` is written, as a back door reads an
    SRAM array), the top's own wire ``mid`` is not."""
    Clock(dut.clk, 10, unit="ns", impl="gpi").start()
    try:
        dut.mid  # noqa: B018
    except AttributeError:
        pass
    else:
        raise AssertionError("the wire `mid` of hier_top is visible through VPI")
    for value in (7, 255):
        await FallingEdge(dut.clk)
        dut.a.value = value
        await ClockCycles(dut.clk, 1)
        await ReadOnly()
        assert int(dut.first.q.value) == (value + 1) % 256, (value, dut.first.q.value)
