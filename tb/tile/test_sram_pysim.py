"""The tile SRAM and its arbiter at every read/write-port latency, on Amaranth's simulator.

Random traffic from a one-word and a wide initiator behind an `SramArbiter`, and reads on
the SRAM's ``r`` port, against a model of the contract in `SramSignature`'s docstring: a
read granted in cycle t returns, in cycle t + L, the words as every request granted before
it left them (the port serves in order); a write lands at the end of cycle t (L = 1) or
t + 1 (L > 1), and an ``r`` read in or after that cycle sees it; an out-of-range request
pulses ``error`` to its initiator only, in cycle t + L.
"""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, connect, flipped

from chipotle.hw.tile import Sram, SramArbiter, SramReadSignature, SramSignature
from chipotle.hw.tile.sram import check_latency, connect_narrow
from tbcommon.elab import never_built
from tbcommon.pysim import run_testbench

DEPTH = 96              # words
MASK = 2 ** 64 - 1


class _Top(wiring.Component):
    """`Sram` (4 banks, ``rw_latency`` L) behind a 2-way `SramArbiter`: port ``narrow``
    (initiator 0, one word), port ``wide`` (initiator 1, R words), port ``r``."""

    def __init__(self, latency, read_words):
        self.L, self.R = latency, read_words
        super().__init__({
            "narrow": In(SramSignature(word_bytes=8, latency=latency)),
            "wide": In(SramSignature(word_bytes=8, read_words=read_words, latency=latency)),
            "r": In(SramReadSignature(word_bytes=8)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.sram = sram = Sram(size_bytes=8 * DEPTH, word_bytes=8, n_banks=4,
                                        read_words=self.R, rw_latency=self.L)
        m.submodules.arb = arb = SramArbiter(2, word_bytes=8, read_words=self.R,
                                             latency=self.L)
        connect_narrow(m, flipped(self.narrow), arb.i[0])
        connect(m, flipped(self.wide), arb.i[1])
        connect(m, arb.o, sram.rw)
        connect(m, flipped(self.r), sram.r)
        return m


@pytest.mark.parametrize("latency", [1, 2, 3])
@pytest.mark.parametrize("read_words", [1, 3])
def test_sram_random_traffic_pysim(latency, read_words):
    L, R = latency, read_words
    dut = _Top(L, R)
    land = 0 if L == 1 else 1           # cycles from a write's grant to its landing cycle
    rng = random.Random(1000 * L + R)
    cycles = 1500

    async def bench(ctx):
        ports = [dut.narrow, dut.wide]
        words = [1, R]
        ordered = [0] * DEPTH           # as the port's requests so far leave it
        landed = [0] * DEPTH            # as the banks hold it (what `r` sees)
        writes = []                     # (landing cycle, addr, mask, data)
        expect = {}                     # (cycle, initiator) -> (rdata or None, error)
        r_expect = None                 # (cycle, data, error) of the r read in flight
        held = [None, None]             # the request each initiator holds until granted
        grants = [0, 0]
        checked = 0

        def merge(old, mask, data):
            bm = sum(0xFF << (8 * b) for b in range(8) if mask >> b & 1)
            return (old & ~bm | data & bm) & MASK

        for t in range(cycles):
            for i, p in enumerate(ports):
                if held[i] is None and rng.random() < 0.6:
                    addr = rng.choice([rng.randrange(DEPTH), rng.randrange(DEPTH - 4, DEPTH),
                                       rng.choice([DEPTH, DEPTH + 3, 2 ** 16 - 1])]
                                      if rng.random() < 0.1 else [rng.randrange(DEPTH)])
                    held[i] = (rng.random() < 0.4, addr, rng.randrange(1, 256),
                               rng.getrandbits(64))
                we, addr, mask, data = held[i] or (0, 0, 0, 0)
                ctx.set(p.en, held[i] is not None)
                ctx.set(p.we, we)
                ctx.set(p.addr, addr)
                ctx.set(p.wmask, mask)
                ctx.set(p.wdata, data)
            r_en = rng.random() < 0.5
            r_addr = rng.randrange(DEPTH + 2)
            ctx.set(dut.r.en, r_en)
            ctx.set(dut.r.addr, r_addr)
            # outputs due this cycle
            for i, p in enumerate(ports):
                if (t, i) in expect:
                    data, err = expect.pop((t, i))
                    assert ctx.get(p.error) == err, (t, i)
                    if data is not None:
                        assert ctx.get(p.rdata) == data, (t, i, hex(ctx.get(p.rdata)),
                                                          hex(data))
                    checked += 1
                else:
                    assert ctx.get(p.error) == 0, (t, i)
            if r_expect is not None and r_expect[0] == t:
                assert (ctx.get(dut.r.data), ctx.get(dut.r.error)) == r_expect[1:], t
                r_expect = None
            # grants this cycle: at most one, to a requesting initiator
            ready = [ctx.get(p.ready) for p in ports]
            assert sum(ready) <= 1 and all(held[i] for i, r_ in enumerate(ready) if r_)
            if held[0] and held[1]:
                assert any(ready), t        # the SRAM never refuses: someone is granted
            for i in range(2):
                if not ready[i]:
                    continue
                we, addr, mask, data = held[i]
                ok = addr < DEPTH
                if we:
                    if ok:
                        ordered[addr] = merge(ordered[addr], mask, data)
                        writes.append((t + land, addr, mask, data))
                    expect[(t + L, i)] = (None, int(not ok))
                else:
                    got = sum((ordered[addr + k] if ok and addr + k < DEPTH else 0) << (64 * k)
                              for k in range(words[i]))
                    expect[(t + L, i)] = (got, int(not ok))
                held[i] = None
                grants[i] += 1
            # the writes landing this cycle, which an `r` read of this cycle sees
            for w in [w for w in writes if w[0] == t]:
                _, a, mk, d = w
                landed[a] = merge(landed[a], mk, d)
            writes = [w for w in writes if w[0] != t]
            if r_en:
                ok = r_addr < DEPTH
                r_expect = (t + 1, landed[r_addr] if ok else 0, int(not ok))
            await ctx.tick()
        assert min(grants) > cycles // 4 and checked > cycles // 2, (grants, checked)

    run_testbench(dut, bench)


def test_latency_mismatch_is_refused():
    """A one-word initiator of one latency is not connected to a port of another."""
    def target(latency):            # an SRAM-side port (as an arbiter's `i`, an Sram's `rw`)
        return SramSignature(word_bytes=8, latency=latency).flip().create()

    with never_built():                 # the module is refused before it is built
        with pytest.raises(ValueError,
                           match="latency 1 connected to an SRAM port of latency 2"):
            connect_narrow(Module(), SramSignature(word_bytes=8).create(), target(2))
    check_latency(SramSignature(word_bytes=8, latency=3).create(), target(3))   # no error
    with pytest.raises(ValueError, match="latency must be 1, 2 or 3"):
        SramSignature(word_bytes=8, latency=4)
    assert SramSignature(word_bytes=8, latency=2) != SramSignature(word_bytes=8)
    assert repr(SramSignature(word_bytes=8, read_words=2, latency=3)) == \
        "SramSignature(word_bytes=8, read_words=2, latency=3)"
