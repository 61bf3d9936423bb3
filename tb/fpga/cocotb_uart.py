"""cocotb bench: the chip behind its UART bridge (``UartChip``), driven by `UartBackend`
through a bit-level UART model on the ``rx`` / ``tx`` pins.

Environment: ``CHIP_CONFIG`` (a key of ``chipotle.config.CONFIGS``), ``CLK_HZ``, ``BAUD``
(the values the design was generated with).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import Event, FallingEdge, First, RisingEdge, Timer

sys.path.insert(0, str(Path(__file__).parent.parent / "driver"))   # the toy model

from toy import ToyCompiled, next_token, scenario  # noqa: E402

from chipotle.config import CONFIGS  # noqa: E402
from chipotle.driver import Driver, IsaSimBackend  # noqa: E402
from chipotle.driver import hostlink as hl  # noqa: E402
from chipotle.driver.uart import UartBackend, encode_flits  # noqa: E402

CONFIG = CONFIGS[os.environ.get("CHIP_CONFIG", "small")]
CLK_HZ = int(os.environ.get("CLK_HZ", "4000000"))
BAUD = int(os.environ.get("BAUD", "1000000"))
CLOCK_NS = 10                     # simulated period; only the ratio CLK_HZ / BAUD matters
BIT_NS = CLOCK_NS * round(CLK_HZ / BAUD)


class CocotbUart:
    """A host UART on the pins of a ``UartChip`` (a `chipotle.driver.uart.Transport`)."""

    def __init__(self, dut):
        self.dut = dut
        self.rx_bytes = bytearray()
        self._got = Event()
        self._t0 = 0

    async def power_on(self):
        dut = self.dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        dut.rx.value = 1
        dut.rst.value = 1
        for _ in range(4):
            await RisingEdge(dut.clk)
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        self._t0 = self._now()
        cocotb.start_soon(self._listen())

    def _now(self) -> int:
        return int(get_sim_time(unit="ns")) // CLOCK_NS

    @property
    def cycle(self) -> int:
        return self._now() - self._t0

    async def write(self, data: bytes) -> None:
        rx, bit = self.dut.rx, Timer(BIT_NS, unit="ns")
        await RisingEdge(self.dut.clk)
        for b in data:
            for v in (0, *((b >> i) & 1 for i in range(8)), 1):
                rx.value = v
                await bit

    async def _listen(self):
        tx = self.dut.tx
        while True:
            await FallingEdge(tx)
            await Timer(BIT_NS + BIT_NS // 2, unit="ns")
            b = 0
            for i in range(8):
                b |= int(tx.value) << i
                await Timer(BIT_NS, unit="ns")
            assert int(tx.value) == 1, "stop bit low on tx"
            self.rx_bytes.append(b)
            self._got.set()

    async def read(self, max_cycles: int) -> bytes:
        if not self.rx_bytes:
            self._got.clear()
            await First(self._got.wait(), Timer(max(max_cycles, 1) * CLOCK_NS, unit="ns"))
        data = bytes(self.rx_bytes)
        self.rx_bytes.clear()
        return data


async def _backend(dut):
    uart = CocotbUart(dut)
    await uart.power_on()
    return uart, UartBackend(uart, CONFIG, poll_cycles=50_000)


@cocotb.test()
async def sram_roundtrip(dut):
    """SRAM written over the UART reads back equal, from every tile; a broken flit on the
    line costs that flit only."""
    uart, be = await _backend(dut)
    rng = np.random.default_rng(5)
    blobs = {xy: rng.integers(0, 256, 200, dtype=np.uint8).tobytes() for xy in CONFIG.tiles}
    for i, (xy, blob) in enumerate(blobs.items()):
        await be.write_sram(xy, 0x100 + 8 * i, blob)
    for i, (xy, blob) in enumerate(blobs.items()):
        assert await be.read_sram(xy, 0x100 + 8 * i, len(blob)) == blob, xy
    # Line errors between packets: stray data bytes and a flit cut short (its sync byte
    # and 4 more).  The bridge drops them; the next packet arrives whole.
    xy = CONFIG.tiles[-1]
    around = rng.integers(0, 256, 256, dtype=np.uint8).tobytes()    # 0x380 .. 0x480
    await be.write_sram(xy, 0x380, around)
    good = rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
    pkt = hl.sram_write(xy, 0x400 // 8, hl.bytes_to_words(good, 8), CONFIG.noc)
    line = encode_flits(pkt.flits(CONFIG.noc), CONFIG.noc.flit_width)
    await uart.write(bytes([0x11, 0x22]) + line[:5] + bytes([0x33]) + line)
    # the good packet landed, and the broken bytes wrote nothing around it
    want = around[:0x80] + good + around[0x90:]
    assert await be.read_sram(xy, 0x380, 256) == want


@cocotb.test()
async def toy_step(dut):
    """The toy model loaded and stepped through the UART: its token and logits equal
    isasim's (and the toy's defined next token)."""
    _, be = await _backend(dut)
    out = []
    for backend in (be, IsaSimBackend(CONFIG)):
        drv = Driver(ToyCompiled(CONFIG), backend, timeout_cycles=400_000)
        await drv.load()
        dut._log.info("loaded at cycle %d", be.cycle)
        s = await drv.step([3], 0, logits=True)
        dut._log.info("stepped at cycle %d", be.cycle)
        out.append((s.token, s.logits.tolist()))
    assert out[0] == out[1], out
    assert out[0][0] == next_token(3, 0)
    dut._log.info("UART flits in %d, out %d, cycles %d", be.flits_in, be.flits_out, be.cycle)


@cocotb.test()
async def toy_scenario(dut):
    """The driver's toy scenario through the UART bridge equals isasim's findings."""
    _, be = await _backend(dut)
    got = await scenario(be)
    want = await scenario(IsaSimBackend(CONFIG))
    assert got["generate"][0] == got["expected_tokens"], got["generate"]
    for key in ("unaligned", "long_read", "last_word", "generate", "perf_instructions",
                "sram"):
        assert got[key] == want[key], f"{key}: UART {got[key]!r}, isasim {want[key]!r}"
    assert got["step"][0] == want["step"][0] and got["step"][1] == want["step"][1]
    for xy in CONFIG.tiles:
        g, w = got["statuses"][xy], want["statuses"][xy]
        assert (g.state, g.error) == (w.state, w.error), (xy, g, w)
    assert be.decoder.dropped == 0
    dut._log.info("UART flits in %d, out %d, cycles %d", be.flits_in, be.flits_out, be.cycle)
