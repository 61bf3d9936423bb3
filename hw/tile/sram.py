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
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

__all__ = ["ADDR_WIDTH", "SramReadSignature", "SramSignature", "Sram", "SramArbiter"]

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

    Parameters
    ----------
    word_bytes : int
        Word width in bytes (also the width of ``wmask``).

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
    rdata : ``In(8 * word_bytes)``
        Read word, valid in the cycle after a granted read.
    error : ``In(1)``
        One-cycle pulse in the cycle after a granted request with an out-of-range address.
    """

    def __init__(self, *, word_bytes=8):
        self._word_bytes = word_bytes
        super().__init__({
            "en": Out(1),
            "we": Out(1),
            "addr": Out(ADDR_WIDTH),
            "wmask": Out(word_bytes),
            "wdata": Out(8 * word_bytes),
            "ready": In(1),
            "rdata": In(8 * word_bytes),
            "error": In(1),
        })

    def __repr__(self):
        return f"SramSignature(word_bytes={self.word_bytes})"


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
    smaller macros on an ASIC) and the hook for a later wide read of ``n_banks`` words.

    Latency: 1 cycle on both ports.  Transparency: ``r`` is transparent for ``rw``'s
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

    Members
    -------
    r : ``In(SramReadSignature(word_bytes=word_bytes))``
        Read port (the matrix unit's: weights, activations, KV rows).
    rw : ``In(SramSignature(word_bytes=word_bytes))``
        Read/write port (everything else, through an :class:`SramArbiter`).
    """

    def __init__(self, *, size_bytes=32768, word_bytes=8, n_banks=2):
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
        self._size_bytes = size_bytes
        self._word_bytes = word_bytes
        self._n_banks = n_banks
        super().__init__({
            "r": In(SramReadSignature(word_bytes=word_bytes)),
            "rw": In(SramSignature(word_bytes=word_bytes)),
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
    def depth(self):
        """Capacity in words; valid addresses are ``0 .. depth - 1``."""
        return self._size_bytes // self._word_bytes

    def elaborate(self, platform):
        m = Module()
        width = 8 * self.word_bytes
        bank_bits = exact_log2(self.n_banks)
        bank_depth = self.depth // self.n_banks

        def split(addr):
            return addr[:bank_bits], addr[bank_bits:][:ceil_log2(bank_depth)]

        r_bank, r_row = split(self.r.addr)
        rw_bank, rw_row = split(self.rw.addr)
        r_ok = self.r.addr < self.depth
        rw_ok = self.rw.addr < self.depth

        # Which bank answers, and whether the last request was refused; both are updated
        # only by a request, so the output word holds while the port is idle.
        r_sel = Signal(range(self.n_banks))
        r_zero = Signal()
        rw_sel = Signal(range(self.n_banks))
        rw_zero = Signal()
        with m.If(self.r.en):
            m.d.sync += [r_sel.eq(r_bank), r_zero.eq(~r_ok)]
        with m.If(self.rw.en & ~self.rw.we):
            m.d.sync += [rw_sel.eq(rw_bank), rw_zero.eq(~rw_ok)]
        m.d.sync += [
            self.r.error.eq(self.r.en & ~r_ok),
            self.rw.error.eq(self.rw.en & ~rw_ok),
        ]
        m.d.comb += self.rw.ready.eq(1)

        r_words = []
        rw_words = []
        for b in range(self.n_banks):
            mem = memory.Memory(shape=unsigned(width), depth=bank_depth, init=[])
            m.submodules[f"bank{b}"] = mem
            wp = mem.write_port(granularity=8)
            rwp = mem.read_port()
            # Transparent for the write port: a block RAM has no defined cross-port
            # read-during-write, so an old-word read here made Yosys build two copies.
            rp = mem.read_port(transparent_for=(wp,))
            here_r = (r_bank == b) & r_ok
            here_rw = (rw_bank == b) & rw_ok
            m.d.comb += [
                rp.addr.eq(r_row),
                rp.en.eq(self.r.en & here_r),
                rwp.addr.eq(rw_row),
                rwp.en.eq(self.rw.en & ~self.rw.we & here_rw),
                wp.addr.eq(rw_row),
                wp.data.eq(self.rw.wdata),
                wp.en.eq(Mux(self.rw.en & self.rw.we & here_rw, self.rw.wmask, 0)),
            ]
            r_words.append(rp.data)
            rw_words.append(rwp.data)

        m.d.comb += [
            self.r.data.eq(Mux(r_zero, 0, Array(r_words)[r_sel])),
            self.rw.rdata.eq(Mux(rw_zero, 0, Array(rw_words)[rw_sel])),
        ]
        return m


class SramArbiter(wiring.Component):
    """Share one read/write SRAM port between ``n`` initiators, round-robin.

    Each cycle the arbiter grants at most one requesting initiator, the first at or after
    the one following the last granted (so no initiator waits more than ``n - 1`` grants),
    forwards its request to ``o`` and raises its ``ready`` with ``o.ready``.  ``rdata`` goes
    to every initiator (each knows when its read was granted); ``error`` goes only to the
    initiator granted in the previous cycle.  No added latency: a granted read still
    returns its word in the next cycle.

    Parameters
    ----------
    n : int
        Number of initiators (at least 1).
    word_bytes : int
        Word width in bytes.

    Members
    -------
    i : ``In(SramSignature(word_bytes=word_bytes)).array(n)``
        Initiator-facing ports.
    o : ``Out(SramSignature(word_bytes=word_bytes))``
        The shared port, to the SRAM.
    """

    def __init__(self, n, *, word_bytes=8):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, not {n!r}")
        self._n = n
        super().__init__({
            "i": In(SramSignature(word_bytes=word_bytes)).array(n),
            "o": Out(SramSignature(word_bytes=word_bytes)),
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
        for idx, p in enumerate(self.i):
            m.d.comb += [
                p.ready.eq(self.o.ready & req.any() & (winner == idx)),
                p.rdata.eq(self.o.rdata),
                p.error.eq(self.o.error & (err_to == idx)),
            ]
        with m.If(self.o.en & self.o.ready):
            m.d.sync += [last.eq(winner), err_to.eq(winner)]
        return m
