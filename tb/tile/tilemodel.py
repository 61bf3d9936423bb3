"""Reference models and encoders for the tile benches (Amaranth simulator and cocotb).

Everything here is plain Python + numpy, importable both by pytest and inside a cocotb
simulator process.  Field layouts come from :mod:`chipotle.hw.tile` (one definition).

Members
-------
matmul_ref
    The numpy reference of the matrix unit.
pack_rows
    Lay an int8 matrix out in SRAM words (row-major, rows padded to whole words).
Shadow
    A byte-exact shadow copy of the tile SRAM.
KvModel
    The KV cache contents plus the SRAM image the KV store must produce.
encode_mcmd, encode_kvcmd, decode_result
    Command / result word packing through the gateware's own layouts.
configs
    Named :class:`TileConfig` s used by the benches.
load_core_program, start_core
    Amaranth-simulator steps: a ``TileCore``'s KV layout and instruction memory; its start.
"""

from __future__ import annotations

import numpy as np

from chipotle.hw.tile import (
    KvCommand,
    KvLayout,
    KvOp,
    MatrixCommand,
    TileConfig,
    matrix_result_layout,
)

__all__ = ["matmul_ref", "pack_rows", "Shadow", "KvModel", "encode_mcmd", "encode_kvcmd",
           "decode_result", "CONFIGS", "SIM_CONFIGS"]

INT32_MAX = 2 ** 31 - 1


def matmul_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Return ``Y = X @ W.T`` for int8 ``X [M, K]`` and ``W [N, K]`` as int32 ``[M, N]``.

    Computed in int64 and checked against the bound the hardware relies on
    (``|Y| <= 128 * 128 * K`` and within int32) before narrowing.
    """
    assert x.dtype == np.int8 and w.dtype == np.int8, (x.dtype, w.dtype)
    assert x.shape[1] == w.shape[1], (x.shape, w.shape)
    y = x.astype(np.int64) @ w.astype(np.int64).T
    k = x.shape[1]
    assert np.all(np.abs(y) <= 128 * 128 * k), "reference exceeds the 128*128*K bound"
    assert np.all((y >= -INT32_MAX - 1) & (y <= INT32_MAX)), "reference exceeds int32"
    return y.astype(np.int32)


def words_per_row(k: int, word_bytes: int) -> int:
    """Return ``ceil(k / word_bytes)``."""
    return -(-k // word_bytes)


def pack_rows(a: np.ndarray, word_bytes: int, *, stride: int | None = None,
              rng: np.random.Generator | None = None) -> list[int]:
    """Return the SRAM words of int8 matrix ``a`` laid out row-major.

    Row ``r`` starts at word ``r * stride`` (default ``ceil(K / W)``); element ``k`` is byte
    ``k % W`` of word ``k // W``, little-endian.  Padding bytes are random when ``rng`` is
    given (the hardware must mask them), else zero.
    """
    rows, k = a.shape
    rw = words_per_row(k, word_bytes)
    stride = rw if stride is None else stride
    assert stride >= rw
    buf = np.zeros((rows, stride * word_bytes), dtype=np.uint8)
    if rng is not None:
        buf[:] = rng.integers(0, 256, size=buf.shape, dtype=np.uint8)
    buf[:, :k] = a.astype(np.int8).view(np.uint8)
    flat = buf.reshape(-1, word_bytes)
    return [int.from_bytes(bytes(w), "little") for w in flat]


class Shadow:
    """Byte-exact model of the SRAM contents (zero after configuration)."""

    def __init__(self, depth: int, word_bytes: int):
        self.depth = depth
        self.word_bytes = word_bytes
        self.mem = np.zeros((depth, word_bytes), dtype=np.uint8)

    def write(self, addr: int, word: int, mask: int | None = None) -> None:
        """Apply a write (ignored, as in hardware, when ``addr`` is out of range)."""
        if not 0 <= addr < self.depth:
            return
        data = np.frombuffer(word.to_bytes(self.word_bytes, "little"), dtype=np.uint8)
        mask = (1 << self.word_bytes) - 1 if mask is None else mask
        for b in range(self.word_bytes):
            if mask >> b & 1:
                self.mem[addr, b] = data[b]

    def read(self, addr: int) -> int:
        """Return the word at ``addr`` (0 when out of range)."""
        if not 0 <= addr < self.depth:
            return 0
        return int.from_bytes(bytes(self.mem[addr]), "little")

    def write_words(self, addr: int, words: list[int]) -> None:
        for i, w in enumerate(words):
            self.write(addr + i, w)


class KvModel:
    """The KV cache of a tile: values appended so far and their expected SRAM bytes."""

    def __init__(self, layout: KvLayout):
        self.layout = layout
        L = layout
        self.k = np.zeros((L.n_layers, L.n_kv_heads, L.max_pos, L.head_size), dtype=np.int8)
        self.v = np.zeros_like(self.k)

    def append(self, shadow: Shadow, layer: int, head: int, pos: int,
               kvec: np.ndarray, vvec: np.ndarray, header: int = 0) -> None:
        """Record an accepted append and apply its writes to ``shadow``.

        ``header`` is the K row's header word (written only when the layout has one).
        """
        L = self.layout
        W = L.word_bytes
        self.k[layer, head, pos] = kvec
        self.v[layer, head, pos] = vvec
        if L.k_header:
            shadow.write(L.k_row(layer, head, pos), header)
        kb = kvec.astype(np.int8).view(np.uint8)
        row = L.k_data(layer, head, pos)
        for d in range(L.head_size):
            shadow.mem[row + d // W, d % W] = kb[d]
        vb = vvec.astype(np.int8).view(np.uint8)
        row = L.v_row(layer, head, pos)
        for d in range(L.head_size):
            shadow.mem[row + d // W, d % W] = vb[d]


def encode_mcmd(*, w_base, w_stride, n, k, x_base, x_stride, m, x_keep=0) -> int:
    """Return the bits of a :class:`MatrixCommand`."""
    fields = dict(w_base=w_base, w_stride=w_stride, n=n, k=k, x_base=x_base,
                  x_stride=x_stride, m=m, x_keep=x_keep)
    for name, value in fields.items():
        width = MatrixCommand.as_shape()[name].width
        assert 0 <= value < 2 ** width, f"{name}={value} does not fit {width} bits"
    return MatrixCommand.const(fields).as_bits()


def encode_kvcmd(op, *, layer, head, pos, k_src=0, v_src=0, x_base=0, x_stride=0, m=0,
                 x_keep=0) -> int:
    """Return the bits of a :class:`KvCommand` (``op`` a :class:`KvOp` or a raw int)."""
    if op == KvOp.APPEND:
        args = {"append": {"k_src": k_src, "v_src": v_src}}
    else:
        args = {"stream": {"x_base": x_base, "x_stride": x_stride, "m": m, "x_keep": x_keep}}
    bits = KvCommand.const({"op": KvOp.APPEND, "layer": layer, "head": head, "pos": pos,
                            "args": args}).as_bits()
    op_field = KvCommand.as_shape()["op"]
    raw = op.value if isinstance(op, KvOp) else int(op)
    return bits | (raw << op_field.offset)


def decode_result(bits: int, max_m: int) -> tuple[int, int, list[int]]:
    """Return ``(n, last, acc)`` of a result word."""
    r = matrix_result_layout(max_m).from_bits(bits)
    return int(r.n), int(r.last), [int(a) for a in r.acc]


# Configurations of the benches.  "full" is the product default SRAM (32 KiB) with a KV
# share whose head_size (12) and max_pos (100) are not multiples of W and whose K rows carry
# a header word (the scale code of docs/numerics.md); "small" keeps
# Icarus fast; "narrow" exercises the other parameters (W = 4, 4 banks, M = 2, a KV share
# of one layer and three heads whose head_size is a multiple of W, no K header).
CONFIGS = {
    "full": TileConfig(
        sram_bytes=32768, word_bytes=8, n_banks=2, max_m=4, k_max=512,
        kv=KvLayout(n_layers=2, n_kv_heads=2, head_size=12, max_pos=100, base=2048,
                    k_header=True)),
    "small": TileConfig(
        sram_bytes=8192, word_bytes=8, n_banks=2, max_m=4, k_max=176,
        kv=KvLayout(n_layers=2, n_kv_heads=2, head_size=12, max_pos=20, base=600,
                    k_header=True)),
    "narrow": TileConfig(
        sram_bytes=4096, word_bytes=4, n_banks=4, max_m=2, k_max=200,
        kv=KvLayout(n_layers=1, n_kv_heads=3, head_size=8, max_pos=30, base=640,
                    word_bytes=4)),
}

#: Configurations run under each simulator.
SIM_CONFIGS = {"verilator": ("full", "narrow"), "icarus": ("small", "full")}


async def load_core_program(ctx, dut, words, kv=None) -> None:
    """On Amaranth's simulator, set a ``TileCore``'s KV layout (`kv`, a ``KvLayout``; None:
    leave it) and write `words` (encoded instructions) into its instruction memory from
    address 0 through ``i_imem``, one a cycle; returns with ``i_imem`` idle."""
    if kv is not None:
        from chipotle.hw.tile.kvstore import KvParams
        ctx.set(dut.kv_layout, KvParams.from_layout(kv))
    for i, w in enumerate(words):
        ctx.set(dut.i_imem.payload, {"addr": i, "data": w})
        ctx.set(dut.i_imem.valid, 1)
        await ctx.tick()
    ctx.set(dut.i_imem.valid, 0)


async def start_core(ctx, dut, pc: int = 0) -> None:
    """On Amaranth's simulator, start a ``TileCore``'s controller at `pc` through
    ``i_start`` (held until taken); returns the cycle after, with ``i_start`` idle."""
    ctx.set(dut.i_start.payload, pc)
    ctx.set(dut.i_start.valid, 1)
    while not ctx.get(dut.i_start.ready):
        await ctx.tick()
    await ctx.tick()
    ctx.set(dut.i_start.valid, 0)
