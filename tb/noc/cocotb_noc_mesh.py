"""cocotb bench of a :class:`chipotle.hw.noc.Mesh`.

The testbench plays every tile and the host: a packet driver on each injection port, a
packet monitor on each delivery port with random back-pressure, the reference model
:func:`chipotle.hw.noc.destinations`, and the scoreboard (exactly once, intact, in order per
(source, destination)).

Parameters come from the environment: ``MESH_W``, ``MESH_H`` (mesh size), ``NOC_SEED``,
``NOC_PACKETS`` (packets per source in the traffic tests), ``NOC_STALL`` (probability that a
sink's ready is low, default 0.3).
"""

from __future__ import annotations

import os
import random

import cocotb
from nocbench import NocTestbench

from chipotle.hw.noc import HOST, Head, NocConfig, PacketType, destinations, head_error

CFG = NocConfig()
W = int(os.environ.get("MESH_W", "2"))
H = int(os.environ.get("MESH_H", "2"))
SEED = int(os.environ.get("NOC_SEED", "1"))
PACKETS = int(os.environ.get("NOC_PACKETS", "20"))
STALL = float(os.environ.get("NOC_STALL", "0.3"))
TILES = [(x, y) for y in range(H) for x in range(W)]


def index(tile) -> int:
    return tile[1] * W + tile[0]


INPUTS = {**{t: f"i_local__{index(t)}" for t in TILES}, HOST: "i_host"}
OUTPUTS = {**{t: f"o_local__{index(t)}" for t in TILES}, HOST: "o_host"}


def expect(src, head: Head, last: bool):
    """Reference model: the tiles (or host) a packet reaches, or why it is dropped."""
    error = head_error(head, last, W, H, CFG)
    return destinations(head, W, H, CFG, last=last), error


async def make_tb(dut, *, idle=0.1, stall=STALL, seed=SEED) -> NocTestbench:
    tb = NocTestbench(dut, CFG, inputs=INPUTS, outputs=OUTPUTS, expect=expect,
                      src_coords=lambda src: CFG.host if src == HOST else src,
                      seed=seed, idle_prob=idle, stall_prob=stall)
    await tb.start()
    await tb.reset()
    return tb


def random_length(rng: random.Random) -> int:
    """Payload flits: many single-flit packets, some long ones."""
    return rng.choice([0, 0, 1, 1, 2, 3, 4, 7, 12])


async def finish(tb: NocTestbench, dut, *, dropped_by=None) -> None:
    """Drain, then check the error counters against the reference model."""
    await tb.drain()
    expected = tb.n_dropped
    total = int(dut.errors.value)
    assert total == expected, f"mesh errors = {total}, reference model drops {expected}"
    per_router = {t: 0 for t in TILES}
    for s in tb.all_sent:
        if not s.expect:
            per_router[(0, 0) if s.src == HOST else s.src] += 1
    for t in TILES:
        got = int(getattr(dut, f"router_errors__{index(t)}").value)
        assert got == per_router[t], f"router {t} counted {got} drops, expected {per_router[t]}"
    tb.stop()


@cocotb.test()
async def uniform_random(dut):
    """Uniform random traffic from every tile and the host, to every tile and the host."""
    tb = await make_tb(dut)
    rng = random.Random(SEED)
    dests = TILES + [HOST]
    for _ in range(PACKETS):
        for src in INPUTS:
            tb.send(src, rng.choice(list(PacketType)), dst=rng.choice(dests),
                    length=random_length(rng))
    await finish(tb, dut)
    assert tb.scoreboard.received == len(tb.all_sent)


@cocotb.test()
async def hotspot(dut):
    """Every tile and the host send to one tile (the one nearest the centre)."""
    tb = await make_tb(dut)
    rng = random.Random(SEED + 1)
    spot = (W // 2, H // 2)
    for _ in range(PACKETS):
        for src in INPUTS:
            tb.send(src, dst=spot, length=random_length(rng))
    await finish(tb, dut)
    assert len(tb.scoreboard.order[spot]) == len(tb.all_sent)


@cocotb.test()
async def transpose(dut):
    """Tile (x, y) sends to (y, x) (square meshes), or to (W-1-x, H-1-y) otherwise."""
    tb = await make_tb(dut)
    rng = random.Random(SEED + 2)
    for _ in range(PACKETS):
        for x, y in TILES:
            dst = (y, x) if W == H else (W - 1 - x, H - 1 - y)
            tb.send((x, y), dst=dst, length=random_length(rng))
    await finish(tb, dut)


@cocotb.test()
async def multicast_mixed(dut):
    """Multicasts to random rectangles (1x1 and the whole mesh included) among unicasts."""
    tb = await make_tb(dut)
    rng = random.Random(SEED + 3)
    dests = TILES + [HOST]
    n_rect = 0
    for _ in range(PACKETS):
        for src in INPUTS:
            r = rng.random()
            if r < 0.45:
                if r < 0.08:
                    rect = (0, W - 1, 0, H - 1)
                elif r < 0.16:
                    x, y = rng.choice(TILES)
                    rect = (x, x, y, y)
                else:
                    xa, xb = sorted(rng.randrange(W) for _ in range(2))
                    ya, yb = sorted(rng.randrange(H) for _ in range(2))
                    rect = (xa, xb, ya, yb)
                tb.send(src, rng.choice([PacketType.SRAM_WRITE, PacketType.CONTROL]),
                        rect=rect, length=rng.randrange(CFG.mcast_max_flits))
                n_rect += 1
            else:
                tb.send(src, dst=rng.choice(dests), length=random_length(rng))
    await finish(tb, dut)
    expected = sum(len(s.expect) for s in tb.all_sent)
    assert tb.scoreboard.received == expected and n_rect > 0


@cocotb.test()
async def drop_bad_destinations(dut):
    """Packets for nowhere are dropped at the router they enter and counted there.

    Unicasts outside the mesh, rectangles outside it or empty, reserved types, inconsistent
    lengths, from tiles and from the host, among good traffic that must arrive untouched.
    """
    tb = await make_tb(dut)
    rng = random.Random(SEED + 4)
    hx, _ = CFG.host
    dests = TILES + [HOST]
    bad_heads = [
        lambda s: Head(PacketType.SRAM_WRITE, W, 0, length=2),
        lambda s: Head(PacketType.SRAM_WRITE, 0, H, length=1),
        lambda s: Head(PacketType.SRAM_READ, W + 1, H + 2, length=0),
        lambda s: Head(PacketType.SRAM_WRITE, hx, 1, length=1),
        lambda s: Head(PacketType.CONTROL, 0, 0, W, 0, True, length=1),
        lambda s: Head(PacketType.CONTROL, 0, 0, 0, H, True, length=0),
        lambda s: Head(PacketType.CONTROL, W - 1, 0, 0, H - 1, True, length=1)
        if W > 1 else Head(PacketType.CONTROL, 0, H - 1, 0, 0, True, length=1),
        lambda s: Head(6, 0, 0, length=3),
        lambda s: Head(0, 0, 0, length=0),
    ]
    for _ in range(max(2, PACKETS // 2)):
        for src in INPUTS:
            if rng.random() < 0.5:
                head = rng.choice(bad_heads)(src)
                sent = tb.send_head(src, head, tb.words(head.length))
                assert not sent.expect, sent.describe(CFG)
            else:
                tb.send(src, dst=rng.choice(dests), length=random_length(rng))
        # A length that disagrees with `last`.
        src = rng.choice(list(INPUTS))
        tb.send_head(src, Head(PacketType.SRAM_WRITE, 0, 0, length=3), tb.words(1))
    assert tb.n_dropped > 0
    await finish(tb, dut)


@cocotb.test()
async def single_flit_storm(dut):
    """Back-to-back single-flit packets from every source, no idle cycles."""
    tb = await make_tb(dut, idle=0.0)
    rng = random.Random(SEED + 5)
    dests = TILES + [HOST]
    for _ in range(PACKETS * 2):
        for src in INPUTS:
            tb.send(src, dst=rng.choice(dests))
    await finish(tb, dut)


@cocotb.test()
async def multicast_contention(dut):
    """Every tile multicasts long packets to the whole mesh at once, under back-pressure.

    Replicating trees from many sources contend for the same outputs in opposite orders;
    without the room rule (a multicast takes a router-to-router output only when the
    neighbour can hold the whole packet) this load deadlocks wormhole lock-step
    replication.  The watchdog names the stuck packets if it does.
    """
    tb = await make_tb(dut, idle=0.0)
    rng = random.Random(SEED + 6)
    whole = (0, W - 1, 0, H - 1)
    for _ in range(PACKETS):
        for src in TILES:
            if rng.random() < 0.8:
                tb.send(src, rect=whole, length=CFG.mcast_max_flits - 1)
            else:
                tb.send(src, dst=rng.choice(TILES), length=rng.randrange(12))
    await finish(tb, dut)
