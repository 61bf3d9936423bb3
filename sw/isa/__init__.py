"""The tile instruction set (``docs/isa.md``): one definition for gateware, tools and simulator.

``chipotle.isa.core``
    The 128-bit instruction word (`Instruction`, an ``amaranth.lib.data.Struct``), the opcodes
    (`Opcode`), element types (`Dtype`), tables (`TableId`), error codes (`ErrorCode`), the
    operand rules of every opcode (`SPECS`), `encode` / `decode`, the tile parameters
    (`IsaConfig`) and the cycle estimate (`instr_cycles`).
``chipotle.isa.asm``
    `assemble`, `disassemble`, `format_instr`.
``chipotle.isa.programs``
    The seed of the compiler: one transformer layer laid out in one tile's SRAM, and its
    decode-step program.

The ISA-level simulator is `chipotle.isasim`.
"""

from .asm import AsmError, assemble, disassemble, format_instr
from .core import (
    INSTR_BITS,
    INSTR_BYTES,
    N_REGS,
    SPECS,
    TABLE_ENTRIES,
    Addr,
    CostModel,
    Dtype,
    ErrorCode,
    IllegalInstruction,
    Instr,
    Instruction,
    IsaConfig,
    Len,
    Opcode,
    OpSpec,
    TableId,
    decode,
    encode,
    instr_cycles,
    rect_decode,
    rect_encode,
)

__all__ = [
    "INSTR_BITS", "INSTR_BYTES", "N_REGS", "SPECS", "TABLE_ENTRIES",
    "Addr", "Len", "Instr", "Instruction", "Opcode", "OpSpec", "Dtype", "TableId", "ErrorCode",
    "IllegalInstruction", "IsaConfig", "CostModel",
    "encode", "decode", "instr_cycles", "rect_encode", "rect_decode",
    "AsmError", "assemble", "disassemble", "format_instr",
]
