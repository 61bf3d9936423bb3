"""cocotb bench: the driver's toy scenario (``toy.py``) on a ``Chip`` through `RtlBackend`,
against the same scenario on `IsaSimBackend`.

Environment: ``CHIP_CONFIG`` (a key of ``chipotle.config.CONFIGS``), ``RESULT`` (a file the
bench writes the measured cycles to, for the pytest side to print).
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.triggers import ClockCycles
from toy import ToyCompiled, next_token, scenario

from chipotle.config import CONFIGS
from chipotle.driver import PERF_NAMES, Driver, IsaSimBackend, TileFault, UnfinishedStep
from chipotle.driver.rtl import RtlBackend
from chipotle.isa import ErrorCode

CONFIG = CONFIGS[os.environ.get("CHIP_CONFIG", "small")]


@cocotb.test()
async def toy_scenario(dut):
    """Every finding of the scenario equals isasim's, except cycle counts."""
    rtl = RtlBackend(dut, CONFIG)
    await rtl.power_on()
    got = await scenario(rtl)
    want = await scenario(IsaSimBackend(CONFIG))
    assert got["generate"][0] == got["expected_tokens"], got["generate"]
    assert got["step"][0] == next_token(3, 0)
    assert got["perf_names"] == sorted(PERF_NAMES), got["perf_names"]
    # The interface's flit counters also count the answers to the host's own reads.
    assert all(g >= w for g, w in zip(got["perf_flits"], want["perf_flits"], strict=True))
    for key in ("unaligned", "long_read", "last_word", "step", "generate", "perf_instructions",
                "sram"):
        g, w = got[key], want[key]
        if key == "step":    # isasim estimates a subset of the counters
            g, w = g[:2], w[:2]
        assert g == w, f"{key}: RTL {g!r}, isasim {w!r}"
    for xy in CONFIG.tiles:
        g, w = got["statuses"][xy], want["statuses"][xy]
        assert (g.state, g.error) == (w.state, w.error), (xy, g, w)
    assert got["idle_status"].state == "idle"
    with open(os.environ["RESULT"], "w") as f:
        json.dump({"rtl_cycles": got["cycles"], "isasim_cycles": want["cycles"]}, f)


@cocotb.test()
async def tile_fault(dut):
    """A faulting tile is reported with its error code and PC (from the status port)."""
    rtl = RtlBackend(dut, CONFIG)
    await rtl.power_on()
    drv = Driver(ToyCompiled(CONFIG, "fault"), rtl, timeout_cycles=100_000)
    await drv.load()
    t0 = rtl.cycle
    try:
        await drv.step([3], 0)
    except TileFault as e:
        assert (e.tile, e.error, e.pc) == ((1, 1), ErrorCode.SRAM_RANGE, 1), str(e)
    else:
        raise AssertionError("no TileFault")
    assert rtl.cycle - t0 < 2 * rtl.poll_cycles + 1000   # found by polling, not the timeout
    status = await rtl.status((1, 1))
    assert (status.state, status.error, status.pc) == ("error", ErrorCode.SRAM_RANGE, 1)


async def _unfinished(backend, variant: str) -> dict:
    drv = Driver(ToyCompiled(CONFIG, variant), backend, timeout_cycles=100_000)
    await drv.load()
    try:
        await drv.step([3], 0)
    except UnfinishedStep as e:
        return e.problems
    raise AssertionError(f"{variant}: no UnfinishedStep")


@cocotb.test()
async def unfinished_step(dut):
    """A counter left over, a tile not halted or a second doorbell after the right doorbell
    is refused, with the same tiles, counters, PCs and doorbells as on isasim (read from the
    RTL's registers and host link)."""
    rtl = RtlBackend(dut, CONFIG)
    await rtl.power_on()
    for variant, want in (("leftover", {(0, 0): "counters 2=1"}),
                          ("unhalted", {(1, 1): "waiting at pc 6"}),
                          ("double", {(0, 0): "doorbell 85 rang after the step's own"})):
        got = await _unfinished(rtl, variant)
        assert got == want == await _unfinished(IsaSimBackend(CONFIG), variant), (variant, got)


@cocotb.test()
async def reset_mid_step(dut):
    """A host reset at any cycle of a step (what `Driver.load` does first) leaves a chip on
    which the next step runs right and at rest.  Before the network interface dropped its
    completion at a controller reset, a reset while a tile's SEND was on the wire left the
    completion pending for good, and the interface, which takes a command only with none
    pending, never took the next SEND: every later step timed out."""
    rtl = RtlBackend(dut, CONFIG)
    await rtl.power_on()
    toy = ToyCompiled(CONFIG)
    plan = toy.step([3], 0)
    drv = Driver(toy, rtl, timeout_cycles=20_000)
    # the toy step's SENDs are on the wire from about 20 to 45 cycles after its starts
    for delay in (0, *range(16, 52, 2), 80):
        await drv.load()
        for xy, addr, data in plan.writes:
            await rtl.write_sram(xy, addr, bytes(data))
        for xy, pc in plan.starts:
            await rtl.start(xy, pc)
        await ClockCycles(dut.clk, delay)
        await drv.load()             # the reset, mid-step, then the images again
        got = await drv.step([3], 0)
        assert got.token == next_token(3, 0), (delay, got.token)


@cocotb.test()
async def backdoor_load(dut):
    """The back-door load leaves the same SRAM contents as the host-link load."""
    import numpy as np

    rtl = RtlBackend(dut, CONFIG)
    await rtl.power_on()
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, 4000, dtype=np.uint8).tobytes()
    image = image[:1000] + bytes(200) + image[1200:]      # a zero run (skipped either way)
    await rtl.write_sram((0, 0), 0x1003, image, skip_zero=False)
    await rtl.backdoor_write_sram((1, 1), 0x1003, image)
    lo, n = 0x1000, 4008
    via_link = [await rtl.read_sram(xy, lo, n) for xy in ((0, 0), (1, 1))]
    via_door = [rtl.backdoor_read_sram(xy, lo, n) for xy in ((0, 0), (1, 1))]
    assert via_link[0] == via_link[1] == via_door[0] == via_door[1]
    assert via_link[0][3:3 + len(image)] == image
    # a whole load through the back door runs the toy model as the host-link load does
    drv = Driver(ToyCompiled(CONFIG), rtl)
    await drv.load(backdoor=True)
    for xy, parts in drv.compiled.images.items():
        for addr, data in parts:
            assert await rtl.read_sram(xy, addr, len(data)) == data, (xy, addr)
    s = await drv.step([4], 2)
    assert s.token == next_token(4, 2)
