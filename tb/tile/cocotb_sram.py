"""cocotb bench of the tile SRAM (``Sram``): both ports at once, random traffic.

A stimulus coroutine drives random requests on the read port ``r`` and the read/write port
``rw`` every cycle (byte-masked writes, same-word collisions between the ports, addresses
past the end).  A request monitor feeds the reference model (``tilemodel.Shadow``: a read on
``r`` sees this cycle's write on ``rw``, the port is transparent; out-of-range requests flag
``error`` and touch nothing), which queues the expected responses; a response monitor
records what the DUT returned one cycle later; a cocotb-bus scoreboard compares them.  With
``READ_WORDS`` R > 1 (the wide read) a read on ``rw`` returns the R words ``addr .. addr +
R - 1``, a word past the end as 0, ``error`` only for ``addr`` itself.

Environment: ``SRAM_DEPTH`` (words), ``READ_WORDS``, ``SEED``.
"""

from __future__ import annotations

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, with_timeout
from cocotb_bus.monitors import Monitor
from cocotb_bus.scoreboard import Scoreboard
from tilemodel import Shadow

DEPTH = int(os.environ.get("SRAM_DEPTH", "96"))
R = int(os.environ.get("READ_WORDS", "1"))
SEED = int(os.environ.get("SEED", "1"))
W = 8
FULL = (1 << W) - 1


class SramRequestMonitor(Monitor):
    """Emit, every cycle, ``(r_req, rw_req)``: ``None`` or the request seen on each port."""

    def __init__(self, dut, name, **kwargs):
        self.dut = dut
        self.name = name
        super().__init__(**kwargs)

    async def _monitor_recv(self):
        d = self.dut
        while True:
            # The request seen in ReadOnly of a cycle is the one the next edge registers.
            await ReadOnly()
            r = int(d.r__addr.value) if int(d.r__en.value) else None
            rw = None
            if int(d.rw__en.value):
                assert int(d.rw__ready.value) == 1, "the SRAM must grant every request"
                rw = (int(d.rw__we.value), int(d.rw__addr.value), int(d.rw__wdata.value),
                      int(d.rw__wmask.value))
            self._recv((r, rw))
            await RisingEdge(d.clk)


class SramResponseMonitor(Monitor):
    """Emit ``(port, addr, data, error)`` for every response (``data`` None for writes).

    Also checks that ``r.data`` holds while the read port is idle.
    """

    def __init__(self, dut, name, **kwargs):
        self.dut = dut
        self.name = name
        super().__init__(**kwargs)

    async def _monitor_recv(self):
        d = self.dut
        last_r = last_rw = None
        held = None
        while True:
            await ReadOnly()
            if last_r is not None:
                held = int(d.r__data.value)
                self._recv(("r", last_r, held, int(d.r__error.value)))
            elif held is not None:
                assert int(d.r__data.value) == held, "r.data changed without a request"
                assert int(d.r__error.value) == 0, "r.error without a request"
            if last_rw is not None:
                we, addr = last_rw
                self._recv(("rw", addr, None if we else int(d.rw__rdata.value),
                            int(d.rw__error.value)))
            last_r = int(d.r__addr.value) if int(d.r__en.value) else None
            last_rw = ((int(d.rw__we.value), int(d.rw__addr.value))
                       if int(d.rw__en.value) else None)
            await RisingEdge(d.clk)


class SramModel:
    """Reference model: turn observed requests into expected responses."""

    def __init__(self, expected):
        self.shadow = Shadow(DEPTH, W)
        self.expected = expected

    def observe(self, requests):
        """Queue the responses expected for one cycle of requests.

        The cycle's write on ``rw`` is applied before its read on ``r`` (``r`` is
        transparent for ``rw``'s writes)."""
        r, rw = requests
        rw_resp = None
        if rw is not None:
            we, addr, wdata, wmask = rw
            if we:
                rw_resp = ("rw", addr, None, int(addr >= DEPTH))
                self.shadow.write(addr, wdata, wmask)
            else:
                rw_resp = ("rw", addr, self.wide(addr), int(addr >= DEPTH))
        # Queued in the order the response monitor emits them: r, then rw.
        if r is not None:
            self.expected.append(("r", r, self.shadow.read(r), int(r >= DEPTH)))
        if rw_resp is not None:
            self.expected.append(rw_resp)

    def wide(self, addr):
        """The R words a read on ``rw`` at ``addr`` returns (0 for a word past the end)."""
        return sum((self.shadow.read(addr + k) if addr + k < DEPTH else 0) << (8 * W * k)
                   for k in range(R))


async def _setup(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for s in (dut.r__en, dut.rw__en, dut.rw__we, dut.r__addr, dut.rw__addr, dut.rw__wdata,
              dut.rw__wmask):
        s.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    expected = []
    sb = Scoreboard(dut, fail_immediately=True)
    model = SramModel(expected)
    SramRequestMonitor(dut, "requests", callback=model.observe)
    sb.add_interface(SramResponseMonitor(dut, "responses"), expected)
    return sb, expected


async def _drain(dut, expected):
    async def wait():
        while expected:
            await RisingEdge(dut.clk)
    await with_timeout(wait(), 100, "ns")


def _addr(rng):
    u = rng.random()
    if u < 0.5:
        return rng.randrange(8)                       # collisions between the ports
    if u < 0.9:
        return rng.randrange(DEPTH)
    if u < 0.95:
        return DEPTH - 1 - rng.randrange(4)           # a wide read's words past the end
    return rng.choice([DEPTH, DEPTH + 1, DEPTH + 8, 2 * DEPTH, 2 ** 16 - 1,
                       rng.randrange(DEPTH, 2 ** 16)])


@cocotb.test(timeout_time=200, timeout_unit="us")
async def random_traffic(dut):
    """Random requests on both ports every cycle, checked against the model."""
    sb, expected = await _setup(dut)
    rng = random.Random(SEED)
    for _ in range(4000):
        dut.r__en.value = int(rng.random() < 0.7)
        dut.r__addr.value = _addr(rng)
        dut.rw__en.value = int(rng.random() < 0.8)
        dut.rw__we.value = int(rng.random() < 0.5)
        dut.rw__addr.value = _addr(rng)
        dut.rw__wdata.value = rng.getrandbits(8 * W)
        dut.rw__wmask.value = rng.choice([FULL, rng.getrandbits(W), 1 << rng.randrange(W)])
        await RisingEdge(dut.clk)
    dut.r__en.value = 0
    dut.rw__en.value = 0
    await ClockCycles(dut.clk, 2)
    await _drain(dut, expected)
    assert sb.errors == 0


@cocotb.test(timeout_time=20, timeout_unit="us")
async def directed(dut):
    """Byte masks, read-during-write on the other port (new word), no wrap past the end."""
    sb, expected = await _setup(dut)

    async def cycle(r=None, rw=None):
        dut.r__en.value = int(r is not None)
        dut.r__addr.value = r or 0
        dut.rw__en.value = int(rw is not None)
        if rw is not None:
            we, addr, data, mask = rw
            dut.rw__we.value, dut.rw__addr.value = we, addr
            dut.rw__wdata.value, dut.rw__wmask.value = data, mask
        await RisingEdge(dut.clk)

    for a in range(DEPTH):      # the model starts at zero; the SRAM keeps the last test's
        await cycle(rw=(1, a, 0, FULL))
    await cycle(rw=(1, 3, 0x1111111111111111, FULL))
    await cycle(rw=(1, 3, 0x2222222222222222, 0b10000001))
    await cycle(r=3, rw=(1, 3, 0x3333333333333333, FULL))     # r sees the new word
    await cycle(r=3, rw=(1, 3, 0x4545454545454545, 0b00100100))  # new bytes 2 and 5 only
    await cycle(r=3, rw=(0, 3, 0, 0))
    await cycle(rw=(1, DEPTH + 3, 0x4444444444444444, FULL))  # would alias word 3 on wrap
    await cycle(r=DEPTH + 3, rw=(1, 2 ** 16 - 1, 0x55, FULL))
    await cycle(r=3)
    # wide reads: every start bank, across the rows, the last words (the rest reads 0)
    for a in range(DEPTH):
        await cycle(rw=(1, a, 0x0101010101010101 * (a & 0xFF), FULL))
    for a in (0, 1, 2, 3, 5, 6, 7, DEPTH - 4, DEPTH - 3, DEPTH - 2, DEPTH - 1):
        await cycle(r=a, rw=(0, a, 0, 0))
    await cycle(rw=(1, 4, 0x77, 0x01))
    await cycle(rw=(0, 3, 0, 0))                              # sees the write before it
    await cycle()
    await cycle()
    await _drain(dut, expected)
    assert sb.errors == 0
