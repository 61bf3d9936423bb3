"""Fast unit tests of the vector unit on Amaranth's simulator.

A few commands of every kind against the ISA simulator on the same SRAM image (the whole
SRAM is compared after each); the cocotb benches (``test_vector_rtl.py``) do the full
random and extreme set under Verilator and Icarus.
"""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from cocotb_vector_env import (
    Case,
    Stimulus,
    VectorBenchConfig,
    VectorRef,
    VectorTop,
    decode_done,
    encode_cmd,
    model_cycles,
)

from chipotle.hw.tile.vector import MIN_RESULT_SLOTS, RESULT_SLOTS, VectorCommand, VectorUnit
from chipotle.isa.core import Dtype, ErrorCode, Opcode, TableId
from tbcommon.pysim import run_testbench

#: The default chip's unit: V = 8, W = 8, 2-word reads, 4 result slots.
CFG = VectorBenchConfig(lanes=8, word_bytes=8, sram_bytes=2048, slots=4)


def _run(cases, cfg=CFG, check_all=True):
    """Run ``cases`` on the DUT and the reference; return ``[(name, error, cycles)]``."""
    dut = VectorTop(cfg)
    ref = VectorRef(cfg)
    W = cfg.word_bytes
    out = []

    # The SRAM's contents are written and compared through its back door (`Sram.word_rows`:
    # no port cycles), not through the host port: a port read of the whole SRAM after each
    # case was most of the simulated cycles (768 of them at latency 3 for 2 KiB).  The
    # host port's own path is the SRAM's and the arbiter's (``test_tile_pysim.py``), and
    # the cocotb bench (``test_vector_rtl.py``) still reads through it.
    def sram_write(ctx, addr, words):
        for row, w in zip(dut.sram.word_rows(addr, addr + len(words)), words, strict=True):
            ctx.set(row, w)

    def sram_read(ctx, addr, count):
        return [ctx.get(row) for row in dut.sram.word_rows(addr, addr + count)]

    def words_of(lo, hi):
        return [int.from_bytes(ref.sram[k * W:(k + 1) * W].tobytes(), "little")
                for k in range(lo, hi)]

    async def testbench(ctx):
        for case in cases:
            for addr, data in case.writes:
                ref.write(addr, data)
                lo, hi = addr // W, -(-(addr + len(data)) // W)
                sram_write(ctx, lo, words_of(lo, hi))
            ctx.set(dut.i_cmd.payload, VectorCommand.from_bits(encode_cmd(case.cmd)))
            ctx.set(dut.i_cmd.valid, 1)
            await ctx.tick().until(dut.i_cmd.ready)
            ctx.set(dut.i_cmd.valid, 0)
            ctx.set(dut.o_done.ready, 1)
            for _ in range(20000):
                await ctx.tick()
                if ctx.get(dut.o_done.valid):
                    break
            else:
                raise AssertionError(f"{case.name}: no completion")
            error, cycles = decode_done(ctx.get(dut.o_done.payload.as_value()))
            await ctx.tick()
            ctx.set(dut.o_done.ready, 0)
            expected = ref.execute(case.cmd)
            assert error == expected, f"{case.name}: error {error} != {expected}"
            if error == ErrorCode.NONE:     # nothing contends: the timing model is exact
                model = model_cycles(case.cmd, cfg)
                assert cycles == model, f"{case.name}: {cycles} cycles, timing model {model}"
            if check_all:
                got = sram_read(ctx, 0, cfg.words)
                exp = words_of(0, cfg.words)
                bad = [k for k in range(cfg.words) if got[k] != exp[k]]
                assert not bad, (f"{case.name}: SRAM differs at byte "
                                 f"{[k * W for k in bad[:6]]}: "
                                 f"{[hex(got[k]) for k in bad[:3]]} != "
                                 f"{[hex(exp[k]) for k in bad[:3]]}")
            out.append((case.name, error, cycles))

    run_testbench(dut, testbench)
    return out


def _stim(seed=1):
    return Stimulus(CFG, seed)


def _run_ok(cases, cfg=CFG):
    """`_run` on cases that must all succeed: an error the reference shares would pass
    `_run`'s comparison while skipping the timing and result checks."""
    res = _run(cases, cfg)
    bad = [(name, e) for name, e, _ in res if e != ErrorCode.NONE]
    assert len(res) == len(cases) and not bad, bad


def test_elementwise_pysim():
    s = _stim()
    cases = [s.elementwise(Opcode.VADD, 13, Dtype.I16, Dtype.I8),
             s.elementwise(Opcode.VSUB, 9, Dtype.U8, Dtype.I16, "minmax"),
             s.elementwise(Opcode.VMUL, 7, Dtype.I64, Dtype.I32, "min"),
             s.reqi(11, Dtype.I8, Dtype.I32, 23456, 17),
             s.reqi(17, Dtype.I16, Dtype.I8, 1, 1),       # exact halves: round half up
             s.reqi(5, Dtype.I16, Dtype.U16, 40000, 3, op=Opcode.REQM)]
    _run_ok(cases)


def test_long_writing_passes_pysim():
    """Writing passes of 8 and more chunks, the ones the fourth result slot speeds up (fewer
    chunks never hold more than 3 slots, so only these tell 4 slots from 3 by their cycles;
    silu at n = 172 takes 103 / 89 / 82 cycles with 3 / 4 / 5 slots, so a unit or a model
    one slot off either way fails it)."""
    s = _stim(5)
    cases = [s.table_case(TableId.SIGMOID, 0), s.table_case(TableId.EXP2, 0),
             s.table_case(TableId.RECIP, 0), s.table_case(TableId.DYNQ, 0)]
    cases += [s.reqi(64, Dtype.I8, Dtype.I32, 23456, 17),
              s.elementwise(Opcode.VADD, 67, Dtype.I16, Dtype.I16),
              s.silu(64), s.silu(172), s.softmax(70), s.dynq(64, Dtype.I16)]
    _run_ok(cases)


def test_reductions_pysim():
    s = _stim(2)
    _run_ok([s.reduction(Opcode.RSUM, 17, Dtype.I16, Dtype.I16),
          s.reduction(Opcode.RSUMSQ, 9, Dtype.I64, Dtype.U16, "max"),
          s.reduction(Opcode.RMAX, 10, Dtype.I32, Dtype.I8),
          s.reduction(Opcode.RMAXABS, 3, Dtype.U8, Dtype.I32, "min"),
          s.reduction(Opcode.ARGMAX, 20, Dtype.U16, Dtype.I16, "ties"),
          # every lane ties: the first lane of a chunk's maximum, not the last
          s.reduction(Opcode.ARGMAX, 11, Dtype.U16, Dtype.I8, "zero")])


def test_fused_pysim():
    s = _stim(3)
    cases = [s.table_case(tid, 0) for tid in TableId]
    cases += [s.rmsnorm(12), s.dynq(13, Dtype.I16), s.dynq(9, Dtype.I32, outlier=True),
              s.softmax(11), s.rope(2, 8), s.silu(10), s.wsum(5, 11), s.rmsnormq(21)]
    _run_ok(cases)


def test_rmsnormq_pysim():
    """rmsnormq against the ISA simulator (the golden dynquant(rmsnorm)): random, saturating
    int16 values of both signs, an outlier, tiny values, all-zero rows with eps 0 and > 0,
    lengths 1 .. 2 chunks, and its refusals (the record's, after RMSNorm's ARITH)."""
    s = _stim(4)
    cases = [s.table_case(TableId.RSQRT, 0), s.table_case(TableId.DYNQ, 0)]
    cases += [s.rmsnormq(n) for n in (1, 7, 8, 9, 16, 64)]
    cases += [s.rmsnormq(13, "sat", shift=-8), s.rmsnormq(8, "sat", shift=-3),
              s.rmsnormq(17, "min", shift=-6), s.rmsnormq(17, "max", shift=-6),
              s.rmsnormq(11, "outlier"), s.rmsnormq(12, "tiny"),
              s.rmsnormq(10, "zero", eps=0), s.rmsnormq(10, "zero"),
              s.rmsnormq(9, shift=40), s.rmsnormq(9, shift=3)]
    good = s.rmsnormq(8)
    bad_d = Case("rmsnormq misaligned record", dict(good.cmd, d=good.cmd["d"] + 4), good.writes)
    bad_s = Case("rmsnormq negative shift, misaligned record",
                 dict(good.cmd, d=good.cmd["d"] + 4, imm=(-40) & 0xFFFF), good.writes)
    far = Case("rmsnormq record past the end", dict(good.cmd, d=CFG.sram_bytes - 8))
    cases += [bad_d, bad_s, far]
    res = _run(cases)
    # the tables and the cases meant to succeed must succeed: an error the reference shares
    # would skip their result checks (`_run_ok`)
    assert len(res) == len(cases)
    bad = [(name, e) for name, e, _ in res[:-3] if e != ErrorCode.NONE]
    assert not bad, bad
    assert [e for _, e, _ in res[-3:]] == [ErrorCode.ALIGN, ErrorCode.ARITH,
                                          ErrorCode.SRAM_RANGE]


def test_rmsnormq_ends_pysim():
    """rmsnormq's max-abs from the ends of x * gain (pass 1 keeps the largest and the
    smallest product, pass 2 requantises only those two): the largest |y| on a negative
    product (in a later chunk, in an odd and an even lane, alone), on a positive product
    while another element has a larger |x|, gains of mixed sign, every product negative /
    positive, P = -Q, int16 saturation at either end and at both, and lanes past the last
    chunk's count holding products of +-2**30 (aligned rows: the pair stage's odd lane and
    whole pairs past the count).  Each record against the ISA simulator's."""
    s = _stim(12)
    V = CFG.lanes
    cases = [s.table_case(TableId.RSQRT, 0), s.table_case(TableId.DYNQ, 0)]
    cases += [s.rmsnormq_ends(V + 3, "neg", at=V + 2, aligned=True),
              s.rmsnormq_ends(2 * V + 5, "neg", at=V, aligned=True),
              s.rmsnormq_ends(2 * V + 5, "neg", at=2 * V + 3),
              s.rmsnormq_ends(1, "neg"),
              s.rmsnormq_ends(2 * V + 3, "pos", at=2 * V + 1, aligned=True),
              s.rmsnormq_ends(V + 1, "pos", at=V),
              s.rmsnormq_ends(V + 3, "mixed"), s.rmsnormq_ends(3 * V, "mixed", aligned=True),
              s.rmsnormq_ends(V + 1, "allneg", aligned=True), s.rmsnormq_ends(1, "allneg"),
              s.rmsnormq_ends(V + 2, "allpos"),
              s.rmsnormq_ends(V + 4, "tie", at=1),
              s.rmsnormq_ends(V + 5, "satpos", shift=-2, at=V + 3),
              s.rmsnormq_ends(V + 5, "satneg", shift=-2, at=V + 4, aligned=True),
              s.rmsnormq_ends(2 * V + 5, "satboth", shift=-2),
              s.rmsnormq_ends(V - 1, "satneg", shift=-9, at=V - 2, aligned=True)]
    _run_ok(cases)


def test_errors_pysim():
    end = CFG.sram_bytes
    cases = [
        Case("table missing", {"op": Opcode.SILU, "td": Dtype.I16, "ts": Dtype.I16,
                               "d": 0, "a": 0, "n": 4, "imm": 8}),
        Case("out of range", {"op": Opcode.VADD, "td": Dtype.I16, "ts": Dtype.I16,
                              "d": end - 4, "a": 0, "b": 0, "n": 4}),
        Case("misaligned", {"op": Opcode.VADD, "td": Dtype.I16, "ts": Dtype.I16,
                            "d": 0, "a": 1, "b": 0, "n": 4}),
        Case("n = 0", {"op": Opcode.RSUM, "td": Dtype.I16, "ts": Dtype.I16, "n": 0}),
        Case("rope shape", {"op": Opcode.ROPE, "td": Dtype.I16, "ts": Dtype.I16,
                            "n": 12, "imm": 8}),
    ]
    res = _run(cases)
    assert [e for _, e, _ in res] == [ErrorCode.TABLE, ErrorCode.SRAM_RANGE, ErrorCode.ALIGN,
                                      ErrorCode.SHAPE, ErrorCode.SHAPE]


@pytest.mark.parametrize(("lanes", "word_bytes", "n_banks", "slots"),
                         [(4, 8, 2, 3), (2, 16, 2, 3), (2, 8, 2, 4), (2, 8, 1, 3), (4, 8, 1, 3),
                          (8, 8, 1, 3),
                          (8, 8, 4, 5), (4, 16, 4, 3), (8, 8, 2, 3),
                          (8, 8, 2, MIN_RESULT_SLOTS)])
def test_other_geometries_pysim(lanes, word_bytes, n_banks, slots):
    """V below a word's worth of bytes (V = 2, W = 8 with 4 result slots is the small chip's
    unit; V = 4 with one bank, one word per read, and 3 slots the ulx3s chip's since session
    15, V = 2 so before), a 16-byte
    word, one-word reads at V = 8, four-word reads (4 banks), and result slots from the
    fewest the unit takes to more than the default chip's 4: one case of each kind."""
    cfg = VectorBenchConfig(lanes=lanes, word_bytes=word_bytes, sram_bytes=2048,
                            n_banks=n_banks, slots=slots)
    s = Stimulus(cfg, 6)
    cases = [s.table_case(tid, 0) for tid in TableId]
    cases += [s.elementwise(Opcode.VMUL, 11, Dtype.I32, Dtype.I16),
              s.elementwise(Opcode.VSUB, 5, Dtype.I8, Dtype.U8, "minmax"),
              s.reqi(9, Dtype.I16, Dtype.I32, 1, 1),
              s.reduction(Opcode.ARGMAX, 13, Dtype.I16, Dtype.I8, "ties"),
              s.reduction(Opcode.RSUMSQ, 7, Dtype.I64, Dtype.I16, "min"),
              s.rmsnorm(9), s.dynq(10, Dtype.I32), s.softmax(9), s.rope(3, 6),
              s.silu(7), s.wsum(4, 2 * lanes + 1), s.rmsnormq(11), s.rmsnormq(6, "sat", shift=-5),
              s.rmsnormq_ends(2 * lanes + 3, "neg", at=lanes + 2, aligned=True)]
    _run_ok(cases, cfg)


@pytest.mark.parametrize(("lanes", "word_bytes", "n_banks", "slots", "latency"),
                         [(8, 8, 2, 4, 3)])
def test_sram_latency_pysim(lanes, word_bytes, n_banks, slots, latency):
    """The unit behind an SRAM port of latency 3 (latency 2, the ulx3s tile's unit, runs in
    the cocotb bench under both simulators, ``test_vector_rtl.py``'s ``narrow``): every op
    family, writing passes long enough to be bound by the result slots, results bit for bit
    and cycles equal to `vector_cycles(..., sram_latency=L)` (each chunk's result enters
    its slot L - 1 cycles later, so the writes and the credits move with it; the model
    added L - 1 per pass before and was off by up to 14 cycles, `silu` at n = 172)."""
    cfg = VectorBenchConfig(lanes=lanes, word_bytes=word_bytes, sram_bytes=2048,
                            n_banks=n_banks, slots=slots, sram_latency=latency)
    s = Stimulus(cfg, 6)
    cases = [s.table_case(tid, 0) for tid in TableId]
    cases += [s.elementwise(Opcode.VMUL, 11, Dtype.I32, Dtype.I16),
              s.elementwise(Opcode.VSUB, 5, Dtype.I8, Dtype.U8, "minmax"),
              s.elementwise(Opcode.VADD, 67, Dtype.I16, Dtype.I16),
              s.reqi(9, Dtype.I16, Dtype.I32, 1, 1), s.reqi(64, Dtype.I8, Dtype.I32, 23456, 17),
              s.reqi(40, Dtype.I16, Dtype.I8, 999, 5, op=Opcode.REQM),
              s.reduction(Opcode.ARGMAX, 13, Dtype.I16, Dtype.I8, "ties"),
              s.reduction(Opcode.RSUMSQ, 7, Dtype.I64, Dtype.I16, "min"),
              s.rmsnorm(9), s.rmsnorm(40), s.dynq(10, Dtype.I32), s.dynq(64, Dtype.I16),
              s.softmax(9), s.softmax(70), s.rope(3, 6), s.silu(7), s.silu(172),
              s.wsum(4, 2 * lanes + 1), s.wsum(20, 8, stride=8), s.rmsnormq(11),
              s.rmsnormq(64), s.rmsnormq(6, "sat", shift=-5)]
    _run_ok(cases, cfg)


@pytest.mark.parametrize(("lanes", "word_bytes", "n_banks", "slots", "latency"),
                         [(8, 8, 2, 4, 1), (4, 8, 1, 3, 2), (2, 16, 2, 3, 1), (8, 8, 2, 1, 3)])
def test_prologue_pysim(lanes, word_bytes, n_banks, slots, latency):
    """``reqm``, ``rmsnorm`` and ``rmsnormq`` read their parameter word at the head of pass
    1's stream (`Stimulus.prologue`: n = 1, the word at each aligned offset of its SRAM word,
    inside the source, inside the destination) in the default chip's unit, the ulx3s
    tile's (one-word reads, SRAM latency 2), a 16-byte word (epsilon at offset 8) and one
    slot at latency 3: results bit for bit, cycles equal to `vector_cycles`."""
    cfg = VectorBenchConfig(lanes=lanes, word_bytes=word_bytes, sram_bytes=2048,
                            n_banks=n_banks, slots=slots, sram_latency=latency)
    s = Stimulus(cfg, 32)
    cases = [s.table_case(TableId.RSQRT, 0), s.table_case(TableId.DYNQ, 0)]
    _run_ok(cases + s.prologue(), cfg)


@pytest.mark.parametrize(("kwargs", "message"),
                         [({"lanes": 0}, "lanes must be .* not 0"),
                          ({"lanes": 3}, "lanes must be .* not 3"),
                          ({"lanes": "8"}, "lanes must be .* not '8'"),
                          ({"slots": 0}, "slots must be an integer of at least 1, not 0"),
                          ({"slots": -2}, "slots must be .* not -2"),
                          ({"slots": 4.0}, "slots must be .* not 4.0"),
                          ({"slots": True}, "slots must be .* not True")])
def test_bad_parameters(kwargs, message):
    with warnings.catch_warnings():     # the half-built component is never elaborated
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=message) as info:
            VectorUnit(**kwargs)
        del info
        gc.collect()


def test_slots_parameter():
    """The slot count is the constructor's (default `RESULT_SLOTS`) and sizes the slots."""
    with warnings.catch_warnings():     # the units are looked at, not elaborated
        warnings.simplefilter("ignore")
        assert VectorUnit().slots == RESULT_SLOTS == 3
        assert VectorUnit(slots=MIN_RESULT_SLOTS).slots == 1
        assert VectorUnit(slots=4).slots == 4
        gc.collect()


def test_wsum_wraps_at_32_bits_pysim():
    """``wsum``'s int32 accumulator wraps (docs/tile.md): 300 keys of probability 65535
    times V = 127 sum to 2,496,883,500, past 2**31.  No other case reaches the wrap (n <= 172
    keeps the sums below it), so a saturating or narrower accumulator passed them all (a
    coverage audit's finding).  The reference is the ISA simulator's, itself checked here
    against int64 numpy wrapped to int32."""
    import numpy as np

    from chipotle.isasim import weighted_sum
    cfg = VectorBenchConfig(lanes=8, word_bytes=8, sram_bytes=16384, slots=4)
    s = Stimulus(cfg, 11)
    case = s.wsum(300, 8, stride=8, kind="max")
    (pa, pb), (va, vb) = case.writes
    p = np.frombuffer(pb, "<u2").astype(np.int64)
    v = np.frombuffer(vb, np.int8).astype(np.int64).reshape(300, 8)
    want = (p[:, None] * v).sum(0)
    assert (want > 2**31 - 1).all()                      # the case does reach the wrap
    wrapped = (want + 2**31) % 2**32 - 2**31
    assert (weighted_sum(p.astype(np.uint16), v.astype(np.int8)) == wrapped).all()
    _run_ok([case], cfg)


def test_error_edges_pysim():
    """Each refusal at its edge, one step inside and one outside (a mutation audit found the
    fast tests passed with ``silu``'s ``frac_bits < 6`` moved to ``< 5``, ``softmax``'s
    ``n <= 32768`` to ``n <= 65536``, ``reqm``'s pair aligned to 2 instead of 4, and
    ``wsum``'s V-row range check dropped; the cocotb bench has them, this runs in seconds).
    The expected codes are the ISA simulator's (``_run``), and the list's own, so a case the
    reference also got wrong cannot pass."""
    s = _stim(7)
    end = CFG.sram_bytes
    tables = [s.table_case(TableId.SIGMOID, 0), s.table_case(TableId.EXP2, 0),
              s.table_case(TableId.RECIP, 0)]
    si = s.silu(12)
    rq = s.reqi(8, Dtype.I8, Dtype.I16, 3, 1, op=Opcode.REQM)
    sm = s.softmax(20)
    ws = s.wsum(6, 8)
    cases = [
        (Case("silu frac_bits = 5", dict(si.cmd, imm=5), si.writes), ErrorCode.ARITH),
        (Case("silu frac_bits = 6", dict(si.cmd, imm=6), si.writes), ErrorCode.NONE),
        # n > 32768 is SHAPE before any range check; n = 32768 passes it and is past the
        # 2 KiB SRAM
        (Case("softmax n = 32769", dict(sm.cmd, n=32769), sm.writes), ErrorCode.SHAPE),
        (Case("softmax n = 32768", dict(sm.cmd, n=32768), sm.writes), ErrorCode.SRAM_RANGE),
        (Case("reqm pair 2-aligned", dict(rq.cmd, b=CFG.P + 2), rq.writes), ErrorCode.ALIGN),
        (Case("reqm pair at the last 4 bytes", dict(rq.cmd, b=end - 4), rq.writes),
         ErrorCode.NONE),
        (Case("reqm pair past the end", dict(rq.cmd, b=end), rq.writes), ErrorCode.SRAM_RANGE),
        # the V rows [b, b + (n - 1) c + imm): past the end by a long stride, and by one byte
        (Case("wsum rows past the end", dict(ws.cmd, c=3000), ws.writes), ErrorCode.SRAM_RANGE),
        (Case("wsum last row ends at the end", dict(ws.cmd, b=end - 5 * 16 - 8, c=16),
              ws.writes), ErrorCode.NONE),
        (Case("wsum last row one byte past", dict(ws.cmd, b=end - 5 * 16 - 7, c=16),
              ws.writes), ErrorCode.SRAM_RANGE),
    ]
    res = _run(tables + [c for c, _ in cases])
    assert [e for _, e, _ in res] == [ErrorCode.NONE] * len(tables) + [e for _, e in cases]


def test_large_shifts_pysim():
    """Shifts past the lanes' 50-bit shifter: ``reqi`` / ``reqm`` with s = 51, 63, 64, 200
    and 0x1FFFF (``reqm``: 16 bits), and ``silu`` with ``frac_bits`` 22 .. 40 (its index
    shift clamped at 16), against the ISA simulator.  Without the clamps (a shift taken
    modulo its register's width) these cases, and only these, differ (mutation audit)."""
    s = _stim(8)
    cases = [s.table_case(TableId.SIGMOID, 0)]
    for k, sh in enumerate((51, 63, 64, 200, 0x1FFFF)):
        cases.append(s.reqi(9, Dtype.I32, Dtype.I32, 65535, sh, "minmax"))
        cases.append(s.reqi(9, Dtype.I16, Dtype.I32, 40000 + k, sh & 0xFFFF, "minmax",
                            op=Opcode.REQM))
    cases += [s.silu(9, frac_bits, "minmax") for frac_bits in (22, 23, 40)]
    _run_ok(cases)


def test_rmsnorm_negative_sum_pysim():
    """RMSNorm's ``ARITH`` of a negative ``sum(x**2) + eps`` (a negative epsilon), one step
    each side: all-zero x with eps = -1 is refused, full-scale x with eps = -sum(x**2) gives
    the sum 0 and zeros (a mutation audit found the fast tests passed with the check
    removed)."""
    s = _stim(9)
    n = 8
    cases = [s.table_case(TableId.RSQRT, 0),
             s.rmsnorm(n, kind="zero", eps=-1),
             s.rmsnorm(n, kind="max", eps=-n * 32767 ** 2),
             s.rmsnormq(n, kind="zero", eps=-1)]
    res = _run(cases)
    assert [e for _, e, _ in res] == [ErrorCode.NONE, ErrorCode.ARITH, ErrorCode.NONE,
                                      ErrorCode.ARITH]


def test_rmsnormq_int8_saturation_pysim():
    """rmsnormq's int8 requantisation saturates both ways.  With the golden dynq table it
    never does (its entries keep ``|x| <= 127.25`` before rounding), so a unit with the two
    saturation bounds swapped passed every other test (mutation audit); a program may load
    any table, and with every entry 0xFFFF (a scale about twice the golden one) values near
    the maximum magnitude saturate, positive and negative.  Reference: the ISA simulator
    (golden ``requant(.., 8)`` saturates)."""
    s = _stim(10)
    big = Case("table dynq all 0xffff", {"op": Opcode.TABLE, "a": 0, "c": TableId.DYNQ.value},
               [(0, b"\xff\xff" * 256)])
    cases = [s.table_case(TableId.RSQRT, 0), big,
             s.rmsnormq(13), s.rmsnormq(9, "sat", shift=-3), s.rmsnormq(11, "outlier"),
             s.dynq(13, Dtype.I16), s.dynq(9, Dtype.I32, outlier=True)]
    # the stimulus must saturate both ways, or a unit with the bounds swapped would pass: the
    # rmsnormq records' int8 values (after the W-byte header) by the reference
    ref, seen = VectorRef(CFG), set()
    for case in cases:
        for addr, data in case.writes:
            ref.write(addr, data)
        assert ref.execute(case.cmd) == ErrorCode.NONE, case.name
        if case.cmd["op"] == Opcode.RMSNORMQ:
            d, n = case.cmd["d"] + CFG.word_bytes, case.cmd["n"]
            seen |= {int(v) for v in ref.sram[d:d + n].view(np.int8)} & {127, -128}
    assert seen == {127, -128}, f"the records saturate only to {sorted(seen)}"
    _run_ok(cases)


@pytest.mark.parametrize(("lanes", "word_bytes", "n_banks", "slots"),
                         [(8, 8, 2, 4), (2, 8, 2, 4), (4, 8, 1, 3), (8, 8, 4, 5), (4, 16, 4, 3)])
def test_wsum_pairs_pysim(lanes, word_bytes, n_banks, slots):
    """``wsum`` with the wide read: two V rows per read when the stride is one word, p read
    as a window of words (`Stimulus.wsum_pairs`: odd and even n from 1, strides W and not W,
    widths below, at and above V, misaligned p and V, extremes) in the default chip's unit,
    the small chip's (V = 2), the ulx3s tile's (one word per read: no pairs, as before),
    four-word reads, and four-word reads with a buffer of two 16-byte words (a window of 2).
    Results bit for bit and cycles equal to `vector_cycles` (`_run`).  And the pairs do
    fire: at n = 64 the default chip's unit takes at least n / 2 cycles fewer than the
    one-word-read unit's model (one read fewer per pair of rows)."""
    cfg = VectorBenchConfig(lanes=lanes, word_bytes=word_bytes, sram_bytes=2048,
                            n_banks=n_banks, slots=slots)
    s = Stimulus(cfg, 12)
    cases = s.wsum_pairs()
    if (lanes, word_bytes, n_banks) == (8, 8, 2):
        cases.append(s.wsum(64, 8, stride=8, a=cfg.P, b=cfg.A, kind="softmax"))
    res = _run(cases, cfg)
    bad = [(name, e) for name, e, _ in res if e != ErrorCode.NONE]
    assert len(res) == len(cases) and not bad, bad
    if (lanes, word_bytes, n_banks) == (8, 8, 2):
        one = model_cycles(cases[-1].cmd, VectorBenchConfig(lanes=8, word_bytes=8,
                                                            sram_bytes=2048, n_banks=1,
                                                            slots=slots))
        assert res[-1][2] <= one - 64 // 2, (res[-1], one)
