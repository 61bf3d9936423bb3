"""Fast unit tests of the tile datapath on Amaranth's Python simulator.

The record is the cocotb regression (``test_tile_rtl.py``); these run in seconds without a
Verilog build and catch most mistakes first.
"""

from __future__ import annotations

import gc
import warnings
from dataclasses import replace

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped
from tilemodel import (
    KvModel,
    Shadow,
    decode_result,
    encode_kvcmd,
    encode_mcmd,
    load_core_program,
    matmul_ref,
    pack_rows,
    start_core,
    words_per_row,
)

from chipotle.hw.tile import (
    KvError,
    KvLayout,
    KvOp,
    MatrixError,
    Sram,
    SramArbiter,
    SramSignature,
    TileConfig,
    TileDatapath,
)
from chipotle.hw.tile.controller import ControllerState
from chipotle.hw.tile.datapath import mux_matrix_commands
from chipotle.hw.tile.sram import connect_narrow
from chipotle.hw.tile.tile import TileCore
from chipotle.isa import assemble
from chipotle.isa.core import ErrorCode
from chipotle.isasim import IsaSim
from tbcommon.pysim import run_testbench

CFG = TileConfig(sram_bytes=4096, word_bytes=8, n_banks=2, max_m=4, k_max=176,
                 kv=KvLayout(n_layers=2, n_kv_heads=2, head_size=12, max_pos=10, base=300))


class Host:
    """Drive the ``host`` SRAM port and the command streams of a TileDatapath."""

    def __init__(self, ctx, dut):
        self.ctx, self.dut = ctx, dut

    async def write(self, addr, word, mask=0xFF):
        ctx, p = self.ctx, self.dut.host
        ctx.set(p.en, 1)
        ctx.set(p.we, 1)
        ctx.set(p.addr, addr)
        ctx.set(p.wdata, word)
        ctx.set(p.wmask, mask)
        while True:
            granted = ctx.get(p.ready)
            await ctx.tick()
            if granted:
                break
        ctx.set(p.en, 0)
        ctx.set(p.we, 0)
        return ctx.get(p.error)

    async def read(self, addr):
        ctx, p = self.ctx, self.dut.host
        ctx.set(p.en, 1)
        ctx.set(p.we, 0)
        ctx.set(p.addr, addr)
        while True:
            granted = ctx.get(p.ready)
            await ctx.tick()
            if granted:
                break
        ctx.set(p.en, 0)
        return ctx.get(p.rdata), ctx.get(p.error)

    async def check_sram(self, shadow):
        """Read every word back through the host port and compare it with ``shadow``."""
        for a in range(shadow.depth):
            word, _ = await self.read(a)
            assert word == shadow.read(a), f"word {a}: {word:#x} != {shadow.read(a):#x}"

    async def idle(self, timeout=1000):
        for _ in range(timeout):
            if not self.ctx.get(self.dut.busy):
                return
            await self.ctx.tick()
        raise AssertionError("the datapath stayed busy")

    async def send(self, port, bits):
        ctx = self.ctx
        ctx.set(port.payload, port.payload.shape().from_bits(bits))
        ctx.set(port.valid, 1)
        while True:
            accepted = ctx.get(port.ready)
            await ctx.tick()
            if accepted:
                break
        ctx.set(port.valid, 0)

    async def results(self, count, *, timeout=20_000):
        ctx, o = self.ctx, self.dut.o_res
        ctx.set(o.ready, 1)
        out = []
        for _ in range(timeout):
            if ctx.get(o.valid):
                out.append(decode_result(o.payload.shape().const(ctx.get(o.payload)).as_bits(),
                                         CFG.max_m))
            await ctx.tick()
            if len(out) == count:
                return out
        raise AssertionError(f"only {len(out)} of {count} results before the timeout")


def _matrix_case(m, n, k, *, seed=0, keep_garbage=True):
    rng = np.random.default_rng(seed)
    W = CFG.word_bytes
    x = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    w = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    g = rng if keep_garbage else None
    return x, w, pack_rows(w, W, rng=g), pack_rows(x, W, rng=g), words_per_row(k, W)


@pytest.mark.parametrize("latency", [1, 2])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (4, 3, 172), (2, 5, 16), (3, 2, 13), (4, 1, 8)])
def test_matrix_pysim(m, n, k, latency):
    """The matrix unit's results, without and (at ``sram_latency`` 2) with its input
    stage."""
    dut = TileDatapath(replace(CFG, sram_latency=latency))
    x, w, wwords, xwords, rw = _matrix_case(m, n, k, seed=m * 1000 + n * 10 + k)
    w_base, x_base = 7, 200

    async def bench(ctx):
        h = Host(ctx, dut)
        for i, word in enumerate(wwords):
            await h.write(w_base + i, word)
        for i, word in enumerate(xwords):
            await h.write(x_base + i, word)
        await h.send(dut.i_mcmd, encode_mcmd(w_base=w_base, w_stride=rw, n=n, k=k,
                                             x_base=x_base, x_stride=rw, m=m))
        got = await h.results(n)
        ref = matmul_ref(x, w)
        for i, (nn, last, acc) in enumerate(got):
            assert nn == i and last == (i == n - 1)
            assert acc[:m] == list(ref[:, i]), (i, acc, ref[:, i])
            assert acc[m:] == [0] * (CFG.max_m - m)
        assert not ctx.get(dut.mx_error)

    run_testbench(dut, bench)


def test_matrix_rejects_large_k():
    dut = TileDatapath(CFG)

    async def bench(ctx):
        h = Host(ctx, dut)
        await h.send(dut.i_mcmd, encode_mcmd(w_base=0, w_stride=1, n=1, k=CFG.k_max + 1,
                                             x_base=0, x_stride=1, m=1))
        await ctx.tick().repeat(5)
        assert ctx.get(dut.mx_error)
        assert ctx.get(dut.mx_error_code) == MatrixError.K_TOO_LARGE
        assert not ctx.get(dut.o_res.valid)

    run_testbench(dut, bench)


def test_kv_append_and_stream_pysim():
    dut = TileDatapath(CFG)
    L = CFG.kv
    W = L.word_bytes
    rng = np.random.default_rng(5)
    depth = CFG.sram_words
    shadow = Shadow(depth, W)
    kvm = KvModel(L)
    src = 100

    async def bench(ctx):
        h = Host(ctx, dut)
        for _ in range(4):           # the derived sizes of the map settle after reset
            await ctx.tick()
        assert ctx.get(dut.kv_capacity) == L.max_pos
        for pos in range(4):
            for layer, head in [(0, 1), (1, 0)]:
                kv = rng.integers(-128, 128, size=(2, L.head_size), dtype=np.int8)
                kw = pack_rows(kv, W, rng=rng)
                for i, word in enumerate(kw):
                    await h.write(src + i, word)
                    shadow.write(src + i, word)
                await h.send(dut.i_kvcmd, encode_kvcmd(
                    KvOp.APPEND, layer=layer, head=head, pos=pos, k_src=src,
                    v_src=src + L.k_row_words))
                kvm.append(shadow, layer, head, pos, kv[0], kv[1])
                await h.idle()
        # refused: past capacity, nothing written
        await h.send(dut.i_kvcmd, encode_kvcmd(KvOp.APPEND, layer=0, head=0, pos=L.max_pos,
                                               k_src=src, v_src=src))
        await ctx.tick().repeat(4)
        assert ctx.get(dut.kv_error) and ctx.get(dut.kv_error_code) == KvError.POS_RANGE
        await h.check_sram(shadow)
        # q . K^T for (1, 0) at pos 3, two query heads
        q = rng.integers(-128, 128, size=(2, L.head_size), dtype=np.int8)
        qw = pack_rows(q, W)
        for i, word in enumerate(qw):
            await h.write(src + i, word)
        await h.send(dut.i_kvcmd, encode_kvcmd(KvOp.STREAM_K, layer=1, head=0, pos=3,
                                               x_base=src, x_stride=L.k_data_words, m=2))
        got = await h.results(4)
        ref = matmul_ref(q, kvm.k[1, 0, :4])
        assert [acc[:2] for _, _, acc in got] == [list(ref[:, p]) for p in range(4)]
        # V rows one per position, where wsum reads them
        for layer in range(L.n_layers):
            for head in range(L.n_kv_heads):
                for pos in range(4):
                    raw = b""
                    for i in range(L.v_row_words):
                        word, _ = await h.read(L.v_row(layer, head, pos) + i)
                        raw += word.to_bytes(W, "little")
                    assert np.array_equal(np.frombuffer(raw[:L.head_size], np.int8),
                                          kvm.v[layer, head, pos])

    run_testbench(dut, bench)


def test_kv_refuses_an_unknown_op_pysim():
    """The old STREAM_V (op 2) is refused with BAD_OP on a fresh datapath (the KV store
    keeps only its first error), streams no result and writes nothing."""
    dut = TileDatapath(CFG)
    rng = np.random.default_rng(11)
    shadow = Shadow(CFG.sram_words, CFG.kv.word_bytes)
    src = 100

    async def bench(ctx):
        h = Host(ctx, dut)
        for _ in range(4):           # the derived sizes of the map settle after reset
            await ctx.tick()
        for i in range(8):
            word = int(rng.integers(0, 2 ** 63))
            await h.write(src + i, word)
            shadow.write(src + i, word)
        assert not ctx.get(dut.kv_error)
        await h.send(dut.i_kvcmd, encode_kvcmd(2, layer=0, head=1, pos=2, x_base=src,
                                               x_stride=1, m=3))
        for _ in range(60):          # a stream would have delivered its first result by now
            assert not ctx.get(dut.o_res.valid)
            await ctx.tick()
        assert ctx.get(dut.kv_error) and ctx.get(dut.kv_error_code) == KvError.BAD_OP
        await h.check_sram(shadow)

    run_testbench(dut, bench)


def test_sram_out_of_range_pysim():
    dut = Sram(size_bytes=768, word_bytes=8, n_banks=4)   # 96 words

    async def bench(ctx):
        p = dut.rw
        async def access(addr, we, data=0):
            ctx.set(p.en, 1)
            ctx.set(p.we, we)
            ctx.set(p.addr, addr)
            ctx.set(p.wdata, data)
            ctx.set(p.wmask, 0xFF)
            await ctx.tick()
            ctx.set(p.en, 0)
            return ctx.get(p.rdata), ctx.get(p.error)
        assert await access(5, 1, 0x1234) == (0, 0)
        _, err = await access(96 + 5, 1, 0xDEAD)      # would alias word 5 in bank 1
        assert err == 1
        _, err = await access(2 ** 16 - 1, 1, 0xBEEF)
        assert err == 1
        assert await access(5, 0) == (0x1234, 0)
        assert await access(97, 0) == (0, 1)

    run_testbench(dut, bench)


class _WideTop(wiring.Component):
    """An ``Sram`` with a wide read behind an ``SramArbiter``: port ``wide`` (initiator 1)
    reads ``read_words`` words, port ``narrow`` (initiator 0) one (``connect_narrow``)."""

    def __init__(self, n_banks, read_words, depth=96):
        self.rw = read_words
        super().__init__({"narrow": In(SramSignature(word_bytes=8)),
                          "wide": In(SramSignature(word_bytes=8, read_words=read_words))})
        self.sram = Sram(size_bytes=8 * depth, word_bytes=8, n_banks=n_banks,
                         read_words=read_words)

    def elaborate(self, platform):
        m = Module()
        m.submodules.sram = sram = self.sram
        m.submodules.arb = arb = SramArbiter(2, word_bytes=8, read_words=self.rw)
        connect_narrow(m, flipped(self.narrow), arb.i[0])
        connect(m, flipped(self.wide), arb.i[1])
        connect(m, arb.o, sram.rw)
        return m


@pytest.mark.parametrize("depth", [96, 128])
@pytest.mark.parametrize(("n_banks", "read_words"), [(4, 4), (4, 3), (2, 2), (1, 1)])
def test_sram_wide_read_pysim(n_banks, read_words, depth):
    """A wide read returns words addr .. addr + R - 1 from any start bank, 0 past the end
    (``error`` only when addr itself is out of range); the one-word initiator behind the
    same arbiter reads word 0 of it; writes stay one word.  Depth 128 gives banks of a
    power-of-two depth (every real SRAM's): there the row after the last wraps to row 0,
    which holds data, so a word past the end read as the bank's word instead of 0 shows
    (with 96 words the row past the end is outside the simulated memory and reads 0
    either way: a mutation audit's finding)."""
    dut = _WideTop(n_banks, read_words, depth)
    R = read_words
    word = [(0x0102030405060708 * (a + 1)) & (2 ** 64 - 1) for a in range(depth)]

    def expect(addr):
        return sum((word[addr + k] if addr + k < depth else 0) << (64 * k) for k in range(R))

    async def bench(ctx):
        async def access(p, addr, we=0, data=0):
            ctx.set(p.en, 1)
            ctx.set(p.we, we)
            ctx.set(p.addr, addr)
            ctx.set(p.wdata, data)
            ctx.set(p.wmask, 0xFF)
            assert ctx.get(p.ready)      # alone on the arbiter: granted at once
            await ctx.tick()
            ctx.set(p.en, 0)
            return ctx.get(p.rdata), ctx.get(p.error)
        for a in range(depth):
            await access(dut.wide if a % 2 else dut.narrow, a, 1, word[a])
        for a in list(range(12)) + list(range(depth - 5, depth)):
            assert await access(dut.wide, a) == (expect(a), 0), a
            assert await access(dut.narrow, a) == (word[a], 0), a
        for a in (depth, depth + 1, 2 ** 16 - 1):
            assert await access(dut.wide, a) == (0, 1), a
            assert await access(dut.narrow, a) == (0, 1), a
        # a write of one word beside a wide read's other words leaves them
        await access(dut.wide, 6, 1, 0xAB)
        word[6] = 0xAB
        assert await access(dut.wide, 5) == (expect(5), 0)
        assert await access(dut.wide, 6) == (expect(6), 0)
        # the back door (`Sram.word_rows`, the pysim benches' reads and writes) sees the
        # words the ports wrote, in word order across the banks, and the ports see its
        # writes
        assert [ctx.get(r) for r in dut.sram.word_rows(0, depth)] == word
        assert [ctx.get(r) for r in dut.sram.word_rows(depth - 3, depth)] == word[-3:]
        ctx.set(dut.sram.word_rows(7, 8)[0], 0x5A5A)
        word[7] = 0x5A5A
        assert await access(dut.narrow, 7) == (0x5A5A, 0)
        assert await access(dut.wide, 6) == (expect(6), 0)
        for lo, hi in ((0, depth + 1), (-1, 2)):
            with pytest.raises(ValueError, match=f"not within 0 .. {depth - 1}"):
                dut.sram.word_rows(lo, hi)
        with pytest.raises(ValueError, match=r"words 5 .. 3: the range is reversed"):
            dut.sram.word_rows(5, 4)
        assert dut.sram.word_rows(depth, depth) == []

    run_testbench(dut, bench)


def test_wide_read_bad_parameters():
    with warnings.catch_warnings():     # the half-built component is never elaborated
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="read_words must be an integer from 1 to n_banks"):
            Sram(size_bytes=768, word_bytes=8, n_banks=2, read_words=4)
        with pytest.raises(ValueError, match="read_words must be a positive integer"):
            SramSignature(word_bytes=8, read_words=0)
        gc.collect()


def test_kv_append_cycles_pysim():
    """An APPEND takes 2 + 2*kw + 2*vw cycles (docs/tile.md)."""
    dut = TileDatapath(CFG)
    L = CFG.kv
    expected = 2 + 2 * L.k_row_words + 2 * L.v_row_words

    async def bench(ctx):
        h = Host(ctx, dut)
        await h.send(dut.i_kvcmd, encode_kvcmd(KvOp.APPEND, layer=0, head=0, pos=3,
                                               k_src=0, v_src=L.k_row_words))
        busy = 0
        while ctx.get(dut.busy):
            busy += 1
            await ctx.tick()
            assert busy < 1000
        assert 1 + busy == expected, (busy, expected)    # + the command cycle
        assert not ctx.get(dut.kv_error)

    run_testbench(dut, bench)


class _MuxTop(wiring.Component):
    """`mux_matrix_commands` alone, on 16-bit payloads: sources ``kv`` and ``other``, sink
    ``sink``."""

    def __init__(self):
        super().__init__({"kv": In(stream.Signature(16)), "other": In(stream.Signature(16)),
                          "sink": Out(stream.Signature(16))})

    def elaborate(self, platform):
        m = Module()
        mux_matrix_commands(m, self.kv, self.other, self.sink)
        return m


def test_matrix_command_mux_holds_its_choice_pysim():
    """The matrix unit's command mux: the KV store's command first when both are offered
    at once, and once a command is offered the choice holds until the sink takes it (the
    sink's payload must not change while valid), even when the KV store's command arrives
    meanwhile.  Nothing in the tile's benches offers both at once, so a mux that did not
    hold passed them all (mutation audit)."""
    dut = _MuxTop()

    async def bench(ctx):
        def offer(src, payload):
            ctx.set(src.valid, 1)
            ctx.set(src.payload, payload)

        def seen():
            return (ctx.get(dut.sink.valid), ctx.get(dut.sink.payload),
                    ctx.get(dut.kv.ready), ctx.get(dut.other.ready))

        async def taken(src):                  # the sink takes `src`'s word; it withdraws
            await ctx.tick()
            ctx.set(src.valid, 0)

        # `other` offers while the sink stalls; then the KV store offers too
        offer(dut.other, 0x1111)
        assert seen() == (1, 0x1111, 0, 0)
        await ctx.tick()
        offer(dut.kv, 0x2222)
        for _ in range(3):
            assert seen() == (1, 0x1111, 0, 0)
            await ctx.tick()
        ctx.set(dut.sink.ready, 1)
        assert seen() == (1, 0x1111, 0, 1)
        await taken(dut.other)                 # 0x1111
        assert seen() == (1, 0x2222, 1, 0)
        await taken(dut.kv)                    # 0x2222
        assert seen()[0] == 0
        # both offered at once: the KV store's first
        ctx.set(dut.sink.ready, 0)
        offer(dut.other, 0x3333)
        offer(dut.kv, 0x4444)
        assert seen() == (1, 0x4444, 0, 0)
        await ctx.tick()
        ctx.set(dut.sink.ready, 1)
        assert seen() == (1, 0x4444, 1, 0)
        await taken(dut.kv)                    # 0x4444
        assert seen() == (1, 0x3333, 0, 1)

    run_testbench(dut, bench)


#: The tile of the single-instruction edge cases run on `TileCore` and the ISA simulator.
_CORE = TileConfig(sram_bytes=4096, word_bytes=8, n_banks=2, max_m=2, k_max=64, kv=None,
                   imem_words=64, n_counters=4, lanes=8)


def _run_core_program(cfg, program, read_bytes, kv=None):
    """Run ``program`` (assembly) on a ``TileCore`` of ``cfg`` (with the KV layout `kv`)
    until it halts or stops with an error; return ``(error, bytes)`` with ``bytes`` the SRAM
    bytes ``read_bytes`` (``(addr, n)``, word-aligned) read afterwards through the ``sram``
    port."""
    words = assemble(program)
    dut = TileCore(cfg)
    W = cfg.word_bytes
    out = {}

    async def bench(ctx):
        await load_core_program(ctx, dut, words, kv)
        await start_core(ctx, dut)
        for _ in range(2000):
            if ctx.get(dut.status.state) in (ControllerState.HALTED, ControllerState.ERROR):
                break
            await ctx.tick()
        else:
            raise AssertionError("the tile did not stop")
        await ctx.tick().repeat(4)
        out["error"] = ErrorCode(ctx.get(dut.status.error))
        p = dut.sram
        addr, n = read_bytes
        raw = b""
        for a in range(addr // W, (addr + n) // W):
            ctx.set(p.en, 1)
            ctx.set(p.we, 0)
            ctx.set(p.addr, a)
            while not ctx.get(p.ready):
                await ctx.tick()
            await ctx.tick()
            ctx.set(p.en, 0)
            await ctx.tick().repeat(cfg.sram_latency)
            raw += ctx.get(p.rdata).to_bytes(W * p.signature.read_words, "little")[:W]
        out["bytes"] = raw

    run_testbench(dut, bench)
    return out["error"], out["bytes"]


@pytest.mark.parametrize("last_k", [4, 3], ids=["acc_mu_is_-2**46", "one_step_inside"])
def test_matqk_product_bound_pysim(last_k):
    """``requant_dyn`` refuses ``|acc * mu| >= 2**46`` (``ARITH``): the write-back's bound at
    its one asymmetric value, ``acc * mu = -2**46`` (mu = (-32768)**2 = 2**30 from two
    records' scale codes, acc = -128 * (4 * 127 + 4) = -2**16), and one step inside
    (acc = -128 * 511).  The cocotb ``errors`` case is far past the bound, so a write-back
    that took -2**46 as fitting (its sign bits alone) passed every bench (mutation audit).
    Expected: the ISA simulator's error and Y."""
    cfg = _CORE
    program = f"""
        li  r1, 0x8000
        st  0x100, r1
        st  0x200, r1
        li  r1, 0x80808080
        st  0x108, r1
        li  r1, 0x80
        st  0x10c, r1
        li  r1, 0x7f7f7f7f
        st  0x208, r1
        li  r1, {last_k}
        st  0x20c, r1
        li  r1, 0x280001
        st  0x300, r1
        matqk.i32 0x400, 0x100, 0x200, 0x300, 1, 5, 1
        halt
    """
    want = _reference(cfg, program, (0x400, 8))
    assert want[0] == (ErrorCode.ARITH if last_k == 4 else ErrorCode.NONE)
    assert _run_core_program(cfg, program, (0x400, 8)) == want


@pytest.mark.parametrize("b", [6, 5], ids=["shift_-1", "shift_0"])
def test_matmul_shift_bound_pysim(b):
    """``requant_dyn`` refuses a negative shift ``s - b`` (``ARITH``): at its edge, s = 5
    with the X record's exponent b = 6 (shift -1: refused) and b = 5 (shift 0: y = acc =
    1 + 2 + 3 + 4 = 10, written).  The benches' case has shift -31, so a write-back that
    refused only shifts below -1 (-1 taken as 63, which writes 0) passed them (mutation
    audit).  Expected: the ISA simulator's error and Y."""
    cfg = _CORE
    program = f"""
        li  r1, {b << 16 | 1}
        st  0x100, r1
        li  r1, 0x01020304
        st  0x108, r1
        li  r1, 0x01010101
        st  0x200, r1
        li  r1, 0x50001
        st  0x300, r1
        matmul.i32 0x400, 0x100, 0x200, 0x300, 1, 4, 1
        halt
    """
    want = _reference(cfg, program, (0x400, 8))
    assert want == ((ErrorCode.ARITH, bytes(8)) if b == 6
                    else (ErrorCode.NONE, (10).to_bytes(4, "little") + bytes(4)))
    assert _run_core_program(cfg, program, (0x400, 8)) == want


def _reference(cfg, program, read_bytes, kv=None):
    """The ISA simulator's ``(error, bytes)`` for `_run_core_program`'s arguments."""
    ref = IsaSim(1, 1, cfg.isa_config())
    if kv is not None:
        ref.set_kv_layout((0, 0), kv)
    ref.load_program((0, 0), assemble(program))
    ref.start((0, 0))
    ref.run()
    tile = ref.tile((0, 0))
    addr, n = read_bytes
    return tile.error, bytes(tile.sram[addr:addr + n])


@pytest.mark.parametrize("n", [0x10001, 0x10000 + 2, 2])
def test_kvqk_length_past_16_bits_pysim(n):
    """``kvqk`` with ``n >= 2**16`` positions is ``KV_RANGE`` (past any capacity), on a
    128 KiB SRAM (the default chip's) where Y of ``n`` int8 still fits, so the Y range check
    does not refuse it first.  The controller checks ``n``'s bits above the KV store's 16
    before it hands the command over; without that check the store saw ``n mod 2**16`` (1
    or 2, inside the capacity) and the tile scored those rows instead (mutation audit: the
    cocotb bench's SRAMs are 8 and 16 KiB, where SRAM_RANGE comes first).  n = 2 is the
    accepted neighbour.  Expected: the ISA simulator's error and Y."""
    cfg = replace(_CORE, sram_bytes=128 * 1024)
    lay = KvLayout(n_layers=1, n_kv_heads=1, head_size=8, max_pos=4, base=512,
                   k_header=True, word_bytes=8)
    program = f"""
        li  r1, 1
        st  0x100, r1
        st  0x1000, r1
        st  0x200, r1
        li  r1, 0x01020304
        st  0x108, r1
        st  0x1008, r1
        li  r1, {n}
        kvqk.i8 0x8000, 0x100, 0, 0x200, r1, 1
        halt
    """
    assert lay.k_row(0, 0, 0) * 8 == 0x1000        # (the K record the program writes)
    want = _reference(cfg, program, (0x8000, 8), lay)
    assert want == ((ErrorCode.KV_RANGE, bytes(8)) if n > 0xFFFF
                    else (ErrorCode.NONE, bytes([30]) + bytes(7)))   # 1 + 4 + 9 + 16; row 1 is 0
    assert _run_core_program(cfg, program, (0x8000, 8), lay) == want
