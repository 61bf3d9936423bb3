"""cocotb verification components of the tile benches.

Members
-------
SramMaster
    Driver of an :class:`~chipotle.hw.tile.SramSignature` port of the DUT (``host``).
ResultMonitor
    Monitor of the matrix result stream, decoding words into ``(n, last, acc)`` tuples.
TileBench
    Driver + monitor + reference model + scoreboard around a ``TileDatapath``.
wait_until
    Wait for a condition with a watchdog.
"""

from __future__ import annotations

import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Lock, ReadOnly, RisingEdge, with_timeout
from cocotb_bus.drivers import BusDriver
from cocotb_bus.scoreboard import Scoreboard
from tilemodel import Shadow, decode_result, encode_mcmd, matmul_ref, pack_rows

from tbcommon.stream import StreamDriver, StreamMonitor, StreamSink

__all__ = ["SramMaster", "ResultMonitor", "TileBench", "wait_until"]

CLOCK_NS = 10


async def wait_until(clk, cond, cycles, what):
    """Wait, at most ``cycles`` clock cycles, until ``cond()`` is true (sampled after edges).

    Raises ``AssertionError`` naming ``what`` when the watchdog expires.
    """
    async def poll():
        await ReadOnly()
        while not cond():
            await RisingEdge(clk)
            await ReadOnly()
    try:
        await with_timeout(poll(), cycles * CLOCK_NS, "ns")
    except TimeoutError:
        raise AssertionError(f"watchdog: {what} not within {cycles} cycles") from None
    await RisingEdge(clk)


def bank_words(banks, count):
    """Words ``0 .. count - 1`` read straight from a tile SRAM's bank arrays (simulator
    handles, no clock cycles): word ``a`` is row ``a // n_banks`` of bank ``a % n_banks``
    (``hw/tile/sram.py``)."""
    rows = [h.value for h in banks]
    nb = len(rows)
    return [int(rows[a % nb][a // nb]) for a in range(count)]


class SramMaster(BusDriver):
    """Drive a read/write SRAM port (grant handshake, L-cycle read latency), pipelined.

    Every request is held until granted (``ready`` sampled in ``ReadOnly`` before the edge);
    the word of a granted read (and the ``error`` of any request) is sampled L cycles
    later.  One request per cycle when always granted.

    Parameters
    ----------
    entity, name, clock
        DUT, port prefix (``"host"``), clock.
    max_wait : int
        Watchdog: cycles a request may wait for its grant.
    latency : int
        L of the port (``SramSignature.latency``, ``TileConfig.sram_latency``; default 1).
    """

    _signals = ["en", "we", "addr", "wmask", "wdata", "ready", "rdata", "error"]

    def __init__(self, entity, name, clock, *, max_wait=1000, latency=1, **kwargs):
        super().__init__(entity, name, clock, bus_separator="__", **kwargs)
        self.max_wait = max_wait
        self.latency = latency
        # cocotb-bus's own lock (an Event and a flag) lets every waiter through at once
        # when it is released: with two transfers waiting, both drove the port and one
        # was lost (three write-and-bump arrivals within a transfer's cycles)
        self._lock = Lock()

    async def _acquire_lock(self):
        await self._lock.acquire()

    def _release_lock(self):
        self._lock.release()
        self.idle()

    def idle(self):
        """Drive the port idle: no request, every field 0."""
        self.bus.en.value = 0
        self.bus.we.value = 0
        self.bus.addr.value = 0
        self.bus.wmask.value = 0
        self.bus.wdata.value = 0

    async def transfer(self, requests):
        """Issue ``requests`` ``(we, addr, wdata, wmask)`` in order; return ``(rdata, error)``.

        ``rdata`` is ``None`` for writes.  Holds the driver's lock while it runs.
        """
        out = []
        await self._acquire_lock()
        try:
            clk = RisingEdge(self.clock)
            # pending[k]: the index of the request granted k + 1 cycles ago (or None)
            pending = [None] * self.latency
            i = waited = 0
            while i < len(requests) or any(p is not None for p in pending):
                if i < len(requests):
                    we, addr, wdata, wmask = requests[i]
                    self.bus.en.value = 1
                    self.bus.we.value = we
                    self.bus.addr.value = addr
                    self.bus.wdata.value = wdata
                    self.bus.wmask.value = wmask
                else:
                    self.bus.en.value = 0
                    self.bus.we.value = 0
                await ReadOnly()
                if pending[-1] is not None:
                    we = requests[pending[-1]][0]
                    out.append((None if we else int(self.bus.rdata.value),
                                int(self.bus.error.value)))
                granted = i < len(requests) and int(self.bus.ready.value) == 1
                await clk
                pending = [i if granted else None, *pending[:-1]]
                if granted:
                    i += 1
                    waited = 0
                elif i < len(requests):
                    waited += 1
                    assert waited < self.max_wait, f"watchdog: {self.name} never granted"
            self.bus.en.value = 0
            self.bus.we.value = 0
        finally:
            self._release_lock()
        return out

    async def write(self, addr, words, mask=None):
        """Write ``words`` (an int or a list) from ``addr``; return the error flags."""
        words = [words] if isinstance(words, int) else list(words)
        full = (1 << len(self.bus.wmask)) - 1
        reqs = [(1, addr + i, w, full if mask is None else mask) for i, w in enumerate(words)]
        return [e for _, e in await self.transfer(reqs)]

    async def read(self, addr, count=1):
        """Read ``count`` words from ``addr``; return ``[(word, error)]``."""
        return await self.transfer([(0, addr + i, 0, 0) for i in range(count)])

    async def _driver_send(self, transaction, sync=True):
        # transfer() takes the lock itself; BusDriver.send() does not hold it.
        await self.transfer([transaction])


class ResultMonitor(StreamMonitor):
    """Record matrix results as ``(n, last, (acc_0, .., acc_{M-1}))`` tuples."""

    def __init__(self, entity, name, clock, *, max_m, **kwargs):
        self.max_m = max_m
        super().__init__(entity, name, clock, **kwargs)

    def _recv(self, transaction):
        n, last, acc = decode_result(transaction, self.max_m)
        super()._recv((n, last, tuple(acc)))


class TileBench:
    """Assemble the verification components around a ``TileDatapath``.

    Parameters
    ----------
    dut
        The DUT handle.
    cfg : TileConfig
        Its configuration.
    seed : int
        Seeds every random generator.
    stall : float
        Probability that the result sink drops ``ready`` in a cycle.
    idle : float
        Probability of an idle cycle before each command.
    """

    def __init__(self, dut, cfg, *, seed=1, stall=0.0, idle=0.0):
        self.dut = dut
        self.cfg = cfg
        self.clk = dut.clk
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.host = SramMaster(dut, "host", dut.clk, latency=cfg.sram_latency)
        self.mcmd = StreamDriver(dut, "i_mcmd", dut.clk, idle_prob=idle,
                                 rng=random.Random(self.rng.random()))
        self.kvcmd = StreamDriver(dut, "i_kvcmd", dut.clk, idle_prob=idle,
                                  rng=random.Random(self.rng.random()))
        self.sink = StreamSink(dut, "o_res", dut.clk, stall_prob=stall,
                               rng=random.Random(self.rng.random()))
        self.expected = []
        self.mon = ResultMonitor(dut, "o_res", dut.clk, max_m=cfg.max_m)
        self.sb = Scoreboard(dut, fail_immediately=True)
        self.sb.add_interface(self.mon, self.expected)
        self.shadow = Shadow(cfg.sram_words, cfg.word_bytes)
        self._clock_started = False

    async def start(self):
        """Start the clock and the sink, and reset the DUT."""
        if not self._clock_started:
            cocotb.start_soon(Clock(self.clk, CLOCK_NS, unit="ns").start())
            self._clock_started = True
        await self.reset()
        cocotb.start_soon(self.sink.run())

    async def reset(self):
        """Pulse reset for 2 cycles (clears errors and state, not the SRAM)."""
        self.dut.rst.value = 1
        await ClockCycles(self.clk, 2)
        self.dut.rst.value = 0
        await RisingEdge(self.clk)

    async def stop(self, cycles=20000, quiet=0):
        """Wait until every expected result arrived and the DUT is idle; check the board.

        ``quiet``: cycles to watch after that, in which no further result may arrive (the
        monitor hands a stray one to the scoreboard, which counts it), for a command that
        must produce none.
        """
        await wait_until(self.clk, lambda: not self.expected and not int(self.dut.busy.value),
                         cycles, f"{len(self.expected)} expected results")
        if quiet:
            await ClockCycles(self.clk, quiet)
        assert self.sb.errors == 0, f"scoreboard recorded {self.sb.errors} mismatches"

    # -- stimulus + reference model ---------------------------------------------------------

    async def load(self, addr, words):
        """Write ``words`` at ``addr`` through the host port and into the shadow."""
        errs = await self.host.write(addr, words)
        assert not any(errs), f"unexpected SRAM error loading {len(words)} words at {addr}"
        self.shadow.write_words(addr, words)

    def expect_matmul(self, x, w):
        """Queue the results of ``X @ W.T`` on the scoreboard (padded to M rows)."""
        y = matmul_ref(x, w)
        M = self.cfg.max_m
        n = w.shape[0]
        for i in range(n):
            acc = [int(v) for v in y[:, i]] + [0] * (M - x.shape[0])
            self.expected.append((i, int(i == n - 1), tuple(acc)))

    async def matmul(self, x, w, *, w_base, x_base, w_stride=None, x_stride=None, garbage=True,
                     x_keep=False):
        """Place W (and X unless ``x_keep``) in SRAM, queue the reference, send the command."""
        W = self.cfg.word_bytes
        k = w.shape[1]
        rw = -(-k // W)
        w_stride = rw if w_stride is None else w_stride
        x_stride = rw if x_stride is None else x_stride
        g = self.np_rng if garbage else None
        await self.load(w_base, pack_rows(w, W, stride=w_stride, rng=g))
        if not x_keep:
            await self.load(x_base, pack_rows(x, W, stride=x_stride, rng=g))
        self.expect_matmul(x, w)
        await self.mcmd.send(encode_mcmd(w_base=w_base, w_stride=w_stride, n=w.shape[0], k=k,
                                         x_base=x_base, x_stride=x_stride, m=x.shape[0],
                                         x_keep=int(x_keep)))

    async def fill_sram(self):
        """Write random words over the whole SRAM (contents survive reset and tests)."""
        bits = 8 * self.cfg.word_bytes
        await self.load(0, [self.rng.getrandbits(bits) for _ in range(self.cfg.sram_words)])

    async def check_sram(self, lo=0, hi=None):
        """Read words ``lo .. hi - 1`` back and compare them with the shadow."""
        hi = self.cfg.sram_words if hi is None else hi
        got = await self.host.read(lo, hi - lo)
        bad = [(lo + i, w, self.shadow.read(lo + i)) for i, (w, _) in enumerate(got)
               if w != self.shadow.read(lo + i)]
        assert not bad, "SRAM differs from the model at " + ", ".join(
            f"{a}: {g:#x} != {e:#x}" for a, g, e in bad[:8])
