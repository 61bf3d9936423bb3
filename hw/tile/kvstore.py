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

``docs/tile.md`` has the map; :class:`KvLayout` (defined in ``chipotle.isa.kv`` and
re-exported here) computes it in Python for the compiler, the host, the ISA simulator and
the testbenches.  The gateware takes the map at run time from the five values of
:class:`KvParams` (the tile's host-written KV registers), so one bitstream serves any
placement.

Members
-------
KvLayout
    The address map (Python).
KvParams
    The run-time layout, as the KV store's ``layout`` port takes it.
KvOp, KvCommand, KvError
    Command format and error codes.
KvStore
    The component.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from chipotle.isa.kv import KvLayout

from .matrix import MatrixCommand
from .sram import ADDR_WIDTH, SramSignature, wait_states

__all__ = ["KvLayout", "KvParams", "KvOp", "KvAppendArgs", "KvStreamArgs", "KvArgs", "KvCommand",
           "KvError", "KvStore"]


class KvParams(data.Struct):
    """The KV layout as the gateware takes it at run time (66 bits): the tile's KV registers.

    The fields are those of :class:`KvLayout` (``KvLayout.registers()`` gives their values);
    ``word_bytes`` and ``k_header`` are elaboration parameters of the store.  Any value is
    allowed: a layout with a zero field, or reaching past the SRAM, has capacity 0.

    Members
    -------
    base : ``unsigned(16)``
        Word address of the first block.
    n_layers, n_kv_heads : ``unsigned(9)``
        Layers and KV heads held (0 .. 256).
    head_size : ``unsigned(16)``
        Elements of a K or V vector.
    max_pos : ``unsigned(16)``
        Positions per (layer, head).
    """

    base: unsigned(ADDR_WIDTH)
    n_layers: unsigned(9)
    n_kv_heads: unsigned(9)
    head_size: unsigned(16)
    max_pos: unsigned(16)

    @staticmethod
    def from_layout(layout):
        """Return the constant :class:`KvParams` value of a :class:`KvLayout`.

        Raises
        ------
        TypeError
            If `layout` is not a :class:`KvLayout`.
        """
        if not isinstance(layout, KvLayout):
            raise TypeError(f"layout must be a KvLayout, not {layout!r}")
        return KvParams.const({"base": layout.base, "n_layers": layout.n_layers,
                               "n_kv_heads": layout.n_kv_heads,
                               "head_size": layout.head_size, "max_pos": layout.max_pos})


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

    The address map is the run-time ``layout`` (:class:`KvParams`; in a tile, the host's KV
    registers).  Its derived sizes (row words, block words, the end of the map and the
    capacity) are computed in two registered stages that follow it (not reset: a reset
    does not disturb them); commands are accepted only once they have settled: with
    cycle 0 the first cycle of a new layout value, ``i_cmd.ready`` stays low in cycles 0 to
    3 and a command is accepted from cycle 4 on (the sizes reflect the layout from cycle 3,
    the registered capacity last; a command is decoded in the cycle after its acceptance),
    so a command never sees a half-updated map.  The
    **capacity** is ``max_pos`` when every field is non-zero and the map ends inside the
    SRAM, else 0: an append can then never write outside the map nor outside the SRAM.

    ``APPEND`` reads the K row (``k_row_words`` words: the header word if any, then the
    data) and the V vector from SRAM through ``bus`` and writes them to position ``pos``:
    both as whole words, the last one of each byte-masked to ``head_size``.  It takes
    ``2 * k_row_words + 2 * v_row_words`` granted bus cycles plus two command cycles
    (acceptance into a register, then the checks and the address products: no
    combinational path from ``i_cmd`` into the address arithmetic).  ``STREAM_K`` takes the
    same two cycles to compute the addresses and then offers one
    :class:`MatrixCommand` on ``o_mcmd`` over K rows ``0 .. pos`` of the slot as the ISA's
    ``matqk`` reads them (records: ``w_base`` the first row's data word, past its header,
    ``w_stride = k_row_words``) and, on ``k_hdr``, the word address of the first row's
    header (what the matrix write-back stage reads each row's scale code from); a later
    command waits until it is taken, and an
    ``APPEND`` completes all its writes before the next command is accepted, so a following
    ``STREAM_K`` (or a vector-unit ``wsum`` over the V rows) sees them.

    Refused commands (see :class:`KvError`) are consumed, write nothing, issue nothing and
    set ``error``.

    Parameters
    ----------
    word_bytes : int
        W, bytes per SRAM word (a power of two).
    sram_depth : int
        Words in the SRAM (at most ``2**16``); the map must end at or below it.
    k_header : bool
        Each K row starts with one header word (the ISA's records; default True).
    sram_latency : int
        L of ``bus`` (`SramSignature.latency`): 1 (default), 2 or 3 cycles; each word an
        ``APPEND`` copies takes ``L - 1`` cycles more than at 1.

    Raises
    ------
    ValueError
        If `word_bytes` is not a power of two, `sram_depth` is not an integer in
        ``1 .. 2**16``, or `sram_latency` is not 1, 2 or 3 (`SramSignature`).

    Members
    -------
    layout : ``In(KvParams)``
        The address map; hold it steady while commands run.
    i_cmd : ``In(stream.Signature(KvCommand))``
        Commands.
    o_mcmd : ``Out(stream.Signature(MatrixCommand))``
        Matrix commands for ``STREAM_K``.
    bus : ``Out(SramSignature(word_bytes=W, latency=sram_latency))``
        Read/write SRAM port (shared through an arbiter).
    capacity : ``Out(16)``
        Positions per (layer, head): ``max_pos``, or 0 for a map that is empty or does not
        fit the SRAM.
    k_row_words, v_row_words : ``Out(16)``
        Words per K row (header included) and per V row of the current map.
    k_hdr : ``Out(16)``
        ``STREAM_K``: word address of K row 0 (its header word with ``k_header``) of the
        slot of the last ``STREAM_K`` accepted; valid with ``o_mcmd.valid`` and held until
        the next ``STREAM_K`` is accepted.
    map_end : ``Out(17)``
        First word after the map (``base`` + the blocks), saturated at ``2**16``; with a
        non-zero capacity the map is the words ``layout.base .. map_end - 1``.
    busy : ``Out(1)``
        A command is being executed.
    running : ``Out(1)``
        The command being executed passed its checks (``APPEND`` copying, ``STREAM_K``
        offering its matrix command): from here on it cannot be refused.
    error : ``Out(1)``
        Sticky: a command was refused or the bus flagged an error since reset.
    error_code : ``Out(KvError)``
        The first error since reset.
    """

    def __init__(self, *, word_bytes=8, sram_depth=4096, k_header=True, sram_latency=1):
        exact_log2(word_bytes)
        if not isinstance(sram_depth, int) or not 1 <= sram_depth <= 2 ** ADDR_WIDTH:
            raise ValueError(f"sram_depth must be an integer in [1, {2 ** ADDR_WIDTH}], "
                             f"not {sram_depth!r}")
        self._word_bytes = word_bytes
        self._sram_depth = sram_depth
        self._k_header = bool(k_header)
        super().__init__({
            "layout": In(KvParams),
            "i_cmd": In(stream.Signature(KvCommand)),
            "o_mcmd": Out(stream.Signature(MatrixCommand)),
            "bus": Out(SramSignature(word_bytes=word_bytes, latency=sram_latency)),
            "capacity": Out(16),
            "k_row_words": Out(16),
            "v_row_words": Out(16),
            "k_hdr": Out(ADDR_WIDTH),
            "map_end": Out(ADDR_WIDTH + 1),
            "busy": Out(1),
            "running": Out(1),
            "error": Out(1),
            "error_code": Out(KvError),
        })

    @property
    def word_bytes(self):
        """W."""
        return self._word_bytes

    @property
    def sram_depth(self):
        """SRAM words."""
        return self._sram_depth

    @property
    def k_header(self):
        """Whether K rows carry a header word."""
        return self._k_header

    def elaborate(self, platform):
        m = Module()
        W = self._word_bytes
        wb = exact_log2(W)
        depth = self._sram_depth
        kh = int(self._k_header)
        L = self.layout
        cmd = self.i_cmd.payload
        bus = self.bus

        # ---- the map's derived sizes: stage 1 (row and block sizes), stage 2 (end, capacity)
        dw_c = (L.head_size + W - 1) >> wb                  # ceil(head_size / W)
        kw = Signal(16, reset_less=True)                    # words per K row
        vw = Signal(16, reset_less=True)                    # words per V row
        last_mask = Signal(W, reset_less=True)              # byte mask of a row's last word
        k_block = Signal(32, reset_less=True)               # words of a block's K part
        block_words = Signal(32, reset_less=True)
        n_blocks = Signal(18, reset_less=True)
        nonzero = Signal(reset_less=True)
        m.d.sync += [
            kw.eq(dw_c + kh),
            vw.eq(dw_c),
            # head_size - (ceil(head_size / W) - 1) * W = ((head_size - 1) mod W) + 1 bytes
            last_mask.eq((C(1, W + 1) << ((L.head_size - 1)[:wb] + 1)) - 1),
            k_block.eq(L.max_pos * (dw_c + kh)),
            block_words.eq(L.max_pos * (2 * dw_c + kh)),
            n_blocks.eq(L.n_layers * L.n_kv_heads),
            nonzero.eq((L.head_size != 0) & (L.max_pos != 0) & (L.n_layers != 0)
                       & (L.n_kv_heads != 0)),
        ]
        end = Signal(51, reset_less=True)
        capacity = Signal(16)
        m.d.sync += end.eq(L.base + n_blocks * block_words)
        # Stage 2, for the command address arithmetic (addresses are ADDR_WIDTH bits: it is
        # exact modulo 2**16, and only used for commands whose addresses are all in range):
        # the words per layer (n_kv_heads blocks), the first K row and the first V row.
        layer_words = Signal(ADDR_WIDTH, reset_less=True)
        k_base = Signal(ADDR_WIDTH, reset_less=True)
        v_base = Signal(ADDR_WIDTH, reset_less=True)
        m.d.sync += [
            layer_words.eq(L.n_kv_heads * block_words[:ADDR_WIDTH]),
            k_base.eq(L.base),
            v_base.eq(L.base + k_block),
        ]
        m.d.comb += capacity.eq(Mux(nonzero & (end <= depth), L.max_pos, 0))
        capacity_r = Signal(16, reset_less=True)
        m.d.sync += capacity_r.eq(capacity)
        # Commands wait until both stages reflect the current map.  The stages are not reset
        # (they follow the input), so a reset does not make the capacity read 0 for a while.
        prev = Signal(KvParams, reset_less=True)
        age = Signal(range(4), reset_less=True)
        m.d.sync += prev.eq(L)
        with m.If(prev.as_value() != L.as_value()):
            m.d.sync += age.eq(0)
        with m.Elif(age != 3):
            m.d.sync += age.eq(age + 1)
        settled = Signal()
        m.d.comb += settled.eq((age == 3) & (prev.as_value() == L.as_value()))
        m.d.comb += [self.capacity.eq(capacity_r), self.k_row_words.eq(kw),
                     self.v_row_words.eq(vw),
                     self.map_end.eq(Mux(end > 2 ** ADDR_WIDTH, 2 ** ADDR_WIDTH, end))]

        def fail(code):
            with m.If(~self.error):
                m.d.sync += [self.error.eq(1), self.error_code.eq(code)]

        with m.If(bus.error):
            fail(KvError.SRAM)

        # The accepted command is registered (cycle 1, "Idle") and checked and decoded from
        # that register (cycle 2, "Decode"), so no path runs from the command's initiator
        # (the controller's decode) into the address arithmetic.  Address generation:
        # Decode forms the block's offset (two products in parallel) and the row offsets
        # pos * kw, pos * vw; an append adds them up in its first K-Read cycle.  Only used
        # once the checks passed, when every address is below depth.
        c = Signal(KvCommand)
        block_off = Signal(ADDR_WIDTH)
        m.d.comb += block_off.eq(c.layer * layer_words + c.head * block_words[:ADDR_WIDTH])
        k_rows = Signal(ADDR_WIDTH, reset_less=True)        # first K row of the block
        v_rows = Signal(ADDR_WIDTH, reset_less=True)        # first V row of the block
        k_off = Signal(ADDR_WIDTH, reset_less=True)         # pos * kw
        v_off = Signal(ADDR_WIDTH, reset_less=True)         # pos * vw

        # APPEND state.
        k_src = Signal(ADDR_WIDTH)
        k_dst = Signal(ADDR_WIDTH)
        v_src = Signal(ADDR_WIDTH)
        v_dst = Signal(ADDR_WIDTH)
        i = Signal(16)
        word = Signal(8 * W)
        buf = Signal(8 * W, reset_less=True)    # data: read only after a read lands
        lat = bus.signature.latency
        pending = bus.en & ~bus.we & bus.ready      # (a read granted: its word lands L later)
        for k in range(1, lat + 1):
            later = Signal(name=f"pending{k}")
            m.d.sync += later.eq(pending)
            pending = later
        with m.If(pending):
            m.d.sync += buf.eq(bus.rdata)
        m.d.comb += word.eq(Mux(pending, bus.rdata, buf))
        full = (1 << W) - 1

        with m.FSM(name="fsm") as fsm:
            with m.State("Idle"):     # (the first state: the FSM's reset state)
                m.d.comb += self.i_cmd.ready.eq(settled)
                # the command register takes the payload in every Idle cycle, so it holds
                # the accepted command's from the handshake on (an FPGA timing cut: its
                # enable from the state register, not from the controller's dispatch)
                m.d.sync += c.eq(cmd)
                with m.If(self.i_cmd.valid & settled):
                    m.next = "Decode"

            # (the L - 1 states between a read's grant and the write of its word)
            k_write = wait_states(m, "K-Write", lat)
            v_write = wait_states(m, "V-Write", lat)

            with m.State("Decode"):
                is_append = c.op == KvOp.APPEND
                m.next = "Idle"
                with m.If((c.op != KvOp.APPEND) & (c.op != KvOp.STREAM_K)):
                    fail(KvError.BAD_OP)
                with m.Elif((c.layer >= L.n_layers) | (c.head >= L.n_kv_heads)):
                    fail(KvError.BAD_HEAD)
                with m.Elif(c.pos >= capacity_r):
                    fail(KvError.POS_RANGE)
                with m.Elif(is_append & (
                        (c.args.append.k_src + kw > depth)
                        | (c.args.append.v_src + vw > depth))):
                    fail(KvError.SRC_RANGE)
                with m.Elif(is_append):
                    m.d.sync += [
                        k_src.eq(c.args.append.k_src),
                        v_src.eq(c.args.append.v_src),
                        k_rows.eq(k_base + block_off),
                        v_rows.eq(v_base + block_off),
                        k_off.eq(c.pos * kw),
                        v_off.eq(c.pos * vw),
                        i.eq(0),
                    ]
                    m.next = "K-Read"
                with m.Else():
                    s = c.args.stream
                    mc = self.o_mcmd.payload
                    m.d.sync += [
                        mc.x_base.eq(s.x_base),
                        mc.x_stride.eq(s.x_stride),
                        mc.m.eq(s.m),
                        mc.x_keep.eq(s.x_keep),
                    ]
                    m.d.sync += [
                        self.k_hdr.eq(k_base + block_off),
                        mc.w_base.eq(k_base + block_off + kh),
                        mc.w_stride.eq(kw),
                        mc.n.eq(c.pos + 1),
                        mc.k.eq(L.head_size),
                    ]
                    m.next = "Emit"

            with m.State("Emit"):
                m.d.comb += self.o_mcmd.valid.eq(1)
                with m.If(self.o_mcmd.ready):
                    m.next = "Idle"

            with m.State("K-Read"):
                # The destinations, needed from K-Write on (the sum is the same every cycle).
                m.d.sync += [k_dst.eq(k_rows + k_off), v_dst.eq(v_rows + v_off)]
                m.d.comb += [bus.en.eq(1), bus.addr.eq(k_src + i)]
                with m.If(bus.ready):
                    m.next = k_write

            with m.State("K-Write"):
                last = i == kw - 1
                m.d.comb += [
                    bus.en.eq(1),
                    bus.we.eq(1),
                    bus.addr.eq(k_dst + i),
                    bus.wdata.eq(word),
                    bus.wmask.eq(Mux(last, last_mask, full)),
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
                    m.next = v_write

            with m.State("V-Write"):
                last = i == vw - 1
                m.d.comb += [
                    bus.en.eq(1),
                    bus.we.eq(1),
                    bus.addr.eq(v_dst + i),
                    bus.wdata.eq(word),
                    bus.wmask.eq(Mux(last, last_mask, full)),
                ]
                with m.If(bus.ready):
                    m.d.sync += i.eq(i + 1)
                    m.next = "V-Read"
                    with m.If(last):
                        m.next = "Idle"

        m.d.comb += [self.busy.eq(~fsm.ongoing("Idle")),
                     self.running.eq(~fsm.ongoing("Idle") & ~fsm.ongoing("Decode"))]
        return m
