"""cocotb test module: run steps on a ``Chip`` and record every tile's instruction retires in
one of them (`chipotle.sim.trace`).

Launched by `chipotle.sim.chiprun.run_rtl` with ``test_module="chipotle.sim.cocotb_trace"``
(never collected by pytest).  Reads the pickled job named by ``$CHIPOTLE_JOB`` (a
`chipotle.sim.chiprun.Job` of kind ``"steps"`` with a compiled model, plus ``trace_step``:
the index in ``step_list`` of the step to trace, and ``trace_retires``: whether to record
retires, which needs a flat build with public signals) and writes a pickled dict to
``$CHIPOTLE_RESULT``:

``steps``
    Per step of ``step_list``: ``tokens``, ``pos``, ``token``, ``logits``, ``cycles`` (the
    driver's: first START to the doorbell), ``perf`` (summed over tiles) and ``perf_per_tile``
    (``{(x, y): {counter: value}}``, the step's difference of every counter of
    ``chipotle.driver.PERF_NAMES``).
``retires``
    ``{(x, y): [(cycle, pc), ...]}``: the cycles (relative to the host's first START of the
    traced step) at which each tile's controller retired an instruction, and its PC, in
    order.  Sampled at every falling clock edge from the controller's ``retired`` port and its
    ``pc`` register.  Empty unless ``trace_retires``.
``starts``
    ``{(x, y): cycle}``: when the host started each tile in the traced step (same origin).
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import cocotb
from cocotb.triggers import FallingEdge


def _step_dict(s) -> dict:
    return {"tokens": list(s.tokens), "pos": s.pos, "token": s.token, "logits": s.logits,
            "cycles": s.cycles, "perf": dict(s.perf),
            "perf_per_tile": {tuple(xy): dict(d) for xy, d in s.perf_per_tile.items()}}


def _controller(dut, xy):
    """The controller instance of tile ``xy`` in a flat build (`chipotle.hw.chip`'s names)."""
    return getattr(dut, f"tile_{xy[0]}_{xy[1]}").core.controller


@cocotb.test()
async def trace_job(dut):
    """Load the job's model, run its steps, and record the retires of the traced step."""
    from chipotle.config import ChipConfig
    from chipotle.driver import Driver
    from chipotle.driver.rtl import RtlBackend

    job = pickle.loads(Path(os.environ["CHIPOTLE_JOB"]).read_bytes())
    config = ChipConfig(**job["config"])
    compiled = job["model"]
    backend = RtlBackend(dut, config, clock=job.get("clock", "gpi"))
    await backend.power_on()
    driver = Driver(compiled, backend, None, perf=True)
    await driver.load(skip_zero=job.get("skip_zero", True), backdoor=job.get("backdoor", False))

    trace_at = job["trace_step"]
    record = job["trace_retires"]
    tiles = list(compiled.programs)
    retires = {xy: [] for xy in tiles}
    starts: dict = {}
    origin = [None]
    running = [False]

    ports = {}
    if record:
        ports = {xy: (_controller(dut, xy).retired, _controller(dut, xy).pc) for xy in tiles}

    async def monitor():
        fall = FallingEdge(dut.clk)
        while running[0]:
            await fall
            cyc = backend.cycle
            for xy, (ret, pc) in ports.items():
                if ret.value:
                    retires[xy].append((cyc, int(pc.value)))

    real_start = backend.start

    async def start(xy, pc):
        if origin[0] is None:
            origin[0] = backend.cycle
        starts[tuple(xy)] = backend.cycle
        await real_start(xy, pc)

    steps = []
    for k, (tokens, pos) in enumerate(job["step_list"]):
        task = None
        if k == trace_at:
            backend.start = start
            running[0] = True
            if record:
                task = cocotb.start_soon(monitor())
        steps.append(_step_dict(await driver.step(tokens, pos, logits=True)))
        if k == trace_at:
            running[0] = False
            backend.start = real_start
            if task is not None:
                await FallingEdge(dut.clk)
                await FallingEdge(dut.clk)
    o = origin[0] or 0
    result = {"steps": steps,
              "retires": {xy: [(c - o, pc) for c, pc in r] for xy, r in retires.items()},
              "starts": {xy: c - o for xy, c in starts.items()}}
    Path(os.environ["CHIPOTLE_RESULT"]).write_bytes(pickle.dumps(result))
