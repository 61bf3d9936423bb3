"""Fast unit tests of the NoC gateware on Amaranth's Python simulator.

A cycle-by-cycle harness drives whole packets into input ports, keeps every output ready
(or not), and collects the packets that leave, with the cycle of their head flit.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

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
from tbcommon.pysim import run_testbench

CFG = NocConfig()


def simulate(dut, inputs, outputs, *, cycles=400, stalled=(), rooms=(), after=None,
             watch=None):
    """Drive ``inputs`` (port -> list of flit lists), collect ``outputs`` (key -> port).

    Returns ``{key: [(cycle of head, Packet-as-flits), ...]}`` and, if ``after`` is given,
    its result (``after(ctx)`` runs once all packets are in and the network is idle).
    ``watch(ctx, cycle)``, if given, runs at the end of every cycle, before the clock edge.
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
            if watch is not None:
                watch(ctx, cycle)
            await ctx.tick()
        # every packet that began leaving an output also ended (its `last` flit)
        assert not any(partial.values()), {k: len(v) for k, v in partial.items() if v}
        if after is not None:
            result["after"] = await after(ctx)

    run_testbench(dut, testbench)
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


# Through traffic at router (1, 1) of 3 x 3 under XY routing: input -> (destination, output).
_THROUGH = {Dir.N: ((1, 2), Dir.S), Dir.S: ((1, 0), Dir.N),
            Dir.W: ((2, 1), Dir.E), Dir.E: ((0, 1), Dir.W)}


@pytest.mark.parametrize("cfg", [CFG, NocConfig(fifo_depth=8, mcast_max_flits=3),
                                 NocConfig(fifo_depth=4, mcast_max_flits=4)],
                         ids=["depth16-mcast8", "depth8-mcast3", "depth4-mcast4"])
def test_router_room_threshold(cfg):
    """Each link input's ``room`` is 1 exactly while its FIFO has ``mcast_max_flits`` free
    entries: at every FIFO level from 0 to ``fifo_depth`` flits, filling and draining,
    ``room == (level <= fifo_depth - mcast_max_flits)`` (1 at that level, 0 one flit above).

    Router (1, 1) of 3 x 3.  Each of the N, E, S, W inputs receives one unicast of
    ``fifo_depth`` flits going straight through (XY routing: N->S, S->N, W->E, E->W), one
    flit every 1 to 4 cycles (a different rate per input), while every output is stalled;
    then the outputs drain them, each ready on its own cycle pattern.  The level is modelled
    from the stimulus (flits accepted minus flits that left); ``ready == (level <
    fifo_depth)`` cross-checks the model, every level is visited on every input, and each
    packet leaves whole.
    """
    depth, threshold = cfg.fifo_depth, cfg.fifo_depth - cfg.mcast_max_flits
    r = Router(cfg, 1, 1, 3, 3)
    ins, outs, out_rooms = router_ports(r)
    links = {Dir.N: r.i_n, Dir.E: r.i_e, Dir.S: r.i_s, Dir.W: r.i_w}
    pkts = {d: build_packet(PacketType.SRAM_WRITE, src=(1, 1), dst=dst, addr=d + 1,
                            payload=range(100 * d, 100 * d + depth - 1), cfg=cfg)
            for d, (dst, _) in _THROUGH.items()}
    seen = defaultdict(set)      # input -> FIFO levels at which `room` was checked
    got = defaultdict(list)      # output -> flits that left

    async def testbench(ctx):
        queues = {d: list(p.flits(cfg)) for d, p in pkts.items()}
        level = dict.fromkeys(links, 0)
        for room in out_rooms:
            ctx.set(room, 1)
        for cycle in range(12 * depth):
            filling = any(queues.values())
            if not filling and not any(level.values()):
                break
            for k, (d, link) in enumerate(links.items()):
                assert ctx.get(link.room) == (level[d] <= threshold), (cycle, d, level[d])
                assert ctx.get(link.flit.ready) == (level[d] < depth), (cycle, d, level[d])
                seen[d].add(level[d])
                offer = bool(queues[d]) and cycle % (k + 1) == 0
                ctx.set(link.flit.valid, offer)
                if offer:
                    ctx.set(link.flit.payload.as_value(), queues[d][0])
                out = outs[_THROUGH[d][1]]
                ctx.set(out.ready, not filling and cycle % (4 - k) == 0)
            for d, link in links.items():
                if ctx.get(link.flit.valid) and ctx.get(link.flit.ready):
                    queues[d].pop(0)
                    level[d] += 1
                out = outs[_THROUGH[d][1]]
                if ctx.get(out.valid) and ctx.get(out.ready):
                    got[_THROUGH[d][1]].append(ctx.get(out.payload.as_value()))
                    level[d] -= 1
            await ctx.tick()
        else:
            raise AssertionError(f"not drained: {level}")

    run_testbench(r, testbench)
    for d, (_, o) in _THROUGH.items():
        assert seen[d] == set(range(depth + 1)), d
        assert got[o] == pkts[d].flits(cfg), o


def test_router_multicast_held_until_room():
    """A multicast is held while ``room`` behind its router-to-router output is 0 and leaves
    in the cycle ``room`` returns to 1; a unicast to the same output is never held by it.

    Router (1, 1) of 3 x 3; ``o_e.room`` is 0 in cycles 0 to 19, 1 in cycle 20, 0 again from
    cycle 21.  Entering at cycle 0: a full-length multicast (``mcast_max_flits`` flits) from
    the local port to row 1 (outputs E, W, local) and a unicast from W to (2, 1) (output E).
    The unicast's flits leave on E from cycle 1 (one cycle per hop) although ``room`` is 0.
    The multicast leaves on no output before cycle 20 (it acquires E first); from cycle 20
    its flits leave on E, W and local on consecutive cycles, though ``room`` is 0 again:
    ``room`` gates the acquisition of an output, not the flits of the packet holding it
    (wormhole).
    """
    release = 20
    r = Router(CFG, 1, 1, 3, 3)
    ins, outs, _ = router_ports(r)
    mc = build_packet(PacketType.CONTROL, src=(1, 1), rect=(0, 2, 1, 1), addr=5,
                      payload=range(1, CFG.mcast_max_flits))
    uni = build_packet(PacketType.SRAM_WRITE, src=(0, 1), dst=(2, 1), addr=6, payload=[9, 10])
    got = defaultdict(list)      # output -> [(cycle, flit)]

    async def testbench(ctx):
        queues = {ins[Dir.LOCAL]: mc.flits(), ins[Dir.W]: uni.flits()}
        for room in (r.o_n.room, r.o_s.room, r.o_w.room):
            ctx.set(room, 1)
        for cycle in range(release + 2 * CFG.mcast_max_flits):
            ctx.set(r.o_e.room, cycle == release)
            for port, q in queues.items():
                ctx.set(port.valid, bool(q))
                if q:
                    ctx.set(port.payload.as_value(), q[0])
            for port in outs.values():
                ctx.set(port.ready, 1)
            for port, q in queues.items():
                if q and ctx.get(port.ready):
                    q.pop(0)
            for o, port in outs.items():
                if ctx.get(port.valid):
                    got[o].append((cycle, ctx.get(port.payload.as_value())))
            await ctx.tick()

    run_testbench(r, testbench)
    mc_out = [(release + i, f) for i, f in enumerate(mc.flits())]
    assert got[Dir.E] == [(1 + i, f) for i, f in enumerate(uni.flits())] + mc_out
    assert got[Dir.W] == mc_out and got[Dir.LOCAL] == mc_out
    assert not got[Dir.N] and not got[Dir.S]


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


@pytest.mark.parametrize("cfg", [CFG, NocConfig(fifo_depth=8, mcast_max_flits=3)],
                         ids=["depth16-mcast8", "depth8-mcast3"])
def test_mesh_multicast_waits_for_neighbour_room(cfg):
    """In a mesh, a multicast waits at a router until the next router's input FIFO falls to
    ``fifo_depth - mcast_max_flits`` flits, and leaves in the cycle after the flit that
    brings it there is read.

    A 2 x 1 mesh, tile (1, 0) not accepting.  Tile (0, 0) sends a unicast of
    ``fifo_depth - mcast_max_flits + 1`` flits to (1, 0), which fills router (1, 0)'s west
    FIFO to one flit above the ``room`` threshold, then a full-length multicast to both
    tiles (outputs E, then local, at router (0, 0)).  The multicast is not delivered to tile
    (0, 0) while the neighbour has no room; tile (1, 0) accepts one flit in cycle 30, and
    the multicast's flits reach tile (0, 0) on consecutive cycles from cycle 31.  Tile (1, 0)
    accepts again from cycle 40 and gets the unicast, then the multicast, whole.
    """
    take, resume = 30, 40
    mesh = Mesh(2, 1, cfg)
    uni = build_packet(PacketType.SRAM_WRITE, src=(0, 0), dst=(1, 0), addr=1,
                       payload=range(cfg.fifo_depth - cfg.mcast_max_flits), cfg=cfg)
    mc = build_packet(PacketType.SRAM_WRITE, src=(0, 0), rect=(0, 1, 0, 0), addr=2,
                      payload=range(cfg.mcast_max_flits - 1), cfg=cfg)
    got = defaultdict(list)      # tile index -> [(cycle, flit)]

    async def testbench(ctx):
        queue = uni.flits(cfg) + mc.flits(cfg)
        port = mesh.i_local[0]
        for cycle in range(resume + 2 * cfg.fifo_depth):
            ctx.set(port.valid, bool(queue))
            if queue:
                ctx.set(port.payload.as_value(), queue[0])
            ctx.set(mesh.o_local[0].ready, 1)
            ctx.set(mesh.o_local[1].ready, cycle == take or cycle >= resume)
            if queue and ctx.get(port.ready):
                queue.pop(0)
            for i, out in enumerate(mesh.o_local):
                if ctx.get(out.valid) and ctx.get(out.ready):
                    got[i].append((cycle, ctx.get(out.payload.as_value())))
            await ctx.tick()

    run_testbench(mesh, testbench)
    assert got[0] == [(take + 1 + i, f) for i, f in enumerate(mc.flits(cfg))]
    assert [f for _, f in got[1]] == uni.flits(cfg) + mc.flits(cfg)
    assert got[1][0][0] == take and all(t >= resume for t, _ in got[1][1:])


def test_mesh_errors_saturate():
    """``Mesh.errors`` is the saturating sum of the routers' drop counters, one cycle behind:
    in every cycle ``errors == min(limit, sum of router_errors in the previous cycle)``, 0 in
    cycle 0, so it never wraps; at the end every router holds its own saturated count of the
    bad packets that entered the mesh there (reference model), and ``errors`` their
    saturated sum.

    A 2 x 2 mesh with ``error_width=3`` (limit 7).  Bad heads of several kinds (unicast
    outside the mesh, host column with a non-zero row, reserved type, multicast rectangle
    outside the mesh or longer than ``mcast_max_flits``) enter from every tile and the host,
    5 + 4 at router (0, 0) (its own counter saturates at 7), 3, 2 and 1 at the others
    (saturated counts sum to 13, above the limit and above ``2**error_width``), with good
    packets among them, delivered and not counted.  The first bad packet of every source is
    dropped in the same cycle (two at router (0, 0)), so the sum also takes values below
    the limit before it passes it.
    """
    cfg = NocConfig(error_width=3)
    limit = (1 << cfg.error_width) - 1
    mesh = Mesh(2, 2, cfg)
    tiles = [(x, y) for y in range(2) for x in range(2)]
    outs = {t: mesh.o_local[mesh.tile_index(*t)] for t in tiles}
    outs[HOST] = mesh.o_host
    bad_heads = [
        Head(PacketType.SRAM_WRITE, 2, 0, length=1),                  # x0 outside
        Head(PacketType.SRAM_READ, 0, 2),                             # y0 outside
        Head(PacketType.CONTROL, cfg.host[0], 1, length=2),           # host column, row 1
        Head(6, 1, 1, length=1),                                      # reserved type
        Head(PacketType.SRAM_WRITE, 0, 0, 2, 1, mcast=True),          # rectangle outside
        Head(PacketType.SRAM_WRITE, 0, 0, 1, 1, mcast=True,           # multicast too long
             length=cfg.mcast_max_flits),
    ]
    n_bad = {HOST: 4, (0, 0): 5, (1, 0): 3, (0, 1): 2, (1, 1): 1}
    inputs = {}
    expected = defaultdict(list)
    dropped = defaultdict(int)      # entry router -> bad packets
    addr = 0
    for k, (src, n) in enumerate(n_bad.items()):
        pkts = []
        for i in range(n):
            head = bad_heads[(k + i) % len(bad_heads)]
            pkts.append(Packet(head, tuple(range(head.length))))
            if i == 1:                  # a good packet among the bad ones
                addr += 1
                dst = tiles[(k + addr) % len(tiles)]
                pkts.append(build_packet(PacketType.SRAM_WRITE, src=src, dst=dst, addr=addr,
                                         payload=[addr], cfg=cfg))
        for p in pkts:
            dests = destinations(p.head, 2, 2, cfg)
            for d in dests:
                expected[d].append(p.head.addr)
            if not dests:
                dropped[(0, 0) if src == HOST else src] += 1
        port = mesh.i_host if src == HOST else mesh.i_local[mesh.tile_index(*src)]
        inputs[port] = [p.flits(cfg, strict=False) for p in pkts]
    assert sum(dropped.values()) == sum(n_bad.values())        # every bad head is bad
    final = [min(limit, dropped[t]) for t in tiles]
    assert sum(final) > limit and sum(final) >= 1 << cfg.error_width

    trace = []                      # (errors, router_errors) in every cycle

    def watch(ctx, cycle):
        trace.append((ctx.get(mesh.errors), [ctx.get(e) for e in mesh.router_errors]))

    received, _ = simulate(mesh, inputs, outs, cycles=40, watch=watch)
    for d in outs:
        got = [Packet.from_flits(f, cfg).head.addr for _, f in received[d]]
        assert sorted(got) == sorted(expected[d]), d
    assert trace[0][0] == 0
    for cycle in range(1, len(trace)):
        total, per_router = trace[cycle][0], trace[cycle - 1][1]
        assert total == min(limit, sum(per_router)), (cycle, total, per_router)
    assert trace[-1] == (min(limit, sum(final)), final)
    sums = [sum(per_router) for _, per_router in trace]
    assert any(0 < s < limit for s in sums), sums   # the unsaturated sum was exercised too
