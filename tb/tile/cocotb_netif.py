"""cocotb bench of the network interface: a mesh of tiles (network interface + SRAM each),
the host link at the edge (``netif_dut.NetifMesh``).

Verification components: the NoC's packet driver and monitor (``tb/noc/nocbench.py``) on the
host link, ``tbcommon.stream`` drivers/monitors/sinks on every controller-side port, the
reference model ``netifmodel.TileRef`` per tile (and ``chipotle.isasim`` for SEND/WAIT), and a
cocotb-bus scoreboard for what reaches the host (read responses, doorbells) and what each
tile offers its controller (starts, instruction-memory writes, completions).

Environment: ``MESH_W``, ``MESH_H``, ``SRAM_BYTES``, ``N_COUNTERS``, ``COUNTER_WIDTH``,
``IMEM_WORDS``, ``N_PERF``, ``NETIF_SCALE`` (fraction of the random traffic; Icarus runs
less), ``SEED``.
"""

from __future__ import annotations

import os
import random
import sys
from collections import defaultdict, deque
from pathlib import Path

import cocotb
import numpy as np
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotb_bus.scoreboard import Scoreboard
from netif_dut import perf_value, status_value
from netifmodel import (
    TileRef,
    control,
    counter_add,
    imem_write,
    reg_read,
    reset,
    send_check,
    sram_read,
    sram_write,
    start,
)

from chipotle.hw.noc import HOST, Head, NocConfig, Packet, PacketType, decode_head
from chipotle.hw.tile.netif import (
    COUNTER_BASE,
    NetCommand,
    NetCompletion,
    NetError,
    NetifConfig,
    NetOp,
    Reg,
)
from chipotle.isa import ErrorCode, IsaConfig
from chipotle.isasim import IsaSim
from tbcommon.stream import StreamDriver, StreamMonitor, StreamSink

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "noc"))
from nocbench import CLK_NS, PacketDriver, PacketMonitor, cycle  # noqa: E402

W_MESH = int(os.environ.get("MESH_W", "2"))
H_MESH = int(os.environ.get("MESH_H", "2"))
SRAM_BYTES = int(os.environ.get("SRAM_BYTES", "4096"))
N_COUNTERS = int(os.environ.get("N_COUNTERS", "4"))
COUNTER_WIDTH = int(os.environ.get("COUNTER_WIDTH", "8"))
IMEM_WORDS = int(os.environ.get("IMEM_WORDS", "64"))
N_PERF = int(os.environ.get("N_PERF", "2"))
SCALE = float(os.environ.get("NETIF_SCALE", "1.0"))
SEED = int(os.environ.get("SEED", "1"))

NOC = NocConfig()
TILES = [(x, y) for y in range(H_MESH) for x in range(W_MESH)]
CFGS = {xy: NetifConfig(x=xy[0], y=xy[1], width=W_MESH, height=H_MESH, noc=NOC,
                        sram_bytes=SRAM_BYTES, imem_words=IMEM_WORDS, n_counters=N_COUNTERS,
                        counter_width=COUNTER_WIDTH, n_perf=N_PERF) for xy in TILES}
WORDS = SRAM_BYTES // 8
MAXLEN = NOC.max_length


def _n(k: int) -> int:
    """Scale a count of random operations for the simulator at hand (at least 1)."""
    return max(1, int(k * SCALE))


class _Tx:
    """A packet handed to the host's :class:`PacketDriver`."""

    def __init__(self, flits):
        self.flits = flits
        self.t_head = self.t_tail = None


def _pack(layout, fields) -> int:
    return data.Layout.cast(layout).const(fields).as_value().value


def _unpack(layout, value: int) -> dict:
    out = {}
    for name, fld in data.Layout.cast(layout):
        width = fld.width
        out[name] = (value >> fld.offset) & ((1 << width) - 1)
    return out


class HostScoreboard(Scoreboard):
    """Check packets reaching the host: per source tile, in order, exactly as the model says."""

    def __init__(self, dut):
        super().__init__(dut, fail_immediately=True)
        self.expected: dict = defaultdict(deque)
        self.received: list[Packet] = []

    def expect(self, src, pkt: Packet) -> None:
        self.expected[src].append(pkt)

    def outstanding(self) -> int:
        return sum(len(q) for q in self.expected.values())

    def check(self, flits) -> None:
        words = [f & ((1 << NOC.payload_width) - 1) for f in flits]
        pkt = Packet(decode_head(words[0], NOC), tuple(words[1:]))
        src = (pkt.head.src_x, pkt.head.src_y)
        queue = self.expected[src]
        if not queue:
            raise AssertionError(f"unexpected packet at the host: {pkt.describe(NOC)}")
        want = queue.popleft()
        if pkt != want:
            pairs = zip(pkt.payload, want.payload, strict=False)
            diff = [i for i, (a, b) in enumerate(pairs) if a != b]
            raise AssertionError(
                f"packet from {src} at cycle {cycle()}: got {pkt.describe(NOC)}, expected "
                f"{want.describe(NOC)}; payload differs at words {diff[:8]}")
        self.received.append(pkt)


class NetifBench:
    """Drivers, monitors, models and scoreboard around ``NetifMesh``."""

    def __init__(self, dut, *, seed=SEED, idle=0.1, host_stall=0.3, ctrl_stall=0.3):
        self.dut = dut
        self.rng = random.Random(seed)
        self.idle, self.host_stall, self.ctrl_stall = idle, host_stall, ctrl_stall
        self.model = {xy: TileRef(CFGS[xy], perf=[perf_value(i, k) for k in range(N_PERF)],
                                  status=status_value(i)) for i, xy in enumerate(TILES)}
        self.starts = {xy: [] for xy in TILES}
        self.imem = {xy: [] for xy in TILES}
        self.done = {xy: deque() for xy in TILES}
        self.commands = {xy: 0 for xy in TILES}     # commands issued on each i_cmd

    def idx(self, xy) -> int:
        return TILES.index(tuple(xy))

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        dut = self.dut
        cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        self.host = PacketDriver(dut, "i_host", dut.clk, idle_prob=self.idle,
                                 rng=random.Random(self.rng.random()))
        self.host_mon = PacketMonitor(dut, "o_host", dut.clk, cfg=NOC)
        self.board = HostScoreboard(dut)
        self.board.add_interface(self.host_mon, [], compare_fn=self.board.check)
        self.sinks = [StreamSink(dut, "o_host", dut.clk, stall_prob=self.host_stall,
                                 rng=random.Random(self.rng.random()))]
        self.cmd = {}
        for xy in TILES:
            i = self.idx(xy)
            self.cmd[xy] = StreamDriver(dut, f"i_cmd__{i}", dut.clk)
            getattr(dut, f"i_wait__{i}__valid").value = 0
            for port, sink in (("o_start", self.starts[xy]), ("o_imem", self.imem[xy]),
                               ("o_cmd_done", self.done[xy])):
                name = f"{port}__{i}"
                self.sinks.append(StreamSink(dut, name, dut.clk, stall_prob=self.ctrl_stall,
                                             rng=random.Random(self.rng.random())))
                StreamMonitor(dut, name, dut.clk, callback=sink.append)
        for s in self.sinks:
            cocotb.start_soon(s.run())

    async def reset(self) -> None:
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    # -- host side ----------------------------------------------------------------------------

    def send(self, pkt: Packet, *, flits=None) -> None:
        """Queue a host packet; the model answers it now (packets to one tile stay in order)."""
        dst = (pkt.head.x0, pkt.head.y0)
        for resp in self.model[dst].receive(pkt):
            self.board.expect(dst, resp)
        self.host.append(_Tx(flits or pkt.flits(NOC)))

    def read(self, xy, addr: int, count: int) -> None:
        """Queue a host read of SRAM words (the scoreboard checks the answer)."""
        self.send(sram_read(xy, addr, count, self.rng.getrandbits(20), NOC))

    async def drain(self, *, stall_cycles=3000) -> None:
        """Wait until every host packet went in and every expected answer came out."""
        last, t_change = None, cycle()
        while self.board.outstanding() or self.host._sendQ or self.host.busy:
            await ClockCycles(self.dut.clk, 20)
            progress = (len(self.board.received), self.host_mon.flits_seen,
                        len(self.host._sendQ))
            if progress != last:
                last, t_change = progress, cycle()
            elif cycle() - t_change > stall_cycles:
                raise AssertionError(f"watchdog: nothing moved for {stall_cycles} cycles; "
                                     f"{self.board.outstanding()} answer(s) outstanding")
        await ClockCycles(self.dut.clk, 30)
        assert not self.host_mon.current, (
            f"a packet to the host left unfinished: {len(self.host_mon.current)} flits")

    # -- controller side ----------------------------------------------------------------------

    async def command(self, xy, op=NetOp.SEND, *, src=0, dst=0, length=0, rect=(0, 0, 0, 0),
                      counter=0, code=0, timeout=20_000) -> ErrorCode:
        """Issue a command on tile ``xy``'s ``i_cmd``; return the completion's error."""
        fields = {"op": op, "src": src, "dst": dst, "length": length,
                  "rect": dict(zip(("x0", "x1", "y0", "y1"), rect, strict=True)),
                  "counter": counter, "code": code}
        if op == NetOp.DONE:
            # Expected before it is issued: the doorbell may beat the completion back.
            head = Head.unicast(PacketType.CONTROL, HOST, xy, addr=Reg.DOORBELL, length=1,
                                cfg=NOC)
            self.board.expect(xy, Packet(head, (code,)))
        before = len(self.done[xy])
        self.commands[xy] += 1
        await self.cmd[xy].send(_pack(NetCommand, fields))
        t0 = cycle()
        while len(self.done[xy]) == before:
            await RisingEdge(self.dut.clk)
            assert cycle() - t0 < timeout, f"watchdog: no completion of {op.name} on {xy}"
        comp = _unpack(NetCompletion, self.done[xy][-1])
        assert comp["op"] == op.value, comp
        err = ErrorCode(comp["error"])
        # Model: SEND copies and bumps at every receiver.
        if op == NetOp.SEND:
            cmd = {"src": src, "dst": dst, "length": length, "rect": rect, "counter": counter}
            assert err == send_check(CFGS[xy], cmd), (err, cmd)
            if err == ErrorCode.NONE:
                words = self.model[xy].sram[src // 8:(src + length) // 8]
                x0, x1, y0, y1 = rect
                for ry in range(y0, y1 + 1):
                    for rx in range(x0, x1 + 1):
                        r = self.model[rx, ry]
                        r.sram[dst // 8:dst // 8 + len(words)] = words
                        r.bump(counter, 1)
            else:
                self.model[xy].flag(NetError.SEND_REFUSED)
        return err

    def counters(self, xy) -> list[int]:
        """Return tile ``xy``'s counters (from the ``counters`` port)."""
        v = int(getattr(self.dut, f"counters__{self.idx(xy)}").value)
        m = (1 << COUNTER_WIDTH) - 1
        return [(v >> (COUNTER_WIDTH * c)) & m for c in range(N_COUNTERS)]

    def errors(self, xy) -> int:
        """Return tile ``xy``'s error flags (from the ``errors`` port)."""
        value = getattr(self.dut, f"errors__{self.idx(xy)}").value
        assert value.is_resolvable, f"errors of {xy} not resolvable: {value}"
        return int(value)

    async def until_counter(self, xy, c, value, timeout=20_000) -> None:
        """Wait until counter ``c`` of ``xy`` holds ``value`` (the bump has landed)."""
        t0 = cycle()
        while True:
            await ReadOnly()
            if self.counters(xy)[c] == value:
                break
            await RisingEdge(self.dut.clk)
            assert cycle() - t0 < timeout, (
                f"watchdog: counter {c} of {xy} holds {self.counters(xy)[c]}, not {value}")
        await RisingEdge(self.dut.clk)

    async def wait(self, xy, c, need, *, timeout=20_000) -> int:
        """Run a WAIT on tile ``xy``; return the cycle it was granted (model updated)."""
        i = self.idx(xy)
        valid = getattr(self.dut, f"i_wait__{i}__valid")
        ready = getattr(self.dut, f"i_wait__{i}__ready")
        getattr(self.dut, f"i_wait__{i}__payload").value = c | need << 8
        valid.value = 1
        t0 = cycle()
        while True:
            await ReadOnly()
            if int(ready.value):
                held = self.counters(xy)[c]
                assert held >= need, f"WAIT granted with counter {c} = {held} < {need}"
                break
            await RisingEdge(self.dut.clk)
            assert cycle() - t0 < timeout, f"watchdog: WAIT {c}, {need} on {xy} never granted"
        granted = cycle()
        await RisingEdge(self.dut.clk)
        valid.value = 0
        self.model[xy].counters[c] -= need
        return granted

    def imem_written(self, xy) -> dict:
        """Return ``{address: instruction}`` of what tile ``xy`` offered on ``o_imem`` (the
        last word written at each address)."""
        return {word & 0xFFFF: word >> 16 for word in self.imem[xy]}

    def check_ports(self) -> None:
        """Compare every tile's counters, error flags, starts and instruction-memory writes
        with the model, and its completions with the commands issued (a packet that pulsed
        ``o_start`` or ``o_imem`` where it should not, or a second completion, shows on any
        tile)."""
        for xy in TILES:
            assert len(self.done[xy]) == self.commands[xy], (
                f"{len(self.done[xy])} completions on {xy} for {self.commands[xy]} commands")
            assert self.starts[xy] == self.model[xy].starts, (
                f"starts of {xy}: {self.starts[xy]} != {self.model[xy].starts}")
            assert self.imem_written(xy) == self.model[xy].imem, (
                f"imem writes of {xy}: {self.imem_written(xy)} != {self.model[xy].imem}")
            assert self.counters(xy) == self.model[xy].counters, (
                f"counters of {xy}: {self.counters(xy)} != {self.model[xy].counters}")
            assert self.errors(xy) == self.model[xy].errors, (
                f"errors of {xy}: {NetError(self.errors(xy))!r} != "
                f"{NetError(self.model[xy].errors)!r}")

    def fill(self, xy) -> None:
        """Queue host writes of random words over the whole SRAM of ``xy``."""
        for a in range(0, WORDS, MAXLEN):
            self.send(sram_write(xy, a, _words(self.rng, min(MAXLEN, WORDS - a)), NOC))

    def read_all(self, xy) -> None:
        """Read the whole SRAM of ``xy`` back (checked against the model)."""
        for a in range(0, WORDS, MAXLEN):
            self.read(xy, a, min(MAXLEN, WORDS - a))


async def _bench(dut, **kw) -> NetifBench:
    tb = NetifBench(dut, **kw)
    await tb.start()
    await tb.reset()
    return tb


def _words(rng, n):
    return [rng.getrandbits(64) for _ in range(n)]


@cocotb.test()
async def host_sram(dut):
    """Host writes of 1, odd and max (255) words to every tile, read back; registers."""
    tb = await _bench(dut)
    rng = tb.rng
    for xy in TILES:
        for addr, n in ((0, 1), (3, 37), (WORDS - MAXLEN, MAXLEN), (WORDS - 1, 1)):
            tb.send(sram_write(xy, addr, _words(rng, n), NOC))
        for addr, n in ((0, 1), (3, 37), (WORDS - MAXLEN, MAXLEN), (40, 2)):
            tb.read(xy, addr, n)
        tb.send(reg_read(xy, Reg.ID, 1, 7, NOC))
        tb.send(reg_read(xy, Reg.STATUS, 1, 8, NOC))
        tb.send(reg_read(xy, 0x20, N_PERF, 9, NOC))
    for _ in range(_n(12)):
        xy = rng.choice(TILES)
        n = rng.randint(1, MAXLEN)
        a = rng.randrange(WORDS - n + 1)
        if rng.random() < 0.5:
            tb.send(sram_write(xy, a, _words(rng, n), NOC))
        else:
            tb.read(xy, a, n)
    await tb.drain()
    tb.check_ports()


@cocotb.test()
async def counters_and_control(dut):
    """Counter bumps (host writes), register reads, START, RESET, imem writes, bad register."""
    tb = await _bench(dut)
    rng = tb.rng
    for xy in TILES:
        for c in range(N_COUNTERS):
            tb.send(counter_add(xy, c, c + 1, NOC))
        tb.send(control(xy, COUNTER_BASE, [5, 6], NOC))        # two counters in one packet
        tb.send(reg_read(xy, COUNTER_BASE, N_COUNTERS, 3, NOC))
    await tb.drain()
    tb.check_ports()
    xy = TILES[-1]
    # START and imem writes reach the controller ports, in order.
    instrs = [rng.getrandbits(128) for _ in range(5)]
    tb.send(imem_write(xy, 0, instrs[:2], NOC))
    tb.send(start(xy, 0x2A, NOC))
    tb.send(imem_write(xy, IMEM_WORDS - 3, instrs[2:], NOC))
    tb.send(start(xy, 0x3, NOC))
    tb.send(imem_write(xy, IMEM_WORDS - 2, instrs[2:], NOC))   # one past the end: refused
    tb.send(control(xy, 0x1F, [1], NOC))                       # no such register
    tb.send(reg_read(xy, Reg.ERRORS, 1, 4, NOC))
    await tb.drain()
    assert tb.imem_written(xy) == tb.model[xy].imem, (tb.imem_written(xy), tb.model[xy].imem)
    assert len(tb.model[xy].imem) == 5
    assert tb.starts[xy] == [0x2A, 0x3] == tb.model[xy].starts
    tb.check_ports()
    # RESET: clear counters (bit 1) and errors (bit 2), pulse the controller reset (bit 0).
    resets = []

    async def count_resets():
        sig = getattr(dut, f"o_reset__{tb.idx(xy)}")
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(sig.value):
                resets.append(cycle())

    task = cocotb.start_soon(count_resets())
    tb.send(reset(xy, 0b111, NOC))
    tb.send(reg_read(xy, Reg.ERRORS, 2, 5, NOC))
    await tb.drain()
    task.cancel()
    assert len(resets) == 1, resets
    tb.check_ports()


def _isasim(tb) -> IsaSim:
    """Return an ISA simulator of the mesh holding the model's SRAM contents."""
    sim = IsaSim(W_MESH, H_MESH, IsaConfig(sram_bytes=SRAM_BYTES, word_bytes=8,
                                           n_counters=N_COUNTERS))
    for xy in TILES:
        sim.write(xy, 0, np.array(tb.model[xy].sram, dtype=np.uint64))
    return sim


@cocotb.test()
async def send_and_wait(dut):
    """SEND unicast and multicast from one tile to others, WAITs, against chipotle.isasim."""
    tb = await _bench(dut)
    sender = (0, 0)
    for xy in TILES:
        tb.fill(xy)
    await tb.drain()
    sim = _isasim(tb)
    far = TILES[-1]
    # (dst byte, src byte, bytes, rect, counter): unicast of 0, 1, 255+ words, multicast of
    # 7 words (one packet), 8 (two), 19, a rectangle holding the sender, one without it.
    x1, y1 = W_MESH - 1, H_MESH - 1
    sends = [
        (0x100, 0x000, 0, (x1, x1, y1, y1), 1),
        (0x108, 0x010, 8, (x1, x1, y1, y1), 1),
        (0x000, 0x800, 8 * min(300, WORDS // 2), (x1, x1, 0, 0), 2),
        (0x200, 0x040, 8 * 7, (0, x1, 0, y1), 0),
        (0x300, 0x080, 8 * 8, (0, x1, y1, y1), 3),
        (0x400, 0x0C0, 8 * 19, (0, x1, 0, y1), 0),
    ]
    if SCALE < 1:
        sends = [s for k, s in enumerate(sends) if k != 2]
    prog = []
    for d, s, n, rect, c in sends:
        prog.append(f"send {d}, {s}, {n}, ({rect[0]}:{rect[1]}, {rect[2]}:{rect[3]}), {c}")
    # The receiver in the far corner waits for every bump of counter 0.
    need = sum(1 for *_, rect, c in sends
               if c == 0 and rect[0] <= far[0] <= rect[1] and rect[2] <= far[1] <= rect[3])
    sim.load_program(sender, "\n".join(prog + ["halt"]))
    sim.load_program(far, f"wait 0, {need}\nhalt")
    sim.start(sender)
    sim.start(far)
    sim.run()
    # On the RTL the WAIT is offered before the SENDs are issued: it must be granted only
    # once the bumps have landed.
    waiter = cocotb.start_soon(tb.wait(far, 0, need))
    for d, s, n, rect, c in sends:
        assert await tb.command(sender, src=s, dst=d, length=n, rect=rect,
                                counter=c) == ErrorCode.NONE
    granted = await waiter
    expect_counts = {xy: list(sim.tile(xy).counters) for xy in TILES}
    for xy in TILES:
        for c in range(N_COUNTERS):
            await tb.until_counter(xy, c, expect_counts[xy][c])
    assert granted > 0
    # Flit counts: what the sender injected is isasim's flits_sent (no reads answered yet).
    tb.model[sender].extra[Reg.FLITS_SENT] = sim.tile(sender).perf.flits_sent
    tb.send(reg_read(sender, Reg.FLITS_SENT, 1, 6, NOC))
    # Everything the SENDs wrote is in place: whole SRAM of every tile vs the model, and the
    # model against the ISA simulator.
    for xy in TILES:
        ref = sim.read(xy, 0, WORDS, np.uint64).tolist()
        assert tb.model[xy].sram == ref, f"model SRAM of {xy} differs from chipotle.isasim"
        assert tb.model[xy].counters == expect_counts[xy]
        tb.read_all(xy)
    await tb.drain()
    # A DONE doorbell reaches the host after all of that.
    await tb.command(sender, NetOp.DONE, code=0xABCD)
    await tb.drain()
    tb.check_ports()


@cocotb.test()
async def refusals(dut):
    """Out-of-range writes and reads, over-long packets, refused SENDs: nothing corrupted."""
    tb = await _bench(dut)
    rng = tb.rng
    xy = TILES[-1]
    tb.fill(xy)
    await tb.drain()
    tb.send(sram_write(xy, WORDS - 3, _words(rng, 4), NOC))       # one word past the end
    tb.send(sram_write(xy, WORDS, _words(rng, 1), NOC))
    tb.send(sram_write(xy, (1 << NOC.addr_width) - 2, _words(rng, 4), NOC))   # would wrap
    tb.read(xy, WORDS - 2, 3)                                      # empty answer
    # A packet longer than its head says: the extra words are dropped, not written on.
    head = Head.unicast(PacketType.SRAM_WRITE, xy, HOST, addr=WORDS - 2, length=2, cfg=NOC)
    extra = Packet(head, tuple(_words(rng, 5)))
    flits = [f for f in Packet(head, extra.payload).flits(NOC, strict=False)]
    tb.model[xy].sram[WORDS - 2:] = list(extra.payload[:2])
    tb.model[xy].flag(NetError.BAD_LENGTH)
    tb.host.append(_Tx(flits))
    await tb.drain()
    tb.read_all(xy)
    await tb.drain()
    tb.check_ports()
    # Refused SENDs (each check of isasim's order) complete with the error code (checked in the
    # cycle after the command was taken).
    good = {"src": 0, "dst": 0, "length": 8, "rect": (0, 0, 0, 0), "counter": 0}
    for bad in ({"counter": N_COUNTERS}, {"rect": (0, W_MESH, 0, 0)}, {"rect": (1, 0, 0, 0)},
                {"length": 4}, {"dst": SRAM_BYTES - 8, "length": 16},
                {"src": (1 << 32) - 8, "length": 16}):
        c = {**good, **bad}
        assert await tb.command(xy, **c) != ErrorCode.NONE
    await tb.drain()
    tb.check_ports()


@cocotb.test()
async def host_back_pressure(dut):
    """The host link stalls 70% of cycles while every tile answers long reads at once."""
    tb = await _bench(dut, host_stall=0.7, idle=0.0)
    rng = tb.rng
    for xy in TILES:
        tb.send(sram_write(xy, 0, _words(rng, MAXLEN), NOC))
    for _ in range(_n(3)):
        for xy in TILES:
            tb.read(xy, 0, MAXLEN)
            tb.read(xy, rng.randrange(100), rng.randint(1, 50))
            tb.send(reg_read(xy, COUNTER_BASE, N_COUNTERS, 1, NOC))
    await tb.drain(stall_cycles=5000)
    tb.check_ports()
