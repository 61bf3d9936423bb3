"""The tile's vector unit: element-wise operations, requantisation, reductions, fused passes.

Executes the vector-unit instructions of ``docs/isa.md`` (units 1 and 2, and ``TABLE``) bit
for bit as the ISA-level simulator (``chipotle.isasim``) and the golden model
(``chipotle.golden.numerics``) do: the operands are in the tile SRAM, reached through one
:class:`~chipotle.hw.tile.sram.SramSignature` initiator port; the controller hands over a
decoded instruction whose address and length operands are already resolved
(:class:`VectorCommand`); the unit reports completion, with an ``ErrorCode`` and the cycles
it was busy, on a stream (:class:`VectorDone`).  Timing and structure: ``docs/tile.md``,
section "Vector unit".

Members
-------
VectorCommand
    Command format (``data.Struct``): the instruction's opcode, types and immediates (shapes
    from ``chipotle.isa``) plus resolved byte addresses and length.
VectorDone
    Completion format: error code and busy cycles.
VectorUnit
    The component.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from chipotle.isa.core import (
    C_BITS,
    IMM_BITS,
    TABLE_ENTRIES,
    Dtype,
    ErrorCode,
    IsaConfig,
    Opcode,
    TableId,
)

from .sram import ADDR_WIDTH, SramSignature

__all__ = ["VectorCommand", "VectorDone", "VectorUnit", "VECTOR_OPCODES", "RESULT_SLOTS",
           "MIN_RESULT_SLOTS"]

#: Opcodes the vector unit executes (everything else completes with ``ILLEGAL``).
VECTOR_OPCODES = frozenset(
    op for op in Opcode if (op.value >> 4) in (1, 2)) | {Opcode.TABLE}


class VectorCommand(data.Struct):
    """A vector-unit instruction with its operands resolved by the controller (173 bits).

    The field shapes are the ISA's (``chipotle.isa.core``): ``op`` / ``td`` / ``ts`` /
    ``c`` / ``imm`` are the instruction's fields unchanged (``ts`` read as a `Dtype`); ``d``,
    ``a``, ``b`` are the byte addresses ``r[reg] + off`` and ``n`` is ``r[reg] + imm``.

    Members
    -------
    op : `Opcode` (6 bits)
        A vector opcode (``VADD`` .. ``ARGMAX``, ``RMSNORM`` .. ``WSUM``) or ``TABLE``.
    td : `Dtype` (3 bits)
        Destination element type.
    ts : `Dtype` (3 bits)
        Source element type.
    c : ``unsigned(17)``
        The ``c`` immediate (a shift, the epsilon address, a stride, a table id).
    imm : ``unsigned(16)``
        The ``imm`` immediate (a multiplier, a signed gain shift, a head size, a width).
    d, a, b : ``unsigned(32)``
        Resolved byte addresses (modulo ``2**32``).
    n : ``unsigned(32)``
        Resolved length (elements, or positions for ``WSUM``).
    """

    op: Opcode
    td: Dtype
    ts: Dtype
    c: unsigned(C_BITS)
    imm: unsigned(IMM_BITS)
    d: unsigned(32)
    a: unsigned(32)
    b: unsigned(32)
    n: unsigned(32)


class VectorDone(data.Struct):
    """Completion of one command (36 bits).

    Members
    -------
    error : `ErrorCode` (4 bits)
        ``NONE``, or why the command was refused (then it wrote nothing).
    cycles : ``unsigned(32)``
        Cycles from the command's acceptance to the first cycle this word is offered (the
        vector-busy performance counter's increment).
    """

    error: ErrorCode
    cycles: unsigned(32)


class _Lane(enum.Enum, shape=unsigned(4)):
    """What a lane computes: ``q = (MX * MY + ADD + half) >> SH``, ``r = sat_td(q)``."""

    ADD = 0     # x * 1 + y
    SUB = 1     # x * 1 - y
    MUL = 2     # x * y
    REQ = 3     # x * mult >> shamt
    PASS = 4    # x
    SQ = 5      # x * x (and the small product x * y: RMSNORMQ's pass 1, x * gain)
    NORM = 6    # (x * y) * mult >> shamt
    EXP = 7     # EXP2[f] >> n, from d = max - x
    ROPE = 8    # x[2j] c -+ x[2j+1] s ... >> shamt
    SILU = 9    # x * SIGMOID[j] >> 15
    WSUM = 10   # x * y[0] (R > 1: x * p[t] + x2 * p[t + 1], a pair of rows)
    ENDS = 11   # lane 0 max(x * gain), lane 1 min(x * gain), * mult >> shamt (RMSNORMQ)


class _Red(enum.Enum, shape=unsigned(2)):
    NONE = 0
    SUM = 1
    MAX = 2
    MAXABS = 3


# Passes of a command: a prologue reading one parameter word, then up to three passes.
_PRO, _P1, _P2, _P3 = 0, 1, 2, 3

#: Result slots between the lanes and the SRAM write port by default (``VectorUnit(slots=)``):
#: chunks of a writing pass between their first read and their last write
#: (``chipotle.isa.vector_cycles(..., slots=)`` models the same).
RESULT_SLOTS = 3
#: The fewest result slots the unit works with: one.  Each slot holds a whole chunk's result
#: (``docs/tile.md``, "Vector unit"): a writing pass takes a slot's credit before a chunk's
#: first read, a reduction's result and a ``WSUM`` column's accumulators wait for a free
#: slot, so one slot serialises the chunks (read, lanes, write) but is correct.
MIN_RESULT_SLOTS = 1

#: The most lanes the unit is built with: a tile of 128 lanes elaborates in about 2.5
#: minutes (session 29); at 512 the lanes' reduction expressions exceed Python's recursion
#: limit in Amaranth, and wider units were never elaborated.
MAX_LANES = 128

#: Width of the lanes' rounding shifter: a lane that shifts (s >= 1) has ``|p + add| < 2**48``
#: (``|x * m|`` with x at most 32 bits and m at most 16, or smaller products), so ``2 (p + add)``
#: fits in _SH_W signed bits and every shift of _SH_MAX or more gives 0: shifts are clamped
#: to _SH_MAX, which gives the golden result of any larger one.
_SH_W = 50
_SH_MAX = 50

_DTYPES_SIGNED_BITS = {Dtype.I8: 8, Dtype.I16: 16, Dtype.I32: 32, Dtype.I64: 64}
_DTYPES_UNSIGNED_BITS = {Dtype.U8: 8, Dtype.U16: 16, Dtype.U32: 32}


def _lod(m, value, name):
    """Return a signal holding the leading-one position of ``value`` (0 when it is 0).

    A tree of halves (the upper half's position when it has a one, else the lower half's),
    log-depth rather than a priority chain of ``len(value)`` multiplexers.
    """
    def tree(v):
        """Return (any one in v, its leading-one position) for v of a power-of-two width."""
        if len(v) == 1:
            return v[0], Const(0, 0)
        h = len(v) // 2
        lo_any, lo_pos = tree(v[:h])
        hi_any, hi_pos = tree(v[h:])
        return lo_any | hi_any, Cat(Mux(hi_any, hi_pos, lo_pos), hi_any)

    width = 1 << max((len(value) - 1).bit_length(), 1)
    pos = Signal(range(width), name=name)
    m.d.comb += pos.eq(tree(Cat(value, Const(0, width - len(value))))[1])
    return pos


def _gt_pow2(v, k):
    """Return ``v > 2**k`` for an unsigned ``v``, by reductions instead of a comparator."""
    return v[k + 1:].any() | (v[k] & v[:k].any())


def _sum_over(terms, limit):
    """Return ``sum(terms) > limit`` for unsigned ``terms``, with an adder of the limit's
    width plus one or two bits: a term with a bit at or above the limit's bit length makes
    the sum larger anyway."""
    L = limit.bit_length()
    hi = Cat(*(v[L:].any() for v in terms if len(v) > L)).any()
    return hi | (sum(v[:L] for v in terms) > limit)


class VectorUnit(wiring.Component):
    """The tile's vector unit (``docs/isa.md`` units 1 and 2, ``TABLE``), ``lanes`` wide.

    One command at a time.  A command is checked first (range, alignment, shape, table and
    static arithmetic errors, in the order the ISA simulator checks them); a refused
    command writes nothing and completes with its ``ErrorCode``.  Otherwise it runs as one
    to three *passes* over its vector, micro-sequenced with scalar steps between them
    (leading-one detect, table look-up).  Each pass walks the vector in *chunks* of up to
    ``lanes`` elements through a stream engine: the read side issues the chunks' source
    words back to back (up to ``read_words`` consecutive words of one source stream per
    granted cycle: the SRAM's wide read), each chunk fires into the 4-stage
    lanes when its words have landed, and leaves them folded into a reduction or packed
    into one of ``slots`` result slots, from which the write side writes the
    destination words with byte enables, with priority over the reads.  Cycles:
    ``chipotle.isa.vector_cycles`` (exact when every grant is immediate).  Arithmetic is
    exactly the golden model's (``docs/numerics.md``): the one rounding rule
    ``(x * m + 2**(s-1)) >> s`` with saturation to ``td``, 64-bit reductions, first-index
    argmax.

    Lane datapath (per lane): a 17 x 17 signed multiplier (RMSNorm ``x * gain``, the second
    RoPE product, and with ``read_words`` > 1 ``WSUM``'s second row ``p[t+1] * V[t+1][j]``:
    rows ``t`` and ``t + 1`` come in one wide read when the stride is one word), a 34 x 34
    signed multiplier (``vmul`` is 32 x 32 into 64 bits; every requantisation is at most
    32 x 16), an adder, a 50-bit arithmetic shifter (shifts clamped
    to 50, exact: a shifting lane's sum is below ``2**48``) with rounding, and a saturator
    to ``td``.  Commands must obey the ISA's type rules (the controller's legality check):
    the result slots are sized for destinations aligned to their element size, which the
    checks ensure for every opcode but those with a fixed ``td`` (softmax, silu, wsum).
    Tables: ``amaranth.lib.memory.Memory`` of 16-bit entries
    (sizes ``TABLE_ENTRIES``) in three memories, sigmoid, exp2 + dynq and rsqrt + recip; the
    first two are read by every lane (one look-up per lane per cycle) from ``lanes / 2``
    copies, each one true-dual-port block RAM serving two lanes (``docs/fpga.md``).

    Parameters
    ----------
    lanes : int
        V, elements per chunk (even, at least 2; default `IsaConfig().lanes` = 8).
    word_bytes : int
        W, bytes per SRAM word (a power of two, at least 8; default 8).
    sram_bytes : int
        Size of the SRAM the operands live in (the range checks' limit), at most
        ``2**ADDR_WIDTH`` words.
    read_words : int
        R, words one read of ``bus`` returns (the SRAM's ``n_banks`` for a wide read;
        default 1, one word per read).
    slots : int
        Result slots between the lanes and the write port (default `RESULT_SLOTS` = 3, at
        least `MIN_RESULT_SLOTS` = 1): a writing pass keeps at most this many chunks between
        their first read and their last write.  Each slot is ``ceil((W - 1 + 8 V) / W)``
        words with byte enables, an address and a count (at V = W = 8: 8 words, 598 bits
        with a 128 KiB SRAM); ``docs/tile.md`` "Timing" for what a fourth one buys.
    sram_latency : int
        L of ``bus`` (`SramSignature.latency`): 1 (default), 2 or 3 cycles.  A read's words
        land L cycles after its grant; the stream runs as at L = 1 from there on, so a pass
        takes L - 1 cycles more.

    Raises
    ------
    ValueError
        If `lanes` is not an even integer from 2 to `MAX_LANES`, `word_bytes` not a power of two of
        at least 8, `sram_bytes` not a positive multiple of `word_bytes` of at most
        ``2**ADDR_WIDTH`` words, `read_words` not a positive integer, `slots` not an
        integer of at least `MIN_RESULT_SLOTS`, or `sram_latency` not 1, 2 or 3.

    Members
    -------
    i_cmd : ``In(stream.Signature(VectorCommand))``
        Commands; accepted only when idle (``ready`` is high in the idle state only).
    o_done : ``Out(stream.Signature(VectorDone))``
        One word per command, after its last SRAM write.
    bus : ``Out(SramSignature(word_bytes, read_words, latency=sram_latency))``
        SRAM initiator port (L-cycle read latency, grant handshake; ``en`` never depends
        on ``ready``; a read returns the R words from its address, writes are one word).
        A ``bus.error`` (cannot happen after the range checks) turns the command's error
        into ``SRAM_RANGE``.
    bus_words : ``Out(range(read_words + 1))``
        The words of the read ``bus`` requests this cycle, the ones the unit takes from its
        R-word ``rdata`` (1 .. R: the words of the current source stream, up to R; 0 when
        ``bus`` requests no read): the tile's ``BYTES_READ`` counter adds W times this
        for each granted read.
    busy : ``Out(1)``
        A command is in progress (accepted, ``o_done`` not yet taken).
    """

    def __init__(self, *, lanes=None, word_bytes=8, sram_bytes=32768, read_words=1,
                 slots=RESULT_SLOTS, sram_latency=1):
        lanes = IsaConfig().lanes if lanes is None else lanes
        if not isinstance(lanes, int) or lanes < 2 or lanes % 2 or lanes > MAX_LANES:
            raise ValueError(f"lanes must be an even integer from 2 to {MAX_LANES} "
                             f"(MAX_LANES), not {lanes!r}")
        if not isinstance(word_bytes, int) or word_bytes < 8 or word_bytes & (word_bytes - 1):
            raise ValueError(f"word_bytes must be a power of two of at least 8, "
                             f"not {word_bytes!r}")
        if (not isinstance(sram_bytes, int) or sram_bytes <= 0 or sram_bytes % word_bytes
                or sram_bytes // word_bytes > 2 ** ADDR_WIDTH):
            raise ValueError(f"sram_bytes must be a positive multiple of word_bytes of at most "
                             f"{2 ** ADDR_WIDTH} words, not {sram_bytes!r}")
        if not isinstance(read_words, int) or read_words < 1:
            raise ValueError(f"read_words must be a positive integer, not {read_words!r}")
        if (not isinstance(slots, int) or isinstance(slots, bool)
                or slots < MIN_RESULT_SLOTS):
            raise ValueError(f"slots must be an integer of at least {MIN_RESULT_SLOTS}, "
                             f"not {slots!r}")
        self._lanes = lanes
        self._word_bytes = word_bytes
        self._sram_bytes = sram_bytes
        self._read_words = read_words
        self._slots = slots
        super().__init__({
            "i_cmd": In(stream.Signature(VectorCommand)),
            "o_done": Out(stream.Signature(VectorDone)),
            "bus": Out(SramSignature(word_bytes=word_bytes, read_words=read_words,
                                     latency=sram_latency)),
            "bus_words": Out(range(read_words + 1)),
            "busy": Out(1),
        })

    @property
    def lanes(self):
        """V, elements per chunk."""
        return self._lanes

    @property
    def word_bytes(self):
        """W, bytes per SRAM word."""
        return self._word_bytes

    @property
    def sram_bytes(self):
        """Size of the SRAM (the range checks' limit)."""
        return self._sram_bytes

    @property
    def read_words(self):
        """R, words one SRAM read returns."""
        return self._read_words

    @property
    def slots(self):
        """Result slots between the lanes and the SRAM write port."""
        return self._slots

    def elaborate(self, platform):
        m = Module()
        V, W, R = self.lanes, self.word_bytes, self.read_words
        wb = exact_log2(W)
        SRAM = self.sram_bytes
        # Read buffers: a chunk of V elements of up to 4 bytes at any byte offset in a word.
        NW = -(-(W - 1 + 4 * V) // W)
        # Write buffer: V elements of es bytes at an offset that is a multiple of es in a
        # word (the destination checks make D a multiple of the element size; softmax,
        # silu and wsum, whose checks align D to 2 or 4 bytes, have the ISA's fixed td).
        NWD = max(-(-(W - es + V * es) // W) for es in (1, 2, 4, 8))
        # Width of the byte addresses and element indices of a running command: its checks
        # keep every operand inside the SRAM, so they are at most SRAM (and n at most SRAM
        # elements); a refused command never streams.
        AW = max(SRAM.bit_length(), wb + 1)
        # WSUM with a wide read (R > 1): two adjacent V rows per read (rows t and t + 1 when
        # the stride is one word and the chunk's row bytes are in one word), summed by each
        # lane's two products, and p read as a window of up to PW words; with R = 1 none of
        # this is built (the unit is the one-row-per-chunk unit it was)
        WP = R > 1
        PW = min(R, NW)

        cmd = Signal(VectorCommand)
        op = cmd.op
        # The type the lanes saturate to (registered with the command): td, but int16 for
        # RMSNORMQ, whose lanes compute RMSNorm's int16 values (its int8 results come from
        # the two extra stages, `ext`)
        ltd = Signal(Dtype)
        td_k = Signal(2)            # log2 of the destination element size
        ts_k = Signal(2)
        ts_sgn = Signal()
        m.d.comb += [
            td_k.eq(cmd.td.as_value()[:2]),
            ts_k.eq(cmd.ts.as_value()[:2]),
            ts_sgn.eq(~cmd.ts.as_value()[2]),
        ]

        def is_op(*ops):
            return Cat(*(op == o for o in ops)).any()

        # -- tables ------------------------------------------------------------------------
        # Three block RAMs of 16-bit entries (``docs/fpga.md``, "Vector unit tables"): SIGMOID;
        # EXP2 and DYNQ; RSQRT and RECIP (a table at its offset `tab_off` in its memory).  The
        # first two are read by the lanes: ``V / 2`` copies, each serving two lanes, lane 2k
        # on the port that the TABLE writes share (its address is the write address while a
        # TABLE command writes), lane 2k + 1 on the other, so a copy is one true-dual-port
        # block RAM (``no_rw_check``: no command reads a table while TABLE writes it).  DYNQ
        # is read through lane 0's port (a dynq command's lanes read no table), RSQRT and
        # RECIP through the one port of theirs, chosen by the opcode.
        tab_off = {}
        tab_groups = ((TableId.SIGMOID,), (TableId.EXP2, TableId.DYNQ),
                      (TableId.RSQRT, TableId.RECIP))
        for group in tab_groups:
            base = 0
            for tid in group:
                tab_off[tid] = base
                base += TABLE_ENTRIES[tid]
        tw_on = Signal()            # a TABLE command writes an entry this cycle ...
        tw_idx = Signal(16)         # ... at this index of table cmd.c ...
        tw_data = Signal(16)        # ... with this value
        tw_addr = Signal(16)        # index + the table's offset in its memory
        with m.Switch(cmd.c):
            for tid in TableId:
                with m.Case(tid.value):
                    m.d.comb += tw_addr.eq(tw_idx + tab_off[tid])

        def table_memory(name, group, nports, attrs=None):
            """A memory of ``group``'s tables, written by TABLE; return its ports."""
            depth = sum(TABLE_ENTRIES[t] for t in group)
            mem = memory.Memory(shape=unsigned(16), depth=depth, init=[], attrs=attrs)
            m.submodules[name] = mem
            wp = mem.write_port()
            m.d.comb += [wp.data.eq(tw_data),
                         wp.en.eq(tw_on & Cat(*(cmd.c == t.value for t in group)).any())]
            return wp, [mem.read_port() for _ in range(nports)]

        def lane_tables(name, group, lane_addrs):
            """The copies of a table memory read by the lanes; return each lane's data."""
            datas = []
            for k in range(V // 2):
                wp, (ra, rb) = table_memory(f"table_{name}{k}", group, 2, {"no_rw_check": 1})
                shared = Signal.like(wp.addr, name=f"table_{name}{k}_addr")
                m.d.comb += [shared.eq(Mux(tw_on, tw_addr, lane_addrs[2 * k])),
                             wp.addr.eq(shared), ra.addr.eq(shared),
                             rb.addr.eq(lane_addrs[2 * k + 1])]
                datas += [ra.data, rb.data]
            return datas

        exp_addrs = [Signal(9, name=f"exp_addr{lane}") for lane in range(V)]
        sig_addrs = [Signal(10, name=f"sig_addr{lane}") for lane in range(V)]
        exp_data = lane_tables("exp2_dynq", (TableId.EXP2, TableId.DYNQ), exp_addrs)
        sig_data = lane_tables("sigmoid", (TableId.SIGMOID,), sig_addrs)
        sc_wp, (sc_rp,) = table_memory("table_rsqrt_recip", (TableId.RSQRT, TableId.RECIP), 1)
        m.d.comb += sc_wp.addr.eq(tw_addr)
        lane_tidx = []              # each lane's stage-1 table index
        loaded = Signal(len(TableId))

        # -- state -------------------------------------------------------------------------
        nn = Signal(AW)             # elements of a pass (table entries for TABLE)
        err = Signal(ErrorCode)
        derr = Signal(ErrorCode)    # RMSNorm's destination error, reported after pass 1
        ps = Signal(2)              # pass
        i = Signal(AW)              # first element of the chunk
        ih = Signal(IMM_BITS)       # RoPE: element of the chunk within its head
        j0 = Signal(IMM_BITS + 1)   # WSUM: first column of the chunk
        t = Signal(AW)              # WSUM: position
        ax, ay, az, ad = (Signal(AW, name=nm) for nm in ("ax", "ay", "az", "ad"))
        mult = Signal(16)           # multiplier of REQ / NORM lanes
        shamt = Signal(range(_SH_MAX + 1))     # shift of the lanes (clamped)
        sj = Signal(range(17))      # SiLU: the index rounding shift (clamped)
        smax = Signal(signed(33))   # softmax: the maximum
        acc = Signal(signed(64))
        accidx = Signal(AW)
        first = Signal()
        wacc = [Signal(32, name=f"wacc{lane}") for lane in range(V)]
        eps = Signal(signed(64))
        kk = Signal(range(32))
        bexp = Signal(range(64))
        mu = Signal(16)
        cyc = Signal(32)
        busflag = Signal()

        # -- per (op, pass) control ----------------------------------------------------------
        use_x = Signal()
        use_y = Signal()
        use_z = Signal()
        xk = Signal(2)
        yk = Signal(2)
        xs = Signal()
        ys = Signal()
        lmode = Signal(_Lane)
        red = Signal(_Red)
        wr = Signal()               # the pass writes its lanes to D
        tw = Signal()               # the pass writes the table RAM
        m.d.comb += [use_x.eq(1), xk.eq(ts_k), xs.eq(ts_sgn), yk.eq(ts_k), ys.eq(ts_sgn)]
        with m.Switch(op):
            for o, lm in ((Opcode.VADD, _Lane.ADD), (Opcode.VSUB, _Lane.SUB),
                          (Opcode.VMUL, _Lane.MUL)):
                with m.Case(o):
                    m.d.comb += [use_y.eq(1), lmode.eq(lm)]
            with m.Case(Opcode.REQI):
                m.d.comb += lmode.eq(_Lane.REQ)
            with m.Case(Opcode.REQM):
                with m.If(ps == _PRO):
                    m.d.comb += xk.eq(2)
                with m.Else():
                    m.d.comb += lmode.eq(_Lane.REQ)
            for o, lm, rd in ((Opcode.RSUM, _Lane.PASS, _Red.SUM),
                              (Opcode.RSUMSQ, _Lane.SQ, _Red.SUM),
                              (Opcode.RMAX, _Lane.PASS, _Red.MAX),
                              (Opcode.RMAXABS, _Lane.PASS, _Red.MAXABS),
                              (Opcode.ARGMAX, _Lane.PASS, _Red.MAX)):
                with m.Case(o):
                    m.d.comb += [lmode.eq(lm), red.eq(rd)]
            with m.Case(Opcode.RMSNORM, Opcode.RMSNORMQ):
                # RMSNORMQ: pass 1 as RMSNorm's, but reading the gain too: the lanes' small
                # product x * gain goes to the running max and min beside the sum of squares
                # (`pg_max`, `pg_min`); pass 2 reads nothing: the two ends fire through lanes
                # 0 and 1 (ENDS, RMSNorm's requantisation and int16 saturation) into a
                # max-abs reduction (no write); pass 3 RMSNorm's lanes, then the extra stages
                # requantise each int16 result to int8 (`ext`), written at D + W
                m.d.comb += [xk.eq(1), xs.eq(1), yk.eq(1), ys.eq(1)]
                with m.If(ps == _PRO):
                    m.d.comb += xk.eq(3)
                with m.Elif(ps == _P1):
                    m.d.comb += [use_y.eq(op == Opcode.RMSNORMQ), lmode.eq(_Lane.SQ),
                                 red.eq(_Red.SUM)]
                with m.Elif((op == Opcode.RMSNORMQ) & (ps == _P2)):
                    m.d.comb += [lmode.eq(_Lane.ENDS), red.eq(_Red.MAXABS)]
                with m.Else():
                    m.d.comb += [use_y.eq(1), lmode.eq(_Lane.NORM)]
            with m.Case(Opcode.DYNQ):
                with m.If(ps == _P1):
                    m.d.comb += [lmode.eq(_Lane.PASS), red.eq(_Red.MAXABS)]
                with m.Else():
                    m.d.comb += lmode.eq(_Lane.REQ)
            with m.Case(Opcode.SOFTMAX):
                m.d.comb += [xk.eq(2), xs.eq(1)]
                with m.If(ps == _P1):
                    m.d.comb += [lmode.eq(_Lane.PASS), red.eq(_Red.MAX)]
                with m.Elif(ps == _P2):
                    m.d.comb += [lmode.eq(_Lane.EXP), red.eq(_Red.SUM)]
                with m.Else():
                    m.d.comb += [xk.eq(1), xs.eq(0), lmode.eq(_Lane.REQ)]
            with m.Case(Opcode.ROPE):
                m.d.comb += [xk.eq(1), xs.eq(1), yk.eq(1), ys.eq(1), use_y.eq(1), use_z.eq(1),
                             lmode.eq(_Lane.ROPE)]
            with m.Case(Opcode.SILU):
                m.d.comb += [xk.eq(1), xs.eq(1), lmode.eq(_Lane.SILU)]
            with m.Case(Opcode.WSUM):
                m.d.comb += [xk.eq(0), xs.eq(1), yk.eq(1), ys.eq(0), use_y.eq(1),
                             lmode.eq(_Lane.WSUM)]
            with m.Case(Opcode.TABLE):
                m.d.comb += [xk.eq(1), xs.eq(0), lmode.eq(_Lane.PASS), tw.eq(1)]

        def pass_writes(p):
            """Whether pass ``p`` of the current op writes its lanes to D (``wr``): one
            expression, so that the write side's registered copy (``wrtw_q`` below) is the
            same function of the pass it starts."""
            return (is_op(Opcode.VADD, Opcode.VSUB, Opcode.VMUL, Opcode.REQI, Opcode.ROPE,
                          Opcode.SILU)
                    | ((op == Opcode.REQM) & (p != _PRO))
                    | (is_op(Opcode.RMSNORM, Opcode.RMSNORMQ) & (p != _PRO) & (p != _P1)
                       & ~((op == Opcode.RMSNORMQ) & (p == _P2)))
                    | (is_op(Opcode.DYNQ, Opcode.SOFTMAX) & (p != _P1)))

        m.d.comb += wr.eq(pass_writes(ps))

        # -- chunk geometry ----------------------------------------------------------------
        cnt = Signal(range(V + 1))
        rem = Signal(AW + 1)
        if WP:
            wpair_ok = Signal()     # WSUM with a stride of one word (registered with the command)
            pair = Signal()         # WSUM: this chunk is rows t and t + 1 (one wide read)
        m.d.comb += rem.eq(nn - i)
        cnt_gen = Mux(rem < V, rem, V)
        with m.If(ps == _PRO):
            m.d.comb += cnt.eq(1)
        with m.Elif(op == Opcode.ROPE):
            hrem = cmd.imm - ih
            m.d.comb += cnt.eq(Mux(hrem < cnt_gen, hrem, cnt_gen))
        with m.Elif(op == Opcode.WSUM):
            crem = cmd.imm - j0
            m.d.comb += cnt.eq(Mux(crem < V, crem, V))
        with m.Else():
            m.d.comb += cnt.eq(cnt_gen)
        ycnt = Signal(range(V + 1))
        with m.If(op == Opcode.ROPE):
            m.d.comb += ycnt.eq(cnt >> 1)
        with m.Elif(op == Opcode.WSUM):
            m.d.comb += ycnt.eq(1 + pair if WP else 1)
        with m.Else():
            m.d.comb += ycnt.eq(cnt)

        def span(addr, nbytes):
            """Return (first word, byte offset, word count) of a byte range."""
            off = addr[:wb]
            nwords = (off + nbytes + (W - 1)) >> wb
            return addr[wb:], off, Mux(nbytes == 0, 0, nwords)

        fx, ox, nx = span(ax, Mux(use_x, cnt << xk, 0))
        fy, oy, ny = span(ay, Mux(use_y, ycnt << yk, 0))
        fz, oz, nz = span(az, Mux(use_z, (cnt >> 1) << 1, 0))
        pc_valid = Signal()
        pc_addr = Signal(len(fy))
        nwx, nwy, nwz = (Signal(range(NW + 1), name=nm) for nm in ("nwx", "nwy", "nwz"))
        if not WP:
            # WSUM reads a word of p once per W / 2 positions: the word last read stays in
            # bufs[1][0] (nothing else writes that buffer during WSUM).
            p_cached = (op == Opcode.WSUM) & pc_valid & (pc_addr == fy)
            m.d.comb += [nwx.eq(nx), nwy.eq(Mux(p_cached, 0, ny)), nwz.eq(nz)]
        else:
            # Rows t and t + 1 are the words fx and fx + 1 at the same offset when the stride
            # is W and row t's bytes of the chunk are in one word: one read of 2 words.
            m.d.comb += pair.eq(wpair_ok & (nx == 1) & (t + 1 != nn))
            # WSUM reads p as a window of up to PW words from the first word it needs (not
            # past p's last word, `plast`), kept in bufs[1][0 .. pc_n - 1] (nothing else
            # writes that buffer during WSUM): a chunk whose p values (p[t], and p[t + 1]
            # when paired) lie in the window reads no p.  Within a column chunk p only moves
            # forward, so fy >= pc_addr while pc_valid.
            pc_n = Signal(range(PW + 1))
            plast = Signal(len(fy))
            dpc = Signal(len(fy) + 1)
            m.d.comb += dpc.eq(fy - pc_addr)
            p_cached = ((op == Opcode.WSUM) & pc_valid & (dpc < PW)
                        & (dpc[:max(1, (PW - 1).bit_length())] + ny <= pc_n))
            pleft = Signal(len(fy))
            m.d.comb += pleft.eq(plast - fy)
            pwords = Mux(pleft < PW, pleft + 1, PW)
            m.d.comb += [nwx.eq(nx + pair),
                         nwy.eq(Mux(p_cached, 0, Mux(op == Opcode.WSUM, pwords, ny))),
                         nwz.eq(nz)]

        # -- stream engine: read side ----------------------------------------------------------
        # The geometry registers (i, ih, t, j0, ax, ay, az, ad) describe the chunk being read.
        # Its words are issued per granted cycle (x words, then y, then z), up to R of one
        # stream at a time (a wide read of the next min(R, words left in the stream), which
        # land together in consecutive buffer words); with the last read its extraction
        # offsets and write geometry move to pm_*, land with the words
        # (fm_*, `fire` the cycle after, when the buffers hold the whole chunk) and follow it
        # down the lane pipeline (v[k], m_*[k]).  Reads of the next chunk go on meanwhile: a
        # word issued after a chunk's last one lands at the end of that chunk's fire cycle at
        # the earliest, so the buffers need no second copy.
        bufs = [[Signal(8 * W, name=f"buf{s}_{j}", reset_less=True) for j in range(NW)]
                for s in "xyz"]
        rq = Signal(range(3 * NW + 1))
        rd_done = Signal()          # every chunk of the pass has been issued
        pend = Signal()
        pend_sel = Signal(2)
        pend_j = Signal(range(NW))
        pend_k = Signal(range(R + 1)) if R > 1 else None  # words of the landing read
        pend_last = Signal()
        pend_pro = Signal()         # the landing read is the prologue's parameter word
        r_sel = Signal(2)
        r_j = Signal(range(3 * NW + 1))
        r_addr = Signal(ADDR_WIDTH + 1)
        r_total = nwx + nwy + nwz
        if R == 1:
            r_k = 1                     # words issued this cycle
            with m.If(rq < nwx):
                m.d.comb += [r_sel.eq(0), r_j.eq(rq), r_addr.eq(fx + rq)]
            with m.Elif(rq < nwx + nwy):
                m.d.comb += [r_sel.eq(1), r_j.eq(rq - nwx), r_addr.eq(fy + rq - nwx)]
            with m.Else():
                m.d.comb += [r_sel.eq(2), r_j.eq(rq - nwx - nwy),
                             r_addr.eq(fz + rq - nwx - nwy)]
            r_last = rq + 1 == r_total
        else:
            # this read takes the rest of the current stream when its end is within R words;
            # it is the chunk's last read when the streams after it are empty (no adder after
            # the stream's words left on the path of r_last, which enables registers)
            r_k = Signal(range(R + 1))      # words issued this cycle
            r_last = Signal()

            def read_from(sel, j, addr, end, later_empty):
                """Read stream ``sel`` (its words end at ``end`` of the chunk's count)."""
                ends = end <= rq + R
                m.d.comb += [r_sel.eq(sel), r_j.eq(j), r_addr.eq(addr),
                             r_k.eq(Mux(ends, end - rq, R)), r_last.eq(ends & later_empty)]

            with m.If(rq < nwx):
                read_from(0, rq, fx + rq, nwx, (nwy == 0) & (nwz == 0))
            with m.Elif(rq < nwx + nwy):
                read_from(1, rq - nwx, fy + rq - nwx, nwx + nwy, nwz == 0)
            with m.Else():
                read_from(2, rq - nwx - nwy, fz + rq - nwx - nwy, r_total, 1)

        def meta(prefix):
            base = (Signal(wb, name=f"{prefix}_ox"), Signal(wb, name=f"{prefix}_oy"),
                    Signal(wb, name=f"{prefix}_oz"), Signal(range(V + 1), name=f"{prefix}_cnt"),
                    Signal(AW, name=f"{prefix}_i"), Signal(AW, name=f"{prefix}_ad"))
            if not WP:
                return base
            # WSUM: the chunk is a pair of rows; byte offset of p[t] in the p window
            return base + (Signal(name=f"{prefix}_pair"),
                           Signal(range(PW * W), name=f"{prefix}_po"))
        pm = meta("pm")
        fm = meta("fm")
        fire = Signal()
        vpipe = [Signal(name=f"v{k}") for k in range(1, 5)]
        mpipe = [(Signal(range(V + 1), name=f"m{k}_cnt"), Signal(AW, name=f"m{k}_i"),
                  Signal(AW, name=f"m{k}_ad")) for k in range(1, 5)]
        # With an SRAM latency L > 1 a read's words land L - 1 cycles after `pend` (which is
        # the cycle after the grant): its tag (stream, buffer word, words, last, and with
        # the last the chunk's pm_*) follows it down a delay line, so everything from the
        # landing on runs as at L = 1, only later
        lat = self.bus.signature.latency
        l_pend, l_sel, l_j, l_k, l_last, l_pm = pend, pend_sel, pend_j, pend_k, pend_last, pm
        l_pro = pend_pro
        in_flight = pend
        for k in range(2, lat + 1):
            d_pend, d_last = Signal(name=f"pend{k}"), Signal(name=f"pend{k}_last")
            d_pro = Signal(name=f"pend{k}_pro")
            d_sel = Signal(2, name=f"pend{k}_sel")
            d_j = Signal(range(NW), name=f"pend{k}_j")
            d_pm = meta(f"pm{k}")
            m.d.sync += [d_pend.eq(l_pend), d_last.eq(l_last), d_sel.eq(l_sel), d_j.eq(l_j),
                         d_pro.eq(l_pro)]
            m.d.sync += [a.eq(b) for a, b in zip(d_pm, l_pm, strict=True)]
            if R > 1:
                d_k = Signal(range(R + 1), name=f"pend{k}_k")
                m.d.sync += d_k.eq(l_k)
                l_k = d_k
            l_pend, l_sel, l_j, l_last, l_pm, l_pro = d_pend, d_sel, d_j, d_last, d_pm, d_pro
            in_flight = in_flight | d_pend
        # The prologue's word (REQM's multiplier and shift, RMSNorm's epsilon) is the first
        # chunk of pass 1's stream: it does not fire into the lanes; in the cycle it would
        # (`pro_fire`) its parameter is taken from the x shifter (below, after the lanes)
        pro_fire = Signal()
        m.d.sync += [pend.eq(0), fire.eq(l_pend & l_last & ~l_pro),
                     pro_fire.eq(l_pend & l_last & l_pro), vpipe[0].eq(fire)]
        m.d.sync += [vpipe[k].eq(vpipe[k - 1]) for k in range(1, 4)]
        m.d.sync += [a.eq(b) for a, b in zip(mpipe[0], fm[3:6], strict=True)]
        for k in range(1, 4):
            m.d.sync += [a.eq(b) for a, b in zip(mpipe[k], mpipe[k - 1], strict=True)]
        with m.If(l_pend):
            if R == 1:
                with m.Switch(Cat(l_j, l_sel)):
                    for s_ in range(3):
                        for j in range(NW):
                            with m.Case(j | (s_ << len(l_j))):
                                m.d.sync += bufs[s_][j].eq(self.bus.rdata)
            else:
                # word k of the read lands in buffer word l_j + k of stream l_sel
                for s_ in range(3):
                    for j in range(NW):
                        for k in range(min(R, j + 1)):
                            with m.If((l_sel == s_) & (l_j == j - k) & (l_k > k)):
                                m.d.sync += bufs[s_][j].eq(
                                    self.bus.rdata.word_select(k, 8 * W))
            with m.If(l_last):
                m.d.sync += [a.eq(b) for a, b in zip(fm, l_pm, strict=True)]
        with m.If(self.bus.error):
            m.d.sync += busflag.eq(1)
        v4 = vpipe[3]
        m4_cnt, m4_i, m4_ad = mpipe[3]
        # RMSNORMQ's pass 3: two more lane stages (5: the int16 value times the dynq
        # multiplier; 6: its rounding and saturation to int8); the results leave there
        is_q = Signal()             # the command is RMSNORMQ (registered with it)
        ext = Signal()              # ... in its pass 3
        qsat = Signal()             # ... in its pass 2 (the reduction sees int16 values)
        m.d.comb += [ext.eq(is_q & (ps == _P3)), qsat.eq(is_q & (ps == _P2))]
        v5, v6 = Signal(), Signal()
        m5 = (Signal(range(V + 1), name="m5_cnt"), Signal(AW, name="m5_ad"))
        m6 = (Signal(range(V + 1), name="m6_cnt"), Signal(AW, name="m6_ad"))
        m.d.sync += [v5.eq(v4 & ext), v6.eq(v5), m5[0].eq(m4_cnt), m5[1].eq(m4_ad),
                     m6[0].eq(m5[0]), m6[1].eq(m5[1])]

        # -- element extraction ---------------------------------------------------------------
        def extract(words, off, k, sgn, count, prefix, need):
            """Shift the buffer right by ``off`` bytes (the ``need`` low bits of the result,
            largest step first, each step only as wide as what is left needs), then take
            ``count`` elements of ``2**k`` bytes."""
            buf = Cat(*words)
            need = min(need, len(buf))
            v = buf
            for b in reversed(range(len(off))):
                step = 8 << b
                v = Mux(off[b], v >> step, v)[:need + step - 8]
            sh = Signal(need, name=f"{prefix}_sh")
            m.d.comb += sh.eq(v)
            out = []
            for lane in range(count):
                e = Signal(signed(34), name=f"{prefix}{lane}")
                b8, b16, b32 = (sh.word_select(lane, w) for w in (8, 16, 32))
                with m.Switch(k):
                    with m.Case(0):
                        m.d.comb += e.eq(Mux(sgn, b8.as_signed(), b8))
                    with m.Case(1):
                        m.d.comb += e.eq(Mux(sgn, b16.as_signed(), b16))
                    with m.Default():
                        m.d.comb += e.eq(Mux(sgn, b32.as_signed(), b32))
                out.append(e)
            return sh, out

        sh_x, xe = extract(bufs[0], fm[0], xk, xs, V, "xe",
                           max(32 * V, 64, 8 * (W + V) if WP else 0))
        if WP:
            # WSUM's second row (t + 1: the next word, at the same offset) and p[t], p[t + 1]
            # from the p window at byte offset fm_po
            x2e = [sh_x.word_select(W + lane, 8).as_signed() for lane in range(V)]
            pwin = Cat(*bufs[1][:PW], Const(0, 16))
            ph = fm[7][1:]
            wp0, wp1 = Signal(16), Signal(16)
            m.d.comb += [wp0.eq(pwin.word_select(ph, 16)), wp1.eq(pwin.word_select(ph + 1, 16))]
        _, ye = extract(bufs[1], fm[1], yk, ys, V, "ye", 32 * V)
        _, ze = extract(bufs[2], fm[2], Const(1, 2), Const(1), V // 2, "ze", 32 * (V // 2))

        # -- lanes ---------------------------------------------------------------------------
        # Saturation to td (shared by the lanes and the final reduction result): a value
        # fits when its bits from the type's sign bit up (signed) or above its width
        # (unsigned) are all equal to its sign; otherwise it takes the bound of its sign.
        # Reductions of the high bits instead of two comparisons against the bounds.
        sat_lo = Signal(64)         # the bounds of ltd, as 64-bit two's complement
        sat_hi = Signal(64)
        with m.Switch(ltd):
            for dt, bits in _DTYPES_SIGNED_BITS.items():
                with m.Case(dt):
                    m.d.comb += [sat_lo.eq((-(1 << (bits - 1))) & ((1 << 64) - 1)),
                                 sat_hi.eq((1 << (bits - 1)) - 1)]
            for dt, bits in _DTYPES_UNSIGNED_BITS.items():
                with m.Case(dt):
                    m.d.comb += [sat_lo.eq(0), sat_hi.eq((1 << bits) - 1)]

        def saturate(v, name):
            """Return ``v`` (signed, at least 64 bits) saturated to td, as 64 bits."""
            assert len(v) >= 64
            sign = v[-1]
            # any / all of v[k:] for the thresholds k of the types, from segments
            cuts = (7, 8, 15, 16, 31, 32, 63)
            any_from, all_from = {}, {}
            hi_any, hi_all = v[63:].any(), v[63:].all()
            for k, nxt in zip(reversed(cuts), reversed((*cuts[1:], 63)), strict=True):
                if k != 63:
                    hi_any = hi_any | v[k:nxt].any()
                    hi_all = hi_all & v[k:nxt].all()
                any_from[k], all_from[k] = hi_any, hi_all
            fits = Signal(name=f"{name}_fits")
            with m.Switch(ltd):
                for dt, bits in _DTYPES_SIGNED_BITS.items():
                    with m.Case(dt):
                        m.d.comb += fits.eq(~any_from[bits - 1] | all_from[bits - 1])
                for dt, bits in _DTYPES_UNSIGNED_BITS.items():
                    with m.Case(dt):
                        m.d.comb += fits.eq(~any_from[bits])
            return Mux(fits, v[:64], Mux(sign, sat_lo, sat_hi))

        s_imm = cmd.imm.as_signed()
        s4_q, s4_r, s6_r = [], [], []
        mult2 = Signal(16)          # RMSNORMQ: the dynq multiplier of stage 5 ...
        shamt2 = Signal(5)          # ... and its shift 9 + b (b <= 15: |int16| <= 2**15)
        # RMSNORMQ: the largest and the smallest x * gain of its pass 1 (|x * gain| <= 2**30)
        pg_max = Signal(signed(32))
        pg_min = Signal(signed(32))
        m2s = []                    # each lane's small product (stage 2)
        for lane in range(V):
            x = xe[lane]
            partner = xe[lane ^ 1]
            yl = ye[lane]
            cs_c = ye[lane >> 1]
            cs_s = ze[lane >> 1]
            s1_a2 = Signal(signed(17), name=f"s1_a2_{lane}", reset_less=True)
            s1_b2 = Signal(signed(17), name=f"s1_b2_{lane}", reset_less=True)
            s1_mx = Signal(signed(34), name=f"s1_mx_{lane}", reset_less=True)
            s1_my = Signal(signed(34), name=f"s1_my_{lane}", reset_less=True)
            s1_add = Signal(signed(35), name=f"s1_add_{lane}", reset_less=True)
            s1_tidx = Signal(10, name=f"s1_tidx_{lane}", reset_less=True)
            s1_nsh = Signal(5, name=f"s1_nsh_{lane}", reset_less=True)
            # (the small product's operands are x and y but in ROPE lanes: NORM's x * gain,
            # and SQ's, RMSNORMQ's pass 1 x * gain; unused by the other modes)
            m.d.sync += [s1_a2.eq(x), s1_b2.eq(yl), s1_add.eq(0),
                         s1_mx.eq(x), s1_my.eq(1), s1_tidx.eq(0), s1_nsh.eq(0)]
            with m.Switch(lmode):
                with m.Case(_Lane.ADD):
                    m.d.sync += s1_add.eq(yl)
                with m.Case(_Lane.SUB):
                    m.d.sync += s1_add.eq(-yl)
                with m.Case(_Lane.MUL):
                    m.d.sync += s1_my.eq(yl)
                with m.Case(_Lane.REQ):
                    m.d.sync += s1_my.eq(mult)
                with m.Case(_Lane.SQ):
                    m.d.sync += s1_my.eq(x)
                with m.Case(_Lane.ENDS):
                    # lanes 0 and 1 requantise the ends of x * gain as NORM lanes do x * gain
                    if lane < 2:
                        m.d.sync += [s1_mx.eq(pg_max if lane == 0 else pg_min),
                                     s1_my.eq(mult)]
                with m.Case(_Lane.NORM):
                    m.d.sync += s1_my.eq(mult)
                with m.Case(_Lane.EXP):
                    d = Signal(signed(35), name=f"sm_d_{lane}")
                    m.d.comb += d.eq(smax - x)
                    dn = d[8:]
                    m.d.sync += [s1_tidx.eq(d[:8]), s1_nsh.eq(Mux(dn[5:].any(), 31, dn))]
                with m.Case(_Lane.ROPE):
                    if lane % 2 == 0:    # y[2j] = x[2j] c + (-x[2j+1]) s
                        m.d.sync += [s1_mx.eq(x), s1_my.eq(cs_c),
                                     s1_a2.eq(-partner), s1_b2.eq(cs_s)]
                    else:                # y[2j+1] = x[2j] s + x[2j+1] c
                        m.d.sync += [s1_mx.eq(partner), s1_my.eq(cs_s),
                                     s1_a2.eq(x), s1_b2.eq(cs_c)]
                with m.Case(_Lane.SILU):
                    # (x + 2**(sj-1)) >> sj as ((2x >> sj) + 1) >> 1: no adder of the
                    # half (x is int16 here)
                    x2 = Signal(signed(18), name=f"silu_x2_{lane}")
                    jr = Signal(signed(18), name=f"silu_j_{lane}")
                    m.d.comb += [x2.eq(Cat(Const(0, 1), x[:17]).as_signed() >> sj),
                                 jr.eq((x2 >> 1) + x2[0])]
                    # clamp to [-512, 511]: the bits from bit 9 up all equal the sign
                    j_hi = jr[9:]
                    jc = Mux(j_hi.all() | ~j_hi.any(), jr,
                             Mux(jr[-1], Const(-512, signed(18)), Const(511, signed(18))))
                    m.d.sync += s1_tidx.eq(jc + 512)
                with m.Case(_Lane.WSUM):
                    if WP:      # p[t] V[t][j] (big product) + p[t + 1] V[t + 1][j] (small)
                        m.d.sync += [s1_my.eq(wp0), s1_a2.eq(x2e[lane]),
                                     s1_b2.eq(Mux(fm[6], wp1, 0))]
                    else:
                        m.d.sync += s1_my.eq(ye[0])

            # stage 2: the small product; table read in flight
            m2 = Signal(signed(34), name=f"m2_{lane}")
            m.d.comb += m2.eq(s1_a2 * s1_b2)
            m2s.append(m2)
            s2_mx = Signal(signed(34), name=f"s2_mx_{lane}", reset_less=True)
            s2_my = Signal(signed(34), name=f"s2_my_{lane}", reset_less=True)
            s2_add = Signal(signed(36), name=f"s2_add_{lane}", reset_less=True)
            s2_nsh = Signal(5, name=f"s2_nsh_{lane}", reset_less=True)
            m.d.sync += [
                s2_mx.eq(Mux(lmode == _Lane.NORM, m2, s1_mx)),
                s2_my.eq(s1_my),
                s2_add.eq(s1_add + Mux((lmode == _Lane.ROPE) | (lmode == _Lane.WSUM)
                                       if WP else lmode == _Lane.ROPE, m2, 0)),
                s2_nsh.eq(s1_nsh),
            ]
            lane_tidx.append(s1_tidx)
            if lane > 0:
                m.d.comb += exp_addrs[lane].eq(s1_tidx[:8])
            m.d.comb += sig_addrs[lane].eq(s1_tidx)

            # stage 3: the big product
            mx3 = Mux(lmode == _Lane.EXP, exp_data[lane], s2_mx)
            my3 = Mux(lmode == _Lane.SILU, sig_data[lane], s2_my)
            s3_p = Signal(signed(68), name=f"s3_p_{lane}", reset_less=True)
            s3_add = Signal(signed(36), name=f"s3_add_{lane}", reset_less=True)
            s3_sh = Signal(range(_SH_MAX + 1), name=f"s3_sh_{lane}", reset_less=True)
            s3_z = Signal(name=f"s3_z_{lane}", reset_less=True)
            sh3 = Mux(lmode == _Lane.EXP, s2_nsh, shamt)
            m.d.sync += [s3_p.eq(mx3 * my3), s3_add.eq(s2_add), s3_sh.eq(sh3), s3_z.eq(sh3 == 0)]

            # stage 4: the rounding rule (p + add + 2**(s-1)) >> s and saturation.  The
            # rounding as ((2 t >> s) + 1) >> 1, t = p + add, which needs no adder of the half;
            # a shifting lane (s >= 1: REQ, NORM, ROPE, SILU, EXP) has |t| < 2**48, so the
            # shifter and the rounding increment are _SH_W bits wide and s is clamped to
            # _SH_MAX = _SH_W (every larger shift gives 0 as well); with s = 0 the sum is
            # passed at its full width.
            t4 = Signal(signed(69), name=f"t4_{lane}")
            m.d.comb += t4.eq(s3_p + s3_add)
            u4 = Signal(signed(_SH_W), name=f"u4_{lane}")
            m.d.comb += u4.eq(Cat(Const(0, 1), t4[:_SH_W - 1]).as_signed() >> s3_sh)
            r4 = Signal(signed(_SH_W), name=f"r4_{lane}")
            m.d.comb += r4.eq((u4 >> 1) + u4[0])
            q = Signal(signed(69), name=f"q4_{lane}")
            m.d.comb += q.eq(Cat(r4[:_SH_W - 1],
                                 Mux(s3_z, t4[_SH_W - 1:], r4[_SH_W - 1].replicate(
                                     len(t4) - _SH_W + 1))))
            s4q = Signal(signed(40), name=f"s4_q_{lane}", reset_less=True)
            s4r = Signal(64, name=f"s4_r_{lane}", reset_less=True)
            satq = saturate(q, f"sat{lane}")
            # s4q, the reductions' input: q, or (RMSNORMQ's pass 2) the saturated value
            m.d.sync += [s4q.eq(Mux(qsat, satq[:40], q)), s4r.eq(satq)]
            s4_q.append(s4q)
            s4_r.append(s4r)

            # stages 5 and 6 (RMSNORMQ's pass 3): requant(y16, mult2, shamt2) to int8, the
            # rounding as in stage 4 (shamt2 >= 9); a 17 x 17 multiplier per lane
            s5p = Signal(signed(33), name=f"s5_p_{lane}", reset_less=True)
            m.d.sync += s5p.eq(s4r[:16].as_signed() * mult2)
            u6 = Signal(signed(34), name=f"u6_{lane}")
            m.d.comb += u6.eq(Cat(Const(0, 1), s5p).as_signed() >> shamt2)
            r6 = Signal(signed(34), name=f"r6_{lane}")
            m.d.comb += r6.eq((u6 >> 1) + u6[0])
            hi6 = r6[7:]
            s6r = Signal(8, name=f"s6_r_{lane}", reset_less=True)
            m.d.sync += s6r.eq(Mux(hi6.all() | ~hi6.any(), r6[:8],
                                   Mux(r6[-1], Const(0x80, 8), Const(0x7F, 8))))
            s6_r.append(s6r)

        # -- RMSNORMQ: the ends of x * gain (pass 1) ------------------------------------------
        # The dynq scale needs a = max_i |y_i| of RMSNorm's int16 values
        # y_i = Y(x_i g_i), Y(v) = sat16((v r + 2**(s-1)) >> s) (golden `numerics.rmsnorm`:
        # `requant(x * gain, r, 15 + k + gain_shift, 16)`; `numerics.requant`: the product
        # exact, the half added, an arithmetic (floor) shift, then saturation; s = 0 adds
        # nothing).  With r >= 0 (an RSQRT entry, or 0) Y is non-decreasing: v <= w gives
        # v r <= w r, so v r + h <= w r + h, so floor((v r + h) / 2**s) <= floor((w r + h)
        # / 2**s), and clipping to [-32768, 32767] keeps the order.  So with P = max_i x_i g_i
        # and Q = min_i x_i g_i, Y(Q) <= y_i <= Y(P) for every i, both bounds attained, and
        # a = max_i max(y_i, -y_i) = max(Y(P), -Y(Q)) (|-32768| = 32768, as the golden's int64
        # abs).  Pass 1 keeps P and Q beside the sum of squares; pass 2 only computes Y(P) and
        # Y(Q) (ENDS lanes) and their max-abs.  Registered stage by stage beside the lanes
        # (nothing chained after their paths): S2 each lane's x * g (the small product), S3 a
        # compare per lane pair gives its larger and smaller product (lane 2k + 1 counts when
        # it is in the chunk), S4 a tree of compares over the pairs (a pair counts when its
        # first lane is in the chunk: a prefix, lane 0 always), folded into P and Q at v4 (the
        # pass's first chunk replaces them).
        s2_pg = [Signal(signed(32), name=f"s2_pg_{lane}", reset_less=True) for lane in range(V)]
        m.d.sync += [r.eq(p[:32].as_signed()) for r, p in zip(s2_pg, m2s, strict=True)]
        m2_cnt = mpipe[1][0]
        pairs = []
        for k in range(V // 2):
            pa, pb = s2_pg[2 * k], s2_pg[2 * k + 1]
            both = m2_cnt > 2 * k + 1
            gt = Signal(name=f"pg_gt{k}")
            m.d.comb += gt.eq(pb > pa)
            hi = Signal(signed(32), name=f"s3_pg_hi{k}", reset_less=True)
            lo = Signal(signed(32), name=f"s3_pg_lo{k}", reset_less=True)
            ok = Signal(name=f"s3_pg_ok{k}", reset_less=True)
            m.d.sync += [hi.eq(Mux(gt & both, pb, pa)), lo.eq(Mux(gt | ~both, pa, pb)),
                         ok.eq(m2_cnt > 2 * k)]
            pairs.append((ok, hi, lo))

        def pg_tree(items, larger):
            """The best of the valid ``(ok, value)`` items (a prefix is valid, the first item
            always): a right group wins when it is valid and strictly better."""
            level = items
            while len(level) > 1:
                nxt = []
                for g in range(0, len(level) - 1, 2):
                    (lok, lv), (rok, rv) = level[g], level[g + 1]
                    better = (rv > lv) if larger else (rv < lv)
                    nxt.append((lok, Mux(rok & better, rv, lv)))
                if len(level) % 2:
                    nxt.append(level[-1])
                level = nxt
            return level[0][1]

        s4_pg_max = Signal(signed(32), reset_less=True)
        s4_pg_min = Signal(signed(32), reset_less=True)
        m.d.sync += [s4_pg_max.eq(pg_tree([(ok, hi) for ok, hi, _ in pairs], True)),
                     s4_pg_min.eq(pg_tree([(ok, lo) for ok, _, lo in pairs], False))]
        with m.If(v4 & is_q & (ps == _P1)):
            m.d.sync += [pg_max.eq(Mux(first | (s4_pg_max > pg_max), s4_pg_max, pg_max)),
                         pg_min.eq(Mux(first | (s4_pg_min < pg_min), s4_pg_min, pg_min))]

        # scalar-step table reads: RSQRT / RECIP on their memory's port, DYNQ on lane 0's
        rsq_addr = Signal(10)
        rcp_addr = Signal(8)
        dq_addr = Signal(8)
        m.d.comb += [
            sc_rp.addr.eq(Mux(is_op(Opcode.RMSNORM, Opcode.RMSNORMQ), rsq_addr,
                              rcp_addr + tab_off[TableId.RECIP])),
            exp_addrs[0].eq(Mux(is_op(Opcode.DYNQ, Opcode.RMSNORMQ),
                                dq_addr + tab_off[TableId.DYNQ], lane_tidx[0][:8])),
        ]
        rsq_data = rcp_data = sc_rp.data
        dq_data = exp_data[0]

        # -- reduction of a chunk ---------------------------------------------------------------
        # The pass's reduction kind, registered (an FPGA timing cut: no path from the command's
        # opcode and the pass through their decode into the compare tree and `acc`): a pass
        # changes only once the lanes are drained (`drained`), and its first chunk leaves
        # them at least 4 cycles later (RMSNORMQ's pass 2, fired in its first cycle; others
        # `_VEC_LAG`), so at v4 `red_q` is always `red`.
        red_q = Signal(_Red)
        m.d.sync += red_q.eq(red)
        rvals = []
        for lane in range(V):
            v = Signal(signed(41), name=f"rv{lane}")
            m.d.comb += v.eq(Mux((red_q == _Red.MAXABS) & (s4_q[lane] < 0), -s4_q[lane],
                                 s4_q[lane]))
            rvals.append(v)
        rsum = Signal(signed(48))
        m.d.comb += rsum.eq(sum(Mux(m4_cnt > lane, rvals[lane], 0) for lane in range(V)))
        # The chunk's largest value and its first lane, by a tree of compares (log2 V
        # levels instead of a chain of V - 1: an FPGA timing cut).  The valid lanes are a
        # prefix (lanes < m4_cnt, at least lane 0), so a group is valid when its first lane
        # is, and the right group (higher lanes) wins only when it is valid and strictly
        # larger: the first lane of the maximum, as a chain from lane 0 finds it.
        level = [(m4_cnt > lane, rvals[lane], Const(lane, range(V))) for lane in range(V)]
        while len(level) > 1:
            nxt = []
            for g in range(0, len(level) - 1, 2):
                (lv, lx, li), (rv, rx, ri) = level[g], level[g + 1]
                take = Signal(name=f"rtake{g}_{len(level)}")
                m.d.comb += take.eq(rv & (rx > lx))
                nxt.append((lv, Mux(take, rx, lx), Mux(take, ri, li)))
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        _, best, bidx = level[0]
        # one adder for acc: a chunk's sum, or RMSNorm's epsilon in Rsqrt-Sum (ss_go)
        ss_go = Signal()
        acc_sum = Signal(signed(64))
        m.d.comb += acc_sum.eq(acc + Mux(ss_go, eps, rsum))
        rbest = Signal(signed(41))
        rbidx = Signal(range(V))
        m.d.comb += [rbest.eq(best), rbidx.eq(bidx)]
        # rbest > acc (a MAX / MAXABS chunk replaces the running maximum), with each lane
        # compared to acc beside the lanes' own compares and the chunk's best lane only
        # selecting the bit: not a 41-bit compare after the lanes' (an FPGA timing cut)
        over = Signal(V)
        m.d.comb += over.eq(Cat(*(rvals[lane] > acc[:len(rbest)].as_signed()
                                  for lane in range(V))))
        r_over = Signal()
        m.d.comb += r_over.eq(over.bit_select(rbidx, 1))

        # -- write packing --------------------------------------------------------------------
        # A result is pushed into a slot: a chunk's lanes at v4 (wr, or tw: table entries),
        # a WSUM column's accumulators, or a reduction's single result (wfinal).
        wfinal = Signal()
        wcnt = Mux(wfinal, 1, Mux(op == Opcode.WSUM, cnt, Mux(ext, m6[0], m4_cnt)))
        wad = Mux(wfinal, cmd.d[:AW], Mux(op == Opcode.WSUM, ad, Mux(ext, m6[1], m4_ad)))
        final_v = Signal(64)
        m.d.comb += final_v.eq(saturate(Mux(op == Opcode.ARGMAX, accidx, acc), "sat_final"))
        lane_v = []
        for lane in range(V):
            v = Signal(64, name=f"wv{lane}")
            if lane == 0:
                m.d.comb += v.eq(Mux(wfinal, final_v, Mux(op == Opcode.WSUM, wacc[0], s4_r[0])))
            else:
                m.d.comb += v.eq(Mux(op == Opcode.WSUM, wacc[lane], s4_r[lane]))
            vq = Signal(64, name=f"wq{lane}")     # RMSNORMQ's int8 results (td is i8)
            m.d.comb += vq.eq(Mux(ext, s6_r[lane], v))
            lane_v.append(vq)
        packed = Signal(8 * 8 * V)
        pmask = Signal(8 * V)
        with m.Switch(td_k):
            for k in range(4):
                with m.Case(k):
                    es = 1 << k
                    m.d.comb += [
                        packed.eq(Cat(*(v[:8 * es] for v in lane_v))),
                        pmask.eq(Cat(*(Mux(wcnt > lane, (1 << es) - 1, 0).as_unsigned()[:es]
                                       for lane in range(V)))),
                    ]
        wbytes = wcnt << td_k
        fd, od, nd = span(wad, wbytes)
        wdat = Signal(8 * W * NWD)
        wmsk = Signal(W * NWD)
        m.d.comb += [wdat.eq(packed << (od << 3)), wmsk.eq(pmask << od)]

        # -- result slots and the write side ---------------------------------------------------
        # NS = `slots` results wait for the SRAM port (or the table write port); writes have the
        # port's priority over reads.  A writing pass (wr, tw) starts reading a chunk only
        # while fewer than NS of its chunks are between first read and last write
        # (credits), so the lanes, which never stall, always find a free slot.
        NS = self.slots
        SN = max(NWD, V)
        sl_dat = [Signal(8 * W * NWD, name=f"sl{k}_dat", reset_less=True) for k in range(NS)]
        sl_msk = [Signal(W * NWD, name=f"sl{k}_msk", reset_less=True) for k in range(NS)]
        sl_addr = [Signal(AW, name=f"sl{k}_addr", reset_less=True) for k in range(NS)]
        sl_n = [Signal(range(SN + 1), name=f"sl{k}_n") for k in range(NS)]
        s_head = Signal(range(NS))
        s_tail = Signal(range(NS))
        s_count = Signal(range(NS + 1))
        cred = Signal(range(NS + 1))
        push = Signal()
        pop = Signal()
        credit_in = Signal()
        with m.If(push):
            with m.Switch(s_tail):
                for k in range(NS):
                    with m.Case(k):
                        with m.If(tw):
                            m.d.sync += [sl_dat[k].eq(Cat(*(v[:16] for v in s4_q))),
                                         sl_addr[k].eq(m4_i), sl_n[k].eq(m4_cnt)]
                        with m.Else():
                            m.d.sync += [sl_dat[k].eq(wdat), sl_msk[k].eq(wmsk),
                                         sl_addr[k].eq(fd), sl_n[k].eq(nd)]
            m.d.sync += s_tail.eq(Mux(s_tail == NS - 1, 0, s_tail + 1))
        with m.If(pop):
            m.d.sync += s_head.eq(Mux(s_head == NS - 1, 0, s_head + 1))
        m.d.sync += [s_count.eq(s_count + push - pop),
                     cred.eq(cred + credit_in - (pop & (wr | tw)))]
        h_dat = Array(sl_dat)[s_head]
        h_msk = Array(sl_msk)[s_head]
        h_addr = Array(sl_addr)[s_head]
        h_n = Array(sl_n)[s_head]
        wq = Signal(range(SN + 1))
        w_go = (s_count != 0) & ~tw
        w_last = wq + 1 == h_n
        m.d.comb += [tw_idx.eq(h_addr + wq), tw_data.eq(h_dat.word_select(wq, 16))]
        with m.If((s_count != 0) & tw):
            m.d.comb += tw_on.eq(1)
            m.d.sync += wq.eq(wq + 1)
            with m.If(w_last):
                m.d.sync += wq.eq(0)
                m.d.comb += pop.eq(1)

        def advance_r():
            """Step the read side to the next chunk of the pass, or mark the pass read."""
            with m.If(ps == _PRO):
                # pass 1's reads follow the parameter word's at once (its read is tagged
                # `pend_pro`, so the lanes, the credits and the reduction never see it): the
                # prologue's start (sp_go) set up pass 1's registers but x's address and the
                # write flag (wrtw_q, REQM's pass 1 writes), so only those and the pass change
                m.d.sync += [ps.eq(_P1), ax.eq(cmd.a), wrtw_q.eq(op == Opcode.REQM)]
            with m.Elif(op == Opcode.WSUM):
                if WP:
                    with m.If(t + 1 + pair == nn):
                        m.d.sync += rd_done.eq(1)
                    with m.Else():
                        m.d.sync += [t.eq(t + 1 + pair), ax.eq(ax + (cmd.c << pair)),
                                     ay.eq(ay + Mux(pair, 4, 2))]
                else:
                    with m.If(t + 1 == nn):
                        m.d.sync += rd_done.eq(1)
                    with m.Else():
                        m.d.sync += [t.eq(t + 1), ax.eq(ax + cmd.c), ay.eq(ay + 2)]
            with m.Elif(i + cnt >= nn):
                m.d.sync += rd_done.eq(1)
            with m.Else():
                m.d.sync += [i.eq(i + cnt), ax.eq(ax + (cnt << xk)),
                             ay.eq(ay + (ycnt << yk)), az.eq(az + cnt),
                             ad.eq(ad + (cnt << td_k))]
                with m.If(op == Opcode.ROPE):
                    with m.If(ih + cnt == cmd.imm):
                        m.d.sync += [ih.eq(0), ay.eq(cmd.b), az.eq(cmd.b + cmd.imm)]
                    with m.Else():
                        m.d.sync += ih.eq(ih + cnt)

        # -- the SRAM port: the write side first, else the read side ---------------------------
        in_stream = Signal()
        rd_want = Signal()
        # wr | tw of the pass being read, registered when the pass starts (`sp_go`, the only
        # change of `ps`; `op` holds from Check on): the read request, which the SRAM
        # arbiter's grant depends on, starts at registers, not at the op / pass decode (an
        # FPGA timing cut; no cycle: no pass reads before its start)
        wrtw_q = Signal()
        m.d.comb += rd_want.eq(in_stream & ~rd_done & ((rq != 0) | ~wrtw_q | (cred < NS)))
        with m.If(w_go):
            m.d.comb += [
                self.bus.en.eq(1), self.bus.we.eq(1), self.bus.addr.eq(h_addr + wq),
                self.bus.wdata.eq(h_dat.word_select(wq, 8 * W)),
                self.bus.wmask.eq(h_msk.word_select(wq, W)),
            ]
            with m.If(self.bus.ready):
                m.d.sync += wq.eq(wq + 1)
                with m.If(w_last):
                    m.d.sync += wq.eq(0)
                    m.d.comb += pop.eq(1)
        with m.Elif(rd_want):
            m.d.comb += [self.bus.en.eq(1), self.bus.addr.eq(r_addr), self.bus_words.eq(r_k)]
            with m.If(self.bus.ready):
                m.d.sync += [rq.eq(rq + r_k), pend.eq(1), pend_sel.eq(r_sel), pend_j.eq(r_j),
                             pend_last.eq(r_last), pend_pro.eq(ps == _PRO)]
                if R > 1:
                    m.d.sync += pend_k.eq(r_k)
                m.d.comb += credit_in.eq((rq == 0) & wrtw_q)
                with m.If(r_sel == 1):
                    m.d.sync += [pc_valid.eq(1), pc_addr.eq(fy)]
                    if WP:
                        m.d.sync += pc_n.eq(r_k)
                with m.If(r_last):
                    m.d.sync += [rq.eq(0), pm[0].eq(ox), pm[1].eq(oy), pm[2].eq(oz),
                                 pm[3].eq(cnt), pm[4].eq(i), pm[5].eq(ad)]
                    if WP:
                        # p[t] at oy in the window's word fy - pc_addr (0 when p is read now)
                        pb = max(1, (PW - 1).bit_length())
                        m.d.sync += [pm[6].eq(pair),
                                     pm[7].eq(Mux(p_cached, Cat(oy, dpc[:pb]), oy))]
                    advance_r()

        # -- checks --------------------------------------------------------------------------
        n = cmd.n
        tab_entries = Signal(16)
        with m.Switch(cmd.c):
            for tid in TableId:
                with m.Case(tid.value):
                    m.d.comb += tab_entries.eq(TABLE_ENTRIES[tid])
        # (n - 1) c of wsum's row check, which matters only when its A check passed, so
        # with n < 2**(AW - 1)
        prod = Signal(AW - 1 + C_BITS)
        modr = Signal(IMM_BITS + 1)
        modbit = Signal(range(32))

        # One range and alignment check per operand slot (a, b, c, d), its address, size and
        # alignment chosen by the opcode, rather than one adder and comparator per operand of
        # every opcode (the checks of the opcodes are exclusive).  A size is a count (n,
        # n + W, imm, a table's entries, 1) shifted left by 0 .. 3 (the element size's log2).
        slots = {}
        for key, aw in (("a", 32), ("b", 32), ("c", C_BITS), ("d", 32)):
            s_addr = Signal(aw, name=f"chk_{key}_addr")
            c_count = Signal(33, name=f"chk_{key}_count")
            s_shift = Signal(2, name=f"chk_{key}_shift")
            s_align = Signal(range(max(wb, 3) + 1), name=f"chk_{key}_align")
            amask = (Const(1, 1) << s_align) - 1
            slots[key] = (s_addr, c_count, s_shift, s_align, (s_addr & amask) != 0,
                          _sum_over((s_addr, c_count << s_shift), SRAM))

        def loaded_bit(tid):
            return loaded[tid.value]

        A, B, D = cmd.a, cmd.b, cmd.d
        chk = Signal(ErrorCode)
        dchk = Signal(ErrorCode)

        def chain(items, target):
            """Assign to ``target`` the code of the first true condition of ``items``."""
            first_item = True
            for cond, code in items:
                ctx = m.If(cond) if first_item else m.Elif(cond)
                with ctx:
                    m.d.comb += target.eq(code)
                first_item = False

        def opnd(key, addr, count, shift, align_k=None):
            """Check ``count << shift`` bytes at ``addr`` (alignment ``2**align_k``, by default
            ``2**shift``) in slot ``key``."""
            s_addr, c_count, s_shift, s_align, bad_al, bad_rng = slots[key]
            m.d.comb += [s_addr.eq(addr), c_count.eq(count), s_shift.eq(shift),
                         s_align.eq(shift if align_k is None else align_k)]
            return [(bad_al, ErrorCode.ALIGN), (bad_rng, ErrorCode.SRAM_RANGE)]

        m.d.comb += [chk.eq(ErrorCode.NONE), dchk.eq(ErrorCode.NONE)]
        shape0 = [(n == 0, ErrorCode.SHAPE)]
        with m.Switch(op):
            with m.Case(Opcode.VADD, Opcode.VSUB, Opcode.VMUL):
                chain(shape0 + opnd("a", A, n, ts_k) + opnd("b", B, n, ts_k)
                      + opnd("d", D, n, td_k), chk)
            with m.Case(Opcode.REQI):
                chain(shape0 + opnd("a", A, n, ts_k) + opnd("d", D, n, td_k), chk)
            with m.Case(Opcode.REQM):
                chain(shape0 + opnd("b", B, 1, 2) + opnd("a", A, n, ts_k)
                      + opnd("d", D, n, td_k), chk)
            with m.Case(Opcode.RSUM, Opcode.RSUMSQ, Opcode.RMAX, Opcode.RMAXABS, Opcode.ARGMAX):
                chain(shape0 + opnd("a", A, n, ts_k)
                      + opnd("d", D, 1, td_k), chk)
            with m.Case(Opcode.RMSNORM):
                chain(shape0 + opnd("a", A, n, 1) + opnd("b", B, n, 1)
                      + opnd("c", cmd.c, 1, 3)
                      + [(~loaded_bit(TableId.RSQRT), ErrorCode.TABLE),
                         (_gt_pow2(n, 16), ErrorCode.ARITH)], chk)
                chain(opnd("d", D, n, td_k), dchk)
            with m.Case(Opcode.RMSNORMQ):
                # RMSNorm's checks, then (after its pass 1 and scalar step, as the ISA
                # simulator finds them) the record's and the dynq table's
                chain(shape0 + opnd("a", A, n, 1) + opnd("b", B, n, 1)
                      + opnd("c", cmd.c, 1, 3)
                      + [(~loaded_bit(TableId.RSQRT), ErrorCode.TABLE),
                         (_gt_pow2(n, 16), ErrorCode.ARITH)], chk)
                chain(opnd("d", D, n + W, 0, wb)
                      + [(~loaded_bit(TableId.DYNQ), ErrorCode.TABLE)], dchk)
            with m.Case(Opcode.DYNQ):
                chain(shape0 + opnd("d", D, n + W, 0, wb) + opnd("a", A, n, ts_k)
                      + [(~loaded_bit(TableId.DYNQ), ErrorCode.TABLE)], chk)
            with m.Case(Opcode.SOFTMAX):
                chain(shape0 + [(_gt_pow2(n, 15), ErrorCode.SHAPE)] + opnd("a", A, n, 2)
                      + [(~loaded_bit(TableId.EXP2), ErrorCode.TABLE),
                         (~loaded_bit(TableId.RECIP), ErrorCode.TABLE)]
                      + opnd("d", D, n, 1), chk)
            with m.Case(Opcode.ROPE):
                chain(shape0 + [(modr != 0, ErrorCode.SHAPE)] + opnd("a", A, n, 1)
                      + opnd("b", B, cmd.imm, 1) + opnd("d", D, n, td_k), chk)
            with m.Case(Opcode.SILU):
                chain(shape0 + opnd("a", A, n, 1)
                      + [(~loaded_bit(TableId.SIGMOID), ErrorCode.TABLE),
                         (cmd.imm < 6, ErrorCode.ARITH)]
                      + opnd("d", D, n, 1), chk)
            with m.Case(Opcode.WSUM):
                chain(shape0 + opnd("a", A, n, 1)
                      + [(_sum_over((B, prod, cmd.imm), SRAM), ErrorCode.SRAM_RANGE)]
                      + opnd("d", D, cmd.imm, 2), chk)
            with m.Case(Opcode.TABLE):
                chain([(cmd.c > max(t.value for t in TableId), ErrorCode.ILLEGAL)]
                      + opnd("a", A, tab_entries, 1), chk)
            with m.Default():
                m.d.comb += chk.eq(ErrorCode.ILLEGAL)

        # -- sequencing ----------------------------------------------------------------------
        # A pass starts (start_pass) in several states, a WSUM column chunk in one: they
        # raise a strobe, and the registers they set are assigned once, after the FSM.
        sp_go = Signal()            # start pass sp_p this cycle
        ends_go = Signal()          # ... RMSNORMQ's pass 2: fire the ends, read nothing
        sp_p = Signal(2)
        col_go = Signal()           # WSUM: start the next column chunk this cycle

        def start_pass(p):
            """Start pass ``p``: set up its addresses and accumulators (after the FSM)."""
            m.d.comb += [sp_go.eq(1), sp_p.eq(p)]

        def finish(code=None):
            if code is not None:
                m.d.sync += err.eq(code)
            m.next = "Done"

        def end_of_pass():
            with m.Switch(op):
                with m.Case(Opcode.RSUM, Opcode.RSUMSQ, Opcode.RMAX, Opcode.RMAXABS,
                            Opcode.ARGMAX):
                    m.next = "Final"
                with m.Case(Opcode.RMSNORM):
                    with m.If(ps == _P1):
                        m.next = "Rsqrt-Sum"
                    with m.Else():
                        finish()
                with m.Case(Opcode.DYNQ):
                    with m.If(ps == _P1):
                        m.next = "Dynq-Index"
                    with m.Else():
                        finish()
                with m.Case(Opcode.RMSNORMQ):
                    with m.If(ps == _P1):
                        m.next = "Rsqrt-Sum"
                    with m.Elif(ps == _P2):
                        m.next = "Dynq-Index"
                    with m.Else():
                        finish()
                with m.Case(Opcode.SOFTMAX):
                    with m.If(ps == _P1):
                        start_pass(_P2)
                        m.next = "Stream"
                    with m.Elif(ps == _P2):
                        m.next = "Recip-Index"
                    with m.Else():
                        finish()
                with m.Case(Opcode.TABLE):
                    m.d.sync += loaded.eq(loaded | (Const(1, len(TableId)) << cmd.c[:3]))
                    finish()
                with m.Default():
                    finish()

        # One leading-one detector and normaliser for the scalar steps (the opcodes use it in
        # turn), all on acc: RMSNorm ss = sum + eps (kept in acc), k = lod(ss) // 2,
        # r = RSQRT[top 10 bits of ss from bit 2k, - 256]; dynq a = max|v| (below 2**33: the
        # lanes' PASS values have at most 33 bits), b = lod(a), DQ[the 8 bits after the
        # leading one]; softmax Z = sum e (below 2**31: n <= 2**15 values below 2**16),
        # bz = lod(Z), RECIP[the 8 bits after it]; RoPE: the leading one of n (the
        # remainder's first bit, Check-Product).
        nv = Signal(64)
        m.d.comb += nv.eq(Mux(op == Opcode.ROPE, cmd.n, acc.as_unsigned()))
        nb = _lod(m, nv, "norm_lod")
        nk = Signal(6)              # the bit brought to bit 8
        m.d.comb += nk.eq(Mux((op == Opcode.RMSNORM) | (is_q & (ps == _P1)), (nb >> 1) << 1,
                              nb))
        ni = Signal(10)             # 0 (nv = 0), else in [256, 1024) (in [256, 512) but RMSNorm)
        # ni = (nv << 8) >> nk, 10 bits of it: a right shifter, largest step first, each
        # step only as wide as what is left needs
        v = Cat(Const(0, 8), nv)
        for b in reversed(range(len(nk))):
            v = Mux(nk[b], v >> (1 << b), v)[:len(ni) + (1 << b) - 1]
        m.d.comb += ni.eq(v)
        n_lod = nb
        m.d.comb += [
            rsq_addr.eq(Mux(ni[8:] == 0, 0, ni - 256)),
            dq_addr.eq(ni[:8]),
            rcp_addr.eq(ni[:8]),
        ]
        m.d.comb += self.busy.eq(1)
        with m.FSM():
            with m.State("Idle"):
                m.d.comb += [self.i_cmd.ready.eq(1), self.busy.eq(0)]
                # The command register takes the payload in every Idle cycle, so it holds
                # the accepted command's from the handshake on (an FPGA timing cut: its
                # enable from the state register, not from the controller's dispatch)
                pl = self.i_cmd.payload
                pq = pl.op == Opcode.RMSNORMQ
                m.d.sync += [cmd.eq(pl), is_q.eq(pq), ltd.eq(Mux(pq, Dtype.I16, pl.td))]
                if WP:
                    m.d.sync += wpair_ok.eq((pl.op == Opcode.WSUM) & (pl.c == W))
                with m.If(self.i_cmd.valid):
                    m.d.sync += [cyc.eq(1), busflag.eq(0), err.eq(ErrorCode.NONE)]
                    m.next = "Check-Product"

            with m.State("Check-Product"):
                m.d.sync += [prod.eq((n[:AW - 1] - 1) * cmd.c), modr.eq(0), modbit.eq(n_lod),
                             nn.eq(Mux(op == Opcode.TABLE, tab_entries, n))]
                with m.If((op == Opcode.ROPE) & (n != 0)):
                    m.next = "Check-Modulo"
                with m.Else():
                    m.next = "Check"

            with m.State("Check-Modulo"):
                # n mod head size, one bit of n per cycle from its leading one (restoring
                # remainder, no divider).
                r2 = Cat(n.bit_select(modbit, 1), modr)
                m.d.sync += [modr.eq(Mux(r2 >= cmd.imm, r2 - cmd.imm, r2)),
                             modbit.eq(modbit - 1)]
                with m.If(modbit == 0):
                    m.next = "Check"

            with m.State("Check"):
                m.d.sync += derr.eq(dchk)
                with m.If(chk != ErrorCode.NONE):
                    finish(chk)
                with m.Else():
                    m.d.sync += [mult.eq(cmd.imm), shamt.eq(0), sj.eq(0)]
                    with m.Switch(op):
                        with m.Case(Opcode.REQI):
                            m.d.sync += shamt.eq(Mux(cmd.c > _SH_MAX, _SH_MAX, cmd.c))
                        with m.Case(Opcode.ROPE):
                            m.d.sync += shamt.eq(Mux(cmd.c > _SH_MAX, _SH_MAX, cmd.c))
                        with m.Case(Opcode.SILU):
                            m.d.sync += [shamt.eq(15),
                                         sj.eq(Mux(cmd.imm - 6 > 16, 16, cmd.imm - 6))]
                    with m.If(is_op(Opcode.REQM, Opcode.RMSNORM, Opcode.RMSNORMQ)):
                        start_pass(_PRO)
                    with m.Else():
                        start_pass(_P1)
                    m.next = "Stream"

            with m.State("Stream"):
                m.d.comb += in_stream.eq(1)
                drained = rd_done & ~in_flight & ~fire & ~Cat(*vpipe, v5, v6).any()
                with m.If(drained):
                    with m.If(op == Opcode.WSUM):
                        # a column chunk is summed: queue its write, start the next one
                        with m.If(s_count < NS):
                            m.d.comb += push.eq(1)
                            with m.If(j0 + cnt >= cmd.imm):
                                m.next = "Flush"
                            with m.Else():
                                m.d.comb += col_go.eq(1)
                    with m.Elif(s_count == 0):
                        end_of_pass()

            with m.State("Final"):
                m.d.comb += wfinal.eq(1)
                with m.If(s_count < NS):
                    m.d.comb += push.eq(1)
                    m.next = "Flush"

            with m.State("Flush"):
                with m.If(s_count == 0):
                    finish()

            with m.State("Rsqrt-Sum"):
                m.d.comb += ss_go.eq(1)
                m.d.sync += acc.eq(acc_sum)       # ss = acc + eps
                m.next = "Rsqrt-Index"
            with m.State("Rsqrt-Index"):
                m.d.sync += kk.eq(nb >> 1)
                m.next = "Rsqrt-Scale"
            with m.State("Rsqrt-Scale"):
                stot = Signal(signed(19))
                m.d.comb += stot.eq(15 + kk + s_imm)
                with m.If(acc < 0):
                    finish(ErrorCode.ARITH)
                with m.Elif(stot < 0):
                    finish(ErrorCode.ARITH)
                with m.Elif(derr != ErrorCode.NONE):
                    finish(derr)
                with m.Else():
                    m.d.sync += [mult.eq(Mux(acc == 0, 0, rsq_data)),
                                 shamt.eq(Mux(stot > _SH_MAX, _SH_MAX, stot))]
                    start_pass(_P2)
                    m.d.comb += ends_go.eq(is_q)
                    m.next = "Stream"

            with m.State("Dynq-Index"):
                m.d.sync += [bexp.eq(nb),
                             mu.eq(Mux(acc == 0, 0, 512 + (ni[:8] << 1) + 1))]
                m.next = "Dynq-Scale"
            with m.State("Dynq-Scale"):
                with m.If(is_q):        # (RMSNorm's multiplier and shift stay for pass 3)
                    m.d.sync += [mult2.eq(dq_data), shamt2.eq(9 + bexp)]
                with m.Else():
                    m.d.sync += [mult.eq(dq_data), shamt.eq(9 + bexp)]
                m.next = "Dynq-Header"
            with m.State("Dynq-Header"):
                m.d.comb += [
                    self.bus.en.eq(1), self.bus.we.eq(1), self.bus.addr.eq(cmd.d[wb:]),
                    self.bus.wdata.eq(mu | (bexp << 16)),
                    self.bus.wmask.eq((1 << W) - 1),
                ]
                with m.If(self.bus.ready):
                    start_pass(Mux(is_q, _P3, _P2))
                    m.next = "Stream"

            with m.State("Recip-Index"):
                m.d.sync += bexp.eq(nb)
                m.next = "Recip-Scale"
            with m.State("Recip-Scale"):
                m.d.sync += [mult.eq(rcp_data), shamt.eq(Mux(bexp > _SH_MAX, _SH_MAX, bexp))]
                start_pass(_P3)
                m.next = "Stream"

            with m.State("Done"):
                m.d.comb += [self.o_done.valid.eq(1), self.o_done.payload.cycles.eq(cyc)]
                with m.If(busflag):
                    m.d.comb += self.o_done.payload.error.eq(ErrorCode.SRAM_RANGE)
                with m.Else():
                    m.d.comb += self.o_done.payload.error.eq(err)
                with m.If(self.o_done.ready):
                    m.next = "Idle"

        # -- the start of a pass or of a WSUM column chunk -------------------------------------
        with m.If(sp_go):
            m.d.sync += wrtw_q.eq(pass_writes(sp_p) | tw)   # (tw: the op's, any pass)
            m.d.sync += [ps.eq(sp_p), i.eq(0), ih.eq(0), j0.eq(0), acc.eq(0), accidx.eq(0),
                         first.eq(1), ay.eq(cmd.b), az.eq(cmd.b + cmd.imm), ad.eq(cmd.d)]
            if WP:      # WSUM: p's last word
                m.d.sync += plast.eq((cmd.a[:AW + 1] + (cmd.n[:AW] << 1) - 1) >> wb)
            with m.Switch(sp_p):
                with m.Case(_PRO):
                    m.d.sync += ax.eq(Mux(op == Opcode.REQM, cmd.b, cmd.c))
                with m.Case(_P3):
                    m.d.sync += ax.eq(Mux(is_q, cmd.a, cmd.d))
                    with m.If(is_q):
                        m.d.sync += ad.eq(cmd.d + W)
                with m.Default():
                    m.d.sync += ax.eq(Mux(op == Opcode.WSUM, cmd.b, cmd.a))
                    with m.If(op == Opcode.WSUM):
                        m.d.sync += ay.eq(cmd.a)
                    with m.If(op == Opcode.DYNQ):
                        m.d.sync += ad.eq(cmd.d + W)
        with m.If(pro_fire):
            # the prologue's parameter word: REQM's multiplier and shift (used from pass 1's
            # first chunk's stage 1, which fires a cycle later at the earliest), or RMSNorm's
            # epsilon (used after pass 1, in Rsqrt-Sum)
            with m.If(op == Opcode.REQM):
                s_raw = sh_x[16:32]
                m.d.sync += [mult.eq(sh_x[:16]), shamt.eq(Mux(s_raw > _SH_MAX, _SH_MAX, s_raw))]
            with m.Else():
                m.d.sync += eps.eq(sh_x[:64])
        with m.If(col_go):
            m.d.sync += [j0.eq(j0 + V), ax.eq(cmd.b + j0 + V), ay.eq(cmd.a),
                         ad.eq(ad + (V << 2))]
        with m.If(sp_go | col_go):
            m.d.sync += [t.eq(0), rd_done.eq(0), pc_valid.eq(0)]
            m.d.sync += [w.eq(0) for w in wacc]
        with m.If(ends_go):
            # RMSNORMQ's pass 2 is one chunk of two elements, P and Q (`pg_max`, `pg_min`),
            # which fires into the lanes in the pass's first cycle without a read
            m.d.sync += [rd_done.eq(1), fire.eq(1), fm[3].eq(2)]

        # -- the sink: a chunk leaves the lanes ---------------------------------------------
        with m.If(v4):
            with m.Switch(red_q):
                with m.Case(_Red.SUM):
                    m.d.sync += acc.eq(acc_sum)
                with m.Case(_Red.MAX, _Red.MAXABS):
                    # (acc holds a 41-bit rbest here, or first is set)
                    with m.If(first | r_over):
                        # (smax: softmax's maximum, used by its pass 2)
                        m.d.sync += [acc.eq(rbest), accidx.eq(m4_i + rbidx), smax.eq(rbest)]
            m.d.sync += first.eq(0)
            with m.If(op == Opcode.WSUM):
                m.d.sync += [w.eq(w + s4_q[lane][:32]) for lane, w in enumerate(wacc)]
            with m.If((wr | tw) & ~ext):
                m.d.comb += push.eq(1)
        with m.If(v6 & wr):
            m.d.comb += push.eq(1)

        with m.If(self.busy & ~self.o_done.valid):
            m.d.sync += cyc.eq(cyc + 1)
        return m
