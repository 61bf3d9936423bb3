"""Amaranth's Python simulator for the pysim benches."""

from __future__ import annotations

import threading


def run_testbench(dut, bench, clock: float = 1e-8) -> None:
    """Simulate `dut` with one clock (period `clock` seconds) until the async testbench
    `bench(ctx)` returns; every wait in it must be bounded.  Raises what `bench` raises.

    The simulation runs in a thread of its own, at the bottom of a fresh interpreter data
    stack.  CPython 3.11 keeps a thread's frames in 16 KiB chunks and frees a chunk when the
    frame at its base returns; Amaranth compiles a clock domain's logic into one Python
    function whose frame is large (8.4 KB, 1,035 locals, for the ``ulx3s`` geometry's vector
    unit), so when the caller's chunk had less room left, every call of it mapped, faulted
    in and unmapped a chunk: under a pytest-xdist worker, whose stack is deeper,
    ``test_other_geometries_pysim[4-8-1-3]`` took 43 s (30 s of it in the kernel, 3.1
    million page faults) against 6 s outside one (``/usr/bin/time pytest -n 1 ...`` against
    ``-p no:xdist``, session 35)."""
    from amaranth.sim import Simulator

    sim = Simulator(dut)
    sim.add_clock(clock)
    sim.add_testbench(bench)
    failure = []

    def run():
        try:
            sim.run()
        except BaseException as e:          # re-raised in the caller's thread
            failure.append(e)

    worker = threading.Thread(target=run, name="pysim")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
