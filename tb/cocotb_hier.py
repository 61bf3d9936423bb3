"""cocotb test module for `test_simspeed.py`'s hierarchical Verilator build: ``hier_top``
chains two instances of the hierarchy block ``hier_leaf`` (each registers ``a + 1``), so
``q`` is ``a + 2`` two rising edges after ``a`` is written."""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly


@cocotb.test()
async def through_two_blocks(dut):
    """Values written at a falling edge come out of the second block two cycles later, not
    one: a cycle after the write ``q`` still holds the previous value's ``+ 2``."""
    Clock(dut.clk, 10, unit="ns", impl="gpi").start()
    await FallingEdge(dut.clk)
    dut.a.value = prev = 0
    await ClockCycles(dut.clk, 2)
    for value in (5, 200, 254, 255):
        await FallingEdge(dut.clk)
        dut.a.value = value
        await ClockCycles(dut.clk, 1)
        await ReadOnly()
        assert int(dut.q.value) == (prev + 2) % 256, ("one cycle", value, dut.q.value)
        await ClockCycles(dut.clk, 1)
        await ReadOnly()
        assert int(dut.q.value) == (value + 2) % 256, (value, dut.q.value)
        prev = value
