"""The tile network interface: the tile's end of the network-on-chip.

It turns arriving packets into SRAM writes, counter bumps, instruction-memory writes,
control-register writes and read responses, and turns the controller's ``SEND`` and ``DONE``
commands into packets.  It owns the tile's counters (the semaphores of ``SEND`` / ``WAIT``).
``docs/tile.md`` ("Network interface") gives the protocol, the control-register map and the
reasons; the packet format is :mod:`chipotle.hw.noc.packet`.

Members
-------
NetifConfig
    Elaboration parameters (NoC parameters, position and size of the mesh, SRAM and
    instruction-memory sizes, counters).
Reg
    The control-register map (``CONTROL`` packet ``addr`` / register read ``addr``).
COUNTER_BASE, PERF_BASE, IMEM_BASE
    Bases of the counter, controller-performance and instruction-memory windows.
NetError
    Bits of the sticky error-flag register.
NetOp, NetCommand, NetCompletion, WaitRequest, ImemWrite, Rect
    Command, completion, wait and instruction-memory formats of the controller interface.
read_request_layout
    Layout of the payload word of an ``SRAM_READ`` packet.
NetworkInterface
    The component.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)


import enum as py_enum
from dataclasses import dataclass, field

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out, connect, flipped
from amaranth.utils import ceil_log2, exact_log2

from chipotle.isa.core import INSTR_BITS, ErrorCode

from ..noc.packet import DEFAULT, NocConfig, PacketType
from .kvstore import KvParams
from .sram import ADDR_WIDTH, SramArbiter, SramSignature

__all__ = [
    "NetifConfig", "Reg", "KV_REGS", "COUNTER_BASE", "PERF_BASE", "IMEM_BASE", "NetError",
    "NetOp", "Rect", "NetCommand", "NetCompletion", "WaitRequest", "ImemWrite",
    "read_request_layout", "NetworkInterface",
]


# -- register map ----------------------------------------------------------------------------

class Reg(py_enum.IntEnum):
    """Control registers of a tile, by number (the ``addr`` of a ``CONTROL`` packet).

    Writes come in ``CONTROL`` packets (one payload word per register, consecutive
    registers from ``addr``); reads are ``SRAM_READ`` packets with ``space = 1`` (one
    response word per register, zero-extended).  Registers are 32 bits unless said.
    """

    #: R: ``x | y << 8 | width << 16 | height << 24`` (the tile and the mesh).
    ID = 0x00
    #: W: start the controller at PC ``payload[0:16]`` (offered on ``o_start``).
    START = 0x01
    #: W: bit 0 resets the controller (``o_reset``), bit 1 clears the counters, bit 2
    #: clears the error flags, the error count and the interface's performance counters
    #: (in the cycle after the word; that cycle's own events, which follow the word, are kept).
    RESET = 0x02
    #: R: the controller's status word (``i_status``; its layout is the controller's).
    STATUS = 0x03
    #: R: sticky :class:`NetError` flags.
    ERRORS = 0x04
    #: R: number of cycles in which an error was flagged (saturating at 2**16 - 1): events of
    #: one cycle count once, and each word dropped past a packet's ``length`` is a cycle.
    ERROR_COUNT = 0x05
    #: R: the NoC's dropped-packet counter (``i_noc_errors``, from the mesh).
    NOC_ERRORS = 0x06
    #: The register a tile's ``DONE`` packet writes at the host (payload ``code``); a tile
    #: refuses writes to it (``BAD_REG``).
    DOORBELL = 0x07
    #: R: flits injected into the NoC (heads included).
    FLITS_SENT = 0x08
    #: R: flits taken from the NoC (heads included, dropped flits included).
    FLITS_RECEIVED = 0x09
    #: R: SRAM words written by arriving packets.
    WORDS_WRITTEN = 0x0A
    #: R: SRAM words read for SENDs and read responses.
    WORDS_READ = 0x0B
    #: R: cycles a flit was offered to the NoC and not taken (network stalls).
    NET_STALLS = 0x0C
    #: R: commands (SEND and DONE) completed, refused ones included.
    COMMANDS = 0x0D
    #: R/W: KV layout, word address of the first block (:class:`KvParams` ``base``, 16 bits).
    #: The five KV layout registers drive ``kv_layout``; they are cleared only by a hard
    #: reset (a host RESET keeps them, like the SRAM).
    KV_BASE = 0x10
    #: R/W: KV layout, layers held (9 bits).
    KV_LAYERS = 0x11
    #: R/W: KV layout, KV heads per layer held (9 bits).
    KV_HEADS = 0x12
    #: R/W: KV layout, elements per K or V vector (16 bits).
    KV_HEAD_SIZE = 0x13
    #: R/W: KV layout, positions per (layer, head) (16 bits).
    KV_MAX_POS = 0x14
    #: R: positions per (layer, head) the KV store accepts (``i_kv_capacity``): ``KV_MAX_POS``,
    #: or 0 when a layout field is 0 or the map reaches past the SRAM.
    KV_CAPACITY = 0x15


#: The KV layout registers in :class:`KvParams` field order (``KvLayout.registers()``).
KV_REGS = (Reg.KV_BASE, Reg.KV_LAYERS, Reg.KV_HEADS, Reg.KV_HEAD_SIZE, Reg.KV_MAX_POS)
_KV_FIELDS = ("base", "n_layers", "n_kv_heads", "head_size", "max_pos")


#: ``PERF_BASE + k`` reads ``i_perf[k]`` (the controller's performance counters).
PERF_BASE = 0x20
#: ``COUNTER_BASE + c`` reads counter ``c``; a write adds its ``payload[0:counter_width]``.
COUNTER_BASE = 0x100
#: A ``CONTROL`` packet with ``addr >= IMEM_BASE`` writes instructions from index
#: ``addr - IMEM_BASE`` on, ``ceil(128 / payload_width)`` payload words per instruction,
#: least significant first.
IMEM_BASE = 0x10000
#: Bits of a *write-and-bump* ``CONTROL`` address: the flag `BUMP_WRITE`, the counter in bits
#: ``[ADDR_WIDTH, ADDR_WIDTH + 8)`` and the first SRAM word address in ``[0, ADDR_WIDTH)``.
BUMP_WRITE_BITS = ADDR_WIDTH + 8 + 1
#: Flag of a *write-and-bump* ``CONTROL`` packet (bit 24 of ``addr``, above the instruction
#: memory's window): its payload words are written to SRAM like an ``SRAM_WRITE``'s and,
#: once the last one is written, the counter is bumped by 1.  A SEND's last data packet
#: (`bump_write_addr`), so the bump costs no packet of its own.
BUMP_WRITE = 1 << (BUMP_WRITE_BITS - 1)


def bump_write_addr(counter: int, word_addr: int) -> int:
    """Return the ``addr`` of a write-and-bump ``CONTROL`` head (see `BUMP_WRITE`).

    Raises
    ------
    ValueError
        If ``counter`` is not in ``0 .. 255`` or ``word_addr`` not in ``0 .. 2**ADDR_WIDTH - 1``.
    """
    if not 0 <= counter < 256:
        raise ValueError(f"`counter` must be in 0 .. 255, not {counter}")
    if not 0 <= word_addr < 1 << ADDR_WIDTH:
        raise ValueError(f"`word_addr` must be in 0 .. {(1 << ADDR_WIDTH) - 1}, not {word_addr}")
    return BUMP_WRITE | counter << ADDR_WIDTH | word_addr


class NetError(py_enum.IntFlag):
    """Bits of the sticky error-flag register (:attr:`Reg.ERRORS`, port ``errors``)."""

    #: A packet of a reserved type arrived; consumed, nothing done.
    BAD_TYPE = 0x01
    #: An SRAM write or read reaches past the SRAM end: nothing written (the packet is
    #: consumed), or an empty read response (``length`` 0) is sent.
    SRAM_RANGE = 0x02
    #: A packet's payload is longer or shorter than its ``length`` (the ``last`` flag
    #: decides where it ends; excess words are dropped), or an ``SRAM_READ`` has no payload.
    #: Not checked on a packet refused at its head (``SRAM_RANGE`` on a write, ``IMEM_RANGE``,
    #: ``BAD_TYPE``: drained whole), nor on a head-only packet (the routers drop a head-only
    #: packet whose ``length`` is not 0 before it reaches a tile).
    BAD_LENGTH = 0x04
    #: A register write or read names no register, or a counter that does not exist.
    BAD_REG = 0x08
    #: An instruction-memory write past ``imem_words`` or not of whole instructions:
    #: consumed, nothing written.
    IMEM_RANGE = 0x10
    #: A counter saturated at ``2**counter_width - 1``.
    COUNTER_OVERFLOW = 0x20
    #: A SEND command failed its checks (its completion carries the ``ErrorCode``).
    SEND_REFUSED = 0x40
    #: The SRAM port flagged an access (cannot happen behind the range checks).
    SRAM_ERROR = 0x80


ERROR_BITS = 8


# -- controller interface formats ------------------------------------------------------------

class NetOp(enum.Enum, shape=1):
    """Command kind on ``i_cmd``."""

    #: The ``send`` instruction.
    SEND = 0
    #: The ``done`` instruction: a doorbell packet to the host.
    DONE = 1


class Rect(data.Struct):
    """A SEND rectangle, bit for bit the ISA's ``imm`` (``chipotle.isa.rect_encode``)."""

    x0: 4
    x1: 4
    y0: 4
    y1: 4


class NetCommand(data.Struct):
    """A command from the controller (stream ``i_cmd``; 126 bits).

    ``src``, ``dst`` and ``length`` are the resolved operands of ``send`` in **bytes**
    (``val(A)``, ``val(D)``, ``n``); ``counter`` is its ``c``; ``code`` is the ``imm`` of
    ``done``.  Fields a command does not use are ignored.
    """

    op: NetOp
    src: 32
    dst: 32
    length: 32
    rect: Rect
    counter: 17
    code: 16


class NetCompletion(data.Struct):
    """The end of a command (stream ``o_cmd_done``): its kind and ``ErrorCode.NONE`` or why
    a SEND was refused (``COUNTER``, ``ROUTE``, ``ALIGN``, ``SRAM_RANGE``, in that order of
    checking, as ``chipotle.isasim``)."""

    op: NetOp
    error: ErrorCode


class WaitRequest(data.Struct):
    """A ``wait`` (stream ``i_wait``): accepted when counter ``counter`` holds at least
    ``need``, which is then subtracted in the same cycle."""

    counter: 8
    need: 32


class ImemWrite(data.Struct):
    """An instruction-memory write (stream ``o_imem``)."""

    addr: 16
    data: INSTR_BITS


def read_request_layout(noc: NocConfig) -> data.StructLayout:
    """Return the layout of the payload word of an ``SRAM_READ`` packet.

    ===============  ====================  ================================================
    field            width                 meaning
    ===============  ====================  ================================================
    ``count``        ``noc.length_width``  words to read (the response's ``length``)
    ``space``        1                     0: SRAM words from ``addr``; 1: registers
    ``resp_addr``    ``noc.addr_width``    ``addr`` of the ``READ_RESP`` head
    ===============  ====================  ================================================

    The response goes to the request's source (``src_x``, ``src_y``).
    """
    return data.StructLayout({
        "count": noc.length_width,
        "space": 1,
        "resp_addr": noc.addr_width,
    })


# -- configuration ---------------------------------------------------------------------------

@dataclass(frozen=True)
class NetifConfig:
    """Elaboration parameters of a :class:`NetworkInterface`.

    Attributes
    ----------
    x, y : int or None
        Position of the tile in the mesh (column, row); both None: read from the ports
        ``i_x`` / ``i_y`` instead (8 bits each), so that every tile of a mesh is the same
        module (``chipotle.hw.chip.chip_verilog`` generates it once).
    width, height : int
        Size of the mesh (a SEND rectangle must lie inside it).
    noc : NocConfig
        Network parameters; ``payload_width`` is the SRAM word (``8 * W``).
    sram_bytes : int
        SRAM capacity in bytes (every tile of the mesh has the same).
    imem_words : int
        Instruction-memory size in instructions.
    n_counters : int
        Counters (1 .. 256).
    counter_width : int
        Bits per counter (1 .. 32); counters saturate.
    n_perf : int
        Controller performance registers readable at ``PERF_BASE`` (1 .. 32).
    read_queue : int
        Read requests that may wait for the injection port (per tile) before the receive
        side stalls.
    fetch_depth : int
        Depth of the transmit side's word buffer (at least 2; at least ``sram_latency + 2``
        to fetch a word per cycle from the SRAM: the words in flight hold their room).
    sram_latency : int
        L of the ``sram`` port (`SramSignature.latency`): 1 (default), 2 or 3 cycles.
    """

    x: int | None = 0
    y: int | None = 0
    width: int = 1
    height: int = 1
    noc: NocConfig = field(default=DEFAULT)
    sram_bytes: int = 32768
    imem_words: int = 1024
    n_counters: int = 16
    counter_width: int = 16
    n_perf: int = 8
    read_queue: int = 2
    fetch_depth: int = 4
    sram_latency: int = 1

    def __post_init__(self):
        noc = self.noc
        noc.check_mesh(self.width, self.height)
        if (self.x is None) != (self.y is None):
            raise ValueError("`x` and `y` must both be integers, or both None (position "
                             "from the `i_x` / `i_y` ports)")
        if self.x is not None and not (
                isinstance(self.x, int) and 0 <= self.x < self.width
                and isinstance(self.y, int) and 0 <= self.y < self.height):
            raise ValueError(f"tile ({self.x}, {self.y}) must lie in the "
                             f"{self.width} x {self.height} mesh")
        if self.width > 16 or self.height > 16:
            raise ValueError(f"SEND rectangles have 4-bit coordinates: the mesh must be at "
                             f"most 16 x 16, not {self.width} x {self.height}")
        pw = noc.payload_width
        if pw % 8 or (pw // 8) & (pw // 8 - 1):
            raise ValueError(f"`noc.payload_width` must be 8 * W with W a power of two, "
                             f"not {pw}")
        if noc.addr_width < BUMP_WRITE_BITS:
            raise ValueError(f"the head's `addr` field must have at least {BUMP_WRITE_BITS} "
                             f"bits (word addresses, IMEM_BASE and the write-and-bump "
                             f"packets' counter and flag), not {noc.addr_width}")
        w = self.word_bytes
        if (not isinstance(self.sram_bytes, int) or self.sram_bytes <= 0
                or self.sram_bytes % w or self.sram_bytes // w > 2 ** ADDR_WIDTH):
            raise ValueError(f"`sram_bytes` must be a positive multiple of W = {w} of at most "
                             f"{2 ** ADDR_WIDTH} words, not {self.sram_bytes!r}")
        for name, lo, hi in (("imem_words", 1, 2 ** 16), ("n_counters", 1, 256),
                             ("counter_width", 1, 32), ("n_perf", 1, 32),
                             ("read_queue", 1, 64), ("fetch_depth", 2, 64),
                             ("sram_latency", 1, 3)):
            value = getattr(self, name)
            if not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"`{name}` must be an integer from {lo} to {hi}, "
                                 f"not {value!r}")

    @property
    def word_bytes(self) -> int:
        """W: bytes per SRAM word and per flit payload."""
        return self.noc.payload_width // 8

    @property
    def sram_words(self) -> int:
        """SRAM capacity in words."""
        return self.sram_bytes // self.word_bytes

    @property
    def flits_per_instr(self) -> int:
        """Payload words per instruction in an instruction-memory write."""
        return -(-INSTR_BITS // self.noc.payload_width)

    @property
    def mcast_payload(self) -> int:
        """Payload words of a multicast SRAM-write packet (``mcast_max_flits - 1``)."""
        return self.noc.mcast_max_flits - 1


# -- the component ---------------------------------------------------------------------------

class _Src(enum.Enum, shape=2):
    SRAM = 0
    REGS = 1
    IMM = 2


class NetworkInterface(wiring.Component):
    """The network interface of one tile.

    **Receive** (from ``i_noc``, the mesh's local output).  One packet at a time, in
    arrival order, the head's ``last``-delimited extent decides where a packet ends:

    * ``SRAM_WRITE`` / ``READ_RESP``: the payload is written to SRAM words ``addr ..
      addr + length - 1``, one word per cycle when the SRAM grants.  If that range passes
      the SRAM end nothing is written (``SRAM_RANGE``).  Payload words past ``length`` are
      dropped (``BAD_LENGTH``).
    * ``SRAM_READ``: the payload word (:func:`read_request_layout`) is queued; the transmit
      side answers with a ``READ_RESP`` to the source.  The receive side does not wait for
      the answer, so a tile keeps draining the network while its injection port is busy.
    * ``CONTROL``: payload word ``k`` is written to register ``addr + k`` (:class:`Reg`;
      ``COUNTER_BASE + c`` adds to counter ``c``), or, from ``IMEM_BASE`` on, assembled into
      instructions offered on ``o_imem``.

    **Transmit** (into ``o_noc``, the mesh's local input).  Between packets the transmit side
    serves, in this order, a queued read request, the next packet of the current SEND, a new
    command from ``i_cmd``.  A SEND of ``n`` bytes from byte ``src`` to byte ``dst`` of every
    tile of ``rect`` becomes packets of at most ``noc.max_length`` (unicast, a 1 x 1
    rectangle) or ``mcast_max_flits - 1`` (multicast) words: ``SRAM_WRITE`` packets, the last
    one a write-and-bump ``CONTROL`` packet (`BUMP_WRITE`) whose receiver bumps the counter
    once its last word is written; the NoC delivers the packets of one source to one
    destination in order, so each receiver's bump follows all its data.  A SEND of 0 bytes is
    one ``CONTROL`` packet writing 1 to ``COUNTER_BASE + counter``.
    ``done`` becomes a ``CONTROL`` packet to the host writing ``code`` to
    :attr:`Reg.DOORBELL`.  ``o_cmd_done`` offers the completion from the cycle after the
    command's last flit has been injected (or after a SEND is refused) until it is taken; the
    next command is accepted once it has been.  A SEND is checked (``COUNTER``, ``ROUTE``,
    ``ALIGN``, ``SRAM_RANGE``) in the cycle after it was accepted, from registers, beside
    the start of its first packet; a refused one completes from the cycle after that.

    **Counters.**  ``n_counters`` saturating counters.  In one cycle a counter may take an
    arriving bump and a ``wait`` together: ``new = min(old + bump, max) - need``, with the
    wait granted on ``old >= need``, so no arrival is lost or double-counted.

    Latency: an arriving payload word is written in the cycle it is taken; a SEND's head
    leaves 2 cycles after the command is accepted, its payload follows at one word per cycle
    while the SRAM grants and the NoC takes them, with one idle cycle between packets.

    Parameters
    ----------
    config : NetifConfig

    Raises
    ------
    TypeError
        If `config` is not a :class:`NetifConfig`.

    Members
    -------
    i_noc : ``In(stream.Signature(noc.flit_layout))``
        Flits delivered to the tile (connect the mesh's ``o_local[i]``).  Always drained.
    o_noc : ``Out(stream.Signature(noc.flit_layout))``
        Flits injected by the tile (connect to the mesh's ``i_local[i]``).
    sram : ``Out(SramSignature(word_bytes=W, latency=sram_latency))``
        The interface's SRAM port (receive and transmit sides share it round-robin).
    i_cmd : ``In(stream.Signature(NetCommand))``
        SEND and DONE commands; one is accepted at a time, when the previous has finished.
    o_cmd_done : ``Out(stream.Signature(NetCompletion))``
        One transfer per accepted command, once it has been fully injected (registered).
    i_wait : ``In(stream.Signature(WaitRequest))``
        WAIT: ``ready`` rises (combinationally from ``valid`` and the payload) in the cycle
        the counter holds at least ``need``; the subtraction happens at that edge.  A
        ``counter >= n_counters`` is never accepted (the controller checks ``COUNTER``).
    o_start : ``Out(stream.Signature(16))``
        Start PC written by the host (:attr:`Reg.START`); the receive side waits for it to
        be taken.
    o_reset : ``Out(1)``
        One-cycle pulse: the host reset the controller (:attr:`Reg.RESET` bit 0).  The
        interface then drops a pending ``o_cmd_done`` and the completion of the command in
        progress, and stops a SEND at its packet boundary (``docs/tile.md``, "Control
        registers").
    o_imem : ``Out(stream.Signature(ImemWrite))``
        Instruction-memory writes from the host; the receive side waits for each.
    i_status : ``In(32)``
        The controller's status word (read as :attr:`Reg.STATUS`).
    i_perf : ``In(32).array(n_perf)``
        The controller's performance counters (read at ``PERF_BASE + k``).
    i_noc_errors : ``In(noc.error_width)``
        The mesh's dropped-packet count (read as :attr:`Reg.NOC_ERRORS`).
    kv_layout : ``Out(KvParams)``
        The KV layout registers (:attr:`Reg.KV_BASE` .. :attr:`Reg.KV_MAX_POS`), to the KV
        store.
    i_kv_capacity : ``In(16)``
        The KV store's capacity (read as :attr:`Reg.KV_CAPACITY`).
    counters : ``Out(counter_width).array(n_counters)``
        Counter values.
    errors : ``Out(8)``
        Sticky :class:`NetError` flags.
    """

    def __init__(self, config: NetifConfig):
        if not isinstance(config, NetifConfig):
            raise TypeError(f"`config` must be a NetifConfig, not {config!r}")
        self._config = config
        flit = stream.Signature(config.noc.flit_layout)
        super().__init__({
            "i_noc": In(flit),
            "o_noc": Out(flit),
            "sram": Out(SramSignature(word_bytes=config.word_bytes,
                                      latency=config.sram_latency)),
            "i_cmd": In(stream.Signature(NetCommand)),
            "o_cmd_done": Out(stream.Signature(NetCompletion)),
            "i_wait": In(stream.Signature(WaitRequest)),
            "o_start": Out(stream.Signature(16)),
            "o_reset": Out(1),
            "o_imem": Out(stream.Signature(ImemWrite)),
            "i_status": In(32),
            "i_perf": In(32).array(config.n_perf),
            "i_noc_errors": In(config.noc.error_width),
            "kv_layout": Out(KvParams),
            "i_kv_capacity": In(16),
            "counters": Out(config.counter_width).array(config.n_counters),
            "errors": Out(ERROR_BITS),
            **({} if config.x is not None else {"i_x": In(8), "i_y": In(8)}),
        })

    @property
    def config(self) -> NetifConfig:
        """Elaboration parameters."""
        return self._config

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        noc = cfg.noc
        if cfg.x is None:
            pos_x, pos_y = self.i_x, self.i_y
        else:
            pos_x, pos_y = C(cfg.x, 8), C(cfg.y, 8)
        depth = cfg.sram_words
        n_cnt = cfg.n_counters
        cmax = (1 << cfg.counter_width) - 1
        log_w = exact_log2(cfg.word_bytes)

        m.submodules.arbiter = arbiter = SramArbiter(2, word_bytes=cfg.word_bytes,
                                                     latency=cfg.sram_latency)
        connect(m, arbiter.o, flipped(self.sram))
        rx_sram, tx_sram = arbiter.i[0], arbiter.i[1]

        rq_layout = read_request_layout(noc)
        rq_entry = data.StructLayout({
            "src_x": noc.coord_width, "src_y": noc.coord_width, "addr": noc.addr_width,
            "req": rq_layout,
        })
        m.submodules.read_queue = rq = SyncFIFO(width=rq_entry.size, depth=cfg.read_queue)
        rq_w = Signal(rq_entry)
        rq_r = Signal(rq_entry)
        m.d.comb += [rq.w_data.eq(rq_w), rq_r.eq(rq.r_data)]

        host_x, host_y = noc.host
        # Reads queued or being fetched: up to `read_queue` in the queue and one in the
        # transmit side.
        reads_pending = Signal(range(cfg.read_queue + 2))
        read_fetched = Signal()          # the transmit side has fetched a read's last word
        with m.If((rq.w_en & rq.w_rdy) & ~read_fetched):
            m.d.sync += reads_pending.eq(reads_pending + 1)
        with m.Elif(~(rq.w_en & rq.w_rdy) & read_fetched):
            m.d.sync += reads_pending.eq(reads_pending - 1)
        # Error strobes of this cycle, one signal per (side, flag): each is driven as a whole
        # (a partly driven vector would leave constant bits that Icarus never evaluates).
        strobes = {}

        def strobe(side, flag):
            if (side, flag) not in strobes:
                strobes[side, flag] = Signal(name=f"{side}_{flag.name.lower()}")
            return strobes[side, flag]
        clear_counters = Signal()        # registered strobes from Reg.RESET
        clear_errors = Signal()

        # Counter changes of this cycle.
        bump_en = Signal()
        bump_idx = Signal(range(n_cnt))
        bump_inc = Signal(cfg.counter_width)

        # -- receive ------------------------------------------------------------------------
        i_flit = self.i_noc.payload
        i_head = data.View(noc.head_layout, i_flit.data)
        h_type = Signal(3)
        h_len = Signal(noc.length_width)
        h_addr = Signal(noc.addr_width)
        h_src_x = Signal(noc.coord_width)
        h_src_y = Signal(noc.coord_width)
        h_bump = Signal()                 # write-and-bump: bump counter h_bump_c at the end
        h_bump_c = Signal(8)
        rx_k = Signal(noc.length_width)   # payload words taken, stops at h_len
        rx_over = Signal()                # the current word is past `length`
        rx_take = Signal()                # a flit moves this cycle
        m.d.comb += [
            rx_over.eq(rx_k >= h_len),
            rx_take.eq(self.i_noc.valid & self.i_noc.ready),
        ]
        fpi = cfg.flits_per_instr
        fpi_bits = exact_log2(fpi)
        ibuf = Signal(max(1, (fpi - 1) * noc.payload_width))

        def payload_step():
            # Common bookkeeping of a taken payload flit.
            with m.If(~rx_over):
                m.d.sync += rx_k.eq(rx_k + 1)
            with m.If(rx_over | (i_flit.last & (rx_k + 1 != h_len))):
                m.d.comb += strobe("rx", NetError.BAD_LENGTH).eq(1)

        # One-cycle strobes written by a Reg.RESET payload word (later assignments win).
        m.d.sync += [self.o_reset.eq(0), clear_counters.eq(0), clear_errors.eq(0)]

        with m.FSM(name="rx"):
            with m.State("Head"):
                # A host packet other than a read waits while a host read is still being
                # fetched, so that the read sees the SRAM and registers as they were when
                # it arrived (the host's packets take effect in order).
                from_host = (i_head.src_x == host_x) & (i_head.src_y == host_y)
                hold = from_host & (i_head.type != PacketType.SRAM_READ) & (reads_pending != 0)
                m.d.comb += self.i_noc.ready.eq(~hold)
                with m.If(self.i_noc.valid & ~hold):
                    m.d.sync += [
                        h_type.eq(i_head.type.as_value()),
                        h_len.eq(i_head.length),
                        h_addr.eq(i_head.addr),
                        h_src_x.eq(i_head.src_x),
                        h_src_y.eq(i_head.src_y),
                        h_bump.eq(0),
                        rx_k.eq(0),
                    ]
                    end = i_head.addr + i_head.length
                    bump_word = i_head.addr[:ADDR_WIDTH]
                    bump_c = i_head.addr[ADDR_WIDTH:ADDR_WIDTH + 8]
                    is_bump_write = i_head.addr[BUMP_WRITE_BITS - 1:] == 1
                    imem_idx = i_head.addr - IMEM_BASE
                    with m.Switch(i_head.type):
                        with m.Case(PacketType.SRAM_WRITE, PacketType.READ_RESP):
                            with m.If(end > depth):
                                m.d.comb += strobe("rx", NetError.SRAM_RANGE).eq(1)
                                with m.If(~i_flit.last):
                                    m.next = "Drain"
                            with m.Elif(~i_flit.last):
                                m.next = "Write"
                        with m.Case(PacketType.SRAM_READ):
                            with m.If(i_flit.last):
                                m.d.comb += strobe("rx", NetError.BAD_LENGTH).eq(1)
                            with m.Else():
                                m.next = "Read-Request"
                        with m.Case(PacketType.CONTROL):
                            with m.If(is_bump_write):
                                # write-and-bump: the words as an SRAM_WRITE, then the bump
                                m.d.sync += [h_addr.eq(bump_word), h_bump_c.eq(bump_c)]
                                with m.If((bump_word + i_head.length > depth)
                                          | (bump_c >= n_cnt)):
                                    m.d.comb += strobe("rx", NetError.SRAM_RANGE).eq(1)
                                    with m.If(~i_flit.last):
                                        m.next = "Drain"
                                with m.Elif(i_flit.last):
                                    m.d.comb += [bump_en.eq(1), bump_idx.eq(bump_c),
                                                 bump_inc.eq(1)]
                                with m.Else():
                                    m.d.sync += h_bump.eq(1)
                                    m.next = "Write"
                            with m.Elif(i_head.addr >= IMEM_BASE):
                                bad = ((imem_idx + (i_head.length >> fpi_bits) > cfg.imem_words)
                                       | (i_head.length[:fpi_bits] != 0 if fpi_bits else 0))
                                with m.If(bad):
                                    m.d.comb += strobe("rx", NetError.IMEM_RANGE).eq(1)
                                    with m.If(~i_flit.last):
                                        m.next = "Drain"
                                with m.Elif(~i_flit.last):
                                    m.next = "Imem"
                            with m.Elif(~i_flit.last):
                                m.next = "Control"
                        with m.Default():
                            m.d.comb += strobe("rx", NetError.BAD_TYPE).eq(1)
                            with m.If(~i_flit.last):
                                m.next = "Drain"

            with m.State("Write"):
                m.d.comb += [
                    rx_sram.en.eq(self.i_noc.valid & ~rx_over),
                    rx_sram.we.eq(1),
                    rx_sram.addr.eq(h_addr + rx_k),
                    rx_sram.wmask.eq(-1),
                    rx_sram.wdata.eq(i_flit.data),
                    self.i_noc.ready.eq(rx_sram.ready | rx_over),
                ]
                with m.If(rx_take):
                    payload_step()
                    with m.If(i_flit.last):
                        with m.If(h_bump):
                            m.d.comb += [bump_en.eq(1), bump_idx.eq(h_bump_c),
                                         bump_inc.eq(1)]
                        m.next = "Head"

            with m.State("Read-Request"):
                # The payload word describes the read; the first one is queued.
                first = rx_k == 0
                m.d.comb += [
                    rq_w.src_x.eq(h_src_x),
                    rq_w.src_y.eq(h_src_y),
                    rq_w.addr.eq(h_addr),
                    rq_w.req.eq(i_flit.data[:rq_layout.size]),
                    rq.w_en.eq(self.i_noc.valid & first),
                    self.i_noc.ready.eq(rq.w_rdy | ~first),
                ]
                with m.If(rx_take):
                    m.d.sync += rx_k.eq(1)
                    with m.If(~first):
                        m.d.comb += strobe("rx", NetError.BAD_LENGTH).eq(1)
                    with m.If(i_flit.last):
                        m.next = "Head"

            with m.State("Control"):
                reg = Signal(noc.addr_width)
                m.d.comb += reg.eq(h_addr + rx_k)
                is_start = (reg == Reg.START) & ~rx_over
                m.d.comb += [
                    self.o_start.valid.eq(self.i_noc.valid & is_start),
                    self.o_start.payload.eq(i_flit.data[:16]),
                    self.i_noc.ready.eq(Mux(is_start, self.o_start.ready, 1)),
                ]
                with m.If(rx_take):
                    payload_step()
                    with m.If(~rx_over):
                        with m.If(reg == Reg.RESET):
                            m.d.sync += [
                                self.o_reset.eq(i_flit.data[0]),
                                clear_counters.eq(i_flit.data[1]),
                                clear_errors.eq(i_flit.data[2]),
                            ]
                        with m.Elif((reg >= COUNTER_BASE) & (reg < COUNTER_BASE + n_cnt)):
                            m.d.comb += [
                                bump_en.eq(1),
                                bump_idx.eq(reg - COUNTER_BASE),
                                bump_inc.eq(i_flit.data),
                            ]
                        for kreg, fname in zip(KV_REGS, _KV_FIELDS, strict=True):
                            with m.Elif(reg == kreg):
                                m.d.sync += getattr(self.kv_layout, fname).eq(i_flit.data)
                        with m.Elif(~is_start):
                            m.d.comb += strobe("rx", NetError.BAD_REG).eq(1)
                    with m.If(i_flit.last):
                        m.next = "Head"

            with m.State("Imem"):
                piece = rx_k[:fpi_bits] if fpi_bits else C(0, 1)
                final = (piece == fpi - 1) & ~rx_over
                words = Cat(ibuf, i_flit.data) if fpi > 1 else i_flit.data
                m.d.comb += [
                    self.o_imem.valid.eq(self.i_noc.valid & final),
                    self.o_imem.payload.addr.eq(h_addr - IMEM_BASE + (rx_k >> fpi_bits)),
                    self.o_imem.payload.data.eq(words[-INSTR_BITS:] if fpi > 1 and
                                                fpi * noc.payload_width > INSTR_BITS
                                                else words),
                    self.i_noc.ready.eq(Mux(final, self.o_imem.ready, 1)),
                ]
                with m.If(rx_take):
                    payload_step()
                    if fpi > 1:
                        with m.If(~final & ~rx_over):
                            m.d.sync += ibuf.eq(Cat(ibuf[noc.payload_width:], i_flit.data))
                    with m.If(i_flit.last):
                        m.next = "Head"

            with m.State("Drain"):
                m.d.comb += self.i_noc.ready.eq(1)
                with m.If(rx_take & i_flit.last):
                    m.next = "Head"

        # -- counters -----------------------------------------------------------------------
        counters = [Signal(cfg.counter_width, name=f"counter{c}") for c in range(n_cnt)]
        wait = self.i_wait.payload
        wait_ok = Signal()
        # `need` above 2**counter_width - 1 is never granted: compare counter_width bits
        cw = cfg.counter_width
        m.d.comb += wait_ok.eq(self.i_wait.valid & (wait.counter < n_cnt)
                               & (Array(counters)[wait.counter[:ceil_log2(max(n_cnt, 2))]]
                                  >= wait.need[:cw])
                               & ~wait.need[cw:].any()
                               & ~clear_counters)
        m.d.comb += self.i_wait.ready.eq(wait_ok)
        overflow = Signal()
        # Each counter's bumped and unbumped next values are made side by side (its sum with
        # `bump_inc`, saturated, minus the grant; itself minus the grant) and `bump_en`
        # only selects: `bump_en` comes late (a write-and-bump's last word bumps when the
        # SRAM arbiter grants it), so it stays off the adders (an FPGA timing cut, one
        # subtracter more per counter).
        for c, cnt in enumerate(counters):
            hit = Signal(name=f"counter{c}_hit")
            total = Signal(cfg.counter_width + 1, name=f"counter{c}_sum")
            over = Signal(name=f"counter{c}_over")
            sat = Signal(cfg.counter_width, name=f"counter{c}_sat")
            m.d.comb += [
                hit.eq(bump_en & (bump_idx == c)),
                total.eq(cnt + bump_inc),
                over.eq(total > cmax),
                sat.eq(Mux(over, cmax, total)),
            ]
            with m.If(hit & over):
                m.d.comb += overflow.eq(1)
            sub = Mux(wait_ok & (wait.counter == c), wait.need[:cw], 0)
            with m.If(clear_counters):
                # the clear's cycle is the one after the RESET word: a bump in it comes after
                # the word, so it is the first one kept (no wait is granted in it)
                m.d.sync += cnt.eq(Mux(hit, bump_inc, 0))   # bump_inc <= cmax (its width)
            with m.Elif(hit):
                m.d.sync += cnt.eq(sat - sub)
            with m.Else():
                m.d.sync += cnt.eq(cnt - sub)
            m.d.comb += self.counters[c].eq(cnt)

        # -- transmit -----------------------------------------------------------------------
        t_head = Signal(noc.head_layout)
        t_src = Signal(_Src)
        t_imm = Signal(noc.payload_width)
        t_done = Signal()          # the packet ends a command
        t_read = Signal()          # the packet answers a read
        t_op = Signal(NetOp)
        f_addr = Signal(noc.addr_width + 1)   # next word / register to fetch
        f_left = Signal(noc.length_width)     # words still to fetch
        e_left = Signal(noc.length_width)     # payload flits still to emit
        inflight = Signal()                   # an SRAM read was granted last cycle

        s_active = Signal()
        s_src = Signal(ADDR_WIDTH + 1)
        s_dst = Signal(noc.addr_width)
        s_left = Signal(ADDR_WIDTH + 1)
        s_rect = Signal(Rect)
        s_mcast = Signal()
        s_counter = Signal(8)
        # A SEND is taken into registers and checked in the next cycle (an FPGA timing cut:
        # no path from the controller's operand adders through the range compares into the
        # transmit state); `s_chk` marks that cycle, `s_err` is the verdict (COUNTER, ROUTE,
        # ALIGN, SRAM_RANGE, in chipotle.isasim's order).
        s_chk = Signal()
        s_cmd = Signal(NetCommand)
        s_err = Signal(ErrorCode)
        with m.If(s_cmd.counter >= n_cnt):
            m.d.comb += s_err.eq(ErrorCode.COUNTER)
        with m.Elif((s_cmd.rect.x1 >= cfg.width) | (s_cmd.rect.y1 >= cfg.height)
                    | (s_cmd.rect.x0 > s_cmd.rect.x1) | (s_cmd.rect.y0 > s_cmd.rect.y1)):
            m.d.comb += s_err.eq(ErrorCode.ROUTE)
        with m.Elif((s_cmd.src | s_cmd.dst | s_cmd.length)[:log_w].any()
                    if log_w else C(0, 1)):
            m.d.comb += s_err.eq(ErrorCode.ALIGN)
        with m.Elif((s_cmd.src + s_cmd.length > cfg.sram_bytes)      # 33 bits: no wrap
                    | (s_cmd.dst + s_cmd.length > cfg.sram_bytes)):
            m.d.comb += s_err.eq(ErrorCode.SRAM_RANGE)

        m.submodules.fetch = fifo = SyncFIFO(width=noc.payload_width, depth=cfg.fetch_depth)

        o_flit = self.o_noc.payload
        tx_take = Signal()
        m.d.comb += tx_take.eq(self.o_noc.valid & self.o_noc.ready)

        cmd = self.i_cmd.payload
        complete = Signal()                   # a command ends this cycle
        complete_error = Signal(ErrorCode)
        max_len = noc.max_length

        def start_packet(type_, rect, mcast, length, addr, src, fetch_addr=0, imm=0,
                         done=0, read=0):
            m.d.sync += [
                t_read.eq(read),
                t_head.type.eq(type_),
                t_head.mcast.eq(mcast),
                t_head.x0.eq(rect[0]), t_head.x1.eq(rect[1]),
                t_head.y0.eq(rect[2]), t_head.y1.eq(rect[3]),
                t_head.src_x.eq(pos_x), t_head.src_y.eq(pos_y),
                t_head.length.eq(length),
                t_head.addr.eq(addr),
                t_src.eq(src),
                t_imm.eq(imm),
                t_done.eq(done),
                f_addr.eq(fetch_addr),
                f_left.eq(length),
                e_left.eq(length),
            ]
            m.next = "Head"

        with m.FSM(name="tx"):
            with m.State("Idle"):
                with m.If(rq.r_rdy):
                    m.d.comb += rq.r_en.eq(1)
                    req = rq_r.req
                    length = Signal(noc.length_width)
                    is_sram = ~req.space
                    with m.If(is_sram & (rq_r.addr + req.count > depth)):
                        m.d.comb += [length.eq(0), strobe("tx", NetError.SRAM_RANGE).eq(1)]
                    with m.Else():
                        m.d.comb += length.eq(req.count)
                    start_packet(PacketType.READ_RESP,
                                 (rq_r.src_x, rq_r.src_x, rq_r.src_y, rq_r.src_y), 0,
                                 length, req.resp_addr,
                                 Mux(is_sram, _Src.SRAM, _Src.REGS), fetch_addr=rq_r.addr,
                                 read=1)
                    with m.If(length == 0):
                        m.d.comb += read_fetched.eq(1)
                with m.Elif(s_active & s_chk & (s_err != ErrorCode.NONE)):
                    # refused: its first cycle after it was taken (see `s_chk`)
                    m.d.sync += [s_active.eq(0), s_chk.eq(0)]
                    m.d.comb += [
                        complete.eq(1),
                        complete_error.eq(s_err),
                        strobe("tx", NetError.SEND_REFUSED).eq(1),
                    ]
                with m.Elif(s_active):
                    m.d.sync += s_chk.eq(0)
                    rect = (s_rect.x0, s_rect.x1, s_rect.y0, s_rect.y1)
                    with m.If(s_left != 0):
                        per = Mux(s_mcast, cfg.mcast_payload, max_len)
                        n = Signal(noc.length_width)
                        m.d.comb += n.eq(Mux(s_left > per, per, s_left))
                        with m.If(s_left > per):
                            start_packet(PacketType.SRAM_WRITE, rect, s_mcast, n, s_dst,
                                         _Src.SRAM, fetch_addr=s_src)
                        with m.Else():
                            # the last data packet carries the counter bump
                            start_packet(PacketType.CONTROL, rect, s_mcast, n,
                                         Cat(s_dst[:ADDR_WIDTH], s_counter, C(1, 1)),
                                         _Src.SRAM, fetch_addr=s_src, done=1)
                            m.d.sync += s_active.eq(0)
                        m.d.sync += [
                            s_src.eq(s_src + n),
                            s_dst.eq(s_dst + n),
                            s_left.eq(s_left - n),
                        ]
                    with m.Else():
                        start_packet(PacketType.CONTROL, rect, s_mcast, 1,
                                     COUNTER_BASE + s_counter, _Src.IMM, imm=1, done=1)
                        m.d.sync += s_active.eq(0)
                with m.Elif(self.i_cmd.valid & ~self.o_cmd_done.valid):
                    m.d.comb += self.i_cmd.ready.eq(1)
                    m.d.sync += t_op.eq(cmd.op)
                    with m.If(cmd.op == NetOp.DONE):
                        start_packet(PacketType.CONTROL, (host_x, host_x, host_y, host_y), 0,
                                     1, Reg.DOORBELL, _Src.IMM, imm=cmd.code, done=1)
                    with m.Else():
                        # Taken into the s_ registers unchecked: the checks run in the next
                        # cycle on the registered command (`s_chk`), beside its first
                        # packet's start, so a SEND that passes them loses no cycle.
                        r = cmd.rect
                        m.d.sync += [
                            s_active.eq(1),
                            s_chk.eq(1),
                            s_cmd.eq(cmd),
                            s_src.eq(cmd.src[log_w:]),
                            s_dst.eq(cmd.dst[log_w:]),
                            s_left.eq(cmd.length[log_w:]),
                            s_rect.eq(r),
                            s_mcast.eq((r.x0 != r.x1) | (r.y0 != r.y1)),
                            s_counter.eq(cmd.counter),
                        ]

            with m.State("Head"):
                m.d.comb += [
                    self.o_noc.valid.eq(1),
                    o_flit.data.eq(t_head),
                    o_flit.last.eq(t_head.length == 0),
                ]
                with m.If(tx_take):
                    with m.If(t_head.length == 0):
                        m.next = "Idle"
                    with m.Else():
                        m.next = "Payload"

            with m.State("Payload"):
                m.d.comb += [
                    self.o_noc.valid.eq(fifo.r_rdy),
                    o_flit.data.eq(fifo.r_data),
                    o_flit.last.eq(e_left == 1),
                    fifo.r_en.eq(self.o_noc.ready),
                ]
                with m.If(tx_take):
                    m.d.sync += e_left.eq(e_left - 1)
                    with m.If(e_left == 1):
                        m.next = "Idle"

        # Completion of a command: its last flit moves.
        with m.If(tx_take & o_flit.last & t_done):
            m.d.comb += complete.eq(1)
        with m.If(self.o_cmd_done.ready):
            m.d.sync += self.o_cmd_done.valid.eq(0)
        with m.If(complete):
            m.d.sync += [
                self.o_cmd_done.valid.eq(1),
                self.o_cmd_done.payload.op.eq(Mux(self.i_cmd.ready, cmd.op, t_op)),
                self.o_cmd_done.payload.error.eq(complete_error),
            ]
        # The host reset the controller (`o_reset`, this cycle's pulse): the controller no
        # longer waits for a completion, so none is offered any more (one left pending would
        # hold `i_cmd` off for good: the interface takes a command only with no completion
        # pending), and a SEND in progress stops at its packet boundary.  The packet on the
        # wire is finished (a wormhole path, once opened, closes only with its last flit),
        # without a completion; a SEND's later packets, and the bump its last one carries,
        # are not sent.
        with m.If(self.o_reset):
            m.d.sync += [self.o_cmd_done.valid.eq(0), t_done.eq(0), s_active.eq(0),
                         s_chk.eq(0)]

        # -- error flags and the interface's performance registers -------------------------
        sram_err = Signal()
        m.d.comb += sram_err.eq(rx_sram.error | tx_sram.error)
        flags = Signal(ERROR_BITS)
        # (`flags` is assigned at the end, once every strobe exists.)
        err_count = Signal(16)
        perf = {
            Reg.FLITS_SENT: tx_take,
            Reg.FLITS_RECEIVED: rx_take,
            Reg.WORDS_WRITTEN: rx_sram.en & rx_sram.ready,
            Reg.WORDS_READ: tx_sram.en & tx_sram.ready,
            Reg.NET_STALLS: self.o_noc.valid & ~self.o_noc.ready,
            Reg.COMMANDS: complete,
        }
        perf_regs = {reg: Signal(32, name=reg.name.lower()) for reg in perf}
        with m.If(clear_errors):
            # The clear's cycle is the one after the RESET word was taken: its events come
            # after the word, so they are the first ones kept.
            m.d.sync += [self.errors.eq(flags), err_count.eq(flags != 0)]
            m.d.sync += [perf_regs[reg].eq(event) for reg, event in perf.items()]
        with m.Else():
            m.d.sync += self.errors.eq(self.errors | flags)
            with m.If((flags != 0) & (err_count != 0xFFFF)):
                m.d.sync += err_count.eq(err_count + 1)
            for reg, event in perf.items():
                with m.If(event):
                    m.d.sync += perf_regs[reg].eq(perf_regs[reg] + 1)

        # Fetcher: fills the word buffer from the SRAM, the registers or the immediate while
        # a packet is under way (its head may still be waiting).
        room = Signal()
        # a granted read's word lands L cycles later: `inflight` is the first cycle after
        # the grant, `landing` the last; the buffer keeps room for every word in flight
        landing, n_flight = inflight, inflight
        for k in range(2, cfg.sram_latency + 1):
            later = Signal(name=f"inflight{k}")
            m.d.sync += later.eq(landing)
            landing, n_flight = later, n_flight + later
        m.d.comb += room.eq(fifo.level + n_flight < cfg.fetch_depth)
        want = Signal()
        m.d.comb += want.eq((f_left != 0) & room)
        m.d.sync += inflight.eq(0)
        with m.Switch(t_src):
            with m.Case(_Src.SRAM):
                m.d.comb += [
                    tx_sram.en.eq(want),
                    tx_sram.addr.eq(f_addr),
                ]
                with m.If(want & tx_sram.ready):
                    m.d.sync += [inflight.eq(1), f_addr.eq(f_addr + 1), f_left.eq(f_left - 1)]
                    m.d.comb += read_fetched.eq(t_read & (f_left == 1))
            with m.Default():
                with m.If(want):
                    m.d.sync += [f_addr.eq(f_addr + 1), f_left.eq(f_left - 1)]
                    m.d.comb += read_fetched.eq(t_read & (f_left == 1))
        reg_word = Signal(32)
        bad_reg = Signal()
        with m.Switch(f_addr):
            ident = Cat(pos_x.as_unsigned()[:8], pos_y.as_unsigned()[:8],
                        C(cfg.width, 8), C(cfg.height, 8))
            with m.Case(Reg.ID):
                m.d.comb += reg_word.eq(ident)
            with m.Case(Reg.STATUS):
                m.d.comb += reg_word.eq(self.i_status)
            with m.Case(Reg.NOC_ERRORS):
                m.d.comb += reg_word.eq(self.i_noc_errors)
            with m.Case(Reg.ERRORS):
                m.d.comb += reg_word.eq(self.errors)
            with m.Case(Reg.ERROR_COUNT):
                m.d.comb += reg_word.eq(err_count)
            for kreg, fname in zip(KV_REGS, _KV_FIELDS, strict=True):
                with m.Case(kreg):
                    m.d.comb += reg_word.eq(getattr(self.kv_layout, fname))
            with m.Case(Reg.KV_CAPACITY):
                m.d.comb += reg_word.eq(self.i_kv_capacity)
            for reg, sig in perf_regs.items():
                with m.Case(reg):
                    m.d.comb += reg_word.eq(sig)
            for k in range(cfg.n_perf):
                with m.Case(PERF_BASE + k):
                    m.d.comb += reg_word.eq(self.i_perf[k])
            for c in range(n_cnt):
                with m.Case(COUNTER_BASE + c):
                    m.d.comb += reg_word.eq(counters[c])
            with m.Default():
                m.d.comb += bad_reg.eq(1)
        with m.If(want & (t_src == _Src.REGS) & bad_reg):
            m.d.comb += strobe("tx", NetError.BAD_REG).eq(1)
        m.d.comb += [
            fifo.w_en.eq(Mux(t_src == _Src.SRAM, landing, want)),
            fifo.w_data.eq(Mux(t_src == _Src.SRAM, tx_sram.rdata,
                               Mux(t_src == _Src.IMM, t_imm, reg_word))),
        ]
        m.d.comb += flags.eq(Cat(*(
            Cat(*(sig for (_, f), sig in strobes.items() if f == flag)).any()
            | (overflow if flag == NetError.COUNTER_OVERFLOW else 0)
            | (sram_err if flag == NetError.SRAM_ERROR else 0)
            for flag in NetError)))
        return m
