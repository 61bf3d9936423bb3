"""Unit tests of the NoC packet format and of the reference model (no simulator)."""

from __future__ import annotations

import itertools
import random

import pytest
from amaranth import Shape

from chipotle.hw.noc import (
    HOST,
    Dir,
    Head,
    NocConfig,
    Packet,
    PacketType,
    build_packet,
    decode_head,
    destinations,
    encode_head,
    head_error,
    next_hops,
    pack_flit,
    tree,
    unpack_flit,
)
from chipotle.hw.noc.router import output_order

CFG = NocConfig()


def test_head_layout_bit_exact():
    """The field table of docs/noc.md, bit for bit."""
    table = {name: (fld.offset, Shape.cast(fld.shape).width) for name, fld in CFG.head_layout}
    assert table == {
        "type": (0, 3), "mcast": (3, 1), "x0": (4, 4), "x1": (8, 4), "y0": (12, 4),
        "y1": (16, 4), "src_x": (20, 4), "src_y": (24, 4), "length": (28, 8),
        "addr": (36, 28),
    }
    assert CFG.flit_layout.size == 65
    assert CFG.flit_layout["last"].offset == 64
    head = Head.multicast(PacketType.CONTROL, (1, 3, 0, 2), (2, 1), addr=0xABCDE, length=5,
                          cfg=CFG)
    assert encode_head(head) == 0xABCDE_05_1_2_2_0_3_1_C
    assert pack_flit(0x1234, True) == (1 << 64) | 0x1234


def test_head_round_trip():
    rng = random.Random(1)
    for cfg in (CFG, NocConfig(coord_width=5), NocConfig(payload_width=48)):
        c = cfg.coord_width
        for _ in range(500):
            head = Head(rng.choice(list(PacketType)), rng.randrange(1 << c),
                        rng.randrange(1 << c), rng.randrange(1 << c), rng.randrange(1 << c),
                        rng.random() < 0.5, rng.randrange(1 << c), rng.randrange(1 << c),
                        rng.randrange(cfg.max_length + 1), rng.randrange(1 << cfg.addr_width))
            assert decode_head(encode_head(head, cfg), cfg) == head


def test_packet_flits_round_trip():
    pkt = build_packet(PacketType.SRAM_WRITE, src=(1, 2), dst=(3, 0), addr=7,
                       payload=[1, 2, 3])
    flits = pkt.flits()
    assert [unpack_flit(f)[1] for f in flits] == [False, False, False, True]
    assert pkt.head.length == 3
    assert Packet.from_flits(flits) == pkt
    single = build_packet(PacketType.CONTROL, src=HOST, dst=(0, 0), addr=1)
    assert len(single.flits()) == 1 and unpack_flit(single.flits()[0])[1]
    assert single.head.src == CFG.host


def test_build_packet_rejects():
    with pytest.raises(ValueError, match="exactly one"):
        build_packet(PacketType.SRAM_WRITE, src=(0, 0))
    with pytest.raises(ValueError, match="multicast packet has at most 8 flits"):
        build_packet(PacketType.SRAM_WRITE, src=(0, 0), rect=(0, 1, 0, 1), payload=range(8))
    with pytest.raises(ValueError, match="must fit 4 bits"):
        build_packet(PacketType.SRAM_WRITE, src=(0, 0), dst=(16, 0))
    with pytest.raises(ValueError, match="at most 255 payload flits"):
        build_packet(PacketType.SRAM_WRITE, src=(0, 0), dst=(1, 0), payload=[0] * 256)
    with pytest.raises(ValueError, match="0 is not a valid PacketType"):
        encode_head(Head(0, 0, 0))          # reserved type, strict
    assert encode_head(Head(0, 0, 0), strict=False) == 0


def test_config_checks():
    with pytest.raises(ValueError, match="`mcast_max_flits` must be between 2 and"):
        NocConfig(mcast_max_flits=17)
    with pytest.raises(ValueError, match="`payload_width` must be at least"):
        NocConfig(payload_width=32)
    with pytest.raises(ValueError, match="`coord_width` must be a positive integer, not 0"):
        NocConfig(coord_width=0)
    with pytest.raises(ValueError, match="mesh `width` must be an integer from 1 to 15"):
        CFG.check_mesh(16, 16)
    NocConfig(coord_width=5).check_mesh(16, 16)
    assert CFG.host == (15, 0) and CFG.addr_width == 28


def test_head_errors():
    w, h = 3, 2
    assert head_error(Head(PacketType.SRAM_WRITE, 2, 1), True, w, h) is None
    assert "reserved" in head_error(Head(5, 0, 0), True, w, h)
    assert "inconsistent" in head_error(Head(PacketType.SRAM_WRITE, 0, 0, length=2), True, w, h)
    assert "inconsistent" in head_error(Head(PacketType.SRAM_WRITE, 0, 0), False, w, h)
    assert "outside" in head_error(Head(PacketType.SRAM_WRITE, 3, 0), True, w, h)
    assert "outside" in head_error(Head(PacketType.SRAM_WRITE, 0, 2), True, w, h)
    assert head_error(Head(PacketType.SRAM_WRITE, 15, 0), True, w, h) is None   # host
    assert "row" in head_error(Head(PacketType.SRAM_WRITE, 15, 1), True, w, h)
    def mc(x0, x1, y0, y1, n=0):
        return Head(PacketType.CONTROL, x0, y0, x1, y1, True, length=n)

    assert head_error(mc(0, 2, 0, 1), True, w, h) is None
    assert "empty" in head_error(mc(1, 0, 0, 1), True, w, h)
    assert "empty" in head_error(mc(0, 1, 1, 0), True, w, h)
    assert "outside" in head_error(mc(0, 3, 0, 1), True, w, h)
    assert "longer" in head_error(mc(0, 1, 0, 1, 8), False, w, h)
    assert head_error(mc(0, 1, 0, 1, 7), False, w, h) is None


@pytest.mark.parametrize("size", [(1, 1), (1, 4), (4, 1), (2, 3), (4, 4), (5, 3)])
def test_tree_delivers_each_tile_once(size):
    """XY-tree routing reaches exactly the rectangle (the walk never revisits a router)."""
    w, h = size
    tiles = [(x, y) for y in range(h) for x in range(w)]
    for src in tiles + [HOST]:
        for x0, x1, y0, y1 in itertools.product(range(w), range(w), range(h), range(h)):
            if x0 > x1 or y0 > y1:
                continue
            head = Head.multicast(PacketType.SRAM_WRITE, (x0, x1, y0, y1), src)
            hops = tree(head, src, w, h)
            got = sorted(t for t, outs in hops.items() if Dir.LOCAL in outs)
            assert got == sorted(destinations(head, w, h))
        for dst in tiles + [HOST]:
            head = Head.unicast(PacketType.SRAM_WRITE, dst, src)
            hops = tree(head, src, w, h)
            if dst == HOST:
                assert Dir.W in hops[0, 0]
                continue
            assert [t for t, outs in hops.items() if Dir.LOCAL in outs] == [dst]
            sx, sy = (-1, 0) if src == HOST else src
            assert len(hops) == abs(dst[0] - sx) + abs(dst[1] - sy) + (src != HOST)


_STEP = {Dir.N: (0, -1), Dir.E: (1, 0), Dir.S: (0, 1), Dir.W: (-1, 0)}
_ARRIVE = {Dir.N: Dir.S, Dir.E: Dir.W, Dir.S: Dir.N, Dir.W: Dir.E}


@pytest.mark.parametrize("size", [(4, 4), (3, 5), (6, 2)])
def test_acquisition_order_rises_along_routes(size):
    """The premise of the deadlock-freedom argument (docs/noc.md).

    Along every route a packet takes, the channel it leaves by comes later in the global
    channel order than the channel it arrived by, and each router's acquisition order
    (:func:`output_order`) is that order restricted to its outputs.
    """
    w, h = size

    def rank(x, y, out):   # rank of the channel leaving router (x, y) by `out`
        order = output_order(x, y, w, h, host_port=(x, y) == (0, 0))
        key = {Dir.E: (0, x, 0), Dir.W: (0, w - 1 - x, 1), Dir.S: (1, y, 0),
               Dir.N: (1, h - 1 - y, 1), Dir.LOCAL: (2, 0, 0)}
        if (x, y) == (0, 0):
            key[Dir.W] = (2, 0, 1)
        assert sorted(Dir, key=lambda d: key[d]) == order
        return key[out]

    tiles = [(x, y) for y in range(h) for x in range(w)]
    rng = random.Random(2)
    heads = [Head.unicast(PacketType.SRAM_WRITE, d, s) for s in tiles + [HOST]
             for d in tiles + [HOST]]
    for _ in range(300):
        xa, xb = sorted(rng.randrange(w) for _ in range(2))
        ya, yb = sorted(rng.randrange(h) for _ in range(2))
        src = rng.choice(tiles + [HOST])
        heads.append(Head.multicast(PacketType.SRAM_WRITE, (xa, xb, ya, yb), src))
    for head in heads:
        src = HOST if head.src == CFG.host else head.src
        hops = tree(head, src, w, h)
        for (x, y), outs in hops.items():
            for o in outs:
                if o in _STEP and not (o == Dir.W and (x, y) == (0, 0)):
                    nx, ny = x + _STEP[o][0], y + _STEP[o][1]
                    for o2 in hops[nx, ny]:
                        assert rank(x, y, o) < rank(nx, ny, o2), (head, (x, y), o, o2)
                    assert _ARRIVE[o] not in hops[nx, ny]   # no U-turns


def test_next_hops_turns():
    """XY routing never turns from a column into a row."""
    for x0, y0 in itertools.product(range(3), range(3)):
        head = Head.unicast(PacketType.SRAM_WRITE, (x0, y0), (1, 1))
        assert not next_hops(head, 1, 1, Dir.N, 3, 3) & {Dir.E, Dir.W, Dir.N}
        assert not next_hops(head, 1, 1, Dir.S, 3, 3) & {Dir.E, Dir.W, Dir.S}
