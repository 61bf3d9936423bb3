"""Shared pieces of the vector-unit benches: the DUT wrapper, the reference model, stimulus.

Used by the Amaranth-simulator tests (``test_vector_pysim.py``), the pytest wrappers
(``test_vector_rtl.py``) and the cocotb module (``cocotb_vector.py``).

Members
-------
VectorBenchConfig, CONFIGS
    Bench parameters (V, W, SRAM size) and the SRAM map of the stimulus.
VectorTop
    The DUT: ``VectorUnit`` and an ``Sram`` behind a round-robin ``SramArbiter`` whose other
    initiator is the host port ``host`` (loads and reads back the SRAM, and makes traffic
    that contends with the unit).
Case
    One test case: SRAM writes, then one command.
VectorRef
    Reference model: ``chipotle.isasim.IsaSim`` executing the same instruction on the same
    SRAM image (the ISA simulator calls the golden primitives).
encode_cmd, decode_done
    ``VectorCommand`` / ``VectorDone`` to and from integers (through the layouts).
model_cycles
    The cycles ``chipotle.isa.vector_cycles`` predicts for a command (no contention).
Stimulus
    Random and extreme cases for every opcode, errors included.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from chipotle.golden import numerics as nx
from chipotle.hw.tile.sram import Sram, SramArbiter, SramSignature, connect_narrow
from chipotle.hw.tile.vector import (
    MIN_RESULT_SLOTS,
    RESULT_SLOTS,
    VectorCommand,
    VectorDone,
    VectorUnit,
)
from chipotle.isa.core import (
    DTYPE_INFO,
    SPECS,
    Addr,
    CostModel,
    Dtype,
    ErrorCode,
    Instr,
    IsaConfig,
    Len,
    Opcode,
    TableId,
    encode,
    vector_cycles,
)
from chipotle.isasim import IsaSim

__all__ = ["VectorBenchConfig", "CONFIGS", "VectorTop", "Case", "VectorRef", "encode_cmd",
           "decode_done", "model_cycles", "Stimulus", "TABLE_DATA"]


@dataclass(frozen=True)
class VectorBenchConfig:
    """Bench parameters and the stimulus's SRAM map (byte addresses).

    Attributes
    ----------
    lanes, word_bytes, sram_bytes
        Of the ``VectorUnit`` and the SRAM.
    n_banks
        SRAM banks; the unit reads ``n_banks`` consecutive words per cycle (the SRAM's wide
        read; 1: one word, the ``ulx3s`` tile's).
    slots
        The unit's result slots (``VectorUnit(slots=)``; 3 is the ``ulx3s`` tile's, 4 the
        ``default`` chip's).
    sram_latency
        L of the SRAM's read/write port (``VectorUnit(sram_latency=)``, the tile's
        ``sram_latency``: 2 on the ``ulx3s`` chip); the host port has it too.
    """

    lanes: int = 8
    word_bytes: int = 8
    sram_bytes: int = 8192
    n_banks: int = 2
    slots: int = RESULT_SLOTS
    sram_latency: int = 1

    @property
    def words(self) -> int:
        return self.sram_bytes // self.word_bytes

    @property
    def region(self) -> int:
        """Size of each of the four regions A, B, D, P (params)."""
        return self.sram_bytes // 4

    @property
    def A(self) -> int:
        return 0

    @property
    def B(self) -> int:
        return self.region

    @property
    def D(self) -> int:
        return 2 * self.region

    @property
    def P(self) -> int:
        return 3 * self.region

    def isa(self) -> IsaConfig:
        return IsaConfig(sram_bytes=self.sram_bytes, word_bytes=self.word_bytes,
                         lanes=self.lanes, read_words=self.n_banks,
                         cost=CostModel(vec_slots=self.slots, sram_latency=self.sram_latency))


CONFIGS = {
    # V = 8, W = 8 (docs/isa.md), 2-word reads, 4 result slots: the default chip's unit
    "default": VectorBenchConfig(slots=4),
    "v4": VectorBenchConfig(lanes=4, sram_bytes=8192),    # V < W bytes: sub-word chunks
    # the ulx3s tile's unit: V = 4, one word per read, 3 slots (V = 8 until session 15), its
    # SRAM port at latency 2 (until session 34 this bench ran it at 1, and latency 2 ran on
    # Amaranth's simulator only)
    "narrow": VectorBenchConfig(lanes=4, n_banks=1, slots=3, sram_latency=2),
    "min": VectorBenchConfig(slots=MIN_RESULT_SLOTS),     # the fewest result slots: one
}


class VectorTop(wiring.Component):
    """A ``VectorUnit`` with its SRAM; the host shares the SRAM port round-robin.

    Members
    -------
    host : ``In(SramSignature)``
        Host access to the SRAM (arbiter initiator 0; the unit is initiator 1).
    i_cmd : ``In(stream.Signature(VectorCommand))``
    o_done : ``Out(stream.Signature(VectorDone))``
    busy : ``Out(1)``
    """

    def __init__(self, cfg: VectorBenchConfig):
        self._cfg = cfg
        #: The SRAM (`Sram.word_rows` is the pysim benches' back door to its words).
        self.sram = Sram(size_bytes=cfg.sram_bytes, word_bytes=cfg.word_bytes,
                         n_banks=cfg.n_banks, read_words=cfg.n_banks,
                         rw_latency=cfg.sram_latency)
        super().__init__({
            "host": In(SramSignature(word_bytes=cfg.word_bytes, latency=cfg.sram_latency)),
            "i_cmd": In(stream.Signature(VectorCommand)),
            "o_done": Out(stream.Signature(VectorDone)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        R, L = cfg.n_banks, cfg.sram_latency
        m.submodules.vu = vu = VectorUnit(lanes=cfg.lanes, word_bytes=cfg.word_bytes,
                                          sram_bytes=cfg.sram_bytes, read_words=R,
                                          slots=cfg.slots, sram_latency=L)
        m.submodules.sram = sram = self.sram
        m.submodules.arb = arb = SramArbiter(2, word_bytes=cfg.word_bytes, read_words=R,
                                             latency=L)
        connect_narrow(m, flipped(self.host), arb.i[0])
        connect(m, vu.bus, arb.i[1])
        connect(m, arb.o, sram.rw)
        connect(m, flipped(self.i_cmd), vu.i_cmd)
        connect(m, vu.o_done, flipped(self.o_done))
        m.d.comb += self.busy.eq(vu.busy)
        return m


@dataclass
class Case:
    """One test case: write ``writes`` (byte address, bytes) into SRAM, then run ``cmd``.

    ``cmd`` holds the `VectorCommand` fields as Python values (``op``, ``td``, ``ts`` as
    enums; ``d``, ``a``, ``b``, ``n``, ``c``, ``imm`` as ints).  ``expect`` is the error the
    reference must report (`VectorBench.run_all` checks it: ``NONE`` unless the case is
    meant to be refused).
    """

    name: str
    cmd: dict
    writes: list = field(default_factory=list)
    expect: ErrorCode = ErrorCode.NONE


def encode_cmd(cmd: dict) -> int:
    """Return the integer of a `VectorCommand`."""
    full = {"op": cmd["op"], "td": cmd.get("td", Dtype.I8), "ts": cmd.get("ts", Dtype.I8),
            "c": cmd.get("c", 0), "imm": cmd.get("imm", 0), "d": cmd.get("d", 0),
            "a": cmd.get("a", 0), "b": cmd.get("b", 0), "n": cmd.get("n", 0)}
    return VectorCommand.const(full).as_bits()


def decode_done(word: int) -> tuple[ErrorCode, int]:
    """Return ``(error, cycles)`` of a `VectorDone` word."""
    v = VectorDone.from_bits(word)
    return ErrorCode(v.error), int(v.cycles)


def model_cycles(cmd: dict, cfg: VectorBenchConfig) -> int:
    """Return the cycles the timing model predicts for ``cmd`` (every grant immediate).

    The schedule of ``docs/tile.md`` ("Vector unit", "Timing") as played by
    ``chipotle.isa.vector_cycles`` for this bench's V, W, R and result slots; only
    meaningful for a command the unit executes (not a refused one).
    """
    return vector_cycles(cmd["op"], cmd.get("td", Dtype.I8), cmd.get("ts", Dtype.I8),
                         cmd.get("n", 0), cmd.get("imm", 0), cmd.get("c", 0), cmd.get("a", 0),
                         cmd.get("b", 0), cmd.get("d", 0), lanes=cfg.lanes,
                         word_bytes=cfg.word_bytes, slots=cfg.slots,
                         read_words=cfg.n_banks, sram_latency=cfg.sram_latency)


class VectorRef:
    """Reference model: one ISA-simulator tile running each command as an instruction.

    The instruction's operands are registers loaded with ``li``, so any resolved address or
    length is reachable; the ISA simulator's SRAM is the expected image of the DUT's.
    """

    def __init__(self, cfg: VectorBenchConfig):
        self.cfg = cfg
        self.sim = IsaSim(1, 1, cfg.isa())
        self.tile = self.sim.tile((0, 0))

    @property
    def sram(self) -> np.ndarray:
        return self.tile.sram

    def write(self, addr: int, data: bytes) -> None:
        self.sim.write((0, 0), addr, np.frombuffer(bytes(data), np.uint8))

    def execute(self, cmd: dict) -> ErrorCode:
        """Run ``cmd`` as an instruction; return the tile's error code (``NONE`` if none)."""
        op = cmd["op"]
        used = SPECS[op].fields
        regs = {"d": 1, "a": 2, "b": 3, "n": 4}
        prog = []
        for f, r in regs.items():
            v = cmd.get(f, 0) & 0xFFFFFFFF
            prog.append(encode(Instr(Opcode.LI, d=Addr(r, 0), c=v >> 16, imm=v & 0xFFFF)))
        kw = {}
        for f, r in regs.items():
            if f"{f}.reg" in used:
                kw[f] = Len(r, 0) if f == "n" else Addr(r, 0)
        ins = Instr(op, td=cmd.get("td", Dtype.I8) if SPECS[op].td else Dtype.I8,
                    ts=(cmd.get("ts", Dtype.I8).value if SPECS[op].ts else 0),
                    c=cmd.get("c", 0) if "c" in used else 0,
                    imm=cmd.get("imm", 0) if "imm" in used else 0, **kw)
        prog.append(encode(ins))
        prog.append(encode(Instr(Opcode.HALT)))
        tables = dict(self.tile.tables)
        self.sim.reset((0, 0))
        self.tile.tables.update(tables)
        self.sim.load_program((0, 0), prog)
        self.sim.start((0, 0))
        self.sim.run()
        return self.tile.error


# -- stimulus -------------------------------------------------------------------------------

TABLE_DATA = {
    TableId.RSQRT: nx.rsqrt_table(),
    TableId.EXP2: nx.exp2_table(),
    TableId.RECIP: nx.recip_table(),
    TableId.DYNQ: nx.dynquant_table(),
    TableId.SIGMOID: nx.sigmoid_table(),
}

_SRC_RANGE = {dt: (np.iinfo(DTYPE_INFO[dt].np).min, np.iinfo(DTYPE_INFO[dt].np).max)
              for dt in Dtype}
_SRC = [Dtype.I8, Dtype.I16, Dtype.I32, Dtype.U8, Dtype.U16]


class Stimulus:
    """Cases for every vector opcode: random operands, extremes, lengths, errors.

    Parameters
    ----------
    cfg : VectorBenchConfig
    seed : int
    """

    def __init__(self, cfg: VectorBenchConfig, seed: int = 1):
        self.cfg = cfg
        self.rng = np.random.default_rng(seed)
        self.prng = random.Random(seed)
        self.aligned = False

    # helpers
    def lengths(self):
        V, W = self.cfg.lanes, self.cfg.word_bytes
        return sorted({1, V - 1, V, V + 1, 13, 64, 172, 2 * W + 3})

    def values(self, dt, n, kind="random"):
        lo, hi = _SRC_RANGE[dt]
        npdt = DTYPE_INFO[dt].np
        if kind == "min":
            return np.full(n, lo, npdt)
        if kind == "max":
            return np.full(n, hi, npdt)
        if kind == "zero":
            return np.zeros(n, npdt)
        if kind == "minmax":
            return self.rng.choice(np.array([lo, hi], npdt), n)
        return self.rng.integers(lo, hi, size=n, endpoint=True, dtype=np.int64).astype(npdt)

    def off(self, size, spread=3):
        """A random element-aligned byte offset (misaligns with the word on purpose)."""
        return 0 if self.aligned else size * self.prng.randrange(spread + 1)

    def table_case(self, tid, at=None):
        at = self.cfg.A if at is None else at
        data = TABLE_DATA[tid].astype("<u2").tobytes()
        return Case(f"table {tid.name.lower()}", {"op": Opcode.TABLE, "a": at, "c": tid.value},
                    [(at, data)])

    def tables(self):
        return [self.table_case(tid, self.cfg.A + 2 * self.prng.randrange(4)) for tid in TableId]

    # element-wise and requantisation
    def elementwise(self, op, n, td, ts, kind="random"):
        cfg = self.cfg
        es, ed = DTYPE_INFO[ts].size, DTYPE_INFO[td].size
        a = cfg.A + self.off(es)
        b = cfg.B + self.off(es)
        d = cfg.D + self.off(ed)
        x = self.values(ts, n, kind)
        y = self.values(ts, n, "random" if kind == "random" else kind)
        return Case(f"{op.name.lower()}.{td.name.lower()}.{ts.name.lower()} n={n} {kind}",
                    {"op": op, "td": td, "ts": ts, "d": d, "a": a, "b": b, "n": n},
                    [(a, x.tobytes()), (b, y.tobytes())])

    def reqi(self, n, td, ts, m, s, kind="random", op=Opcode.REQI):
        cfg = self.cfg
        es, ed = DTYPE_INFO[ts].size, DTYPE_INFO[td].size
        a = cfg.A + self.off(es)
        d = cfg.D + self.off(ed)
        x = self.values(ts, n, kind)
        cmd = {"op": op, "td": td, "ts": ts, "d": d, "a": a, "n": n}
        writes = [(a, x.tobytes())]
        if op == Opcode.REQI:
            cmd.update(imm=m, c=s)
        else:
            b = cfg.P + 4 * self.prng.randrange(4)
            cmd["b"] = b
            writes.append((b, np.array([m, s], "<u2").tobytes()))
        return Case(f"{op.name.lower()}.{td.name.lower()}.{ts.name.lower()} n={n} m={m} "
                    f"s={s} {kind}", cmd, writes)

    def reduction(self, op, n, td, ts, kind="random"):
        cfg = self.cfg
        es, ed = DTYPE_INFO[ts].size, DTYPE_INFO[td].size
        a = cfg.A + self.off(es)
        d = cfg.D + self.off(ed)
        x = self.values(ts, n, kind)
        if kind == "ties" and n > 2:
            x[:] = self.values(ts, n, "random") // 2
            hi = x.max()
            x[self.rng.integers(0, n, 3)] = hi
        return Case(f"{op.name.lower()}.{td.name.lower()}.{ts.name.lower()} n={n} {kind}",
                    {"op": op, "td": td, "ts": ts, "d": d, "a": a, "n": n}, [(a, x.tobytes())])

    # fused
    def rmsnorm(self, n, td=Dtype.I16, kind="random", shift=0, eps=671):
        cfg = self.cfg
        a = cfg.A + self.off(2)
        b = cfg.B + self.off(2)
        d = cfg.D + self.off(DTYPE_INFO[td].size)
        c = cfg.P + 8 * self.prng.randrange(4)
        if kind == "random":
            x = (self.rng.normal(0, 1200, n)).clip(-32768, 32767).astype(np.int16)
        else:
            x = self.values(Dtype.I16, n, kind)
        g = self.rng.integers(-32767, 32767, n, endpoint=True).astype(np.int16)
        return Case(f"rmsnorm.{td.name.lower()} n={n} {kind} shift={shift} eps={eps}",
                    {"op": Opcode.RMSNORM, "td": td, "ts": Dtype.I16, "d": d, "a": a, "b": b,
                     "n": n, "c": c, "imm": shift & 0xFFFF},
                    [(a, x.tobytes()), (b, g.tobytes()), (c, np.array([eps], "<i8").tobytes())])

    def rmsnormq(self, n, kind="random", shift=0, eps=671):
        """``rmsnormq.i8.i16``: RMSNorm then dynq into a record at a word-aligned D.

        Kinds: ``random``; ``zero`` (with ``eps`` 0: the all-zero record); ``min`` / ``max``
        / ``minmax`` rows; ``sat`` (full-scale rows and gains: with a negative ``shift`` the
        int16 normalised values saturate, both signs); ``outlier`` (one -32768 among small
        values: the others quantise to about 0); ``tiny`` (gains of a few units: small
        max-abs, a left-shifted dynq index)."""
        cfg = self.cfg
        W = cfg.word_bytes
        a = cfg.A + self.off(2)
        b = cfg.B + self.off(2)
        d = cfg.D + W * self.prng.randrange(3)
        c = cfg.P + 8 * self.prng.randrange(4)
        g = self.rng.integers(-32767, 32767, n, endpoint=True).astype(np.int16)
        if kind == "random":
            x = (self.rng.normal(0, 1200, n)).clip(-32768, 32767).astype(np.int16)
        elif kind == "sat":
            x = self.values(Dtype.I16, n, "minmax")
            g = self.values(Dtype.I16, n, "minmax")
        elif kind == "outlier":
            x = self.rng.integers(-40, 40, n, endpoint=True).astype(np.int16)
            x[self.rng.integers(0, n)] = -32768
        elif kind == "tiny":
            x = (self.rng.normal(0, 1200, n)).clip(-32768, 32767).astype(np.int16)
            g = self.rng.integers(-3, 3, n, endpoint=True).astype(np.int16)
        else:
            x = self.values(Dtype.I16, n, kind)
        return Case(f"rmsnormq n={n} {kind} shift={shift} eps={eps}",
                    {"op": Opcode.RMSNORMQ, "td": Dtype.I8, "ts": Dtype.I16, "d": d, "a": a,
                     "b": b, "n": n, "c": c, "imm": shift & 0xFFFF},
                    [(a, x.tobytes()), (b, g.tobytes()), (c, np.array([eps], "<i8").tobytes())])

    def rmsnormq_ends(self, n, kind, shift=0, eps=671, at=None, aligned=False):
        """``rmsnormq.i8.i16`` rows aimed at the unit's ends of ``x * gain``.

        The unit finds ``max |y|`` of the normalised int16 values ``y = Y(x * gain)`` as
        ``max(Y(P), -Y(Q))`` with ``P`` / ``Q`` the largest / smallest ``x * gain`` kept in
        pass 1 (``docs/tile.md``, "Vector unit"), so each kind puts ``max |y|`` at one end or
        the other.  Kinds: ``neg`` (at a large negative product among small values);
        ``pos`` (at a large positive product while another element has a larger ``|x|``
        with gain 1, a product near 0); ``mixed`` (x > 0, gains of both signs); ``allneg``
        (every product below 0, so ``P < 0`` too); ``allpos`` (every product above 0, so
        ``Q > 0``); ``tie`` (``P = -Q`` on an exact half, the other x 0: the rounding half
        up makes ``Y(P) = 1 - Y(Q)``, though both give the same record); with a negative
        ``shift``, ``satpos`` (``Y(P)`` saturates at 32767, ``max |y|`` 32767), ``satneg``
        (``Y(Q)`` at -32768, ``max |y|`` 32768) and ``satboth`` (both, 32768).  The big
        element is element ``at`` (default: a random one).  After the row, x and gain hold
        extreme values (products ``+-2**30``), which the lanes past the last chunk's count
        see (with ``aligned`` x and gain at word boundaries: the first of them for certain):
        they must not count."""
        cfg = self.cfg
        W = cfg.word_bytes
        a = cfg.A + (0 if aligned else self.off(2))
        b = cfg.B + (0 if aligned else self.off(2))
        d = cfg.D + W * self.prng.randrange(3)
        c = cfg.P + 8 * self.prng.randrange(4)
        rng = self.rng
        i = int(rng.integers(0, n)) if at is None else at
        j = (i + 1 + int(rng.integers(0, n - 1))) % n if n > 1 else i   # another element
        x = rng.integers(-300, 300, n, endpoint=True)
        g = rng.integers(-3000, 3000, n, endpoint=True)
        if kind == "neg":
            x[i], g[i] = -int(rng.integers(20000, 32768)), int(rng.integers(20000, 32768))
        elif kind == "pos":
            x[i], g[i] = int(rng.integers(2000, 4000)), int(rng.integers(25000, 32768))
            x[j], g[j] = -32768, 1
        elif kind == "mixed":
            x = rng.integers(1, 32767, n, endpoint=True)
            g = rng.integers(-32768, 32767, n, endpoint=True)
        elif kind == "allneg":
            x = rng.integers(1, 32767, n, endpoint=True)
            g = rng.integers(-32768, -1, n, endpoint=True)
        elif kind == "allpos":
            x = rng.integers(-32768, -1, n, endpoint=True)
            g = rng.integers(-32768, -1, n, endpoint=True)
        elif kind == "tie":     # (with shift 0: 2**28 x r lands on an exact half)
            x[:] = 0
            x[i], g[i] = 16384, 16384
            if n > 1:
                x[j], g[j] = -16384, 16384
        elif kind == "satpos":
            x[i], g[i] = 32767, 32767
        elif kind == "satneg":
            x[i], g[i] = -32768, 32767
        elif kind == "satboth":
            x[i], g[i] = 32767, 32767
            if n > 1:
                x[j], g[j] = -32768, 32767
        else:
            raise ValueError(f"unknown kind {kind!r}")
        pad = 2 * cfg.lanes
        xp = np.concatenate([x, np.full(pad, -32768)]).astype(np.int16)
        gp = np.concatenate([g, np.tile([32767, -32768], pad // 2)]).astype(np.int16)
        return Case(f"rmsnormq n={n} ends {kind} at={i} shift={shift} eps={eps}",
                    {"op": Opcode.RMSNORMQ, "td": Dtype.I8, "ts": Dtype.I16, "d": d, "a": a,
                     "b": b, "n": n, "c": c, "imm": shift & 0xFFFF},
                    [(a, xp.tobytes()), (b, gp.tobytes()), (c, np.array([eps], "<i8").tobytes())])

    def dynq(self, n, ts, kind="random", outlier=False):
        cfg = self.cfg
        W = cfg.word_bytes
        a = cfg.A + self.off(DTYPE_INFO[ts].size)
        d = cfg.D + W * self.prng.randrange(3)
        if kind == "random":
            scale = 1 << self.prng.randrange(2, 31 if ts == Dtype.I32 else 15)
            x = self.rng.integers(-scale, scale, n).astype(DTYPE_INFO[ts].np)
        else:
            x = self.values(ts, n, kind)
        if outlier:
            x[self.rng.integers(0, n)] = _SRC_RANGE[ts][self.prng.randrange(2)]
        return Case(f"dynq.i8.{ts.name.lower()} n={n} {kind}{' outlier' if outlier else ''}",
                    {"op": Opcode.DYNQ, "td": Dtype.I8, "ts": ts, "d": d, "a": a, "n": n},
                    [(a, x.tobytes())])

    def softmax(self, n, kind="random", spread=4000):
        cfg = self.cfg
        a = cfg.A + self.off(4)
        d = cfg.D + self.off(2)
        if kind == "random":
            x = (self.rng.integers(-spread, spread, n) + self.prng.randrange(-10**6, 10**6))
        elif kind == "equal":
            x = np.full(n, self.prng.randrange(-2**31, 2**31))
        elif kind == "extreme":
            x = self.rng.choice(np.array([-2**31, 2**31 - 1]), n)
        else:
            x = self.values(Dtype.I32, n, kind)
        x = x.astype("<i4")
        return Case(f"softmax n={n} {kind}",
                    {"op": Opcode.SOFTMAX, "td": Dtype.U16, "ts": Dtype.I32, "d": d, "a": a,
                     "n": n}, [(a, x.tobytes())])

    def rope(self, heads, hs, td=Dtype.I16, pos=None, shift=14, kind="random"):
        cfg = self.cfg
        n = heads * hs
        a = cfg.A + self.off(2)
        b = cfg.P + self.off(2)
        d = cfg.D + self.off(DTYPE_INFO[td].size)
        pos = self.prng.randrange(512) if pos is None else pos
        cos, sin = nx.rope_tables(pos + 1, hs)
        row = np.concatenate([cos[pos], sin[pos]]).astype("<i2")
        x = self.values(Dtype.I16, n, kind)
        return Case(f"rope.{td.name.lower()} heads={heads} hs={hs} pos={pos} {kind}",
                    {"op": Opcode.ROPE, "td": td, "ts": Dtype.I16, "d": d, "a": a, "b": b,
                     "n": n, "imm": hs, "c": shift},
                    [(a, x.tobytes()), (b, row.tobytes())])

    def silu(self, n, frac_bits=11, kind="random"):
        cfg = self.cfg
        a = cfg.A + self.off(2)
        d = cfg.D + self.off(2)
        x = self.values(Dtype.I16, n, kind)
        return Case(f"silu n={n} f={frac_bits} {kind}",
                    {"op": Opcode.SILU, "td": Dtype.I16, "ts": Dtype.I16, "d": d, "a": a,
                     "n": n, "imm": frac_bits}, [(a, x.tobytes())])

    def wsum(self, n, width, stride=None, kind="random", a=None, b=None):
        """``wsum.i32.u16``: ``n`` positions of ``width`` int8 V columns, rows ``stride``
        bytes apart (default ``width`` + 0 .. 3), p at ``a`` and V at ``b`` (default: P and
        A plus a random offset).  Kinds as `values`, ``softmax`` (p summing to about
        2**15, random V)."""
        cfg = self.cfg
        stride = width + self.prng.randrange(4) if stride is None else stride
        a = cfg.P + self.off(2) if a is None else a
        b = cfg.A + (0 if self.aligned else self.prng.randrange(8)) if b is None else b
        d = cfg.D + self.off(4)
        p = self.values(Dtype.U16, n, kind if kind != "random" else "random")
        if kind == "softmax":
            p = self.rng.integers(0, 2**15 // max(n, 1) * 2 + 1, n).astype("<u2")
        span = (n - 1) * stride + width
        raw = self.values(Dtype.I8, span, "random" if kind == "softmax" else kind)
        return Case(f"wsum n={n} width={width} stride={stride} a={a} b={b} {kind}",
                    {"op": Opcode.WSUM, "td": Dtype.I32, "ts": Dtype.U16, "d": d, "a": a,
                     "b": b, "n": n, "imm": width, "c": stride},
                    [(a, p.astype("<u2").tobytes()), (b, raw.tobytes())])

    def prologue(self):
        """``reqm``, ``rmsnorm`` and ``rmsnormq`` around their parameter word (``reqm``'s
        ``(m, s)`` at B, RMSNorm's epsilon at C), which the unit reads at the head of pass
        1's stream (session 32 (2): pass 1 no longer waits for it to drain): n = 1 (pass
        1's one chunk fires a cycle after the word at the earliest, and ``reqm``'s lanes
        need its multiplier then), the word at every aligned offset in its SRAM word, the
        word inside the source vector, and the word inside the destination (pass 1 or 2
        writes over it after it is read).  ``reqm``'s ``imm`` is 0, so a multiplier taken
        late gives zeros."""
        cfg = self.cfg
        W = cfg.word_bytes
        cases = []
        for n, td, ts, m, sh in ((1, Dtype.I8, Dtype.I8, 3, 1), (1, Dtype.I32, Dtype.I16, 65535, 0),
                                 (cfg.lanes - 1, Dtype.I16, Dtype.I32, 23456, 17),
                                 (2 * cfg.lanes + 1, Dtype.I8, Dtype.I16, 777, 9)):
            for off in range(0, W, 4):
                case = self.reqi(n, td, ts, m, sh, op=Opcode.REQM)
                b = cfg.P + W + off
                case.cmd["b"] = b
                case.writes[-1] = (b, case.writes[-1][1])
                case.name += f" b%W={off}"
                cases.append(case)
        # (m, s) inside x, and in the destination, which pass 1 overwrites
        case = self.reqi(2 * cfg.lanes + 3, Dtype.I16, Dtype.I16, 1000, 3, op=Opcode.REQM)
        a = case.cmd["a"]
        b = (a + 8) & ~3
        case.cmd["b"], case.writes[-1] = b, (b, case.writes[-1][1])
        case.name += " b in A"
        cases.append(case)
        case = self.reqi(2 * cfg.lanes + 3, Dtype.I8, Dtype.I16, 1000, 3, op=Opcode.REQM)
        b = (case.cmd["d"] + 4) & ~3
        case.cmd["b"], case.writes[-1] = b, (b, case.writes[-1][1])
        case.name += " b in D"
        cases.append(case)

        def with_c(case, c, tag):
            eps = case.writes[-1][1]
            case.cmd["c"], case.writes[-1] = c, (c, eps)
            case.name += f" {tag}"
            return case

        for n in (1, 2, cfg.lanes + 1):
            for off in range(0, W, 8):
                cases.append(with_c(self.rmsnorm(n), cfg.P + W + off, f"c%W={off}"))
                cases.append(with_c(self.rmsnormq(n), cfg.P + W + off, f"c%W={off}"))
        # epsilon inside x (its write replaces x's first 8 bytes), inside the gain, inside
        # the destination (pass 2 / 3 writes over it)
        for make in (self.rmsnorm, self.rmsnormq):
            case = make(2 * cfg.lanes + 5)
            cases.append(with_c(case, (case.cmd["a"] + 8) & ~7, "c in A"))
            case = make(2 * cfg.lanes + 5)
            cases.append(with_c(case, (case.cmd["b"] + 8) & ~7, "c in B"))
            case = make(2 * cfg.lanes + 5)
            cases.append(with_c(case, (case.cmd["d"] + 8) & ~7, "c in D"))
        return cases

    def wsum_pairs(self):
        """``wsum`` cases aimed at the unit's row pairs (with a wide read, rows ``t`` and
        ``t + 1`` in one read when the stride is one word W and row ``t``'s bytes of the
        column chunk are in one word) and its window of p words (``docs/tile.md``,
        "Vector unit"): n = 1, 2, 3 and odd / even n (a last row alone), stride W against
        0, W - 1, W + 1 and 2W, widths 1, below V, V and above V (overlapping rows), V rows
        ending at a word's last byte and one byte later (then no pair), p at offsets 0, 2
        and W - 2 in its word (pairs of probabilities across two words), p ending at the
        SRAM's last byte, and extreme p and V (-128, 127, 65535)."""
        cfg = self.cfg
        V, W = cfg.lanes, cfg.word_bytes
        A, P = cfg.A, cfg.P
        cases = []
        for n in (1, 2, 3, 4, 5, 9, 17):
            cases.append(self.wsum(n, min(V, W), stride=W, a=P, b=A))
        for width in sorted({1, max(1, V - 1), V, V + 1, 2 * V + 3}):
            for boff in sorted({0, max(0, W - min(width, V)), (W - min(width, V) + 1) % W}):
                cases.append(self.wsum(7, width, stride=W, a=P + 2 * (width % 3), b=A + boff))
        for aoff in (2, W - 2):
            cases.append(self.wsum(6, V, stride=W, a=P + aoff, b=A))
            cases.append(self.wsum(11, V, stride=W, a=P + aoff, b=A + W - 1, kind="minmax"))
        for stride in (0, W - 1, W + 1, 2 * W):
            cases.append(self.wsum(8, min(V, W), stride=stride, a=P + 2, b=A + 1))
        for kind in ("min", "max", "minmax"):
            cases.append(self.wsum(13, V, stride=W, a=P + W - 2, b=A, kind=kind))
        end = cfg.sram_bytes
        cases.append(self.wsum(5, V, stride=W, a=end - 10, b=A))     # p's last byte at the end
        cases.append(self.wsum(4, V, stride=W, a=end - 8, b=A, kind="max"))
        return cases
