"""chipotle.isasim: every instruction against the golden primitives, SEND/WAIT, errors.

* each vector and matrix instruction, on random operands and the extremes (−128 and 127
  everywhere, zeros, K = 1, K = 172, K not a multiple of W, M = 1 and M = max), equals the
  `chipotle.golden.numerics` primitive it stands for;
* scalar registers, hardware loops (nested, zero count, dynamic count);
* two tiles exchanging data with SEND/WAIT, a multicast to a rectangle, the cycle estimate
  of a WAIT on a late message, deadlock detection;
* errors set the tile's flag and stop that tile only.
"""

import numpy as np
import pytest

from chipotle.golden import numerics as nx
from chipotle.isa import Dtype, ErrorCode, IsaConfig, TableId, assemble, decode
from chipotle.isa.core import Instr, Opcode, instr_cycles
from chipotle.isa.kv import KvLayout, kv_slot
from chipotle.isasim import DeadlockError, IsaSim, TileState

CFG = IsaConfig(sram_bytes=32768, word_bytes=8, max_m=4, lanes=8, k_max=512)
W = CFG.word_bytes
TAB = 0x6000                      # tables, loaded by `tables()`
TABLES = {TableId.RSQRT: nx.rsqrt_table(), TableId.EXP2: nx.exp2_table(),
          TableId.RECIP: nx.recip_table(), TableId.DYNQ: nx.dynquant_table(),
          TableId.SIGMOID: nx.sigmoid_table()}


def tables(sim, xy=(0, 0)):
    """Write the golden tables into SRAM; return the TABLE instructions that load them."""
    addr, lines = TAB, []
    for tid, tab in TABLES.items():
        sim.write(xy, addr, tab.astype("<u2"))
        lines.append(f"table {tid.name.lower()}, {addr:#x}")
        addr += 2 * len(tab)
    return "\n".join(lines)


def run1(body, data=(), config=CFG):
    """Run `body` (+ halt) on a fresh 1x1 mesh after writing ``data = [(addr, array)]``."""
    sim = IsaSim(1, 1, config)
    for addr, arr in data:
        sim.write((0, 0), addr, arr)
    sim.load_program((0, 0), tables(sim) + "\n" + body + "\nhalt")
    sim.start((0, 0))
    sim.run()
    t = sim.tile((0, 0))
    assert t.error == ErrorCode.NONE, t.error_message
    assert t.state == TileState.HALTED
    return sim


def rd(sim, addr, n, dt):
    return sim.read((0, 0), addr, n, dt)


RNG = np.random.default_rng(7)


def rand(dt, n, lo=None, hi=None):
    info = np.iinfo(dt)
    return RNG.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1,
                        n, dtype=np.int64).astype(dt)


# -- element-wise, requantisation, reductions ---------------------------------------------------

@pytest.mark.parametrize("op", ["vadd", "vsub", "vmul"])
@pytest.mark.parametrize("td, ts", [("i16", "i16"), ("i32", "i16"), ("i8", "i8"),
                                    ("u16", "i16"), ("i64", "i32"), ("i8", "u16")])
def test_elementwise(op, td, ts):
    tdt, sdt = Dtype[td.upper()], Dtype[ts.upper()]
    from chipotle.isa.core import DTYPE_INFO
    si, di = DTYPE_INFO[sdt], DTYPE_INFO[tdt]
    n = 37
    a, b = rand(si.np, n), rand(si.np, n)
    a[:3] = [np.iinfo(si.np).max, np.iinfo(si.np).min, 0]
    b[:3] = [np.iinfo(si.np).max, np.iinfo(si.np).max, 0]
    sim = run1(f"{op}.{td}.{ts} 0x800, 0x0, 0x400, {n}", [(0, a), (0x400, b)])
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    ref = {"vadd": a64 + b64, "vsub": a64 - b64, "vmul": a64 * b64}[op]
    np.testing.assert_array_equal(rd(sim, 0x800, n, di.np), nx.sat(ref, di.bits, di.unsigned))


def test_requant_immediate_and_memory():
    x = rand(np.int32, 50, -(2**30), 2**30)
    x[:4] = [5, -5, 2**30, -(2**30)]
    pair = np.array([23170, 17], "<u2")
    sim = run1("reqi.i8.i32 0x800, 0x0, 50, 23170, 17\n"
               "reqm.i16.i32 0x900, 0x0, 0x400, 50\n"
               "reqi.u16.i32 0xa00, 0x0, 50, 1, 0",
               [(0, x), (0x400, pair)])
    np.testing.assert_array_equal(rd(sim, 0x800, 50, np.int8), nx.requant(x, 23170, 17, 8))
    np.testing.assert_array_equal(rd(sim, 0x900, 50, np.int16), nx.requant(x, 23170, 17, 16))
    np.testing.assert_array_equal(rd(sim, 0xA00, 50, np.uint16),
                                  nx.requant(x, 1, 0, 16, unsigned=True))


def test_reductions():
    x = rand(np.int16, 172)
    x[[5, 90]] = 32767          # two maxima: argmax is the first
    sim = run1("rsum.i64.i16 0x800, 0, 172\n"
               "rsumsq.i64.i16 0x808, 0, 172\n"
               "rmax.i32.i16 0x810, 0, 172\n"
               "rmaxabs.i32.i16 0x814, 0, 172\n"
               "argmax.i32.i16 0x818, 0, 172\n"
               "rsumsq.i16.i16 0x81c, 0, 172", [(0, x)])
    x64 = x.astype(np.int64)
    assert rd(sim, 0x800, 1, np.int64)[0] == x64.sum()
    assert rd(sim, 0x808, 1, np.int64)[0] == (x64 * x64).sum()
    assert rd(sim, 0x810, 1, np.int32)[0] == 32767
    assert rd(sim, 0x814, 1, np.int32)[0] == np.abs(x64).max()
    assert rd(sim, 0x818, 1, np.int32)[0] == nx.argmax(x) == 5
    assert rd(sim, 0x81C, 1, np.int16)[0] == 32767          # saturated


# -- fused vector operations --------------------------------------------------------------------

@pytest.mark.parametrize("case", ["random", "zeros", "extremes"])
@pytest.mark.parametrize("shift", [0, -1, 2])
def test_rmsnorm(case, shift):
    n = 64
    x = {"random": rand(np.int16, n, -3000, 3000), "zeros": np.zeros(n, np.int16),
         "extremes": np.where(np.arange(n) % 2, 32767, -32768).astype(np.int16)}[case]
    g = rand(np.int16, n, 10000, 32767)
    eps = np.array([671], "<i8")
    sim = run1(f"rmsnorm.i16.i16 0x800, 0x0, 0x200, 64, 0x300, {shift}",
               [(0, x), (0x200, g), (0x300, eps)])
    ref = nx.rmsnorm(x[None], g, shift, 671, nx.rsqrt_table())[0]
    np.testing.assert_array_equal(rd(sim, 0x800, n, np.int16), ref)


@pytest.mark.parametrize("src", ["i16", "i32"])
@pytest.mark.parametrize("case", ["random", "zeros", "extremes", "tiny"])
def test_dynq_record(src, case):
    dt = np.int16 if src == "i16" else np.int32
    n = 172
    x = {"random": rand(dt, n), "zeros": np.zeros(n, dt), "tiny": rand(dt, n, -3, 3),
         "extremes": np.where(np.arange(n) % 3, np.iinfo(dt).max, np.iinfo(dt).min).astype(dt)
         }[case]
    sim = run1(f"dynq.i8.{src} 0x1000, 0x0, {n}", [(0, x)])
    x8, mu, b = nx.dynquant(x[None], nx.dynquant_table())
    hdr = rd(sim, 0x1000, W // 2, np.int16)
    assert (hdr[0], hdr[1]) == (mu[0, 0], b[0, 0]) and not hdr[2:].any()
    np.testing.assert_array_equal(rd(sim, 0x1000 + W, n, np.int8), x8[0])


def _rmsnormq_inputs(case, n):
    """(x, gain, eps) int16 / int16 / int of a `test_rmsnormq_*` case."""
    g = rand(np.int16, n, 10000, 32767)
    eps = 671
    if case == "random":
        x = rand(np.int16, n, -3000, 3000)
    elif case == "zeros":
        x = np.zeros(n, np.int16)
    elif case == "zeros-eps0":       # ss = 0: r = 0, the normalised vector and record are 0
        x, eps = np.zeros(n, np.int16), 0
    elif case == "extremes":
        x = np.where(np.arange(n) % 2, 32767, -32768).astype(np.int16)
        g = np.where(np.arange(n) % 3, 32767, -32768).astype(np.int16)
    elif case == "outlier":          # one element dominates: the others quantise to ~0
        x = rand(np.int16, n, -40, 40)
        x[n // 3] = -32768
        g = rand(np.int16, n, -32768, 32767)
        g[n // 3] = 32767            # a full gain on it: a negative shift saturates it
    else:                            # "tiny": |y| of a few units, b of 0 .. 2
        x = rand(np.int16, n, -3000, 3000)
        g = rand(np.int16, n, -3, 3)
    return x, g, eps


@pytest.mark.parametrize("case", ["random", "zeros", "zeros-eps0", "extremes", "outlier",
                                  "tiny"])
@pytest.mark.parametrize("n, shift", [(64, 0), (172, 2), (1, 0), (13, -6), (9, 40),
                                      (64, -15)])
def test_rmsnormq_equals_rmsnorm_then_dynq(case, n, shift):
    """The fused rmsnormq record is bit for bit the record of rmsnorm.i16.i16 + dynq.i8.i16,
    and dynquant(rmsnorm(...)) of the golden model; negative shifts saturate the int16
    normalised vector (its max-abs is then 32767 or 32768)."""
    x, g, eps = _rmsnormq_inputs(case, n)
    data = [(0, x), (0x400, g), (0x600, np.array([eps], "<i8"))]
    fused = run1(f"rmsnormq.i8.i16 0x1000, 0x0, 0x400, {n}, 0x600, {shift}", data)
    pair = run1(f"rmsnorm.i16.i16 0x800, 0x0, 0x400, {n}, 0x600, {shift}\n"
                f"dynq.i8.i16 0x1000, 0x800, {n}", data)
    rec = W + -(-n // W) * W
    np.testing.assert_array_equal(rd(fused, 0x1000, rec, np.uint8),
                                  rd(pair, 0x1000, rec, np.uint8))
    y = nx.rmsnorm(x[None], g, shift, eps, nx.rsqrt_table())
    x8, mu, b = nx.dynquant(y, nx.dynquant_table())
    hdr = rd(fused, 0x1000, W // 2, np.int16)
    assert (hdr[0], hdr[1]) == (mu[0, 0], b[0, 0]) and not hdr[2:].any()
    np.testing.assert_array_equal(rd(fused, 0x1000 + W, n, np.int8), x8[0])
    if shift < 0 and case in ("extremes", "outlier"):
        assert np.abs(y.astype(np.int64)).max() >= 32767       # the saturating edge is hit
    cyc = [fused.tile((0, 0)).perf.vector_cycles, pair.tile((0, 0)).perf.vector_cycles]
    assert cyc[0] < cyc[1]


@pytest.mark.parametrize("program, code", [
    ("rmsnormq.i8.i16 0x1000, 0x0, 0x400, 0, 0x600, 0", ErrorCode.SHAPE),
    ("rmsnormq.i8.i16 0x1000, 0x1, 0x400, 8, 0x600, 0", ErrorCode.ALIGN),
    ("rmsnormq.i8.i16 0x1000, 0x0, 0x400, 8, 0x604, 0", ErrorCode.ALIGN),
    ("rmsnormq.i8.i16 0x1004, 0x0, 0x400, 8, 0x600, 0", ErrorCode.ALIGN),
    ("rmsnormq.i8.i16 0x7ff8, 0x0, 0x400, 8, 0x600, 0", ErrorCode.SRAM_RANGE),
    ("rmsnormq.i8.i16 0x1000, 0x0, 0x400, 8, 0x600, -40", ErrorCode.ARITH),
    # the negative shift (RMSNorm's ARITH) is found before the misaligned record
    ("rmsnormq.i8.i16 0x1004, 0x0, 0x400, 8, 0x600, -40", ErrorCode.ARITH),
    ("rmsnormq.i8.i16 0x1000, 0x0, 0x400, 8, 0x608, 0", ErrorCode.ARITH),   # eps < 0: ss < 0
])
def test_rmsnormq_errors(program, code):
    """rmsnormq refuses as RMSNorm does, then as the record's dynq does; writes nothing."""
    sim = IsaSim(1, 1, CFG)
    sim.write((0, 0), 0x0, rand(np.int16, 8, -3000, 3000))
    sim.write((0, 0), 0x400, rand(np.int16, 8, 10000, 32767))
    sim.write((0, 0), 0x600, np.array([671, -(1 << 40)], "<i8"))
    sim.write((0, 0), 0x1000, np.full(32, 0x55, np.uint8))
    sim.load_program((0, 0), tables(sim) + "\n" + program + "\nhalt")
    sim.start((0, 0))
    sim.run()
    t = sim.tile((0, 0))
    assert t.error == code, t.error_message
    np.testing.assert_array_equal(rd(sim, 0x1000, 32, np.uint8), np.full(32, 0x55))


def test_rmsnormq_needs_both_tables():
    for missing in (TableId.RSQRT, TableId.DYNQ):
        sim = IsaSim(1, 1, IsaConfig(sram_bytes=32768))
        loads = "\n".join(ln for ln in tables(sim).splitlines()
                          if missing.name.lower() not in ln)
        sim.load_program((0, 0), loads + "\nrmsnormq.i8.i16 0x1000, 0x0, 0x400, 8, 0x600, 0"
                                 "\nhalt")
        sim.write((0, 0), 0x600, np.array([671], "<i8"))
        sim.start((0, 0))
        sim.run()
        assert sim.tile((0, 0)).error == ErrorCode.TABLE


@pytest.mark.parametrize("T", [1, 7, 200])
def test_softmax(T):
    t = rand(np.int32, T, -40000, 40000)
    if T > 1:
        t[1] = t[0]
    sim = run1(f"softmax.u16.i32 0x1000, 0x0, {T}", [(0, t)])
    ref = nx.softmax(t[None], None, nx.exp2_table(), nx.recip_table())[0]
    np.testing.assert_array_equal(rd(sim, 0x1000, T, np.uint16), ref)


@pytest.mark.parametrize("bits", [8, 16])
def test_rope(bits):
    hs, heads = 8, 4
    x = rand(np.int16, hs * heads)
    x[:4] = [32767, -32768, -32768, -32768]
    cos, sin = nx.rope_tables(32, hs)
    pos = 13
    row = np.concatenate([cos[pos], sin[pos]])
    sim = run1(f"rope.i{bits}.i16 0x800, 0x0, 0x400, {hs * heads}, {hs}, 14",
               [(0, x), (0x400, row)])
    ref = nx.rope(x.reshape(heads, hs), cos[pos][None], sin[pos][None], 14, bits).reshape(-1)
    np.testing.assert_array_equal(rd(sim, 0x800, hs * heads, np.dtype(f"int{bits}")), ref)


def test_silu():
    h = rand(np.int16, 172)
    h[:3] = [32767, -32768, 0]
    sim = run1("silu.i16.i16 0x800, 0x0, 172, 11", [(0, h)])
    np.testing.assert_array_equal(rd(sim, 0x800, 172, np.int16),
                                  nx.silu(h, 11, nx.sigmoid_table()))


def test_weighted_sum():
    T, D, stride = 21, 8, 32
    p = rand(np.uint16, T, 0, 2**15)
    v = rand(np.int8, T * stride).reshape(T, stride)
    v[0, :D] = -128
    sim = run1(f"wsum.i32.u16 0x800, 0x0, 0x100, {T}, {D}, {stride}", [(0, p), (0x100, v)])
    ref = np.einsum("t,td->d", p.astype(np.int32), v[:, :D].astype(np.int32))
    np.testing.assert_array_equal(rd(sim, 0x800, D, np.int32), ref)


# -- matrix unit -------------------------------------------------------------------------------

def _records(rows):
    """Records (header word with a random scale code, then padded int8) of int8 rows."""
    K = rows.shape[1]
    rec = CFG.record_bytes(K)
    out = np.zeros((rows.shape[0], rec), np.uint8)
    mu = RNG.integers(512, 1024, rows.shape[0])
    b = RNG.integers(0, 16, rows.shape[0])
    for r in range(rows.shape[0]):
        out[r, :4] = np.array([mu[r], b[r]], "<i2").view(np.uint8)
        out[r, W:W + K] = rows[r].view(np.uint8)
    return out, mu, b


def _plain(rows):
    K = rows.shape[1]
    out = RNG.integers(0, 256, (rows.shape[0], CFG.pad(K))).astype(np.uint8)  # junk padding
    out[:, :K] = rows.view(np.uint8)
    return out


@pytest.mark.parametrize("M, N, K", [(1, 64, 64), (4, 13, 172), (1, 5, 1), (3, 9, 8),
                                     (4, 2, 512), (2, 172, 20)])
@pytest.mark.parametrize("fill", ["random", "extreme"])
@pytest.mark.parametrize("td", ["i8", "i16", "i32"])
def test_matmul(M, N, K, fill, td):
    x = rand(np.int8, M * K).reshape(M, K)
    w = rand(np.int8, N * K).reshape(N, K)
    if fill == "extreme":
        x[:] = -128
        w[::2] = -128
        w[1::2] = 127
    xr, mu, b = _records(x)
    m = RNG.integers(2**14, 2**15, N)
    s = RNG.integers(40, 56, N)
    ms = np.stack([m, s], 1).reshape(-1).astype("<u2")
    sim = run1(f"matmul.{td} 0x3000, 0x0, 0x1000, 0x5000, {N}, {K}, {M}",
               [(0, xr), (0x1000, _plain(w)), (0x5000, ms)])
    bits = {"i8": 8, "i16": 16, "i32": 32}[td]
    ref = nx.requant_dyn(nx.matmul(x, w), mu[:, None], b[:, None], m, s, bits)
    stride = CFG.pad(N * bits // 8)
    for r in range(M):
        np.testing.assert_array_equal(rd(sim, 0x3000 + r * stride, N, np.dtype(f"int{bits}")),
                                      ref[r])


@pytest.mark.parametrize("M, N, K", [(1, 1, 8), (2, 30, 8), (1, 12, 13)])
def test_matqk_and_matraw(M, N, K):
    q = rand(np.int8, M * K).reshape(M, K)
    k = rand(np.int8, N * K).reshape(N, K)
    qr, qmu, qb = _records(q)
    kr, kmu, kb = _records(k)
    pair = np.array([18285, 58], "<u2")
    sim = run1(f"matqk.i32 0x2000, 0x0, 0x400, 0x2f00, {N}, {K}, {M}\n"
               f"matraw.i32 0x2800, 0x100, 0xc00, {N}, {K}, {M}",
               [(0, qr), (0x400, kr), (0x2F00, pair), (0x100, _plain(q)), (0xC00, _plain(k))])
    acc = nx.matmul(q, k)
    ref = nx.requant_dyn(acc, qmu[:, None] * kmu[None, :], qb[:, None] + kb[None, :],
                         18285, 58, 32)
    stride = CFG.pad(4 * N)
    for r in range(M):
        np.testing.assert_array_equal(rd(sim, 0x2000 + r * stride, N, np.int32), ref[r])
        np.testing.assert_array_equal(rd(sim, 0x2800 + r * stride, N, np.int32), acc[r])


@pytest.mark.parametrize("m", [1, 2, 4])
def test_matrix_cycles_write_back_bound(m):
    """With one word per K record (head size 8 at W = 8) the write-back, 1 + m cycles per
    result, sets the pace: after the activation headers (2 m), the pair (2) and the first K
    header (1) each of the n scores costs 1 + m (the first product and the m writes, the
    next score taken in the cycle of the last write), + 1 for the cycle after the last
    write (``docs/tile.md``, "Matrix write-back")."""
    from chipotle.isa.core import matrix_cycles
    for n in (1, 2, 65):
        assert matrix_cycles(Opcode.MATQK, m, n, 8, 8) == 1 + 2 * m + 2 + 1 + n * (1 + m) + 1
        assert matrix_cycles(Opcode.MATRAW, m, n, 8, 8) >= 1 + n * m + 1
    # the unit alone would take 1 + m + n + 3 cycles: the write-back, not the unit, is slow,
    # m cycles more per result (1 + m against the unit's one weight word)
    assert matrix_cycles(Opcode.MATQK, m, 65, 8, 8) > (1 + m + 65 + 3) + 65 * m
    # with the SRAM's register stage (L > 1) the write-back's scaled stage adds a cycle to
    # each result, and the next side word lands L cycles after its read: P = max(2 + m,
    # 1 + L) per result, the last 2 + m; the headers and the pair 1 + L each, the first
    # side word L
    for L in (2, 3):
        heads = (1 + L) * (m + 1) + L
        for n in (1, 2, 65):
            assert (matrix_cycles(Opcode.MATQK, m, n, 8, 8, sram_latency=L)
                    == 1 + heads + (n - 1) * max(2 + m, 1 + L) + 2 + m + 1), (L, n)
    # unit-bound (K = 172, R = 22 words a row): at L > 1 the unit's input stage delays
    # every result by a cycle (MATRAW: 1 more in all), and the scaled stage the last one's
    # write-back by one more (MATMUL: 2); the header reads hide under the load
    for n in (1, 13):
        base = matrix_cycles(Opcode.MATMUL, m, n, 172, 8)
        raw = matrix_cycles(Opcode.MATRAW, m, n, 172, 8)
        for L in (2, 3):
            assert matrix_cycles(Opcode.MATMUL, m, n, 172, 8, sram_latency=L) == base + 2
            assert matrix_cycles(Opcode.MATRAW, m, n, 172, 8, sram_latency=L) == raw + 1
    with pytest.raises(ValueError, match="matrix opcode"):
        matrix_cycles(Opcode.VADD, m, 1, 8, 8)
    with pytest.raises(ValueError, match="positive"):
        matrix_cycles(Opcode.MATMUL, m, 0, 8, 8)


def test_matmul_cost_and_perf():
    sim = run1("matmul.i16 0x2000, 0x0, 0x400, 0x2f00, 13, 172, 4",
               [(0x2F00, np.tile(np.array([2**14, 40], "<u2"), 13))])
    t = sim.tile((0, 0))
    instr = decode(assemble("matmul.i16 0x2000, 0x0, 0x400, 0x2f00, 13, 172, 4")[0])
    kw = 22
    # R = 22 weight words per row outpace the write-back's 1 + M = 5 cycles per result:
    # issue, load, stream, the pipeline (3) and the last result's write-back (taken in the
    # cycle it is offered, then its first product and M = 4 writes)
    assert instr_cycles(instr, CFG, 13) == 1 + 1 + 4 * kw + 13 * kw + 3 + (1 + 4)
    assert t.perf.macs == 4 * 13 * 172
    assert t.perf.matrix_cycles == instr_cycles(instr, CFG, 13)
    table_cycles = sum(instr_cycles(Instr(Opcode.TABLE, c=tid.value), CFG) for tid in TableId)
    # + Matrix-Ends (the controller's, not the unit's), + halt
    assert t.perf.cycles == table_cycles + t.perf.matrix_cycles + CFG.cost.mat_ends + 1


# -- scalar, loops, copy ------------------------------------------------------------------------

def test_scalar_registers_and_memory():
    sim = run1("""
        li   r1, 0xfffffffe
        add  r2, r1+3, 0            ; wraps to 1
        sub  r3, 0, r2+1            ; -2
        mul  r4, r1, 3              ; (2**32 - 2) * 3 mod 2**32
        li   r0, 99                 ; ignored
        add  r5, r0+7, 0
        st   0x100, r5+0x1000
        ld   r6, 0x100
        st   0x104, r3
        st   0x108, r4
        st   0x10c, r2
    """)
    assert list(rd(sim, 0x100, 4, np.uint32)) == [0x1007, 2**32 - 2, (2**32 - 2) * 3 % 2**32, 1]
    assert sim.tile((0, 0)).regs[0] == 0 and sim.tile((0, 0)).regs[6] == 0x1007


def test_loops_nested_zero_and_dynamic():
    sim = run1("""
        li    r1, 0x100
        li    r9, 3
        loop  r9+1, outer           ; 4 times
        loop  2, inner              ; 2 times: ends at the same place as nothing else
        st    r1, r1
        add   r1, r1+4, 0
    inner:
        loop  0, skip               ; never runs
        st    0x300, 1
    skip:
        loop  3, outer              ; ends together with the outer loop
        add   r2, r2+1, 0
    outer:
        st    0x200, r2
        copy  0x400, 0x100, 32
    """)
    assert list(rd(sim, 0x100, 8, np.uint32)) == [0x100 + 4 * i for i in range(8)]
    assert rd(sim, 0x200, 1, np.uint32)[0] == 12
    assert rd(sim, 0x300, 1, np.uint32)[0] == 0
    np.testing.assert_array_equal(rd(sim, 0x400, 32, np.uint8), rd(sim, 0x100, 32, np.uint8))


# -- SEND / WAIT across tiles -------------------------------------------------------------------

def test_gather_queues_at_the_receiving_port():
    """Two tiles one hop from (0, 0) send it 4 words each at once: its network port takes one
    flit per cycle, so the second SEND's flits (5: a head and 4 words) queue behind the
    first's and the WAIT for both ends 5 cycles after a lone SEND's bump would."""
    def run(senders):
        sim = IsaSim(2, 2, CFG)
        sim.load_program((0, 0), f"wait 0, {len(senders)}\nhalt")
        for xy in senders:
            sim.load_program(xy, "send 0x200, 0x100, 32, (0, 0), 0\nhalt")
        for xy in ((0, 0), *senders):
            sim.start(xy)
        sim.run()
        return sim.tile((0, 0)).perf.cycles

    alone = run([(1, 0)])
    # SEND, hops, halt; the instruction after the WAIT runs in the cycle before the one
    # after the bump's arrival (the RTL's registered WAIT, docs/tile.md)
    assert alone == (1 + 4 + 1) + CFG.cost.hop - 1 + 1
    assert run([(1, 0), (0, 1)]) == alone + 4 + 1


def test_two_tiles_send_wait_round_trip():
    """(0,0) sends a vector to (1,0), which doubles it and sends it back."""
    sim = IsaSim(2, 1, CFG)
    x = rand(np.int16, 32, -1000, 1000)
    sim.write((0, 0), 0x100, x)
    sim.load_program((0, 0), """
        send  0x200, 0x100, 64, (1, 0), 3     ; to (1,0) at 0x200, bump its counter 3
        wait  5, 1                            ; the answer
        done  1
        halt
    """)
    sim.load_program((1, 0), """
        wait  3, 1
        vadd.i16.i16 0x300, 0x200, 0x200, 32
        send  0x400, 0x300, 64, (0, 0), 5
        done  2
        halt
    """)
    sim.start((1, 0))            # the receiver first: it must block, not fail
    sim.start((0, 0))
    sim.run()
    np.testing.assert_array_equal(sim.read((0, 0), 0x400, 32, np.int16), 2 * x)
    assert [(e.tile, e.code) for e in sim.events] == [((1, 0), 2), ((0, 0), 1)]
    t0, t1 = sim.tile((0, 0)), sim.tile((1, 0))
    assert t0.counters[5] == 0 and t1.counters[3] == 0            # WAIT took them
    # 8 words behind one head, the last (only) packet bumping the counter
    assert t0.perf.flits_sent == 8 + 1 and t1.perf.bytes_received == 64
    # (1,0) started first but waits for the message: its clock jumps to the cycle before the
    # arrival (the instruction after the WAIT runs in the cycle of the grant); the WAIT, its
    # first instruction, retired in its first cycle, then a refill cycle (CostModel.refill)
    send = decode(assemble("send 0x200, 0x100, 64, (1, 0), 3")[0])
    arrival = instr_cycles(send, CFG, 64) + CFG.cost.hop
    assert t1.perf.wait_cycles == arrival - 2 - CFG.cost.refill and t1.perf.cycles > arrival
    assert t0.perf.cycles > t1.perf.cycles - 10       # (0,0) waited for the answer too


def test_multicast_rectangle_and_signal_only_send():
    sim = IsaSim(3, 2, CFG)
    data = np.arange(40, dtype=np.uint8)
    sim.write((0, 0), 0x100, data)
    sim.load_program((0, 0), """
        send 0x800, 0x100, 40, (1:2, 0:1), 2
        wait 0, 4                 ; four acknowledgements
        done 9
        halt
    """)
    for x in (1, 2):
        for y in (0, 1):
            sim.load_program((x, y), """
                wait 2, 1
                send 0, 0, 0, (0, 0), 0          ; signal only: bumps (0,0)'s counter 0
                halt
            """)
            sim.start((x, y))
    sim.start((0, 0))
    sim.run()
    for x in (1, 2):
        for y in (0, 1):
            np.testing.assert_array_equal(sim.read((x, y), 0x800, 40, np.uint8), data)
    assert not sim.read((0, 0), 0x800, 40, np.uint8).any()        # outside the rectangle
    assert not sim.read((0, 1), 0x800, 40, np.uint8).any()
    assert [e.code for e in sim.events] == [9]
    # 5 words in multicast packets of at most 7 payload flits: 5 + 1 head, the packet
    # bumping the counter
    assert sim.tile((0, 0)).perf.flits_sent == 5 + 1


def test_deadlock_is_detected_and_explained():
    sim = IsaSim(2, 1, CFG)
    sim.load_program((0, 0), "wait 1, 1\nsend 0, 0, 0, (1, 0), 2\nhalt")
    sim.load_program((1, 0), "wait 2, 1\nsend 0, 0, 0, (0, 0), 1\nhalt")
    sim.start((0, 0))
    sim.start((1, 0))
    with pytest.raises(DeadlockError) as e:
        sim.run()
    msg = str(e.value)
    assert "tile (0,0) at pc 0 waits for counter 1 to reach 1 (it holds 0)" in msg
    assert "tile (1,0) at pc 0 waits for counter 2 to reach 1 (it holds 0)" in msg
    assert [w[0] for w in e.value.waiting] == [(0, 0), (1, 0)]


def test_deadlock_with_a_halted_tile_and_host_bump():
    sim = IsaSim(2, 1, CFG)
    sim.load_program((0, 0), "send 0, 0, 0, (1, 0), 0\nhalt")
    sim.load_program((1, 0), "wait 0, 2\ndone 5\nhalt")
    sim.start((0, 0))
    sim.start((1, 0))
    with pytest.raises(DeadlockError, match=r"counter 0 to reach 2 \(it holds 1\); "
                                            r"tile \(0,0\) is halted"):
        sim.run()
    sim.bump_counter((1, 0), 0)           # the host supplies the missing bump
    sim.run()
    assert [e.code for e in sim.events] == [5]


# -- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("program, code", [
    (".word 0", ErrorCode.ILLEGAL),
    (".word 0x3f", ErrorCode.ILLEGAL),
    ("copy 0x3ff8, 0, 9", ErrorCode.SRAM_RANGE),
    ("li r1, 0xffffffff\ncopy r1, 0, 1", ErrorCode.SRAM_RANGE),
    ("vadd.i16.i16 0x101, 0, 0, 4", ErrorCode.ALIGN),
    ("matmul.i16 0x800, 0x4, 0x100, 0x0, 4, 8, 1", ErrorCode.ALIGN),
    ("matmul.i16 0x800, 0x0, 0x100, 0x0, 4, 8, 5", ErrorCode.SHAPE),
    ("matmul.i16 0x800, 0x0, 0x100, 0x0, 4, 513, 1", ErrorCode.SHAPE),
    ("matmul.i16 0x800, 0x0, 0x100, 0x0, 0, 8, 1", ErrorCode.SHAPE),
    ("vadd.i16.i16 0, 0, 0, 0", ErrorCode.SHAPE),
    ("rope.i16.i16 0, 0, 0x100, 12, 8, 14", ErrorCode.SHAPE),
    ("softmax.u16.i32 0x100, 0, 4", ErrorCode.TABLE),
    ("send 0, 0, 8, (1, 0), 0", ErrorCode.ROUTE),
    ("send 0, 0, 12, (0, 0), 0", ErrorCode.ALIGN),
    ("send 0x3ff8, 0, 16, (0, 0), 0", ErrorCode.SRAM_RANGE),
    ("wait 16, 1", ErrorCode.COUNTER),
    ("send 0, 0, 8, (0, 0), 99", ErrorCode.COUNTER),
    ("loop 2, l1\nloop 2, l1\nloop 2, l1\nloop 2, l1\nloop 2, l1\nnop\nl1: nop", ErrorCode.LOOP),
    ("nop\n" * 3 + "jmp_off_end: nop", ErrorCode.IMEM_RANGE),
    # a dynamic exponent larger than the static shift: requant_dyn refuses it
    ("li r1, 0x001f0200\nst 0x400, r1\nmatmul.i16 0x800, 0x400, 0x100, 0x0, 1, 8, 1",
     ErrorCode.ARITH),
])
def test_errors_halt_only_the_faulty_tile(program, code):
    cfg = IsaConfig(sram_bytes=16384, imem_words=64 if "jmp" not in program else 4)
    sim = IsaSim(1, 2, cfg)
    sim.load_program((0, 0), program + ("" if "jmp" in program else "\nhalt"))
    sim.load_program((0, 1), "loop 100, e\nvadd.i16.i16 0x100, 0x100, 0x200, 8\ne: done 3\nhalt")
    sim.write((0, 1), 0x200, np.ones(8, np.int16))
    sim.start((0, 0))
    sim.start((0, 1))
    sim.run()
    bad, good = sim.tile((0, 0)), sim.tile((0, 1))
    assert bad.state == TileState.ERROR and bad.error == code, bad.error_message
    assert bad.error_message
    assert good.state == TileState.HALTED and good.error == ErrorCode.NONE
    np.testing.assert_array_equal(sim.read((0, 1), 0x100, 8, np.int16), np.full(8, 100))
    assert [e.code for e in sim.events] == [3]
    with pytest.raises(ValueError, match="error flag"):
        sim.start((0, 0))
    sim.reset((0, 0))
    assert bad.error == ErrorCode.NONE and bad.state == TileState.IDLE


def test_error_pc_and_message():
    sim = IsaSim(1, 1, CFG)
    sim.load_program((0, 0), "nop\nnop\ncopy 0x8000, 0, 1\nhalt")
    sim.start((0, 0))
    sim.run()
    t = sim.tile((0, 0))
    assert t.error_pc == 2 and t.pc == 2 and "past the end of the SRAM" in t.error_message



# -- KVAPP ----------------------------------------------------------------------------------

KV = KvLayout(n_layers=2, n_kv_heads=3, head_size=12, max_pos=7, base=2500, word_bytes=W,
              k_header=True)


def _kv_sim(layout=KV, seed=11):
    """A 1x1 mesh whose SRAM is random bytes (so that untouched bytes are visible)."""
    sim = IsaSim(1, 1, CFG)
    sim.write((0, 0), 0, np.random.default_rng(seed).integers(0, 256, CFG.sram_bytes,
                                                              dtype=np.uint8))
    sim.set_kv_layout((0, 0), layout)
    return sim


def _run_prog(sim, text):
    sim.load_program((0, 0), text)
    sim.start((0, 0))
    sim.run()
    return sim.tile((0, 0))


def test_kvapp_places_records_and_rows_by_the_layout():
    """Every (layer, head) at positions 0, 3 and max_pos - 1: the K record (header word and
    head_size int8) at ``W * k_row``, the V row at ``W * v_row``; padding and every other
    byte untouched."""
    sim = _kv_sim()
    before = sim.tile((0, 0)).sram.copy()
    lines, expect = [], before.copy()
    krec, vrow = W * KV.k_row_words, W * KV.v_row_words
    k = 0
    for pos in (0, 3, KV.max_pos - 1):
        for layer in range(KV.n_layers):
            for head in range(KV.n_kv_heads):
                ks, vs = 0x100 + krec * k, 0x1000 + vrow * k
                lines.append(f"kvapp {kv_slot(layer, head)}, {ks:#x}, {vs:#x}, {pos}")
                kd, vd = W * KV.k_row(layer, head, pos), W * KV.v_row(layer, head, pos)
                expect[kd:kd + W + KV.head_size] = before[ks:ks + W + KV.head_size]
                expect[vd:vd + KV.head_size] = before[vs:vs + KV.head_size]
                k += 1
    t = _run_prog(sim, "\n".join(lines) + "\nhalt")
    assert t.error == ErrorCode.NONE, t.error_message
    np.testing.assert_array_equal(t.sram, expect)
    # the records are what matqk reads: K rows at stride W + pad(head_size)
    assert W * KV.k_row_words == CFG.record_bytes(KV.head_size)
    assert t.perf.dma_cycles == k * instr_cycles(decode(assemble(lines[0])[0]), CFG,
                                                 KV.k_row_words + KV.v_row_words)


def test_kvapp_register_operands_and_capacity():
    t = _run_prog(_kv_sim(), f"""
        li r1, {kv_slot(1, 2)}
        li r2, {KV.max_pos - 2}
        kvapp r1, 0x100, 0x200, r2+1
        halt
    """)
    assert t.error == ErrorCode.NONE and t.kv_capacity == KV.max_pos
    kd = W * KV.k_row(1, 2, KV.max_pos - 1)
    np.testing.assert_array_equal(t.sram[kd:kd + W + 12], t.sram[0x100:0x100 + W + 12])


@pytest.mark.parametrize("program, code", [
    (f"kvapp 0, 0x100, 0x200, {KV.max_pos}", ErrorCode.KV_RANGE),             # at capacity
    ("li r1, 0xffffffff\nkvapp 0, 0x100, 0x200, r1", ErrorCode.KV_RANGE),
    (f"kvapp {kv_slot(KV.n_layers, 0)}, 0x100, 0x200, 0", ErrorCode.KV_RANGE),
    (f"kvapp {kv_slot(0, KV.n_kv_heads)}, 0x100, 0x200, 0", ErrorCode.KV_RANGE),
    ("li r1, 0x10000\nkvapp r1, 0x100, 0x200, 0", ErrorCode.KV_RANGE),       # slot >= 2**16
    ("kvapp 0, 0x104, 0x200, 0", ErrorCode.ALIGN),
    ("kvapp 0, 0x100, 0x201, 0", ErrorCode.ALIGN),
    (f"kvapp 0, {CFG.sram_bytes - 2 * W:#x}, 0x200, 0", ErrorCode.SRAM_RANGE),  # 3 words
    (f"kvapp 0, 0x100, {CFG.sram_bytes - W:#x}, 0", ErrorCode.SRAM_RANGE),      # 2 words
    ("li r1, 0xfffffff8\nkvapp 0, r1, 0x200, 0", ErrorCode.SRAM_RANGE),         # no wrap
    # order: sources (K alignment, K range, V alignment, V range) before the KV checks
    (f"kvapp 0, 0x104, 0x201, {KV.max_pos}", ErrorCode.ALIGN),
    (f"kvapp {kv_slot(9, 9)}, 0x100, {CFG.sram_bytes:#x}, 0", ErrorCode.SRAM_RANGE),
])
def test_kvapp_refusals_write_nothing(program, code):
    sim = _kv_sim()
    before = sim.tile((0, 0)).sram.copy()
    t = _run_prog(sim, "kvapp 0, 0x300, 0x380, 0\n" + program + "\nhalt")
    assert t.state == TileState.ERROR and t.error == code, t.error_message
    assert t.error_pc == len(program.splitlines())
    kd, vd = W * KV.k_row(0, 0, 0), W * KV.v_row(0, 0, 0)
    expect = before.copy()
    expect[kd:kd + W + 12] = before[0x300:0x300 + W + 12]
    expect[vd:vd + 12] = before[0x380:0x380 + 12]
    np.testing.assert_array_equal(t.sram, expect)


def test_kvapp_without_a_fitting_layout_is_refused():
    for layout in (None, KvLayout(n_layers=4, n_kv_heads=4, head_size=64, max_pos=200,
                                  base=0, word_bytes=W, k_header=True)):
        sim = _kv_sim(layout)
        before = sim.tile((0, 0)).sram.copy()
        t = _run_prog(sim, "kvapp 0, 0x100, 0x200, 0\nhalt")
        assert t.kv_capacity == 0 and t.error == ErrorCode.KV_RANGE
        np.testing.assert_array_equal(t.sram, before)


def test_kv_layout_is_host_state():
    sim = _kv_sim()
    sim.reset((0, 0))
    assert sim.tile((0, 0)).kv_layout == KV           # kept by a reset, like the SRAM
    with pytest.raises(ValueError, match="k_header"):
        sim.set_kv_layout((0, 0), KvLayout(1, 1, 8, 4, word_bytes=W))
    with pytest.raises(ValueError, match="word_bytes"):
        sim.set_kv_layout((0, 0), KvLayout(1, 1, 8, 4, word_bytes=4, k_header=True))
    with pytest.raises(TypeError, match="KvLayout"):
        sim.set_kv_layout((0, 0), (1, 1, 8, 4))
    with pytest.raises(ValueError, match="layer"):
        kv_slot(256, 0)
    assert kv_slot(3, 5) == 0x305


# -- KVQK ----------------------------------------------------------------------------------

def _kvqk_sim(seed=13, overlap=False):
    """`_kv_sim` with every K record and 4 query records at 0 given small scale codes, and the
    score pair at 0x2f00 (no score reaches ``ARITH``)."""
    cfg = IsaConfig(sram_bytes=CFG.sram_bytes, word_bytes=W, max_m=4, lanes=8, k_max=512,
                    overlap=overlap)
    sim = IsaSim(1, 1, cfg)
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, CFG.sram_bytes, dtype=np.uint8)
    rec = CFG.record_bytes(KV.head_size)
    heads = [r * rec for r in range(4)] + [W * KV.k_row(la, h, p) for la in range(KV.n_layers)
                                           for h in range(KV.n_kv_heads)
                                           for p in range(KV.max_pos)]
    for a in heads:
        image[a:a + 4] = np.array([rng.integers(-300, 300), rng.integers(-8, 8)],
                                  "<i2").view(np.uint8)
    image[0x2F00:0x2F04] = np.array([18285, 30], "<u2").view(np.uint8)
    sim.write((0, 0), 0, image)
    sim.set_kv_layout((0, 0), KV)
    return sim


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("layer, head, n, M, td", [
    (0, 0, 1, 1, "i32"), (1, 2, KV.max_pos, 2, "i32"), (1, 0, 3, 4, "i16"),
    (0, 1, KV.max_pos - 1, 4, "i8")])
def test_kvqk_equals_matqk_on_the_same_rows(layer, head, n, M, td, overlap):
    """``kvqk`` writes exactly what ``matqk`` over ``W * k_row(layer, head, 0)`` with K =
    head_size writes (positions 0 .. n-1, M query records), and costs ``kv_stream`` more."""
    slot = kv_slot(layer, head)
    runs = []
    for line in (f"kvqk.{td} 0x3000, 0x0, {slot}, 0x2f00, {n}, {M}",
                 f"matqk.{td} 0x3000, 0x0, {W * KV.k_row(layer, head, 0)}, 0x2f00, {n}, "
                 f"{KV.head_size}, {M}"):
        t = _run_prog(_kvqk_sim(overlap=overlap), line + "\nhalt")
        assert t.error == ErrorCode.NONE, t.error_message
        runs.append(t)
    np.testing.assert_array_equal(runs[0].sram, runs[1].sram)
    assert not np.array_equal(runs[0].sram, _kvqk_sim().tile((0, 0)).sram)   # it wrote Y
    assert runs[0].perf.macs == runs[1].perf.macs == M * n * KV.head_size
    assert runs[0].perf.mac_cycles == runs[1].perf.mac_cycles
    assert (runs[0].perf.matrix_cycles
            == runs[1].perf.matrix_cycles + CFG.cost.kv_stream)


def test_kvqk_register_operands():
    """Slot and n from registers, as a loop over heads and positions writes them."""
    sim = _kvqk_sim()
    t = _run_prog(sim, f"""
        li r1, {kv_slot(1, 1)}
        li r2, {KV.max_pos - 3}
        kvqk.i32 0x3000, 0x0, r1+1, 0x2f00, r2+3, 2
        halt""")
    assert t.error == ErrorCode.NONE, t.error_message
    ref = _run_prog(_kvqk_sim(), f"matqk.i32 0x3000, 0x0, {W * KV.k_row(1, 2, 0)}, 0x2f00, "
                                 f"{KV.max_pos}, {KV.head_size}, 2\nhalt")
    np.testing.assert_array_equal(t.sram, ref.sram)


@pytest.mark.parametrize("program, code", [
    (f"kvqk.i32 0x3000, 0x0, 0, 0x2f00, {KV.max_pos + 1}, 1", ErrorCode.KV_RANGE),
    ("kvqk.i32 0x3000, 0x0, 0, 0x2f00, 0, 1", ErrorCode.KV_RANGE),
    (f"kvqk.i32 0x3000, 0x0, {kv_slot(KV.n_layers, 0)}, 0x2f00, 1, 1", ErrorCode.KV_RANGE),
    (f"kvqk.i32 0x3000, 0x0, {kv_slot(0, KV.n_kv_heads)}, 0x2f00, 1, 1", ErrorCode.KV_RANGE),
    ("li r1, 0x10000\nkvqk.i32 0x3000, 0x0, r1, 0x2f00, 1, 1", ErrorCode.KV_RANGE),
    ("kvqk.i32 0x3000, 0x0, 0, 0x2f00, 1, 5", ErrorCode.SHAPE),
    ("kvqk.i32 0x3000, 0x4, 0, 0x2f00, 1, 1", ErrorCode.ALIGN),
    (f"kvqk.i32 0x3000, {CFG.sram_bytes - W:#x}, 0, 0x2f00, 1, 1", ErrorCode.SRAM_RANGE),
    ("kvqk.i32 0x3000, 0x0, 0, 0x2f02, 1, 1", ErrorCode.ALIGN),
    ("kvqk.i32 0x3002, 0x0, 0, 0x2f00, 1, 1", ErrorCode.ALIGN),
    (f"kvqk.i32 {CFG.sram_bytes - 4:#x}, 0x0, 0, 0x2f00, 2, 1", ErrorCode.SRAM_RANGE),
    # order: X, the pair and Y before the KV store's checks; n past 16 bits: Y first
    ("kvqk.i32 0x3002, 0x0, 0, 0x2f00, 0, 1", ErrorCode.ALIGN),
    ("li r1, 0x10001\nkvqk.i32 0x3000, 0x0, 0, 0x2f00, r1, 1", ErrorCode.SRAM_RANGE),
])
def test_kvqk_refusals_write_nothing(program, code):
    """A refused ``kvqk`` writes nothing (the one before it did), with either issue policy."""
    for overlap in (False, True):
        sim = _kvqk_sim(overlap=overlap)
        ok = "kvqk.i32 0x3800, 0x0, 1, 0x2f00, 2, 1"
        ref = _run_prog(_kvqk_sim(overlap=overlap), ok + "\nhalt").sram
        t = _run_prog(sim, ok + "\n" + program + "\nhalt")
        assert t.state == TileState.ERROR and t.error == code, t.error_message
        assert t.error_pc == len(program.splitlines())
        np.testing.assert_array_equal(t.sram, ref)


def test_kvqk_without_a_layout_is_refused():
    sim = _kvqk_sim()
    sim.set_kv_layout((0, 0), None)
    before = sim.tile((0, 0)).sram.copy()
    t = _run_prog(sim, "kvqk.i32 0x3000, 0x0, 0, 0x2f00, 1, 1\nhalt")
    assert t.error == ErrorCode.KV_RANGE
    np.testing.assert_array_equal(t.sram, before)


@pytest.mark.parametrize(("body", "refills"), [
    ("li r1, 1\nli r2, 2\nli r3, 3\nli r4, 4\nhalt", 2),    # every second single-cycle one
    ("li r1, 1\nst 0x100, r1\nli r2, 2\nhalt", 2),          # after a store: not a word ahead
    ("loop 0, e\nnop\ne:\nnop\nhalt", 1),       # a skipped loop; the nop after it a word ahead
    ("li r1, 3\nloop r1, e\nadd r2, r2+1, 0\ne:\nnop\nhalt", 3),  # the loop, its body, the nop
    # the instruction memory holds just the program, which runs off its end (IMEM_RANGE):
    # a retire past the memory goes to Fetch, not through a refill
    ("nop\nnop\nwait 0, 0", 1),
    ("nop\nnop\nli r1, 1", 1),
    # a skip onto the outer loop's end: back to the outer loop's start, then past it
    ("loop 2, e\nnop\nloop 0, e\nnop\ne:\nnop\nhalt", 3),
])
def test_refill_after_first_cycle_retires(body, refills):
    """The controller's instruction register (`CostModel.refill`, ``docs/tile.md`` "Fetch"):
    an instruction that retires in its first cycle while the instruction memory's read port
    is not a word ahead costs a refill cycle, after which the port is a word ahead; a
    skipped ``loop`` always does.  Against the same program with ``refill=0``."""
    from dataclasses import replace
    words = assemble(body)
    cycles = {}
    for refill in (0, 1):
        cfg = replace(CFG, cost=replace(CFG.cost, refill=refill), imem_words=len(words))
        sim = IsaSim(1, 1, cfg)
        sim.load_program((0, 0), words)
        sim.start((0, 0))
        sim.run()
        t = sim.tile((0, 0))
        assert t.error == (ErrorCode.NONE if body.endswith("halt") else ErrorCode.IMEM_RANGE)
        cycles[refill] = t.perf.cycles
    assert cycles[1] - cycles[0] == refills, cycles


def test_host_side_helpers_refuse_what_would_address_elsewhere():
    """Arguments that would silently name another register, another block's row or nothing
    at all are refused: a counter or instruction index outside its register window, a KV
    position outside the layout, a negative read length, a bump of less than one, and
    values a cast would wrap (a docstring audit's findings)."""
    from chipotle.config import CONFIGS
    from chipotle.driver import hostlink as hl
    from chipotle.isa.programs import padded_rows
    noc = CONFIGS["small"].noc
    with pytest.raises(ValueError, match=r"`counter` must be in \[0, 256\), not -240"):
        hl.counter_add((0, 0), -0xF0, 1, noc)
    with pytest.raises(ValueError, match=r"`counter` must be in \[0, 256\), not 65280"):
        hl.counter_add((0, 0), 0xFF00, 1, noc)
    with pytest.raises(ValueError, match=r"`index` must be in \[0, 65536\), not -1"):
        hl.imem_write((0, 0), -1, [0], noc)
    assert hl.counter_add((0, 0), 255, 1, noc).head.addr == 0x1FF
    for f in (KV.k_row, KV.k_data, KV.v_row):
        with pytest.raises(ValueError, match=r"`pos` must be in \[0, 7\) \(max_pos\), not 7"):
            f(0, 0, KV.max_pos)
        with pytest.raises(ValueError, match=r"not -1"):
            f(0, 1, -1)
    assert KV.v_row(1, 2, KV.max_pos - 1) == KV.end - KV.v_row_words
    sim = IsaSim(1, 1, IsaConfig(sram_bytes=4096, word_bytes=W))
    with pytest.raises(ValueError, match="`count` must not be negative, not -1"):
        sim.read((0, 0), 16, -1)
    with pytest.raises(ValueError, match="`k` must be at least 1, not -3"):
        sim.bump_counter((0, 0), 0, -3)
    with pytest.raises(TypeError, match="`w` must be an int8 matrix, not float64"):
        padded_rows(np.array([[300, 1.7]]), sim.config)


def test_cycles_follow_a_reloaded_program():
    """The simulator keeps each PC's cycle estimate (`IsaSim._charge`): a program loaded
    over another at the same PCs, with the same lengths, is charged its own cycles (a
    ``vmul`` and an ``rsumsq`` where a ``vadd`` and an ``argmax`` ran), those a fresh
    simulator charges."""
    first = "vadd.i16.i16 0x300, 0x200, 0x200, 40\nargmax.i32.i16 0x400, 0x200, 40\nhalt"
    second = "vmul.i32.i16 0x300, 0x200, 0x200, 40\nrsumsq.i64.i16 0x400, 0x200, 40\nhalt"

    def cycles(sim, text):
        sim.reset((0, 0))
        return _run_prog(sim, text).perf.cycles

    sim = IsaSim(1, 1, CFG)
    a = cycles(sim, first)
    b = cycles(sim, second)
    assert cycles(IsaSim(1, 1, CFG), second) == b != a
    assert cycles(sim, first) == a
