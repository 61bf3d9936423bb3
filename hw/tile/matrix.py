"""The tile's int8 matrix unit: Y[m, n] = sum_k W[n, k] * X[m, k] into int32.

Each cycle the unit reads one SRAM word of ``word_bytes`` (W) int8 weights and multiplies it
against the matching W int8 activations of each of up to ``max_m`` (M) rows held in an
activation buffer, so every weight byte fetched from SRAM feeds M multiply-accumulates.
The layout of operands in SRAM, the command format, the timing and the accumulator bound
are specified in ``docs/tile.md``; this module is the reference for field widths.

Members
-------
MatrixCommand
    Command format (``data.Struct``).
MatrixError
    Error codes (``enum.Enum``, 3 bits).
matrix_result_layout
    Layout of a result word for a given M.
MatrixUnit
    The unit.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .sram import ADDR_WIDTH, SramReadSignature, wait_states

__all__ = ["MatrixCommand", "MatrixError", "matrix_result_layout", "MatrixUnit",
           "MatrixOp", "MatrixJob", "MatrixWriteback", "ACC_WIDTH", "K_LIMIT"]

#: Width of an accumulator.  |sum_k w*x| <= 128 * 128 * K = 2**14 * K for int8 operands,
#: so 32-bit signed accumulators cannot overflow for K <= 2**16 (2**30 < 2**31 - 1).
ACC_WIDTH = 32
#: Largest K any configuration may support (the accumulator bound above).
K_LIMIT = 2 ** 16


class MatrixCommand(data.Struct):
    """A matrix-unit command (105 bits): compute ``Y = X @ W.T`` for one weight matrix.

    Addresses and strides are SRAM word addresses.  Weight row ``n`` occupies words
    ``w_base + n * w_stride`` to ``w_base + n * w_stride + ceil(k / W) - 1``; element
    ``k`` of a row is byte ``k % W`` (bits ``8*(k % W)`` up) of its word ``k // W``.
    Activation row ``m`` is laid out the same way from ``x_base + m * x_stride``.  Bytes
    past ``k`` in a row's last word are ignored (masked), whatever they hold.

    Members
    -------
    w_base : ``unsigned(16)``
        Word address of weight row 0.
    w_stride : ``unsigned(16)``
        Words from one weight row to the next (``ceil(k / W)`` for a dense matrix).
    n : ``unsigned(16)``
        Number of weight rows N (outputs per activation row), 1 or more.
    k : ``unsigned(16)``
        Row length K in elements, ``1 .. k_max`` of the unit.
    x_base : ``unsigned(16)``
        Word address of activation row 0.
    x_stride : ``unsigned(16)``
        Words from one activation row to the next.
    m : ``unsigned(8)``
        Number of activation rows used, ``1 .. max_m`` of the unit.
    x_keep : ``unsigned(1)``
        Reuse the activations already in the buffer (from the previous command, which must
        have loaded at least ``ceil(k / W)`` words of rows ``0 .. m - 1``) instead of
        loading them from SRAM.
    """

    w_base: unsigned(ADDR_WIDTH)
    w_stride: unsigned(ADDR_WIDTH)
    n: unsigned(16)
    k: unsigned(16)
    x_base: unsigned(ADDR_WIDTH)
    x_stride: unsigned(ADDR_WIDTH)
    m: unsigned(8)
    x_keep: unsigned(1)


class MatrixError(enum.Enum, shape=unsigned(3)):
    """Error codes of the matrix unit (the first error is kept until reset).

    Members
    -------
    NONE
        No error.
    BAD_SHAPE
        A command had ``n == 0``, ``k == 0``, ``m == 0`` or ``m > max_m``; it was dropped.
    K_TOO_LARGE
        A command had ``k > k_max``; it was dropped.
    SRAM_RANGE
        A read went past the end of the SRAM (or past ``2**16`` words); the word read as 0
        and the command completed.
    """

    NONE = 0
    BAD_SHAPE = 1
    K_TOO_LARGE = 2
    SRAM_RANGE = 3


def matrix_result_layout(max_m):
    """Return the layout of a result word of a unit with ``max_m`` activation rows.

    Members
    -------
    acc : ``data.ArrayLayout(signed(32), max_m)``
        ``acc[m]`` is Y[m, n]; rows ``m >= cmd.m`` read 0.
    n : ``unsigned(16)``
        The weight row n these results belong to.
    last : ``unsigned(1)``
        This is the last result word of the command (``n == cmd.n - 1``).
    """
    return data.StructLayout({
        "acc": data.ArrayLayout(signed(ACC_WIDTH), max_m),
        "n": unsigned(16),
        "last": unsigned(1),
    })


class MatrixUnit(wiring.Component):
    """Int8 x int8 -> int32 matrix unit reading weights from the tile SRAM.

    A command (:class:`MatrixCommand`) runs in two phases:

    1. *Load* (skipped with ``x_keep``): ``m * ceil(k / W)`` cycles, one SRAM word per cycle,
       copying the activation rows into the activation buffer (``ceil(k_max / W)`` entries
       of ``max_m * W`` bytes).
    2. *Stream*: ``n * ceil(k / W)`` cycles, one weight word per cycle; every cycle
       ``max_m * W`` int8 multiplies are summed into the ``max_m`` int32 accumulators.

    Commands are checked when accepted: a bad one is consumed, produces no result and sets
    ``error``.  One cycle after the last weight word of a command is issued the unit
    accepts the next command, while the previous one drains.

    Pipeline (cycles after the weight word's address is issued): 1, the word and the
    activation entry arrive and the ``max_m * W`` products are summed per row into a
    register; 2, the row sums are added into the accumulators and, after the last word of
    a weight row, the row's result goes to the output register.  A result word therefore
    leaves 3 cycles after its last weight word was issued.  A result that arrives while the
    output register holds one not taken waits in a skid register, and the whole pipeline
    (SRAM read port included, whose data holds while ``en`` is low) freezes while it does;
    the freeze depends on that register only, not on ``o.ready`` (an FPGA timing cut).
    With ``o.ready`` high the unit sustains one weight word per cycle.

    Parameters
    ----------
    word_bytes : int
        W, bytes per SRAM word (default 8), a power of two.
    max_m : int
        M, activation rows held (default 4).
    k_max : int
        Largest K accepted (default 512), at most :data:`K_LIMIT`; sets the activation
        buffer size.
    input_stage : bool
        Register the SRAM word and the activation entry before the products (default
        False): a pipeline stage more, so a result leaves 4 cycles after its last weight
        word was issued instead of 3 (an FPGA timing cut: no path from the block RAMs'
        outputs through the multipliers; the tile builds it at ``sram_latency`` > 1, the
        FPGA configurations, and `chipotle.isa.core.matrix_cycles` counts it there).

    Raises
    ------
    ValueError
        If a parameter is out of range.
    TypeError
        If `input_stage` is not a bool.

    Members
    -------
    i_cmd : ``In(stream.Signature(MatrixCommand))``
        Commands.
    o : ``Out(stream.Signature(matrix_result_layout(max_m)))``
        One result word per weight row, in row order.
    bus : ``Out(SramReadSignature(word_bytes=word_bytes))``
        The SRAM read port (owned by this unit).
    busy : ``Out(1)``
        A command is running or results are in flight.
    mac : ``Out(1)``
        A weight word is being issued this cycle (count it for utilisation).
    error : ``Out(1)``
        Sticky: an error happened since reset.
    error_code : ``Out(MatrixError)``
        The first error since reset.
    """

    def __init__(self, *, word_bytes=8, max_m=4, k_max=512, input_stage=False):
        if not isinstance(word_bytes, int) or word_bytes <= 0 or word_bytes & (word_bytes - 1):
            raise ValueError(f"word_bytes must be a positive power of two, not {word_bytes!r}")
        if not isinstance(max_m, int) or not 1 <= max_m <= 255:
            raise ValueError(f"max_m must be an integer in 1..255, not {max_m!r}")
        if not isinstance(k_max, int) or not 1 <= k_max <= min(K_LIMIT, 2 ** 16 - 1):
            raise ValueError(f"k_max must be an integer in 1..{2 ** 16 - 1}, not {k_max!r}")
        if not isinstance(input_stage, bool):
            raise TypeError(f"input_stage must be a bool, not {input_stage!r}")
        self._word_bytes = word_bytes
        self._max_m = max_m
        self._k_max = k_max
        self._input_stage = input_stage
        super().__init__({
            "i_cmd": In(stream.Signature(MatrixCommand)),
            "o": Out(stream.Signature(matrix_result_layout(max_m))),
            "bus": Out(SramReadSignature(word_bytes=word_bytes)),
            "busy": Out(1),
            "mac": Out(1),
            "error": Out(1),
            "error_code": Out(MatrixError),
        })

    @property
    def word_bytes(self):
        """W, bytes per SRAM word."""
        return self._word_bytes

    @property
    def max_m(self):
        """M, activation rows held."""
        return self._max_m

    @property
    def k_max(self):
        """Largest K accepted."""
        return self._k_max

    @property
    def input_stage(self):
        """Whether the SRAM word and the activation entry are registered before the
        products."""
        return self._input_stage

    def elaborate(self, platform):
        m = Module()
        W = self.word_bytes
        M = self.max_m
        wbits = exact_log2(W)
        act_depth = -(-self.k_max // W)
        # Internal addresses are wide enough never to wrap: base + (2**16 - 1) * stride + j.
        wide = 2 * ADDR_WIDTH + 1

        # Activation buffer: entry j holds word j of every row, row m in lane m.
        act = memory.Memory(shape=unsigned(8 * W * M), depth=act_depth, init=[])
        m.submodules.act = act
        act_wp = act.write_port(granularity=8 * W)
        # Transparent: the last word loaded may be read back in the same cycle.
        act_rp = act.read_port(transparent_for=(act_wp,))

        # The pipeline advances unless the skid register holds a result: from a register
        # only (an FPGA timing cut: `o.ready`, which follows the write-back's SRAM grant,
        # no longer reaches the read port's enables through the freeze).
        sk_valid = Signal()
        sk = Signal(matrix_result_layout(M))
        advance = Signal()
        m.d.comb += advance.eq(~sk_valid)

        # ---- command registers -----------------------------------------------------------
        cmd = self.i_cmd.payload
        n_rows = Signal(16)
        n_words = Signal(range(act_depth + 1))  # ceil(k / W)
        x_stride = Signal(ADDR_WIDTH)
        w_stride = Signal(ADDR_WIDTH)
        m_used = Signal(8)
        w_base = Signal(ADDR_WIDTH)
        last_bytes = Signal(W)   # byte mask of a row's last word
        row_mask = Signal(M)     # activation rows in use

        # ---- stage-0 counters --------------------------------------------------------------
        j = Signal(range(act_depth + 1))      # word within row
        row = Signal(16)                      # weight row, or activation row while loading
        row_addr = Signal(wide)               # address of word 0 of the current row

        issue_addr = Signal(wide)
        m.d.comb += issue_addr.eq(row_addr + j)
        issue_oob = issue_addr[ADDR_WIDTH:].any()
        row_end = j == n_words - 1

        # ---- pipeline tags, stage 1 (data arriving) and stage 2 (accumulate) --------------
        s1_load = Signal()
        s1_lane = Signal(range(M))
        s1_valid = Signal()
        s1_first = Signal()
        s1_last = Signal()
        s1_bytes = Signal(W)
        s1_rows = Signal(M)
        s1_n = Signal(16)
        s1_final = Signal()
        s1_idx = Signal(range(act_depth))
        s1_oob = Signal()

        s2_valid = Signal()
        s2_first = Signal()
        s2_last = Signal()
        s2_n = Signal(16)
        s2_final = Signal()
        psum_shape = signed(16 + ceil_log2(W) + 1)
        s2_psum = [Signal(psum_shape, name=f"s2_psum{r}") for r in range(M)]

        issue_load = Signal()
        issue_mac = Signal()
        m.d.comb += [
            self.mac.eq(issue_mac),
            self.bus.addr.eq(issue_addr[:ADDR_WIDTH]),
            self.bus.en.eq(issue_load | issue_mac),
            act_rp.addr.eq(j),
            act_rp.en.eq(issue_mac),
        ]

        with m.If(advance):
            m.d.sync += [
                s1_load.eq(issue_load),
                s1_valid.eq(issue_mac),
                s1_lane.eq(row),
                s1_idx.eq(j),
                s1_first.eq(j == 0),
                s1_last.eq(row_end),
                s1_bytes.eq(Mux(row_end, last_bytes, (1 << W) - 1)),
                s1_rows.eq(row_mask),
                s1_n.eq(row),
                s1_final.eq(row == n_rows - 1),
                s1_oob.eq(issue_oob),
            ]

        # ---- error reporting ---------------------------------------------------------------
        def fail(code):
            with m.If(~self.error):
                m.d.sync += [self.error.eq(1), self.error_code.eq(code)]

        with m.If(self.bus.error | ((s1_load | s1_valid) & s1_oob)):
            fail(MatrixError.SRAM_RANGE)

        # ---- control -------------------------------------------------------------------------
        with m.FSM(name="fsm") as fsm:
            with m.State("Idle"):
                m.d.comb += self.i_cmd.ready.eq(1)
                with m.If(self.i_cmd.valid):
                    bad_shape = (cmd.n == 0) | (cmd.k == 0) | (cmd.m == 0) | (cmd.m > M)
                    with m.If(bad_shape):
                        fail(MatrixError.BAD_SHAPE)
                    with m.Elif(cmd.k > self.k_max):
                        fail(MatrixError.K_TOO_LARGE)
                    with m.Else():
                        k_rem = cmd.k[:wbits] if wbits else C(0, 1)
                        m.d.sync += [
                            n_rows.eq(cmd.n),
                            n_words.eq((cmd.k + W - 1) >> wbits),
                            x_stride.eq(cmd.x_stride),
                            w_stride.eq(cmd.w_stride),
                            w_base.eq(cmd.w_base),
                            m_used.eq(cmd.m),
                            last_bytes.eq(Mux(k_rem == 0, (1 << W) - 1,
                                              (C(1, W + 1) << k_rem) - 1)),
                            row_mask.eq((C(1, M + 1) << cmd.m) - 1),
                            j.eq(0),
                            row.eq(0),
                        ]
                        with m.If(cmd.x_keep):
                            m.d.sync += row_addr.eq(cmd.w_base)
                            m.next = "Stream"
                        with m.Else():
                            m.d.sync += row_addr.eq(cmd.x_base)
                            m.next = "Load"

            with m.State("Load"):
                m.d.comb += issue_load.eq(advance)
                with m.If(advance):
                    m.d.sync += j.eq(j + 1)
                    with m.If(row_end):
                        m.d.sync += [j.eq(0), row.eq(row + 1), row_addr.eq(row_addr + x_stride)]
                        with m.If(row == m_used - 1):
                            m.d.sync += [row.eq(0), row_addr.eq(w_base)]
                            m.next = "Stream"

            with m.State("Stream"):
                m.d.comb += issue_mac.eq(advance)
                with m.If(advance):
                    m.d.sync += j.eq(j + 1)
                    with m.If(row_end):
                        m.d.sync += [j.eq(0), row.eq(row + 1), row_addr.eq(row_addr + w_stride)]
                        with m.If(row == n_rows - 1):
                            m.next = "Idle"

        # ---- stage 1: load writes, or products ---------------------------------------------
        word = Mux(s1_oob, 0, self.bus.data)
        m.d.comb += [
            act_wp.addr.eq(s1_idx),
            act_wp.data.eq(word.replicate(M)),
            act_wp.en.eq(Mux(s1_load & advance, 1 << s1_lane, 0)),
        ]
        # The products' operands and the tags that go with them: stage 1's, or with
        # `input_stage` the same registered (stage 1b, frozen with the rest)
        p_word, p_act, p_bytes, p_rows = word, act_rp.data, s1_bytes, s1_rows
        p_tags = (s1_valid, s1_first, s1_last, s1_n, s1_final)
        if self.input_stage:
            b_word = Signal.like(self.bus.data, name="s1b_word")
            b_act = Signal.like(act_rp.data, name="s1b_act")
            b_bytes = Signal.like(s1_bytes, name="s1b_bytes")
            b_rows = Signal.like(s1_rows, name="s1b_rows")
            b_tags = tuple(Signal.like(t, name=t.name.replace("s1_", "s1b_")) for t in p_tags)
            with m.If(advance):
                m.d.sync += [b_word.eq(word), b_act.eq(act_rp.data), b_bytes.eq(s1_bytes),
                             b_rows.eq(s1_rows)]
                m.d.sync += [b.eq(t) for b, t in zip(b_tags, p_tags, strict=True)]
            p_word, p_act, p_bytes, p_rows, p_tags = b_word, b_act, b_bytes, b_rows, b_tags
        psums = []
        for r in range(M):
            lane = p_act[r * 8 * W:(r + 1) * 8 * W]
            prods = []
            for b in range(W):
                wb = Mux(p_bytes[b], p_word[8 * b:8 * b + 8].as_signed(), 0)
                xb = Mux(p_rows[r], lane[8 * b:8 * b + 8].as_signed(), 0)
                prods.append(wb * xb)
            psums.append(sum(prods))

        with m.If(advance):
            m.d.sync += [d.eq(t) for d, t in zip((s2_valid, s2_first, s2_last, s2_n, s2_final),
                                                 p_tags, strict=True)]
            m.d.sync += [s2_psum[r].eq(psums[r]) for r in range(M)]

        # ---- stage 2: accumulate, emit ------------------------------------------------------
        acc = [Signal(signed(ACC_WIDTH), name=f"acc{r}") for r in range(M)]
        acc_next = [Signal(signed(ACC_WIDTH), name=f"acc_next{r}") for r in range(M)]
        for r in range(M):
            m.d.comb += acc_next[r].eq(Mux(s2_first, 0, acc[r]) + s2_psum[r])

        # The output register `o` and a skid register behind it: a result arriving while
        # `o` holds one that is not taken goes to the skid register, and the pipeline
        # freezes from the next cycle until it has moved on into `o` (so a result never
        # waits on a frozen pipeline; the freeze costs no cycle over the unbuffered unit's).
        new = Signal(matrix_result_layout(M))
        m.d.comb += [new.n.eq(s2_n), new.last.eq(s2_final)]
        m.d.comb += [new.acc[r].eq(acc_next[r]) for r in range(M)]
        arrive = advance & s2_valid & s2_last
        free = ~self.o.valid | self.o.ready
        with m.If(advance & s2_valid):
            m.d.sync += [acc[r].eq(acc_next[r]) for r in range(M)]
        with m.If(sk_valid):
            with m.If(self.o.ready):        # (o is valid whenever the skid register is)
                m.d.sync += [self.o.payload.eq(sk), sk_valid.eq(0)]
        with m.Elif(arrive):
            with m.If(free):
                m.d.sync += [self.o.payload.eq(new), self.o.valid.eq(1)]
            with m.Else():
                m.d.sync += [sk.eq(new), sk_valid.eq(1)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        m.d.comb += self.busy.eq(~fsm.ongoing("Idle") | s1_valid | s1_load | s2_valid
                                 | self.o.valid | sk_valid
                                 | p_tags[0])   # stage 1b's valid (stage 1's without it)
        return m


class MatrixOp(enum.Enum, shape=unsigned(2)):
    """What the write-back stage does with the results of one matrix instruction.

    Members
    -------
    MATMUL
        ``requant_dyn(acc, mu_x[m], b_x[m], m_row[n], s_row[n])`` (per-row table at ``c``).
    MATQK
        ``requant_dyn(acc, mu_x[m] * mu_w[n], b_x[m] + b_w[n], m_c, s_c)`` (one pair at ``c``,
        weight-row headers read per result).
    MATRAW
        The int32 accumulators unchanged.
    """

    MATMUL = 0
    MATQK = 1
    MATRAW = 2


class MatrixJob(data.Struct):
    """What the write-back stage needs to finish one matrix instruction (word addresses for
    the headers, byte addresses for the table and the destination; all already checked
    against the SRAM by the controller).

    Members
    -------
    op : :class:`MatrixOp`
    td : ``unsigned(2)``
        Destination element size code: 0 int8, 1 int16, 2 int32 (``Dtype`` codes of the
        three legal destination types).
    m : ``unsigned(4)``
        Activation rows M (1 .. 8).
    x_hdr : ``unsigned(16)``
        Word address of activation row 0's header (unused for ``MATRAW``).
    x_stride : ``unsigned(16)``
        Words from one activation record to the next.
    w_hdr : ``unsigned(16)``
        Word address of weight row 0's header (``MATQK``).
    w_stride : ``unsigned(16)``
        Words from one weight record to the next (``MATQK``).
    c : ``unsigned(17)``
        Byte address of the requantisation table (``MATMUL``, pair ``n`` at ``c + 4 n``) or
        pair (``MATQK``); 4-aligned.
    y : ``unsigned(24)``
        Byte address of output element ``(0, 0)``.
    y_stride : ``unsigned(24)``
        Bytes from one output row to the next (``pad(N * size)``).
    """

    op: MatrixOp
    td: unsigned(2)
    m: unsigned(4)
    x_hdr: unsigned(ADDR_WIDTH)
    x_stride: unsigned(ADDR_WIDTH)
    w_hdr: unsigned(ADDR_WIDTH)
    w_stride: unsigned(ADDR_WIDTH)
    c: unsigned(17)
    y: unsigned(24)
    y_stride: unsigned(24)


class MatrixWriteback(wiring.Component):
    """Requantise the matrix unit's int32 results and write them to SRAM (one instruction).

    Accepts a :class:`MatrixJob`, reads (except for ``MATRAW``) the ``m`` activation-record
    headers (``mu`` int16 at byte 0, ``b`` int16 at byte 2 of the header word) and, for
    ``MATQK``, the ``(m, s)`` pair at ``c``; then for every result word of the matrix unit
    (weight row ``n``) reads the row's ``(m, s)`` pair (``MATMUL``) or the weight record's
    header (``MATQK``) and writes the ``m`` output elements ``Y[r, n]`` at ``y + r * y_stride +
    n * size`` with byte enables.  Arithmetic (bit-exact with
    ``chipotle.golden.numerics.requant_dyn``):

    * ``mu = mu_x[r]`` (``* mu_w[n]`` for ``MATQK``), ``b = b_x[r]`` (``+ b_w[n]``),
      ``sh = s - b`` (signed 18 bits);
    * ``p = acc * mu`` (signed 64; ``|p| < 2**46`` else ``ARITH``), ``sh < 0`` is ``ARITH``;
    * ``y = sat((p * m + (2**min(sh, 62) >> 1)) >> min(sh, 62))``, 0 when ``sh > 62``.

    The scale and shift of an element (``mu``, ``sh``) are registered one element ahead
    (element 0's in the cycle that takes its result, from the side word), the cycle that
    computes a product multiplies only ``acc * mu`` into a register, and the cycle that writes
    the element checks it: no path chains two multipliers, or a multiplier and a decision.

    Latency (``MATMUL``, ``MATQK``): 2 cycles per activation header (and the ``MATQK`` pair) at
    the start, then 1 to read the first result's side word (its pair, ``MATMUL``, or K-record
    header, ``MATQK``).  Per result: 1 cycle for the first element's product (in which the
    next result's side word is read, unless this result is the last), then one write per
    element, the product of the next element computed in the cycle that writes one; the cycle
    of the last write also takes the next result if ``i_res`` offers it then (else the
    write-back takes it in the cycle it is offered): ``P = 1 + m`` cycles per result
    (``MATRAW``: ``m``), one side-word read and ``m`` writes, the floor of one read/write port.
    All of it is on ``bus`` (``SramSignature``, shared through the tile's arbiter: more if not
    granted at once; a write not granted takes no result; a side word that lost its grant is
    read after the writes, 1 cycle more).  The matrix unit is back-pressured through
    ``i_res.ready`` meanwhile (in the last write ``i_res.ready`` follows the write's grant).
    After an arithmetic error the remaining results are drained without writing and
    ``error`` stays high until the next job is accepted; the elements written before it are the
    same as in element-by-element order (the error of an element is found in the cycle that
    would write it, which writes no byte, and stops the writes).

    Parameters
    ----------
    word_bytes : int
        W.
    max_m : int
        M of the matrix unit.
    sram_latency : int
        L of ``bus`` (`SramSignature.latency`): 1 (default), 2 or 3 cycles.  With L > 1 each
        header and pair read takes L - 1 cycles more, a result is taken only once its side
        word has arrived (L cycles after the read's grant), and each element's scaled
        product ``p * m + half`` is registered before the cycle that writes it (state
        ``Scale`` after ``Element``; an FPGA timing cut): every result takes ``P = max(2 +
        m, 1 + L)`` cycles, the last ``2 + m`` (`chipotle.isa.matrix_cycles`).  At L = 1 the
        side word is always there when it is needed, and none of these gates and stages is
        built.

    Members
    -------
    i_job : ``In(stream.Signature(MatrixJob))``
        One job per matrix instruction, offered with (or before) its matrix command.
    i_res : ``In(stream.Signature(matrix_result_layout(max_m)))``
        The matrix unit's results.
    bus : ``Out(SramSignature(word_bytes=W, latency=sram_latency))``
        Header, table reads and result writes.
    busy : ``Out(1)``
        A job is in progress (high from acceptance to the last write).
    error : ``Out(1)``
        The current (or last) job hit an arithmetic error (``ErrorCode.ARITH``).
    """

    def __init__(self, *, word_bytes=8, max_m=4, sram_latency=1):
        from .sram import SramSignature
        self._word_bytes = word_bytes
        self._max_m = max_m
        super().__init__({
            "i_job": In(stream.Signature(MatrixJob)),
            "i_res": In(stream.Signature(matrix_result_layout(max_m))),
            "bus": Out(SramSignature(word_bytes=word_bytes, latency=sram_latency)),
            "busy": Out(1),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self._word_bytes
        M = self._max_m
        wb = exact_log2(W)

        job = Signal(MatrixJob)
        mu_x = Array(Signal(signed(16), name=f"mu_x{r}") for r in range(M))
        b_x = Array(Signal(signed(16), name=f"b_x{r}") for r in range(M))
        acc = Array(Signal(signed(ACC_WIDTH), name=f"res{r}") for r in range(M))
        last = Signal()
        mult = Signal(16)          # m of the requantisation
        shift = Signal(16)         # s of the requantisation
        w_mu = Signal(signed(16))
        w_b = Signal(signed(16))
        r = Signal(range(max(M, 2)))     # row of the element being written
        hdr_addr = Signal(ADDR_WIDTH)    # running header address (X rows, then W rows)
        w_addr = Signal(ADDR_WIDTH)
        pair_addr = Signal(24)           # byte address of the next (m, s) pair
        col_addr = Signal(24)            # byte address of Y[0, n] of the next result
        el_addr = Signal(24)             # byte address of Y[r, n]
        prod = Signal(signed(64), reset_less=True)
        failed = Signal()
        # the next result's side word (its (m, s) pair, MATMUL, or its K-record header,
        # MATQK), read ahead while the write-back computes the first product
        side_arrive = Signal()           # a side word read was granted in the last cycle
        side_off = Signal(range(max(W // 4, 2)))   # its 32-bit lane in the word
        side_q = Signal(32, reset_less=True)     # the side word, held after it arrived
        side_ok = Signal()               # the next result's side word is (being) read

        size_bytes = Array([C(1, 3), C(2, 3), C(4, 3)])[job.td]
        qk = job.op == MatrixOp.MATQK
        raw = job.op == MatrixOp.MATRAW

        m.d.comb += self.error.eq(failed)

        def read(addr):
            m.d.comb += [self.bus.en.eq(1), self.bus.addr.eq(addr)]

        word = self.bus.rdata
        def lane32(sel):
            """The 32-bit lane `sel` of the word read (a pair or a header)."""
            return word.word_select(sel, 32) if wb > 2 else word[:32]

        pair_sel = lane32(pair_addr[2:wb])
        lat = self.bus.signature.latency
        # the side word lands L cycles after its grant (`side_arrive` is the first cycle
        # after it); `side_have`: it landed and is held in `side_q`
        side_land = side_arrive
        in_flight = side_arrive
        for k in range(1, lat):
            later = Signal(name=f"side_arrive{k}")
            m.d.sync += later.eq(side_land)
            side_land = later
            in_flight = in_flight | later
        side_have = Signal()
        side_avail = Signal()            # the next result's side word is here
        # (at L = 1 it always is when a result is taken: no gate on `i_res.ready`, which
        # the matrix unit's freeze depends on, nor on `i_job.ready`)
        m.d.comb += side_avail.eq(side_land | side_have if lat > 1 else 1)
        if lat == 1:
            in_flight = C(0, 1)
        side_word = Signal(32)
        m.d.comb += side_word.eq(Mux(side_land,
                                     lane32(side_off),
                                     side_q))
        m.d.sync += side_arrive.eq(0)
        with m.If(side_land):
            m.d.sync += [side_q.eq(side_word), side_have.eq(1)]

        def read_side():
            """Request the next result's side word; returns the grant."""
            read(Mux(qk, w_addr, pair_addr[wb:]))
            with m.If(self.bus.ready):
                m.d.sync += [side_arrive.eq(1), side_ok.eq(1),
                             side_off.eq(Mux(qk, 0, pair_addr[2:wb] if wb > 2 else 0))]
                with m.If(qk):
                    m.d.sync += w_addr.eq(w_addr + job.w_stride)
                with m.Else():
                    m.d.sync += pair_addr.eq(pair_addr + 4)
            return self.bus.ready

        # Three stages per element, so that no cycle chains two multipliers or a multiplier
        # and a decision: the element's scale `mu_q = mu_x[r]` (`* mu_w[n]`, MATQK) and shift
        # `s_q = s - b_x[r]` (`- b_w[n]`) are registered one step ahead (element 0's when its
        # result is taken, element r + 1's when element r's product is), the product cycle
        # computes only `prod = acc[pr] * mu_q`, and the write cycle checks `prod` and `sh`
        # (ARITH) before it writes.
        pr = Signal(range(max(M, 2)))    # row of the element whose product is computed
        mu_q = Signal(signed(32))
        s_q = Signal(signed(19))
        nx = Signal(range(max(M, 2)))    # row of the element staged: pr + 1 unless taking
        nx_mu = Signal(signed(16))       # its weight-side scale code (MATQK) ...
        nx_b = Signal(signed(16))
        nx_s = Signal(16)                # ... and its static shift
        m.d.comb += [nx.eq(pr + 1), nx_mu.eq(w_mu), nx_b.eq(w_b), nx_s.eq(shift)]
        mu_next = Mux(qk, mu_x[nx] * nx_mu, mu_x[nx])
        s_next = nx_s - Mux(qk, b_x[nx] + nx_b, b_x[nx])

        def stage():
            m.d.sync += [mu_q.eq(mu_next), s_q.eq(s_next)]

        # The shift's decode, registered with it (an FPGA timing cut: the write cycle starts
        # the requantisation at the multiplier, not at a compare and a decoder of `sh`):
        # sh > 62, sh < 0, min(sh, 62) and the rounding half 2**min(sh, 62) >> 1.
        s_t = Signal(signed(18))         # sh = s - b (the docstring), 18 bits
        sh_big = Signal(reset_less=True)     # read with `prod`, which has no reset either
        sh_neg = Signal(reset_less=True)
        sh_c = Signal(6, reset_less=True)
        half = Signal(63, reset_less=True)
        m.d.comb += s_t.eq(s_q)
        s_c = Mux(s_t > 62, 62, s_t[:6])

        def take_product():
            """Register element `pr`'s product and shift, stage element `pr + 1` and move `pr`
            on."""
            m.d.sync += [prod.eq(acc[pr] * mu_q), pr.eq(pr + 1),
                         sh_big.eq(s_t > 62), sh_neg.eq(s_t < 0), sh_c.eq(s_c),
                         half.eq((C(1, 64) << s_c) >> 1)]
            stage()

        # the element in `prod` is an arithmetic error: `requant_dyn` refuses it.  |prod| <
        # 2**46 by the bits above 46: all equal to the sign, and prod = -2**46 (the only
        # value of that form outside the bound) excluded.
        bad = Signal()           # the element being written is in error
        bad_p = Signal()         # the element in `prod` is
        p_top = prod[46:]
        p_fits = (~p_top.any() | (p_top.all() & prod[:46].any()))
        m.d.comb += bad_p.eq(~raw & (sh_neg | ~p_fits))

        def select_take():
            """In a cycle that may take a result, point the staging at its element 0 (by the
            state alone, so that the staged values do not wait for the decision to take)."""
            m.d.comb += [nx.eq(0), nx_mu.eq(side_word[:16].as_signed()),
                         nx_b.eq(side_word[16:32].as_signed())]
            with m.If(job.op == MatrixOp.MATMUL):
                m.d.comb += nx_s.eq(side_word[16:32])

        def take_result():
            """Take the offered result (``i_res.ready`` is high; `select_take` called): latch
            its accumulators and side word, stage its element 0 and go to its first product
            (or write)."""
            res = self.i_res.payload
            m.d.sync += [acc[i].eq(res.acc[i]) for i in range(M)]
            m.d.sync += [last.eq(res.last), r.eq(0), pr.eq(0), el_addr.eq(col_addr),
                         col_addr.eq(col_addr + size_bytes), side_ok.eq(0), side_have.eq(0)]
            with m.If(qk):
                m.d.sync += [w_mu.eq(side_word[:16].as_signed()),
                             w_b.eq(side_word[16:32].as_signed())]
            with m.Elif(job.op == MatrixOp.MATMUL):
                m.d.sync += [mult.eq(side_word[:16]), shift.eq(side_word[16:32])]
            stage()
            with m.If(failed):
                with m.If(res.last):
                    m.next = "Idle"
            with m.Elif(raw):
                m.next = "Write"
            with m.Else():
                m.next = "Element"

        # requantisation of `prod` (registered) by (mult, sh) to the job's type; the
        # saturation by the bits above the type's sign bit (all equal to the sign: it fits)
        xm = Signal(signed(66))
        m.d.comb += xm.eq(prod * mult.as_unsigned() + half)
        # With L > 1 the scaled element `xm` is registered (`xm_q`, with its shift and its
        # check) before the cycle that shifts, saturates and writes it (an FPGA timing cut:
        # the multiplier is not on the path into the SRAM's write data); a result takes a
        # cycle more (state `Scale`, after `Element`), which at L > 1 the wait for the next
        # side word mostly hides: P = max(2 + m, 1 + L) (`chipotle.isa.matrix_cycles`).
        xstage = lat > 1
        if xstage:
            xm_q = Signal(signed(66), reset_less=True)
            shb_x = Signal(reset_less=True)
            shc_x = Signal(6, reset_less=True)
            bad_x = Signal(reset_less=True)

            def load_x():
                """Move the element in `prod` into the scaled stage."""
                m.d.sync += [xm_q.eq(xm), shb_x.eq(sh_big), shc_x.eq(sh_c), bad_x.eq(bad_p)]

            x_in, x_big, x_sh = xm_q, shb_x, shc_x
        else:
            x_in, x_big, x_sh = xm, sh_big, sh_c
        shifted = Signal(signed(66))
        m.d.comb += shifted.eq(Mux(x_big, 0, x_in >> x_sh))
        value = Signal(signed(32))
        for code, bits in ((0, 8), (1, 16), (2, 32)):
            lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
            top = shifted[bits - 1:]
            neg = shifted[65]
            with m.If(job.td == code):
                m.d.comb += value.eq(Mux(~top.any() | top.all(), shifted[:bits].as_signed(),
                                         Mux(neg, lo, hi)))
        m.d.comb += bad.eq(bad_x if xstage else bad_p)
        out = Mux(raw, acc[r], value)
        boff = el_addr[:wb] if wb else C(0, 1)
        m.d.comb += [
            self.bus.wdata.eq((out.as_unsigned()[:32] << Cat(C(0, 3), boff))[:8 * W]),
            # an element in error is not written (the request stays, so that `bus.en` does
            # not wait for the check; a granted write with no byte enabled changes nothing)
            self.bus.wmask.eq(Mux(bad, 0,
                                  (Mux(job.td == 0, 0x1, Mux(job.td == 1, 0x3, 0xF)) << boff)
                                  [:W])),
        ]

        with m.FSM(name="fsm") as fsm:
            with m.State("Idle"):     # (the first state: the FSM's reset state)
                # (a job is not taken while a side word of the last one is in flight, which
                # an arithmetic error's drain leaves: it would land as the new job's)
                m.d.comb += self.i_job.ready.eq(~in_flight)
                with m.If(self.i_job.valid & ~in_flight):
                    p_in = self.i_job.payload
                    m.d.sync += [
                        job.eq(p_in), failed.eq(0), r.eq(0), side_ok.eq(0), side_have.eq(0),
                        hdr_addr.eq(p_in.x_hdr), w_addr.eq(p_in.w_hdr),
                        pair_addr.eq(p_in.c), col_addr.eq(p_in.y),
                    ]
                    with m.If(p_in.op == MatrixOp.MATRAW):
                        m.next = "Result"
                    with m.Else():
                        m.next = "X-Header"

            # (a header or pair read's word comes L - 1 wait states after its grant)
            x_latch = wait_states(m, "X-Latch", lat)
            pair_latch = wait_states(m, "Pair-Latch", lat)

            with m.State("X-Header"):
                read(hdr_addr)
                with m.If(self.bus.ready):
                    m.next = x_latch

            with m.State("X-Latch"):
                m.d.sync += [mu_x[r].eq(word[:16].as_signed()), b_x[r].eq(word[16:32].as_signed()),
                             hdr_addr.eq(hdr_addr + job.x_stride), r.eq(r + 1)]
                with m.If(r == job.m - 1):
                    m.d.sync += r.eq(0)
                    with m.If(qk):
                        m.next = "Pair"
                    with m.Else():
                        m.next = "Side"
                with m.Else():
                    m.next = "X-Header"

            with m.State("Pair"):      # MATQK: the one (m, s) pair at c
                read(pair_addr[wb:])
                with m.If(self.bus.ready):
                    m.next = pair_latch

            with m.State("Pair-Latch"):
                m.d.sync += [mult.eq(pair_sel[:16]), shift.eq(pair_sel[16:32])]
                m.next = "Side"

            with m.State("Side"):      # a side word not read ahead (the first; a lost grant)
                with m.If(read_side()):
                    m.next = "Result"

            with m.State("Result"):    # waiting for a result (or draining after an error)
                can = raw | failed | side_avail      # (MATRAW has no side word)
                m.d.comb += self.i_res.ready.eq(can)
                select_take()
                with m.If(self.i_res.valid & can):
                    take_result()

            with m.State("Element"):   # the first element's product; the next side word
                with m.If(~last):
                    read_side()
                take_product()
                m.next = "Scale" if xstage else "Write"

            if xstage:
                with m.State("Scale"):     # the first element scaled; the second's product
                    load_x()                # (past the last row a product nothing loads)
                    take_product()
                    m.next = "Write"

            with m.State("Write"):     # element r; the product of element r + 1 meanwhile
                m.d.comb += [self.bus.en.eq(1), self.bus.we.eq(1),
                             self.bus.addr.eq(el_addr[wb:])]
                with m.If(r == job.m - 1):
                    select_take()
                with m.If(bad):        # stop writing: drain the results, or end at the last
                    m.d.sync += failed.eq(1)
                    with m.If(last):
                        m.next = "Idle"
                    with m.Else():
                        m.next = "Result"
                with m.Elif(self.bus.ready):
                    m.d.sync += [r.eq(r + 1), el_addr.eq(el_addr + job.y_stride)]
                    with m.If(r == job.m - 1):
                        with m.If(last):
                            m.next = "Idle"
                        with m.Elif(raw | side_ok):
                            # the last write takes the next result if it is offered (and
                            # its side word is here)
                            can = raw | side_avail
                            m.d.comb += self.i_res.ready.eq(can)
                            with m.If(self.i_res.valid & can):
                                take_result()
                            with m.Else():
                                m.next = "Result"
                        with m.Else():
                            m.next = "Side"
                    with m.Elif(~raw):
                        if xstage:      # element r + 1 scaled, r + 2's product
                            load_x()
                        take_product()

        m.d.comb += self.busy.eq(~fsm.ongoing("Idle"))
        return m
