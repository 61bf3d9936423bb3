"""Program generation: one transformer layer on one tile (the seed of the compiler).

`LayerLayout` places everything one llama2 layer needs in one tile's SRAM: its quantised
weights with their requantisation tables (from a golden `QuantizedModel`), the RMSNorm gains,
the vector-unit tables, the RoPE table, the KV cache of ``max_pos`` positions and the
activation buffers.  `layer_program` emits the decode step of that layer as assembly text:
one program for every position, which reads the position from SRAM (``pos``).
`place_layer` writes the static data into a simulator tile, `read_layer_trace` reads the
intermediates back under the names of `GoldenModel`'s trace.  The layout and the program are
described in ``docs/isa.md`` ("A layer on one tile").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..golden import numerics as nx
from ..golden.quantize import QuantizedModel
from .core import C_BITS, OFF_BITS, IsaConfig, TableId

__all__ = ["LayerLayout", "layer_program", "place_layer", "write_step_input",
           "read_layer_trace", "requant_table", "padded_rows", "vector_table",
           "VECTOR_TABLES"]

_MATRICES = ("wq", "wk", "wv", "wo", "w1", "w3", "w2")
#: Vector-unit table -> the `QuantizedModel` attribute holding its entries.
VECTOR_TABLES = _TABLES = {TableId.RSQRT: "rsqrt_table", TableId.EXP2: "exp2_table",
           TableId.RECIP: "recip_table", TableId.DYNQ: "dynquant_table",
           TableId.SIGMOID: "sigmoid_table"}


def _layer_regions(qm: QuantizedModel, isa: IsaConfig, max_pos: int) -> tuple:
    """`LayerLayout`'s regions, matrix shapes and size (bytes) at `max_pos` positions,
    whether or not they fit the tile (`LayerLayout` checks that)."""
    c = qm.config
    P, H, KV, hs = max_pos, c.n_heads, c.n_kv_heads, c.head_size
    dim, hid, kvd = c.dim, c.hidden_dim, c.kv_dim
    rec = isa.record_bytes
    shapes = {  # name: (N, K) of each matrix
        "wq": (dim, dim), "wk": (kvd, dim), "wv": (kvd, dim), "wo": (dim, dim),
        "w1": (hid, dim), "w3": (hid, dim), "w2": (dim, hid)}
    # c-operand data first: it must sit below 2**17 (the `c` immediate).
    order = [("pos", 8), ("eps_att", 8), ("eps_ffn", 8), ("att_ms", 4)]
    order += [(f"{w}_ms", 4 * shapes[w][0]) for w in _MATRICES]
    order += [(f"tab_{t.name.lower()}", 2 * len(getattr(qm, a)))
              for t, a in _TABLES.items()]
    order += [(w, shapes[w][0] * isa.pad(shapes[w][1])) for w in _MATRICES]
    order += [("g_att", 2 * dim), ("g_ffn", 2 * dim), ("rope", P * 2 * hs)]
    order += [
        ("x", 2 * dim), ("xn_att", 2 * dim), ("xq_att", rec(dim)), ("q16", 2 * dim),
        ("k16", 2 * kvd), ("qrec", H * rec(hs)), ("t", H * 4 * P),
        ("p", H * isa.pad(2 * P)), ("acc", 4 * dim), ("arec", rec(dim)), ("yo", 2 * dim),
        ("x_att", 2 * dim), ("xn_ffn", 2 * dim), ("xq_ffn", rec(dim)), ("h1", 2 * hid),
        ("h3", 2 * hid), ("silu", 2 * hid), ("gate", 4 * hid), ("grec", rec(hid)),
        ("y2", 2 * dim), ("x_out", 2 * dim),
        ("kcache", KV * P * rec(hs)), ("vcache", P * kvd)]
    regions, addr = {}, 0
    for name, nbytes in order:
        regions[name] = (addr, nbytes)
        addr += isa.pad(nbytes)
    return regions, shapes, addr


@dataclass
class LayerLayout:
    """Byte addresses of one layer's data in one tile's SRAM.

    Parameters
    ----------
    qm : QuantizedModel
        The model (only its configuration is used for the layout).
    isa : IsaConfig
        Tile parameters (W, SRAM size).
    max_pos : int, optional
        Positions the KV cache and the RoPE table hold (default: the model's ``seq_len``).

    Attributes
    ----------
    regions : dict of str to (int, int)
        ``name -> (address, bytes)``; every region is word-aligned.
    size : int
        Bytes used.

    Raises
    ------
    ValueError
        If the layer does not fit the SRAM, or needs addresses beyond the 17-bit immediate
        offsets (this seed generator uses no base registers for static data).
    """

    qm: QuantizedModel
    isa: IsaConfig
    max_pos: int | None = None
    regions: dict = field(default_factory=dict, init=False)
    size: int = field(default=0, init=False)

    def __post_init__(self):
        c, isa = self.qm.config, self.isa
        if self.max_pos is None:
            self.max_pos = c.seq_len
        if not 1 <= self.max_pos <= c.seq_len:
            raise ValueError(f"`max_pos` must be in [1, {c.seq_len}], not {self.max_pos}")
        self.regions, self.shapes, self.size = _layer_regions(self.qm, isa, self.max_pos)
        last_c = max(self.regions[n][0] for n in ("eps_att", "eps_ffn", "att_ms"))
        last_c = max(last_c, *(self.regions[f"{w}_ms"][0] for w in _MATRICES))
        if self.size > isa.sram_bytes:
            raise ValueError(f"the layer needs {self.size} bytes of SRAM with max_pos = "
                             f"{self.max_pos}; the tile has {isa.sram_bytes}")
        if self.size > 1 << OFF_BITS or last_c >= 1 << C_BITS:
            raise ValueError(f"the layer spans {self.size} bytes, beyond the {1 << OFF_BITS}"
                             f" bytes that immediate offsets reach")

    def __getitem__(self, name: str) -> int:
        """Return the address of region `name`."""
        return self.regions[name][0]

    @property
    def k_record(self) -> int:
        """Bytes of one K-cache (or query) record: a header word and ``head_size`` int8."""
        return self.isa.record_bytes(self.qm.config.head_size)

    @property
    def k_block(self) -> int:
        """Bytes of the K cache of one KV head (``max_pos`` records)."""
        return self.max_pos * self.k_record

    def memory_map(self) -> str:
        """Return the layout as a printable table (address, bytes, name)."""
        rows = [f"{a:#07x} {n:7d}  {name}" for name, (a, n) in self.regions.items()]
        return "\n".join(["address   bytes  region", *rows, f"total {self.size} bytes"])


def requant_table(m: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Return per-row requantisation pairs as stored in SRAM: uint16 ``[m0, s0, m1, s1, ...]``.

    Raises
    ------
    ValueError
        If a multiplier or a shift does not fit 16 bits.
    """
    m, s = np.asarray(m, np.int64), np.asarray(s, np.int64)
    if m.min() < 0 or m.max() > 0xFFFF or s.min() < 0 or s.max() > 0xFFFF:
        raise ValueError("multipliers and shifts must fit uint16")
    return np.stack([m, s], axis=-1).reshape(-1).astype("<u2")


def padded_rows(w: np.ndarray, isa: IsaConfig) -> np.ndarray:
    """Return an int8 matrix ``(N, K)`` as stored in SRAM: rows padded with zeros to words.

    Returns
    -------
    numpy.ndarray
        int8, shape ``(N, pad(K))``.

    Raises
    ------
    TypeError
        If ``w`` is not an int8 matrix (a cast would wrap or truncate silently).
    """
    w = np.asarray(w)
    if w.dtype != np.int8 or w.ndim != 2:
        raise TypeError(f"`w` must be an int8 matrix, not {w.dtype} of shape {w.shape}")
    out = np.zeros((w.shape[0], isa.pad(w.shape[1])), np.int8)
    out[:, :w.shape[1]] = w
    return out


def vector_table(qm: QuantizedModel, tid: TableId) -> np.ndarray:
    """Return vector-unit table `tid` of `qm` as stored in SRAM (uint16 entries).

    Raises
    ------
    ValueError
        If an entry does not fit uint16.
    """
    attr = _TABLES[tid]
    tab = np.asarray(getattr(qm, attr))
    if tab.min() < 0 or tab.max() > 0xFFFF:
        raise ValueError(f"table {attr} does not fit uint16")
    return tab.astype("<u2")


def layer_program(lay: LayerLayout, layer: int) -> str:
    """Return the assembly text of one decode step of `layer` at the position in SRAM.

    The host writes the position (int32) at ``lay["pos"]`` and the input residual row (int16)
    at ``lay["x"]``; the program appends K and V at that position, computes attention over
    positions ``0 .. pos`` and the feed-forward block, leaves the output residual at
    ``lay["x_out"]``, signals DONE 1 and halts.  Started at 0 it first loads the vector
    unit's tables; started at the label ``step`` it skips them (they stay loaded).

    Parameters
    ----------
    lay : LayerLayout
    layer : int
        Index of the layer in ``lay.qm.layers`` (for its static formats).

    Returns
    -------
    str
    """
    c, ly, isa = lay.qm.config, lay.qm.layers[layer], lay.isa
    hs = c.head_size
    sym = {name.upper(): addr for name, (addr, _) in lay.regions.items()}
    sym.update(DIM=c.dim, HIDDEN=c.hidden_dim, KV_DIM=c.kv_dim, HS=hs, HS2=2 * hs, HS4=4 * hs,
               N_HEADS=c.n_heads, N_KV=c.n_kv_heads, KV_MUL=c.kv_mul,
               KREC=lay.k_record, KBLOCK=lay.k_block, ROPE_ROW=2 * hs,
               TROW=4 * lay.max_pos, PROW=isa.pad(2 * lay.max_pos),
               SHIFT_ATT=ly.att_norm.shift, SHIFT_FFN=ly.ffn_norm.shift,
               FH=ly.hidden_frac_bits, ROPE_SHIFT=nx.ROPE_FRAC_BITS)
    equs = "\n".join(f".equ {k}, {v:#x}" if v > 255 else f".equ {k}, {v}"
                     for k, v in sym.items())
    body = """
; one llama2 layer: decode step at the position stored at POS (docs/isa.md)
    table rsqrt, TAB_RSQRT                          ; once: the vector unit keeps them
    table exp2, TAB_EXP2
    table recip, TAB_RECIP
    table dynq, TAB_DYNQ
    table sigmoid, TAB_SIGMOID
step:
    ld    r1, POS
    add   r2, r1+1, 0                               ; T = pos + 1 positions to attend
    mul   r3, r1, ROPE_ROW                          ; RoPE row of pos
    mul   r4, r1, KREC                              ; K record of pos (in a head's block)
    mul   r5, r1, KV_DIM                            ; V row of pos
; attention: norm, q k v, RoPE
    rmsnorm.i16.i16 XN_ATT, X, G_ATT, DIM, EPS_ATT, SHIFT_ATT
    dynq.i8.i16     XQ_ATT, XN_ATT, DIM
    matmul.i16      Q16, XQ_ATT, WQ, WQ_MS, DIM, DIM, 1
    matmul.i16      K16, XQ_ATT, WK, WK_MS, KV_DIM, DIM, 1
    matmul.i8       r5+VCACHE, XQ_ATT, WV, WV_MS, KV_DIM, DIM, 1   ; V straight into the cache
    rope.i16.i16    Q16, Q16, r3+ROPE, DIM, HS, ROPE_SHIFT
    rope.i16.i16    K16, K16, r3+ROPE, KV_DIM, HS, ROPE_SHIFT
; quantise q per head into records, k per head into the K cache at pos
    add   r6, Q16, 0
    add   r7, QREC, 0
    loop  N_HEADS, q_end
    dynq.i8.i16     r7, r6, HS
    add   r6, r6+HS2, 0
    add   r7, r7+KREC, 0
q_end:
    add   r6, K16, 0
    add   r7, r4+KCACHE, 0
    loop  N_KV, k_end
    dynq.i8.i16     r7, r6, HS
    add   r6, r6+HS2, 0
    add   r7, r7+KBLOCK, 0
k_end:
; per query head: scores (base 2), softmax, weighted sum of V
    add   r6, QREC, 0
    add   r7, T, 0
    add   r8, KCACHE, 0
    add   r9, P, 0
    add   r10, ACC, 0
    add   r11, VCACHE, 0
    loop  N_KV, kv_end
    loop  KV_MUL, head_end
    matqk.i32       r7, r6, r8, ATT_MS, r2, HS, 1
    softmax.u16.i32 r9, r7, r2
    wsum.i32.u16    r10, r9, r11, r2, HS, KV_DIM
    add   r6, r6+KREC, 0
    add   r7, r7+TROW, 0
    add   r9, r9+PROW, 0
    add   r10, r10+HS4, 0
head_end:
    add   r8, r8+KBLOCK, 0
    add   r11, r11+HS, 0
kv_end:
    dynq.i8.i32     AREC, ACC, DIM
    matmul.i16      YO, AREC, WO, WO_MS, DIM, DIM, 1
    vadd.i16.i16    X_ATT, X, YO, DIM
; feed-forward (SwiGLU)
    rmsnorm.i16.i16 XN_FFN, X_ATT, G_FFN, DIM, EPS_FFN, SHIFT_FFN
    dynq.i8.i16     XQ_FFN, XN_FFN, DIM
    matmul.i16      H1, XQ_FFN, W1, W1_MS, HIDDEN, DIM, 1
    matmul.i16      H3, XQ_FFN, W3, W3_MS, HIDDEN, DIM, 1
    silu.i16.i16    SILU, H1, HIDDEN, FH
    vmul.i32.i16    GATE, SILU, H3, HIDDEN
    dynq.i8.i32     GREC, GATE, HIDDEN
    matmul.i16      Y2, GREC, W2, W2_MS, DIM, HIDDEN, 1
    vadd.i16.i16    X_OUT, X_ATT, Y2, DIM
    done  1
    halt
"""
    return equs + "\n" + body


def place_layer(sim, xy, lay: LayerLayout, layer: int) -> None:
    """Write a layer's static data into a tile: weights, tables, gains, RoPE table; clear KV.

    Parameters
    ----------
    sim : chipotle.isasim.IsaSim
    xy : tuple of int
        The tile.
    lay : LayerLayout
    layer : int
        Index of the layer in ``lay.qm.layers``.
    """
    qm, isa = lay.qm, lay.isa
    ly = qm.layers[layer]
    c = qm.config
    for w in _MATRICES:
        lin = getattr(ly, w)
        sim.write(xy, lay[w], padded_rows(lin.w, isa))
        sim.write(xy, lay[f"{w}_ms"], requant_table(lin.m, lin.s))
    for tid in _TABLES:
        sim.write(xy, lay[f"tab_{tid.name.lower()}"], vector_table(qm, tid))
    sim.write(xy, lay["eps_att"], np.array([ly.att_norm.eps], "<i8"))
    sim.write(xy, lay["eps_ffn"], np.array([ly.ffn_norm.eps], "<i8"))
    sim.write(xy, lay["att_ms"], requant_table([ly.att_m], [ly.att_s]))
    sim.write(xy, lay["g_att"], ly.att_norm.gain.astype("<i2"))
    sim.write(xy, lay["g_ffn"], ly.ffn_norm.gain.astype("<i2"))
    rope = np.concatenate([qm.rope_cos[:lay.max_pos], qm.rope_sin[:lay.max_pos]], axis=1)
    sim.write(xy, lay["rope"], rope.astype("<i2"))
    for name in ("kcache", "vcache"):
        sim.write(xy, lay[name], np.zeros(lay.regions[name][1], np.uint8))
    del c


def write_step_input(sim, xy, lay: LayerLayout, pos: int, x: np.ndarray) -> None:
    """Write a decode step's inputs: the position and the int16 residual row.

    Raises
    ------
    ValueError
        If `pos` is not below ``lay.max_pos``.
    TypeError
        If `x` is not int16 (a cast would wrap silently).
    """
    if not 0 <= pos < lay.max_pos:
        raise ValueError(f"`pos` must be in [0, {lay.max_pos}), not {pos}")
    x = np.asarray(x)
    if x.dtype != np.int16:
        raise TypeError(f"`x` must be int16 (the residual row), not {x.dtype}")
    sim.write(xy, lay["pos"], np.array([pos], "<i4"))
    sim.write(xy, lay["x"], x.astype("<i2"))


def read_layer_trace(sim, xy, lay: LayerLayout, pos: int) -> dict:
    """Read a finished step's intermediates under the names of `GoldenModel`'s trace.

    Returns
    -------
    dict of str to numpy.ndarray
        ``att_norm``, ``att_norm8``, ``q16``, ``k16``, ``q``, ``k``, ``v``, ``t``, ``p``,
        ``att_acc``, ``att_out8``, ``att_res``, ``ffn_norm``, ``ffn_norm8``, ``h1``, ``h3``,
        ``silu``, ``gate``, ``gate8``, ``res`` with the golden trace's shapes and dtypes
        (one position), plus ``key_cache``, ``value_cache`` (int8 ``(pos + 1, kv_dim)``),
        ``key_mu`` (int16) and ``key_exp`` (int8), shape ``(pos + 1, n_kv_heads)``.
    """
    c, isa = lay.qm.config, lay.isa
    W, H, KV, hs, T = isa.word_bytes, c.n_heads, c.n_kv_heads, c.head_size, pos + 1
    dim, hid, kvd = c.dim, c.hidden_dim, c.kv_dim

    def rd(name, n, dt, off=0):
        return sim.read(xy, lay[name] + off, n, dt)

    def rec_data(name, n):
        return rd(name, n, np.int8, W)

    def rows(addr, count, stride, n, dt):
        return np.stack([sim.read(xy, addr + r * stride, n, dt) for r in range(count)])

    krec = lay.k_record
    k_all = np.stack([rows(lay["kcache"] + h * lay.k_block + W, T, krec, hs, np.int8)
                      for h in range(KV)], axis=1)                      # (T, KV, hs)
    k_hdr = np.stack([rows(lay["kcache"] + h * lay.k_block, T, krec, 2, np.int16)
                      for h in range(KV)], axis=1)                      # (T, KV, 2)
    return {
        "att_norm": rd("xn_att", dim, np.int16),
        "att_norm8": rec_data("xq_att", dim),
        "q16": rd("q16", dim, np.int16).reshape(H, hs),
        "k16": rd("k16", kvd, np.int16).reshape(KV, hs),
        "q": rows(lay["qrec"] + W, H, krec, hs, np.int8),
        "k": k_all[pos],
        "v": rd("vcache", kvd, np.int8, pos * kvd),
        "t": rows(lay["t"], H, 4 * lay.max_pos, T, np.int32),
        "p": rows(lay["p"], H, isa.pad(2 * lay.max_pos), T, np.uint16),
        "att_acc": rd("acc", dim, np.int32),
        "att_out8": rec_data("arec", dim),
        "att_res": rd("x_att", dim, np.int16),
        "ffn_norm": rd("xn_ffn", dim, np.int16),
        "ffn_norm8": rec_data("xq_ffn", dim),
        "h1": rd("h1", hid, np.int16),
        "h3": rd("h3", hid, np.int16),
        "silu": rd("silu", hid, np.int16),
        "gate": rd("gate", hid, np.int32),
        "gate8": rec_data("grec", hid),
        "res": rd("x_out", dim, np.int16),
        "key_cache": k_all.reshape(T, kvd),
        "key_mu": k_hdr[..., 0],
        "key_exp": k_hdr[..., 1].astype(np.int8),
        "value_cache": rows(lay["vcache"], T, kvd, kvd, np.int8),
    }


def _largest_max_pos(qm: QuantizedModel, isa: IsaConfig) -> int:
    """The largest ``max_pos`` whose `LayerLayout` fits `isa`'s tile (0: none does)."""
    import bisect

    def fits(p: int) -> bool:
        try:
            LayerLayout(qm, isa, max_pos=p)
        except ValueError:
            return False
        return True
    # the layout grows with max_pos: the first that does not fit, counted from 1
    return bisect.bisect_left(range(1, qm.config.seq_len + 1), True, key=lambda p: not fits(p))


def _no_fit(qm: QuantizedModel, isa: IsaConfig, max_pos: int, positions: int) -> str:
    """The refusal of a layer that does not fit the tile at `max_pos` (`main`): what it
    needs, what the tile has, and the ``--sram`` or ``--max-pos`` that fits (one that still
    runs `positions` steps)."""
    size = _layer_regions(qm, isa, max_pos)[2]
    kib, reach = isa.sram_bytes // 1024, 1 << OFF_BITS
    best = _largest_max_pos(qm, isa)
    shorter = (f"--max-pos {best} or less" + (f" with --positions {best} or fewer"
                                              if positions > best else "")) if best else ""
    if size > reach:
        what = (f"--max-pos {max_pos}: the layer needs {size:,} bytes of SRAM, beyond the "
                f"{reach:,} bytes ({reach // 1024} KiB) the program's immediate offsets "
                f"reach, whatever --sram")
        top = _largest_max_pos(qm, replace(isa, sram_bytes=max(isa.sram_bytes, reach)))
        bigger = f"--sram {reach // 1024} with --max-pos {top} or less" if top > best else ""
    else:
        need_kib = -(-size // 1024)
        what = (f"--max-pos {max_pos}: the layer needs {size:,} bytes of SRAM ({need_kib} KiB);"
                f" the tile has {isa.sram_bytes:,} (--sram {kib})")
        bigger = f"--sram {need_kib} or more"
    tips = [t for t in ((shorter, bigger) if size > reach else (bigger, shorter)) if t]
    return what + (f": give {', or '.join(tips)}" if tips else "")


def main(argv=None) -> None:
    """Print the layout and the estimated cycles of a stories260K layer on one tile.

    ``python -m chipotle.isa.programs [--max-pos P] [--sram KIB] [--positions N]
    [--layer L]``: lays out layer L, runs decode steps 0 .. N-1 in the ISA simulator against
    the golden model (bit exact or an error), and prints the memory map and the per-step
    cycle estimate.

    Bad input ends the command with one ``error:`` line, exit status 2, before anything is
    printed: ``--sram`` outside 1 .. the most a tile's SRAM addresses reach
    (`chipotle.config.sram_reach`), ``--max-pos`` outside 1 .. the model's ``seq_len``,
    ``--positions`` outside 1 .. ``--max-pos``, a ``--layer`` the model lacks, and a layer
    that does not fit the tile at ``--max-pos`` (the refusal names the ``--sram`` or
    ``--max-pos`` that fits).  A missing or damaged model file is one ``error:`` line too
    (`chipotle.cli.module_model`).
    """
    from ..cli import ArgumentParser, module_model
    from ..config import sram_reach
    from ..golden import GoldenModel
    from ..isasim import IsaSim
    from ..paths import DEFAULT_CHECKPOINT, default_model_dir
    from .asm import assemble

    ap = ArgumentParser(prog="python -m chipotle.isa.programs",
                        description=main.__doc__.splitlines()[0])
    ap.add_argument("--max-pos", type=int, default=64,
                    help="positions the tile's KV cache holds (LayerLayout.max_pos) (default: "
                         "%(default)s)")
    ap.add_argument("--sram", type=int, default=128,
                    help="SRAM in KiB (default: %(default)s)")
    ap.add_argument("--positions", type=int, default=8,
                    help="decode steps run, positions 0 .. N-1 (default: %(default)s)")
    ap.add_argument("--layer", type=int, default=0,
                    help="the layer laid out and run (default: %(default)s)")
    args = ap.parse_args(argv)
    W = IsaConfig().word_bytes
    top = sram_reach(W) // 1024
    if not 1 <= args.sram <= top:
        ap.error(f"--sram must be in 1 .. {top} (KiB; a tile's SRAM word addresses reach "
                 f"{top} KiB with {W}-byte words), not {args.sram}")
    if args.positions < 1:
        ap.error(f"--positions must be 1 or more (the decode steps run), not {args.positions}")
    # as `python -m chipotle.compiler.profile`: a missing or damaged file is one `error:` line
    qm = module_model(default_model_dir() / DEFAULT_CHECKPOINT, None, ap=ap)
    c = qm.config
    if not 0 <= args.layer < c.n_layers:
        ap.error(f"--layer {args.layer}: the model has layers 0 .. {c.n_layers - 1}")
    if not 1 <= args.max_pos <= c.seq_len:
        ap.error(f"--max-pos must be in 1 .. {c.seq_len} (the model's seq_len), not "
                 f"{args.max_pos}")
    if args.positions > c.seq_len:
        ap.error(f"--positions must be in 1 .. {c.seq_len} (the model's seq_len), not "
                 f"{args.positions}")
    isa = IsaConfig(sram_bytes=args.sram * 1024)
    if args.positions > args.max_pos:
        best = _largest_max_pos(qm, isa)
        ap.error(f"--positions {args.positions} needs --max-pos {args.positions} or more (the "
                 f"KV cache holds --max-pos {args.max_pos} positions)"
                 + (f", and with --sram {args.sram} the layer fits the tile up to --max-pos "
                    f"{best}: give --positions {best} or fewer" if best < args.positions
                    else ""))
    try:
        lay = LayerLayout(qm, isa, max_pos=args.max_pos)
    except ValueError:
        ap.refuse(_no_fit(qm, isa, args.max_pos, args.positions))
    print(f"stories260K layer {args.layer}, {isa}")
    print(lay.memory_map())
    sym: dict = {}
    words = assemble(layer_program(lay, args.layer), symbols_out=sym)
    print(f"program: {len(words)} instructions")
    sim = IsaSim(1, 1, isa)
    place_layer(sim, (0, 0), lay, args.layer)
    sim.load_program((0, 0), words)
    golden = GoldenModel(qm)
    print("pos  cycles  matrix  vector    dma  instructions  MACs")
    for pos in range(args.positions):
        trace: dict = {}
        golden.forward(1 if pos == 0 else 100 + pos, pos, trace)
        x = trace["x.emb"] if args.layer == 0 else trace[f"l{args.layer - 1}.res"]
        write_step_input(sim, (0, 0), lay, pos, x)
        t = sim.tile((0, 0))
        before = dict(vars(t.perf))
        sim.start((0, 0), 0 if pos == 0 else sym["step"])
        sim.run()
        if not np.array_equal(read_layer_trace(sim, (0, 0), lay, pos)["res"],
                              trace[f"l{args.layer}.res"]):
            raise SystemExit(f"position {pos}: the layer output differs from the golden model")
        d = {k: v - before[k] for k, v in vars(t.perf).items()}
        print(f"{pos:3d} {d['cycles']:7d} {d['matrix_cycles']:7d} {d['vector_cycles']:7d} "
              f"{d['dma_cycles']:6d} {d['instructions']:13d} {d['macs']:6d}")

if __name__ == "__main__":
    from ..cli import run_main
    run_main(main)
