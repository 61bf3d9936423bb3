"""cocotb test module for `test_simspeed.py`'s precompiled-header build: ``chain_top``
(`chain_verilog`) is a chain of N 16-bit registers, ``r[0] <= a`` and ``r[i] <= step(i,
r[i - 1])``, large enough that Verilator splits its model into several C++ files (a
parallel build, which uses the precompiled header).  ``q`` is ``r[N - 1]``."""

import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly


def step(i: int, r: int) -> int:
    """``r[i]``'s next value from ``r[i - 1]``: ``(r ^ 7i) + (r with its bytes swapped)``,
    16 bits."""
    swapped = ((r & 0xFF) << 8) | (r >> 8)
    return ((r ^ (i * 7 % 65536)) + swapped) & 0xFFFF


def chain_verilog(n: int) -> str:
    """Return the Verilog of ``chain_top`` with `n` registers (at least 2)."""
    lines = ["module chain_top(clk, a, q);", "  input clk;", "  input [15:0] a;",
             "  output [15:0] q;"]
    lines += [f"  reg [15:0] r{i} = 16'h0;" for i in range(n)]
    lines += ["  always @(posedge clk) begin", "    r0 <= a;"]
    lines += [f"    r{i} <= (r{i - 1} ^ 16'd{i * 7 % 65536}) + "
              f"{{r{i - 1}[7:0], r{i - 1}[15:8]}};" for i in range(1, n)]
    lines += ["  end", f"  assign q = r{n - 1};", "endmodule", ""]
    return "\n".join(lines)


@cocotb.test()
async def chain(dut):
    """``a`` held for N cycles reaches ``q`` through every register's step."""
    n = int(os.environ["CHAIN_LENGTH"])
    Clock(dut.clk, 10, unit="ns", impl="gpi").start()
    for a in (0x1234, 0xBEEF):
        await FallingEdge(dut.clk)
        dut.a.value = a
        await ClockCycles(dut.clk, n)
        await ReadOnly()
        want = a
        for i in range(1, n):
            want = step(i, want)
        assert int(dut.q.value) == want, (hex(a), dut.q.value, hex(want))
