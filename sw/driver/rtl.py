"""The RTL backend: a `chipotle.hw.chip.Chip` under cocotb, driven through its host link.

Use it inside a cocotb test (Verilator or Icarus) whose toplevel is a ``Chip``
(``chipotle.sim.cocotb_chip`` is one)::

    backend = RtlBackend(dut, config)
    await backend.power_on()          # clock, reset, host-link monitor
    driver = Driver(compiled, backend)

The host link is a pair of Amaranth streams (``i_host`` / ``o_host``, flattened to
``i_host__valid`` / ``__ready`` / ``__payload``).  Packets go in flit by flit (``valid``
held until ``ready``, the stream transfer rule; inputs change at falling edges); the host
always accepts (``o_host__ready`` is tied high).  The clock is cocotb's GPI clock (toggled
in C++), the monitor of ``o_host`` sleeps on the rising edge of ``o_host__valid`` and runs
per cycle only while flits arrive, and a wait for a doorbell sleeps on the doorbell event
with a coarse timer (to look at the tiles' ``status`` ports for an ERROR state), so the
chip computes with no Python work per cycle.

Members
-------
RtlBackend
    The backend.
"""

from __future__ import annotations

from collections import deque

import cocotb
from cocotb.clock import Clock
from cocotb.handle import Deposit, Immediate
from cocotb.simtime import get_sim_time
from cocotb.triggers import Event, FallingEdge, First, Lock, ReadOnly, RisingEdge, Timer

from chipotle.config import ChipConfig
from chipotle.hw.chip import RESET_LATENCY
from chipotle.hw.noc.packet import Packet
from chipotle.hw.tile.controller import N_PERF
from chipotle.hw.tile.netif import COUNTER_BASE, PERF_BASE, Reg

from . import hostlink as hl
from .backend import (
    CONTROLLER_PERF,
    INTERFACE_PERF,
    DoorbellTimeout,
    PacketBackend,
    TileFault,
    _check_range,
    _check_xy,
    decode_status,
)

__all__ = ["RtlBackend"]

_TAG_BITS = 16


class RtlBackend(PacketBackend):
    """The backend over a ``Chip`` simulated under cocotb.

    Parameters
    ----------
    dut : cocotb handle
        The ``Chip`` toplevel (ports ``clk``, ``rst``, ``i_host__*``, ``o_host__*``,
        ``status__<i>``).
    config : ChipConfig
        The configuration the ``Chip`` was elaborated with.
    clock_ns : int
        Clock period in ns (default 10).
    poll_cycles : int
        While waiting for a doorbell, look at the ``status`` ports every this many cycles
        for a tile in the ERROR state (default 2048).
    max_reads : int
        Reads kept outstanding per tile (default 2, the interface's read queue).
    clock : {"gpi", "py"}
        cocotb ``Clock`` implementation: ``"gpi"`` (default) toggles ``clk`` in the
        simulator interface's C++ with no Python work per cycle; ``"py"`` is a cocotb task
        woken at every clock edge (cocotb's default unless
        ``COCOTB_TRUST_INERTIAL_WRITES`` is set).

    Attributes
    ----------
    flits_in, flits_out : int
        Flits sent to and received from the chip.
    """

    def __init__(self, dut, config: ChipConfig, *, clock_ns: int = 10, poll_cycles: int = 2048,
                 max_reads: int = 2, clock: str = "gpi"):
        if clock not in ("gpi", "py"):
            raise ValueError(f"`clock` must be 'gpi' or 'py', not {clock!r}")
        self.dut = dut
        self.clock_impl = clock
        self.config = config
        self.noc = config.noc
        self.clock_ns = clock_ns
        self.poll_cycles = poll_cycles
        self.max_reads = max_reads
        self.flits_in = self.flits_out = 0
        self._t0 = 0
        self._bells: deque = deque()
        self._bell = Event()
        self._responses: dict = {}
        self._resp_event: dict = {}
        self._tag = 0
        self._lock = Lock()
        self._monitor = None
        self._last_bit = 1 << self.noc.flit_layout["last"].offset
        self._status_ports = [getattr(dut, f"status__{i}") for i in range(config.n_tiles)]

    # -- bring-up --------------------------------------------------------------------------------

    async def power_on(self, reset_cycles: int = 4) -> None:
        """Start the clock, hold ``rst`` for ``reset_cycles`` cycles, start the monitor."""
        dut = self.dut
        # Under Verilator the clock is written at once (vpiNoDelay) rather than as an
        # inertial write: cocotb's Verilator loop evaluates the model once before it applies
        # inertial writes, so each clock edge would cost two evaluations, and every
        # evaluation reruns the logic Verilator files under "input combinational".
        action = Immediate if cocotb.SIM_NAME.lower().startswith("verilator") else Deposit
        # Kept referenced: the GPI clock stops when its driver task is collected.
        self._clock = Clock(dut.clk, self.clock_ns, unit="ns", impl=self.clock_impl,
                            set_action=action)
        self._clock.start()
        dut.i_host__valid.value = 0
        dut.i_host__payload.value = 0
        dut.o_host__ready.value = 1
        dut.rst.value = 1
        for _ in range(reset_cycles):
            await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0
        # the mesh and the tiles leave reset `RESET_LATENCY` edges later: no flit before
        for _ in range(RESET_LATENCY):
            await RisingEdge(dut.clk)
        self._t0 = self._now()
        if self._monitor is None:
            self._monitor = cocotb.start_soon(self._receive())

    def _now(self) -> int:
        return int(get_sim_time(unit="ns")) // self.clock_ns

    @property
    def cycle(self) -> int:
        """Clock cycles since the end of `power_on`'s reset."""
        return self._now() - self._t0

    # -- host link -----------------------------------------------------------------------------

    async def send(self, packets) -> None:
        """Put ``packets`` (``Packet`` objects) on ``i_host``, flit by flit, in order."""
        dut = self.dut
        valid, ready, payload = dut.i_host__valid, dut.i_host__ready, dut.i_host__payload
        fall = FallingEdge(dut.clk)
        async with self._lock:
            # Inputs change at falling edges, half a cycle away from the rising edges where
            # the chip samples them, so no clock implementation can race them (the GPI
            # clock's rising-edge callbacks may run before the simulator applies the edge).
            # A flit written at one falling edge moves at the next rising edge if ``ready``
            # is high, as it would be written just after the rising edge before.  ``ready``
            # read at the falling edge is the value that rising edge samples: it is the
            # router's input FIFO's ``w_rdy`` (not full), a register's function that does
            # not depend on ``valid`` or ``payload``, so it has settled half a cycle before
            # and the flit written now cannot change it.  So one trigger per flit, not two
            # (a ``ReadOnly`` before each edge): stories260K's weight load on the 4 x 4 chip,
            # 142,644 cycles, took 14.5 s of wall time against 15.3 s on the ``-O3`` build
            # (half of it cocotb and this loop by ``COCOTB_ENABLE_PROFILING``, session 35).
            await fall
            for pkt in packets:
                for flit in pkt.flits(self.noc):
                    payload.value = flit
                    valid.value = 1
                    while True:
                        taken = ready.value == 1
                        await fall
                        if taken:
                            break
                    self.flits_in += 1
            valid.value = 0

    async def _receive(self) -> None:
        """Monitor ``o_host``: reassemble packets, file doorbells and read responses."""
        dut = self.dut
        valid, payload = dut.o_host__valid, dut.o_host__payload
        clk, ro, rise = RisingEdge(dut.clk), ReadOnly(), RisingEdge(dut.o_host__valid)
        flits = []
        while True:
            await ro
            if valid.value != 1:
                await rise
                await ro
            flit = int(payload.value)
            flits.append(flit)
            self.flits_out += 1
            if flit & self._last_bit:
                self._file(hl.parse(Packet.from_flits(flits, self.noc)))
                flits = []
            await clk   # ready is tied high: the flit moves at this edge

    def _file(self, msg) -> None:
        if isinstance(msg, hl.Doorbell):
            self._bells.append((msg.tile, msg.code))
            self._bell.set()
            return
        self._responses[msg.tag] = msg
        ev = self._resp_event.pop(msg.tag, None)
        if ev is not None:
            ev.set()

    def _next_tag(self) -> int:
        self._tag = (self._tag + 1) % (1 << _TAG_BITS)
        return self._tag

    async def _reads(self, xy, requests, space: int) -> list[list[int]]:
        """Issue ``(addr, count)`` reads of one tile, at most `max_reads` outstanding."""
        xy = _check_xy(self.config, xy)
        build = hl.reg_read if space else hl.sram_read
        out, pending = [], deque()

        async def collect():
            tag, ev, count, addr = pending.popleft()
            await ev.wait()
            resp = self._responses.pop(tag)
            if resp.tile != xy or len(resp.words) != count:
                raise RuntimeError(f"read of {count} words at {addr:#x} from tile {xy} was "
                                   f"answered by {resp.tile} with {len(resp.words)} words")
            out.append(list(resp.words))

        for addr, count in requests:
            if len(pending) >= self.max_reads:
                await collect()
            tag = self._next_tag()
            ev = Event()
            self._resp_event[tag] = ev
            pending.append((tag, ev, count, addr))
            await self.send([build(xy, addr, count, tag, self.noc)])
        while pending:
            await collect()
        return out

    # -- back door (simulation only) -------------------------------------------------------------

    def _banks(self, xy):
        xy = _check_xy(self.config, xy)
        try:
            sram = getattr(self.dut, f"tile_{xy[0]}_{xy[1]}").core.sram
            return [getattr(sram, f"bank{b}") for b in range(self.config.n_banks)]
        except AttributeError:
            raise RuntimeError("the back door needs the SRAM arrays, which this build does not "
                               "expose (Verilator: build with run_cocotb(public="
                               "chipotle.hw.chip.BACKDOOR_SIGNALS))") from None

    def backdoor_read_sram(self, xy, addr: int, nbytes: int) -> bytes:
        """Return SRAM bytes read straight from the simulator's bank arrays (no cycles).

        Word ``a`` lives in bank ``a % n_banks``, row ``a // n_banks`` (``hw/tile/sram.py``).
        """
        _check_range(self.config, addr, nbytes, "SRAM read")
        w, nb = self.config.word_bytes, self.config.n_banks
        banks = [b.value for b in self._banks(xy)]
        lo, hi = addr // w, -(-(addr + nbytes) // w)
        raw = hl.words_to_bytes([int(banks[a % nb][a // nb]) for a in range(lo, hi)], w)
        return raw[addr % w:addr % w + nbytes]

    async def backdoor_write_sram(self, xy, addr: int, data: bytes, *,
                                  skip_zero: bool = False) -> None:
        """Write SRAM bytes straight into the simulator's bank arrays (no cycles).

        Partial words are merged with the array's contents.  ``skip_zero`` leaves out
        all-zero words.  Only for simulation: the host link is the chip's only real way in.
        """
        data = bytes(data)
        _check_range(self.config, addr, len(data), "SRAM write")
        if not data:
            return
        w, nb = self.config.word_bytes, self.config.n_banks
        lo, hi = addr - addr % w, -(-(addr + len(data)) // w) * w
        if (lo, hi) != (addr, addr + len(data)):
            old = bytearray(self.backdoor_read_sram(xy, lo, hi - lo))
            old[addr - lo:addr - lo + len(data)] = data
            data = bytes(old)
        banks = self._banks(xy)
        base = lo // w
        await FallingEdge(self.dut.clk)     # not in a ReadOnly phase, not at a sampling edge
        for k, word in enumerate(hl.bytes_to_words(data, w)):
            if skip_zero and not word:
                continue
            a = base + k
            banks[a % nb][a // nb].value = word

    # -- Backend ---------------------------------------------------------------------------------

    async def reset(self) -> None:
        """`PacketBackend.reset`, and the doorbell event cleared with the doorbells."""
        await super().reset()
        self._bell.clear()

    async def _wait_cycles(self, n: int) -> None:
        await Timer(n * self.clock_ns, unit="ns")

    def _port_fault(self):
        for i, port in enumerate(self._status_ports):
            v = port.value
            if not v.is_resolvable:
                continue
            s = decode_status(int(v))
            if s.state == "error":
                return TileFault(self.config.tiles[i], s.error, s.pc)
        return None

    async def wait_done(self, timeout_cycles: int) -> tuple[tuple[int, int], int]:
        """Return ``(xy, code)`` of the next doorbell.

        Raises
        ------
        TileFault
            If a tile's status port shows the ERROR state while waiting.
        DoorbellTimeout
            If none arrives within ``timeout_cycles`` cycles (with every tile's status).
        """
        deadline = self.cycle + timeout_cycles
        while not self._bells:
            fault = self._port_fault()
            if fault is not None:
                raise fault
            left = deadline - self.cycle
            if left <= 0:
                statuses = {xy: await self.status(xy) for xy in self.config.tiles}
                raise DoorbellTimeout(timeout_cycles, statuses)
            self._bell.clear()
            await First(self._bell.wait(),
                        Timer(min(left, self.poll_cycles) * self.clock_ns, unit="ns"))
        return self._bells.popleft()

    async def read_registers_many(self, requests) -> list[list[int]]:
        """Answer ``[(xy, register, count), ...]`` register reads, sent in the order given
        with every tile's in flight at once (at most `max_reads` outstanding per tile, the
        interface's read queue: a request to a tile that has that many waits for its
        oldest answer), one list of words per request, in request order.  Callers put the
        tiles' requests in turn, so that no tile's queue holds up the others'.

        Raises
        ------
        RuntimeError
            If an answer comes from another tile or has another length.
        """
        reqs = [(_check_xy(self.config, xy), int(reg), int(count)) for xy, reg, count in requests]
        out: list = [None] * len(reqs)
        pending: dict = {}            # xy -> deque of (index, tag, event)

        async def collect(xy):
            i, tag, ev = pending[xy].popleft()
            await ev.wait()
            resp = self._responses.pop(tag)
            _, reg, count = reqs[i]
            if resp.tile != xy or len(resp.words) != count:
                raise RuntimeError(f"register read of {count} words at {reg:#x} from tile {xy} "
                                   f"was answered by {resp.tile} with {len(resp.words)} words")
            out[i] = list(resp.words)

        packets = []
        for i, (xy, reg, count) in enumerate(reqs):
            q = pending.setdefault(xy, deque())
            if len(q) >= self.max_reads:
                await self.send(packets)
                packets = []
                await collect(xy)
            tag = self._next_tag()
            ev = Event()
            self._resp_event[tag] = ev
            q.append((i, tag, ev))
            packets.append(hl.reg_read(xy, reg, count, tag, self.noc))
        await self.send(packets)
        for xy, q in pending.items():
            while q:
                await collect(xy)
        return out

    async def read_tiles_many(self, tiles, *, perf: bool, state: bool) -> dict:
        """`chipotle.driver.backend.read_tiles` with every read in flight at once: per tile
        two reads for ``perf`` (the controller's and the interface's counters) and two for
        ``state`` (``STATUS``, the synchronisation counters)."""
        tiles = [_check_xy(self.config, xy) for xy in tiles]
        kinds = []
        if perf:
            kinds += [(PERF_BASE, N_PERF), (Reg.FLITS_SENT, len(INTERFACE_PERF))]
        if state:
            kinds += [(Reg.STATUS, 1), (COUNTER_BASE, self.config.n_counters)]
        # the tiles in turn: every tile's first read, then every tile's second, ...
        words = await self.read_registers_many([(xy, reg, n) for reg, n in kinds
                                                for xy in tiles])
        out = {}
        for t, xy in enumerate(tiles):
            w = words[t::len(tiles)]
            d = out[xy] = {}
            if perf:
                d["perf"] = dict(zip(CONTROLLER_PERF + INTERFACE_PERF, w[0] + w[1], strict=True))
                w = w[2:]
            if state:
                d["status"] = decode_status(w[0][0])
                d["counters"] = w[1]
        return out
