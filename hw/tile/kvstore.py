"""The tile's share of the transformer KV cache, with hardware address generation.

For every (layer, KV head) held by the tile the store keeps, from ``base`` upwards in the
tile SRAM, a block of K rows and a block of V rows, one row of ``head_size`` int8 per
position each (row-major, rows padded to whole words), as the ISA's layer program keeps
them (``docs/isa.md`` section 9):

* scores ``s[m, p] = sum_d K[p, d] * q[m, d]`` run on the matrix unit with ``K[0..pos]`` as
  the weight matrix, N = pos + 1 rows of K = head_size (row stride ``k_row_words``, past the
  optional header word: the ISA's ``matqk`` over records);
* the weighted sum ``o[d] = sum_p P[p] * V[p, d]`` has 16-bit probabilities
  (``docs/numerics.md`` 4.6) and runs on the vector unit (``wsum``) over the V rows at
  ``v_row(layer, head, 0)`` with a stride of ``v_row_words`` words: the store only has to
  append them.

``docs/tile.md`` has the map; :class:`KvLayout` computes it in Python (the compiler,
the host and the testbenches use it; the gateware takes its constants from it).

Members
-------
KvLayout
    The address map (Python).
KvOp, KvCommand, KvError
    Command format and error codes.
KvStore
    The component.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from dataclasses import dataclass

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from .matrix import MatrixCommand
from .sram import ADDR_WIDTH, SramSignature

__all__ = ["KvLayout", "KvOp", "KvAppendArgs", "KvStreamArgs", "KvArgs", "KvCommand",
           "KvError", "KvStore"]


@dataclass(frozen=True)
class KvLayout:
    """Address map of the KV cache share held by one tile (word addresses).

    Block ``i = layer * n_kv_heads + head`` starts at ``base + i * block_words`` and holds

    * K: ``max_pos`` rows of ``k_row_words`` words: with ``k_header``, first one header word
      (the row's scale code, ``docs/numerics.md``: K is quantised per position and head),
      then ``k_data_words = ceil(head_size / W)`` data words; K[p, d] is byte ``d % W`` of
      word ``k_data(layer, head, p) + d // W``;
    * then V: ``max_pos`` rows of ``v_row_words = ceil(head_size / W)`` words; V[p, d] is
      byte ``d % W`` of word ``v_row(layer, head, p) + d // W``.

    Bytes past ``head_size`` in a K or V row are padding: the store never writes them and
    the matrix and vector units never read them as data.  A K row with a header has the
    layout of the ISA's records (a header word, then the padded int8 data).

    Parameters
    ----------
    n_layers, n_kv_heads : int
        Layers, and KV heads per layer, held by this tile.
    head_size : int
        Elements of a K or V vector.
    max_pos : int
        Positions held: the capacity.
    base : int
        Word address of the first block.
    word_bytes : int
        W, bytes per SRAM word.
    k_header : bool
        Each K row starts with one header word (copied by ``APPEND``, skipped by
        ``STREAM_K``).
    """

    n_layers: int
    n_kv_heads: int
    head_size: int
    max_pos: int
    base: int = 0
    word_bytes: int = 8
    k_header: bool = False

    def __post_init__(self):
        for name in ("n_layers", "n_kv_heads", "head_size", "max_pos", "word_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if not isinstance(self.base, int) or self.base < 0:
            raise ValueError(f"base must be a non-negative integer, not {self.base!r}")
        if self.n_layers > 256 or self.n_kv_heads > 256:
            raise ValueError("n_layers and n_kv_heads must be at most 256 (8-bit fields)")
        if self.max_pos > 2 ** 16 - 1 or self.head_size > 2 ** 16 - 1:
            raise ValueError("max_pos and head_size must be below 2**16 (16-bit fields)")
        if self.end > 2 ** ADDR_WIDTH:
            raise ValueError(f"the KV store ends at word {self.end}, past 2**{ADDR_WIDTH}")

    @property
    def capacity(self):
        """Positions each (layer, head) can hold (``max_pos``)."""
        return self.max_pos

    @property
    def k_data_words(self):
        """Data words per K row, ``ceil(head_size / W)``."""
        return -(-self.head_size // self.word_bytes)

    @property
    def k_header_words(self):
        """Header words per K row (1 with ``k_header``, else 0)."""
        return int(bool(self.k_header))

    @property
    def k_row_words(self):
        """Words per K row, header included."""
        return self.k_header_words + self.k_data_words

    @property
    def v_row_words(self):
        """Words per V row, ``ceil(head_size / W)``."""
        return -(-self.head_size // self.word_bytes)

    @property
    def k_block_words(self):
        """Words of the K part of a block."""
        return self.max_pos * self.k_row_words

    @property
    def block_words(self):
        """Words per (layer, head) block."""
        return self.k_block_words + self.max_pos * self.v_row_words

    @property
    def size_words(self):
        """Words used by the whole store."""
        return self.n_layers * self.n_kv_heads * self.block_words

    @property
    def end(self):
        """First word address after the store."""
        return self.base + self.size_words

    def block(self, layer, head):
        """Return the word address of the block of ``(layer, head)``."""
        self._check(layer, head)
        return self.base + (layer * self.n_kv_heads + head) * self.block_words

    def k_row(self, layer, head, pos):
        """Return the word address of K row ``pos`` of ``(layer, head)`` (its header, if any)."""
        return self.block(layer, head) + pos * self.k_row_words

    def k_data(self, layer, head, pos):
        """Return the word address of element 0 of K row ``pos`` of ``(layer, head)``."""
        return self.k_row(layer, head, pos) + self.k_header_words

    def v_row(self, layer, head, pos):
        """Return the word address of V row ``pos`` of ``(layer, head)``."""
        return self.block(layer, head) + self.k_block_words + pos * self.v_row_words

    def _check(self, layer, head):
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_kv_heads):
            raise ValueError(f"(layer, head) must be within ({self.n_layers}, "
                             f"{self.n_kv_heads}), not ({layer}, {head})")


class KvOp(enum.Enum, shape=unsigned(2)):
    """KV store operations.

    Members
    -------
    APPEND
        Copy K and V vectors from SRAM into position ``pos``.
    STREAM_K
        Issue the matrix command for scores against K rows ``0 .. pos``.

    Codes 2 and 3 are refused (``BAD_OP``); 2 was ``STREAM_V``, the weighted sum on the matrix
    unit over V stored transposed, dropped when the numerics put that sum on the vector unit
    (``docs/tile.md``, "KV store").
    """

    APPEND = 0
    STREAM_K = 1


class KvAppendArgs(data.Struct):
    """Arguments of ``APPEND``.

    Members
    -------
    k_src : ``unsigned(16)``
        Word address of the K row to copy: its header word when ``layout.k_header``, then
        ``head_size`` int8 packed like a weight row.
    v_src : ``unsigned(16)``
        Word address of the V vector.
    """

    k_src: unsigned(ADDR_WIDTH)
    v_src: unsigned(ADDR_WIDTH)


class KvStreamArgs(data.Struct):
    """Arguments of ``STREAM_K``: the activation side of the matrix command.

    Members
    -------
    x_base, x_stride, m, x_keep
        As in :class:`~chipotle.hw.tile.matrix.MatrixCommand` (the queries: one row per
        query head sharing the KV head, or per token).
    """

    x_base: unsigned(ADDR_WIDTH)
    x_stride: unsigned(ADDR_WIDTH)
    m: unsigned(8)
    x_keep: unsigned(1)


class KvArgs(data.Union):
    """Per-operation arguments of a :class:`KvCommand` (41 bits).

    Members
    -------
    append : :class:`KvAppendArgs`
    stream : :class:`KvStreamArgs`
    """

    append: KvAppendArgs
    stream: KvStreamArgs


class KvCommand(data.Struct):
    """A KV store command (75 bits).

    Members
    -------
    op : :class:`KvOp`
        Operation.
    layer : ``unsigned(8)``
        Layer index within this tile's share.
    head : ``unsigned(8)``
        KV head index within this tile's share.
    pos : ``unsigned(16)``
        ``APPEND``: position written.  ``STREAM_K``: last position used (rows ``0 .. pos``).
    args : :class:`KvArgs`
        ``args.append`` or ``args.stream`` according to ``op``.
    """

    op: KvOp
    layer: unsigned(8)
    head: unsigned(8)
    pos: unsigned(16)
    args: KvArgs


class KvError(enum.Enum, shape=unsigned(3)):
    """Error codes of the KV store (the first error is kept until reset).

    Every error except ``SRAM`` refuses the command before anything is written or issued.

    Members
    -------
    NONE
        No error.
    BAD_OP
        Unknown ``op`` (2 or 3).
    BAD_HEAD
        ``layer >= n_layers`` or ``head >= n_kv_heads``.
    POS_RANGE
        ``pos >= capacity``.
    SRC_RANGE
        An ``APPEND`` source vector runs past the end of the SRAM.
    SRAM
        The SRAM port flagged an access (should not happen: addresses are checked).
    """

    NONE = 0
    BAD_OP = 1
    BAD_HEAD = 2
    POS_RANGE = 3
    SRC_RANGE = 4
    SRAM = 5


class KvStore(wiring.Component):
    """The tile's KV cache share: appends into SRAM and KV matrix commands.

    ``APPEND`` reads the K row (``layout.k_row_words`` words: the header word if any, then
    the data) and the V vector from SRAM through ``bus`` and writes them to position
    ``pos``: both as whole words, the last one of each byte-masked to ``head_size``.  It
    takes ``2 * k_row_words + 2 * v_row_words`` granted bus cycles plus the command cycle.
    ``STREAM_K`` takes one cycle to compute the addresses and then offers one
    :class:`MatrixCommand` on ``o_mcmd``; a later command waits until it is taken, and an
    ``APPEND`` completes all its writes before the next command is accepted, so a following
    ``STREAM_K`` (or a vector-unit ``wsum`` over the V rows) sees them.

    Refused commands (see :class:`KvError`) are consumed, write nothing, issue nothing and
    set ``error``.

    Parameters
    ----------
    layout : KvLayout
        The address map (its ``word_bytes`` is the SRAM's).
    sram_depth : int
        Words in the SRAM; the store must fit below it.

    Members
    -------
    i_cmd : ``In(stream.Signature(KvCommand))``
        Commands.
    o_mcmd : ``Out(stream.Signature(MatrixCommand))``
        Matrix commands for ``STREAM_K``.
    bus : ``Out(SramSignature(word_bytes=W))``
        Read/write SRAM port (shared through an arbiter).
    capacity : ``Out(16)``
        Positions per (layer, head), constant: ``layout.capacity`` (the Python-side value).
    busy : ``Out(1)``
        A command is being executed.
    error : ``Out(1)``
        Sticky: a command was refused or the bus flagged an error since reset.
    error_code : ``Out(KvError)``
        The first error since reset.
    """

    def __init__(self, layout, *, sram_depth):
        if not isinstance(layout, KvLayout):
            raise TypeError(f"layout must be a KvLayout, not {layout!r}")
        if layout.end > sram_depth:
            raise ValueError(f"the KV store (words {layout.base}..{layout.end - 1}) must fit "
                             f"in the SRAM of {sram_depth} words")
        self._layout = layout
        self._sram_depth = sram_depth
        super().__init__({
            "i_cmd": In(stream.Signature(KvCommand)),
            "o_mcmd": Out(stream.Signature(MatrixCommand)),
            "bus": Out(SramSignature(word_bytes=layout.word_bytes)),
            "capacity": Out(16),
            "busy": Out(1),
            "error": Out(1),
            "error_code": Out(KvError),
        })

    @property
    def layout(self):
        """The address map."""
        return self._layout

    def elaborate(self, platform):
        m = Module()
        L = self._layout
        W = L.word_bytes
        kw = L.k_row_words        # words copied per K row (header included)
        kh = L.k_header_words
        vw = L.v_row_words
        hs = L.head_size
        cmd = self.i_cmd.payload
        bus = self.bus

        m.d.comb += self.capacity.eq(L.capacity)

        def fail(code):
            with m.If(~self.error):
                m.d.sync += [self.error.eq(1), self.error_code.eq(code)]

        with m.If(bus.error):
            fail(KvError.SRAM)

        # Address generation for the command being offered (combinational, registered on
        # acceptance).
        block = Signal(ADDR_WIDTH)
        m.d.comb += block.eq(L.base + (cmd.layer * L.n_kv_heads + cmd.head) * L.block_words)
        k_rows = Signal(ADDR_WIDTH)
        v_rows = Signal(ADDR_WIDTH)
        m.d.comb += [k_rows.eq(block), v_rows.eq(block + L.k_block_words)]

        # APPEND state.
        k_src = Signal(ADDR_WIDTH)
        k_dst = Signal(ADDR_WIDTH)
        v_src = Signal(ADDR_WIDTH)
        v_dst = Signal(ADDR_WIDTH)
        i = Signal(range(max(kw, vw) + 1))
        word = Signal(8 * W)
        buf = Signal(8 * W)
        pending = Signal()
        m.d.sync += pending.eq(bus.en & ~bus.we & bus.ready)
        with m.If(pending):
            m.d.sync += buf.eq(bus.rdata)
        m.d.comb += word.eq(Mux(pending, bus.rdata, buf))

        k_last_bytes = hs - (L.k_data_words - 1) * W     # also the last V word's
        full = (1 << W) - 1

        with m.FSM(name="fsm") as fsm:
            with m.State("Idle"):
                m.d.comb += self.i_cmd.ready.eq(1)
                with m.If(self.i_cmd.valid):
                    is_append = cmd.op == KvOp.APPEND
                    with m.If((cmd.op != KvOp.APPEND) & (cmd.op != KvOp.STREAM_K)):
                        fail(KvError.BAD_OP)
                    with m.Elif((cmd.layer >= L.n_layers) | (cmd.head >= L.n_kv_heads)):
                        fail(KvError.BAD_HEAD)
                    with m.Elif(cmd.pos >= L.capacity):
                        fail(KvError.POS_RANGE)
                    with m.Elif(is_append & (
                            (cmd.args.append.k_src + kw > self._sram_depth)
                            | (cmd.args.append.v_src + vw > self._sram_depth))):
                        fail(KvError.SRC_RANGE)
                    with m.Elif(is_append):
                        m.d.sync += [
                            k_src.eq(cmd.args.append.k_src),
                            v_src.eq(cmd.args.append.v_src),
                            k_dst.eq(k_rows + cmd.pos * kw),
                            v_dst.eq(v_rows + cmd.pos * vw),
                            i.eq(0),
                        ]
                        m.next = "K-Read"
                    with m.Else():
                        s = cmd.args.stream
                        mc = self.o_mcmd.payload
                        m.d.sync += [
                            mc.x_base.eq(s.x_base),
                            mc.x_stride.eq(s.x_stride),
                            mc.m.eq(s.m),
                            mc.x_keep.eq(s.x_keep),
                        ]
                        m.d.sync += [
                            mc.w_base.eq(k_rows + kh),
                            mc.w_stride.eq(kw),
                            mc.n.eq(cmd.pos + 1),
                            mc.k.eq(hs),
                        ]
                        m.next = "Emit"

            with m.State("Emit"):
                m.d.comb += self.o_mcmd.valid.eq(1)
                with m.If(self.o_mcmd.ready):
                    m.next = "Idle"

            with m.State("K-Read"):
                m.d.comb += [bus.en.eq(1), bus.addr.eq(k_src + i)]
                with m.If(bus.ready):
                    m.next = "K-Write"

            with m.State("K-Write"):
                last = i == kw - 1
                m.d.comb += [
                    bus.en.eq(1),
                    bus.we.eq(1),
                    bus.addr.eq(k_dst + i),
                    bus.wdata.eq(word),
                    bus.wmask.eq(Mux(last, (1 << k_last_bytes) - 1, full)),
                ]
                with m.If(bus.ready):
                    m.d.sync += i.eq(i + 1)
                    m.next = "K-Read"
                    with m.If(last):
                        m.d.sync += i.eq(0)
                        m.next = "V-Read"

            with m.State("V-Read"):
                m.d.comb += [bus.en.eq(1), bus.addr.eq(v_src + i)]
                with m.If(bus.ready):
                    m.next = "V-Write"

            with m.State("V-Write"):
                last = i == vw - 1
                m.d.comb += [
                    bus.en.eq(1),
                    bus.we.eq(1),
                    bus.addr.eq(v_dst + i),
                    bus.wdata.eq(word),
                    bus.wmask.eq(Mux(last, (1 << k_last_bytes) - 1, full)),
                ]
                with m.If(bus.ready):
                    m.d.sync += i.eq(i + 1)
                    m.next = "V-Read"
                    with m.If(last):
                        m.next = "Idle"

        m.d.comb += self.busy.eq(~fsm.ongoing("Idle"))
        return m
