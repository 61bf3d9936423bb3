"""Fast unit tests of the NoC gateware on Amaranth's Python simulator.

A cycle-by-cycle harness drives whole packets into input ports, keeps every output ready
(or not), and collects the packets that leave, with the cycle of their head flit.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from amaranth.sim import Simulator

from chipotle.hw.noc import (
    HOST,
    Dir,
    Head,
    Mesh,
    NocConfig,
    Packet,
    PacketType,
    Router,
    build_packet,
    destinations,
    next_hops,
    unpack_flit,
)

CFG = NocConfig()


def simulate(dut, inputs, outputs, *, cycles=400, stalled=(), rooms=(), after=None):
    """Drive ``inputs`` (port -> list of flit lists), collect ``outputs`` (key -> port).

    Returns ``{key: [(cycle of head, Packet-as-flits), ...]}`` and, if ``after`` is given,
    its result (``after(ctx)`` runs once all packets are in and the network is idle).
    """
    received = defaultdict(list)
    result = {}

    async def testbench(ctx):
        queues = {port: [f for pkt in pkts for f in pkt] for port, pkts in inputs.items()}
        partial = defaultdict(list)
        for port in rooms:
            ctx.set(port, 1)
        for cycle in range(cycles):
            for port, q in queues.items():
                ctx.set(port.valid, bool(q))
                if q:
                    ctx.set(port.payload.as_value(), q[0])
            for key, port in outputs.items():
                ctx.set(port.ready, key not in stalled)
            for port, q in queues.items():
                if q and ctx.get(port.ready):
                    q.pop(0)
            for key, port in outputs.items():
                if ctx.get(port.valid) and ctx.get(port.ready):
                    flit = ctx.get(port.payload.as_value())
                    if not partial[key]:
                        start = cycle
                    partial[key].append(flit)
                    if unpack_flit(flit, dut.cfg)[1]:
                        received[key].append((start, tuple(partial[key])))
                        partial[key] = []
            await ctx.tick()
        # every packet that began leaving an output also ended (its `last` flit)
        assert not any(partial.values()), {k: len(v) for k, v in partial.items() if v}
        if after is not None:
            result["after"] = await after(ctx)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return received, result.get("after")


def router_ports(r: Router):
    ins = {Dir.N: r.i_n.flit, Dir.E: r.i_e.flit, Dir.S: r.i_s.flit, Dir.W: r.i_w.flit,
           Dir.LOCAL: r.i_local}
    outs = {Dir.N: r.o_n.flit, Dir.E: r.o_e.flit, Dir.S: r.o_s.flit, Dir.W: r.o_w.flit,
            Dir.LOCAL: r.o_local}
    return ins, outs, [r.o_n.room, r.o_e.room, r.o_s.room, r.o_w.room]


def test_router_routes():
    """One packet per (input, destination) pair XY routing allows at (1, 1) of 3 x 3."""
    r = Router(CFG, 1, 1, 3, 3)
    ins, outs, rooms = router_ports(r)
    legal = {
        Dir.LOCAL: [(x, y) for x in range(3) for y in range(3)] + [HOST],
        Dir.W: [(x, y) for x in (1, 2) for y in range(3)],
        Dir.E: [(x, y) for x in (0, 1) for y in range(3)] + [HOST],
        Dir.N: [(1, 1), (1, 2)],
        Dir.S: [(1, 0), (1, 1)],
    }
    expected = defaultdict(list)
    inputs = {}
    addr = 0
    for src, dests in legal.items():
        pkts = []
        for dst in dests:
            addr += 1
            pkt = build_packet(PacketType.SRAM_WRITE, src=(1, 1), dst=dst, addr=addr,
                               payload=[addr] * (addr % 3))
            for o in next_hops(pkt.head, 1, 1, src, 3, 3):
                expected[o].append(pkt)
            pkts.append(pkt.flits())
        inputs[ins[src]] = pkts
    received, _ = simulate(r, inputs, outs, rooms=rooms)
    for o in Dir:
        # whole packets, flit for flit: a payload corrupted or cut would show
        got = sorted(tuple(f) for _, f in received[o])
        assert got == sorted(tuple(p.flits()) for p in expected[o]), o


def test_router_multicast_waits_for_room():
    """A multicast needing E stays put while E's neighbour has no room; then replicates.

    Entering in cycle 0, it leaves on all its outputs in cycle 1 (one cycle per hop).
    """
    r = Router(CFG, 1, 1, 3, 3)
    ins, outs, rooms = router_ports(r)
    pkt = build_packet(PacketType.CONTROL, src=(1, 1), rect=(0, 2, 1, 1), addr=5,
                       payload=[1, 2, 3])
    uni = build_packet(PacketType.SRAM_WRITE, src=(0, 1), dst=(2, 1), addr=6, payload=[9])

    # No room on E: the multicast waits; the unicast from W passes through E.
    received, _ = simulate(r, {ins[Dir.LOCAL]: [pkt.flits()], ins[Dir.W]: [uni.flits()]},
                           outs, cycles=30, rooms=[r.o_n.room, r.o_s.room, r.o_w.room])
    assert [Packet.from_flits(f).head.addr for _, f in received[Dir.E]] == [6]
    assert not received[Dir.W] and not received[Dir.LOCAL]
    received, _ = simulate(r, {ins[Dir.LOCAL]: [pkt.flits()]}, outs, cycles=30, rooms=rooms)
    for o in (Dir.E, Dir.W, Dir.LOCAL):
        (t, f), = received[o]
        assert Packet.from_flits(f) == pkt and t == 1


def test_error_counter_saturates():
    """Bad heads are dropped whole; the counter stops at its maximum."""
    cfg = NocConfig(error_width=2)
    r = Router(cfg, 0, 0, 2, 2)
    ins, outs, rooms = router_ports(r)
    bad = Packet(Head(PacketType.SRAM_WRITE, 5, 0, length=2), (1, 2)).flits(cfg)
    good = build_packet(PacketType.SRAM_WRITE, src=(0, 0), dst=(0, 0), addr=3,
                        payload=[4], cfg=cfg).flits(cfg)

    async def errors(ctx):
        return ctx.get(r.errors)

    received, n = simulate(r, {ins[Dir.LOCAL]: [bad] * 5 + [good]}, outs, cycles=40,
                           rooms=rooms, after=errors)
    assert n == 3
    assert [f for _, f in received[Dir.LOCAL]] == [tuple(good)]


@pytest.mark.parametrize("cfg", [CFG, NocConfig(coord_width=5, payload_width=48,
                                                fifo_depth=8, mcast_max_flits=4)],
                         ids=["default", "narrow"])
def test_mesh_2x3(cfg):
    """Host and tiles, unicast and multicast, a bad packet counted at its router."""
    mesh = Mesh(2, 3, cfg)
    tiles = [(x, y) for y in range(3) for x in range(2)]
    outs = {t: mesh.o_local[mesh.tile_index(*t)] for t in tiles}
    outs[HOST] = mesh.o_host
    inputs = defaultdict(list)
    expected = defaultdict(list)
    addr = 0

    def send(src, **kw):
        nonlocal addr
        addr += 1
        pkt = build_packet(PacketType.SRAM_WRITE, src=src, addr=addr, payload=[addr, 7],
                           cfg=cfg, **kw)
        port = mesh.i_host if src == HOST else mesh.i_local[mesh.tile_index(*src)]
        inputs[port].append(pkt.flits(cfg))
        for d in destinations(pkt.head, 2, 3, cfg):
            expected[d].append(addr)

    for t in tiles:
        send(HOST, dst=t)
        send(t, dst=HOST)
        send(t, dst=tiles[-1 - tiles.index(t)])
    send((1, 1), rect=(0, 1, 0, 2))
    send(HOST, rect=(1, 1, 1, 2))
    bad = Packet(Head(PacketType.SRAM_WRITE, 2, 0, length=1), (0,)).flits(cfg)
    inputs[mesh.i_local[mesh.tile_index(1, 2)]].append(bad)

    async def errors(ctx):
        await ctx.tick()
        return ctx.get(mesh.errors), [ctx.get(e) for e in mesh.router_errors]

    received, (total, per_router) = simulate(mesh, inputs, outs, cycles=150, after=errors)
    for d, addrs in expected.items():
        got = [Packet.from_flits(f, cfg).head.addr for _, f in received[d]]
        assert sorted(got) == sorted(addrs), d
    assert total == 1 and per_router == [0, 0, 0, 0, 0, 1]


def test_mesh_8x8_elaborates():
    """The largest mesh the issue asks for elaborates with the default coordinates.

    (16 x 16 needs ``coord_width=5``; ``NocConfig.check_mesh`` says so.)
    """
    from amaranth.hdl import Fragment

    Fragment.get(Mesh(8, 8), None)
    with pytest.raises(ValueError, match="from 1 to 15 with coord_width=4"):
        CFG.check_mesh(16, 16)        # what Mesh(16, 16) raises
    NocConfig(coord_width=5).check_mesh(16, 16)


def test_mesh_1x1():
    """The smallest mesh: host <-> tile, tile to itself, a 1x1 multicast, a drop counted."""
    mesh = Mesh(1, 1, CFG)
    outs = {(0, 0): mesh.o_local[0], HOST: mesh.o_host}
    pkts = {
        mesh.i_host: [build_packet(PacketType.SRAM_WRITE, src=HOST, dst=(0, 0), addr=1,
                                   payload=[1], cfg=CFG),
                      build_packet(PacketType.SRAM_WRITE, src=HOST, rect=(0, 0, 0, 0), addr=2,
                                   payload=[2], cfg=CFG)],
        mesh.i_local[0]: [build_packet(PacketType.SRAM_WRITE, src=(0, 0), dst=HOST, addr=3,
                                       payload=[3, 4], cfg=CFG),
                          build_packet(PacketType.SRAM_WRITE, src=(0, 0), dst=(0, 0), addr=4,
                                       payload=[], cfg=CFG),
                          Packet(Head(PacketType.SRAM_WRITE, 1, 0, length=1), (0,))],
    }
    inputs = {port: [p.flits(CFG) for p in ps] for port, ps in pkts.items()}

    async def errors(ctx):
        await ctx.tick()
        return ctx.get(mesh.errors)

    received, dropped = simulate(mesh, inputs, outs, cycles=60, after=errors)
    addrs = {k: sorted(Packet.from_flits(f, CFG).head.addr for _, f in v)
             for k, v in received.items()}
    assert addrs == {(0, 0): [1, 2, 4], HOST: [3]}
    assert dropped == 1
