"""The tile SRAM: banked block RAM with one read port and one read/write port.

The SRAM is word-addressed (a word is ``word_bytes`` bytes, 8 by default).  Addresses on
every port are :data:`ADDR_WIDTH` bits wide whatever the size of the SRAM, so that an
address past the end can be seen, flagged and refused instead of wrapping into other state.

Members
-------
ADDR_WIDTH
    Width of a word address on every SRAM port and in every command format (16 bits: up
    to 64 Ki words, 512 KiB with 8-byte words).
SramReadSignature
    Initiator side of a read-only SRAM port (fixed latency, never refused).
SramSignature
    Initiator side of a read/write SRAM port (grant handshake, byte enables).
Sram
    The banked SRAM with port ``r`` (read) and port ``rw`` (read/write).
SramArbiter
    Round-robin arbiter sharing one :class:`SramSignature` port between initiators.
connect_narrow
    Connect a one-word initiator to a port that reads several words (``read_words > 1``).
check_latency
    Refuse a read/write connection whose two sides expect different latencies.
wait_states
    The FSM states an initiator waits in for a read's word at latency L > 1.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

import itertools
from types import SimpleNamespace

from amaranth import *  # house style (STYLE.md)
from amaranth.hdl import MemoryData
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out, connect
from amaranth.utils import ceil_log2, exact_log2

__all__ = ["ADDR_WIDTH", "SramReadSignature", "SramSignature", "Sram", "SramArbiter",
           "connect_narrow", "check_latency", "wait_states"]

ADDR_WIDTH = 16


class _WordSignature(wiring.Signature):
    """A port signature parametrised by its word width (equal when the widths are)."""

    @property
    def word_bytes(self):
        """Word width in bytes."""
        return self._word_bytes

    def __eq__(self, other):
        return type(self) is type(other) and self.word_bytes == other.word_bytes


class SramReadSignature(_WordSignature):
    """Initiator side of a read-only SRAM port.

    A read is requested by holding ``en`` high for one cycle with ``addr``; it is never
    refused.  ``data`` carries the word from the cycle after the request until the next
    request (it holds while ``en`` is low, like a block RAM output register), so a pipeline
    can freeze without losing it.  ``error`` pulses high for one cycle, aligned with
    ``data``, when the address was out of range; ``data`` then reads 0.

    Parameters
    ----------
    word_bytes : int
        Word width in bytes.

    Members
    -------
    en : ``Out(1)``
        Request a read this cycle.
    addr : ``Out(ADDR_WIDTH)``
        Word address.
    data : ``In(8 * word_bytes)``
        Read word, valid from 1 cycle after the request.
    error : ``In(1)``
        One-cycle pulse, aligned with ``data``: the address was not below the SRAM depth.
    """

    def __init__(self, *, word_bytes=8):
        self._word_bytes = word_bytes
        super().__init__({
            "en": Out(1),
            "addr": Out(ADDR_WIDTH),
            "data": In(8 * word_bytes),
            "error": In(1),
        })

    def __repr__(self):
        return f"SramReadSignature(word_bytes={self.word_bytes})"


class SramSignature(_WordSignature):
    """Initiator side of a read/write SRAM port with a grant handshake.

    The initiator holds ``en`` (and ``we``, ``addr``, ``wmask``, ``wdata``) until a cycle
    in which ``ready`` is high: that cycle the request is granted.  ``ready`` may depend
    combinationally on ``en`` (an arbiter grants one initiator among those requesting), so
    ``en`` must not depend on ``ready``.  A granted write updates the bytes selected by
    ``wmask`` at the end of the cycle.  A granted read returns its word on ``rdata`` in the
    next cycle only (an arbiter may hand ``rdata`` to another initiator after that), so
    an initiator that cannot consume it at once must capture it.  ``error`` pulses, in the
    cycle after a granted request, when its address was out of range: such a write
    changes nothing and such a read returns 0.

    A port of *latency* L > 1 returns a granted read's word in cycle L after the grant
    only, and pulses ``error`` then; its target registers the request once before the
    block RAMs (L = 2), and also their read data (L = 3: the block RAM's output register),
    so that no path runs from an initiator's logic through an arbiter into a block RAM pin
    or out of one into an initiator in one cycle.  A granted write then updates the SRAM at
    the end of the cycle after its grant (for every L > 1): an initiator reading it back on
    the same port is served in order, and a read on the SRAM's ``r`` port in or after that
    cycle sees it.

    A *wide* port (``read_words`` R > 1) returns, for a read of ``addr``, the R consecutive
    words ``addr .. addr + R - 1`` on ``rdata`` (word ``k`` in bits ``64 k ..`` for W = 8,
    i.e. ``rdata.word_select(k, 8 * word_bytes)``); a word past the end of the SRAM reads 0
    and is not an error (``error`` is only about ``addr``, word 0).  Writes stay one word.
    A one-word initiator uses word 0 (:func:`connect_narrow`).

    Parameters
    ----------
    word_bytes : int
        Word width in bytes (also the width of ``wmask``).
    read_words : int
        R, words a read returns (default 1).
    latency : int
        L, cycles from a granted read to its data on ``rdata`` (and from a granted request
        to its ``error``): 1 (default), 2 or 3.

    Raises
    ------
    ValueError
        If `read_words` is not a positive integer or `latency` is not 1, 2 or 3.

    Members
    -------
    en : ``Out(1)``
        Request.
    we : ``Out(1)``
        The request is a write.
    addr : ``Out(ADDR_WIDTH)``
        Word address.
    wmask : ``Out(word_bytes)``
        Byte enables of a write (bit ``b`` writes bits ``8*b`` to ``8*b+7``).
    wdata : ``Out(8 * word_bytes)``
        Write data.
    ready : ``In(1)``
        The request is granted this cycle.
    rdata : ``In(8 * word_bytes * read_words)``
        Read words ``addr .. addr + R - 1``, valid in cycle L after a granted read.
    error : ``In(1)``
        One-cycle pulse in cycle L after a granted request with an out-of-range address.
    """

    def __init__(self, *, word_bytes=8, read_words=1, latency=1):
        if not isinstance(read_words, int) or read_words < 1:
            raise ValueError(f"read_words must be a positive integer, not {read_words!r}")
        if latency not in (1, 2, 3):
            raise ValueError(f"latency must be 1, 2 or 3 cycles, not {latency!r}")
        self._word_bytes = word_bytes
        self._read_words = read_words
        self._latency = latency
        super().__init__({
            "en": Out(1),
            "we": Out(1),
            "addr": Out(ADDR_WIDTH),
            "wmask": Out(word_bytes),
            "wdata": Out(8 * word_bytes),
            "ready": In(1),
            "rdata": In(8 * word_bytes * read_words),
            "error": In(1),
        })

    @property
    def read_words(self):
        """R, words a read returns."""
        return self._read_words

    @property
    def latency(self):
        """L, cycles from a granted read to its data."""
        return self._latency

    def __eq__(self, other):
        return (super().__eq__(other) and self.read_words == other.read_words
                and self.latency == other.latency)

    def __repr__(self):
        extra = "".join(f", {k}={v}" for k, v, one in (("read_words", self.read_words, 1),
                                                       ("latency", self.latency, 1))
                        if v != one)
        return f"SramSignature(word_bytes={self.word_bytes}{extra})"


def connect_narrow(m, initiator, port):
    """Connect a one-word initiator port to a target port, which may be wide.

    ``initiator`` is the ``Out(SramSignature(word_bytes=W))`` side (or a flipped
    ``In``); ``port`` is an ``In(SramSignature(word_bytes=W, read_words=R))`` (an arbiter's
    initiator port, an SRAM's ``rw``).  With R = 1 this is :func:`~amaranth.lib.wiring.connect`;
    otherwise the request goes through unchanged and the initiator sees word 0 of ``rdata``
    (the word at its address).

    Raises
    ------
    ValueError
        If ``initiator`` reads more than one word, or its latency differs from ``port``'s
        (`check_latency`).
    """
    if initiator.signature.read_words != 1:
        raise ValueError(f"the initiator must read one word, not {initiator.signature!r}")
    check_latency(initiator, port)
    if port.signature.read_words == 1:
        connect(m, initiator, port)
        return
    W = port.signature.word_bytes
    m.d.comb += [
        port.en.eq(initiator.en), port.we.eq(initiator.we), port.addr.eq(initiator.addr),
        port.wmask.eq(initiator.wmask), port.wdata.eq(initiator.wdata),
        initiator.ready.eq(port.ready), initiator.rdata.eq(port.rdata[:8 * W]),
        initiator.error.eq(port.error),
    ]


def check_latency(initiator, port):
    """Raise ValueError unless the initiator and the target port of a read/write connection
    have the same latency (`SramSignature.latency`; `wiring.connect` compares only the
    members, so a unit expecting its data a cycle early would connect silently)."""
    li, lp = initiator.signature.latency, port.signature.latency
    if li != lp:
        raise ValueError(f"an initiator of latency {li} connected to an SRAM port of "
                         f"latency {lp}: give both the same (ChipConfig.sram_latency)")


def wait_states(m, target, latency, each=None):
    """Add to the current FSM of `m` the ``latency - 1`` states an initiator spends between
    a read's grant and the state `target` that takes its word (``<target>-Wait1`` ..), each
    going to the next; return the name to go to on the grant (`target` itself when
    ``latency`` is 1).  `each`, if given, is called inside every wait state (e.g. to drive
    a status output)."""
    names = [f"{target}-Wait{k}" for k in range(1, latency)] + [target]
    for here, after in itertools.pairwise(names):
        with m.State(here):
            if each is not None:
                each()
            m.next = after
    return names[0]


class Sram(wiring.Component):
    """Banked tile SRAM with a read port and a read/write port.

    ``n_banks`` banks, word-interleaved (word address ``a`` lives in bank ``a % n_banks``,
    row ``a // n_banks``), each an :class:`amaranth.lib.memory.Memory` of
    ``depth // n_banks`` words with two ports: a read port (``r``) and a read/write port
    (``rw``, a read port and a byte-granular write port sharing one address), which maps to
    one true dual-port block RAM (one copy: on the ECP5, 2 KiB per ``DP16KD`` once a bank
    is 1,024 words deep or more).  Because every bank has both ports, ``r`` and ``rw`` never
    conflict: there is no arbitration inside the SRAM, every request is served in the cycle
    it is made (``rw.ready`` is always 1; share ``rw`` between initiators with
    :class:`SramArbiter`).  Banking is the physical organisation (block RAM primitives,
    smaller macros on an ASIC) and gives ``rw`` its *wide read*: with ``read_words`` R > 1
    a read of ``addr`` returns the R consecutive words ``addr .. addr + R - 1`` (each in a
    different bank, R <= ``n_banks``; bank ``b`` reads row ``addr // n_banks``, or the row
    after it when ``b < addr % n_banks``: one shared row incrementer in the address path,
    none when R = 1), rotated into word order on ``rdata`` by the registered bank of
    ``addr`` (the multiplexer word 0 already has).  A word past the end reads 0 and is not an
    error (``error`` is about ``addr``).  With R = 1 (the default) the SRAM is exactly the
    one-word SRAM it was.

    Latency: 1 cycle on both ports by default.  With ``rw_latency`` 2 the ``rw`` request
    is registered before the banks (a write lands a cycle after its grant, a read's word
    comes 2 cycles after it); with 3 each bank's read data is registered too (the block
    RAM's output register).  ``r`` keeps 1 cycle.  Transparency: ``r`` is transparent for ``rw``'s
    writes: a read on ``r`` in the same cycle as a write on ``rw`` to the same word returns
    the new word (the bytes ``wmask`` selects from ``wdata``, the others as they were).  A
    block RAM leaves such a cross-port collision undefined, so synthesis adds a bypass (the
    write's data and an address match registered, a byte multiplexer on ``r.data``); an
    old-word ``r`` would need a second copy of every bank instead.  ``rw`` itself cannot
    read and write in one cycle.

    Out-of-range addresses (``addr >= depth``) pulse the port's ``error`` 1 cycle after the
    request; the request touches no bank (a write is dropped, a read returns 0).  Contents
    are zero after configuration; reset does not clear them.

    Parameters
    ----------
    size_bytes : int
        Capacity in bytes (default 32 KiB); a multiple of ``word_bytes * n_banks``, at most
        ``2**ADDR_WIDTH`` words.
    word_bytes : int
        Word width in bytes, a power of two (default 8).
    n_banks : int
        Number of banks, a power of two (default 2).
    read_words : int
        R, words a read on ``rw`` returns, 1 .. ``n_banks`` (default 1).
    rw_latency : int
        L of ``rw`` (`SramSignature.latency`): 1 (default), 2 or 3 cycles.

    Raises
    ------
    ValueError
        If `word_bytes` or `n_banks` is not a positive power of two, `size_bytes` is not a
        positive multiple of ``word_bytes * n_banks`` or exceeds ``2**ADDR_WIDTH`` words,
        `read_words` is not in ``1 .. n_banks``, or `rw_latency` is not 1, 2 or 3.

    Members
    -------
    r : ``In(SramReadSignature(word_bytes=word_bytes))``
        Read port (the matrix unit's: weights, activations, KV rows).
    rw : ``In(SramSignature(word_bytes=word_bytes, read_words=read_words, latency=rw_latency))``
        Read/write port (everything else, through an :class:`SramArbiter`).
    """

    def __init__(self, *, size_bytes=32768, word_bytes=8, n_banks=2, read_words=1,
                 rw_latency=1):
        if not isinstance(word_bytes, int) or word_bytes <= 0 or word_bytes & (word_bytes - 1):
            raise ValueError(f"word_bytes must be a positive power of two, not {word_bytes!r}")
        if not isinstance(n_banks, int) or n_banks <= 0 or n_banks & (n_banks - 1):
            raise ValueError(f"n_banks must be a positive power of two, not {n_banks!r}")
        if (not isinstance(size_bytes, int) or size_bytes <= 0
                or size_bytes % (word_bytes * n_banks)):
            raise ValueError(f"size_bytes must be a positive multiple of word_bytes * n_banks "
                             f"= {word_bytes * n_banks}, not {size_bytes!r}")
        if size_bytes // word_bytes > 2 ** ADDR_WIDTH:
            raise ValueError(f"size_bytes must be at most {2 ** ADDR_WIDTH * word_bytes}, "
                             f"not {size_bytes}")
        if not isinstance(read_words, int) or not 1 <= read_words <= n_banks:
            raise ValueError(f"read_words must be an integer from 1 to n_banks = {n_banks}, "
                             f"not {read_words!r}")
        self._size_bytes = size_bytes
        self._word_bytes = word_bytes
        self._n_banks = n_banks
        self._read_words = read_words
        # The banks' contents, made here rather than in `elaborate` so that a simulation
        # testbench can reach them (`word_rows`); named as the memories were before, so
        # the generated Verilog is unchanged.
        self._bank_data = []
        for _ in range(n_banks):
            data = MemoryData(shape=unsigned(8 * word_bytes),
                              depth=size_bytes // word_bytes // n_banks, init=[])
            data.name = "mem"
            self._bank_data.append(data)
        super().__init__({
            "r": In(SramReadSignature(word_bytes=word_bytes)),
            "rw": In(SramSignature(word_bytes=word_bytes, read_words=read_words,
                                   latency=rw_latency)),
        })

    @property
    def size_bytes(self):
        """Capacity in bytes."""
        return self._size_bytes

    @property
    def word_bytes(self):
        """Word width in bytes."""
        return self._word_bytes

    @property
    def n_banks(self):
        """Number of banks."""
        return self._n_banks

    @property
    def read_words(self):
        """R, words a read on ``rw`` returns."""
        return self._read_words

    @property
    def depth(self):
        """Capacity in words; valid addresses are ``0 .. depth - 1``."""
        return self._size_bytes // self._word_bytes

    def word_rows(self, lo: int, hi: int) -> list:
        """Return the bank rows that hold words ``lo .. hi - 1``, in word order.

        Each row is a ``MemoryData`` row (``8 * word_bytes`` bits, unsigned) that Amaranth's
        simulator reads and writes directly, without a port cycle: ``ctx.get(row)``,
        ``ctx.set(row, word)`` (RFC 62).  A simulation testbench's back door to the
        contents; word ``a`` is row ``a // n_banks`` of bank ``a % n_banks``.

        Raises
        ------
        ValueError
            If ``lo .. hi - 1`` is not within ``0 .. depth - 1``, or ``lo > hi``.
        """
        if lo > hi:
            raise ValueError(f"words {lo} .. {hi - 1}: the range is reversed (lo > hi)")
        if lo < 0 or hi > self.depth:
            raise ValueError(f"words {lo} .. {hi - 1} are not within 0 .. {self.depth - 1}")
        nb = self.n_banks
        return [self._bank_data[a % nb][a // nb] for a in range(lo, hi)]

    def elaborate(self, platform):
        m = Module()
        width = 8 * self.word_bytes
        nb, R = self.n_banks, self.read_words
        bank_bits = exact_log2(nb)
        bank_depth = self.depth // nb
        row_bits = ceil_log2(bank_depth)

        L = self.rw.signature.latency

        def split(addr):
            return addr[:bank_bits], addr[bank_bits:][:row_bits]

        # the rw request as the banks see it: registered once when L > 1 (rw.ready stays 1,
        # so every request is granted the cycle it is made and the register never stalls)
        rq = self.rw
        if L > 1:
            rq = SimpleNamespace(
                en=Signal(name="rwq_en"), we=Signal(name="rwq_we"),
                addr=Signal(ADDR_WIDTH, name="rwq_addr"),
                wmask=Signal(self.word_bytes, name="rwq_wmask", reset_less=True),
                wdata=Signal(width, name="rwq_wdata", reset_less=True))
            m.d.sync += [getattr(rq, k).eq(getattr(self.rw, k))
                         for k in ("en", "we", "addr", "wmask", "wdata")]
        r_bank, r_row = split(self.r.addr)
        rw_bank, rw_row = split(rq.addr)
        r_ok = self.r.addr < self.depth
        rw_ok = rq.addr < self.depth
        rw_read = rq.en & ~rq.we

        # Wide read (R > 1): word k of a read is word addr + k, in bank (bank + k) % nb; bank b
        # serves word k = (b - bank) % nb when k < R, at row + 1 when b < bank (the word is
        # in the next row).  Word k is in range when addr + k < depth: addr's row is below
        # the last (b < bank) or addr itself is in range (b > bank; the banks share rows).
        if R > 1:
            rw_row1 = Signal(row_bits)
            m.d.comb += rw_row1.eq(rw_row + 1)
            rw_full_row = rq.addr[bank_bits:]
            rw_ok1 = rw_full_row < bank_depth - 1       # addr's row + 1 is a row of the SRAM

        # Which bank answers, and whether the last request was refused; both are updated
        # only by a request, so the output word holds while the port is idle.
        r_sel = Signal(range(nb))
        r_zero = Signal()
        rw_sel = Signal(range(nb))
        rw_zero = Signal(R)         # word k of the last read on rw was out of range
        with m.If(self.r.en):
            m.d.sync += [r_sel.eq(r_bank), r_zero.eq(~r_ok)]
        with m.If(rw_read):
            m.d.sync += [rw_sel.eq(rw_bank), rw_zero[0].eq(~rw_ok)]
        rw_error = Signal()
        m.d.sync += [
            self.r.error.eq(self.r.en & ~r_ok),
            rw_error.eq(rq.en & ~rw_ok),
        ]
        if L > 2:           # (a cycle more, with the read data)
            rw_error_q = Signal()
            m.d.sync += rw_error_q.eq(rw_error)
            rw_error = rw_error_q
        m.d.comb += self.rw.error.eq(rw_error)
        m.d.comb += self.rw.ready.eq(1)

        r_words = []
        rw_words = []
        for b in range(nb):
            mem = memory.Memory(data=self._bank_data[b])
            m.submodules[f"bank{b}"] = mem
            wp = mem.write_port(granularity=8)
            rwp = mem.read_port()
            # Transparent for the write port: a block RAM has no defined cross-port
            # read-during-write, so an old-word read here made Yosys build two copies.
            rp = mem.read_port(transparent_for=(wp,))
            here_r = (r_bank == b) & r_ok
            here_rw = (rw_bank == b) & rw_ok
            if R > 1:
                # bank b holds word k = (b - bank) % nb of the read; it reads when k < R
                k_of = Signal(range(nb), name=f"rw_k{b}")
                m.d.comb += k_of.eq(b - rw_bank)        # modulo 2**bank_bits
                after = rw_bank > b                     # the word is in the next row
                read_b = (k_of < R) & Mux(after, rw_ok1, rw_ok)
                rw_addr_b = Mux(after, rw_row1, rw_row)
            else:
                read_b = here_rw
                rw_addr_b = rw_row
            m.d.comb += [
                rp.addr.eq(r_row),
                rp.en.eq(self.r.en & here_r),
                rwp.addr.eq(rw_addr_b),
                rwp.en.eq(rw_read & read_b),
                # the write port shares the read port's address (one read/write port of
                # a true dual-port block RAM, not a second copy): a write goes to bank
                # `rw_bank`, whose rw_addr_b is rw_row
                wp.addr.eq(rw_addr_b),
                wp.data.eq(rq.wdata),
                wp.en.eq(Mux(rq.en & rq.we & here_rw, rq.wmask, 0)),
            ]
            r_words.append(rp.data)
            if L > 2:       # the block RAM's output register
                q = Signal(width, name=f"rw_dq{b}", reset_less=True)
                m.d.sync += q.eq(rwp.data)
                rw_words.append(q)
            else:
                rw_words.append(rwp.data)
        if R > 1:
            # word k >= 1 is out of range when addr + k >= depth: addr's row is the last and
            # its bank + k wraps past the last bank, or addr itself is out of range
            last_row = ~rw_ok1
            with m.If(rw_read):
                for k in range(1, R):
                    m.d.sync += rw_zero[k].eq(~rw_ok | (last_row & (rw_bank + k >= nb)))

        if L > 2:           # the word's bank and range flags follow it through the register
            rw_sel_q = Signal.like(rw_sel)
            rw_zero_q = Signal.like(rw_zero)
            m.d.sync += [rw_sel_q.eq(rw_sel), rw_zero_q.eq(rw_zero)]
            rw_sel, rw_zero = rw_sel_q, rw_zero_q
        m.d.comb += self.r.data.eq(Mux(r_zero, 0, Array(r_words)[r_sel]))
        rw_data = []
        for k in range(R):
            sel_k = rw_sel
            if k:
                sel_k = Signal(range(nb), name=f"rw_sel{k}")
                m.d.comb += sel_k.eq(rw_sel + k)        # modulo 2**bank_bits
            rw_data.append(Mux(rw_zero[k], 0, Array(rw_words)[sel_k]))
        m.d.comb += self.rw.rdata.eq(Cat(*rw_data))
        return m


class SramArbiter(wiring.Component):
    """Share one read/write SRAM port between ``n`` initiators, round-robin.

    Each cycle the arbiter grants at most one requesting initiator, the first at or after
    the one following the last granted (so no initiator waits more than ``n - 1`` grants),
    forwards its request to ``o`` and raises its ``ready`` with ``o.ready``.  ``rdata`` goes
    to every initiator (each knows when its read was granted); ``error`` goes only to the
    initiator granted L cycles before (`SramSignature.latency`, ``latency``: the ports'
    and the target's).  No added latency: a granted read still returns its word L cycles
    later.  With ``read_words`` R > 1 every port is wide
    (``rdata`` carries the R words of a read, as ``Sram.rw`` returns them); a one-word
    initiator is connected with :func:`connect_narrow` and uses word 0.

    Parameters
    ----------
    n : int
        Number of initiators (at least 1).
    word_bytes : int
        Word width in bytes.
    read_words : int
        R, words a read returns (default 1).
    latency : int
        L of every port (default 1).

    Raises
    ------
    ValueError
        If `n` is not a positive integer, or as `SramSignature` (`read_words`, `latency`).

    Members
    -------
    i : ``In(SramSignature(...)).array(n)``
        Initiator-facing ports (``word_bytes``, ``read_words``, ``latency`` as given).
    o : ``Out(SramSignature(...))``
        The shared port, to the SRAM.
    """

    def __init__(self, n, *, word_bytes=8, read_words=1, latency=1):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, not {n!r}")
        self._n = n
        sig = SramSignature(word_bytes=word_bytes, read_words=read_words, latency=latency)
        super().__init__({
            "i": In(sig).array(n),
            "o": Out(sig),
        })

    @property
    def n(self):
        """Number of initiators."""
        return self._n

    def elaborate(self, platform):
        m = Module()
        n = self.n
        req = Cat(p.en for p in self.i)
        last = Signal(range(n), init=n - 1)
        winner = Signal(range(n))
        err_to = Signal(range(n))

        with m.Switch(last):
            for prev in range(n):
                with m.Case(prev):
                    # Later assignments win, so walk the priority order backwards.
                    for k in reversed(range(n)):
                        idx = (prev + 1 + k) % n
                        with m.If(req[idx]):
                            m.d.comb += winner.eq(idx)

        with m.Switch(winner):
            for idx, p in enumerate(self.i):
                with m.Case(idx):
                    m.d.comb += [
                        self.o.en.eq(p.en),
                        self.o.we.eq(p.we),
                        self.o.addr.eq(p.addr),
                        self.o.wmask.eq(p.wmask),
                        self.o.wdata.eq(p.wdata),
                    ]
        # an error comes L cycles after its grant: the winner follows it down a delay line
        err_at = err_to
        for k in range(1, self.o.signature.latency):
            later = Signal(range(n), name=f"err_to{k}")
            m.d.sync += later.eq(err_at)
            err_at = later
        for idx, p in enumerate(self.i):
            m.d.comb += [
                p.ready.eq(self.o.ready & req.any() & (winner == idx)),
                p.rdata.eq(self.o.rdata),
                p.error.eq(self.o.error & (err_at == idx)),
            ]
        with m.If(self.o.en & self.o.ready):
            m.d.sync += [last.eq(winner), err_to.eq(winner)]
        return m
