"""Code generation: the per-tile programs of a placed model, as assembly text.

Every tile's program holds one *variant* per batch size ``m = 1 .. M`` (the matrix
instructions carry M as a static field): the entry ``m<m>_tab`` loads the tile's vector-unit
tables and falls through into ``m<m>``, which runs the tile's stages in order and halts.
Each stage waits for its input rows (a counter bumped by the previous stage's SEND), computes,
and SENDs its output rows to the next stage (a SEND to itself when the next stage is on the
same tile).  ``docs/architecture.md`` walks through the stages.
"""

from __future__ import annotations

from ..golden import numerics as nx
from ..golden.quantize import QuantizedModel
from ..isa.core import OFF_BITS, IsaConfig
from ..isa.kv import kv_slot
from .placement import REDUCE_COUNTER, STEP_BLOCK, Placement, TileLayout, step_block_layout

__all__ = ["Emitter", "tile_program", "DONE_CODE"]

#: Code of the doorbell (``done``) the reduction tile rings when a step's token is ready.
DONE_CODE = 1

_SCRATCH = ("r13", "r14", "r15")   # far addresses (beyond the 17-bit offsets)


class Emitter:
    """Collects assembly lines; address operands beyond the 17-bit offsets go through
    scratch registers (``li`` / ``add`` before the instruction)."""

    def __init__(self):
        self.lines: list[str] = []
        self._n = 0

    def label(self, base: str) -> str:
        """Return a fresh label name."""
        self._n += 1
        return f"{base}_{self._n}"

    def put_label(self, name: str) -> None:
        """Place label `name` before the next instruction."""
        self.lines.append(f"{name}:")

    def comment(self, text: str) -> None:
        """Add a comment line."""
        self.lines.append(f"; {text}")

    def __call__(self, mnemonic: str, *ops) -> None:
        """Emit one instruction.  An operand is an int or str (as is) or a tuple
        ``(address, register)`` / ``(address,)``: an address operand."""
        pre, scratch, out = [], list(_SCRATCH), []
        for op in ops:
            if isinstance(op, tuple):
                addr, reg = (op[0], op[1]) if len(op) > 1 else (op[0], 0)
                if addr < 1 << OFF_BITS:
                    out.append(f"r{reg}+{addr:#x}" if reg else f"{addr:#x}")
                else:
                    s = scratch.pop(0)
                    pre.append(f"    li    {s}, {addr:#x}")
                    if reg:
                        pre.append(f"    add   {s}, {s}, r{reg}")
                    out.append(s)
            else:
                out.append(str(op))
        self.lines += pre
        self.lines.append(f"    {mnemonic:<15} {', '.join(out)}".rstrip())

    def loop(self, count, body) -> None:
        """Emit a hardware loop of `count` iterations around `body()` (a callable)."""
        end = self.label("L")
        self("loop", count, end)
        body()
        self.put_label(end)

    def text(self) -> str:
        """Return the program text."""
        return "\n".join(self.lines) + "\n"


def emit_head_records(e: Emitter, dst: str, src: str, hs: int, count, step: int) -> None:
    """Emit a loop of `count` iterations quantising one head per iteration: ``dynq`` of the
    `hs` int16 at register `src` into the record at register `dst`, then `src` advances by
    the head (``2 hs`` bytes) and `dst` by `step` bytes (a record, or a cache block)."""
    def head():
        e("dynq.i8.i16", dst, src, hs)
        e("add", src, f"{src}+{2 * hs}", 0)
        e("add", dst, f"{dst}+{step}", 0)
    e.loop(count, head)


def _rect(r) -> str:
    x0, x1, y0, y1 = r
    return f"({x0}:{x1}, {y0}:{y1})"


class _Ctx:
    """What a stage's code needs: model, tile parameters, placement, this tile's layout."""

    def __init__(self, qm, isa, pl, lay, context):
        self.qm, self.c, self.isa, self.pl, self.lay, self.context = (
            qm, qm.config, isa, pl, lay, context)

    def a(self, stage, what, reg=0, plus=0):
        """Address operand of region ``stage.what`` (+ `plus`), optionally + a register."""
        return (self.lay[f"{stage.name}.{what}"] + plus, reg)

    def counter(self, xy, stage) -> int:
        """The counter that `stage` (on tile `xy`) waits on for its input."""
        return self.pl.tiles[xy].stages.index(stage)

    def kv_layout(self):
        """``(KvLayout, local layer)`` of the stage being emitted when the tile appends
        with ``kvapp``, else None."""
        L = self.pl.kv_layouts.get(self.lay.xy)
        if L is None:
            return None
        att = [s for s in self.lay.stages if s.kind == "att"]
        return L, att.index(self.stage)

    def reduce_counter(self) -> int:
        return self.isa.n_counters + REDUCE_COUNTER if REDUCE_COUNTER < 0 else REDUCE_COUNTER


def _norm_rows(e, k, st, n, norm, x, xq, stride_x, stride_q, xreg=0):
    """RMSNorm + dynamic quantisation (one ``rmsnormq`` each) of `n` rows: x (int16 rows,
    + register `xreg`) -> records xq."""
    dim = k.c.dim
    e("add", "r6", k.a(st, x, xreg), 0)
    e("add", "r8", k.a(st, xq), 0)

    def body():
        e("rmsnormq.i8.i16", "r8", "r6", k.a(st, "g"), dim, k.lay[f"{st.name}.eps"],
          norm.shift)
        e("add", "r6", f"r6+{stride_x}", 0)
        e("add", "r8", f"r8+{stride_q}", 0)
    e.loop(n, body)


def _send_next(e, k, idx, src, nbytes, slot_reg=0):
    """SEND `nbytes` at `src` to the input of the stage after pipeline stage `idx`, at the
    input slot offset held in register `slot_reg` (0: the first slot)."""
    pl = k.pl
    if idx + 1 < len(pl.pipeline):
        nxt, xy = pl.pipeline[idx + 1]
        dst = pl.tiles[xy][f"{nxt.name}.x"]
        e("send", (dst, slot_reg), src, nbytes, _rect((xy[0], xy[0], xy[1], xy[1])),
          k.counter(xy, nxt))
    else:                                   # multicast to the classifier rectangle
        xy0 = pl.classifier[0]
        cst = pl.tiles[xy0].stages[-1]
        dst = pl.tiles[xy0][f"{cst.name}.x"]
        e("send", (dst,), src, nbytes, _rect(pl.rect), k.counter(xy0, cst))


def _sb(k, field):
    """Address operand of a step-block field."""
    return (k.lay[STEP_BLOCK] + step_block_layout(k.isa.max_m, k.pl.batches)[field],)


def _batches(e, k, st, m, body):
    """Run `body()` once per batch of the step (``nb`` from the step block).

    The stage's ``state`` words hold, across the body (which may use every register):
    ``+0`` the batch's first position, ``+4`` the byte offset of its input slot (``r5`` on
    entry to `body`, reload with ``ld r5, state+4`` before use), ``+8`` the address of its
    last-batch flag.  On entry to `body`, ``r1`` is the batch's first position.
    """
    xs = k.isa.pad(2 * k.c.dim)
    e("ld", "r1", _sb(k, "pos"))
    e("st", k.a(st, "state"), "r1")
    e("st", k.a(st, "state", 0, 4), 0)
    e("add", "r5", _sb(k, "flags"), 0)
    e("st", k.a(st, "state", 0, 8), "r5")
    e("ld", "r5", _sb(k, "nb"))

    def loop_body():
        e("wait", k.counter(k.lay.xy, st), 1)
        e("ld", "r1", k.a(st, "state"))
        e("ld", "r5", k.a(st, "state", 0, 4))
        body()
        e("ld", "r5", k.a(st, "state", 0, 4))
        e("add", "r5", f"r5+{m * xs}", 0)
        e("st", k.a(st, "state", 0, 4), "r5")
        e("ld", "r1", k.a(st, "state"))
        e("add", "r1", f"r1+{m}", 0)
        e("st", k.a(st, "state"), "r1")
        e("ld", "r5", k.a(st, "state", 0, 8))
        e("add", "r5", "r5+4", 0)
        e("st", k.a(st, "state", 0, 8), "r5")
    e.loop("r5", loop_body)


def _emb(e, k, st, m, idx):
    c, isa = k.c, k.isa
    xs = isa.pad(2 * c.dim)
    e.comment(f"embedding, batches of {m} token(s): x = requant(E8[tok], m[tok], s[tok])")
    e("add", "r6", _sb(k, "tokens"), 0)
    e("add", "r11", 0, 0)                   # the next stage's input slot
    e("ld", "r5", _sb(k, "nb"))

    def batch():
        e("add", "r7", k.a(st, "x"), 0)

        def body():
            e("ld", "r8", "r6")
            e("mul", "r9", "r8", isa.pad(c.dim))
            e("mul", "r10", "r8", 4)
            e("reqm.i16.i8", "r7", k.a(st, "e", 9), k.a(st, "ems", 10), c.dim)
            e("add", "r6", "r6+4", 0)
            e("add", "r7", f"r7+{xs}", 0)
        e.loop(m, body)
        _send_next(e, k, idx, k.a(st, "x"), m * xs, 11)
        e("add", "r11", f"r11+{m * xs}", 0)
    e.loop("r5", batch)


def _att(e, k, st, m, idx):
    k.stage = st
    e.comment(f"layer {st.layer} attention, batches of {m} row(s)")
    _batches(e, k, st, m, lambda: _att_batch(e, k, st, m, idx))


def _att_batch(e, k, st, m, idx):
    c, isa, qm = k.c, k.isa, k.qm
    ly = qm.layers[st.layer]
    dim, kvd, hs, H, KV = c.dim, c.kv_dim, c.head_size, c.n_heads, c.n_kv_heads
    pad, rec = isa.pad, isa.record_bytes
    xs, ks, vs, krec = pad(2 * dim), pad(2 * kvd), pad(kvd), rec(hs)
    kblock = k.context * krec
    last = idx + 1 == len(k.pl.pipeline) - 1        # the next (last) stage takes one row
    _norm_rows(e, k, st, m, ly.att_norm, "x", "xq", xs, rec(dim), xreg=5)
    ms = k.lay[f"{st.name}.wq_ms"], k.lay[f"{st.name}.wk_ms"], k.lay[f"{st.name}.wv_ms"]
    e("matmul.i16", k.a(st, "q16"), k.a(st, "xq"), k.a(st, "wq"), ms[0], dim, dim, m)
    e("matmul.i16", k.a(st, "k16"), k.a(st, "xq"), k.a(st, "wk"), ms[1], kvd, dim, m)
    kv = k.kv_layout()
    if kv is not None:          # V rows of each KV head into its buffer, appended below
        L, li = kv
        M, W = isa.max_m, isa.word_bytes
        # the scores name K by slot (kvqk): the KV store generates the addresses
        kbase, kblock = kv_slot(li, 0), 1
        vbase = W * L.v_row(li, 0, 0)
        vstep = W * L.block_words
        vstride = W * L.v_row_words
        for h in range(KV):
            e("matmul.i8", k.a(st, "vbuf", 0, h * M * pad(hs)), k.a(st, "xq"),
              k.a(st, "wv", 0, h * hs * pad(dim)), ms[2] + 4 * h * hs, hs, dim, m)
    else:
        kbase, vbase, vstep, vstride = k.lay[f"{st.name}.kcache"], k.lay[f"{st.name}.vcache"], \
            hs, vs
        e("mul", "r5", "r1", vs)
        e("matmul.i8", k.a(st, "vcache", 5), k.a(st, "xq"), k.a(st, "wv"), ms[2], kvd, dim, m)
    e.comment("RoPE; q per head into query records, k per head into the K cache")
    e("mul", "r3", "r1", 2 * hs)
    e("mul", "r4", "r1", krec)
    e("add", "r6", k.a(st, "q16"), 0)
    e("add", "r7", k.a(st, "k16"), 0)
    e("add", "r8", k.a(st, "qrec"), 0)
    if kv is not None:
        e("add", "r10", k.a(st, "kbuf"), 0)

    def rows():
        e("rope.i16.i16", "r6", "r6", k.a(st, "rope", 3), dim, hs, nx.ROPE_FRAC_BITS)
        e("rope.i16.i16", "r7", "r7", k.a(st, "rope", 3), kvd, hs, nx.ROPE_FRAC_BITS)
        e("add", "r9", "r6", 0)

        emit_head_records(e, "r8", "r9", hs, H, krec)
        e("add", "r9", "r7", 0)
        if kv is None:
            e("add", "r10", k.a(st, "kcache", 4), 0)

        emit_head_records(e, "r10", "r9", hs, KV, krec if kv is not None else kblock)
        e("add", "r3", f"r3+{2 * hs}", 0)
        e("add", "r4", f"r4+{krec}", 0)
        e("add", "r6", f"r6+{xs}", 0)
        e("add", "r7", f"r7+{ks}", 0)
    e.loop(m, rows)
    if kv is not None:
        e.comment("K records and V rows appended to the KV store (kvapp)")
        emit_kv_append(e, li, k.a(st, "kbuf"), k.a(st, "vbuf"), KV, m, krec, M * pad(hs),
                       pad(hs))
    e.comment("per row (causal: row i attends to 0 .. pos + i) and query head: "
              "scores, softmax, weighted sum of V")
    e("add", "r2", "r1+1", 0)
    e("add", "r6", k.a(st, "qrec"), 0)
    e("add", "r10", k.a(st, "acc"), 0)
    att_ms = k.lay[f"{st.name}.att_ms"]

    def arow():
        e("add", "r8", (kbase,), 0)
        e("add", "r11", (vbase,), 0)
        g = c.kv_mul
        if g > 1:                           # score rows of the group at stride pad(4 T)
            e("mul", "r12", "r2", 4)
            e("ld", "r12", k.a(st, "padt", 12))

        # the g query heads of a KV head read its K block together: matqk / kvqk with M = gc
        # (the largest divisor of g the matrix unit takes), g / gc times
        gc = max(d for d in range(1, min(g, isa.max_m) + 1) if g % d == 0)

        def kvh():
            for _ in range(g // gc):
                emit_scores(e, k.a(st, "t"), "r6", "r8", att_ms, "r2", hs, gc, kv is not None)
                e("add", "r9", k.a(st, "t"), 0)

                def qh():
                    e("softmax.u16.i32", k.a(st, "p"), "r9", "r2")
                    e("wsum.i32.u16", "r10", k.a(st, "p"), "r11", "r2", hs, vstride)
                    e("add", "r9", "r9", "r12")
                    e("add", "r10", f"r10+{4 * hs}", 0)
                e.loop(gc, qh)
                e("add", "r6", f"r6+{gc * krec}", 0)
            e("add", "r8", f"r8+{kblock}", 0)
            e("add", "r11", f"r11+{vstep}", 0)
        e.loop(KV, kvh)
        e("add", "r2", "r2+1", 0)
    e.loop(m, arow)
    e.comment("output projection and residual")
    e("add", "r6", k.a(st, "acc"), 0)
    e("add", "r7", k.a(st, "arec"), 0)

    def orow():
        e("dynq.i8.i32", "r7", "r6", dim)
        e("add", "r6", f"r6+{4 * dim}", 0)
        e("add", "r7", f"r7+{rec(dim)}", 0)
    e.loop(m, orow)
    e("matmul.i16", k.a(st, "yo"), k.a(st, "arec"), k.a(st, "wo"),
      k.lay[f"{st.name}.wo_ms"], dim, dim, m)
    e("ld", "r5", k.a(st, "state", 0, 4))
    e("vadd.i16.i16", k.a(st, "xa"), k.a(st, "x", 5), k.a(st, "yo"), m * xs // 2)
    if last:                    # only the step's last row goes on: on its last batch
        e("ld", "r6", k.a(st, "state", 0, 8))
        e("ld", "r6", "r6")
        e.loop("r6", lambda: _send_next(e, k, idx, k.a(st, "xa", 0, (m - 1) * xs), xs))
    else:
        _send_next(e, k, idx, k.a(st, "xa"), m * xs, 5)


def _ffn(e, k, st, m, idx):
    if idx == len(k.pl.pipeline) - 1:       # only the step's last row reaches the classifier
        e.comment(f"layer {st.layer} feed-forward (SwiGLU) of the step's last row")
        e("wait", k.counter(k.lay.xy, st), 1)
        _ffn_batch(e, k, st, 1, idx)
    else:
        e.comment(f"layer {st.layer} feed-forward (SwiGLU), batches of {m} row(s)")
        _batches(e, k, st, m, lambda: _ffn_batch(e, k, st, m, idx))


def _ffn_batch(e, k, st, m, idx):
    c, isa, qm = k.c, k.isa, k.qm
    ly = qm.layers[st.layer]
    dim, hid = c.dim, c.hidden_dim
    pad, rec = isa.pad, isa.record_bytes
    xs, hsz = pad(2 * dim), pad(2 * hid)
    last = idx == len(k.pl.pipeline) - 1
    xreg = 0 if last else 5
    _norm_rows(e, k, st, m, ly.ffn_norm, "x", "xq", xs, rec(dim), xreg=xreg)
    ms = {w: k.lay[f"{st.name}.{w}_ms"] for w in ("w1", "w3", "w2")}
    e("matmul.i16", k.a(st, "h1"), k.a(st, "xq"), k.a(st, "w1"), ms["w1"], hid, dim, m)
    e("matmul.i16", k.a(st, "h3"), k.a(st, "xq"), k.a(st, "w3"), ms["w3"], hid, dim, m)
    e("silu.i16.i16", k.a(st, "silu"), k.a(st, "h1"), m * hsz // 2, ly.hidden_frac_bits)
    e("vmul.i32.i16", k.a(st, "gate"), k.a(st, "silu"), k.a(st, "h3"), m * hsz // 2)
    e("add", "r6", k.a(st, "gate"), 0)
    e("add", "r7", k.a(st, "grec"), 0)

    def grow():
        e("dynq.i8.i32", "r7", "r6", hid)
        e("add", "r6", f"r6+{2 * hsz}", 0)
        e("add", "r7", f"r7+{rec(hid)}", 0)
    e.loop(m, grow)
    e("matmul.i16", k.a(st, "y2"), k.a(st, "grec"), k.a(st, "w2"), ms["w2"], dim, hid, m)
    if not last:
        e("ld", "r5", k.a(st, "state", 0, 4))
    e("vadd.i16.i16", k.a(st, "xo"), k.a(st, "x", xreg), k.a(st, "y2"), m * xs // 2)
    if last:
        _send_next(e, k, idx, k.a(st, "xo"), xs)
    else:
        _send_next(e, k, idx, k.a(st, "xo"), m * xs, 5)


def _cls(e, k, st):
    c, isa, qm = k.c, k.isa, k.qm
    W, dim = isa.word_bytes, c.dim
    first, n, _ = st.rows
    pl = k.pl
    j = pl.classifier.index(k.lay.xy)
    e.comment(f"final norm, classifier rows {first} .. {first + n - 1}, local argmax")
    e("wait", k.counter(k.lay.xy, st), 1)
    e("rmsnormq.i8.i16", k.a(st, "xq"), k.a(st, "x"), k.a(st, "g"), dim,
      k.lay[f"{st.name}.eps"], qm.final_norm.shift)
    e("matmul.i32", k.a(st, "logits"), k.a(st, "xq"), k.a(st, "w"), k.lay[f"{st.name}.ms"],
      n, dim, 1)
    e("argmax.i32.i32", k.a(st, "loc"), k.a(st, "logits"), n)
    e("ld", "r6", k.a(st, "loc"))
    e("mul", "r7", "r6", 4)
    e("ld", "r8", k.a(st, "logits", 7))
    e("st", k.a(st, "slot"), "r8")
    e("st", k.a(st, "slot", 0, 4), f"r6+{first}")
    red = pl.tiles[pl.reducer]
    e("send", (red["red.slots"] + j * W,), k.a(st, "slot"), W,
      _rect((pl.reducer[0], pl.reducer[0], pl.reducer[1], pl.reducer[1])), k.reduce_counter())


def emit_scores(e, y, q, kreg, att_ms, n, hs, m, kvstore):
    """Emit the scores of `m` query records at `q` against the first `n` K records of a KV
    head, into `y` (int32).

    With `kvstore` register `kreg` holds the head's slot ``layer << 8 | head``
    (`chipotle.isa.kv.kv_slot`) and the instruction is ``kvqk``: the KV store generates the K
    addresses from the tile's layout and refuses positions past its capacity.  Otherwise
    `kreg` holds the byte address of the head's first K record (``matqk``, K = `hs`)."""
    if kvstore:
        e("kvqk.i32", y, q, kreg, att_ms, n, m)
    else:
        e("matqk.i32", y, q, kreg, att_ms, n, hs, m)


def emit_kv_append(e, layer, kbuf, vbuf, n_heads, rows, krec, vhead_stride, vrow_stride):
    """Emit the append of a batch's K records and V rows to the KV store with ``kvapp``.

    Row ``i`` (position ``r1 + i``) of KV head ``h`` appends the K record at ``kbuf + (i *
    n_heads + h) * krec`` and the V row at ``vbuf + i * vrow_stride + h * vhead_stride`` to
    slot ``layer << 8 | h`` (`chipotle.isa.kv.kv_slot`).  ``rows`` is an immediate or a
    register; uses ``r3``, ``r7``, ``r9`` .. ``r11``."""
    e("add", "r3", "r1", 0)
    e("add", "r9", kbuf, 0)
    e("add", "r7", vbuf, 0)

    def arows():
        e("add", "r10", "r7", 0)
        e("add", "r11", (layer << 8,), 0)

        def ah():
            e("kvapp", "r11", "r9", "r10", "r3")
            e("add", "r9", f"r9+{krec}", 0)
            e("add", "r10", f"r10+{vhead_stride}", 0)
            e("add", "r11", "r11+1", 0)
        e.loop(n_heads, ah)
        e("add", "r3", "r3+1", 0)
        e("add", "r7", f"r7+{vrow_stride}", 0)
    e.loop(rows, arows)


def _reduce(e, k, counter):
    """Emit the argmax reduction: wait on `counter` for the ``lay.reduce`` local maxima
    ``(value, index)`` in the slots, pick the first largest, store its token, ring DONE.
    Shared by both placements (they differ in the counter only)."""
    lay, W, C = k.lay, k.isa.word_bytes, k.lay.reduce
    e.comment(f"argmax over the {C} local maxima (ties: the first, lowest vocabulary row)")
    e("wait", counter, C)
    e("add", "r6", (lay["red.slots"],), 0)
    e("add", "r7", (lay["red.vals"],), 0)

    def body():
        e("copy", "r7", "r6", 4)
        e("add", "r6", f"r6+{W}", 0)
        e("add", "r7", "r7+4", 0)
    e.loop(C, body)
    e("argmax.i32.i32", (lay["red.j"],), (lay["red.vals"],), C)
    e("ld", "r6", (lay["red.j"],))
    e("mul", "r7", "r6", W)
    e("ld", "r8", (lay["red.slots"] + 4, 7))
    e("st", (lay["red.token"],), "r8")
    e("done", DONE_CODE)


def tile_program(qm: QuantizedModel, isa: IsaConfig, pl: Placement, lay: TileLayout,
                 context: int) -> str:
    """Return the assembly text of one tile: a variant per batch size ``m = 1 .. M``.

    Labels ``m<m>_tab`` (load the tables, then run) and ``m<m>`` (run) are the entries.
    """
    k = _Ctx(qm, isa, pl, lay, context)
    e = Emitter()
    for m in range(1, isa.max_m + 1):
        e.put_label(f"m{m}_tab")
        for t in lay.tables:
            e("table", t.name.lower(), (lay[f"tab.{t.name.lower()}"],))
        e.put_label(f"m{m}")
        for st in lay.stages:
            if st.kind == "cls":
                _cls(e, k, st)
            else:
                i = next(i for i, (s, xy) in enumerate(pl.pipeline)
                         if s == st and xy == lay.xy)
                {"emb": _emb, "att": _att, "ffn": _ffn}[st.kind](e, k, st, m, i)
        if lay.reduce:
            _reduce(e, k, k.reduce_counter())
        e("halt")
    return e.text()
