"""Reference model and packet builders of the network-interface benches (plain Python).

It follows ``docs/tile.md`` ("Network interface"), not the gateware.

Members
-------
Host packets: sram_write, sram_read, reg_read, control, counter_add, imem_write, start, reset
    Build the packets a host sends to a tile (re-exported from ``chipotle.driver.hostlink``,
    the host's one definition of them).
TileRef
    What one tile's network interface holds (SRAM words, counters, error flags,
    instruction memory, starts, the performance registers it can know) and how it answers
    a packet and a SEND or DONE command.
send_packets
    The packets a SEND command puts on the network (the packetisation rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chipotle.driver.hostlink import (  # noqa: F401  (re-exported for the benches)
    control,
    counter_add,
    imem_write,
    read_request_word,
    reg_read,
    reset,
    sram_read,
    sram_write,
    start,
)
from chipotle.hw.noc import HOST, Head, NocConfig, Packet, PacketType
from chipotle.hw.tile.kvstore import KvParams
from chipotle.hw.tile.netif import (
    BUMP_WRITE_BITS,
    COUNTER_BASE,
    IMEM_BASE,
    KV_REGS,
    NetError,
    NetifConfig,
    Reg,
    bump_write_addr,
)
from chipotle.hw.tile.sram import ADDR_WIDTH
from chipotle.isa import ErrorCode

__all__ = ["sram_write", "sram_read", "reg_read", "control", "counter_add", "imem_write",
           "start", "reset", "read_request_word", "TileRef", "send_packets", "send_check"]


def _uni(ptype, dst, addr, payload, cfg: NocConfig, src=HOST) -> Packet:
    head = Head.unicast(ptype, dst, src, addr=addr, length=len(payload), cfg=cfg)
    return Packet(head, tuple(payload))


def send_packets(ni: NetifConfig, src_xy, cmd: dict) -> list[Packet]:
    """Return the packets a well-formed SEND ``cmd`` puts on the network, in order.

    ``cmd`` has ``src``, ``dst``, ``length`` (bytes), ``rect`` ``(x0, x1, y0, y1)`` and
    ``counter``; the payload words are left out (``length`` says how many).
    """
    cfg = ni.noc
    w = ni.word_bytes
    x0, x1, y0, y1 = cmd["rect"]
    mcast = (x0, y0) != (x1, y1)
    per = ni.mcast_payload if mcast else cfg.max_length
    words, dst = cmd["length"] // w, cmd["dst"] // w
    out = []

    def head(ptype, addr, length):
        return Head(ptype, x0, y0, x1, y1, mcast, src_xy[0], src_xy[1], length, addr)

    if not words:
        return [Packet(head(PacketType.CONTROL, COUNTER_BASE + cmd["counter"], 1), (1,))]
    while words > per:
        out.append(Packet(head(PacketType.SRAM_WRITE, dst, per)))
        dst += per
        words -= per
    # the last data packet bumps the receivers' counter once its words are written
    out.append(Packet(head(PacketType.CONTROL, bump_write_addr(cmd["counter"], dst), words)))
    return out


def send_check(ni: NetifConfig, cmd: dict) -> ErrorCode:
    """Return the ``ErrorCode`` a SEND command is refused with (``NONE`` if accepted)."""
    x0, x1, y0, y1 = cmd["rect"]
    w = ni.word_bytes
    if cmd["counter"] >= ni.n_counters:
        return ErrorCode.COUNTER
    if x1 >= ni.width or y1 >= ni.height or x0 > x1 or y0 > y1:
        return ErrorCode.ROUTE
    if (cmd["src"] | cmd["dst"] | cmd["length"]) % w:
        return ErrorCode.ALIGN
    if (cmd["src"] + cmd["length"] > ni.sram_bytes
            or cmd["dst"] + cmd["length"] > ni.sram_bytes):
        return ErrorCode.SRAM_RANGE
    return ErrorCode.NONE


@dataclass
class TileRef:
    """The state of one tile's network interface, as the host and the controller see it.

    ``receive`` applies an arriving packet and returns the packets the tile answers with;
    ``send`` and ``done`` apply a command of the tile's controller and return the packets
    it injects.  The performance registers ``FLITS_RECEIVED``, ``WORDS_WRITTEN``,
    ``WORDS_READ`` and ``COMMANDS`` follow from those; ``FLITS_SENT`` and ``NET_STALLS``
    depend on the network's back-pressure, so a bench that reads them puts what it
    observed in ``extra``.
    """

    ni: NetifConfig
    perf: list = field(default_factory=list)      # i_perf constants
    status: int = 0
    sram: list = field(default=None)
    counters: list = field(default=None)
    errors: int = 0
    error_count: int = 0
    imem: dict = field(default_factory=dict)
    starts: list = field(default_factory=list)
    resets: int = 0
    extra: dict = field(default_factory=dict)     # values of registers the model cannot know
    kv: list = field(default_factory=lambda: [0] * len(KV_REGS))   # KV layout registers
    kv_capacity: int = 0                          # i_kv_capacity (the KV store's)
    flits_received: int = 0                       # performance registers (RESET bit 2
    words_written: int = 0                        # clears them)
    words_read: int = 0
    commands: int = 0

    def __post_init__(self):
        self.sram = [0] * self.ni.sram_words
        self.counters = [0] * self.ni.n_counters

    @property
    def cfg(self) -> NocConfig:
        return self.ni.noc

    def flag(self, bit: NetError) -> None:
        """Record an error event.

        ``error_count`` counts the events; ``ERROR_COUNT`` counts the cycles with an error
        flagged, so the two agree while each event has a cycle of its own and a packet has
        at most one word past its ``length`` (one ``BAD_LENGTH`` here, one per such word
        there).
        """
        self.errors |= int(bit)
        self.error_count = min(self.error_count + 1, 0xFFFF)

    def bump(self, c: int, inc: int) -> None:
        """Add ``inc`` to counter ``c`` (saturating, flagged)."""
        top = (1 << self.ni.counter_width) - 1
        if self.counters[c] + inc > top:
            self.flag(NetError.COUNTER_OVERFLOW)
        self.counters[c] = min(self.counters[c] + inc, top)

    def register(self, reg: int) -> int | None:
        """Return the value a register read returns, ``None`` for no register."""
        ni = self.ni
        fixed = {
            Reg.ID: ni.x | ni.y << 8 | ni.width << 16 | ni.height << 24,
            Reg.STATUS: self.status,
            Reg.ERRORS: self.errors,
            Reg.ERROR_COUNT: self.error_count,
            Reg.KV_CAPACITY: self.kv_capacity,
            Reg.FLITS_RECEIVED: self.flits_received,
            Reg.WORDS_WRITTEN: self.words_written,
            Reg.WORDS_READ: self.words_read,
            Reg.COMMANDS: self.commands,
            **dict(zip(KV_REGS, self.kv, strict=True)),
        }
        if reg in self.extra:
            return self.extra[reg]
        if reg in fixed:
            return fixed[reg]
        if 0x20 <= reg < 0x20 + len(self.perf):
            return self.perf[reg - 0x20]
        if COUNTER_BASE <= reg < COUNTER_BASE + ni.n_counters:
            return self.counters[reg - COUNTER_BASE]
        return None

    def receive(self, pkt: Packet) -> list[Packet]:
        """Apply a well-delimited packet; return the packets sent in answer.  A payload
        longer or shorter than ``length`` flags ``BAD_LENGTH`` unless the packet is refused
        at its head (``SRAM_RANGE`` on a write, ``IMEM_RANGE``, ``BAD_TYPE``): a refused
        packet is drained whole, its length unchecked, as the gateware does."""
        self._refused = False
        out = self._receive(pkt)
        if len(pkt.payload) != pkt.head.length and not self._refused:
            self.flag(NetError.BAD_LENGTH)
        return out

    def _refuse(self, bit: NetError) -> list[Packet]:
        self.flag(bit)
        self._refused = True
        return []

    def _receive(self, pkt: Packet) -> list[Packet]:
        h, pay = pkt.head, list(pkt.payload)
        cfg = self.cfg
        ni = self.ni
        self.flits_received += 1 + len(pay)          # dropped flits included
        n = min(len(pay), h.length)
        if h.type in (PacketType.SRAM_WRITE, PacketType.READ_RESP):
            if h.addr + h.length > ni.sram_words:
                return self._refuse(NetError.SRAM_RANGE)
            self.sram[h.addr:h.addr + n] = pay[:n]
            self.words_written += n
            return []
        if h.type == PacketType.SRAM_READ:
            if not pay:
                return []
            lw = cfg.length_width
            count, space, resp = pay[0] & ((1 << lw) - 1), pay[0] >> lw & 1, pay[0] >> (lw + 1)
            resp &= (1 << cfg.addr_width) - 1
            if space == 0:
                if h.addr + count > ni.sram_words:
                    self.flag(NetError.SRAM_RANGE)
                    words = []
                else:
                    words = self.sram[h.addr:h.addr + count]
                    self.words_read += count
            else:
                words = []
                for r in range(h.addr, h.addr + count):
                    v = self.register(r)
                    if v is None:
                        self.flag(NetError.BAD_REG)
                        v = 0
                    words.append(v)
            dst = (h.src_x, h.src_y)
            dst = HOST if dst == cfg.host else dst
            return [_uni(PacketType.READ_RESP, dst, resp, words, cfg, src=(ni.x, ni.y))]
        if h.type == PacketType.CONTROL and h.addr >> (BUMP_WRITE_BITS - 1) == 1:
            word, c = h.addr & ((1 << ADDR_WIDTH) - 1), h.addr >> ADDR_WIDTH & 0xFF
            if word + h.length > ni.sram_words or c >= ni.n_counters:
                return self._refuse(NetError.SRAM_RANGE)
            self.sram[word:word + n] = pay[:n]
            self.words_written += n
            self.bump(c, 1)
            return []
        if h.type == PacketType.CONTROL:
            if h.addr >= IMEM_BASE:
                per = ni.flits_per_instr
                idx = h.addr - IMEM_BASE
                if h.length % per or idx + h.length // per > ni.imem_words:
                    return self._refuse(NetError.IMEM_RANGE)
                pw = cfg.payload_width
                for k in range(n // per):
                    word = sum(pay[k * per + j] << (pw * j) for j in range(per))
                    self.imem[idx + k] = word & ((1 << 128) - 1)
                return []
            for k in range(n):
                reg, v = h.addr + k, pay[k]
                if reg == Reg.START:
                    self.starts.append(v & 0xFFFF)
                elif reg == Reg.RESET:
                    if v & 1:
                        self.resets += 1
                    if v & 2:
                        self.counters = [0] * ni.n_counters
                    if v & 4:
                        self.errors = self.error_count = 0
                        self.words_written = self.words_read = self.commands = 0
                        # the flits after this word's arrive after the clear
                        self.flits_received = len(pay) - 1 - k
                elif COUNTER_BASE <= reg < COUNTER_BASE + ni.n_counters:
                    self.bump(reg - COUNTER_BASE, v & ((1 << ni.counter_width) - 1))
                elif reg in KV_REGS:
                    k = KV_REGS.index(reg)
                    width = list(KvParams.as_shape())[k][1].width
                    self.kv[k] = v & ((1 << width) - 1)
                else:
                    self.flag(NetError.BAD_REG)
            return []
        return self._refuse(NetError.BAD_TYPE)

    def send(self, cmd: dict) -> tuple[ErrorCode, list[Packet]]:
        """Apply a SEND command (``cmd`` as `send_check`'s): return the error code of its
        completion and the packets it injects, payload words read from the SRAM."""
        ni = self.ni
        self.commands += 1
        error = send_check(ni, cmd)
        if error != ErrorCode.NONE:
            self.flag(NetError.SEND_REFUSED)
            return error, []
        words = cmd["length"] // ni.word_bytes
        self.words_read += words
        src = cmd["src"] // ni.word_bytes
        out = []
        for p in send_packets(ni, (ni.x, ni.y), cmd):
            if words:
                p = Packet(p.head, tuple(self.sram[src:src + p.head.length]))
                src += p.head.length
            out.append(p)
        return error, out

    def done(self, code: int) -> list[Packet]:
        """Apply a DONE command: return the doorbell packet it sends to the host."""
        self.commands += 1
        return [_uni(PacketType.CONTROL, HOST, Reg.DOORBELL, [code], self.cfg,
                     src=(self.ni.x, self.ni.y))]
