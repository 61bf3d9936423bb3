"""cocotb bench of one :class:`chipotle.hw.noc.Router`, at (1, 1) of a 3 x 3 mesh.

The testbench plays the four neighbours and the tile: it drives all five inputs and sinks
all five outputs.  The reference model is :func:`chipotle.hw.noc.next_hops` (one step of
XY-tree routing) and :func:`chipotle.hw.noc.head_error`.

Parameters come from the environment: ``NOC_SEED``, ``NOC_SCALE`` (packet count factor).
"""

from __future__ import annotations

import os
import random

import cocotb
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from nocbench import NocTestbench, key_name

from chipotle.hw.noc import HOST, Dir, Head, NocConfig, PacketType, head_error, next_hops

CFG = NocConfig()
X, Y, WIDTH, HEIGHT = 1, 1, 3, 3
PORTS = {Dir.N: "n", Dir.E: "e", Dir.S: "s", Dir.W: "w"}
INPUTS = {**{d: f"i_{n}__flit" for d, n in PORTS.items()}, Dir.LOCAL: "i_local"}
OUTPUTS = {**{d: f"o_{n}__flit" for d, n in PORTS.items()}, Dir.LOCAL: "o_local"}
SEED = int(os.environ.get("NOC_SEED", "1"))
SCALE = float(os.environ.get("NOC_SCALE", "1"))


def expect(src: Dir, head: Head, last: bool):
    """Reference model: the outputs a head arriving on ``src`` leaves by, or why dropped."""
    error = head_error(head, last, WIDTH, HEIGHT, CFG)
    if error is not None:
        return [], error
    outs = next_hops(head, X, Y, src, WIDTH, HEIGHT, CFG, host_port=False)
    if not outs:
        return [], "no output from this input"
    return sorted(outs), None


def n(count: int) -> int:
    return max(1, int(count * SCALE))


async def make_tb(dut, *, idle=0.1, stall=0.3, seed=SEED) -> NocTestbench:
    tb = NocTestbench(dut, CFG, inputs=INPUTS, outputs=OUTPUTS, expect=expect,
                      src_coords=lambda src: (X, Y), seed=seed, idle_prob=idle,
                      stall_prob=stall)
    for name in PORTS.values():
        getattr(dut, f"o_{name}__room").value = 1
    await tb.start()
    await tb.reset()
    return tb


def reachable(src: Dir):
    """Destinations (tile coordinates or HOST) a packet entering on ``src`` may legally have."""
    if src == Dir.LOCAL:
        return [(x, y) for x in range(WIDTH) for y in range(HEIGHT)] + [HOST]
    if src == Dir.W:        # travelling east: anything in columns >= X
        return [(x, y) for x in range(X, WIDTH) for y in range(HEIGHT)]
    if src == Dir.E:        # travelling west: columns <= X, and the host
        return [(x, y) for x in range(0, X + 1) for y in range(HEIGHT)] + [HOST]
    if src == Dir.N:        # travelling south in column X
        return [(X, y) for y in range(Y, HEIGHT)]
    return [(X, y) for y in range(0, Y + 1)] + ([HOST] if X == 0 else [])


def legal_pairs() -> set:
    """The (input, output) pairs XY routing uses at this router."""
    pairs = set()
    for src in Dir:
        for dst in reachable(src):
            x, y = CFG.host if dst == HOST else dst
            pairs |= {(src, o) for o in expect(src, Head(PacketType.CONTROL, x, y), True)[0]}
    return pairs


def stop(tb: NocTestbench, dut) -> None:
    """End a test whose traffic has drained: the router's drop counter must equal the packets
    the reference model drops (none for well-formed traffic), then the bench stops."""
    assert int(dut.errors.value) == tb.n_dropped, \
        f"errors = {int(dut.errors.value)}, the reference model drops {tb.n_dropped}"
    tb.stop()


@cocotb.test()
async def every_direction(dut):
    """Packets from every input reach every output they may use: N, E, S, W and local.

    Each input first sends one packet to each destination it may carry, then random ones;
    all five inputs inject at once with idle cycles; every output stalls ~30% of cycles.
    """
    tb = await make_tb(dut)
    rng = random.Random(SEED)
    used = set()
    for src in Dir:
        for dst in reachable(src):
            sent = tb.send(src, rng.choice(list(PacketType)), dst=dst,
                           length=rng.choice([0, 1, 3]))
            used |= {(src, o) for o in sent.expect}
    for _ in range(n(30)):
        for src in Dir:
            tb.send(src, rng.choice(list(PacketType)), dst=rng.choice(reachable(src)),
                    length=rng.choice([0, 0, 1, 2, 5]))
    assert used == legal_pairs() and len(used) == 5 + 4 + 4 + 2 + 2, sorted(used)
    await tb.drain()
    assert int(dut.errors.value) == 0
    for o in Dir:
        assert tb.scoreboard.order[o], f"nothing left by output {o.name}"
    stop(tb, dut)


@cocotb.test()
async def multicast(dut):
    """Multicasts replicate to every output of the XY tree, mixed with unicasts.

    A multicast acquires a router-to-router output only while the neighbour reports room for
    a whole multicast packet: with ``o_e__room`` low a multicast that needs E stays put (and
    so do its other outputs), a unicast to E still passes.
    """
    tb = await make_tb(dut)
    rng = random.Random(SEED + 1)
    rects = [(0, 2, 0, 2), (1, 1, 1, 1), (0, 1, 1, 2), (1, 2, 0, 1), (0, 0, 0, 2), (2, 2, 1, 1),
             (1, 1, 0, 2), (0, 2, 1, 1)]
    for _ in range(n(25)):
        for src in Dir:
            if rng.random() < 0.6:
                tb.send(src, PacketType.SRAM_WRITE, rect=rng.choice(rects),
                        length=rng.randrange(CFG.mcast_max_flits))
            else:
                tb.send(src, dst=rng.choice(reachable(src)), length=rng.randrange(4))
    await tb.drain()
    assert int(dut.errors.value) == tb.n_dropped

    # Room: hold o_e__room low.
    tb.sinks.stall_prob = 0.0
    dut.o_e__room.value = 0
    mc = tb.send(Dir.LOCAL, PacketType.SRAM_WRITE, rect=(0, 2, 0, 2), length=3)
    await ClockCycles(dut.clk, 30)
    assert mc.t_head is not None and not mc.arrived, \
        f"a multicast left without room on E: {mc.describe(CFG)}"
    uc = tb.send(Dir.W, dst=(2, 1), length=2)
    await ClockCycles(dut.clk, 20)
    assert Dir.E in uc.arrived, f"a unicast was held by the room signal: {uc.describe(CFG)}"
    dut.o_e__room.value = 1
    await tb.drain()
    stop(tb, dut)


@cocotb.test()
async def back_to_back(dut):
    """Single-flit packets leave on consecutive cycles, also right behind another's tail.

    (1) 24 single-flit packets from the tile to E: one per cycle.  (2) For each offset
    0..9, a 6-flit packet from W to E and a single-flit packet from the tile to E injected
    that many cycles later: whatever the arbitration order, the output never idles between
    them, so the single flit leaves the cycle after the tail (or the long packet's head the
    cycle after the single flit).
    """
    tb = await make_tb(dut, idle=0.0, stall=0.0)
    burst = [tb.send(Dir.LOCAL, dst=(2, 1)) for _ in range(24)]
    await tb.drain()
    times = [s.arrived[Dir.E][0] for s in burst]
    assert times == list(range(times[0], times[0] + 24)), f"gaps between single flits: {times}"
    assert [s.t_head for s in burst] == list(range(burst[0].t_head, burst[0].t_head + 24))

    for offset in range(10):
        long = tb.send(Dir.W, dst=(2, 1), length=5)
        await ClockCycles(dut.clk, offset)
        single = tb.send(Dir.LOCAL, dst=(2, 1))
        await tb.drain()
        (l0, l1), (s0, s1) = long.arrived[Dir.E], single.arrived[Dir.E]
        if s0 > l1:     # the long packet went first: the single flit follows at once
            assert s0 == max(l1 + 1, single.t_head + 1), \
                f"offset {offset}: tail at {l1}, single flit in at {single.t_head}, out at {s0}"
        else:           # the single flit went first: the long packet follows at once
            assert l0 == max(s1 + 1, long.t_head + 1), \
                f"offset {offset}: single flit at {s1}, long head in at {long.t_head}, out {l0}"
    stop(tb, dut)


@cocotb.test()
async def round_robin(dut):
    """Five inputs contending for the local output take turns, one packet each.

    Every input keeps a backlog of 2-flit packets for the tile; while all are backlogged
    each window of five consecutive packets at the output holds one packet of each input.
    """
    tb = await make_tb(dut, idle=0.0, stall=0.0)
    k = n(12)
    for _ in range(k):
        for src in Dir:
            tb.send(src, dst=(X, Y), length=1)
    await tb.drain()
    srcs = [s.src for s in tb.scoreboard.order[Dir.LOCAL]]
    window = srcs[: 5 * (k - 1)]
    for i in range(len(window) - 4):
        assert len(set(window[i:i + 5])) == 5, (
            f"not round-robin at packet {i}: {[key_name(s) for s in window[i:i + 5]]} "
            f"(sequence {''.join(key_name(s)[0] for s in srcs)})")
    stop(tb, dut)


@cocotb.test()
async def wormhole(dut):
    """Long packets contending for one output never interleave, whatever the bubbles.

    Inputs W, E, N and the tile send 8- to 12-flit packets out of S, with idle cycles inside
    the packets (40%) and back-pressure; the monitor reassembles packets by ``last``, so an
    interleaved flit shows as a corrupted packet.
    """
    tb = await make_tb(dut, idle=0.4, stall=0.3)
    rng = random.Random(SEED + 2)
    for _ in range(n(10)):
        for src in (Dir.W, Dir.E, Dir.N, Dir.LOCAL):
            tb.send(src, dst=(1, 2), length=rng.randrange(7, 12))
    await tb.drain()
    stop(tb, dut)


@cocotb.test()
async def drop_and_count(dut):
    """Malformed heads are consumed whole and counted; the traffic around them flows.

    Reserved types, ``length`` inconsistent with the head's ``last`` (a non-zero length on
    a one-flit packet, a zero length on a longer one), destinations outside the mesh,
    empty or outside rectangles, over-long multicasts, and heads with no output from their
    input (e.g. arriving from N for another column).
    """
    tb = await make_tb(dut)
    rng = random.Random(SEED + 3)
    hx, hy = CFG.host
    bad = [
        (Dir.LOCAL, Head(0, 2, 1, length=2), None),
        (Dir.LOCAL, Head(7, 0, 0, length=0), None),
        (Dir.W, Head(5, 1, 1, length=1), None),
        (Dir.LOCAL, Head(PacketType.SRAM_WRITE, 1, 1, length=3), 0),       # last on head
        (Dir.E, Head(PacketType.SRAM_WRITE, 0, 1, length=0), 2),           # length 0, 2 more
        (Dir.LOCAL, Head(PacketType.SRAM_WRITE, 3, 0, length=2), None),    # x outside
        (Dir.N, Head(PacketType.SRAM_READ, 1, 3, length=1), None),         # y outside
        (Dir.LOCAL, Head(PacketType.SRAM_WRITE, hx, 1, length=1), None),   # host, row 1
        (Dir.LOCAL, Head(PacketType.SRAM_WRITE, 9, 9, length=1), None),
        (Dir.S, Head(PacketType.CONTROL, 2, 0, 1, 1, True, length=1), None),  # x0 > x1
        (Dir.LOCAL, Head(PacketType.CONTROL, 0, 2, 1, 1, True, length=1), None),  # y0 > y1
        (Dir.W, Head(PacketType.CONTROL, 1, 0, 3, 2, True, length=1), None),  # x1 outside
        (Dir.LOCAL, Head(PacketType.CONTROL, 0, 0, 2, 3, True, length=1), None),  # y1 out
        (Dir.LOCAL, Head(PacketType.CONTROL, 0, 0, 2, 2, True,
                         length=CFG.mcast_max_flits), None),                 # too long
        (Dir.N, Head(PacketType.SRAM_WRITE, 2, 2, length=1), None),          # N -> other col
        (Dir.S, Head(PacketType.SRAM_WRITE, 1, 2, length=2), None),          # U-turn
        (Dir.W, Head(PacketType.SRAM_WRITE, 0, 1, length=0), None),          # W -> west
    ]
    for _ in range(n(3)):
        for src, head, extra in bad:
            for _ in range(rng.randrange(3)):
                s = rng.choice(list(Dir))
                tb.send(s, dst=rng.choice(reachable(s)), length=rng.randrange(4))
            # `extra`: number of payload flits when it differs from `length`.
            words = tb.words(head.length if extra is None else extra)
            sent = tb.send_head(src, head, words)
            assert not sent.expect, f"the model delivers a malformed packet: {sent.error}"
    await tb.drain()
    assert tb.n_dropped == n(3) * len(bad)
    assert int(dut.errors.value) == tb.n_dropped, \
        f"errors = {int(dut.errors.value)}, expected {tb.n_dropped}"
    stop(tb, dut)


@cocotb.test()
async def zero_load_latency(dut):
    """A flit entering an idle router is offered on its output in the next cycle."""
    tb = await make_tb(dut, idle=0.0, stall=0.0)
    for src, dst in [(Dir.W, (2, 1)), (Dir.LOCAL, (1, 1)), (Dir.N, (1, 2)), (Dir.E, HOST),
                     (Dir.S, (1, 0))]:
        sent = tb.send(src, dst=dst, length=3)
        await tb.drain()
        (out,) = sent.expect
        t0, t1 = sent.arrived[out]
        assert t0 - sent.t_head == 1, f"{key_name(src)}->{key_name(out)}: {t0 - sent.t_head}"
        assert t1 - t0 == 3
    stop(tb, dut)


@cocotb.test()
async def input_ready_back_pressure(dut):
    """With every output stalled, each input takes exactly ``fifo_depth`` flits and stops."""
    tb = await make_tb(dut, idle=0.0, stall=1.0)
    accepted = dict.fromkeys(INPUTS, 0)

    async def count_handshakes():
        while True:
            await ReadOnly()
            for src, name in INPUTS.items():
                if (int(getattr(dut, f"{name}__valid").value)
                        and int(getattr(dut, f"{name}__ready").value)):
                    accepted[src] += 1
            await RisingEdge(dut.clk)

    counter = cocotb.start_soon(count_handshakes())
    for src in Dir:
        for _ in range(3):
            tb.send(src, dst=(X, Y), length=9)
    await ClockCycles(dut.clk, 60)
    await ReadOnly()
    for src, name in INPUTS.items():
        assert int(getattr(dut, f"{name}__ready").value) == 0, f"{key_name(src)} still ready"
    await RisingEdge(dut.clk)
    counter.cancel()
    # 27 flits offered on each input: a FIFO's worth taken, none lost or taken twice
    assert accepted == dict.fromkeys(INPUTS, CFG.fifo_depth), \
        {key_name(src): n for src, n in accepted.items()}
    tb.sinks.stall_prob = 0.3
    await tb.drain()
    stop(tb, dut)
