"""The tile instruction set: word layout, opcodes, operand rules, encoder, decoder, cost model.

Everything a tile program is made of is defined here once: the 128-bit instruction word
(`Instruction`, an ``amaranth.lib.data.Struct``), the opcodes (`Opcode`, an
``amaranth.lib.enum.Enum`` with an explicit 6-bit shape), the element types (`Dtype`), the
vector-unit tables (`TableId`), the error codes a tile reports (`ErrorCode`), which fields
each opcode uses (`SPECS`), and the estimated cost of each instruction (`instr_cycles`).
The gateware controller imports the same layout and enums; the assembler
(`chipotle.isa.asm`) and the ISA-level simulator (`chipotle.isasim`) are built on them.
The semantics are specified in ``docs/isa.md``.
"""

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from amaranth.hdl import unsigned
from amaranth.lib import data, enum

from ..golden import numerics as nx

__all__ = [
    "INSTR_BITS", "INSTR_BYTES", "N_REGS", "OFF_BITS", "LEN_BITS", "C_BITS", "IMM_BITS",
    "MAX_MATMUL_M",
    "Opcode", "Dtype", "TableId", "ErrorCode", "Operand", "Length", "Mode", "Instruction",
    "TABLE_ENTRIES", "DTYPE_INFO", "SRC_DTYPES", "ALL_DTYPES",
    "Addr", "Len", "Instr", "OpSpec", "SPECS", "IllegalInstruction",
    "encode", "decode", "rect_encode", "rect_decode", "signed_imm",
    "CostModel", "IsaConfig", "instr_cycles", "issue_cycles", "go_cycles", "is_decode_op",
    "DECODE_OPS",
    "send_flits", "vector_cycles", "matrix_cycles",
    "SCALAR_OPS", "MATRIX_OPS", "vector_footprint", "matrix_footprint", "ranges_overlap",
    "scoreboard_limit", "BACKGROUND_UNITS", "background_unit", "send_footprint",
    "mem_footprint", "hazard",
    "kvapp_footprint", "table_footprint", "copy_steps",
]

#: Width of an instruction word in bits (and bytes).
INSTR_BITS = 128
INSTR_BYTES = INSTR_BITS // 8
#: Scalar registers ``r0`` .. ``r15``; ``r0`` reads 0 and ignores writes.
N_REGS = 16
#: Width of the immediate offset of an address operand (byte offsets up to 128 KiB).
OFF_BITS = 17
#: Width of the immediate part of a length operand.
LEN_BITS = 16
#: Width of the ``c`` immediate (a static address, a shift, a counter, a loop end, ...).
C_BITS = 17
#: Width of the ``imm`` immediate.
IMM_BITS = 16
#: Largest number of activation rows ``M`` a matrix instruction can name (3-bit ``M - 1``).
MAX_MATMUL_M = 8


class Opcode(enum.Enum, shape=unsigned(6)):
    """Operation of an instruction (field ``op``, 6 bits).

    ``op[4:6]`` is the unit: 0 control, scalar and data movement; 1 vector element-wise and
    reductions; 2 fused (multi-pass) vector operations; 3 matrix unit.  Code 0 is reserved
    (an all-zero word is an illegal instruction, so a runaway PC stops); every code not
    listed is reserved.  The operands of each are in `SPECS` and ``docs/isa.md``.
    """

    NOP = 1
    HALT = 2
    DONE = 3
    LI = 4
    ADD = 5
    SUB = 6
    MUL = 7
    LD = 8
    ST = 9
    LOOP = 10
    WAIT = 11
    SEND = 12
    TABLE = 13
    COPY = 14
    KVAPP = 15

    VADD = 16
    VSUB = 17
    VMUL = 18
    REQI = 19
    REQM = 20
    RSUM = 24
    RSUMSQ = 25
    RMAX = 26
    RMAXABS = 27
    ARGMAX = 28

    RMSNORM = 32
    DYNQ = 33
    SOFTMAX = 34
    ROPE = 35
    SILU = 36
    WSUM = 37
    RMSNORMQ = 38

    MATMUL = 48
    MATQK = 49
    MATRAW = 50
    KVQK = 51


class Dtype(enum.Enum, shape=unsigned(3)):
    """Element type of a vector operand (fields ``td`` and ``ts``, 3 bits; 7 is reserved).

    Elements are little-endian and naturally aligned in SRAM (address a multiple of the
    element size).
    """

    I8 = 0
    I16 = 1
    I32 = 2
    I64 = 3
    U8 = 4
    U16 = 5
    U32 = 6


class _DtypeInfo(NamedTuple):
    size: int          # bytes
    np: np.dtype       # little-endian numpy dtype
    bits: int
    unsigned: bool


DTYPE_INFO = {
    Dtype.I8: _DtypeInfo(1, np.dtype("<i1"), 8, False),
    Dtype.I16: _DtypeInfo(2, np.dtype("<i2"), 16, False),
    Dtype.I32: _DtypeInfo(4, np.dtype("<i4"), 32, False),
    Dtype.I64: _DtypeInfo(8, np.dtype("<i8"), 64, False),
    Dtype.U8: _DtypeInfo(1, np.dtype("<u1"), 8, True),
    Dtype.U16: _DtypeInfo(2, np.dtype("<u2"), 16, True),
    Dtype.U32: _DtypeInfo(4, np.dtype("<u4"), 32, True),
}
#: Types an element-wise operation or a reduction may read.
SRC_DTYPES = frozenset({Dtype.I8, Dtype.I16, Dtype.I32, Dtype.U8, Dtype.U16})
#: Types a result may be saturated to.
ALL_DTYPES = frozenset(Dtype)


class TableId(enum.Enum, shape=unsigned(3)):
    """The vector unit's lookup tables, loaded from SRAM with ``TABLE`` (field ``c``).

    Entries are uint16 in SRAM; the sizes are fixed by the numerics (`TABLE_ENTRIES`).
    """

    RSQRT = 0
    EXP2 = 1
    RECIP = 2
    DYNQ = 3
    SIGMOID = 4


#: Entries of each table (``docs/numerics.md`` section 3).
TABLE_ENTRIES = {
    TableId.RSQRT: 3 << (nx.RSQRT_INDEX_BITS - 2),
    TableId.EXP2: 1 << nx.EXP2_FRAC_BITS,
    TableId.RECIP: 1 << nx.RECIP_INDEX_BITS,
    TableId.DYNQ: 1 << nx.DQ_INDEX_BITS,
    TableId.SIGMOID: 1 << (nx.SIGMOID_RANGE_BITS + nx.SIGMOID_STEP_BITS + 1),
}


class ErrorCode(enum.Enum, shape=unsigned(4)):
    """Why a tile stopped with its error flag set (the first error is kept).

    Members
    -------
    NONE
        No error.
    ILLEGAL
        The word at PC is not a legal instruction (reserved opcode or type, a reserved field
        not zero, a field value out of its range).
    IMEM_RANGE
        PC, or a loop end, left the instruction memory.
    SRAM_RANGE
        An operand (or a SEND destination range) reaches past the end of the SRAM.
    ALIGN
        An operand is not aligned (elements to their size, matrix rows and records to W,
        SEND ranges to W).
    SHAPE
        A length or a matrix size is out of range for this tile (zero length, M above the
        matrix unit's rows, K above its ``k_max``, a vector length not a multiple of the
        RoPE head size, ...).
    TABLE
        A vector operation needs a table that was never loaded.
    LOOP
        Loop stack overflow, an empty loop body, or an inner loop ending after its outer
        loop.
    ROUTE
        A SEND rectangle is empty or leaves the mesh.
    ARITH
        A requantisation shift went negative (a dynamic exponent larger than the static
        shift) or an operand exceeded the rounding rule's range.
    COUNTER
        A counter number is not below the tile's number of counters.
    KV_RANGE
        A ``KVAPP`` or ``KVQK`` names a (layer, KV head) outside the tile's KV layout, or a
        position not below its capacity (0 when the host has not set a layout that fits the
        SRAM); a ``KVQK`` of no position (``n = 0``).
    """

    NONE = 0
    ILLEGAL = 1
    IMEM_RANGE = 2
    SRAM_RANGE = 3
    ALIGN = 4
    SHAPE = 5
    TABLE = 6
    LOOP = 7
    ROUTE = 8
    ARITH = 9
    COUNTER = 10
    KV_RANGE = 11


# -- the instruction word -----------------------------------------------------------------------

class Operand(data.Struct):
    """An address operand: the byte address ``r[reg] + off`` (modulo ``2**32``).

    Members
    -------
    off : ``unsigned(17)``
        Immediate byte offset.
    reg : ``unsigned(4)``
        Base register (``r0`` reads 0: the address is the immediate).
    """

    off: unsigned(OFF_BITS)
    reg: unsigned(4)


class Length(data.Struct):
    """A length operand: ``r[reg] + imm`` elements (or bytes, or iterations).

    Members
    -------
    imm : ``unsigned(16)``
    reg : ``unsigned(4)``
    """

    imm: unsigned(LEN_BITS)
    reg: unsigned(4)


class Mode(data.Union):
    """The 3-bit ``ts`` field: a source type, or the row count of a matrix instruction.

    Members
    -------
    dtype : `Dtype`
        Element type of the source operands (vector instructions).
    m1 : ``unsigned(3)``
        ``M - 1``, activation rows of a matrix instruction (1 .. 8).
    """

    dtype: Dtype
    m1: unsigned(3)


class Instruction(data.Struct):
    """A tile instruction word (128 bits), least significant field first.

    Field meanings depend on the opcode (`SPECS`, ``docs/isa.md``); fields an opcode does
    not use are reserved and must be zero.

    Members
    -------
    op : `Opcode`
        Bits 0-5.
    td : `Dtype`
        Bits 6-8: destination element type (0 when unused).
    ts : `Mode`
        Bits 9-11: source element type, or ``M - 1`` for matrix instructions.
    d, a, b : `Operand`
        Bits 12-32, 33-53, 54-74: destination and two source addresses (or scalar register
        numbers in ``d.reg`` / ``a``, ``b`` values for scalar instructions).
    n : `Length`
        Bits 75-94: element count, byte count, iteration count or counter target.
    c : ``unsigned(17)``
        Bits 95-111: static immediate (table or parameter address, shift, counter, loop end).
    imm : ``unsigned(16)``
        Bits 112-127: immediate (K, a multiplier, a head size, a rectangle, a done code).
    """

    op: Opcode
    td: Dtype
    ts: Mode
    d: Operand
    a: Operand
    b: Operand
    n: Length
    c: unsigned(C_BITS)
    imm: unsigned(IMM_BITS)


assert Instruction.as_shape().size == INSTR_BITS


def _leaf_fields(layout, prefix="", base=0):
    """Yield ``(dotted name, bit offset, width)`` of every leaf field of a struct layout.

    A union (`Mode`) is one leaf: its members overlap at its offset.
    """
    for name, fld in layout:
        shape = fld.shape
        if isinstance(shape, type) and issubclass(shape, data.Struct):
            yield from _leaf_fields(data.Layout.cast(shape), f"{prefix}{name}.",
                                    base + fld.offset)
        else:
            yield f"{prefix}{name}", base + fld.offset, fld.width


# `encode` and `decode` pack and unpack the word with these (read from `Instruction` once:
# `Instruction.const` / `from_bits` cost about 1 ms per word, which made assembling a 4 x 4
# chip's programs take seconds).
_LEAVES = list(_leaf_fields(data.Layout.cast(Instruction)))
_FIELD_OFFSETS = {n: o for n, o, _ in _LEAVES}
_FIELD_MASKS = {n: (1 << w) - 1 for n, _, w in _LEAVES}


# -- Python view --------------------------------------------------------------------------------

class Addr(NamedTuple):
    """Python value of an `Operand`: ``r[reg] + off``."""

    reg: int = 0
    off: int = 0


class Len(NamedTuple):
    """Python value of a `Length`: ``r[reg] + imm``."""

    reg: int = 0
    imm: int = 0


class IllegalInstruction(ValueError):
    """A word or an `Instr` is not a legal instruction (the message says why)."""


@dataclass(frozen=True)
class Instr:
    """One instruction with its raw fields (see `Instruction`).

    Attributes
    ----------
    op : Opcode
    td : Dtype
        Destination type (``Dtype.I8``, code 0, when unused).
    ts : int
        Raw 3-bit ``ts``: a `Dtype` code, or ``M - 1``.
    d, a, b : Addr
    n : Len
    c, imm : int
    """

    op: Opcode
    td: Dtype = Dtype.I8
    ts: int = 0
    d: Addr = Addr()
    a: Addr = Addr()
    b: Addr = Addr()
    n: Len = Len()
    c: int = 0
    imm: int = 0

    @property
    def spec(self) -> "OpSpec":
        """The opcode's `OpSpec`."""
        return SPECS[self.op]

    @property
    def src(self) -> Dtype:
        """``ts`` read as the source `Dtype`."""
        return Dtype(self.ts)

    @property
    def m(self) -> int:
        """``ts`` read as the row count ``M`` of a matrix instruction (``ts + 1``)."""
        return self.ts + 1


@dataclass(frozen=True)
class OpSpec:
    """How an opcode uses the instruction fields.

    Attributes
    ----------
    mnemonic : str
        Lower-case assembler name.
    operands : tuple of str
        Assembler operands in order, each naming a kind: ``rd`` (register in ``d.reg``),
        ``D`` / ``A`` / ``B`` (address operands), ``N`` (length), ``C`` (``c`` immediate),
        ``TGT`` (loop end, ``c``), ``CNT`` (counter, ``c``), ``TAB`` (`TableId`, ``c``),
        ``I`` (``imm``), ``SI`` (signed ``imm``, two's complement), ``V32`` (32-bit value:
        ``c[0:16]`` high, ``imm`` low), ``RECT`` (destination rectangle in ``imm``), ``M``
        (rows, ``ts = M - 1``).
    td : frozenset of Dtype or None
        Legal destination types (None: ``td`` unused, must be 0).
    ts : frozenset of Dtype, "m" or None
        Legal source types, ``"m"`` for a row count, None when unused.
    """

    mnemonic: str
    operands: tuple
    td: frozenset | None = None
    ts: frozenset | str | None = None

    @property
    def fields(self) -> frozenset:
        """Names of the fields this opcode uses (``d.reg``, ``d.off``, ..., ``c``, ``imm``)."""
        used = set()
        for kind in self.operands:
            used |= _KIND_FIELDS[kind]
        if self.td is not None:
            used.add("td")
        if self.ts is not None:
            used.add("ts")
        return frozenset(used)


_KIND_FIELDS = {
    "rd": {"d.reg"},
    "D": {"d.reg", "d.off"}, "A": {"a.reg", "a.off"}, "B": {"b.reg", "b.off"},
    "N": {"n.reg", "n.imm"},
    "C": {"c"}, "TGT": {"c"}, "CNT": {"c"}, "TAB": {"c"},
    "I": {"imm"}, "SI": {"imm"}, "V32": {"imm", "c"}, "RECT": {"imm"},
    "M": set(),   # ts, through OpSpec.ts == "m"
}

_I8_16_32 = frozenset({Dtype.I8, Dtype.I16, Dtype.I32})


def _s(mnemonic, operands="", td=None, ts=None):
    return OpSpec(mnemonic, tuple(operands.split()) if operands else (), td, ts)


#: How every opcode uses the fields (the assembler's operand order too).
SPECS: dict[Opcode, OpSpec] = {
    Opcode.NOP: _s("nop"),
    Opcode.HALT: _s("halt"),
    Opcode.DONE: _s("done", "I"),
    Opcode.LI: _s("li", "rd V32"),
    Opcode.ADD: _s("add", "rd A B"),
    Opcode.SUB: _s("sub", "rd A B"),
    Opcode.MUL: _s("mul", "rd A I"),
    Opcode.LD: _s("ld", "rd A"),
    Opcode.ST: _s("st", "D A"),
    Opcode.LOOP: _s("loop", "N TGT"),
    Opcode.WAIT: _s("wait", "CNT N"),
    Opcode.SEND: _s("send", "D A N RECT CNT"),
    Opcode.TABLE: _s("table", "TAB A"),
    Opcode.COPY: _s("copy", "D A N"),
    Opcode.KVAPP: _s("kvapp", "D A B N"),
    Opcode.VADD: _s("vadd", "D A B N", ALL_DTYPES, SRC_DTYPES),
    Opcode.VSUB: _s("vsub", "D A B N", ALL_DTYPES, SRC_DTYPES),
    Opcode.VMUL: _s("vmul", "D A B N", ALL_DTYPES, SRC_DTYPES),
    Opcode.REQI: _s("reqi", "D A N I C", ALL_DTYPES - {Dtype.I64}, SRC_DTYPES),
    Opcode.REQM: _s("reqm", "D A B N", ALL_DTYPES - {Dtype.I64}, SRC_DTYPES),
    Opcode.RSUM: _s("rsum", "D A N", ALL_DTYPES, SRC_DTYPES),
    Opcode.RSUMSQ: _s("rsumsq", "D A N", ALL_DTYPES, SRC_DTYPES - {Dtype.I32}),
    Opcode.RMAX: _s("rmax", "D A N", ALL_DTYPES, SRC_DTYPES),
    Opcode.RMAXABS: _s("rmaxabs", "D A N", ALL_DTYPES, SRC_DTYPES),
    Opcode.ARGMAX: _s("argmax", "D A N", ALL_DTYPES, SRC_DTYPES),
    Opcode.RMSNORM: _s("rmsnorm", "D A B N C SI", _I8_16_32, frozenset({Dtype.I16})),
    Opcode.DYNQ: _s("dynq", "D A N", frozenset({Dtype.I8}), frozenset({Dtype.I16, Dtype.I32})),
    Opcode.SOFTMAX: _s("softmax", "D A N", frozenset({Dtype.U16}), frozenset({Dtype.I32})),
    Opcode.ROPE: _s("rope", "D A B N I C", frozenset({Dtype.I8, Dtype.I16}),
                    frozenset({Dtype.I16})),
    Opcode.SILU: _s("silu", "D A N I", frozenset({Dtype.I16}), frozenset({Dtype.I16})),
    Opcode.WSUM: _s("wsum", "D A B N I C", frozenset({Dtype.I32}), frozenset({Dtype.U16})),
    Opcode.RMSNORMQ: _s("rmsnormq", "D A B N C SI", frozenset({Dtype.I8}),
                        frozenset({Dtype.I16})),
    Opcode.MATMUL: _s("matmul", "D A B C N I M", _I8_16_32, "m"),
    Opcode.MATQK: _s("matqk", "D A B C N I M", _I8_16_32, "m"),
    Opcode.MATRAW: _s("matraw", "D A B N I M", frozenset({Dtype.I32}), "m"),
    Opcode.KVQK: _s("kvqk", "D A B C N M", _I8_16_32, "m"),
}
MNEMONICS = {spec.mnemonic: op for op, spec in SPECS.items()}

_FIELD_BITS = {"d.reg": 4, "d.off": OFF_BITS, "a.reg": 4, "a.off": OFF_BITS,
               "b.reg": 4, "b.off": OFF_BITS, "n.reg": 4, "n.imm": LEN_BITS,
               "c": C_BITS, "imm": IMM_BITS}


def _field_values(i: Instr) -> dict:
    return {"d.reg": i.d.reg, "d.off": i.d.off, "a.reg": i.a.reg, "a.off": i.a.off,
            "b.reg": i.b.reg, "b.off": i.b.off, "n.reg": i.n.reg, "n.imm": i.n.imm,
            "c": i.c, "imm": i.imm}


def signed_imm(imm: int) -> int:
    """Return the 16-bit ``imm`` read as a two's-complement signed value."""
    return imm - (1 << IMM_BITS) if imm >> (IMM_BITS - 1) else imm


def rect_encode(x0: int, x1: int, y0: int, y1: int) -> int:
    """Return the ``imm`` of a SEND to the rectangle of columns x0..x1, rows y0..y1.

    Four 4-bit coordinates, ``x0`` least significant; a unicast is the 1x1 rectangle.

    Raises
    ------
    ValueError
        If a coordinate is not in ``[0, 15]`` or a bound is reversed.
    """
    for name, v in (("x0", x0), ("x1", x1), ("y0", y0), ("y1", y1)):
        if not isinstance(v, (int, np.integer)) or not 0 <= v <= 15:
            raise ValueError(f"`{name}` must be an integer in [0, 15], not {v!r}")
    if x0 > x1 or y0 > y1:
        raise ValueError(f"rectangle bounds must not be reversed, not x{x0}..{x1} y{y0}..{y1}")
    return x0 | x1 << 4 | y0 << 8 | y1 << 12


def rect_decode(imm: int) -> tuple[int, int, int, int]:
    """Return ``(x0, x1, y0, y1)`` of a SEND's ``imm``."""
    return imm & 15, imm >> 4 & 15, imm >> 8 & 15, imm >> 12 & 15


def _check(i: Instr) -> None:
    """Raise `IllegalInstruction` unless `i` is a legal instruction."""
    if not isinstance(i.op, Opcode) or i.op not in SPECS:
        raise IllegalInstruction(f"reserved opcode {i.op!r}")
    spec = SPECS[i.op]
    used = spec.fields
    for name, value in _field_values(i).items():
        bits = _FIELD_BITS[name]
        if not isinstance(value, (int, np.integer)) or not 0 <= value < (1 << bits):
            raise IllegalInstruction(f"{spec.mnemonic}: field `{name}` must fit {bits} bits, "
                                     f"not {value!r}")
        if name not in used and value:
            raise IllegalInstruction(f"{spec.mnemonic}: field `{name}` is reserved and must "
                                     f"be 0, not {value}")
    if not isinstance(i.td, Dtype):
        raise IllegalInstruction(f"{spec.mnemonic}: `td` must be a Dtype, not {i.td!r}")
    if spec.td is None:
        if i.td != Dtype.I8:
            raise IllegalInstruction(f"{spec.mnemonic}: field `td` is reserved and must be 0, "
                                     f"not {i.td.name.lower()}")
    elif i.td not in spec.td:
        raise IllegalInstruction(f"{spec.mnemonic}: destination type {i.td.name.lower()} is "
                                 f"not one of {_names(spec.td)}")
    if not isinstance(i.ts, (int, np.integer)) or not 0 <= i.ts < 8:
        raise IllegalInstruction(f"{spec.mnemonic}: field `ts` must fit 3 bits, not {i.ts!r}")
    if spec.ts is None:
        if i.ts:
            raise IllegalInstruction(f"{spec.mnemonic}: field `ts` is reserved and must be 0, "
                                     f"not {i.ts}")
    elif spec.ts != "m":
        try:
            src = Dtype(i.ts)
        except ValueError:
            raise IllegalInstruction(f"{spec.mnemonic}: source type code {i.ts} is reserved"
                                     ) from None
        if src not in spec.ts:
            raise IllegalInstruction(f"{spec.mnemonic}: source type {src.name.lower()} is not "
                                     f"one of {_names(spec.ts)}")
    op = i.op
    if op in (Opcode.MATMUL, Opcode.MATQK, Opcode.MATRAW) and i.imm == 0:
        raise IllegalInstruction(f"{spec.mnemonic}: K must be at least 1, not 0")
    if op == Opcode.ROPE and (i.imm < 2 or i.imm % 2):
        raise IllegalInstruction(f"rope: the head size must be even and at least 2, "
                                 f"not {i.imm}")
    if op == Opcode.WSUM and i.imm == 0:
        raise IllegalInstruction("wsum: the width must be at least 1, not 0")
    if op == Opcode.LI and i.c >= 1 << 16:
        raise IllegalInstruction(f"li: the high half must fit 16 bits, not {i.c}")
    if op == Opcode.TABLE and i.c not in {t.value for t in TableId}:
        raise IllegalInstruction(f"table: table id {i.c} is reserved")
    if op == Opcode.SEND:
        x0, x1, y0, y1 = rect_decode(i.imm)
        if x0 > x1 or y0 > y1:
            raise IllegalInstruction(f"send: reversed rectangle x{x0}..{x1} y{y0}..{y1}")


def _names(types) -> str:
    return ", ".join(sorted(t.name.lower() for t in types))


def encode(instr: Instr) -> int:
    """Return the 128-bit word of an instruction.

    Parameters
    ----------
    instr : Instr

    Returns
    -------
    int
        In ``[0, 2**128)``.

    Raises
    ------
    IllegalInstruction
        If a field does not fit its width, a reserved field is not zero, or a type, table,
        rectangle or size is not legal for the opcode.
    """
    _check(instr)
    o = _FIELD_OFFSETS
    return (instr.op.value << o["op"] | instr.td.value << o["td"] | int(instr.ts) << o["ts"]
            | int(instr.d.off) << o["d.off"] | int(instr.d.reg) << o["d.reg"]
            | int(instr.a.off) << o["a.off"] | int(instr.a.reg) << o["a.reg"]
            | int(instr.b.off) << o["b.off"] | int(instr.b.reg) << o["b.reg"]
            | int(instr.n.imm) << o["n.imm"] | int(instr.n.reg) << o["n.reg"]
            | int(instr.c) << o["c"] | int(instr.imm) << o["imm"])


def decode(word: int) -> Instr:
    """Return the instruction encoded by a 128-bit word.

    Parameters
    ----------
    word : int
        In ``[0, 2**128)``.

    Returns
    -------
    Instr

    Raises
    ------
    IllegalInstruction
        If the word is out of range, has a reserved opcode or type, a reserved field that is
        not zero, or a field value the opcode does not allow.
    """
    if not isinstance(word, (int, np.integer)) or not 0 <= word < (1 << INSTR_BITS):
        raise IllegalInstruction(f"an instruction word must be an integer in [0, 2**128), "
                                 f"not {word!r}")
    word = int(word)

    def f(name):
        return word >> _FIELD_OFFSETS[name] & _FIELD_MASKS[name]

    try:
        op = Opcode(f("op"))
    except ValueError:
        raise IllegalInstruction(f"reserved opcode {f('op')}") from None
    try:
        td = Dtype(f("td"))
    except ValueError:
        raise IllegalInstruction(f"{SPECS[op].mnemonic}: reserved type code {f('td')} in "
                                 f"`td`") from None
    instr = Instr(op, td, f("ts"), Addr(f("d.reg"), f("d.off")), Addr(f("a.reg"), f("a.off")),
                  Addr(f("b.reg"), f("b.off")), Len(f("n.reg"), f("n.imm")), f("c"), f("imm"))
    _check(instr)
    return instr


# -- overlap scoreboard (docs/tile.md, "Issue policy") ------------------------------------------

#: Instructions that never wait for an in-flight instruction (no SRAM access).
SCALAR_OPS = frozenset({Opcode.NOP, Opcode.LI, Opcode.ADD, Opcode.SUB, Opcode.MUL,
                        Opcode.LOOP})
#: The matrix unit's instructions.
MATRIX_OPS = frozenset({Opcode.MATMUL, Opcode.MATQK, Opcode.MATRAW, Opcode.KVQK})

#: Opcodes besides the vector units' (1 and 2) that the controller issues from its decode
#: register, a cycle after decoding them (`CostModel.decode`, `is_decode_op`).
DECODE_OPS = frozenset({Opcode.TABLE, Opcode.LD, Opcode.ST, Opcode.COPY, Opcode.KVAPP})


#: The units that run an instruction in the background under ``overlap`` (one scoreboard
#: entry each): the matrix unit, the vector unit (not ``TABLE``), the network interface
#: (``SEND``), the KV store (``KVAPP``, once the store accepted it: its errors are found
#: before it retires).
BACKGROUND_UNITS = ("matrix", "vector", "net", "kv")


def background_unit(op: Opcode) -> str | None:
    """Return the `BACKGROUND_UNITS` member that runs `op` in the background, or None.

    None for every instruction the controller finishes before the next one issues (scalar,
    control, ``LD``, ``ST``, ``COPY``, ``TABLE``, ``WAIT``, ``DONE``, ``HALT``).
    """
    if op in MATRIX_OPS:
        return "matrix"
    if op == Opcode.KVAPP:
        return "kv"
    if op.value >> 4 in (1, 2):
        return "vector"
    if op == Opcode.SEND:
        return "net"
    return None


def send_footprint(d: int, a: int, n: int) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """Return the scoreboard's SRAM byte ranges of a ``SEND``: reads ``[a, a + n)``; writes
    ``[d, d + n)`` (conservative: the tile's own SRAM is written only when the rectangle
    holds the tile itself, which the controller does not know)."""
    return [(a, a + n)], (d, d + n)


def kvapp_footprint(a: int, b: int, kv_map: tuple[int, int] | None, word_bytes: int,
                    head_size: int) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
    """Return the scoreboard's SRAM byte ranges of a ``KVAPP``.

    Reads the K record ``[a, a + W + pad(head_size))`` and the V row ``[b, b +
    pad(head_size))``; writes the whole KV map `kv_map` (``[W base, W end)``, conservative:
    the controller does not hold the row addresses; None without a layout: nothing).
    """
    kw = -(-head_size // word_bytes) * word_bytes
    return [(a, a + word_bytes + kw), (b, b + kw)], (None if kv_map is None else tuple(kv_map))


def table_footprint(a: int, c: int) -> tuple[list[tuple[int, int]], None]:
    """Return the SRAM byte ranges of a ``TABLE``: reads its uint16 entries ``[a, a + 2
    TABLE_ENTRIES[c])``; writes no SRAM (the vector unit's tables)."""
    return [(a, a + 2 * TABLE_ENTRIES[TableId(c)])], None


def mem_footprint(op: Opcode, d: int, a: int, n: int) -> tuple[list[tuple[int, int]],
                                                                tuple[int, int] | None]:
    """Return the SRAM byte ranges of the controller's own ``LD``, ``ST`` or ``COPY``.

    ``LD`` reads ``[a, a + 4)``, writes nothing (None); ``ST`` writes ``[d, d + 4)``;
    ``COPY`` reads ``[a, a + n)`` and writes ``[d, d + n)``.

    Raises
    ------
    ValueError
        For another opcode.
    """
    if op == Opcode.LD:
        return [(a, a + 4)], None
    if op == Opcode.ST:
        return [], (d, d + 4)
    if op == Opcode.COPY:
        return [(a, a + n)], (d, d + n)
    raise ValueError(f"mem_footprint takes LD, ST or COPY, not {op!r}")


def hazard(reads: list, write: tuple | None, in_reads: list, in_write: tuple,
           limit: int | None = None) -> bool:
    """Return whether an instruction (`reads`, `write`) must wait for an in-flight one.

    RAW (a read meets `in_write`), WAW (`write` meets `in_write`) or WAR (`write` meets one
    of `in_reads`), with `ranges_overlap` (and its `limit`); `write` None: the instruction
    writes no SRAM.
    """
    if write is None:
        return any(ranges_overlap(r, in_write, limit) for r in reads)
    return (any(ranges_overlap(r, in_write, limit) for r in (*reads, write))
            or any(ranges_overlap(write, r, limit) for r in in_reads))


def scoreboard_limit(sram_bytes: int) -> int:
    """Return the scoreboard's address limit for an SRAM of `sram_bytes` bytes (bytes).

    ``2 ** sram_bytes.bit_length()``, the first power of two above the SRAM size: the
    controller holds every range end as ``min(end, limit)`` in that many bits plus one
    (``hw/tile/controller.py``, ``docs/tile.md`` "Issue policy").
    """
    return 1 << sram_bytes.bit_length()


def ranges_overlap(r1: tuple[int, int], r2: tuple[int, int],
                   limit: int | None = None) -> bool:
    """Return the scoreboard's overlap test of two byte ranges ``[lo, hi)``.

    ``lo1 < hi2 and lo2 < hi1`` exactly as the RTL compares them (an empty range strictly
    inside the other counts: the test is conservative, never optimistic).  With `limit`
    (`scoreboard_limit` of the SRAM size) every end is taken as ``min(end, limit)``, as the
    controller holds it: the same answer for ranges inside the SRAM, and a range that
    starts at or beyond `limit` meets nothing (an instruction with such a range faults on
    its own range check).
    """
    if limit is not None:
        r1 = (min(r1[0], limit), min(r1[1], limit))
        r2 = (min(r2[0], limit), min(r2[1], limit))
    return r1[0] < r2[1] and r2[0] < r1[1]


def vector_footprint(op: Opcode, d: int, a: int, b: int, n: int, c: int, imm: int,
                     word_bytes: int) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """Return the conservative SRAM byte ranges of a vector instruction (the scoreboard's).

    Parameters
    ----------
    op : Opcode
        A vector opcode (``op.value >> 4`` in 1, 2).
    d, a, b, n : int
        The resolved operands (``r[reg] + off``, ``r[reg] + imm``: unsigned 32-bit).
    c, imm : int
        The instruction's ``c`` and ``imm`` fields.
    word_bytes : int
        W.

    Returns
    -------
    reads : list of (int, int)
        ``[lo, hi)`` ranges it may read: ``a`` for ``4 n`` bytes; ``b`` (opcodes whose
        `SPECS` use it) for ``4 n`` bytes, ``wsum``'s V rows for ``n c + 4 imm``;
        ``rmsnorm``'s and ``rmsnormq``'s epsilon at ``c`` for 8 bytes.
    write : (int, int)
        The range it may write: ``wsum`` ``4 imm`` bytes, others ``4 n + W`` (a ``dynq``
        record's header word included).
    """
    e = n << 2
    reads = [(a, a + e)]
    if "b.reg" in SPECS[op].fields:
        reads.append((b, b + (n * c + (imm << 2) if op == Opcode.WSUM else e)))
    if op in (Opcode.RMSNORM, Opcode.RMSNORMQ):
        reads.append((c, c + 8))
    write = (d, d + ((imm << 2) if op == Opcode.WSUM else e + word_bytes))
    return reads, write


def matrix_footprint(op: Opcode, d: int, a: int, b: int, n: int, c: int, m: int, k: int,
                     td: "Dtype", word_bytes: int, kv_map: tuple[int, int] | None = None
                     ) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """Return the SRAM byte ranges a matrix instruction reads and writes.

    Exact for ``MATMUL``, ``MATQK`` and ``MATRAW``; for ``KVQK`` the K rows it reads are
    bounded by the whole KV map (conservative: the controller resolves the rows' addresses
    only in the KV store).

    Parameters
    ----------
    op : Opcode
        ``MATMUL``, ``MATQK``, ``MATRAW`` or ``KVQK``.
    d, a, b, n : int
        Resolved Y, X, W addresses (``KVQK``: the slot, not an address) and N.
    c, m, k : int
        Table address, M and K (``KVQK``: the layout's ``head_size``).
    td : Dtype
        Destination type.
    word_bytes : int
        W.
    kv_map : (int, int) or None
        ``KVQK``: the byte range ``[W base, W end)`` of the tile's KV layout (None: no
        layout, no K rows read).

    Returns
    -------
    reads : list of (int, int)
        X (records with their headers, or plain rows), W (rows, K records, or for ``KVQK``
        the KV map) and, unless ``MATRAW``, the requantisation table (``4 N`` bytes, 4 for
        ``MATQK`` and ``KVQK``).
    write : (int, int)
        Y: ``(M - 1) pad(N size) + N size`` bytes from ``d``.
    """
    W = word_bytes
    kw = -(-k // W) * W
    rec = kw + W
    raw, qk = op == Opcode.MATRAW, op in (Opcode.MATQK, Opcode.KVQK)
    x_first, x_stride = (a, kw) if raw else (a + W, rec)
    w_first, w_stride = (b + W, rec) if qk else (b, kw)
    reads = [(a, x_first + (m - 1) * x_stride + k)]
    if op != Opcode.KVQK:
        # N = 0 (refused with SHAPE after its hazard wait): W to the end of the address
        # space, as the controller has it (its W end is min(end, limit) of a negative
        # product: the limit)
        reads.append((b, w_first + (n - 1) * w_stride + k if n else 1 << 64))
    elif kv_map is not None:
        reads.append(tuple(kv_map))
    if not raw:
        reads.append((c, c + (4 if qk else 4 * n)))
    es = DTYPE_INFO[td].size
    ystride = -(-(n * es) // W) * W
    return reads, (d, d + (m - 1) * ystride + n * es)


# -- configuration and cost model ---------------------------------------------------------------

@dataclass(frozen=True)
class CostModel:
    """Cycle costs assumed by the estimate (``docs/isa.md``, "Cost model").

    Attributes
    ----------
    issue : int
        Cycles to fetch, decode and issue any instruction.
    decode : int
        Extra cycles of the instructions the controller checks against its scoreboard's
        SRAM ranges (`DECODE_OPS`: vector instructions, ``TABLE``, ``LD``, ``ST``, ``COPY``,
        ``KVAPP``): it resolves their operands into its decode register first, then issues
        from it (``docs/tile.md``, "Decode register").  A wait for an in-flight instruction
        overlaps it.  ``LOOP`` takes it too (its count into the decode register, then state
        ``Loop``: ``docs/tile.md``, "Fetch"), though it waits for nothing.
    vec_slots : int
        Result slots of the vector unit (``VectorUnit(slots=)`` of ``hw/tile/vector.py``,
        ``ChipConfig.vec_slots``; default 3, the unit's default); the vector unit's cycles
        are `vector_cycles`, its schedule played cycle by cycle.
    mat_latency : int
        Matrix unit pipeline: cycles from the issue of a row's last weight word to its result
        leaving the unit (3); the write-back's own timing is `matrix_cycles`'.
    load_latency : int
        Extra cycles of ``LD`` beyond its issue with the SRAM port at latency 1: the cycle
        its word is read in.  A port of latency L adds L - 1 more (`sram_latency`), so an
        ``LD`` takes ``issue + load_latency + sram_latency - 1`` cycles.
    hop : int
        NoC cycles per router hop.
    kv_stream : int
        Extra cycles of ``KVQK`` over ``MATQK``: the KV store's command cycle and the hand-over
        of its matrix command.
    refill : int
        Cycles the controller's instruction register (``ins_q``) costs an instruction
        that retires in its first cycle (``nop``, ``li``, ``add``, ``sub``, ``mul``,
        ``wait``, with ``overlap`` a ``send`` taken at once; not stalled) when the
        instruction memory's read port is not already a word ahead, and a ``loop`` skipped
        (n = 0): state ``Refill`` (``docs/tile.md``, "Fetch").  The port is a word ahead
        after a refill, and after an instruction held at least a cycle; so in a run of
        single-cycle instructions every second one pays it.  Played by
        `chipotle.isasim.IsaSim`, not by `instr_cycles`.
    mat_ends : int
        Cycles a matrix instruction (``matmul``, ``matqk``, ``matraw``, ``kvqk``) spends in the
        controller's state ``Matrix-Ends`` between Execute and Matrix-Check: its SRAM range
        ends registered before the checks and the hazard compare (``docs/tile.md``,
        "Decode register", "Matrix instructions in the controller"; an FPGA timing
        cut).  They delay the matrix unit's command and the instruction's retire alike,
        but are not the matrix unit's (`instr_cycles` and the ``MATRIX_CYCLES`` counter
        leave them out).  Played by `chipotle.isasim.IsaSim`.
    issue_go : int
        With ``overlap``, the cycles a vector instruction, ``TABLE`` and a ``COPY`` of 0
        bytes spend in the controller's state ``Issue`` before the one in which they can
        be dispatched or retire: the scoreboard compare and the range checks are
        registered there, so the dispatch and the retire (into the instruction register's
        load, the PC and the loop stack) start at a register (``docs/tile.md``, "Decode
        register", Issue-Go; an FPGA timing cut, session 22).  A wait for an in-flight
        instruction overlaps it, as it overlaps `decode`.  Played by
        `chipotle.isasim.IsaSim` and `instr_cycles` (``TABLE``, ``COPY``).
    sram_latency : int
        L of the SRAM's read/write port (``ChipConfig.sram_latency``, default 1): every read
        on it that the next step waits for takes L - 1 cycles more (``LD``, each ``COPY`` and
        ``KVAPP`` word, a vector pass, the write-back's header reads and its results of
        m < L rows).
    """

    issue: int = 1
    decode: int = 1
    vec_slots: int = 3
    mat_latency: int = 3
    load_latency: int = 1
    hop: int = 2
    kv_stream: int = 2
    sram_latency: int = 1
    refill: int = 1
    mat_ends: int = 1
    issue_go: int = 1


@dataclass(frozen=True)
class IsaConfig:
    """Parameters of a tile as the ISA sees them (shared by simulator, compiler and tests).

    Attributes
    ----------
    sram_bytes : int
        SRAM capacity in bytes (a multiple of `word_bytes`).
    word_bytes : int
        W: bytes per SRAM word, the matrix unit's weight word and the NoC flit payload
        (a power of two, at least 4: a record header holds a 4-byte scale code).
    max_m : int
        M: activation rows of the matrix unit (1 .. 8).
    lanes : int
        V: vector-unit lanes (elements per cycle).
    k_max : int
        Largest K of the matrix unit.
    imem_words : int
        Instruction memory, in instructions.
    n_counters : int
        Counters (semaphores) per tile.
    loop_depth : int
        Hardware loop stack depth.
    mcast_max_flits : int
        Longest multicast packet, head included (the NoC's limit).
    max_packet_flits : int
        Largest number of payload flits in one unicast packet.
    read_words : int
        R: SRAM words one vector-unit read returns (the SRAM's wide read of ``n_banks``
        consecutive words, ``docs/tile.md`` "SRAM"; 1: one word per read).  Only the
        cycle estimate depends on it.
    cost : CostModel
    """

    sram_bytes: int = 64 * 1024
    word_bytes: int = 8
    max_m: int = 4
    lanes: int = 8
    k_max: int = 512
    imem_words: int = 1024
    n_counters: int = 16
    loop_depth: int = 4
    mcast_max_flits: int = 8
    max_packet_flits: int = 255
    read_words: int = 1
    cost: CostModel = field(default_factory=CostModel)
    #: Issue policy: False, every unit instruction finishes before the next issues; True,
    #: one matrix, one vector and one SEND instruction run in the background under
    #: independent instructions, their errors deferred to the next sync point
    #: (``docs/isa.md`` section 6, ``docs/tile.md`` "Issue policy").
    overlap: bool = False

    def __post_init__(self):
        for name in ("sram_bytes", "word_bytes", "max_m", "lanes", "k_max", "imem_words",
                     "n_counters", "loop_depth", "mcast_max_flits", "max_packet_flits",
                     "read_words"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"`{name}` must be a positive integer, not {v!r}")
        v = self.cost.vec_slots
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"`cost.vec_slots` must be a positive integer, not {v!r}")
        W = self.word_bytes
        if W < 4 or W & (W - 1):
            raise ValueError(f"`word_bytes` must be a power of two of at least 4, not {W}")
        if self.sram_bytes % W:
            raise ValueError(f"`sram_bytes` must be a multiple of word_bytes ({W}), "
                             f"not {self.sram_bytes}")
        if self.max_m > MAX_MATMUL_M:
            raise ValueError(f"`max_m` must be at most {MAX_MATMUL_M}, not {self.max_m}")
        if self.k_max > nx.MAX_K - 1:
            raise ValueError(f"`k_max` must be below {nx.MAX_K}, not {self.k_max}")
        if self.mcast_max_flits < 2:
            raise ValueError(f"`mcast_max_flits` must be at least 2, not {self.mcast_max_flits}")

    def pad(self, nbytes: int) -> int:
        """Return `nbytes` rounded up to a whole number of words."""
        W = self.word_bytes
        return -(-nbytes // W) * W

    def record_bytes(self, n: int) -> int:
        """Return the size of a record of `n` int8: a one-word header, then the padded data."""
        return self.word_bytes + self.pad(n)


def send_flits(nbytes: int, multicast: bool, config: IsaConfig) -> int:
    """Return the flits a SEND of `nbytes` puts on the network, heads included.

    Data goes in packets of at most ``max_packet_flits`` payload flits (unicast) or
    ``mcast_max_flits - 1`` (multicast), one W-byte word per flit, each with a head; the last
    one bumps the receivers' counter once its words are written (a write-and-bump packet,
    ``docs/tile.md`` "Network interface").  A SEND of 0 bytes is one CONTROL packet (head and
    one payload flit) that bumps the counter.
    """
    words = -(-nbytes // config.word_bytes)
    if words == 0:
        return 2
    per = config.mcast_max_flits - 1 if multicast else config.max_packet_flits
    packets = -(-words // per)
    return words + packets


# -- the vector unit's schedule ------------------------------------------------------------------

#: Cycles from the issue of a chunk's last source word to the cycle its result enters a slot
#: (the word lands, the buffers fire into the lanes, four lane stages).
_VEC_LAG = 6
#: The same for ``RMSNORMQ``'s last pass: two more lane stages (the int16 value times the
#: dynq multiplier, then its rounding and saturation to int8).
_VEC_LAG_Q = _VEC_LAG + 2
#: ``RMSNORMQ``'s pass 2, which reads nothing: the largest and the smallest ``x * gain`` of
#: pass 1 fire into the lanes in its first cycle, leave them (into the max-abs) in its fifth,
#: and the pass ends in the sixth.
_VEC_ENDS = 6


def _span(addr: int, nbytes: int, W: int) -> int:
    """Return the number of W-byte words the byte range ``[addr, addr + nbytes)`` touches."""
    return 0 if nbytes == 0 else (addr % W + nbytes + W - 1) // W


def _vec_stream(chunks, slots: int, credited: bool, table: bool, state: dict,
                wait_slots: bool = True, lag: int = _VEC_LAG) -> int:
    """Return the cycles of one pass of the vector unit's stream engine.

    ``chunks`` is a list of ``(read words, result words)`` in order (result words ``None``:
    a parameter word read ahead of the pass's chunks, which takes no credit and yields no
    result: the prologue of ``REQM`` and RMSNorm); ``state["slots"]`` holds
    the words of results still waiting to be written (carried between ``WSUM``'s column
    chunks).  ``credited``: a writing pass (its chunks' results go to slots); ``table``:
    the results go to the table RAM, not through the SRAM port.  ``lag``: cycles from the
    issue of a chunk's last source word to its result entering a slot (`_VEC_LAG`, or
    `_VEC_LAG_Q` for ``RMSNORMQ``'s quantising pass through the two extra lane stages).
    The pass ends in the first cycle in which every chunk has left the lanes and
    (``wait_slots``) no result waits.
    """
    q = state["slots"]
    cyc = 0
    k = rq = 0
    cred = 0
    done_at = None
    pushes = {}
    while True:
        if k == len(chunks) and cyc >= done_at + lag + 1 and not (wait_slots and q):
            return cyc + 1
        port = pop = False
        if q:
            port = not table
            q[0] -= 1
            pop = q[0] == 0
        credit_in = False
        if not port and k < len(chunks) and (rq or not credited or cred < slots):
            credit_in = credited and rq == 0 and chunks[k][1] is not None
            rq += 1
            if rq == chunks[k][0]:
                if credited and chunks[k][1] is not None:
                    pushes[cyc + lag] = chunks[k][1]
                rq = 0
                k += 1
                done_at = cyc
        if pop:
            q.pop(0)
        if cyc in pushes:
            q.append(pushes.pop(cyc))
        cred += credit_in - (pop and credited)
        cyc += 1


def _vec_flush(state: dict, push: int | None = None) -> int:
    """Return the cycles until the result slots are empty and one more (the finishing cycle)."""
    q = state["slots"]
    if push is not None:
        q.append(push)
    cyc = 1 if push is not None else 0      # the pushing cycle
    while q:
        q[0] -= 1
        if q[0] == 0:
            q.pop(0)
        cyc += 1
    return cyc + 1


def vector_cycles(op: Opcode, td: Dtype, ts: Dtype, n: int, imm: int = 0, c: int = 0,
                  a: int = 0, b: int = 0, d: int = 0, *, lanes: int = 8, word_bytes: int = 8,
                  slots: int = 3, read_words: int = 1, sram_latency: int = 1) -> int:
    """Return the cycles the vector unit of ``hw/tile/vector.py`` takes for one command.

    The schedule of ``docs/tile.md`` ("Vector unit", "Timing") played cycle by cycle, with
    every SRAM request granted at once and the completion taken at once: the figure the
    unit reports in ``VectorDone.cycles`` for a command it executes (not for a refused one).

    Parameters
    ----------
    op : Opcode
        A vector-unit opcode (units 1 and 2) or ``TABLE``.
    td, ts : Dtype
        Destination and source types (ignored where the opcode fixes them).
    n : int
        Elements (positions for ``WSUM``), at least 1; ignored for ``TABLE``.
    imm, c : int
        The instruction's immediates (``WSUM`` width and row stride, ``ROPE`` head size,
        ``TABLE`` id).
    a, b, d : int
        Byte addresses of the operands (their offsets within a word matter).
    lanes, word_bytes : int
        V and W.
    slots : int
        Result slots of the unit (``VectorUnit(slots=)``, default 3; at least 1).
    read_words : int
        R, words one SRAM read returns (``VectorUnit(read_words=...)``, the tile's
        ``n_banks``): a chunk's source stream of ``w`` words takes ``ceil(w / R)`` reads.
    sram_latency : int
        L of the read/write port (`CostModel.sram_latency`): each pass's words land L - 1
        cycles later, so each pass takes L - 1 cycles more.

    Returns
    -------
    int
        Cycles from acceptance to the first cycle the completion is offered.

    Raises
    ------
    ValueError
        If ``op`` is not a vector-unit opcode, ``n`` is not positive, or ``read_words`` or
        ``slots`` is not a positive integer.
    """
    V, W, R = lanes, word_bytes, read_words
    if R < 1:
        raise ValueError(f"`read_words` must be a positive integer, not {R}")
    if not isinstance(slots, int) or slots < 1:
        raise ValueError(f"`slots` must be a positive integer, not {slots!r}")
    if not (op.value >> 4 in (1, 2) or op == Opcode.TABLE):
        raise ValueError(f"`op` must be a vector-unit opcode, not {op.name}")
    if op != Opcode.TABLE and n < 1:
        raise ValueError(f"`n` must be a positive integer, not {n}")
    sk = DTYPE_INFO[ts].size
    dk = DTYPE_INFO[td].size
    state = {"slots": []}
    total = 3 + (n.bit_length() if op == Opcode.ROPE else 0)   # accept, checks, n mod hs

    def rd(addr, nbytes):
        """Reads of one source stream's words: up to R consecutive words per read."""
        return -(-_span(addr, nbytes, W) // R)

    def elems(count, xs, ys=None, ds=None, x0=a, y0=b, d0=d):
        """Chunks of V elements: (reads, destination words) each."""
        out = []
        for i in range(0, count, V):
            cnt = min(V, count - i)
            r = rd(x0 + i * xs, cnt * xs)
            if ys:
                r += rd(y0 + i * ys, cnt * ys)
            out.append((r, _span(d0 + i * ds, cnt * ds, W) if ds else 0))
        return out

    def stream(chunks, credited=False, table=False, wait_slots=True, lag=_VEC_LAG):
        return _vec_stream(chunks, slots, credited, table, state, wait_slots,
                           lag + sram_latency - 1)

    if op in (Opcode.VADD, Opcode.VSUB, Opcode.VMUL):
        total += stream(elems(n, sk, sk, dk), True)
    elif op == Opcode.REQI:
        total += stream(elems(n, sk, ds=dk), True)
    elif op == Opcode.REQM:
        # the (m, s) word, then at once pass 1's chunks (its parameters are latched as the
        # word leaves the shifter, a cycle before the first chunk's stage 1 at the earliest)
        total += stream([(rd(b, 4), None)] + elems(n, sk, ds=dk), True)
    elif op in (Opcode.RSUM, Opcode.RSUMSQ, Opcode.RMAX, Opcode.RMAXABS, Opcode.ARGMAX):
        total += stream(elems(n, sk)) + _vec_flush(state, _span(d, dk, W))
    elif op == Opcode.RMSNORM:
        total += stream([(rd(c, 8), None)] + elems(n, 2))       # eps, then pass 1
        total += 3 + stream(elems(n, 2, 2, dk), True)
    elif op == Opcode.DYNQ:
        total += stream(elems(n, sk)) + 3 + stream(elems(n, sk, ds=dk, d0=d + W), True)
    elif op == Opcode.RMSNORMQ:
        # the epsilon word read at the head of pass 1's stream, pass 1 sum of squares and the
        # ends of x * gain (x and gain read), the RMSNorm scalar step (3), pass 2 max |int16
        # normalised| of the two ends (no read, no write), the dynq scalar step and header
        # write (3), pass 3 recompute and quantise into the record's data
        total += stream([(rd(c, 8), None)] + elems(n, 2, 2))
        total += 3 + _VEC_ENDS
        total += 3 + stream(elems(n, 2, 2, 1, d0=d + W), True, lag=_VEC_LAG_Q)
    elif op == Opcode.SOFTMAX:
        total += stream(elems(n, 4)) + stream(elems(n, 4, ds=dk), True)
        total += 2 + stream(elems(n, 2, ds=dk, x0=d), True)
    elif op == Opcode.ROPE:
        chunks = []
        for h in range(0, n, imm):
            for j in range(0, imm, V):
                cnt = min(V, imm - j)
                r = (rd(a + 2 * (h + j), 2 * cnt) + rd(b + j, cnt // 2 * 2)
                     + rd(b + imm + j, cnt // 2 * 2))
                chunks.append((r, _span(d + dk * (h + j), dk * cnt, W)))
        total += stream(chunks, True)
    elif op == Opcode.SILU:
        total += stream(elems(n, 2, ds=dk), True)
    elif op == Opcode.WSUM:
        # R > 1: a chunk is rows t and t + 1 in one wide read when the stride is one word
        # and row t's bytes of the column chunk are in one word (not for the last row), and p
        # is read as a window of up to PW words from the first word needed (not past p's
        # last word) that later chunks reuse.  R = 1: one row per chunk, p's last word kept.
        PW = min(R, -(-(W - 1 + 4 * V) // W))       # the unit's p window: R, at most a buffer
        plast = (a + 2 * n - 1) // W
        for j in range(0, imm, V):
            cnt = min(V, imm - j)
            rows, win = [], None                    # win: (first word, words) of p kept
            t = 0
            while t < n:
                xw = _span(b + t * c + j, cnt, W)
                pair = R > 1 and c == W and xw == 1 and t + 1 < n
                r = -(-(xw + pair) // R)
                fy, ny = (a + 2 * t) // W, _span(a + 2 * t, 2 + 2 * pair, W)
                if R == 1:
                    if win is None or fy != win[0]:
                        win, r = (fy, 1), r + 1
                elif win is None or not (0 <= fy - win[0] and fy - win[0] + ny <= win[1]):
                    win, r = (fy, min(PW, plast - fy + 1)), r + 1
                rows.append((r, 0))
                t += 1 + pair
            total += stream(rows, wait_slots=False)
            wd = _span(d + 4 * j, 4 * cnt, W)
            if j + V >= imm:
                total += _vec_flush(state, wd) - 1
            else:
                state["slots"].append(wd)
    else:   # TABLE
        entries = TABLE_ENTRIES[TableId(c)]
        total += stream([(rd(a + 2 * i, 2 * min(V, entries - i)), min(V, entries - i))
                         for i in range(0, entries, V)], True, table=True)
    return total


def copy_steps(d: int, a: int, n: int, word_bytes: int) -> int:
    """Return the steps of a ``COPY`` of `n` bytes from `a` to `d` on the tile.

    The controller moves a whole word when the source and the destination are both at a
    word boundary in the copy's direction (forward from the start when ``d <= a``; backward
    from the last byte, where a word ends, when ``d > a``) and at least a word is left, else
    one byte (``docs/tile.md``, "Decode, legality, operands").  Source and destination reach
    word boundaries together only when ``a - d`` is a multiple of W: then the steps are the
    bytes before the first common boundary, the whole words, and the bytes after them.
    """
    W = word_bytes
    if n <= 0:
        return 0
    if (a - d) % W:
        return n
    back = d > a
    head = min(n, (a + n) % W if back else (-a) % W)   # bytes before the first boundary
    words = (n - head) // W
    return head + words + (n - head - words * W)


def issue_cycles(op: Opcode, cost: CostModel) -> int:
    """Return the cycles the controller takes to issue an instruction with opcode `op`:
    ``cost.issue``, plus ``cost.decode`` for `DECODE_OPS`."""
    return cost.issue + (cost.decode if is_decode_op(op) else 0)


def go_cycles(op: Opcode, config: IsaConfig, n: int = 1) -> int:
    """Return the cycles of the controller's Issue-Go compare for `op` (``CostModel.issue_go``):
    with ``config.overlap``, for a vector instruction (units 1 and 2), ``TABLE`` and a
    ``COPY`` of `n` = 0 bytes; else 0."""
    if not config.overlap:
        return 0
    if op.value >> 4 in (1, 2) or op == Opcode.TABLE or op == Opcode.COPY and n == 0:
        return config.cost.issue_go
    return 0


def is_decode_op(op: Opcode) -> bool:
    """True for the opcodes that issue from the controller's decode register (`DECODE_OPS`)."""
    return op in DECODE_OPS or op.value >> 4 in (1, 2)


def instr_cycles(instr: Instr, config: IsaConfig, n: int = 0, k: int | None = None,
                 addrs: tuple[int, int] | None = None) -> int:
    """Return the estimated cycles an instruction keeps the tile's controller busy.

    An estimate (``docs/isa.md``, "Cost model"): the RTL is the authority on cycles.  Stalls
    on ``WAIT`` and network latency are added by the simulator, not here.

    Parameters
    ----------
    instr : Instr
    config : IsaConfig
        W, M, V and the `CostModel`.
    n : int
        The instruction's resolved length operand (elements, bytes, positions or iterations);
        for ``KVAPP`` the words it appends (K record and V row).
    k : int or None
        ``KVQK``: K, the KV layout's ``head_size`` (the instruction does not hold it).
    addrs : (int, int) or None
        ``COPY``: its resolved ``(d, a)`` (`copy_steps`); None: both word-aligned.

    Returns
    -------
    int
        Cycles, at least 1.

    Raises
    ------
    ValueError
        If `instr` is a ``KVQK`` and `k` is None.
    """
    c = config.cost
    W, V = config.word_bytes, config.lanes
    op = instr.op
    unit = op.value >> 4
    issue = issue_cycles(op, c)

    wait = c.sram_latency - 1   # cycles a read on the read/write port waits beyond 1
    if op == Opcode.LD:
        return issue + c.load_latency + wait
    if op == Opcode.COPY:       # read, latch, write per step (a word or a byte)
        d, a = addrs if addrs is not None else (0, 0)
        return issue + (3 + wait) * copy_steps(d, a, n, W) + go_cycles(op, config, n)
    if op == Opcode.KVAPP:       # n: words appended (K record + V row), each read and written
        return issue + 1 + (2 + wait) * n    # + the KV store's decode cycle
    if op == Opcode.SEND:
        x0, x1, y0, y1 = rect_decode(instr.imm)
        return c.issue + send_flits(n, (x0, y0) != (x1, y1), config)
    if op == Opcode.TABLE or unit in (1, 2):
        # the vector unit's own schedule, operands assumed word-aligned (RMSNorm's epsilon
        # address and WSUM's row stride are the `c` immediate)
        # (TABLE, in the foreground: its Issue-Go cycle; a vector instruction's is the
        # simulator's, which issues it in the background)
        go = go_cycles(op, config) if op == Opcode.TABLE else 0
        return go + issue + vector_cycles(op, instr.td, instr.src, max(n, 1), instr.imm,
                                          instr.c, lanes=V, word_bytes=W, slots=c.vec_slots,
                                          read_words=config.read_words,
                                          sram_latency=c.sram_latency)
    if op == Opcode.LOOP:
        # its count resolved into the decode register, then state Loop (docs/tile.md,
        # "Fetch")
        return issue + c.decode
    if unit == 0:
        return issue
    # matrix unit and its write-back, from the command's acceptance to the last write
    if op == Opcode.KVQK:
        if k is None:
            raise ValueError("instr_cycles of kvqk needs k, the KV layout's head_size")
        # matqk's, plus the KV store's command cycle and its matrix command's hand-over
        return c.issue + matrix_cycles(Opcode.MATQK, instr.m, max(n, 1), k, W,
                                       c.mat_latency, c.sram_latency) + c.kv_stream
    return c.issue + matrix_cycles(op, instr.m, max(n, 1), instr.imm, W, c.mat_latency,
                                   c.sram_latency)


def matrix_cycles(op: Opcode, m: int, n: int, k: int, word_bytes: int = 8,
                  latency: int = 3, sram_latency: int = 1) -> int:
    """Return the cycles of one matrix command and its write-back (``hw/tile/matrix.py``).

    From the cycle the matrix unit accepts the command to the cycle after the write-back
    (`MatrixWriteback`) wrote the last element, every SRAM grant immediate.  The schedule,
    played result by result (``docs/tile.md``, "Matrix unit" Timing and "Matrix write-back"):

    * the unit loads the ``m`` activation rows (``m R`` cycles, ``R = ceil(k / W)``: the
      records' header words are not read by the unit) and streams ``n`` weight rows of ``R``
      words; a row's result is offered ``latency`` cycles after its last word issued;
    * the write-back first reads the ``m`` activation headers (2 cycles each: read, latch)
      and, for ``MATQK``, the one ``(m, s)`` pair (2), then the first result's side word
      (its row's pair, ``MATMUL``, or K-record header, ``MATQK``: 1); per result it
      computes the first element's product while it reads the next result's side word (1
      cycle), then writes the ``m`` elements, one per cycle, the next element's product
      computed alongside, and takes the next result in the cycle of its last write when
      the unit offers it by then (else as soon as it does): ``P = 1 + m`` cycles per result
      (``MATRAW``: the ``m`` writes, ``P = m``), the floor of one read/write port;
    * the next result comes ``R`` cycles after the previous one was taken (at the latest:
      the unit's skid register lets it finish one more result while one waits, which
      changes no take with every grant immediate, since a result that waits means
      ``R < P``).

    Without back-pressure (``R >= P`` and the headers read before the first result) this is
    ``1 + m R + n R + latency + P``; when the write-back is the bottleneck (``R < P``,
    e.g. ``MATQK`` over K records of head size 8 at W = 8, ``R = 1``) each result costs ``P``
    cycles.

    Parameters
    ----------
    op : Opcode
        ``MATMUL``, ``MATQK`` or ``MATRAW`` (``KVQK`` counts as ``MATQK``).
    m, n, k : int
        Activation rows, weight rows (results) and the inner dimension, each at least 1.
    word_bytes : int
        W.
    latency : int
        `CostModel.mat_latency`.
    sram_latency : int
        L of the read/write port (`CostModel.sram_latency`): each header and pair read
        takes ``1 + L`` cycles (read, L - 1 waits, latch), the first side word L - 1 more;
        at L > 1 every result (but ``MATRAW``'s) takes a cycle more in the write-back's
        scaled stage (its first element's ``prod * m + half`` registered before the write:
        ``P = 2 + m``, the last result's too) and at least ``P = 1 + L`` (its next side
        word, read in the product cycle, lands L cycles later): ``P = max(2 + m, 1 + L)``;
        and at L > 1 each result leaves the unit a cycle later (its input stage,
        `MatrixUnit` ``input_stage``: the SRAM word registered before the products).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If ``op`` is not a matrix opcode or ``m``, ``n`` or ``k`` is below 1.
    """
    if op == Opcode.KVQK:
        op = Opcode.MATQK
    if op not in (Opcode.MATMUL, Opcode.MATQK, Opcode.MATRAW):
        raise ValueError(f"`op` must be a matrix opcode, not {op.name}")
    if min(m, n, k) < 1:
        raise ValueError(f"`m`, `n` and `k` must be positive integers, not {m}, {n}, {k}")
    R = -(-k // word_bytes)
    L = sram_latency
    if op == Opcode.MATRAW:
        per = last = m
        headers = 0
    else:
        if L == 1:
            last = per = 1 + m
        else:       # the scaled stage (state Scale); the next side word lands L after its read
            last = 2 + m                    # the last result: no next side word to wait for
            per = max(2 + m, 1 + L)
        headers = (1 + L) * (m + (op == Opcode.MATQK)) + 1 + (L - 1)
    wb = 1 + headers                        # the write-back can take a result from here
    # the first result on the unit's output (at L > 1 a cycle later: the unit's input stage,
    # `MatrixUnit(input_stage=True)`)
    offered = 1 + m * R + R + latency - 1 + (L > 1)
    for i in range(n):
        taken = max(offered, wb)
        wb = taken + (per if i < n - 1 else last)   # when it can take the next
        offered = taken + R
    return wb + 1
