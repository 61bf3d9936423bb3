"""cocotb bench of the matrix unit (through ``TileDatapath``).

Operands go into SRAM through the host port (row padding filled with random bytes, which
the unit must mask); commands go through a stream driver; results are decoded by a
monitor and checked by a cocotb-bus scoreboard against the numpy reference
(``tilemodel.matmul_ref``: int8 x int8 in int64, bound-checked, narrowed to int32).

Environment: ``TILE_CONFIG`` (a key of ``tilemodel.CONFIGS``), ``SEED``, ``UTIL_JSON``
(where the utilisation test writes its measurements).
"""

from __future__ import annotations

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge
from tbtile import TileBench, wait_until
from tilemodel import CONFIGS, decode_result, encode_mcmd, matmul_ref, pack_rows, words_per_row

from chipotle.hw.tile import MatrixError

CFG = CONFIGS[os.environ.get("TILE_CONFIG", "small")]
SEED = int(os.environ.get("SEED", "1"))
W = CFG.word_bytes
M = CFG.max_m
TIMEOUT_US = 2000


class Allocator:
    """Hand out disjoint SRAM regions below the KV store."""

    def __init__(self, lo=0, hi=None):
        self.next = lo
        self.hi = CFG.kv.base if hi is None else hi

    def take(self, words):
        addr = self.next
        self.next += words
        assert self.next <= self.hi, f"operands need {self.next} words, only {self.hi} free"
        return addr


def _rand(tb, shape):
    return tb.np_rng.integers(-128, 128, size=shape, dtype=np.int8)


def _shapes():
    """(m, n, k) cases: K = 1, 172, k_max, multiples and non-multiples of W; M = 1 and max."""
    shapes = [(M, 5, 172), (1, 3, 1), (M, 1, 8), (2, 7, 13), (3, 4, 16), (M, 2, CFG.k_max),
              (1, 1, 172), (M, 6, 9), (2, 3, 7), (1, 2, 24), (M, 3, 4 * W), (M, 2, 4 * W + 1)]
    return [(min(m, M), n, k) for m, n, k in shapes]


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
@cocotb.parametrize(stall=[0.0, 0.3], idle=[0.0, 0.3])
async def random_shapes(dut, stall, idle):
    """Random int8 operands over the shape list, commands queued back to back."""
    tb = TileBench(dut, CFG, seed=SEED, stall=stall, idle=idle)
    await tb.start()
    pending = list(_shapes())
    while pending:
        # Place the operands of as many commands as fit, then queue all their commands so
        # that they run back to back.
        alloc = Allocator()
        jobs = []
        while pending:
            m, n, k = pending[0]
            rw = words_per_row(k, W)
            if alloc.next + (m + n) * rw > alloc.hi and jobs:
                break
            pending.pop(0)
            x, w = _rand(tb, (m, k)), _rand(tb, (n, k))
            jobs.append((x, w, alloc.take(n * rw), alloc.take(m * rw)))
        for x, w, w_base, x_base in jobs:
            await tb.load(w_base, _pack(tb, w))
            await tb.load(x_base, _pack(tb, x))
        for x, w, w_base, x_base in jobs:
            tb.expect_matmul(x, w)
            rw = words_per_row(w.shape[1], W)
            await tb.mcmd.send(encode_mcmd(w_base=w_base, w_stride=rw, n=w.shape[0],
                                           k=w.shape[1], x_base=x_base, x_stride=rw,
                                           m=x.shape[0]))
        await tb.stop()
    assert not int(dut.mx_error.value)


def _pack(tb, a):
    """Pack rows with random padding bytes."""
    return pack_rows(a, W, rng=tb.np_rng)


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def extremes(dut):
    """All -128, all 127, mixed signs, zeros and all-equal rows at K = 1, 8, 172, k_max."""
    tb = TileBench(dut, CFG, seed=SEED + 1)
    await tb.start()
    for k in sorted({1, W, 172, CFG.k_max}):
        cases = {
            "all -128": (np.full((M, k), -128), np.full((2, k), -128)),
            "all 127": (np.full((M, k), 127), np.full((2, k), 127)),
            "-128 x 127": (np.full((M, k), -128), np.full((2, k), 127)),
            "zeros": (np.zeros((M, k)), _rand(tb, (2, k))),
            "equal rows": (np.tile(_rand(tb, (1, k)), (M, 1)), np.tile(_rand(tb, (1, k)), (3, 1))),
        }
        for name, (x, w) in cases.items():
            x, w = x.astype(np.int8), w.astype(np.int8)
            dut._log.info("extremes: %s, K = %d", name, k)
            alloc = Allocator()
            await tb.matmul(x, w, w_base=alloc.take(w.shape[0] * words_per_row(k, W)),
                            x_base=alloc.take(M * words_per_row(k, W)))
            await tb.stop()
    assert not int(dut.mx_error.value)


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def strides_and_reuse(dut):
    """Row strides wider than the rows, and x_keep reusing the loaded activations."""
    tb = TileBench(dut, CFG, seed=SEED + 2, stall=0.2)
    await tb.start()
    alloc = Allocator()
    k = 21
    rw = words_per_row(k, W)
    m = min(3, M)
    x = _rand(tb, (m, k))
    w1, w2 = _rand(tb, (4, k)), _rand(tb, (5, k))
    x_base = alloc.take(m * (rw + 2))
    await tb.matmul(x, w1, w_base=alloc.take(4 * (rw + 3)), x_base=x_base, w_stride=rw + 3,
                    x_stride=rw + 2)
    await tb.matmul(x, w2, w_base=alloc.take(5 * rw), x_base=0, x_keep=True)
    await tb.stop()
    assert not int(dut.mx_error.value)


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def bad_commands(dut):
    """Bad shapes and K > k_max are refused at command time: error code, no result."""
    tb = TileBench(dut, CFG, seed=SEED + 3)
    await tb.start()
    good = dict(w_base=0, w_stride=1, n=1, k=8, x_base=0, x_stride=1, m=1)
    cases = [
        (dict(k=CFG.k_max + 1, w_stride=words_per_row(CFG.k_max + 1, W)),
         MatrixError.K_TOO_LARGE),
        (dict(k=2 ** 16 - 1), MatrixError.K_TOO_LARGE),
        (dict(k=0), MatrixError.BAD_SHAPE),
        (dict(n=0), MatrixError.BAD_SHAPE),
        (dict(m=0), MatrixError.BAD_SHAPE),
        (dict(m=M + 1), MatrixError.BAD_SHAPE),
    ]
    for change, code in cases:
        await tb.reset()
        await tb.mcmd.send(encode_mcmd(**{**good, **change}))
        await wait_until(tb.clk, lambda: int(dut.mx_error.value), 20, f"error for {change}")
        assert int(dut.mx_error_code.value) == code.value, (change, int(dut.mx_error_code.value))
        await tb.stop(cycles=50, quiet=50)   # nothing expected: any result fails the board


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def sram_range(dut):
    """Weight rows running past the SRAM end read as 0 and flag SRAM_RANGE (no wrap)."""
    tb = TileBench(dut, CFG, seed=SEED + 4)
    await tb.start()
    depth = CFG.sram_words
    k = 3 * W
    x = _rand(tb, (2, k))
    await tb.load(0, _pack(tb, x))
    # Words 0.. hold data that a wrapped address would hit (x); the last two words in range
    # hold non-zero weights, which must still multiply beside the out-of-range zeros.
    await tb.load(depth - 2, [tb.rng.getrandbits(8 * W) | 1, tb.rng.getrandbits(8 * W) | 1])
    for w_base, w_stride in [(depth - 2, 1), (2 ** 16 - 2, 2)]:
        await tb.reset()
        n = 3
        rows = []
        for r in range(n):
            row = []
            for j in range(3):
                a = w_base + r * w_stride + j
                row.append(tb.shadow.read(a) if a < 2 ** 16 else 0)
            rows.append(np.frombuffer(b"".join(v.to_bytes(W, "little") for v in row),
                                      dtype=np.int8)[:k])
        if w_base == depth - 2:
            assert rows[0].any() and (matmul_ref(x, np.stack(rows)) != 0).any()
        tb.expect_matmul(x, np.stack(rows))
        await tb.mcmd.send(encode_mcmd(w_base=w_base, w_stride=w_stride, n=n, k=k,
                                       x_base=0, x_stride=3, m=2))
        await tb.stop()
        assert int(dut.mx_error.value)
        assert int(dut.mx_error_code.value) == MatrixError.SRAM_RANGE.value


def _util_shapes():
    """(m, n, k, x_keep) to measure; N is cut down to what fits below the KV store."""
    wanted = [(M, 64, 172, False), (M, 64, 172, True), (M, 128, 64, False), (1, 64, 8, False),
              (M, 64, 8, False), (M, 16, CFG.k_max, False)]
    shapes = []
    for m, n, k, keep in wanted:
        rw = words_per_row(k, W)
        n = min(n, CFG.kv.base // rw - m)
        shapes.append((m, n, k, keep))
    return shapes


@cocotb.test(timeout_time=4 * TIMEOUT_US, timeout_unit="us")
async def utilisation(dut):
    """Measure useful MAC cycles / total cycles per command; one weight word per cycle.

    Total = from the cycle the command is accepted to the cycle its last result leaves,
    with the result sink always ready.  Useful = cycles that issue a weight word.  The
    weight words of a command must issue on consecutive cycles (steady state).
    """
    tb = TileBench(dut, CFG, seed=SEED + 5)
    await tb.start()
    report = []
    for m, n, k, keep in _util_shapes():
        alloc = Allocator()
        rw = words_per_row(k, W)
        x, w = _rand(tb, (m, k)), _rand(tb, (n, k))
        x_base = alloc.take(m * rw)
        w_base = alloc.take(n * rw)
        await tb.load(x_base, _pack(tb, x))
        if keep:   # prime the activation buffer with an N = 1 command first
            await tb.matmul(x, w[:1], w_base=w_base, x_base=x_base)
            await tb.stop()
        await tb.load(w_base, _pack(tb, w))
        tb.expect_matmul(x, w)
        probe = cocotb.start_soon(_probe(dut))
        await tb.mcmd.send(encode_mcmd(w_base=w_base, w_stride=rw, n=n, k=k, x_base=x_base,
                                       x_stride=rw, m=m, x_keep=int(keep)))
        await tb.stop()
        first_cmd, macs, first_mac, last_mac, last_res = await probe
        total = last_res - first_cmd + 1
        assert macs == n * rw, (macs, n * rw)
        assert last_mac - first_mac + 1 == macs, "weight words did not issue every cycle"
        entry = dict(m=m, n=n, k=k, x_keep=keep, words=n * rw, cycles=total,
                     utilisation=round(macs / total, 4),
                     mac_efficiency=round(m * n * k / (total * M * W), 4))
        dut._log.info("utilisation %s", entry)
        report.append(entry)
    path = os.environ.get("UTIL_JSON")
    if path:
        with open(path, "w") as f:
            json.dump({"config": os.environ.get("TILE_CONFIG"), "shapes": report}, f, indent=1)


async def _probe(dut):
    """Return (command cycle, mac count, first mac, last mac, last result cycle)."""
    cycle = 0
    first_cmd = first_mac = last_mac = None
    macs = 0
    while True:
        await ReadOnly()     # values of this cycle: a transfer happens at its closing edge
        cycle += 1
        assert cycle < 100_000, "watchdog: probe ran away"
        if first_cmd is None and int(dut.i_mcmd__valid.value) and int(dut.i_mcmd__ready.value):
            first_cmd = cycle
        if int(dut.mac.value):
            macs += 1
            first_mac = cycle if first_mac is None else first_mac
            last_mac = cycle
        if int(dut.o_res__valid.value) and int(dut.o_res__ready.value):
            if decode_result(int(dut.o_res__payload.value), M)[1]:   # last
                return first_cmd, macs, first_mac, last_mac, cycle
        await RisingEdge(dut.clk)
