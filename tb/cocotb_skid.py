"""cocotb bench of :class:`chipotle.hw.stream_util.SkidBuffer`.

Driver -> DUT -> monitor, with a reference model (the identity: every word comes out
once, in order) checked by a cocotb-bus scoreboard, under random idles and back-pressure.
"""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge, with_timeout
from cocotb_bus.scoreboard import Scoreboard

from tbcommon.stream import StreamDriver, StreamMonitor, StreamSink


async def _reset(dut):
    dut.i__valid.value = 0
    dut.i__payload.value = 0
    dut.o__ready.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


@cocotb.test()
@cocotb.parametrize(idle=[0.0, 0.3], stall=[0.0, 0.3])
async def stream_through(dut, idle, stall):
    """Every word arrives exactly once, in order, under idles and back-pressure."""
    width = int(os.environ.get("SKID_WIDTH", "16"))
    rng = random.Random(int(os.environ.get("SEED", "1")))
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    drv = StreamDriver(dut, "i", dut.clk, idle_prob=idle, rng=rng)
    sink = StreamSink(dut, "o", dut.clk, stall_prob=stall, rng=random.Random(rng.random()))
    expected = []
    mon = StreamMonitor(dut, "o", dut.clk)
    sb = Scoreboard(dut, fail_immediately=True)
    sb.add_interface(mon, expected)
    await _reset(dut)
    cocotb.start_soon(sink.run())
    words = [rng.getrandbits(width) for _ in range(200)]
    expected.extend(words)
    for w in words:
        await drv.send(w)
    async def drained():
        while expected:
            await RisingEdge(dut.clk)
    await with_timeout(drained(), 2000, "ns")
    assert not expected, f"{len(expected)} words never left the skid buffer"


@cocotb.test()
async def full_throughput(dut):
    """With the sink always ready, one word moves per cycle after one cycle of latency."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    await _reset(dut)
    dut.o__ready.value = 1
    seen = []
    for cycle in range(40):
        # word `cycle` offered in cycle `cycle` (set after the rising edge that ends the
        # cycle before), the output sampled once the cycle's values settle
        await FallingEdge(dut.clk)
        dut.i__valid.value = 1 if cycle < 32 else 0
        dut.i__payload.value = cycle
        await ReadOnly()
        if int(dut.o__valid.value):
            seen.append((cycle, int(dut.o__payload.value)))
    # every word leaves one cycle after it is offered, on consecutive cycles, none lost
    assert seen == [(k + 1, k) for k in range(32)], seen
