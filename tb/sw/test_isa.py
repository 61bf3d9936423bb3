"""chipotle.isa: the instruction word, encoder/decoder, assembler and disassembler.

* the word layout is the documented one (field offsets locked);
* every opcode, with every legal type combination and its fields at both extremes, survives
  encode -> decode and assemble -> disassemble -> assemble unchanged;
* bad words are rejected by the decoder, bad text by the assembler with the line number and
  the line's text.
"""

import itertools

import pytest

from chipotle.isa import (
    SPECS,
    Addr,
    AsmError,
    Dtype,
    IllegalInstruction,
    Instr,
    Instruction,
    Len,
    Opcode,
    TableId,
    assemble,
    decode,
    disassemble,
    encode,
    format_instr,
    rect_encode,
)
from chipotle.isa.core import C_BITS, IMM_BITS, LEN_BITS, MAX_MATMUL_M, OFF_BITS

# -- layout -------------------------------------------------------------------------------------


def test_layout_is_the_documented_one():
    layout = Instruction.as_shape()
    assert layout.size == 128
    offsets = {name: (f.offset, f.width) for name, f in layout}
    assert offsets == {"op": (0, 6), "td": (6, 3), "ts": (9, 3), "d": (12, 21), "a": (33, 21),
                       "b": (54, 21), "n": (75, 20), "c": (95, 17), "imm": (112, 16)}
    assert Opcode.as_shape().width == 6 and Dtype.as_shape().width == 3
    assert TableId.as_shape().width == 3


def test_encode_places_fields():
    w = encode(Instr(Opcode.VADD, Dtype.I16, Dtype.I32.value, Addr(1, 2), Addr(3, 4),
                     Addr(5, 6), Len(7, 8)))
    assert w & 63 == Opcode.VADD.value
    assert (w >> 6) & 7 == Dtype.I16.value and (w >> 9) & 7 == Dtype.I32.value
    assert (w >> 12) & (2**17 - 1) == 2 and (w >> 29) & 15 == 1       # d.off, d.reg
    assert (w >> 54) & (2**17 - 1) == 6 and (w >> 71) & 15 == 5       # b
    assert (w >> 75) & 0xFFFF == 8 and (w >> 91) & 15 == 7            # n


# -- every opcode at its extremes ---------------------------------------------------------------

def _variants(op):
    """Instructions of `op`: each legal type combination, fields at minimum and at maximum."""
    spec = SPECS[op]
    tds = sorted(spec.td, key=lambda t: t.value) if spec.td else [Dtype.I8]
    if spec.ts == "m":
        tss = [0, MAX_MATMUL_M - 1]
    elif spec.ts:
        tss = [t.value for t in sorted(spec.ts, key=lambda t: t.value)]
    else:
        tss = [0]
    for td, ts, big in itertools.product(tds, tss, (False, True)):
        f = dict(td=td, ts=ts)
        for kind in spec.operands:
            if kind == "rd":
                f["d"] = Addr(15 if big else 1, 0)
            elif kind in ("D", "A", "B"):
                f[kind.lower()] = Addr(15, 2**OFF_BITS - 1) if big else Addr(0, 0)
            elif kind == "N":
                f["n"] = Len(15, 2**LEN_BITS - 1) if big else Len(0, 0)
            elif kind in ("C", "CNT"):
                f["c"] = 2**C_BITS - 1 if big else 0
            elif kind == "TGT":
                f["c"] = 2**C_BITS - 1 if big else 2
            elif kind == "TAB":
                f["c"] = TableId.SIGMOID.value if big else TableId.RSQRT.value
            elif kind == "I":
                lo = 2 if op == Opcode.ROPE else 1 if op in (
                    Opcode.MATMUL, Opcode.MATQK, Opcode.MATRAW, Opcode.WSUM) else 0
                hi = 2**IMM_BITS - 2 if op == Opcode.ROPE else 2**IMM_BITS - 1
                f["imm"] = hi if big else lo
            elif kind == "SI":
                f["imm"] = 0x8000 if big else 0x7FFF
            elif kind == "V32":
                f["imm"], f["c"] = (0xFFFF, 0xFFFF) if big else (0, 0)
            elif kind == "RECT":
                f["imm"] = rect_encode(0, 15, 0, 15) if big else rect_encode(3, 3, 4, 4)
        yield Instr(op, **f)


ALL = [(op, i) for op in SPECS for i in _variants(op)]


@pytest.mark.parametrize("op", list(SPECS), ids=lambda op: op.name)
def test_encode_decode_round_trip(op):
    for instr in _variants(op):
        word = encode(instr)
        assert 0 <= word < 2**128
        assert decode(word) == instr


def test_encode_decode_agree_with_the_instruction_layout():
    """`encode`/`decode` pack by shifts; the `Instruction` struct the RTL decodes is the truth."""
    for _, instr in ALL:
        ref = Instruction.const({
            "op": instr.op, "td": instr.td, "ts": {"m1": instr.ts},
            "d": {"reg": instr.d.reg, "off": instr.d.off},
            "a": {"reg": instr.a.reg, "off": instr.a.off},
            "b": {"reg": instr.b.reg, "off": instr.b.off},
            "n": {"reg": instr.n.reg, "imm": instr.n.imm},
            "c": instr.c, "imm": instr.imm,
        }).as_bits()
        assert encode(instr) == ref, instr
        k = Instruction.from_bits(ref)
        assert decode(ref) == Instr(k.op, k.td, k.ts.m1, Addr(k.d.reg, k.d.off),
                                    Addr(k.a.reg, k.a.off), Addr(k.b.reg, k.b.off),
                                    Len(k.n.reg, k.n.imm), k.c, k.imm)


@pytest.mark.parametrize("op", list(SPECS), ids=lambda op: op.name)
def test_text_round_trip(op):
    """assemble(format(i)) == encode(i); a loop as the first instruction of a program of
    ``nop`` s long enough to hold its end (a lone loop's end lies past its program)."""
    for instr in _variants(op):
        text = format_instr(instr)
        if op == Opcode.LOOP:
            words = assemble(text + "\nnop" * (instr.c - 1))
            assert (words[0], len(words)) == (encode(instr), instr.c), text
            continue
        assert assemble(text) == [encode(instr)], text


def test_program_round_trip_every_opcode():
    """assemble -> disassemble -> assemble is the identity on a program with every opcode."""
    words = []
    for op, instr in ALL:
        if op == Opcode.LOOP:
            continue
        words.append(encode(instr))
    n = len(words)
    # loops with their ends at the minimum (the second body instruction) and at the end
    words = [encode(Instr(Opcode.LOOP, n=Len(15, 65535), c=n + 2)),
             encode(Instr(Opcode.LOOP, n=Len(0, 0), c=3))] + words
    text = disassemble(words)
    assert assemble(text) == words
    assert disassemble(assemble(text)) == text
    assert "L3:" in text and f"L{n + 2}:" in text


def test_assembler_syntax():
    src = """
    ; comment
    .equ BASE, 0x100                # another comment
    .equ ROW, BASE + 2 * 64
    start: li r1, -1
    top:   loop r2+3, end           ; forward label
           vadd.I16.i16 r1+ROW, BASE, r3, 64
           send r4+8, (1 << 4), 64, (0:3, 1:2), 5
    end:   halt
    """
    sym = {}
    words = assemble(src, symbols_out=sym)
    assert sym["start"] == 0 and sym["top"] == 1 and sym["end"] == 4 and sym["ROW"] == 0x180
    li, loop, vadd, send, _ = (decode(w) for w in words)
    assert li.c << 16 | li.imm == 0xFFFFFFFF
    assert loop.n == Len(2, 3) and loop.c == 4
    assert vadd.d == Addr(1, 0x180) and vadd.a == Addr(0, 0x100) and vadd.b == Addr(3, 0)
    assert send.imm == rect_encode(0, 3, 1, 2) and send.a == Addr(0, 16)
    assert assemble("table SIGMOID, 0x40") == assemble("table 4, 64")
    assert assemble("vadd.i16.i16 r1 + 4, 0, 0, 1") == assemble("vadd.i16.i16 4+r1, 0, 0, 1")
    assert assemble("vadd.i16.i16 r1 - 4 + 8, 0, 0, 1") == assemble("vadd.i16.i16 r1+4, 0, 0, 1")
    assert assemble("send 0, 0, 8, (2, 3), 0") == assemble("send 0, 0, 8, (2:2, 3:3), 0")


def test_disassembler_marks_illegal_words():
    text = disassemble([0, encode(Instr(Opcode.HALT)), (1 << 128) - 1])
    assert ".word" in text and "illegal" in text and "halt" in text
    assert assemble(text) == [0, encode(Instr(Opcode.HALT)), (1 << 128) - 1]


# -- rejection ----------------------------------------------------------------------------------

@pytest.mark.parametrize("word, reason", [
    (0, "reserved opcode 0"),
    (63, "reserved opcode 63"),
    (Opcode.HALT.value | 1 << 120, "`imm` is reserved"),
    (Opcode.HALT.value | 7 << 6, "reserved type code 7"),
    (Opcode.HALT.value | 1 << 9, "`ts` is reserved"),
    (Opcode.VADD.value | 7 << 9, "source type code 7 is reserved"),
    (Opcode.SOFTMAX.value | Dtype.U16.value << 6 | Dtype.I16.value << 9, "source type i16"),
    (Opcode.MATMUL.value | Dtype.U16.value << 6, "destination type u16"),
    (Opcode.MATMUL.value | Dtype.I8.value << 6, "K must be at least 1"),
    (Opcode.ROPE.value | Dtype.I16.value << 6 | Dtype.I16.value << 9 | 3 << 112, "even"),
    (Opcode.TABLE.value | 5 << 95, "table id 5 is reserved"),
    (Opcode.LI.value | 1 << 111, "high half"),
    (Opcode.SEND.value | 0x0012 << 112, "reversed rectangle"),
    (-1, "must be an integer"),
    (1 << 128, "must be an integer"),
])
def test_decode_rejects(word, reason):
    with pytest.raises(IllegalInstruction, match=reason):
        decode(word)


def test_encode_rejects_out_of_range_fields():
    with pytest.raises(IllegalInstruction, match="fit 17 bits"):
        encode(Instr(Opcode.COPY, d=Addr(0, 1 << 17)))
    with pytest.raises(IllegalInstruction, match="fit 4 bits"):
        encode(Instr(Opcode.COPY, a=Addr(16, 0)))
    with pytest.raises(IllegalInstruction, match="reserved"):
        encode(Instr(Opcode.COPY, imm=1))


BAD = [
    ("frobnicate r1, 2", "unknown mnemonic `frobnicate`"),
    ("halt 3", "takes 0 operand"),
    ("vadd.i16 0, 0, 0, 4", "type suffix"),
    ("halt.i8", "type suffix"),
    ("vadd.i16.f32 0, 0, 0, 4", "unknown type `f32`"),
    ("softmax.i16.i32 0, 0, 4", "destination type i16"),
    ("rsumsq.i64.i32 0, 0, 4", "source type i32"),
    ("copy 0x20000, 0, 4", "address offset must be in"),
    ("copy 0, 0, 65536", "length must be in"),
    ("copy -1, 0, 4", "address offset must be in"),
    ("done 65536", "immediate must be in"),
    ("rmsnorm.i16.i16 0, 0, 0, 8, 0, 32768", "signed immediate must be in"),
    ("copy r16, 0, 4", "register `r16` does not exist"),
    ("copy r1+r2, 0, 4", "at most one register"),
    ("copy 2*r1, 0, 4", "a register can only be added"),
    ("copy nowhere, 0, 4", "undefined symbol `nowhere`"),
    ("copy 0, 0, 4,", "takes 3 operand"),
    ("copy 0 0, 0, 4", "cannot parse"),
    ("li 5, 1", "expected a register"),
    ("li r1, 0x100000000", "32-bit value"),
    ("matmul.i16 0, 0, 0, 0, 1, 8, 0", "M must be in"),
    ("matmul.i16 0, 0, 0, 0, 1, 8, 9", "M must be in"),
    ("matmul.i16 0, 0, 0, 0, 1, 0, 1", "K must be at least 1"),
    ("rope.i16.i16 0, 0, 0, 8, 3, 14", "even"),
    ("send 0, 0, 8, (3:1, 0:0), 0", "reversed"),
    ("send 0, 0, 8, (16, 0), 0", "in \\[0, 15\\]"),
    ("send 0, 0, 8, 5, 0", "rectangle is written"),
    ("table cosine, 0", "undefined symbol `cosine`"),
    ("table 7, 0", "table id 7 is reserved"),
    ("wait r1, 1", "a counter must be a constant"),
    (".frob 3", "unknown directive"),
    ("kvapp 0, 0x100, 0x180", "takes 4 operand"),
    ("kvapp 0, 0x100, 0x180, 0, 1", "takes 4 operand"),
    ("kvapp.i8 0, 0x100, 0x180, 0", "type suffix"),
    ("kvapp 0x20000, 0x100, 0x180, 0", "address offset must be in"),
    ("kvapp 0, 0x100, 0x180, 65536", "length must be in"),
    ("kvapp r1+r2, 0x100, 0x180, 0", "at most one register"),
    ("kvapp 0, 0x100, 0x180, 2*r3", "a register can only be added"),
    (".equ r3, 4", "takes a name and a value"),
]


@pytest.mark.parametrize("line, reason", BAD, ids=[b[0] for b in BAD])
def test_assembler_rejects_with_line(line, reason):
    src = f"nop\n  ; comment\n    {line}   ; trailing comment\nhalt\n"
    with pytest.raises(AsmError, match=reason) as e:
        assemble(src)
    assert e.value.line == 3
    assert e.value.text == f"{line}   ; trailing comment"
    assert str(e.value).startswith(f"line 3: `{line}")


@pytest.mark.parametrize("src, line, reason", [
    ("a: nop\na: halt", 2, "already defined"),
    (".equ A, 1\n.equ A, 2", 2, "already defined"),
    ("loop 2, x\nx: halt", 1, "loop end must be after"),
    ("loop 2, 9\nnop\nhalt", 1, "loop end must be after"),
    ("x: nop\nloop 2, x\nhalt", 2, "loop end must be after"),
    ("r1: nop", 1, "is a register"),
    (".word 1 << 128", 1, "a word must be in"),
])
def test_assembler_rejects_programs(src, line, reason):
    with pytest.raises(AsmError, match=reason) as e:
        assemble(src)
    assert e.value.line == line


# -- the same layout in gateware ------------------------------------------------------------------

def test_layout_drives_gateware():
    """A decoder written against `Instruction` sees the fields the Python encoder wrote."""
    from amaranth import Module, Signal
    from amaranth.sim import Simulator

    m = Module()
    word = Signal(Instruction)
    is_mat = Signal()
    rows = Signal(4)
    m.d.comb += [is_mat.eq(word.op.as_value()[4:6] == 3), rows.eq(word.ts.m1 + 1)]
    instr = decode(assemble("matqk.i16 r3+0x40, 0x100, r2, 0x80, r1+1, 8, 2")[0])
    vadd = assemble("vadd.i32.u16 0, 0, 0, 1")[0]
    seen = {}

    async def testbench(ctx):
        ctx.set(word.as_value(), encode(instr))
        seen["mat"], seen["rows"] = ctx.get(is_mat), ctx.get(rows)
        seen["op"], seen["td"] = ctx.get(word.op), ctx.get(word.td)
        seen["d"] = (ctx.get(word.d.reg), ctx.get(word.d.off))
        seen["n"] = (ctx.get(word.n.reg), ctx.get(word.n.imm))
        ctx.set(word.as_value(), vadd)
        seen["ts"] = ctx.get(word.ts.dtype)

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
    assert seen == {"mat": 1, "rows": 2, "op": Opcode.MATQK, "td": Dtype.I16, "d": (3, 0x40),
                    "n": (1, 1), "ts": Dtype.U16}
