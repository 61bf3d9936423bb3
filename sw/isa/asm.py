"""Text assembler and disassembler of tile programs.

Syntax (one instruction per line; ``docs/isa.md`` lists every opcode's operands)::

    ; a comment (also '#')
    .equ  WQ, 0x1000            ; a named constant (expressions allowed)
    start:                      ; a label: the index of the next instruction
        ld    r1, 0             ; scalar: r1 = SRAM32[0]
        loop  4, body_end       ; repeat the next instructions up to `body_end` 4 times
        vadd.i16.i16 r2+0x40, r2, 0x200, 64
        add   r2, r2+128, 0
    body_end:
        halt
        .word 0x0               ; a raw 128-bit word (not checked: for tests of illegal words)

A mnemonic carries its types as suffixes: ``op.td.ts`` for vector operations (destination,
then source type), ``op.td`` for matrix operations.  Operands are expressions of integers
(decimal, ``0x``, ``0b``), ``.equ`` names and labels with ``+ - * // << >> | &`` and
parentheses; an address or length operand may add one register (``r5+0x40``).  A SEND
rectangle is written ``(x0:x1, y0:y1)``, or ``(x, y)`` for one tile; a table by name
(``rsqrt``, ``exp2``, ``recip``, ``dynq``, ``sigmoid``).
"""

from __future__ import annotations

import ast
import re

from .core import (
    C_BITS,
    IMM_BITS,
    LEN_BITS,
    MAX_MATMUL_M,
    MNEMONICS,
    N_REGS,
    OFF_BITS,
    SPECS,
    Addr,
    Dtype,
    IllegalInstruction,
    Instr,
    Len,
    Opcode,
    TableId,
    decode,
    encode,
    rect_decode,
    rect_encode,
    signed_imm,
)

__all__ = ["AsmError", "assemble", "disassemble", "format_instr"]

_LABEL = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*:(.*)$")
_REG = re.compile(r"^[rR](\d+)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DTYPES = {t.name.lower(): t for t in Dtype}
_TABLES = {t.name.lower(): t for t in TableId}


class AsmError(ValueError):
    """A line of assembly text is wrong.

    Attributes
    ----------
    line : int
        1-based line number.
    text : str
        The offending line, stripped.
    reason : str
    """

    def __init__(self, line: int, text: str, reason: str):
        self.line, self.text, self.reason = line, text, reason
        super().__init__(f"line {line}: `{text}`: {reason}")


class _Err(Exception):
    """An error inside one line (turned into `AsmError` with the line)."""


def _reg_index(name: str) -> int | None:
    m = _REG.match(name)
    if not m:
        return None
    r = int(m.group(1))
    if r >= N_REGS:
        raise _Err(f"register `{name}` does not exist (r0 .. r{N_REGS - 1})")
    return r


def _eval(text: str, symbols: dict) -> tuple[int | None, int]:
    """Evaluate an operand expression: ``(register or None, integer)``."""
    text = text.strip()
    if not text:
        raise _Err("empty operand")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise _Err(f"cannot parse operand `{text}`") from None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return None, node.value
        if isinstance(node, ast.Name):
            r = _reg_index(node.id)
            if r is not None:
                return r, 0
            if node.id not in symbols:
                raise _Err(f"undefined symbol `{node.id}`")
            return None, symbols[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            r, v = ev(node.operand)
            if r is not None:
                raise _Err(f"a register cannot be negated in `{text}`")
            return None, -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            (ra, va), (rb, vb) = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                if ra is not None and rb is not None:
                    raise _Err(f"at most one register in `{text}`")
                return (ra if ra is not None else rb), va + vb
            if ra is not None and isinstance(node.op, ast.Sub) and rb is None:
                return ra, va - vb
            if ra is not None or rb is not None:
                raise _Err(f"a register can only be added to a constant in `{text}`")
            ops = {ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
                   ast.FloorDiv: lambda a, b: a // b, ast.LShift: lambda a, b: a << b,
                   ast.RShift: lambda a, b: a >> b, ast.BitOr: lambda a, b: a | b,
                   ast.BitAnd: lambda a, b: a & b}
            for kind, fn in ops.items():
                if isinstance(node.op, kind):
                    try:
                        return None, fn(va, vb)
                    except (ZeroDivisionError, ValueError) as e:
                        raise _Err(f"cannot evaluate `{text}`: {e}") from None
        raise _Err(f"unsupported expression `{text}`")

    return ev(tree)


def _const(text: str, symbols: dict, what: str) -> int:
    r, v = _eval(text, symbols)
    if r is not None:
        raise _Err(f"{what} must be a constant, not `{text.strip()}`")
    return v


def _bounded(v: int, bits: int, what: str, lo: int = 0) -> int:
    if not lo <= v < (1 << bits):
        raise _Err(f"{what} must be in [{lo}, {(1 << bits) - 1}], not {v}")
    return v


def _split_operands(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    last = "".join(cur).strip()
    if last or out:
        out.append(last)
    return out


def _parse_rect(text: str, symbols: dict) -> int:
    t = text.strip()
    if not (t.startswith("(") and t.endswith(")")):
        raise _Err(f"a rectangle is written (x0:x1, y0:y1) or (x, y), not `{t}`")
    parts = _split_operands(t[1:-1])
    if len(parts) != 2:
        raise _Err(f"a rectangle has an x range and a y range, not `{t}`")
    bounds = []
    for p in parts:
        lo_hi = p.split(":")
        if len(lo_hi) > 2:
            raise _Err(f"bad range `{p}` in `{t}`")
        vals = [_const(v, symbols, "a coordinate") for v in lo_hi]
        bounds.append((vals[0], vals[-1]))
    try:
        return rect_encode(bounds[0][0], bounds[0][1], bounds[1][0], bounds[1][1])
    except ValueError as e:
        raise _Err(str(e)) from None


def _parse_instr(mnemonic: str, operand_text: str, symbols: dict, pc: int, n_words: int
                 ) -> Instr:
    parts = mnemonic.lower().split(".")
    op = MNEMONICS.get(parts[0])
    if op is None:
        raise _Err(f"unknown mnemonic `{parts[0]}`")
    spec = SPECS[op]
    want = (spec.td is not None) + isinstance(spec.ts, frozenset)
    suffixes = parts[1:]
    if len(suffixes) != want:
        form = spec.mnemonic + (".td" if spec.td is not None else "") + (
            ".ts" if isinstance(spec.ts, frozenset) else "")
        raise _Err(f"`{spec.mnemonic}` takes {want} type suffix(es) ({form}), "
                   f"not {len(suffixes)}")
    types = []
    for s in suffixes:
        if s not in _DTYPES:
            raise _Err(f"unknown type `{s}` (one of {', '.join(_DTYPES)})")
        types.append(_DTYPES[s])
    fields = dict(td=Dtype.I8, ts=0, d=Addr(), a=Addr(), b=Addr(), n=Len(), c=0, imm=0)
    if spec.td is not None:
        fields["td"] = types[0]
    if isinstance(spec.ts, frozenset):
        fields["ts"] = types[1].value
    ops = _split_operands(operand_text)
    if len(ops) != len(spec.operands):
        raise _Err(f"`{spec.mnemonic}` takes {len(spec.operands)} operand(s) "
                   f"({', '.join(spec.operands) or 'none'}), not {len(ops)}")
    for kind, text in zip(spec.operands, ops, strict=True):
        if kind == "rd":
            r = _reg_index(text)
            if r is None:
                raise _Err(f"expected a register, not `{text}`")
            fields["d"] = Addr(r, 0)
        elif kind in ("D", "A", "B"):
            r, v = _eval(text, symbols)
            fields[kind.lower()] = Addr(r or 0, _bounded(v, OFF_BITS, "an address offset"))
        elif kind == "N":
            r, v = _eval(text, symbols)
            fields["n"] = Len(r or 0, _bounded(v, LEN_BITS, "a length"))
        elif kind == "C":
            fields["c"] = _bounded(_const(text, symbols, "operand c"), C_BITS, "operand c")
        elif kind == "CNT":
            fields["c"] = _bounded(_const(text, symbols, "a counter"), C_BITS, "a counter")
        elif kind == "TGT":
            t = _const(text, symbols, "a loop end")
            if not pc + 1 < t <= n_words:
                raise _Err(f"a loop end must be after the loop's first body instruction and at "
                           f"most the end of the program ({pc + 2} .. {n_words}), not {t}")
            fields["c"] = t
        elif kind == "TAB":
            name = text.strip().lower()
            if name in _TABLES:
                fields["c"] = _TABLES[name].value
            else:
                fields["c"] = _bounded(_const(text, symbols, "a table"), C_BITS, "a table")
        elif kind == "I":
            fields["imm"] = _bounded(_const(text, symbols, "an immediate"), IMM_BITS,
                                     "an immediate")
        elif kind == "SI":
            v = _const(text, symbols, "a signed immediate")
            lim = 1 << (IMM_BITS - 1)
            if not -lim <= v < lim:
                raise _Err(f"a signed immediate must be in [{-lim}, {lim - 1}], not {v}")
            fields["imm"] = v & ((1 << IMM_BITS) - 1)
        elif kind == "V32":
            v = _const(text, symbols, "a value")
            if not -(1 << 31) <= v < (1 << 32):
                raise _Err(f"a 32-bit value must be in [-2**31, 2**32), not {v}")
            v &= 0xFFFFFFFF
            fields["imm"], fields["c"] = v & 0xFFFF, v >> 16
        elif kind == "RECT":
            fields["imm"] = _parse_rect(text, symbols)
        elif kind == "M":
            m = _const(text, symbols, "M")
            if not 1 <= m <= MAX_MATMUL_M:
                raise _Err(f"M must be in [1, {MAX_MATMUL_M}], not {m}")
            fields["ts"] = m - 1
        else:  # pragma: no cover - table of kinds is closed
            raise AssertionError(kind)
    return Instr(op, **fields)


def _strip_comment(line: str) -> str:
    for mark in (";", "#"):
        i = line.find(mark)
        if i >= 0:
            line = line[:i]
    return line.strip()


def assemble(text: str, symbols: dict | None = None, symbols_out: dict | None = None
             ) -> list[int]:
    """Assemble a tile program.

    Parameters
    ----------
    text : str
        Assembly source (see the module docstring and ``docs/isa.md``).
    symbols : dict of str to int, optional
        Predefined constants (as ``.equ``).
    symbols_out : dict, optional
        Filled with every symbol after assembly: labels (instruction indices), ``.equ``
        constants and `symbols` (how a host finds an entry point by name).

    Returns
    -------
    list of int
        128-bit instruction words, one per instruction or ``.word``.

    Raises
    ------
    AsmError
        For an unknown mnemonic, a wrong number of operands or type suffixes, an undefined or
        duplicate symbol, a field that does not fit, a type the opcode does not allow, or a
        bad loop end; the message names the line number and its text.
    """
    syms = dict(symbols or {})
    labels = set()
    items = []   # (lineno, stripped text, kind, payload)
    pc = 0
    lines = text.splitlines()
    for lineno, raw in enumerate(lines, 1):
        body = _strip_comment(raw)
        shown = raw.strip()
        try:
            while True:
                m = _LABEL.match(body)
                if not m:
                    break
                name = m.group(1)
                if name in syms or _REG.match(name):
                    raise _Err(f"symbol `{name}` is already defined or is a register")
                syms[name] = pc
                labels.add(name)
                body = m.group(2).strip()
            if not body:
                continue
            head, *tail = body.split(None, 1)
            rest = tail[0].strip() if tail else ""
            if head.lower() == ".equ":
                ops = _split_operands(rest)
                if len(ops) != 2 or not _NAME.match(ops[0]) or _REG.match(ops[0]):
                    raise _Err("`.equ` takes a name and a value: .equ NAME, value")
                if ops[0] in syms:
                    raise _Err(f"symbol `{ops[0]}` is already defined")
                syms[ops[0]] = _const(ops[1], syms, "an .equ value")
                continue
            if head.lower() == ".word":
                items.append((lineno, shown, "word", rest))
            elif head.startswith("."):
                raise _Err(f"unknown directive `{head}`")
            else:
                items.append((lineno, shown, "instr", (head, rest)))
            pc += 1
        except _Err as e:
            raise AsmError(lineno, shown, str(e)) from None

    words = []
    for index, (lineno, shown, kind, payload) in enumerate(items):
        try:
            if kind == "word":
                v = _const(payload, syms, "a word")
                if not 0 <= v < (1 << 128):
                    raise _Err(f"a word must be in [0, 2**128), not {v}")
                words.append(v)
            else:
                instr = _parse_instr(payload[0], payload[1], syms, index, len(items))
                words.append(encode(instr))
        except (_Err, IllegalInstruction) as e:
            raise AsmError(lineno, shown, str(e)) from None
    if symbols_out is not None:
        symbols_out.update(syms)
    return words


# -- disassembly ---------------------------------------------------------------------------------

def _fmt_addr(a: Addr) -> str:
    if a.reg == 0:
        return f"{a.off:#x}"
    return f"r{a.reg}" if a.off == 0 else f"r{a.reg}+{a.off:#x}"


def _fmt_len(n: Len) -> str:
    if n.reg == 0:
        return str(n.imm)
    return f"r{n.reg}" if n.imm == 0 else f"r{n.reg}+{n.imm}"


def format_instr(instr: Instr, labels: dict | None = None) -> str:
    """Return the canonical assembly text of one instruction.

    Parameters
    ----------
    instr : Instr
    labels : dict of int to str, optional
        Names of instruction addresses (loop ends); absent ones print as numbers.
    """
    spec = SPECS[instr.op]
    name = spec.mnemonic
    if spec.td is not None:
        name += "." + instr.td.name.lower()
    if isinstance(spec.ts, frozenset):
        name += "." + Dtype(instr.ts).name.lower()
    out = []
    for kind in spec.operands:
        if kind == "rd":
            out.append(f"r{instr.d.reg}")
        elif kind in ("D", "A", "B"):
            out.append(_fmt_addr(getattr(instr, kind.lower())))
        elif kind == "N":
            out.append(_fmt_len(instr.n))
        elif kind in ("C",):
            out.append(str(instr.c) if instr.c < 256 else f"{instr.c:#x}")
        elif kind == "CNT":
            out.append(str(instr.c))
        elif kind == "TGT":
            out.append((labels or {}).get(instr.c, str(instr.c)))
        elif kind == "TAB":
            out.append(TableId(instr.c).name.lower())
        elif kind == "I":
            out.append(str(instr.imm))
        elif kind == "SI":
            out.append(str(signed_imm(instr.imm)))
        elif kind == "V32":
            out.append(f"{instr.c << 16 | instr.imm:#x}")
        elif kind == "RECT":
            x0, x1, y0, y1 = rect_decode(instr.imm)
            out.append(f"({x0}, {y0})" if (x0, y0) == (x1, y1) else f"({x0}:{x1}, {y0}:{y1})")
        elif kind == "M":
            out.append(str(instr.m))
    return f"{name} {', '.join(out)}".rstrip()


def disassemble(words) -> str:
    """Return the assembly text of a program, one instruction per line.

    Loop ends get labels ``L<index>``; a word that is not a legal instruction is printed as
    ``.word`` with the reason in a comment.  ``assemble(disassemble(words)) == words``.

    Parameters
    ----------
    words : sequence of int
        128-bit instruction words.

    Returns
    -------
    str
    """
    decoded = []
    for w in words:
        try:
            decoded.append(decode(w))
        except IllegalInstruction as e:
            decoded.append(e)
    for index, i in enumerate(decoded):
        if isinstance(i, Instr) and i.op == Opcode.LOOP and not index + 1 < i.c <= len(words):
            decoded[index] = IllegalInstruction(f"loop end {i.c} outside this program")
    targets = {i.c for i in decoded if isinstance(i, Instr) and i.op == Opcode.LOOP}
    labels = {t: f"L{t}" for t in targets}
    lines = []
    for index, (w, i) in enumerate(zip(words, decoded, strict=True)):
        if index in labels:
            lines.append(f"{labels[index]}:")
        if isinstance(i, Instr):
            lines.append(f"    {format_instr(i, labels):<56s} ; {index}")
        else:
            lines.append(f"    .word {int(w):#034x} ; {index}: illegal: {i}")
    for t in sorted(targets):
        if t >= len(words):
            lines.append(f"{labels[t]}:")
    return "\n".join(lines) + "\n"
