"""The controller's instruction pre-decode (``controller.predecode``) against a software decode.

Every 6-bit opcode value (the reserved ones included) with random field values: the 16
pre-decoded bits the controller stores beside each instruction word must equal what the
ISA's software decoder (``chipotle.isa.core.decode``, ``SCALAR_OPS``, ``MATRIX_OPS``,
``is_decode_op``) says about the word.  Amaranth's Python simulator, a few seconds.
"""

from __future__ import annotations

import random

from amaranth import Elaboratable, Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from chipotle.hw.tile.controller import Predecode, predecode
from chipotle.isa.core import (
    _FIELD_MASKS,
    _FIELD_OFFSETS,
    MATRIX_OPS,
    SCALAR_OPS,
    SPECS,
    IllegalInstruction,
    Instruction,
    Opcode,
    decode,
    is_decode_op,
)

IMEM_WORDS = 1000
N_COUNTERS = 12
_LAYOUT = data.Layout.cast(Predecode)


def soft_predecode(word: int, imem_words: int = IMEM_WORDS,
                   n_counters: int = N_COUNTERS) -> dict[str, int]:
    """The `Predecode` fields of a 128-bit word, from the software decoder.

    Returns
    -------
    dict
        Field name -> value (``need``: 4 bits, matrix, vector, net, KV entries).
    """
    out = {name: 0 for name, _ in _LAYOUT}
    try:
        i = decode(word)
    except IllegalInstruction:
        return out
    op = i.op
    issue = is_decode_op(op)
    if op in SCALAR_OPS or issue:
        need = 0                          # never wait / wait in state Issue
    elif op in MATRIX_OPS:
        need = 0b1001 if op == Opcode.KVQK else 0b0001   # the matrix (and KV) entry
    else:
        need = 0b1111                     # SEND, DONE, WAIT, HALT: every entry
    out.update(
        legal=1, issue=int(issue), mat=int(op in MATRIX_OPS), need=need,
        simple=int(op in (Opcode.NOP, Opcode.LI, Opcode.ADD, Opcode.SUB, Opcode.MUL)),
        halt=int(op == Opcode.HALT), loop=int(op == Opcode.LOOP),
        wait=int(op == Opcode.WAIT), wait_bad=int(op == Opcode.WAIT and i.c >= n_counters),
        net=int(op in (Opcode.SEND, Opcode.DONE)), send=int(op == Opcode.SEND),
        loop_far=int(op == Opcode.LOOP and i.c > imem_words))
    return out


class _Dut(Elaboratable):
    def __init__(self):
        self.ins = Signal(Instruction)
        self.pd = Signal(Predecode)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.pd.eq(predecode(m, self.ins, imem_words=IMEM_WORDS,
                                         n_counters=N_COUNTERS))
        return m


def _random_word(rng: random.Random, opv: int) -> int:
    """A word with opcode `opv`: mostly the opcode's own fields set (`SPECS`: random values,
    small ``c`` and ``imm`` often, ``td`` / ``ts`` from its type sets often) and the others
    zero, so that each legality rule is met and missed."""
    try:
        spec = SPECS[Opcode(opv)]
        used = spec.fields
    except ValueError:                    # a reserved opcode
        spec, used = None, frozenset()
    word = opv
    for name, off in _FIELD_OFFSETS.items():
        if name == "op" or rng.random() < (0.2 if name in used else 0.9):
            continue
        mask = _FIELD_MASKS[name]
        sets = {"td": spec and spec.td, "ts": spec and spec.ts}.get(name)
        if isinstance(sets, frozenset) and rng.random() < 0.8:
            v = rng.choice(sorted(t.value for t in sets))
        elif name in ("c", "imm", "ts") and rng.random() < 0.7:
            v = rng.randrange(min(mask + 1, 2 * IMEM_WORDS))
        else:
            v = rng.randrange(mask + 1)
        word |= v << off
    return word


def test_predecode_matches_software_decode():
    rng = random.Random(9)
    words = [_random_word(rng, opv) for opv in range(64) for _ in range(120)]
    # edges of the WAIT counter and the LOOP end checks
    c = _FIELD_OFFSETS["c"]
    for v in (N_COUNTERS - 1, N_COUNTERS, IMEM_WORDS, IMEM_WORDS + 1):
        words += [Opcode.WAIT.value | v << c, Opcode.LOOP.value | v << c]
    dut = _Dut()
    got = []

    async def bench(ctx):
        for w in words:
            ctx.set(dut.ins.as_value(), w)
            got.append({name: ctx.get(dut.pd[name]) for name, _ in _LAYOUT})

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    legal_ops, illegal_ops = set(), set()
    for w, g in zip(words, got, strict=True):
        want = soft_predecode(w)
        assert g == want, f"word {w:#034x}: pre-decode {g}, software {want}"
        (legal_ops if want["legal"] else illegal_ops).add(w & 63)
    # every opcode was seen legal and illegal (the test exercises each legality rule)
    assert legal_ops == {o.value for o in Opcode}, sorted({o.value for o in Opcode} - legal_ops)
    assert illegal_ops == set(range(64))
    # every class bit was seen set
    for name, _ in _LAYOUT:
        if not name.startswith("_"):
            assert any(g[name] for g in got), name
