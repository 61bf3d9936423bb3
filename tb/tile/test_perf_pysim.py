"""The tile's performance counters and the KV store's layout interlock, on Amaranth's Python
simulator.

``test_perf_counters_pysim`` runs a short straight-line program on a ``TileCore`` (the bench
stands in for the network interface: instruction memory, start, ``WAIT`` grants) and checks
the counters whose values the program fixes: the SRAM bytes read and written (every
instruction's words and byte masks, ``docs/tile.md`` "Performance counters"), the ``WAIT``
stall (a counter the bench bumps a known number of cycles after the request), the KV
store's busy cycles (``KvStore``'s docstring), instructions and MAC cycles; cycle counts
that depend on the issue policy's overlap are checked against bounds.
``test_kv_layout_settles_pysim`` changes the KV layout under a waiting command and checks
that ``KvStore`` holds it until the layout has settled, then runs it with the new layout.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped
from tilemodel import (
    KvModel,
    Shadow,
    encode_kvcmd,
    load_core_program,
    pack_rows,
    start_core,
)

from chipotle.hw.tile import KvError, KvLayout, KvOp, Sram, SramArbiter, SramSignature, TileConfig
from chipotle.hw.tile.controller import ControllerState, PerfIndex
from chipotle.hw.tile.kvstore import KvCommand, KvParams, KvStore
from chipotle.hw.tile.tile import TileCore
from chipotle.isa import assemble
from chipotle.isa.core import ErrorCode, copy_steps
from tbcommon.pysim import run_testbench


def _words(addr, nbytes, W):
    """Words holding the bytes ``addr .. addr + nbytes - 1`` (0 for no bytes)."""
    return (addr % W + nbytes + W - 1) // W if nbytes else 0


def _elementwise_reads(a, b, n, es, lanes, W):
    """Words an element-wise vector instruction (``vadd``) reads: the vector unit walks
    the vector in chunks of ``lanes`` elements and reads each chunk's words of A, then of
    B (``docs/tile.md``, "Vector unit"; ``chipotle.isa.vector_cycles``)."""
    return sum(_words(src + i * es, min(lanes, n - i) * es, W)
               for i in range(0, n, lanes) for src in (a, b))


# ---- the performance counters -----------------------------------------------------------

#: TileCore configurations: (n_banks, sram_latency).  With 2 banks the vector unit reads
#: two words per grant (the SRAM's wide read); the expected counts do not depend on it.
PERF_CASES = [(2, 1), (1, 1), (2, 3)]

#: Cycles between the first cycle the `wait 1, 1` request is offered and the bench's bump
#: of counter 1 (the network interface grants in the cycle the counter suffices).
WAIT_DELAY = 7


@pytest.mark.parametrize(("n_banks", "latency"), PERF_CASES)
def test_perf_counters_pysim(n_banks, latency):
    """A straight-line program of ``st``, ``ld``, two ``copy``, three ``vadd`` (two-word,
    one-word and word-straddling chunks), ``matraw``, ``matmul``, two ``wait`` and
    ``kvapp``: after ``halt`` ``BYTES_READ`` is W times the words its instructions read
    (the vector unit's wide reads counted by the words they take), ``BYTES_WRITTEN`` the
    bytes their byte masks select, ``WAIT_STALLS`` the cycles the first ``wait``'s request
    was refused (its counter bumped ``WAIT_DELAY`` cycles after the request; the second's
    was bumped before the start), ``KV_CYCLES`` the append's ``1 + (1 + L)(kw + vw)``
    (alone on the SRAM port, after the waits), ``INSTRUCTIONS`` the program's length,
    ``MAC_CYCLES`` the matrix instructions' ``N ceil(K / W)``, ``NET_STALLS`` 0, and
    ``CYCLES`` above the matrix, wait and KV cycles, which the program's order keeps
    apart (the waits wait for every unit, ``halt`` for the append)."""
    cfg = TileConfig(sram_bytes=4096, word_bytes=8, n_banks=n_banks, max_m=2, k_max=64,
                     kv=None, imem_words=64, n_counters=4, lanes=8, sram_latency=latency)
    W, V = cfg.word_bytes, cfg.lanes
    lay = KvLayout(n_layers=1, n_kv_heads=2, head_size=12, max_pos=4, base=384, k_header=True,
                   word_bytes=W)
    rows = -(-16 // W)                  # ceil(K / W) of the matrix instructions (K = 16)
    program = """
        li    r1, 0x12345678
        st    0x304, r1
        ld    r2, 0x100
        copy  0x343, 0x121, 3
        copy  0x350, 0x120, 16
        vadd.i16.i16 0x400, 0x180, 0x1c0, 16
        vadd.i8.i8   0x440, 0x200, 0x208, 5
        vadd.i8.i8   0x448, 0x205, 0x213, 5
        matraw.i32   0x480, 0x000, 0x040, 3, 16, 2
        matmul.i8    0x4c0, 0x0a0, 0x040, 0x0e0, 3, 16, 2
        wait  1, 1
        wait  0, 1
        kvapp 1, 0x500, 0x520, 2
        halt
    """
    words = assemble(program)
    # what each instruction reads and writes, in words and bytes, from its operands
    read_words = (
        1                                                   # ld: one word
        + copy_steps(0x343, 0x121, 3, W)                    # copy: a word read per step
        + copy_steps(0x350, 0x120, 16, W)
        + _elementwise_reads(0x180, 0x1C0, 16, 2, V, W)     # vadd.i16: 2 words per chunk
        + _elementwise_reads(0x200, 0x208, 5, 1, V, W)      # 1 word per chunk
        + _elementwise_reads(0x205, 0x213, 5, 1, V, W)      # A straddles two words
        + (2 + 3) * rows                                    # matraw: X rows, W rows
        + (2 + 3) * rows + 2 + 3      # matmul: X data, W rows; 2 X headers, 3 (m, s) pairs
        + lay.k_row_words + lay.v_row_words                 # kvapp: K record, V row
    )
    assert read_words == 1 + 3 + 2 + 8 + 2 + 3 + 10 + 15 + 5       # (the sum, by hand)
    written = (
        4                                                   # st: a uint32
        + 3 + 16                                            # copy: n bytes
        + 2 * 16 + 5 + 5                                    # vadd: n elements of td
        + 4 * 2 * 3                                         # matraw: 2 x 3 int32
        + 1 * 2 * 3                                         # matmul.i8: 2 x 3 int8
        + W + 2 * lay.head_size                             # kvapp: K header, K, V
    )
    kv_words = lay.k_row_words + lay.v_row_words
    expect = {
        PerfIndex.BYTES_READ: W * read_words,
        PerfIndex.BYTES_WRITTEN: written,
        PerfIndex.WAIT_STALLS: WAIT_DELAY,
        PerfIndex.KV_CYCLES: 1 + (1 + latency) * kv_words,
        PerfIndex.INSTRUCTIONS: len(words),
        PerfIndex.MAC_CYCLES: 2 * 3 * rows,
        PerfIndex.NET_STALLS: 0,
    }
    dut = TileCore(cfg)

    async def bench(ctx):
        await load_core_program(ctx, dut, words, lay)
        # the SRAM stays as configured (zeros: every header, pair and operand 0), so the
        # counters see only the program; RESET clears them and keeps the instructions
        ctx.set(dut.soft_reset, 1)
        await ctx.tick().repeat(2)
        ctx.set(dut.soft_reset, 0)
        assert ctx.get(dut.kv_capacity) == lay.max_pos
        assert all(ctx.get(dut.perf[k]) == 0 for k in PerfIndex)
        await start_core(ctx, dut)
        counters = [1, 0, 0, 0]         # counter 0 bumped by the host before the start
        offered = None                  # the cycle the first request was first offered
        refused = 0
        for cycle in range(2000):
            if ctx.get(dut.status.state) in (ControllerState.HALTED, ControllerState.ERROR):
                break
            assert not ctx.get(dut.o_net.valid)
            grant = 0
            if ctx.get(dut.o_wait.valid):
                c = ctx.get(dut.o_wait.payload.counter)
                need = ctx.get(dut.o_wait.payload.need)
                if c == 1 and offered is None:
                    offered = cycle
                if c == 1 and cycle == offered + WAIT_DELAY:
                    counters[1] += 1
                grant = int(counters[c] >= need)
                counters[c] -= need * grant
                refused += 1 - grant
            ctx.set(dut.o_wait.ready, grant)
            await ctx.tick()
        else:
            raise AssertionError("the tile did not stop")
        ctx.set(dut.o_wait.ready, 0)
        status = ctx.get(dut.status)
        assert (status.state, status.error) == (ControllerState.HALTED, ErrorCode.NONE), status
        assert counters == [0, 0, 0, 0] and refused == WAIT_DELAY
        await ctx.tick().repeat(2)      # a cycle's count shows a cycle later
        perf = {k: ctx.get(dut.perf[k]) for k in PerfIndex}
        got = {k.name: perf[k] for k in expect}
        assert got == {k.name: v for k, v in expect.items()}, perf
        assert perf[PerfIndex.KV_CYCLES] > 0
        assert (perf[PerfIndex.MATRIX_CYCLES] + perf[PerfIndex.WAIT_STALLS]
                + perf[PerfIndex.KV_CYCLES] < perf[PerfIndex.CYCLES]), perf
        assert perf[PerfIndex.MAC_CYCLES] < perf[PerfIndex.MATRIX_CYCLES], perf
        assert 0 < perf[PerfIndex.VECTOR_BUSY] < perf[PerfIndex.CYCLES], perf
        await ctx.tick().repeat(3)      # halted: nothing counts any more
        assert {k: ctx.get(dut.perf[k]) for k in PerfIndex} == perf

    run_testbench(dut, bench)


# ---- the KV layout's settle interlock ------------------------------------------------------

#: ``KvStore``'s docstring: a command is accepted in the fourth cycle after the last change
#: of the layout at the earliest (the layout's first cycle is cycle 0; the derived sizes
#: reflect it from cycle 3).
SETTLE = 4


class _KvTop(wiring.Component):
    """A ``KvStore`` and an ``Sram`` behind an ``SramArbiter`` (``host`` is initiator 0), the
    layout and the command stream from the bench."""

    def __init__(self, depth):
        self.depth = depth
        super().__init__({
            "host": In(SramSignature(word_bytes=8)),
            "layout": In(KvParams),
            "i_cmd": In(stream.Signature(KvCommand)),
            "busy": Out(1),
            "error": Out(1),
            "error_code": Out(KvError),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.sram = sram = Sram(size_bytes=8 * self.depth, word_bytes=8, n_banks=2)
        m.submodules.arb = arb = SramArbiter(2, word_bytes=8)
        m.submodules.kv = kv = KvStore(word_bytes=8, sram_depth=self.depth)
        connect(m, flipped(self.host), arb.i[0])
        connect(m, kv.bus, arb.i[1])
        connect(m, arb.o, sram.rw)
        connect(m, flipped(self.i_cmd), kv.i_cmd)
        m.d.comb += [
            kv.layout.eq(self.layout),
            kv.o_mcmd.ready.eq(1),
            self.busy.eq(kv.busy), self.error.eq(kv.error), self.error_code.eq(kv.error_code),
        ]
        return m


#: The layout before, the one set at cycle 0 and (second case) another at cycle 2.  The
#: append (layer 1, head 1, position 4) is refused under A (one layer, capacity 2) and lands
#: at different words under B and C (other bases, head sizes and block sizes).
_KV_A = KvLayout(n_layers=1, n_kv_heads=1, head_size=12, max_pos=2, base=100,
                 k_header=True)
_KV_B = KvLayout(n_layers=2, n_kv_heads=2, head_size=20, max_pos=6, base=300,
                 k_header=True)
_KV_C = KvLayout(n_layers=2, n_kv_heads=2, head_size=10, max_pos=5, base=200,
                 k_header=True)


@pytest.mark.parametrize("changes", [((0, _KV_B),), ((0, _KV_B), (2, _KV_C))],
                         ids=["one_change", "changed_again"])
def test_kv_layout_settles_pysim(changes):
    """An ``APPEND`` offered in the cycle the layout changes (and kept offered while it
    changes again two cycles later) is held (``i_cmd.ready`` low) until the layout has not
    changed for `SETTLE` cycles, accepted in that cycle, and writes its K record and V row
    at the last layout's rows (the whole SRAM compared: nothing at the earlier layouts'
    rows); the next ``APPEND``, offered under the settled layout, is accepted at once."""
    depth = 512
    rng = np.random.default_rng(len(changes))
    shadow = Shadow(depth, 8)
    final = changes[-1][1]
    kvm = KvModel(final)
    layer, head, pos = 1, 1, 4
    k_src, v_src = 20, 40
    dut = _KvTop(depth)

    async def bench(ctx):
        h = dut.host

        async def access(addr, we=0, word=0):
            ctx.set(h.en, 1)
            ctx.set(h.we, we)
            ctx.set(h.addr, addr)
            ctx.set(h.wdata, word)
            ctx.set(h.wmask, 0xFF)
            while not ctx.get(h.ready):
                await ctx.tick()
            await ctx.tick()
            ctx.set(h.en, 0)
            return ctx.get(h.rdata)

        async def offer(cmd, schedule=()):
            """Offer `cmd` from this cycle (cycle 0), applying the layout changes of
            `schedule` at their cycles; return the cycle it was accepted in."""
            ctx.set(dut.i_cmd.payload, KvCommand.from_bits(cmd))
            ctx.set(dut.i_cmd.valid, 1)
            todo = dict(schedule)
            for cycle in range(50):
                if cycle in todo:
                    ctx.set(dut.layout, KvParams.from_layout(todo[cycle]))
                accepted = ctx.get(dut.i_cmd.ready)
                await ctx.tick()
                if accepted:
                    ctx.set(dut.i_cmd.valid, 0)
                    return cycle
            raise AssertionError("the command was never accepted")

        async def idle():
            for _ in range(200):
                if not ctx.get(dut.busy):
                    return
                await ctx.tick()
            raise AssertionError("the KV store stayed busy")

        ctx.set(dut.layout, KvParams.from_layout(_KV_A))
        records = []            # (K vector, V vector, K header) of the two appends
        for r in range(2):
            kv = rng.integers(-128, 128, size=(2, final.head_size), dtype=np.int8)
            hdr = int(rng.integers(0, 2 ** 63))
            records.append((kv[0], kv[1], hdr))
            src = [(k_src + 64 * r, [hdr] + pack_rows(kv[:1], 8, rng=rng)),  # random padding
                   (v_src + 64 * r, pack_rows(kv[1:], 8, rng=rng))]
            for base, ws in src:
                for i, w in enumerate(ws):
                    await access(base + i, 1, w)
                    shadow.write(base + i, w)
        assert not ctx.get(dut.busy) and not ctx.get(dut.error)
        cmd = encode_kvcmd(KvOp.APPEND, layer=layer, head=head, pos=pos, k_src=k_src,
                           v_src=v_src)
        accepted = await offer(cmd, changes)
        last_change = changes[-1][0]
        assert accepted == last_change + SETTLE, (accepted, last_change + SETTLE)
        kvm.append(shadow, layer, head, pos, *records[0][:2], header=records[0][2])
        await idle()
        assert not ctx.get(dut.error), ctx.get(dut.error_code)
        # the layout has settled: the next command is taken in the cycle it is offered
        cmd = encode_kvcmd(KvOp.APPEND, layer=0, head=1, pos=final.max_pos - 1,
                           k_src=k_src + 64, v_src=v_src + 64)
        assert await offer(cmd) == 0
        kvm.append(shadow, 0, 1, final.max_pos - 1, *records[1][:2], header=records[1][2])
        await idle()
        assert not ctx.get(dut.error), ctx.get(dut.error_code)
        for a in range(depth):
            word = await access(a)
            assert word == shadow.read(a), f"word {a}: {word:#x} != {shadow.read(a):#x}"

    run_testbench(dut, bench)
