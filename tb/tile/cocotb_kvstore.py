"""cocotb bench of the KV store (through ``TileDatapath``, with the matrix unit).

K and V vectors are written into a scratch area through the host port and appended with
``APPEND``; the model (``tilemodel.KvModel``) keeps the cache and applies the expected
writes to a byte-exact SRAM shadow.  ``STREAM_K`` runs the scores on the matrix unit;
its results are scoreboarded against numpy (``q @ K[:pos+1].T``); the V rows are read back
where the vector unit's ``wsum`` reads them.  Refused commands must set the right error
code and leave the whole SRAM equal to the shadow.

Environment: ``TILE_CONFIG``, ``SEED``.
"""

from __future__ import annotations

import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, with_timeout
from tbtile import TileBench, wait_until
from tilemodel import CONFIGS, KvModel, encode_kvcmd, encode_mcmd, pack_rows, words_per_row

from chipotle.hw.tile import KvError, KvOp

CFG = CONFIGS[os.environ.get("TILE_CONFIG", "small")]
SEED = int(os.environ.get("SEED", "1"))
L = CFG.kv
W = CFG.word_bytes
M = CFG.max_m
TIMEOUT_US = 4000
SCRATCH = 0    # K/V source vectors, queries, attention weights live below the KV store


def _rand(tb, shape):
    return tb.np_rng.integers(-128, 128, size=shape, dtype=np.int8)


async def _idle(tb, what):
    await wait_until(tb.clk, lambda: not int(tb.dut.busy.value), 2000, what)


KDW = L.k_data_words
QBASE = SCRATCH + 2 * L.k_row_words       # queries / attention weights, after the K, V source


async def _append(tb, kvm, layer, head, pos):
    """Append random K (with a random header word if any), V at ``(layer, head, pos)``."""
    kv = _rand(tb, (2, L.head_size))
    header = tb.rng.getrandbits(8 * W)
    krow = [header] * L.k_header_words + pack_rows(kv[:1], W, rng=tb.np_rng)
    await tb.load(SCRATCH, krow + pack_rows(kv[1:], W, rng=tb.np_rng))
    await tb.kvcmd.send(encode_kvcmd(KvOp.APPEND, layer=layer, head=head, pos=pos,
                                     k_src=SCRATCH, v_src=SCRATCH + len(krow)))
    kvm.append(tb.shadow, layer, head, pos, kv[0], kv[1], header)
    await _idle(tb, f"append ({layer}, {head}, {pos})")


async def _scores(tb, kvm, layer, head, pos, m):
    """Run STREAM_K for ``m`` query rows and queue the expected scores."""
    q = _rand(tb, (m, L.head_size))
    await tb.load(QBASE, pack_rows(q, W, rng=tb.np_rng))
    tb.expect_matmul(q, kvm.k[layer, head, :pos + 1])
    await tb.kvcmd.send(encode_kvcmd(KvOp.STREAM_K, layer=layer, head=head, pos=pos,
                                     x_base=QBASE, x_stride=KDW, m=m))


async def _v_rows(tb, kvm, layer, head, pos):
    """Check the V rows 0..pos of ``(layer, head)`` where the vector unit's ``wsum`` reads them
    (``v_row(layer, head, p)``, stride ``v_row_words``)."""
    rows = []
    for p in range(pos + 1):
        words = [w for w, _ in await tb.host.read(L.v_row(layer, head, p), L.v_row_words)]
        raw = b"".join(w.to_bytes(W, "little") for w in words)
        rows.append(np.frombuffer(raw[:L.head_size], np.int8))
    v = np.array(rows)
    np.testing.assert_array_equal(v, kvm.v[layer, head, :pos + 1])


def _heads():
    return [(lay, h) for lay in range(L.n_layers) for h in range(L.n_kv_heads)]


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def capacity_port(dut):
    """The capacity port reads max_pos."""
    tb = TileBench(dut, CFG, seed=SEED)
    await tb.start()
    assert int(dut.kv_capacity.value) == L.capacity == L.max_pos


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
@cocotb.parametrize(stall=[0.0, 0.3])
async def append_and_stream(dut, stall):
    """Decode-style appends for every (layer, head), attention products at several positions.

    GQA: two query heads share each KV head (M = 2), plus M = 1 and M = max; at the end the
    whole SRAM must equal the model.
    """
    tb = TileBench(dut, CFG, seed=SEED + int(stall * 10), stall=stall, idle=stall)
    await tb.start()
    await tb.fill_sram()
    kvm = KvModel(L)
    n_pos = min(L.max_pos, 24)
    checkpoints = {0, W - 1, W, n_pos // 2 + 1, n_pos - 1}
    for pos in range(n_pos):
        for layer, head in _heads():
            await _append(tb, kvm, layer, head, pos)
        if pos in checkpoints:
            for i, (layer, head) in enumerate(_heads()):
                m = [2, 1, M][(pos + i) % 3]
                await _scores(tb, kvm, layer, head, pos, m)
                await tb.stop()
                await _v_rows(tb, kvm, layer, head, pos)
    # the last position of the capacity, then attention over all of it on one head
    last = L.max_pos - 1
    for pos in range(n_pos, L.max_pos):
        await _append(tb, kvm, 1 % L.n_layers, 0, pos)
    await _scores(tb, kvm, 1 % L.n_layers, 0, last, 2)
    await tb.stop()
    await _v_rows(tb, kvm, 1 % L.n_layers, 0, last)
    assert not int(dut.kv_error.value) and not int(dut.mx_error.value)
    await tb.check_sram()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def refusals(dut):
    """Commands past capacity or out of range are refused, write nothing, issue nothing."""
    tb = TileBench(dut, CFG, seed=SEED + 7)
    await tb.start()
    kvm = KvModel(L)
    await tb.fill_sram()    # a known pattern everywhere, so any stray write shows
    for layer, head in _heads():
        await _append(tb, kvm, layer, head, L.max_pos - 1)
        await _append(tb, kvm, layer, head, 0)
    kw = L.k_row_words
    depth = CFG.sram_words
    cases = [
        (KvOp.APPEND, dict(layer=0, head=0, pos=L.max_pos), KvError.POS_RANGE),
        (KvOp.APPEND, dict(layer=L.n_layers - 1, head=L.n_kv_heads - 1, pos=L.max_pos),
         KvError.POS_RANGE),
        (KvOp.APPEND, dict(layer=0, head=0, pos=2 ** 16 - 1), KvError.POS_RANGE),
        (KvOp.APPEND, dict(layer=L.n_layers, head=0, pos=0), KvError.BAD_HEAD),
        (KvOp.APPEND, dict(layer=0, head=L.n_kv_heads, pos=0), KvError.BAD_HEAD),
        (KvOp.APPEND, dict(layer=0, head=0, pos=1, k_src=depth - kw + 1), KvError.SRC_RANGE),
        (KvOp.APPEND, dict(layer=0, head=0, pos=1, v_src=2 ** 16 - 1), KvError.SRC_RANGE),
        (3, dict(layer=0, head=0, pos=0), KvError.BAD_OP),
        (KvOp.STREAM_K, dict(layer=0, head=0, pos=L.max_pos, m=1), KvError.POS_RANGE),
        (KvOp.STREAM_K, dict(layer=0, head=L.n_kv_heads, pos=0, m=1), KvError.BAD_HEAD),
        (2, dict(layer=0, head=0, pos=0, m=1), KvError.BAD_OP),       # the old STREAM_V
    ]
    for op, args, code in cases:
        await tb.reset()
        assert not int(dut.kv_error.value)
        await tb.kvcmd.send(encode_kvcmd(op, **args))
        await wait_until(tb.clk, lambda: int(dut.kv_error.value), 20, f"refusal of {args}")
        assert int(dut.kv_error_code.value) == code.value, (args, int(dut.kv_error_code.value))
        await tb.stop(cycles=50, quiet=50)    # no matrix result may appear
    await tb.check_sram()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def host_out_of_range(dut):
    """Host accesses past the SRAM end flag error, write nothing and read 0 (no aliasing)."""
    tb = TileBench(dut, CFG, seed=SEED + 8)
    await tb.start()
    await tb.fill_sram()
    depth = CFG.sram_words
    mask = (1 << 8 * W) - 1
    await tb.load(5, [0x1122334455667788 & mask])
    await tb.load(depth - 1, [0x0102030405060708 & mask])
    # Addresses that would alias words 5 and depth - 1 if the bank/row bits wrapped.
    for addr in (depth, depth + 5, 2 * depth + 5, 2 ** 16 - 1):
        errs = await tb.host.write(addr, [0xDEADBEEFDEADBEEF & mask])
        assert errs == [1], (addr, errs)
        [(word, err)] = await tb.host.read(addr)
        assert (word, err) == (0, 1), (addr, word, err)
    [(word, err)] = await tb.host.read(5)
    assert (word, err) == (0x1122334455667788 & mask, 0)
    await tb.check_sram()


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def command_mux_order(dut):
    """A matrix command offered while the unit is busy keeps its turn over a later KV stream.

    Order expected: the long command, then the waiting ``i_mcmd`` command, then the
    ``STREAM_K`` matrix command the KV store offered afterwards.
    """
    tb = TileBench(dut, CFG, seed=SEED + 9)
    await tb.start()
    kvm = KvModel(L)
    for pos in range(3):
        await _append(tb, kvm, 0, 0, pos)
    base = QBASE + M * KDW
    k = 64
    rw = words_per_row(k, W)
    x, w_long, w_next = _rand(tb, (M, k)), _rand(tb, (24, k)), _rand(tb, (3, k))
    x_base, long_base = base, base + M * rw
    next_base = long_base + 24 * rw
    assert next_base + 3 * rw <= L.base
    await tb.load(x_base, pack_rows(x, W, rng=tb.np_rng))
    await tb.load(long_base, pack_rows(w_long, W, rng=tb.np_rng))
    await tb.load(next_base, pack_rows(w_next, W, rng=tb.np_rng))
    q = _rand(tb, (2, L.head_size))
    q_base = QBASE
    await tb.load(q_base, pack_rows(q, W, rng=tb.np_rng))
    tb.expect_matmul(x, w_long)
    tb.expect_matmul(x, w_next)
    tb.expect_matmul(q, kvm.k[0, 0, :3])
    await tb.mcmd.send(encode_mcmd(w_base=long_base, w_stride=rw, n=24, k=k, x_base=x_base,
                                   x_stride=rw, m=M))
    pending = cocotb.start_soon(tb.mcmd.send(encode_mcmd(
        w_base=next_base, w_stride=rw, n=3, k=k, x_base=x_base, x_stride=rw, m=M)))
    await ClockCycles(tb.clk, 5)
    await tb.kvcmd.send(encode_kvcmd(KvOp.STREAM_K, layer=0, head=0, pos=2, x_base=q_base,
                                     x_stride=KDW, m=2))
    await with_timeout(pending, 20 * TIMEOUT_US, "ns")
    await tb.stop()
