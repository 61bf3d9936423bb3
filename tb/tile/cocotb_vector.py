"""cocotb bench of the vector unit (``VectorTop``: ``VectorUnit`` + ``Sram``, host port).

Shape: a driver of the command stream (``tbcommon.stream.StreamDriver``, with idle cycles),
a back-pressuring sink and a monitor of the completion stream, the reference model
(``cocotb_vector_env.VectorRef``: the ISA simulator executing the same instruction on the
same SRAM image, i.e. the golden primitives) and a cocotb-bus scoreboard of the completion
codes.  After every command the bench reads the SRAM back through the host port and
compares it with the reference image: the whole SRAM (``FULL_CHECK=1``) or the destination
quarter (``FULL_CHECK=0``; the whole SRAM is still compared at the end of every test).
A background host initiator optionally reads random words while the unit runs, so the unit
loses SRAM grants (``contention``).

Environment: ``VEC_CONFIG`` (a key of ``cocotb_vector_env.CONFIGS``), ``SEED``,
``VEC_SCALE`` (fraction of the random cases to run; Icarus runs fewer), ``FULL_CHECK``,
``TIMING_JSON`` (where ``timing`` writes its measurements).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb_bus.scoreboard import Scoreboard
from cocotb_vector_env import (
    CONFIGS,
    Case,
    Stimulus,
    VectorRef,
    decode_done,
    encode_cmd,
    model_cycles,
)
from tbtile import SramMaster, bank_words, wait_until

from chipotle.isa.core import Dtype, ErrorCode, Opcode, TableId
from tbcommon.stream import StreamDriver, StreamMonitor, StreamSink

CFG = CONFIGS[os.environ.get("VEC_CONFIG", "default")]
SEED = int(os.environ.get("SEED", "1"))
SCALE = float(os.environ.get("VEC_SCALE", "1"))
FULL_CHECK = os.environ.get("FULL_CHECK", "1") == "1"
BACKDOOR = os.environ.get("BACKDOOR", "0") == "1"
W, V = CFG.word_bytes, CFG.lanes
CLOCK_NS = 10
TIMEOUT_US = 20000


class DoneMonitor(StreamMonitor):
    """Record completions as ErrorCodes (the scoreboard's transactions); keep the cycles."""

    def __init__(self, *args, **kwargs):
        self.cycles = []
        super().__init__(*args, **kwargs)

    def _recv(self, transaction):
        error, cycles = decode_done(transaction)
        self.cycles.append(cycles)
        super()._recv(error)


class VectorBench:
    """Driver, sink, monitor, reference model and scoreboard around ``VectorTop``.

    Parameters
    ----------
    dut
    seed : int
    stall : float
        Probability that ``o_done.ready`` is low in a cycle.
    idle : float
        Probability of idle cycles before a command.
    contention : float
        Probability per busy cycle that the host reads a random word (taking the SRAM
        port from the unit for that cycle).
    """

    def __init__(self, dut, *, seed=SEED, stall=0.0, idle=0.0, contention=0.0):
        self.dut = dut
        self.clk = dut.clk
        self.rng = random.Random(seed)
        self.stim = Stimulus(CFG, seed)
        self.ref = VectorRef(CFG)
        self.host = SramMaster(dut, "host", dut.clk, latency=CFG.sram_latency)
        self.driver = StreamDriver(dut, "i_cmd", dut.clk, idle_prob=idle,
                                   rng=random.Random(self.rng.random()))
        self.sink = StreamSink(dut, "o_done", dut.clk, stall_prob=stall,
                               rng=random.Random(self.rng.random()))
        self.mon = DoneMonitor(dut, "o_done", dut.clk)
        self.expected = []
        self.sb = Scoreboard(dut, fail_immediately=True)
        self.sb.add_interface(self.mon, self.expected)
        self.contention = contention
        self.log = []           # (case name, error, cycles)
        self.banks = ([getattr(dut.sram, f"bank{b}") for b in range(CFG.n_banks)]
                      if BACKDOOR else [])

    async def start(self):
        """Start the clock, reset, fill the SRAM with random words (DUT and reference)."""
        cocotb.start_soon(Clock(self.clk, CLOCK_NS, unit="ns").start())
        # the host port idle from the start: a latency-2 port registers its request at every
        # edge, and an undriven (X) one read back as an X error under Icarus
        self.host.idle()
        self.dut.rst.value = 1
        await ClockCycles(self.clk, 2)
        self.dut.rst.value = 0
        await RisingEdge(self.clk)
        cocotb.start_soon(self.sink.run())
        data = self.stim.rng.integers(0, 256, CFG.sram_bytes, dtype=np.uint8).tobytes()
        self.ref.write(0, data)
        await self._load_words(0, CFG.words)
        if self.contention:
            cocotb.start_soon(self._contend())

    async def _contend(self):
        clk = RisingEdge(self.clk)
        while True:
            await clk
            if int(self.dut.busy.value) and self.rng.random() < self.contention:
                await self.host.read(self.rng.randrange(CFG.words), 1)

    def _ref_words(self, lo, hi):
        return [int(v) for v in self.ref.sram[lo * W:hi * W].view(f"<u{W}")]

    async def _load_words(self, lo, hi):
        errs = await self.host.write(lo, self._ref_words(lo, hi))
        assert not any(errs), "unexpected SRAM error while loading"

    def _backdoor(self):
        """Return the SRAM words read through the simulator (no clock cycles)."""
        return bank_words(self.banks, CFG.words)

    async def check_sram(self, lo=0, hi=None, what=""):
        """Compare words ``lo .. hi - 1`` with the reference image.

        Read through the host port, or (``BACKDOOR=1``) straight from the bank arrays.
        """
        hi = CFG.words if hi is None else hi
        if BACKDOOR:
            got = self._backdoor()[lo:hi]
        else:
            got = [w for w, _ in await self.host.read(lo, hi - lo)]
        exp = self._ref_words(lo, hi)
        bad = [k for k in range(hi - lo) if got[k] != exp[k]]
        assert not bad, f"{what}: SRAM differs from the reference at bytes " + ", ".join(
            f"{(lo + k) * W:#x}: {got[k]:#0{2 * W + 2}x} != {exp[k]:#0{2 * W + 2}x}"
            for k in bad[:6])

    async def run(self, case: Case, *, expect=None, full=None):
        """Load ``case``'s operands, run its command on DUT and reference, compare."""
        for addr, data in case.writes:
            self.ref.write(addr, data)
            await self._load_words(addr // W, -(-(addr + len(data)) // W))
        error = self.ref.execute(case.cmd)
        if expect is not None:
            assert error == expect, f"{case.name}: reference says {error}, test expects {expect}"
        self.expected.append(error)
        seen = len(self.mon.cycles)
        await self.driver.send(encode_cmd(case.cmd))
        await wait_until(self.clk, lambda: len(self.mon.cycles) > seen, 200000,
                         f"completion of {case.name}")
        assert self.sb.errors == 0, f"{case.name}: completion code differs"
        cycles = self.mon.cycles[-1]
        if error == ErrorCode.NONE and not self.contention:
            # every grant immediate (a stalled completion does not count): the model is exact
            model = model_cycles(case.cmd, CFG)
            assert cycles == model, f"{case.name}: {cycles} cycles, timing model {model}"
        self.log.append((case.name, error, cycles))
        full = FULL_CHECK if full is None else full
        if full:
            await self.check_sram(what=case.name)
        else:
            await self.check_sram(CFG.D // W, (CFG.D + CFG.region) // W, case.name)
        return error

    async def run_all(self, cases):
        """Run `cases`, each of which must end with its ``expect`` (``NONE`` unless the case
        is meant to be refused: an error both sides shared would skip the timing check and
        leave the SRAM as it was, and pass)."""
        for case in cases:
            await self.run(case, expect=case.expect)

    async def load_tables(self):
        for case in self.stim.tables():
            assert await self.run(case) == ErrorCode.NONE, case.name

    async def stop(self):
        """Check the whole SRAM and that every completion was scoreboarded."""
        await self.check_sram(what="end of test")
        assert not self.expected, f"{len(self.expected)} completions never arrived"
        assert self.sb.errors == 0


def _in_place(case):
    """The same case with D = A (allowed for rmsnorm, rope, silu; the residual vadd)."""
    return Case(case.name + " in place", {**case.cmd, "d": case.cmd["a"]}, case.writes)


def _sample(items, frac=SCALE, keep=()):
    """Keep about ``frac`` of ``items`` (always those at indices ``keep``), deterministically."""
    if frac >= 1:
        return list(items)
    rng = random.Random(len(items))
    return [it for k, it in enumerate(items) if k in keep or rng.random() < frac]


_SRC = [Dtype.I8, Dtype.I16, Dtype.I32, Dtype.U8, Dtype.U16]


def _edit_source(case, dtype, edit, suffix):
    """Return ``case`` with its source operand (its first SRAM write) edited in place by
    ``edit(x)`` (``x``: the operand as a writable ``dtype`` array), its name extended."""
    addr, raw = case.writes[0]
    x = np.frombuffer(raw, dtype).copy()
    edit(x)
    case.writes[0] = (addr, x.tobytes())
    case.name += suffix
    return case


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def tables_missing_then_load(dut):
    """Table-needing ops before any TABLE fail with TABLE; bad TABLE commands; loads."""
    tb = VectorBench(dut)
    await tb.start()
    s = tb.stim
    for case in (s.rmsnorm(8), s.dynq(8, Dtype.I16), s.softmax(8), s.silu(8), s.rmsnormq(8)):
        await tb.run(case, expect=ErrorCode.TABLE)
    # rmsnormq needs the dynq table too (found after its pass 1)
    await tb.run(s.table_case(TableId.RSQRT))
    await tb.run(s.rmsnormq(9), expect=ErrorCode.TABLE)
    bad = s.table_case(TableId.EXP2)
    for name, upd, code in (("odd address", {"a": CFG.A + 1}, ErrorCode.ALIGN),
                            ("past the end", {"a": CFG.sram_bytes - 256}, ErrorCode.SRAM_RANGE),
                            ("wrapping address", {"a": 0xFFFFFF00}, ErrorCode.SRAM_RANGE)):
        await tb.run(Case(f"table {name}", {**bad.cmd, **upd}), expect=code)
    await tb.load_tables()
    # now they run; softmax needs both exp2 and recip
    for case in (s.rmsnorm(8), s.dynq(8, Dtype.I16), s.softmax(8), s.silu(8), s.rmsnormq(8)):
        await tb.run(case, expect=ErrorCode.NONE)
    # a table load replaces the table: load exp2 from garbage, then the real one again
    # (each must run: a code both sides shared would skip the timing and SRAM checks)
    await tb.run(Case("exp2 garbage", {"op": Opcode.TABLE, "a": CFG.B, "c": 1}),
                 expect=ErrorCode.NONE)
    await tb.run(s.softmax(V + 1), expect=ErrorCode.NONE)
    await tb.run(s.table_case(TableId.EXP2), expect=ErrorCode.NONE)
    await tb.run(s.softmax(V + 1), expect=ErrorCode.NONE)
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
@cocotb.parametrize(stall=[0.0, 0.4], contention=[0.0, 0.3])
async def elementwise(dut, stall, contention):
    """vadd / vsub / vmul: every (td, ts) pair, lengths, random and extreme operands."""
    tb = VectorBench(dut, seed=SEED + int(10 * stall + 100 * contention), stall=stall,
                     idle=stall, contention=contention)
    await tb.start()
    s = tb.stim
    cases = []
    pairs = [(td, ts) for td in Dtype for ts in _SRC]
    frac = SCALE if (stall, contention) == (0.0, 0.0) else SCALE / 4
    for k, (td, ts) in enumerate(pairs):
        for op in (Opcode.VADD, Opcode.VSUB, Opcode.VMUL):
            n = s.lengths()[(k + op.value) % len(s.lengths())]
            kind = ["random", "minmax", "min", "max", "zero"][(k + op.value) % 5]
            cases.append(s.elementwise(op, n, td, ts, kind))
    for n in s.lengths():
        cases.append(s.elementwise(Opcode.VADD, n, Dtype.I16, Dtype.I16))
    cases.append(_in_place(s.elementwise(Opcode.VADD, 172, Dtype.I16, Dtype.I16)))
    await tb.run_all(_sample(cases, frac, keep=range(0, len(cases), 7)))
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def requant(dut):
    """reqi / reqm: the rounding rule at its edges (s = 0, 1, 62, >= 63; m = 0, 1, max)."""
    tb = VectorBench(dut, seed=SEED + 1)
    await tb.start()
    s = tb.stim
    cases = []
    ms = [(1, 1), (1, 0), (0, 5), (65535, 0), (65535, 16), (23456, 17), (16384, 15),
          (3, 2), (1, 62), (65535, 62), (1, 63), (7, 200), (65535, 0x1FFFF), (40000, 33)]
    for k, (m, sh) in enumerate(ms):
        for op in (Opcode.REQI, Opcode.REQM):
            ts = _SRC[(k + op.value) % len(_SRC)]
            td = [d for d in Dtype if d != Dtype.I64][(3 * k + op.value) % 6]
            n = s.lengths()[k % len(s.lengths())]
            kind = ["random", "minmax", "min", "max"][k % 4]
            if op == Opcode.REQM:
                sh &= 0xFFFF
            cases.append(s.reqi(n, td, ts, m, sh, kind, op=op))
    # round half up: odd values / 2 (+2.5 -> 3, -2.5 -> -2), every type pair
    for td in (Dtype.I8, Dtype.I16, Dtype.U8):
        for ts in _SRC:
            c = s.reqi(V + 1, td, ts, 1, 1)
            cases.append(c)
    await tb.run_all(_sample(cases, keep=range(0, len(cases), 3)))
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def reductions(dut):
    """rsum / rsumsq / rmax / rmaxabs / argmax (first max): types, lengths, extremes, ties."""
    tb = VectorBench(dut, seed=SEED + 2)
    await tb.start()
    s = tb.stim
    cases = []
    ops = [Opcode.RSUM, Opcode.RSUMSQ, Opcode.RMAX, Opcode.RMAXABS, Opcode.ARGMAX]
    k = 0
    for op in ops:
        for ts in _SRC:
            if op == Opcode.RSUMSQ and ts == Dtype.I32:
                continue
            for kind in ("random", "minmax", "min", "max", "zero", "ties"):
                n = s.lengths()[k % len(s.lengths())]
                td = list(Dtype)[k % 7]
                cases.append(s.reduction(op, n, td, ts, kind))
                k += 1
    await tb.run_all(_sample(cases, keep=range(0, len(cases), 5)))
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def rmsnorm(dut):
    """rmsnorm: random rows, all-zero (eps 0 and > 0), extremes, outlier, shifts, types; the
    parameter words of reqm / rmsnorm / rmsnormq (`Stimulus.prologue`)."""
    tb = VectorBench(dut, seed=SEED + 3)
    await tb.start()
    await tb.load_tables()
    s = tb.stim
    cases = []
    for k, n in enumerate(s.lengths()):
        cases.append(s.rmsnorm(n, [Dtype.I16, Dtype.I8, Dtype.I32][k % 3]))
    cases += [s.rmsnorm(64, kind="zero"), s.rmsnorm(64, kind="zero", eps=0),
              s.rmsnorm(172, kind="min"), s.rmsnorm(172, kind="max"),
              s.rmsnorm(V, kind="minmax", eps=0), s.rmsnorm(13, shift=3),
              s.rmsnorm(13, shift=-5), s.rmsnorm(9, shift=200), s.rmsnorm(1),
              s.rmsnorm(64, eps=(1 << 62)),
              dataclasses.replace(s.rmsnorm(10, eps=-(1 << 40)), expect=ErrorCode.ARITH)]
    cases.append(_in_place(s.rmsnorm(172)))
    def outlier(x):
        x[:] = x // 64
        x[17] = -32768
    cases.append(_edit_source(s.rmsnorm(64), np.int16, outlier, " outlier"))
    # reqm / rmsnorm / rmsnormq around their parameter word, read at the head of pass 1's
    # stream (`Stimulus.prologue`, session 32 (2)), every one kept
    pro = s.prologue()
    await tb.run_all(_sample(cases, keep=range(0, len(cases), 2)) + pro)
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def rmsnormq(dut):
    """rmsnormq (RMSNorm + dynq into a record): random rows at every length, all-zero (eps 0
    and > 0), extremes, int16 saturation of both signs (full-scale rows and gains, negative
    shifts), an outlier, tiny gains (small max-abs: left-shifted dynq index), shifts that sweep
    the leading-one position of the int16 max-abs, and rows aimed at the max-abs from the ends
    of x * gain (`Stimulus.rmsnormq_ends`: at the negative or the positive end, mixed gains,
    all products of one sign, P = -Q, saturation at either end or both, extreme products past
    the row); each record equals the reference's, which is the golden dynquant(rmsnorm);
    cycles equal vector_cycles."""
    tb = VectorBench(dut, seed=SEED + 10)
    await tb.start()
    await tb.load_tables()
    s = tb.stim
    cases = [s.rmsnormq(n) for n in s.lengths()]
    cases += [s.rmsnormq(64, "zero"), s.rmsnormq(64, "zero", eps=0),
              s.rmsnormq(172, "min"), s.rmsnormq(172, "max"), s.rmsnormq(V, "minmax", eps=0),
              s.rmsnormq(13, "sat", shift=-8), s.rmsnormq(V + 1, "sat", shift=-3),
              s.rmsnormq(64, "sat", shift=-15), s.rmsnormq(64, "min", shift=-6),
              s.rmsnormq(64, "max", shift=-6), s.rmsnormq(172, "outlier"),
              s.rmsnormq(64, "tiny"), s.rmsnormq(13, shift=3), s.rmsnormq(13, shift=-5),
              s.rmsnormq(9, shift=200), s.rmsnormq(1), s.rmsnormq(1, "min", shift=-4),
              s.rmsnormq(64, eps=(1 << 62)), s.rmsnormq(172, shift=2)]
    for k in range(0, 16):   # the int16 max-abs from a few units to saturation: its
        cases.append(s.rmsnormq(V + 3, shift=14 - k))   # leading-one positions ~2 .. 15
    for kind, shift in (("neg", 0), ("pos", 0), ("mixed", 0), ("allneg", 0), ("allpos", 0),
                        ("tie", 0), ("satpos", -2), ("satneg", -2), ("satboth", -2)):
        cases += [s.rmsnormq_ends(n, kind, shift=shift, aligned=al)
                  for n, al in ((V + 3, True), (2 * V + 5, False), (172, False))]
    cases += [s.rmsnormq_ends(1, "neg"), s.rmsnormq_ends(V - 1, "satneg", shift=-9,
                                                         at=V - 2, aligned=True)]
    await tb.run_all(_sample(cases, keep=range(0, len(cases), 2)))
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def dynq(dut):
    """dynq: records with their header, i16 and i32 sources, zeros, extremes, outliers."""
    tb = VectorBench(dut, seed=SEED + 4)
    await tb.start()
    await tb.load_tables()
    s = tb.stim
    cases = []
    for k, n in enumerate(s.lengths()):
        ts = [Dtype.I16, Dtype.I32][k % 2]
        cases += [s.dynq(n, ts), s.dynq(n, ts, ["zero", "min", "max", "minmax"][k % 4])]
    cases += [s.dynq(172, Dtype.I32, outlier=True), s.dynq(64, Dtype.I16, outlier=True),
              s.dynq(1, Dtype.I32, "min"), s.dynq(V - 1, Dtype.I16, "zero")]
    for k in range(1, 31):   # every leading-one position of an i32 max-abs
        def shift(x, k=k):
            x >>= 31 - k
        cases.append(_edit_source(s.dynq(V + 1, Dtype.I32), "<i4", shift, f" b={k}"))
    await tb.run_all(_sample(cases, keep=range(0, len(cases), 3)))
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def softmax(dut):
    """softmax: random spreads, all equal (uniform), extremes, one huge outlier, lengths."""
    tb = VectorBench(dut, seed=SEED + 5)
    await tb.start()
    await tb.load_tables()
    s = tb.stim
    cases = []
    for k, n in enumerate(s.lengths() + [300]):
        cases += [s.softmax(n, spread=[300, 4000, 40000][k % 3]), s.softmax(n, "equal")]
    cases += [s.softmax(172, "extreme"), s.softmax(V, "extreme"), s.softmax(64, "zero"),
              s.softmax(172, "min"), s.softmax(1)]
    def outlier(x):
        x[40] = 2**31 - 1
    cases.append(_edit_source(s.softmax(64, spread=100), "<i4", outlier, " outlier"))
    await tb.run_all(_sample(cases, keep=range(0, len(cases), 2)))
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def rope_silu(dut):
    """rope (head sizes, positions, i8/i16, extremes) and silu (formats, extremes)."""
    tb = VectorBench(dut, seed=SEED + 6)
    await tb.start()
    await tb.load_tables()
    s = tb.stim
    cases = [s.rope(8, 8), s.rope(4, 8, td=Dtype.I8), s.rope(2, 12), s.rope(3, V + 2),
             s.rope(1, 2), s.rope(5, 4, kind="min"), s.rope(2, 16, kind="max"),
             s.rope(4, 8, kind="minmax", pos=0), s.rope(1, 172, pos=511),
             s.rope(2, 8, shift=0), s.rope(2, 8, shift=70, kind="max"),
             s.rope(4, 16, td=Dtype.I8, kind="minmax")]
    for k, n in enumerate(s.lengths()):
        cases += [s.silu(n, [11, 6, 15, 8][k % 4]),
                  s.silu(n, [6, 11][k % 2], ["min", "max", "minmax", "zero"][k % 4])]
    cases += [s.silu(64, 40), s.silu(64, 22, "minmax"), _in_place(s.silu(172)),
              _in_place(s.rope(8, 8))]
    await tb.run_all(_sample(cases, keep=range(0, len(cases), 2)))
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def wsum(dut):
    """wsum: positions x widths (1, V-1, V, V+1, head sizes), strides, extremes; then the
    row pairs and p windows of the wide read (`Stimulus.wsum_pairs`), every one kept."""
    tb = VectorBench(dut, seed=SEED + 7)
    await tb.start()
    s = tb.stim
    cases = [s.wsum(1, 1), s.wsum(5, V - 1), s.wsum(9, V), s.wsum(7, V + 1),
             s.wsum(20, 8, kind="softmax"), s.wsum(64, 8, stride=8, kind="softmax"),
             s.wsum(3, 2 * V + 3), s.wsum(6, 13, kind="min"), s.wsum(6, 13, kind="max"),
             s.wsum(4, 16, kind="minmax"), s.wsum(12, 4, stride=0), s.wsum(30, 24, stride=40)]
    pairs = s.wsum_pairs()
    cases += pairs
    await tb.run_all(_sample(cases, keep=[*range(0, len(cases) - len(pairs), 2),
                                          *range(len(cases) - len(pairs), len(cases))]))
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def errors(dut):
    """Refused commands: code as the ISA simulator's, and no SRAM write anywhere."""
    tb = VectorBench(dut, seed=SEED + 8)
    await tb.start()
    await tb.load_tables()
    s = tb.stim
    end = CFG.sram_bytes
    E = ErrorCode
    cases = []

    def mod(case, name, expect, **upd):
        cases.append((Case(f"{case.name}: {name}", {**case.cmd, **upd}, case.writes), expect))

    ew = s.elementwise(Opcode.VADD, 16, Dtype.I32, Dtype.I16)
    mod(ew, "D past the end", E.SRAM_RANGE, d=end - 60)
    mod(ew, "D wraps 2**32", E.SRAM_RANGE, d=0xFFFFFFC0)
    mod(ew, "A past the end", E.SRAM_RANGE, a=end - 2)
    mod(ew, "B misaligned", E.ALIGN, b=CFG.B + 1)
    mod(ew, "D misaligned", E.ALIGN, d=CFG.D + 2)
    mod(ew, "n = 0", E.SHAPE, n=0)
    mod(ew, "n huge", E.SRAM_RANGE, n=0x80000000)
    rq = s.reqi(8, Dtype.I8, Dtype.I16, 3, 1, op=Opcode.REQM)
    mod(rq, "pair misaligned", E.ALIGN, b=CFG.P + 2)
    mod(rq, "pair past the end", E.SRAM_RANGE, b=end)
    rd = s.reduction(Opcode.ARGMAX, 9, Dtype.I64, Dtype.I8)
    mod(rd, "D past the end", E.SRAM_RANGE, d=end)
    mod(rd, "D misaligned", E.ALIGN, d=CFG.D + 4)
    rn = s.rmsnorm(16)
    mod(rn, "negative shift", E.ARITH, imm=(-40) & 0xFFFF)
    mod(rn, "eps misaligned", E.ALIGN, c=CFG.P + 4)
    mod(rn, "D past the end (after pass 1)", E.SRAM_RANGE, d=end - 8)
    mod(rn, "negative shift beats D range", E.ARITH, d=end - 8, imm=(-40) & 0xFFFF)
    mod(rn, "gain past the end", E.SRAM_RANGE, b=end - 4)
    cases.append((s.rmsnorm(8, eps=-(1 << 62)), E.ARITH))     # sum(x**2) + eps < 0
    rq8 = s.rmsnormq(16)
    mod(rq8, "negative shift", E.ARITH, imm=(-40) & 0xFFFF)
    mod(rq8, "eps misaligned", E.ALIGN, c=CFG.P + 4)
    mod(rq8, "A misaligned", E.ALIGN, a=CFG.A + 1)
    mod(rq8, "record misaligned (after pass 1)", E.ALIGN, d=CFG.D + 2)
    mod(rq8, "record past the end (after pass 1)", E.SRAM_RANGE, d=end - W - 8)
    mod(rq8, "negative shift beats the record", E.ARITH, d=CFG.D + 4, imm=(-40) & 0xFFFF)
    mod(rq8, "gain past the end", E.SRAM_RANGE, b=end - 4)
    cases.append((s.rmsnormq(8, eps=-(1 << 62)), E.ARITH))     # sum(x**2) + eps < 0
    dq = s.dynq(20, Dtype.I32)
    mod(dq, "record misaligned", E.ALIGN, d=CFG.D + 4)
    mod(dq, "record past the end", E.SRAM_RANGE, d=end - W - 16)
    sm = s.softmax(20)
    mod(sm, "n > 32768", E.SHAPE, n=32769)
    mod(sm, "A misaligned", E.ALIGN, a=CFG.A + 2)
    mod(sm, "D past the end", E.SRAM_RANGE, d=end - 20)
    ro = s.rope(2, 8)
    mod(ro, "n not a multiple of the head size", E.SHAPE, n=20)
    mod(ro, "n not a multiple, large", E.SHAPE, n=0x7FFFFFF0, imm=6)
    mod(ro, "cos/sin row past the end", E.SRAM_RANGE, b=end - 14)
    si = s.silu(12)
    mod(si, "frac_bits < 6", E.ARITH, imm=5)
    mod(si, "D past the end", E.SRAM_RANGE, d=end - 2)
    ws = s.wsum(6, 8)
    mod(ws, "rows past the end", E.SRAM_RANGE, c=3000)
    mod(ws, "p misaligned", E.ALIGN, a=CFG.P + 1)
    mod(ws, "D misaligned", E.ALIGN, d=CFG.D + 2)
    mod(ws, "D past the end", E.SRAM_RANGE, d=end - 16)
    cases.append((Case("table id 5", {"op": Opcode.TABLE, "a": 0, "c": 5}), None))
    for case, expect in _sample(cases, keep=range(0, len(cases), 2)):
        if case.name == "table id 5":    # not an instruction the ISA can encode
            tb.expected.append(E.ILLEGAL)
            seen = len(tb.mon.cycles)
            await tb.driver.send(encode_cmd(case.cmd))
            await wait_until(tb.clk, lambda seen=seen: len(tb.mon.cycles) > seen, 1000, "ILLEGAL")
            continue
        await tb.run(case, expect=expect, full=True)
    await tb.stop()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def timing(dut):
    """Measure cycles per command for the timing table of docs/tile.md (no contention)."""
    tb = VectorBench(dut, seed=SEED + 9)
    await tb.start()
    await tb.load_tables()
    s = tb.stim
    s.aligned = True    # word-aligned operands: the documented best case
    rows = []
    for n in (V, 64, 172):
        for case in (s.elementwise(Opcode.VADD, n, Dtype.I16, Dtype.I16),
                     s.elementwise(Opcode.VADD, n, Dtype.I8, Dtype.I8),
                     s.elementwise(Opcode.VMUL, n, Dtype.I32, Dtype.I16),
                     s.reqi(n, Dtype.I8, Dtype.I32, 20000, 20),
                     s.reduction(Opcode.RSUM, n, Dtype.I32, Dtype.I16),
                     s.reduction(Opcode.ARGMAX, n, Dtype.I32, Dtype.I32),
                     s.rmsnorm(n), s.dynq(n, Dtype.I16), s.dynq(n, Dtype.I32),
                     s.softmax(n), s.rope(max(1, n // 8), 8), s.silu(n), s.wsum(n, 8, stride=8),
                     s.rmsnormq(n)):
            cmd = case.cmd
            await tb.run(case, expect=ErrorCode.NONE, full=False)
            rows.append({"name": case.name, "op": cmd["op"].name.lower(), "n": cmd["n"],
                         "imm": cmd.get("imm", 0), "cycles": tb.log[-1][2],
                         "model": model_cycles(cmd, CFG)})
    for tid in TableId:
        await tb.run(s.table_case(tid), expect=ErrorCode.NONE, full=False)
        rows.append({"name": f"table {tid.name.lower()}", "op": "table", "n": 0,
                     "imm": 0, "cycles": tb.log[-1][2],
                     "model": model_cycles(s.table_case(tid).cmd, CFG)})
    out = os.environ.get("TIMING_JSON")
    if out:
        with open(out, "w") as f:
            json.dump({"lanes": V, "word_bytes": W, "rows": rows}, f, indent=1)
    await tb.stop()
