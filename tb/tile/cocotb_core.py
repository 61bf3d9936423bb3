"""cocotb bench of the tile core (controller, matrix unit and write-back) against the ISA simulator.

Each case is a program assembled with ``chipotle.isa.assemble`` and an SRAM image (random
background, operands placed on it); ``CoreBench.check_program`` runs both on the RTL and on
``chipotle.isasim`` and compares the whole SRAM, state, error code, PC, counters, DONE codes
and instructions retired.

Environment: ``TILE_CONFIG`` (a key of ``tbcore.CORE_CONFIGS``), ``SEED``, ``CYCLES_JSON``
(where to write the measured cycles).
"""

from __future__ import annotations

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge
from tbcore import CORE_CONFIGS, CoreBench

from chipotle.golden import numerics as nx
from chipotle.hw.tile.controller import ControllerState
from chipotle.isa import assemble
from chipotle.isa.core import ErrorCode, Instr, Len, Opcode, encode
from chipotle.isa.kv import KvLayout

CFG = CORE_CONFIGS[os.environ.get("TILE_CONFIG", "core_small")]
SEED = int(os.environ.get("SEED", "1"))
ISA = CFG.isa_config()
W = CFG.word_bytes
M = CFG.max_m
SIZE = CFG.sram_bytes


async def _bench(dut, seed=SEED):
    tb = CoreBench(dut, CFG, seed=seed)
    await tb.start()
    return tb


def _dump(tb):
    path = os.environ.get("CYCLES_JSON")
    if path:
        old = json.loads(open(path).read()) if os.path.exists(path) else []
        with open(path, "w") as f:
            json.dump(old + tb.results, f, indent=1)


@cocotb.test()
async def scalar_loops_copy(dut):
    """Scalar arithmetic (wrapping, r0), LD/ST, nested/zero/dynamic loops, COPY, DONE."""
    tb = await _bench(dut)
    await tb.check_program("scalar", """
        li   r1, 0xfffffffe
        add  r2, r1+3, 0            ; wraps to 1
        sub  r3, 0, r2+1            ; -2
        mul  r4, r1, 0xffff
        li   r0, 99                 ; ignored
        add  r5, r0+7, 0
        li   r15, 0x8000ffff
        st   0x100, r5+0x1000
        ld   r6, 0x100
        st   0x104, r3
        st   0x108, r4
        st   0x10c, r2
        add  r7, r6+0x1ffff, r15+0x1ffff
        sub  r8, r7, r15+5
        st   0x110, r7
        st   0x114, r8
        st   r1+0x11a, r15          ; 0xfffffffe + 0x11a wraps to 0x118
        ld   r9, r1+0x10e           ; 0x10c
        st   0x11c, r9
        ld   r10, 0x4               ; from the random background
        st   0x120, r10+1
        mul  r11, r1+0x1235, 0x3f1  ; (r + off) * imm, r + off wrapping
        st   0x128, r11
        done 0xbeef
        st   0x124, r0
        halt
    """)
    # a reset clears r1 .. r15 (LUT RAM, written with 0 in the cycles after a reset):
    # every register made non-zero, then, after check_program's reset, each one stored
    await tb.check_program("fill", """
        li   r1, 0x1111
        li   r2, 0x2222
        li   r3, 0x3333
        li   r4, 0x4444
        li   r5, 0x5555
        li   r6, 0x6666
        li   r7, 0x7777
        li   r8, 0x8888
        li   r9, 0x9999
        li   r10, 0xaaaa
        li   r11, 0xbbbb
        li   r12, 0xcccc
        li   r13, 0xdddd
        li   r14, 0xeeee
        li   r15, 0xffff
        halt
    """)
    await tb.check_program("cleared_by_reset", """
        st   0x304, r1
        st   0x308, r2
        st   0x30c, r3
        st   0x310, r4
        st   0x314, r5
        st   0x318, r6
        st   0x31c, r7
        st   0x320, r8
        st   0x324, r9
        st   0x328, r10
        st   0x32c, r11
        st   0x330, r12
        st   0x334, r13
        st   0x338, r14
        st   0x33c, r15
        halt
    """)
    await tb.check_program("loops", """
        li    r1, 0x100
        li    r9, 3
        loop  r9+1, outer           ; 4 times
        loop  2, inner              ; 2 times
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
        loop  r0, never             ; a zero count from a register
        st    0x204, 7
    never:
        loop  2, a
        loop  2, a
        loop  3, a                  ; three levels ending at once
        add   r3, r3+1, 0
        st    0x208, r3
    a:
        loop  5, b
        add   r4, r4+1, 0
    b:
        st    0x20c, r4
        loop  3, z                  ; 3 times
        add   r5, r5+1, 0
        loop  r0, z                 ; never runs: skips to z, the end of the loop around it
        add   r5, r5+100, 0
    z:
        st    0x210, r5
        li    r11, 0xfffffffb       ; -5
        loop  r11+5, wrapz          ; -5 + 5 wraps to 0: never runs (neither part is 0)
        st    0x214, 7
    wrapz:
        loop  r11+7, wrap2          ; 2 times (the sum carries through every bit)
        add   r6, r6+1, 0
    wrap2:
        st    0x218, r6
        done  1
        done  2
        halt
    """)
    await tb.check_program("copy", """
        copy  0x400, 0x100, 32      ; aligned
        copy  0x503, 0x101, 13      ; unaligned, different offsets
        copy  0x602, 0x600, 21      ; overlapping, forwards source below destination
        copy  0x700, 0x703, 17      ; overlapping, destination below source
        copy  0x7f0, 0x100, 0       ; nothing
        halt
    """)
    # word steps: source and destination at a common word boundary (in the direction of the
    # copy), with head and tail bytes around the words, overlapping both ways
    await tb.check_program("copy words", f"""
        copy  {0x400 + 3:#x}, {0x100 + 3:#x}, {3 * W + 5}       ; same offset: head, words, tail
        copy  {0x500 + W:#x}, 0x500, {4 * W + 3}      ; backward, overlapping by words
        copy  {0x600 + 5:#x}, {0x600 + W + 5:#x}, {4 * W + 1}  ; forward, overlapping by words
        copy  {0x700 + 2:#x}, {0x700 + 2 - 2 * W:#x}, {3 * W - 2}  ; backward, end aligned
        copy  0x780, 0x100, {W - 1}                  ; less than a word
        halt
    """)
    await tb.check_program("copy 96 aligned", "copy 0x400, 0x100, 96\nhalt")
    # started at a PC other than 0, after a DONE, with loop bodies of one instruction
    await tb.check_program("start_pc", """
        halt
        li    r1, 0x200
        loop  6, e
        add   r1, r1+4, 0
    e:  st    r1, r1
        halt
    """, pc=1)
    _dump(tb)


def _records(tb, rows):
    """Return record bytes of int8 `rows` with random codes (mu, b), and the codes."""
    n, K = rows.shape
    rec = ISA.record_bytes(K)
    out = tb.np_rng.integers(0, 256, (n, rec)).astype(np.uint8)
    mu = tb.np_rng.integers(-2 ** 15, 2 ** 15, n).astype(np.int16)
    b = tb.np_rng.integers(-8, 12, n).astype(np.int16)
    out[:, 0:2] = mu.view(np.uint8).reshape(n, 2)
    out[:, 2:4] = b.view(np.uint8).reshape(n, 2)
    out[:, W:W + K] = rows.view(np.uint8)
    return out.reshape(-1)


def _plain(tb, rows):
    n, K = rows.shape
    out = tb.np_rng.integers(0, 256, (n, ISA.pad(K))).astype(np.uint8)
    out[:, :K] = rows.view(np.uint8)
    return out.reshape(-1)


def _operands(tb, shape, fill):
    if fill == "random":
        return tb.np_rng.integers(-128, 128, shape).astype(np.int8)
    if fill == "min":
        return np.full(shape, -128, np.int8)
    if fill == "max":
        return np.full(shape, 127, np.int8)
    if fill == "zero":
        return np.zeros(shape, np.int8)
    if fill == "alt":                   # -128 / 127 rows: the largest magnitudes
        a = np.full(shape, -128, np.int8)
        a[1::2] = 127
        return a
    raise ValueError(fill)


def _matrix_case(tb, op, m, n, k, td, fill_x, fill_w, *, small_codes=False):
    """Return (program, image) of one matrix instruction with operands in SRAM."""
    image = tb.image()
    x = _operands(tb, (m, k), fill_x)
    w = _operands(tb, (n, k), fill_w)
    xa = 0
    xb = _plain(tb, x) if op == "matraw" else _records(tb, x)
    if small_codes:     # keep |acc * mu_x * mu_w| < 2**46 for MATQK
        rec = ISA.record_bytes(k)
        for r in range(m):
            image_mu = tb.np_rng.integers(-300, 300)
            xb[r * rec:r * rec + 2] = np.array([image_mu], "<i2").view(np.uint8)
    wa = ISA.pad(xa + xb.size + 8 * W)
    wb = _records(tb, w) if op == "matqk" else _plain(tb, w)
    if op == "matqk":
        rec = ISA.record_bytes(k)
        for r in range(n):
            wb[r * rec:r * rec + 2] = np.array([tb.np_rng.integers(-300, 300)],
                                               "<i2").view(np.uint8)
    ca = ISA.pad(wa + wb.size + W)
    mult = tb.np_rng.integers(0, 2 ** 16, n)
    mult[:2] = [0, 65535][:n] if n >= 2 else mult[:1]
    shift = tb.np_rng.integers(30, 70, n)
    shift[0] = 63 if n > 2 else shift[0]
    if op == "matqk":
        shift[:] = tb.np_rng.integers(12, 40)
    ms = np.stack([mult, shift], 1).astype("<u2").reshape(-1).view(np.uint8)
    ya = ISA.pad(ca + ms.size + W)
    es = {"i8": 1, "i16": 2, "i32": 4}[td]
    assert ya + (m - 1) * ISA.pad(n * es) + n * es <= SIZE, (op, m, n, k)
    image[xa:xa + xb.size] = xb
    image[wa:wa + wb.size] = wb
    image[ca:ca + ms.size] = ms
    if op == "matraw":
        prog = f"matraw.i32 {ya:#x}, {xa:#x}, {wa:#x}, {n}, {k}, {m}\nhalt"
    else:
        prog = f"{op}.{td} {ya:#x}, {xa:#x}, {wa:#x}, {ca:#x}, {n}, {k}, {m}\nhalt"
    return prog, image


def _matrix_cases():
    kmax = CFG.k_max
    cases = [
        ("matmul", 1, 1, 1, "i8", "random", "random"),           # K = 1, M = 1, N = 1
        ("matmul", M, 5, 1, "i16", "alt", "min"),
        ("matmul", M, 7, W, "i32", "min", "max"),
        ("matmul", 1, 9, W + 1, "i8", "max", "max"),
        ("matmul", M, 3, 172 if kmax >= 172 else kmax, "i16", "random", "random"),
        ("matmul", M, 2, kmax, "i32", "min", "min"),             # K = k_max, the largest sums
        ("matmul", 2 if M > 1 else 1, 11, 13, "i8", "random", "alt"),
        ("matmul", M, 4, 3 * W, "i16", "zero", "random"),
        ("matraw", 1, 4, 1, "i32", "min", "min"),
        ("matraw", M, 6, 172 if kmax >= 172 else kmax, "i32", "alt", "max"),
        ("matraw", M, 3, kmax, "i32", "min", "alt"),
        ("matqk", 1, 1, 1, "i32", "random", "random"),
        ("matqk", M, 12, 8, "i32", "random", "random"),
        ("matqk", 2 if M > 1 else 1, 5, 13, "i16", "alt", "random"),
        ("matqk", M, 3, 2 * W + 3, "i8", "random", "min"),
    ]
    return cases


@cocotb.test()
async def matrix(dut):
    """MATMUL / MATQK / MATRAW: extremes, K = 1, 172, k_max, K % W != 0, M = 1 and M = max."""
    tb = await _bench(dut)
    for op, m, n, k, td, fx, fw in _matrix_cases():
        prog, image = _matrix_case(tb, op, m, n, k, td, fx, fw, small_codes=op == "matqk")
        res = await tb.check_program(f"{op}.{td} M={m} N={n} K={k} {fx}/{fw}", prog, image,
                                     expect=ErrorCode.NONE)
        assert res["mac_cycles"] == n * -(-k // W), res
        # the cost model (`chipotle.isa.matrix_cycles`) is exact for the unit and its
        # write-back when nothing else uses the SRAM port
        assert res["matrix_cycles"] == res["est_matrix_cycles"], res
    # MATQK rows whose shifts straddle 62 on products near the 2**46 bound (acc 8 x 127**2,
    # mu = 19,500**2, m = 65,535: y = 1 at sh = 62, 0 at sh > 62): each element is shifted
    # by its own sh, not by that of the element behind it in the write-back's stages
    if M > 1:
        for b_rows in ((0, -1), (-1, 0)):
            prog, image = _matrix_case(tb, "matqk", 2, 1, 8, "i32", "max", "max")
            ya, xa, wa, ca = (int(v, 0) for v in prog.split(None, 1)[1].split(",")[:4])
            rec = ISA.record_bytes(8)
            for r, b in enumerate(b_rows):
                image[xa + r * rec:xa + r * rec + 4] = np.array([19500, b], "<i2").view(np.uint8)
            image[wa:wa + 4] = np.array([19500, 0], "<i2").view(np.uint8)
            image[ca:ca + 4] = np.array([65535, 62], "<u2").view(np.uint8)
            res = await tb.check_program(f"matqk.i32 M=2 rows at sh = {62 - b_rows[0]}, "
                                         f"{62 - b_rows[1]}", prog, image,
                                         expect=ErrorCode.NONE)
            got = tb._rtl_image
            y = [int(got[ya + r * W:ya + r * W + 4].view("<i4")[0]) for r in range(2)]
            assert y == [int(b == 0) for b in b_rows], (y, res)      # the case is as meant
    # write-back bound instructions (R = ceil(K / W) below the write-back's 1 + m cycles per
    # result, or equal: the next result offered just at the last write) with a vector
    # instruction on the same read/write port in the background: side words and writes
    # granted late, results not taken at the last write
    for op, m, n, k, td in [("matqk", M, 12, W, "i32"), ("matmul", M, 7, W, "i8"),
                            ("matraw", M, 6, 1, "i32"), ("matqk", 1, 9, 2 * W, "i16")]:
        prog, image = _matrix_case(tb, op, m, n, k, td, "random", "random",
                                   small_codes=op == "matqk")
        line = prog.splitlines()[0]
        ya, ca = (int(v, 0) for v in line.split(None, 1)[1].split(",")[0:4:3])
        if op == "matqk":   # s - b_x - b_w >= 0 whatever the records' exponents (< 12 each)
            image[ca + 2:ca + 4] = np.array([24], "<u2").view(np.uint8)
        es = {"i8": 1, "i16": 2, "i32": 4}[td]
        free = ISA.pad(ya + (m - 1) * ISA.pad(n * es) + n * es + W)
        vn = 32                                         # i16 elements: A, B and D at free
        assert free + 6 * vn <= SIZE, (op, free)
        vec = f"vadd.i16.i16 {free + 4 * vn:#x}, {free:#x}, {free + 2 * vn:#x}, {vn}"
        res = await tb.check_program(f"{op}.{td} M={m} N={n} K={k} under a vadd",
                                     f"{line}\n{vec}\nhalt", image, expect=ErrorCode.NONE)
        if CFG.overlap:     # the vadd runs alongside and takes grants from the write-back
            assert res["matrix_cycles"] > res["est_matrix_cycles"], res
        else:
            assert res["matrix_cycles"] == res["est_matrix_cycles"], res
    _dump(tb)


NOP = encode(Instr(Opcode.NOP))


def _loop(n, end):
    return encode(Instr(Opcode.LOOP, n=Len(0, n), c=end))


def _error_cases():
    top = SIZE
    n_cnt = CFG.n_counters
    depth = CFG.loop_depth
    nest = "".join("loop 2, l1\n" for _ in range(depth + 1)) + "nop\nl1: nop"
    return [
        (".word 0", ErrorCode.ILLEGAL),
        (".word 0x3f", ErrorCode.ILLEGAL),                                  # reserved opcode
        (".word 0x1 | 1 << 6", ErrorCode.ILLEGAL),                          # nop with td != 0
        (".word 0x1 | 1 << 112", ErrorCode.ILLEGAL),                        # nop with imm != 0
        (".word 0x4 | 1 << 111", ErrorCode.ILLEGAL),                        # li, c >= 2**16
        (".word 16 | 7 << 6", ErrorCode.ILLEGAL),                           # vadd, td = 7
        (".word 48", ErrorCode.ILLEGAL),                                    # matmul, K = 0
        (".word 12 | 0x0012 << 112", ErrorCode.ILLEGAL),                    # send, x0 > x1
        ("nop\nnop\n.word 13 | 5 << 95", ErrorCode.ILLEGAL),                # table id 5
        (f"copy {top - 8:#x}, 0, 9", ErrorCode.SRAM_RANGE),
        ("li r1, 0xffffffff\ncopy r1, 0, 1", ErrorCode.SRAM_RANGE),
        (f"ld r1, {top:#x}", ErrorCode.SRAM_RANGE),
        ("ld r1, 0x2", ErrorCode.ALIGN),
        (f"li r2, {top:#x}\nst r2, r1", ErrorCode.SRAM_RANGE),
        ("st 0x6, r1", ErrorCode.ALIGN),
        (f"matmul.i16 0x80, {W // 2:#x}, 0x100, 0x0, 4, 8, 1", ErrorCode.ALIGN),
        (f"matmul.i16 0x80, 0x0, 0x100, 0x0, 4, 8, {M + 1}" if M < 8 else ".word 0",
         ErrorCode.SHAPE if M < 8 else ErrorCode.ILLEGAL),
        (f"matmul.i16 0x80, 0x0, 0x100, 0x0, 4, {CFG.k_max + 1}, 1", ErrorCode.SHAPE),
        ("matmul.i16 0x80, 0x0, 0x100, 0x0, 0, 8, 1", ErrorCode.SHAPE),
        ("matmul.i16 0x80, 0x0, 0x100, 0x2, 2, 8, 1", ErrorCode.ALIGN),      # table alignment
        (f"matmul.i16 0x80, 0x0, 0x100, {top - 4:#x}, 2, 8, 1", ErrorCode.SRAM_RANGE),
        ("matmul.i16 0x81, 0x0, 0x100, 0x0, 2, 8, 1", ErrorCode.ALIGN),     # Y alignment
        (f"matmul.i16 {top - 6:#x}, 0x0, 0x100, 0x0, 4, 8, 1", ErrorCode.SRAM_RANGE),
        # M = 2: the first row of Y (of X) inside the SRAM, the second past its end (the ends
        # take (M - 1) strides)
        (f"matmul.i16 {top - W:#x}, 0x0, 0x100, 0x0, 4, 8, 2" if M > 1 else ".word 0",
         ErrorCode.SRAM_RANGE if M > 1 else ErrorCode.ILLEGAL),
        (f"matmul.i16 0x80, {top - W - -(-8 // W) * W:#x}, 0x100, 0x0, 4, 8, 2" if M > 1
         else ".word 0", ErrorCode.SRAM_RANGE if M > 1 else ErrorCode.ILLEGAL),
        (f"matraw.i32 0x80, 0x0, {top - W:#x}, 2, 8, 1", ErrorCode.SRAM_RANGE),
        (f"matqk.i32 0x80, {top - 2 * W:#x}, 0x100, 0x0, 2, {W + 1}, 1", ErrorCode.SRAM_RANGE),
        # matqk's pair records past the end by one byte after their header (W rows skip W)
        (f"matqk.i32 0x80, 0x0, {top - 2 * W:#x}, 0x0, 1, {W + 1}, 1", ErrorCode.SRAM_RANGE),
        (f"wait {n_cnt}, 1", ErrorCode.COUNTER),
        ("send 0, 0, 8, (0, 0), 99", ErrorCode.COUNTER),
        ("send 0, 0, 8, (1, 0), 0", ErrorCode.ROUTE),
        (f"send 0, 0, {W + W // 2}, (0, 0), 0", ErrorCode.ALIGN),
        (f"send {top - W:#x}, 0, {2 * W}, (0, 0), 0", ErrorCode.SRAM_RANGE),
        (nest, ErrorCode.LOOP),
        # the assembler refuses bad loop ends: raw words
        ([_loop(2, 1)], ErrorCode.LOOP),                                    # empty body
        ([_loop(2, 3), _loop(2, 4), NOP, NOP, NOP], ErrorCode.LOOP),        # inner after outer
        ([_loop(2, CFG.imem_words + 1), NOP], ErrorCode.IMEM_RANGE),
        ([NOP, _loop(0, CFG.imem_words), NOP], ErrorCode.IMEM_RANGE),       # skip to the end
        # a dynamic exponent larger than the static shift: requant_dyn refuses it
        ("li r1, 0x001f0200\nst 0x400, r1\nli r2, 1\nst 0x0, r2\n"
         "matmul.i16 0x800, 0x400, 0x100, 0x0, 1, 8, 1",
         ErrorCode.ARITH),
        ("li r1, 0x7fff\nst 0x400, r1\nst 0x500, r1\nli r2, 0x1f\nst 0x0, r2\n"
         "matqk.i32 0x800, 0x400, 0x500, 0x0, 1, 8, 1", ErrorCode.ARITH),    # |acc mu| >= 2**46
    ]


@cocotb.test()
async def errors(dut):
    """Illegal words, out-of-range and misaligned operands, shapes, loops, counters, ARITH."""
    tb = await _bench(dut)
    for i, (prog, code) in enumerate(_error_cases()):
        image = tb.image()
        if "matqk" in prog:        # all-127 operands: acc = 127 * 127 * 8, times 2**30
            image[0x400 + W:0x400 + W + 8] = 127
            image[0x500 + W:0x500 + W + 8] = 127
        tail = assemble("st 0x10, r1\nhalt")
        if isinstance(prog, str):
            words, what = assemble(prog) + tail, prog.splitlines()[-1]
        else:
            words, what = prog + tail, "raw loop words"
        await tb.check_program(f"error {i}: {what}", words, image, expect=code)
    # running off the end of the instruction memory
    await tb.check_program("pc off the end", ["nop"] * 0 + [0x1] * CFG.imem_words,
                           expect=ErrorCode.IMEM_RANGE)
    _dump(tb)


@cocotb.test()
async def vector_dispatch(dut):
    """Vector instructions through the controller (resolved operands, completion, errors);
    the vector unit's own bench covers its arithmetic."""
    tb = await _bench(dut)
    await tb.check_program("vector", """
        li    r1, 0x200
        loop  3, e
        vadd.i16.i16 r1+0x400, r1, r1+0x40, 20
        add   r1, r1+0x80, 0
    e:
        vmul.i32.i8  0x900, 0x300, 0x340, 13
        reqi.i8.i16  0xa00, 0x200, 32, 0x4000, 15
        rsum.i32.i16 0xb00, 0x200, 24
        argmax.u16.i8 0xb08, 0x300, 40
        halt
    """)
    # Issue-Go (docs/tile.md, "Decode register"): each vector instruction added to a
    # program adds the estimate's cycles on the RTL: one that waits for the vector entry
    # (the second `vadd`, the `rsum` reading its output) retires in the cycle the entry's
    # completion frees it, not a cycle later; one that waits for nothing (the `vmul` after
    # 200 cycles of scalar work) a cycle after its first Issue cycle (`CostModel.issue_go`)
    head = "li r1, 0x200\nvadd.i16.i16 0x400, r1, 0x240, 20\n"
    runs = [await tb.check_program(f"issue-go {k}", head + body + "halt")
            for k, body in enumerate(["", "vadd.i16.i16 0x480, 0x200, 0x240, 20\n",
                                      "rsum.i32.i16 0x500, 0x400, 20\n",
                                      "loop 200, e\nadd r2, r2, 1\ne:\n"
                                      "vmul.i32.i16 0x600, r1, 0x240, 20\n"])]
    base = runs[0]["rtl_cycles"] - runs[0]["est_cycles"]
    assert all(r["rtl_cycles"] - r["est_cycles"] == base for r in runs), runs
    for prog, code in (("vadd.i16.i16 0x101, 0x200, 0x300, 4", ErrorCode.ALIGN),
                       ("softmax.u16.i32 0x100, 0x200, 4", ErrorCode.TABLE),
                       ("rsum.i32.i16 0x100, 0x200, 0", ErrorCode.SHAPE),
                       ("rmsnormq.i8.i16 0x800, 0x200, 0x300, 8, 0x380, 0", ErrorCode.TABLE)):
        await tb.check_program(prog, prog + "\nhalt", expect=code)
    # rmsnormq (RMSNorm + dynq into a record) with its tables: a plain and a saturating
    # shift, a vadd reading both records' data right after them (RAW through the
    # scoreboard's footprints), and a misaligned record (ALIGN after pass 1)
    image = tb.image()
    image[0x1000:0x1000 + 2 * 768] = np.frombuffer(nx.rsqrt_table().astype("<u2").tobytes(),
                                                   np.uint8)
    image[0x1600:0x1600 + 2 * 256] = np.frombuffer(
        nx.dynquant_table().astype("<u2").tobytes(), np.uint8)
    image[0x380:0x388] = np.frombuffer(np.array([671], "<i8").tobytes(), np.uint8)
    await tb.check_program("rmsnormq", """
        table rsqrt, 0x1000
        table dynq, 0x1600
        rmsnormq.i8.i16 0x800, 0x200, 0x300, 40, 0x380, 0
        rmsnormq.i8.i16 0x900, 0x200, 0x300, 24, 0x380, -9
        vadd.i8.i8 0xa00, 0x810, 0x910, 16
        halt
    """, image)
    await tb.check_program("rmsnormq misaligned record", """
        table rsqrt, 0x1000
        table dynq, 0x1600
        rmsnormq.i8.i16 0x804, 0x200, 0x300, 8, 0x380, 0
        halt
    """, image, expect=ErrorCode.ALIGN)
    _dump(tb)


@cocotb.test()
async def wait_send_done(dut):
    """SEND to the tile itself, WAIT on its bump and on host bumps, signal-only SEND, DONE."""
    tb = await _bench(dut)
    last = tb.cfg.n_counters - 1        # (5 faulted on the 4-counter configurations)
    await tb.check_program("send_wait", f"""
        send  0x400, 0x100, {4 * W}, (0, 0), 2
        wait  2, 1
        send  0x500, 0x400, {W}, (0:0, 0:0), 3
        send  0, 0, 0, (0, 0), 3            ; a bump only
        wait  3, 2
        wait  1, 2                          ; two host bumps
        wait  1, 0                          ; nothing to wait for
        done  0x77
        send  0x600, 0x100, {W}, (0, 0), {last} ; left un-waited: the last counter holds 1
        halt
    """, bumps=(1, 1))
    _dump(tb)


@cocotb.test()
async def wait_arrivals(dut):
    """WAITs whose counters fill while they wait: packets (write-and-bump) arrive during the
    run at random cycles, before, at and after the WAIT; the instruction after a WAIT copies
    the data that packet brought, so one that runs before the grant copies the background.
    WAIT in a loop body, as a loop's last instruction, twice in a row, with a bump of its
    counter in the cycle of its grant.  While an instruction holds, the status reads
    WAITING at the WAIT's PC."""
    tb = await _bench(dut)
    prog = f"""
        li    r1, 0
        loop  3, e1
        wait  0, 1
        copy  r1+0x700, r1+0x300, {W}
        add   r1, r1+{W}, 0
    e1:
        wait  1, 1
        wait  1, 1                          ; twice in a row
        copy  0x780, 0x380, {2 * W}
        loop  2, e2
        add   r2, r2+1, 0
        wait  2, 1                          ; the loop body's last instruction
    e2:
        st    0x7c0, r2
        wait  3, 2
        copy  0x7d0, 0x3c0, {2 * W}
        halt
    """
    text = [ln.split(";")[0].strip() for ln in prog.strip().splitlines()]
    wait_pcs = [i for i, ln in enumerate(x for x in text if not x.endswith(":"))
                if ln.startswith("wait")]
    held = []

    async def monitor():
        while True:
            await ReadOnly()
            state, _, pc_now = tb.status()
            if state == ControllerState.WAITING:
                held.append(pc_now)
            await RisingEdge(dut.clk)

    mon = cocotb.start_soon(monitor())
    for run in range(4):
        def data(n):
            return tb.np_rng.integers(0, 256, n * W, dtype=np.uint8).tobytes()
        at = sorted(tb.rng.sample(range(0, 120), 9))
        arrivals = [(at[k], 0, 0x300 + k * W, data(1)) for k in range(3)]
        arrivals += [(at[3], 1, 0x380, data(1)), (at[3] + run % 2, 1, 0x380 + W, data(1))]
        arrivals += [(at[4], 2, 0x3a0, data(1)), (at[5], 2, 0x3a0 + W, data(1))]
        # counter 3: its first packet already there, the second one late; and a packet
        # more for counter 0 that nothing waits for
        arrivals += [(0, 3, 0x3c0, data(1)), (at[8], 3, 0x3c0 + W, data(1)),
                     (at[6], 0, 0x3e0, data(1))]
        await tb.check_program(f"wait arrivals {run}", prog, arrivals=arrivals)
    mon.cancel()
    assert held, "no WAIT ever held the next instruction"
    assert set(held) <= set(wait_pcs), f"WAITING at PCs {sorted(set(held))}, WAITs at {wait_pcs}"
    _dump(tb)


def _kv_layout(*, max_pos=5, base=None):
    """The bench's KV layout: 2 layers x 3 KV heads, head_size 12 (not a multiple of W),
    in the last quarter of the SRAM (unless `base` says otherwise)."""
    words = CFG.sram_words
    return KvLayout(n_layers=2, n_kv_heads=3, head_size=12, max_pos=max_pos,
                    base=words * 3 // 4 if base is None else base, word_bytes=W, k_header=True)


@cocotb.test()
async def kv_append(dut):
    """KVAPP against the simulator: every (layer, head) at every position from register
    operands, scattered appends, refusals (position at and past capacity, layer, head, slot
    and position beyond 16 bits, source alignment and range, no layout, a layout past the
    SRAM) writing nothing; the KV capacity port."""
    tb = await _bench(dut)
    L = _kv_layout()
    await tb.set_kv_layout(L)
    assert int(dut.kv_capacity.value) == L.max_pos
    krec, vrow = W * L.k_row_words, W * L.v_row_words
    await tb.check_program("kv every slot and position", f"""
        .equ KSRC, 0x200
        .equ VSRC, 0x800
        li    r1, 0                         ; position
        loop  {L.max_pos}, e_pos
        li    r2, 0                         ; slot = layer << 8 | head
        loop  {L.n_layers}, e_layer
        loop  {L.n_kv_heads}, e_head
        kvapp r2, r5+KSRC, r6+VSRC, r1
        add   r2, r2+1, 0
        add   r5, r5+{krec}, 0
        add   r6, r6+{vrow}, 0
    e_head:
        add   r2, r2+{256 - L.n_kv_heads}, 0  ; next layer, head 0
    e_layer:
        add   r1, r1+1, 0
    e_pos:
        halt
    """)
    last = L.max_pos - 1
    await tb.check_program("kv scattered", f"""
        kvapp {1 << 8 | 2}, 0x100, 0x180, {last}
        kvapp 0, {SIZE - krec:#x}, {SIZE - vrow:#x}, 0      ; sources at the SRAM end
        kvapp {1 << 8}, 0x100, 0x100, 2                     ; K and V from one buffer
        li    r3, {W * L.k_row(0, 1, 3):#x}                 ; a source inside the cache
        kvapp 2, r3, r3, 1
        kvapp {1 << 8 | 2}, 0x300, 0x380, {last}            ; overwrite
        done  0x4b
        halt
    """)
    cases = [
        (f"kvapp 0, 0x100, 0x180, {L.max_pos}", ErrorCode.KV_RANGE),
        ("li r1, 0x10000\nkvapp 0, 0x100, 0x180, r1", ErrorCode.KV_RANGE),
        (f"kvapp {L.n_layers << 8}, 0x100, 0x180, 0", ErrorCode.KV_RANGE),
        (f"kvapp {L.n_kv_heads}, 0x100, 0x180, 0", ErrorCode.KV_RANGE),
        ("li r1, 0x10000\nkvapp r1, 0x100, 0x180, 0", ErrorCode.KV_RANGE),
        (f"kvapp 0, {0x100 + W // 2:#x}, 0x180, 0", ErrorCode.ALIGN),
        (f"kvapp 0, 0x100, {0x180 + 4:#x}, 0", ErrorCode.ALIGN),
        (f"kvapp 0, {SIZE - krec + W:#x}, 0x180, 0", ErrorCode.SRAM_RANGE),
        (f"kvapp 0, 0x100, {SIZE - vrow + W:#x}, 0", ErrorCode.SRAM_RANGE),
        (f"li r1, {2 ** 32 - W:#x}\nkvapp 0, 0x100, r1, 0", ErrorCode.SRAM_RANGE),
        (f"kvapp 0, {0x100 + W // 2:#x}, 0x180, {L.max_pos}", ErrorCode.ALIGN),   # order
        (f"kvapp {L.n_layers << 8}, {SIZE:#x}, 0x180, 0", ErrorCode.SRAM_RANGE),  # order
        (f"kvapp {L.n_kv_heads}, 0x100, {SIZE:#x}, {L.max_pos}", ErrorCode.SRAM_RANGE),
    ]
    for prog, code in cases:
        # an accepted append first, so that the refused one follows real work
        await tb.check_program(prog.splitlines()[-1],
                               "kvapp 0, 0x200, 0x280, 1\n" + prog + "\nst 0x10, r1\nhalt",
                               expect=code)
    # no layout: capacity 0, every append refused; a layout reaching past the SRAM: the same
    await tb.set_kv_layout(None)
    assert int(dut.kv_capacity.value) == 0
    await tb.check_program("kv no layout", "kvapp 0, 0x100, 0x180, 0\nhalt",
                           expect=ErrorCode.KV_RANGE)
    big = _kv_layout(max_pos=CFG.sram_words // (L.k_row_words + L.v_row_words) // 6 + 1,
                     base=0)
    await tb.set_kv_layout(big)
    assert big.end > CFG.sram_words and int(dut.kv_capacity.value) == 0
    await tb.check_program("kv layout past the SRAM", "kvapp 0, 0x100, 0x180, 0\nhalt",
                           expect=ErrorCode.KV_RANGE)
    # moved: the same program appends elsewhere
    await tb.set_kv_layout(_kv_layout(base=CFG.sram_words // 2 + 3))
    await tb.check_program("kv moved", f"kvapp {1 << 8 | 1}, 0x100, 0x180, 4\nhalt")
    await tb.set_kv_layout(None)
    _dump(tb)


def _kv_image(tb, L, xa, n_x):
    """Return an SRAM image with every K record of layout `L` and `n_x` query records at
    `xa` filled: random int8 data, scale codes small enough that no score hits ``ARITH``
    (``|mu| < 300``, ``b`` in [-8, 8), with the pair's shift at least 20)."""
    image = tb.image()
    K = L.head_size
    rec = ISA.record_bytes(K)
    heads = [xa + r * rec for r in range(n_x)]
    heads += [W * L.k_row(la, h, p) for la in range(L.n_layers) for h in range(L.n_kv_heads)
              for p in range(L.max_pos)]
    for a in heads:
        image[a:a + 4] = np.array([tb.np_rng.integers(-300, 300), tb.np_rng.integers(-8, 8)],
                                  "<i2").view(np.uint8)
    return image


@cocotb.test()
async def kv_stream(dut):
    """KVQK against the simulator: scores of M query records against the K records of a
    (layer, head) for positions 0 .. n-1 streamed by the KV store, on random layouts (head
    size a multiple of W or not, random base), n = 1 (position 0) to the capacity, M = 1
    and M = max (GQA); after KVAPP (the rows just appended), under overlap with vector work;
    refusals (n = 0, n past the capacity, layer, head, slot beyond 16 bits, no layout; X,
    pair and Y checks) writing nothing."""
    tb = await _bench(dut, seed=SEED + 11)
    words = CFG.sram_words
    for case, hs in enumerate((W + 4, 2 * W)):
        rec_w = 1 + -(-hs // W)
        max_pos = int(tb.np_rng.integers(5, 9))
        size = 2 * 2 * max_pos * (rec_w + rec_w - 1)
        base = int(tb.np_rng.integers(words // 2, words - size))
        L = KvLayout(n_layers=2, n_kv_heads=2, head_size=hs, max_pos=max_pos, base=base,
                     word_bytes=W, k_header=True)
        await tb.set_kv_layout(L)
        rec = ISA.record_bytes(hs)
        xa, ca, ya, F = 0, 0x100, 0x180, 0x400
        image = _kv_image(tb, L, xa, M)
        image[F:F + 4] = image[xa:xa + 4]       # the K record kvapp appends: a small code
        image[ca:ca + 4] = np.array([int(tb.np_rng.integers(0, 2 ** 16)),
                                     int(tb.np_rng.integers(20, 40))], "<u2").view(np.uint8)
        cap = L.max_pos
        lines = []
        for td, slot, n, m in [("i32", 0, 1, M), ("i32", 1 << 8 | 1, cap, M),
                               ("i16", 1, cap - 1, 1), ("i8", 1 << 8, 2, M),
                               ("i32", 1 << 8 | 1, int(tb.np_rng.integers(1, cap + 1)), 1)]:
            lines.append(f"kvqk.{td} {ya:#x}, {xa:#x}, {slot:#x}, {ca:#x}, {n}, {m}")
            lines.append(f"copy {F + 0x40 * len(lines):#x}, {ya:#x}, 0x20")
        await tb.check_program(f"kvqk {case}: slots and lengths", "\n".join(lines) + "\nhalt",
                               image, expect=ErrorCode.NONE)
        await tb.check_program(f"kvqk {case}: register operands", f"""
            li    r1, 0                          ; slot
            li    r2, 1                          ; n
            loop  {L.n_layers}, e_layer
            loop  {L.n_kv_heads}, e_head
            kvqk.i32 r3+{ya:#x}, {xa:#x}, r1, {ca:#x}, r2, {M}
            add   r3, r3+{4 * cap * M}, 0
            add   r1, r1+1, 0
            add   r2, r2+1, 0
        e_head:
            add   r1, r1+{256 - L.n_kv_heads}, 0
        e_layer:
            halt
        """, image, expect=ErrorCode.NONE)
        # append then score the row just appended (RAW through the KV store), the query
        # rebuilt by a vector instruction under the scoring (overlap)
        await tb.check_program(f"kvqk {case}: after kvapp, under vector work", f"""
            kvapp {1 << 8}, {F:#x}, {F + 0x80:#x}, {cap - 1}
            kvqk.i32 {ya:#x}, {xa:#x}, {1 << 8:#x}, {ca:#x}, {cap}, {M}
            vadd.i16.i16 {F + 0x100:#x}, {F + 0x200:#x}, {F + 0x280:#x}, 32
            kvqk.i16 {ya + 0x80:#x}, {xa:#x}, {1 << 8:#x}, {ca:#x}, {cap}, 1
            kvapp 1, {F:#x}, {F + 0x80:#x}, 0
            kvqk.i32 {ya + 0x100:#x}, {xa:#x}, 1, {ca:#x}, 1, 1
            halt
        """, image, expect=ErrorCode.NONE)
        # WAR through the KV map: a vector instruction rewriting a K record read by KVQK
        k1 = W * L.k_row(1, 1, 1)
        await tb.check_program(f"kvqk {case}: vector writes a K record", f"""
            kvqk.i32 {ya:#x}, {xa:#x}, {1 << 8 | 1:#x}, {ca:#x}, {cap}, {M}
            rsum.i32.i16 {k1 + W:#x}, {F:#x}, 4
            kvqk.i32 {ya + 0x80:#x}, {xa:#x}, {1 << 8 | 1:#x}, {ca:#x}, {cap}, {M}
            halt
        """, image, expect=ErrorCode.NONE)
        ok = f"kvqk.i32 {ya:#x}, {xa:#x}, 1, {ca:#x}, 2, 1"
        cases = [
            (f"kvqk.i32 {ya + 0x40:#x}, {xa:#x}, 0, {ca:#x}, {cap + 1}, {M}", ErrorCode.KV_RANGE),
            (f"kvqk.i32 {ya + 0x40:#x}, {xa:#x}, 0, {ca:#x}, 0, {M}", ErrorCode.KV_RANGE),
            # n past 16 bits: Y (n elements) is past the SRAM first
            (f"li r1, 0x10001\nkvqk.i32 {ya:#x}, {xa:#x}, 0, {ca:#x}, r1, 1",
             ErrorCode.SRAM_RANGE),
            (f"kvqk.i32 {ya:#x}, {xa:#x}, {L.n_layers << 8:#x}, {ca:#x}, 1, 1",
             ErrorCode.KV_RANGE),
            (f"kvqk.i32 {ya:#x}, {xa:#x}, {L.n_kv_heads:#x}, {ca:#x}, 1, 1", ErrorCode.KV_RANGE),
            (f"li r1, 0x10000\nkvqk.i32 {ya:#x}, {xa:#x}, r1, {ca:#x}, 1, 1", ErrorCode.KV_RANGE),
            (f"kvqk.i32 {ya:#x}, {xa + 4:#x}, 0, {ca:#x}, 1, 1", ErrorCode.ALIGN),
            (f"kvqk.i32 {ya:#x}, {SIZE - rec + W:#x}, 0, {ca:#x}, 1, 1", ErrorCode.SRAM_RANGE),
            (f"kvqk.i32 {ya:#x}, {xa:#x}, 0, {ca + 2:#x}, 1, 1", ErrorCode.ALIGN),
            (f"kvqk.i32 {ya + 2:#x}, {xa:#x}, 0, {ca:#x}, 1, 1", ErrorCode.ALIGN),
            (f"kvqk.i32 {SIZE - 4:#x}, {xa:#x}, 0, {ca:#x}, 2, 1", ErrorCode.SRAM_RANGE),
            # order: the operand checks come before the KV store's
            (f"kvqk.i32 {ya + 2:#x}, {xa:#x}, 0, {ca:#x}, 0, 1", ErrorCode.ALIGN),
        ]
        if M < 8:
            cases.append((f"kvqk.i32 {ya:#x}, {xa:#x}, 0, {ca:#x}, 1, {M + 1}", ErrorCode.SHAPE))
        for prog, code in cases:
            await tb.check_program(f"kvqk {case}: " + prog.splitlines()[-1],
                                   f"{ok}\n{prog}\nst {F:#x}, r1\nhalt", image, expect=code)
    await tb.set_kv_layout(None)
    await tb.check_program("kvqk: no layout", "kvqk.i32 0x180, 0x0, 0, 0x100, 1, 1\nhalt",
                           expect=ErrorCode.KV_RANGE)
    _dump(tb)


def _overlap_matmul(tb, *, arith=False):
    """Return (program line, image, addresses) of a long ``matmul.i16`` (N 12, K k_max).

    `arith`: every X record's exponent b is 100, so that ``s - b < 0`` at every element
    (``ARITH``; the write-back writes nothing).
    """
    n, k = 12, CFG.k_max
    prog, image = _matrix_case(tb, "matmul", M, n, k, "i16", "random", "random")
    line = prog.splitlines()[0]
    ya, xa, wa, ca = (int(v, 0) for v in line.split(None, 1)[1].split(",")[:4])
    if arith:
        rec = ISA.record_bytes(k)
        for r in range(M):
            image[xa + r * rec + 2:xa + r * rec + 4] = np.array([100], "<i2").view(np.uint8)
    ystride = ISA.pad(2 * n)
    y_end = ya + (M - 1) * ystride + 2 * n
    free = ISA.pad(y_end + W)
    assert free + 0x300 <= SIZE
    return line, image, dict(n=n, k=k, ya=ya, xa=xa, wa=wa, ca=ca, y_end=y_end, F=free,
                             ystride=ystride)


def _overlap_cases(a):
    """(name, tail, expect, overlaps): instructions after the matmul, the error expected,
    and whether the tail may run under the matmul (None: not timed)."""
    F, n, ya = a["F"], a["n"], a["ya"]
    last_w = a["wa"] + ISA.pad(a["k"]) * (n - 1)
    return [
        ("independent vector", f"vadd.i16.i16 {F + 0x100:#x}, {F:#x}, {F + 0x80:#x}, 32\n"
                               f"rsum.i32.i16 {F + 0x180:#x}, {F:#x}, 32", ErrorCode.NONE, True),
        ("vector reads right after Y", f"vadd.i16.i16 {F + 0x100:#x}, {a['y_end']:#x}, "
                                       f"{F + 0x80:#x}, 16", ErrorCode.NONE, True),
        ("RAW: vector reads Y", f"vadd.i16.i16 {F:#x}, {ya:#x}, {F + 0x80:#x}, {n}",
         ErrorCode.NONE, False),
        ("RAW: vector reads Y's last element", f"vadd.i16.i16 {F:#x}, {a['y_end'] - 2:#x}, "
                                               f"{F + 0x80:#x}, 1", ErrorCode.NONE, False),
        ("RAW: vector's b reads Y", f"vmul.i32.i16 {F:#x}, {F + 0x80:#x}, {ya:#x}, 4",
         ErrorCode.NONE, False),
        ("WAW: vector writes into Y", f"vadd.i16.i16 {ya + 2:#x}, {F:#x}, {F + 0x80:#x}, 2",
         ErrorCode.NONE, False),
        ("WAR: vector writes the last weight row", f"vadd.i16.i16 {last_w:#x}, {F:#x}, "
                                                   f"{F + 0x80:#x}, 8", ErrorCode.NONE, False),
        ("WAR: vector writes an X header", f"rsum.i32.i16 {a['xa']:#x}, {F:#x}, 4",
         ErrorCode.NONE, False),
        ("WAR: vector writes the table", f"rsum.i32.i16 {a['ca']:#x}, {F:#x}, 4",
         ErrorCode.NONE, False),
        ("send of Y (a reader)", f"send {ya:#x}, {F:#x}, {a['ystride']}, (0, 0), 1\nwait 1, 1",
         ErrorCode.NONE, None),
        ("matrix under matrix", f"matmul.i16 {F:#x}, {a['xa']:#x}, {a['wa']:#x}, {a['ca']:#x}, "
                                f"2, {a['k']}, 1", ErrorCode.NONE, False),
        ("scalar then st", "li r1, 7\nadd r2, r1+1, 0\nloop 3, e\nadd r2, r2+1, 0\ne:\n"
                           f"st {F:#x}, r2", ErrorCode.NONE, None),
        ("vector error under matrix", f"vadd.i16.i16 {F + 1:#x}, {F:#x}, {F:#x}, 4",
         ErrorCode.ALIGN, None),
    ]


def _arith_cases(a):
    """(name, tail): instructions after a matmul that hits ARITH (expected at its PC)."""
    F, ya = a["F"], a["ya"]
    return [
        ("ARITH: shadow vector, then a reader of Y",
         f"vadd.i16.i16 {F + 0x100:#x}, {F:#x}, {F + 0x80:#x}, 32\nli r3, 9\n"
         f"vadd.i16.i16 {F:#x}, {ya:#x}, {F + 0x80:#x}, 4\nst {F + 0x200:#x}, r3"),
        ("ARITH: shadow vector error", f"vadd.i16.i16 {F + 1:#x}, {F:#x}, {F:#x}, 4"),
        ("ARITH: halt", f"li r1, 5\nrsum.i32.i16 {F + 0x180:#x}, {F:#x}, 32"),
        ("ARITH: done", "done 0x55"),
    ]


@cocotb.test()
async def overlap(dut):
    """The issue policy (``TileConfig.overlap``): a matrix instruction with independent
    vector work after it, RAW / WAR / WAW through SRAM, a SEND of the result, a second
    matrix instruction, errors of the later instruction and ARITH of the matrix one; SRAM,
    state, error and PC against isasim (same policy), and the cycles show whether the work
    overlapped."""
    tb = await _bench(dut)
    line, image, a = _overlap_matmul(tb)
    alone = (await tb.check_program("overlap: matmul alone", line + "\nhalt", image,
                                    expect=ErrorCode.NONE))["rtl_cycles"]
    for name, tail, code, overlaps in _overlap_cases(a):
        both = await tb.check_program(f"overlap: {name}", f"{line}\n{tail}\nhalt", image,
                                      expect=code)
        if overlaps is None or code != ErrorCode.NONE:
            continue
        only = (await tb.check_program(f"overlap: {name} (alone)", f"{tail}\nhalt", image,
                                       expect=code))["rtl_cycles"]
        serial = alone + only - 1               # one halt
        ran_under = both["rtl_cycles"] < serial - only // 2
        tb.log.info("%s: %d cycles, serially %d", name, both["rtl_cycles"], serial)
        assert ran_under == (overlaps and CFG.overlap), \
            f"{name}: {both['rtl_cycles']} cycles, serially {serial} (overlap {CFG.overlap})"
    line, image, a = _overlap_matmul(tb, arith=True)
    for name, tail in _arith_cases(a):
        await tb.check_program(name, f"{line}\n{tail}\nhalt", image, expect=ErrorCode.ARITH)
    _dump(tb)



async def _check_unit_pairs(tb, image, cases, label):
    """Run each (name, head, tail, code, overlaps) case of `cases` on the RTL against the ISA
    simulator; where `overlaps` is not None, also run head and tail alone and assert that the
    pair ran under serial time exactly when the units overlap (and the config overlaps)."""
    alone = {}

    async def cycles(name, text):
        if text not in alone:
            alone[text] = (await tb.check_program(name, text + "\nhalt", image,
                                                  expect=ErrorCode.NONE))["rtl_cycles"]
        return alone[text]

    for name, head, tail, code, overlaps in cases:
        both = await tb.check_program(f"{label}: {name}", f"{head}\n{tail}\nhalt", image,
                                      expect=code)
        if overlaps is None:
            continue
        h = await cycles(f"{label}: {name} (head alone)", head)
        t = await cycles(f"{label}: {name} (tail alone)", tail)
        serial = h + t - 1                      # one halt
        ran_under = both["rtl_cycles"] < serial - min(h, t) // 2
        tb.log.info("%s: %d cycles, serially %d (%d + %d)", name, both["rtl_cycles"], serial,
                    h, t)
        assert ran_under == (overlaps and CFG.overlap), \
            f"{name}: {both['rtl_cycles']} cycles, serially {serial} (overlap {CFG.overlap})"


def _unit_cases(a):
    """(name, head, tail, expect, overlaps) of the general policy: `tail` after `head`, the
    error expected and whether they must overlap (None: not timed; timed heads and tails
    are long).  Regions: A, B, D of `vn` i16 elements from G (a long vector instruction
    D = A + B), F a small free area, X, W, table and Y the long matmul's."""
    F, n, ya = a["F"], a["vn"], a["ya"]
    e = 2 * n
    A, B, D = a["G"], a["G"] + e, a["G"] + 2 * e
    # the footprint is conservative (4 bytes an element): vs elements read inside B and
    # write inside F
    vs = min(n // 2, (0x300 - W) // 4 // 4 * 4)
    mm = a["line"]                              # the long matmul (reads X, W, table; writes Y)
    vec = f"vadd.i16.i16 {D:#x}, {A:#x}, {B:#x}, {n}"           # independent of mm
    vec_f = f"vadd.i16.i16 {F:#x}, {B:#x}, {B:#x}, {vs}"        # independent of mm and snd
    snd = f"send {D:#x}, {A:#x}, {e}, (0, 0), 1"                # to itself: A -> D
    return [
        ("matrix under vector", vec, mm, ErrorCode.NONE, True),
        ("RAW: matrix reads the vector's result (W)",
         f"vadd.i16.i16 {a['wa']:#x}, {A:#x}, {B:#x}, {n}", mm, ErrorCode.NONE, False),
        ("RAW: matrix reads the vector's result (table)",
         f"vadd.i16.i16 {a['ca'] + 4:#x}, {A:#x}, {B:#x}, {n}", mm, ErrorCode.NONE, False),
        ("WAR: matrix writes the vector's source",
         f"vadd.i16.i16 {D:#x}, {ya:#x}, {B:#x}, {n}", mm, ErrorCode.NONE, False),
        ("WAW: matrix writes the vector's destination",
         f"vadd.i16.i16 {ya:#x}, {A:#x}, {B:#x}, {n}", mm, ErrorCode.NONE, False),
        # not timed: the vector unit and the SEND share the SRAM read/write port (the
        # port is the bound: core_small 282 cycles against 302 serially)
        ("vector under send", snd, vec_f, ErrorCode.NONE, None),
        ("matrix under send", snd, mm, ErrorCode.NONE, True),
        ("WAR: vector writes the send's source", snd,
         f"vadd.i16.i16 {A:#x}, {B:#x}, {B:#x}, {n}", ErrorCode.NONE, False),
        ("RAW: vector reads the send's destination", snd,
         f"vadd.i16.i16 {F:#x}, {D:#x}, {B:#x}, {vs}", ErrorCode.NONE, False),
        ("WAW: matrix writes the send's destination",
         f"send {ya:#x}, {A:#x}, {e}, (0, 0), 1", mm, ErrorCode.NONE, False),
        ("send waits for the vector (release)", vec, snd, ErrorCode.NONE, False),
        ("send waits for the matrix (release)", mm, snd, ErrorCode.NONE, False),
        # the controller's own LD / ST / COPY wait on a hazard only
        # not timed: COPY and the vector unit share the SRAM read/write port (core_small 605
        # cycles against 722 serially)
        ("copy under vector", vec, f"copy {F:#x}, {A + 0x40:#x}, 0x60", ErrorCode.NONE, None),
        ("copy under matrix", mm, f"copy {F:#x}, {A:#x}, 0x60", ErrorCode.NONE, True),
        ("RAW: copy reads the vector's result", vec, f"copy {F:#x}, {D + e - 0x20:#x}, 0x60",
         ErrorCode.NONE, False),
        ("WAR: copy writes the matrix's W", mm, f"copy {a['wa'] + 0x40:#x}, {F:#x}, 0x60",
         ErrorCode.NONE, False),
        ("RAW: ld of Y, st of it", mm, f"ld r1, {ya + 4:#x}\nst {F:#x}, r1", ErrorCode.NONE,
         None),
        ("WAR: st into X under matrix", mm, f"li r1, 0x7f7f7f7f\nst {a['xa'] + 2 * W:#x}, r1",
         ErrorCode.NONE, None),
        ("ld and st under matrix", mm, f"ld r1, {A:#x}\nst {F:#x}, r1", ErrorCode.NONE, None),
        ("wait drains", vec, f"li r1, 3\nst {F:#x}, r1\n{snd}\nwait 1, 1", ErrorCode.NONE,
         None),
        # errors of background instructions: the shadow runs, the first error wins
        ("vector ALIGN, matrix in its shadow",
         f"vadd.i16.i16 {F + 1:#x}, {B:#x}, {B:#x}, 4", mm, ErrorCode.ALIGN, None),
        ("vector SHAPE, a matrix reader of its result stops the tile",
         f"rope.i16.i16 {a['wa']:#x}, {A:#x}, {B:#x}, 6, 4, 0", f"{mm}\nli r1, 1",
         ErrorCode.SHAPE, None),
        ("send COUNTER, vector and matrix in its shadow",
         f"send {D:#x}, {A:#x}, {e}, (0, 0), {CFG.n_counters}", f"{vec_f}\n{mm}",
         ErrorCode.COUNTER, None),
        ("send ALIGN, done drains", f"send {D:#x}, {A + 4:#x}, {e}, (0, 0), 1",
         "done 0x33", ErrorCode.ALIGN, None),
        ("vector SHAPE, halt drains", f"vadd.i16.i16 {F:#x}, {B:#x}, {B:#x}, 0",
         "li r2, 4", ErrorCode.SHAPE, None),
    ]


@cocotb.test()
async def overlap_units(dut):
    """The general issue policy: every background unit (matrix, vector, SEND) with one
    instruction in flight; a matrix instruction under a vector one and under a SEND, the
    RAW / WAR / WAW hazards across units, SEND's release order, WAIT / DONE / HALT draining,
    errors of background vector instructions and SENDs (the shadow runs, the first error in
    program order is reported with its PC).  Each program is compared with isasim (same
    policy); timed cases run head, tail and both and must overlap iff `overlap` and no
    hazard."""
    tb = await _bench(dut, seed=SEED + 7)
    line, image, a = _overlap_matmul(tb)
    G = a["F"] + 0x300
    vn = min(512, (SIZE - G) // 6 // W * W)
    assert vn >= 128, vn
    a.update(G=G, vn=vn, line=line)
    await _check_unit_pairs(tb, image, _unit_cases(a), "units")
    # two faults in flight: the first in program order wins, whichever unit it is on
    line, image, a = _overlap_matmul(tb, arith=True)
    F, e = a["F"], 2 * vn
    bad_vec = f"vadd.i16.i16 {F + 1:#x}, {G + e:#x}, {G + e:#x}, 4"
    bad_send = f"send {G + 2 * e:#x}, {G:#x}, {e}, (0, 0), {CFG.n_counters}"
    for name, prog, code in [
            ("vector ALIGN before matrix ARITH", f"{bad_vec}\n{line}", ErrorCode.ALIGN),
            ("send COUNTER before matrix ARITH", f"{bad_send}\n{line}", ErrorCode.COUNTER),
            ("matrix ARITH before vector ALIGN", f"{line}\n{bad_vec}", ErrorCode.ARITH),
            ("send COUNTER before vector ALIGN", f"{bad_send}\n{bad_vec}", ErrorCode.COUNTER)]:
        await tb.check_program(f"units: {name}", prog + "\nhalt", image, expect=code)
    _dump(tb)


def _kv_units_setup(tb):
    """The long matmul of `_overlap_matmul`, a KV layout at the end of the SRAM (head size
    64: appends long enough to time), a K record / V row source pair at S and a free area G."""
    line, image, a = _overlap_matmul(tb)
    hs = 64
    kw, vw = 1 + -(-hs // W), -(-hs // W)
    max_pos = 4
    words = 2 * max_pos * (kw + vw)
    L = KvLayout(n_layers=1, n_kv_heads=2, head_size=hs, max_pos=max_pos,
                 base=CFG.sram_words - words, word_bytes=W, k_header=True)
    S = a["F"] + 0x100                      # K record, V row sources
    G = ISA.pad(S + W * (kw + vw) + W)      # free: vector operands
    assert G + 0x200 <= W * L.base, (G, W * L.base)
    a.update(line=line, L=L, S=S, SV=S + W * kw, G=G)
    return image, a


def _kv_unit_cases(a):
    """(name, head, tail, expect, overlaps) for the KV store and TABLE under the issue
    policy: KVAPP in the background (its own entry: reads its sources, writes the KV map),
    TABLE waiting only for the vector unit and its RAW hazards."""
    L, S, SV, G, F = a["L"], a["S"], a["SV"], a["G"], a["F"]
    mm = a["line"]
    W_ = W
    app = f"kvapp 1, {S:#x}, {SV:#x}, 2"                       # (0, 1) position 2
    vrow = W_ * L.v_row(0, 1, 2)
    vec_g = f"vadd.i16.i16 {G + 0x100:#x}, {G:#x}, {G + 0x80:#x}, 32"
    tab = f"table exp2, {G:#x}"
    return [
        ("kvapp under matrix", mm, app, ErrorCode.NONE, True),
        ("matrix under kvapp", app, mm, ErrorCode.NONE, True),
        # not timed: the vector unit and the KV store share the SRAM read/write port
        ("vector under kvapp", app, vec_g, ErrorCode.NONE, None),
        ("RAW: vector reads the appended V row", app,
         f"rsum.i32.i8 {G:#x}, {vrow:#x}, {L.head_size}", ErrorCode.NONE, False),
        ("WAR: vector writes the kvapp's K source", app,
         f"rsum.i32.i16 {S + W_:#x}, {G:#x}, 4", ErrorCode.NONE, False),
        ("RAW: kvapp reads the vector's result",
         f"vadd.i16.i16 {SV:#x}, {G:#x}, {G + 0x80:#x}, 32", app, ErrorCode.NONE, None),
        ("kvqk after kvapp (the store)", app,
         f"kvqk.i32 {G:#x}, {S:#x}, 1, {a['ca']:#x}, 3, 1", ErrorCode.NONE, None),
        ("kvapp after kvapp (the store)", app, f"kvapp 0, {S:#x}, {SV:#x}, 3",
         ErrorCode.NONE, None),
        ("ld under kvapp, st of it", app, f"ld r1, {G:#x}\nst {F:#x}, r1", ErrorCode.NONE,
         None),
        ("kvapp refused, nothing in flight", mm, f"kvapp 0, {S:#x}, {SV:#x}, {L.max_pos}",
         ErrorCode.KV_RANGE, None),
        ("table under matrix", mm, tab, ErrorCode.NONE, True),
        ("RAW: table reads the matrix's Y", mm, f"table exp2, {a['ya']:#x}", ErrorCode.NONE,
         False),
        ("table waits for the vector unit",
         f"vadd.i16.i16 {F:#x}, {F + 0x40:#x}, {F + 0x80:#x}, 32", tab,
         ErrorCode.NONE, False),
        ("table after send (not a reader of its destination)",
         f"send {G + 0x100:#x}, {F:#x}, {4 * W_}, (0, 0), 1", f"{tab}\nwait 1, 1",
         ErrorCode.NONE, None),
    ]


@cocotb.test()
async def overlap_kv(dut):
    """The issue policy for KVAPP and TABLE: KVAPP retires once the KV store accepted and
    checked it and copies in the background (the KV scoreboard entry: reads its K record
    and V row, writes the whole KV map); TABLE waits for the vector unit and its RAW
    hazards only.  Each program against isasim (same policy); timed cases must overlap iff
    `overlap` and no hazard."""
    tb = await _bench(dut, seed=SEED + 13)
    image, a = _kv_units_setup(tb)
    await tb.set_kv_layout(a["L"])
    # the K record kvapp appends gets a small scale code (kvqk after it must not hit ARITH)
    image[a["S"]:a["S"] + 4] = np.array([5, 0], "<i2").view(np.uint8)
    L = a["L"]
    for h in range(L.n_kv_heads):
        for p in range(L.max_pos):
            k = W * L.k_row(0, h, p)
            image[k:k + 4] = np.array([7, 1], "<i2").view(np.uint8)
    await _check_unit_pairs(tb, image, _kv_unit_cases(a), "kv units")
    await tb.set_kv_layout(None)
    _dump(tb)
