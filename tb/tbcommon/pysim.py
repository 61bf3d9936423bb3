"""Amaranth's Python simulator for the pysim benches."""

from __future__ import annotations


def run_testbench(dut, bench, clock: float = 1e-8) -> None:
    """Simulate `dut` with one clock (period `clock` seconds) until the async testbench
    `bench(ctx)` returns; every wait in it must be bounded.  Raises what `bench` raises."""
    from amaranth.sim import Simulator

    sim = Simulator(dut)
    sim.add_clock(clock)
    sim.add_testbench(bench)
    sim.run()
