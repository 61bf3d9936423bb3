"""cocotb test module for `test_simspeed.py`: a ``public=False`` Verilator build exposes the
toplevel's ports and nothing else, and the GPI clock drives it (``ports_top``: ``q`` takes
``a + 1`` at each rising edge through the internal wire ``inner``)."""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge


@cocotb.test()
async def ports_only(dut):
    """Ports are reachable, the internal wire is not; inputs written at a falling edge are
    sampled at the next rising edge."""
    Clock(dut.clk, 10, unit="ns", impl="gpi").start()
    with_inner = True
    try:
        dut.inner  # noqa: B018
    except AttributeError:
        with_inner = False
    assert not with_inner, "the internal wire `inner` is visible through VPI"
    for value in (5, 200, 255):
        await FallingEdge(dut.clk)
        dut.a.value = value
        await RisingEdge(dut.clk)
        await ReadOnly()
        assert int(dut.q.value) == (value + 1) % 256, (value, dut.q.value)
