"""cocotb verification components for the chipotle network-on-chip.

Built on cocotb-bus and on :mod:`tbcommon.stream`:

PacketDriver
    Injects whole packets into a NoC input port, flit by flit (a :class:`StreamDriver`).
PacketMonitor
    Reassembles the packets leaving a NoC output port (a :class:`StreamMonitor`).
SinkGroup
    Drives the ``ready`` of several output ports, low with a given probability (random
    back-pressure), from one coroutine.
NocScoreboard
    A cocotb-bus :class:`Scoreboard` that checks every delivery against the reference model:
    each packet reaches each of its destinations exactly once, with its flits intact, and in
    order per (source, destination) pair; dropped packets never appear.
NocTestbench
    Assembles the above around a DUT (a :class:`~chipotle.hw.noc.Router` or a
    :class:`~chipotle.hw.noc.Mesh`) with ``start`` / ``reset`` / ``send`` / ``drain`` /
    ``stop``; ``drain`` is the watchdog that fails a test naming the stuck packets.

Every packet a testbench sends carries a unique id in the ``addr`` field of its head, so that a
delivered packet is identified by its contents alone.

Cycle numbers: cycle *c* starts at the clock edge at time ``c * CLK_NS``; a flit "moves in
cycle *c*" when ``valid`` and ``ready`` are both high during that cycle (it is transferred at
the edge that ends it).
"""

from __future__ import annotations

import random
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, SimTimeoutError, with_timeout
from cocotb_bus.scoreboard import Scoreboard

from chipotle.hw.noc import (
    HOST,
    Head,
    NocConfig,
    Packet,
    PacketType,
    decode_head,
    encode_head,
    pack_flit,
    unpack_flit,
)
from tbcommon.stream import StreamDriver, StreamMonitor

__all__ = [
    "CLK_NS", "cycle", "Flits", "Sent", "PacketDriver", "PacketMonitor", "SinkGroup",
    "NocScoreboard", "NocTestbench", "key_name",
]

CLK_NS = 10


def cycle() -> int:
    """Return the number of the current clock cycle."""
    return int(get_sim_time(unit="ns")) // CLK_NS


def key_name(key) -> str:
    """Return a port or tile key as text: ``(x,y)``, ``host`` or a router direction."""
    if key == HOST:
        return "host"
    if isinstance(key, tuple):
        return f"({key[0]},{key[1]})"
    return getattr(key, "name", str(key))


class Flits(tuple):
    """The flit bit patterns of one packet as seen on a port, with when they moved."""

    t_first: int = -1
    t_last: int = -1

    @classmethod
    def of(cls, flits: Iterable[int], t_first: int = -1, t_last: int = -1) -> Flits:
        obj = cls(flits)
        obj.t_first, obj.t_last = t_first, t_last
        return obj


@dataclass(eq=False)
class Sent:
    """A packet handed to a :class:`PacketDriver`, and what became of it.

    Attributes
    ----------
    id : int
        Unique id (the ``addr`` of its head).
    src : hashable
        Key of the input it enters by (a tile ``(x, y)``, ``HOST``, or a router ``Dir``).
    packet : Packet
    flits : tuple of int
        Its flit bit patterns.
    expect : list
        Keys of the outputs it must leave by (empty: it must be dropped).
    error : str or None
        Why the reference model drops it.
    t_queued, t_head, t_tail : int or None
        Cycles it was queued, and its head and tail flits entered the DUT.
    arrived : dict
        Output key -> (cycle of its head, cycle of its tail) there.
    """

    id: int
    src: Hashable
    packet: Packet
    flits: tuple[int, ...]
    expect: list
    error: str | None
    t_queued: int
    t_head: int | None = None
    t_tail: int | None = None
    arrived: dict = field(default_factory=dict)

    @property
    def done(self) -> bool:
        """Whether it entered the DUT entirely and reached every expected output."""
        return self.t_tail is not None and len(self.arrived) == len(self.expect)

    def describe(self, cfg: NocConfig) -> str:
        """Return a one-line description for failure messages."""
        where = (f"entered at cycle {self.t_head}..{self.t_tail}" if self.t_tail is not None
                 else f"head entered at cycle {self.t_head}, tail not yet" if self.t_head
                 is not None else f"still queued at its source since cycle {self.t_queued}")
        if self.expect:
            missing = [key_name(k) for k in self.expect if k not in self.arrived]
            fate = f"missing at {', '.join(missing) or 'nowhere'}"
        else:
            fate = f"to be dropped ({self.error})"
        return (f"packet #{self.id} from {key_name(self.src)} "
                f"[{self.packet.head.describe(cfg)}, {len(self.flits)} flits]: {where}; {fate}")


class PacketDriver(StreamDriver):
    """Inject whole packets (:class:`Sent`) into a NoC input port, one flit per transfer.

    ``idle_prob`` inserts idle cycles before any flit, so packets arrive with bubbles inside
    them as well as between them.
    """

    async def _driver_send(self, transaction: Sent, sync: bool = True) -> None:
        for k, flit in enumerate(transaction.flits):
            await super()._driver_send(flit, sync)
            moved = cycle() - 1
            if k == 0:
                transaction.t_head = moved
        transaction.t_tail = moved


class PacketMonitor(StreamMonitor):
    """Reassemble the packets leaving a NoC output port (up to and including ``last``).

    Each received transaction is a :class:`Flits` tuple.
    """

    def __init__(self, entity, name, clock, *, cfg: NocConfig, **kwargs):
        self.cfg = cfg
        self.flits_seen = 0
        #: Flits of a packet begun and not yet closed by its ``last`` flit.
        self.current: list[int] = []
        super().__init__(entity, name, clock, **kwargs)

    async def _monitor_recv(self):
        clk = RisingEdge(self.clock)
        t_first = -1
        last_bit = 1 << self.cfg.flit_layout["last"].offset
        while True:
            await clk
            await ReadOnly()
            if self.bus.valid.value == 1 and self.bus.ready.value == 1:
                flit = int(self.bus.payload.value)
                if not self.current:
                    t_first = cycle()
                self.current.append(flit)
                self.flits_seen += 1
                if flit & last_bit:
                    self._recv(Flits.of(self.current, t_first, cycle()))
                    self.current = []


class SinkGroup:
    """Drive the ``ready`` of several NoC output ports from one coroutine.

    Each cycle each ``ready`` is low with probability ``stall_prob`` (random back-pressure),
    like :class:`tbcommon.stream.StreamSink` but for many ports at once.
    """

    def __init__(self, readies, clock, *, stall_prob: float = 0.0, rng=None):
        self.readies = list(readies)
        self.clock = clock
        self.stall_prob = stall_prob
        self.rng = rng or random.Random(1)
        for r in self.readies:
            r.value = 0

    async def run(self):
        """Toggle the ``ready`` signals forever (start with ``cocotb.start_soon``)."""
        clk = RisingEdge(self.clock)
        while True:
            p, rnd = self.stall_prob, self.rng.random
            for r in self.readies:
                r.value = 0 if (p and rnd() < p) else 1
            await clk


class NocScoreboard(Scoreboard):
    """Check deliveries: exactly once, intact, in order per (source, destination).

    Register each packet with :meth:`expect` before it is sent, and each output port with
    :meth:`add_port`.  A violation raises ``AssertionError`` at once (in the monitor's
    callback), naming the packet.
    """

    def __init__(self, dut, cfg: NocConfig):
        super().__init__(dut, fail_immediately=True)
        self.cfg = cfg
        self.sent: dict[int, Sent] = {}
        self.pending: dict[tuple, deque] = defaultdict(deque)
        self.received = 0
        self.order: dict[Hashable, list[Sent]] = defaultdict(list)   # per output

    def expect(self, sent: Sent) -> None:
        """Register a packet about to be sent."""
        self.sent[sent.id] = sent
        for dst in sent.expect:
            self.pending[sent.src, dst].append(sent)

    def add_port(self, monitor: PacketMonitor, key: Hashable) -> None:
        """Check every packet ``monitor`` reassembles as a delivery to output ``key``."""
        self.add_interface(monitor, lambda rx: self._match(rx, key), strict_type=False)

    def _match(self, rx: Flits, dst) -> Flits:
        cfg = self.cfg
        data, _ = unpack_flit(rx[0], cfg)
        head = decode_head(data, cfg)
        sent = self.sent.get(head.addr)
        where = f"at {key_name(dst)} in cycle {rx.t_first}"
        if sent is None:
            raise AssertionError(
                f"unexpected packet {where}: [{head.describe(cfg)}, {len(rx)} flits] "
                f"matches no packet sent (flits {[hex(f) for f in rx]})")
        if dst not in sent.expect:
            raise AssertionError(
                f"{sent.describe(cfg)} delivered {where}, but it belongs "
                f"{'to ' + ', '.join(map(key_name, sent.expect)) if sent.expect else 'dropped'}")
        if dst in sent.arrived:
            raise AssertionError(f"{sent.describe(cfg)} delivered twice {where}")
        if tuple(rx) != sent.flits:
            bad = next((i for i, (a, b) in enumerate(zip(rx, sent.flits, strict=False))
                        if a != b),
                       min(len(rx), len(sent.flits)))
            raise AssertionError(
                f"{sent.describe(cfg)} corrupted {where}: {len(rx)} flits instead of "
                f"{len(sent.flits)}, first difference at flit {bad}")
        queue = self.pending[sent.src, dst]
        if queue[0] is not sent:
            raise AssertionError(
                f"order lost {where}: {sent.describe(cfg)} overtook "
                f"{queue[0].describe(cfg)} (same source and destination)")
        queue.popleft()
        sent.arrived[dst] = (rx.t_first, rx.t_last)
        self.order[dst].append(sent)
        self.received += 1
        return Flits(sent.flits)


class NocTestbench:
    """Drivers, monitors, back-pressure, reference model and scoreboard around a NoC DUT.

    Parameters
    ----------
    dut : cocotb handle
        The toplevel (``clk``, ``rst`` and the NoC ports).
    cfg : NocConfig
    inputs : dict
        Source key -> name of the input stream port (e.g. ``{(0, 0): "i_local__0"}``).
    outputs : dict
        Destination key -> name of the output stream port.
    expect : callable
        ``expect(src, head, last) -> (list of destination keys, error or None)``: the
        reference model.
    src_coords : callable, optional
        ``src_coords(src) -> (x, y)`` written in the head's ``src`` fields.
    seed : int
    idle_prob : float
        Probability of an idle cycle before each injected flit.
    stall_prob : float
        Probability that an output's ``ready`` is low in a cycle.
    """

    def __init__(self, dut, cfg: NocConfig, *, inputs: dict, outputs: dict,
                 expect: Callable, src_coords: Callable | None = None, seed: int = 1,
                 idle_prob: float = 0.1, stall_prob: float = 0.3):
        self.dut = dut
        self.cfg = cfg
        self.inputs = dict(inputs)
        self.outputs = dict(outputs)
        self.expect_fn = expect
        self.src_coords = src_coords or (lambda src: (0, 0))
        self.rng = random.Random(seed)
        self.idle_prob = idle_prob
        self.stall_prob = stall_prob
        self.next_id = 1
        self.log = dut._log
        self.all_sent: list[Sent] = []

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the clock, the drivers, the monitors and the back-pressure."""
        dut = self.dut
        self._clock = cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        self.drivers = {
            k: PacketDriver(dut, name, dut.clk, idle_prob=self.idle_prob,
                            rng=random.Random(self.rng.random()))
            for k, name in self.inputs.items()
        }
        self.scoreboard = NocScoreboard(dut, self.cfg)
        self.monitors = {}
        for k, name in self.outputs.items():
            mon = PacketMonitor(dut, name, dut.clk, cfg=self.cfg)
            self.scoreboard.add_port(mon, k)
            self.monitors[k] = mon
        self.sinks = SinkGroup(
            [getattr(dut, f"{name}__ready") for name in self.outputs.values()], dut.clk,
            stall_prob=self.stall_prob, rng=random.Random(self.rng.random()))
        self._sink_task = cocotb.start_soon(self.sinks.run())

    async def reset(self, cycles: int = 3) -> None:
        """Hold ``rst`` for ``cycles`` cycles."""
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    def stop(self) -> None:
        """Stop the drivers, the monitors and the back-pressure."""
        for drv in self.drivers.values():
            drv.kill()
        for mon in self.monitors.values():
            mon.kill()
        self._sink_task.cancel()

    # -- stimulus -----------------------------------------------------------------------------

    def new_id(self) -> int:
        """Return a fresh packet id."""
        pid, self.next_id = self.next_id, self.next_id + 1
        return pid

    def words(self, n: int) -> list[int]:
        """Return ``n`` random payload words."""
        return [self.rng.getrandbits(self.cfg.payload_width) for _ in range(n)]

    def send_head(self, src, head: Head, payload: Iterable[int] = (), *,
                  head_last: bool | None = None) -> Sent:
        """Queue a packet made of ``head`` (its ``addr`` replaced by a fresh id) and payload.

        ``head_last`` overrides the ``last`` bit of the head flit (to build malformed
        packets); the final flit always has ``last`` set.
        """
        from dataclasses import replace
        cfg = self.cfg
        pid = self.new_id()
        head = replace(head, addr=pid)
        payload = tuple(payload)
        words = [encode_head(head, cfg, strict=False), *payload]
        flits = [pack_flit(w, i == len(words) - 1, cfg) for i, w in enumerate(words)]
        if head_last is not None:
            flits[0] = pack_flit(words[0], head_last, cfg)
        last = unpack_flit(flits[0], cfg)[1]
        expect, error = self.expect_fn(src, head, last)
        sent = Sent(pid, src, Packet(head, payload), tuple(flits), list(expect), error,
                    cycle())
        self.scoreboard.expect(sent)
        self.all_sent.append(sent)
        self.drivers[src].append(sent)
        return sent

    def send(self, src, ptype=PacketType.SRAM_WRITE, *, dst=None, rect=None,
             length: int = 0) -> Sent:
        """Queue a well-formed packet with ``length`` random payload words."""
        sx, sy = self.src_coords(src)
        if rect is not None:
            head = Head(ptype, rect[0], rect[2], rect[1], rect[3], True, sx, sy, length)
        else:
            x, y = self.cfg.host if dst == HOST else dst
            head = Head(ptype, x, y, x, y, False, sx, sy, length)
        return self.send_head(src, head, self.words(length))

    # -- checks -------------------------------------------------------------------------------

    def outstanding(self) -> list[Sent]:
        """Return the packets not yet entirely injected and delivered."""
        return [s for s in self.all_sent if not s.done]

    def _progress(self):
        flits_in = sum(len(s.flits) for s in self.all_sent if s.t_tail is not None)
        heads_in = sum(1 for s in self.all_sent if s.t_head is not None)
        return (self.scoreboard.received, flits_in, heads_in,
                sum(m.flits_seen for m in self.monitors.values()))

    def stuck_report(self, limit: int = 8) -> str:
        """Return a description of the packets still outstanding."""
        stuck = self.outstanding()
        lines = [s.describe(self.cfg) for s in stuck[:limit]]
        if len(stuck) > limit:
            lines.append(f"... and {len(stuck) - limit} more")
        return f"{len(stuck)} packet(s) stuck:\n  " + "\n  ".join(lines)

    async def drain(self, *, stall_cycles: int = 2000, timeout_cycles: int = 200_000) -> None:
        """Wait until every queued packet is delivered (or dropped); the watchdog.

        Fails the test with :meth:`stuck_report` when nothing moves for ``stall_cycles``
        cycles, or when ``timeout_cycles`` pass in all (``with_timeout``).
        """
        try:
            await with_timeout(self._drain(stall_cycles), timeout_cycles * CLK_NS, "ns")
        except SimTimeoutError:
            raise AssertionError(f"watchdog: not drained after {timeout_cycles} cycles; "
                                 + self.stuck_report()) from None
        # Let a few more cycles pass so that stray flits would show.
        await ClockCycles(self.dut.clk, 20)
        # ... and a packet begun on an output and never closed (its `last` flit)
        open_ = {k: len(m.current) for k, m in self.monitors.items() if m.current}
        assert not open_, f"packets left unfinished on outputs (flits so far): {open_}"

    async def _drain(self, stall_cycles: int) -> None:
        t_change = cycle()
        last = self._progress()
        while self.outstanding():
            await ClockCycles(self.dut.clk, 20)
            now = cycle()
            progress = self._progress()
            if progress != last:
                last, t_change = progress, now
            elif now - t_change >= stall_cycles:
                raise AssertionError(
                    f"watchdog: nothing moved for {stall_cycles} cycles (cycle {now}); "
                    + self.stuck_report())

    @property
    def n_dropped(self) -> int:
        """Number of packets the reference model drops."""
        return sum(1 for s in self.all_sent if not s.expect)
