"""Packet format of the chipotle network-on-chip, and the Python side of it.

A packet is one *head* flit followed by ``length`` payload flits; the final flit of a packet
(the head itself when ``length == 0``) has ``last`` set.  A flit is ``data`` (the payload
width, 64 bits by default) plus the ``last`` marker.  The fields of a head flit live in the
``data`` of the head and are laid out by :attr:`NocConfig.head_layout`; every bit position used
here, in the gateware and in the testbenches comes from that one layout.

Members
-------
PacketType
    The kind of a packet (an ``amaranth.lib.enum.Enum`` with an explicit 3-bit shape).
NocConfig
    The network parameters (widths, buffer depth, multicast limit) and the layouts derived
    from them.
Head, Packet
    Python views of a head flit and of a whole packet.
encode_head, decode_head, build_packet, pack_flit, unpack_flit
    Conversions between those views and the bit patterns on the wires.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from amaranth.hdl import Shape
from amaranth.lib import data, enum

__all__ = [
    "PacketType", "NocConfig", "Head", "Packet", "HOST",
    "encode_head", "decode_head", "build_packet", "pack_flit", "unpack_flit",
]


class PacketType(enum.Enum, shape=3):
    """Kind of a packet (field ``type`` of the head flit).

    Code 0 and codes 5 to 7 are reserved: a head carrying one of them is malformed and is
    dropped by the first router that sees it.  The routers treat every valid type alike; the
    meaning is the network interface's business.
    """

    #: Write the payload flits into the destination's SRAM from word address ``addr`` on.
    SRAM_WRITE = 1
    #: Ask the destination to read its SRAM from ``addr`` and answer the source with a
    #: :attr:`READ_RESP`; the payload says how many words and where they go.
    SRAM_READ = 2
    #: Data answering an :attr:`SRAM_READ`, written at ``addr`` of the requester.
    READ_RESP = 3
    #: Control or doorbell: ``addr`` selects a control register, the payload is written to it.
    CONTROL = 4


#: Pseudo-coordinate naming the host as a destination or a source (see :attr:`NocConfig.host`).
HOST = "host"


@dataclass(frozen=True)
class NocConfig:
    """Parameters of the network-on-chip, shared by gateware, testbenches and host software.

    Parameters
    ----------
    payload_width : int
        Width of a flit's ``data`` in bits (default 64).
    coord_width : int
        Width of a coordinate in a head flit (default 4).  A mesh may have up to
        ``2**coord_width - 1`` columns (the all-ones column is the host, west of column 0)
        and ``2**coord_width`` rows: 15 x 16 with the default, 31 x 32 with 5 bits.
    length_width : int
        Width of the ``length`` field (payload flits after the head; default 8, so a packet
        has at most 256 flits).
    fifo_depth : int
        Depth of each router input FIFO, in flits (default 16).
    mcast_max_flits : int
        Longest multicast packet, head included (default 8).  A multicast head is forwarded
        into a neighbour only when that neighbour's input FIFO has room for this many flits,
        which is what makes multicast deadlock-free (see ``docs/noc.md``).  Must not exceed
        ``fifo_depth``.
    error_width : int
        Width of the dropped-packet counters (default 16; they saturate).
    """

    payload_width: int = 64
    coord_width: int = 4
    length_width: int = 8
    fifo_depth: int = 16
    mcast_max_flits: int = 8
    error_width: int = 16

    def __post_init__(self):
        for name in ("payload_width", "coord_width", "length_width", "fifo_depth",
                     "mcast_max_flits", "error_width"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer, not {value!r}")
        if self.addr_width < 1:
            raise ValueError(
                f"a head flit needs {self._fixed_head_bits + 1} bits or more with "
                f"coord_width={self.coord_width} and length_width={self.length_width}; "
                f"`payload_width` must be at least that, not {self.payload_width}")
        if not 2 <= self.mcast_max_flits <= self.fifo_depth:
            raise ValueError(
                f"`mcast_max_flits` must be between 2 and fifo_depth ({self.fifo_depth}), "
                f"not {self.mcast_max_flits}")

    # -- layouts -------------------------------------------------------------------------------

    @property
    def _fixed_head_bits(self):
        return 3 + 1 + 6 * self.coord_width + self.length_width

    @property
    def addr_width(self) -> int:
        """Width of the ``addr`` field: what the other head fields leave of the payload."""
        return self.payload_width - self._fixed_head_bits

    @functools.cached_property
    def flit_layout(self) -> data.StructLayout:
        """Layout of a flit: ``data`` (``payload_width`` bits) then ``last`` (1 bit, MSB)."""
        return data.StructLayout({"data": self.payload_width, "last": 1})

    @property
    def flit_width(self) -> int:
        """Width of a flit in bits (``payload_width + 1``)."""
        return self.payload_width + 1

    @functools.cached_property
    def head_layout(self) -> data.StructLayout:
        """Layout of the ``data`` of a head flit, least significant field first.

        ===========  ===================  ==================================================
        field        width                meaning
        ===========  ===================  ==================================================
        ``type``     3                    :class:`PacketType`
        ``mcast``    1                    1: deliver to the rectangle x0..x1 by y0..y1
        ``x0``       ``coord_width``      destination column (unicast), or rectangle's west
        ``x1``       ``coord_width``      rectangle's east column (ignored for unicast)
        ``y0``       ``coord_width``      destination row (unicast), or rectangle's north
        ``y1``       ``coord_width``      rectangle's south row (ignored for unicast)
        ``src_x``    ``coord_width``      source column (all ones: the host)
        ``src_y``    ``coord_width``      source row
        ``length``   ``length_width``     number of payload flits after the head
        ``addr``     the rest             target word address (or register number)
        ===========  ===================  ==================================================
        """
        c = self.coord_width
        return data.StructLayout({
            "type": PacketType,
            "mcast": 1,
            "x0": c, "x1": c, "y0": c, "y1": c,
            "src_x": c, "src_y": c,
            "length": self.length_width,
            "addr": self.addr_width,
        })

    # -- coordinates ---------------------------------------------------------------------------

    @property
    def host(self) -> tuple[int, int]:
        """Coordinates of the host link: column all-ones ("-1", west of column 0), row 0."""
        return (1 << self.coord_width) - 1, 0

    @property
    def max_width(self) -> int:
        """Largest number of mesh columns these coordinates allow."""
        return (1 << self.coord_width) - 1

    @property
    def max_height(self) -> int:
        """Largest number of mesh rows these coordinates allow."""
        return 1 << self.coord_width

    @property
    def max_length(self) -> int:
        """Largest ``length`` (payload flits of one packet)."""
        return (1 << self.length_width) - 1

    def check_mesh(self, width: int, height: int) -> None:
        """Raise ``ValueError`` unless a ``width`` x ``height`` mesh fits these coordinates."""
        if not isinstance(width, int) or not 1 <= width <= self.max_width:
            raise ValueError(f"mesh `width` must be an integer from 1 to {self.max_width} "
                             f"with coord_width={self.coord_width}, not {width!r}")
        if not isinstance(height, int) or not 1 <= height <= self.max_height:
            raise ValueError(f"mesh `height` must be an integer from 1 to {self.max_height} "
                             f"with coord_width={self.coord_width}, not {height!r}")


DEFAULT = NocConfig()


@dataclass(frozen=True)
class Head:
    """The fields of a head flit (see :attr:`NocConfig.head_layout`).

    Build one with :meth:`unicast`, :meth:`multicast` or :meth:`to_host`.  ``type`` may be a
    plain ``int`` so that testbenches can encode reserved codes.
    """

    type: PacketType | int
    x0: int
    y0: int
    x1: int | None = None
    y1: int | None = None
    mcast: bool = False
    src_x: int = 0
    src_y: int = 0
    length: int = 0
    addr: int = 0

    def __post_init__(self):
        # A unicast head is also a valid 1x1 rectangle: x1, y1 repeat x0, y0.
        if self.x1 is None:
            object.__setattr__(self, "x1", self.x0)
        if self.y1 is None:
            object.__setattr__(self, "y1", self.y0)

    @classmethod
    def unicast(cls, type, dst, src, *, addr=0, length=0, cfg=DEFAULT):
        """Return the head of a packet for one tile ``dst = (x, y)``, or for ``HOST``.

        ``src`` is ``(x, y)`` or ``HOST``.
        """
        x, y = cfg.host if dst == HOST else dst
        sx, sy = cfg.host if src == HOST else src
        return cls(type, x, y, x, y, False, sx, sy, length, addr)

    @classmethod
    def multicast(cls, type, rect, src, *, addr=0, length=0, cfg=DEFAULT):
        """Return the head of a packet for every tile of ``rect = (x0, x1, y0, y1)``.

        The bounds are inclusive.  ``src`` is ``(x, y)`` or ``HOST``.
        """
        x0, x1, y0, y1 = rect
        sx, sy = cfg.host if src == HOST else src
        return cls(type, x0, y0, x1, y1, True, sx, sy, length, addr)

    @property
    def src(self):
        """Source as ``(x, y)`` (the host's coordinates for the host)."""
        return self.src_x, self.src_y

    @property
    def rect(self):
        """Destination rectangle ``(x0, x1, y0, y1)``; a unicast gives its 1x1 rectangle."""
        if self.mcast:
            return self.x0, self.x1, self.y0, self.y1
        return self.x0, self.x0, self.y0, self.y0

    @property
    def type_name(self) -> str:
        """Name of the packet type, or ``"reserved(n)"``."""
        try:
            return PacketType(self.type).name
        except ValueError:
            return f"reserved({_int(self.type)})"

    def describe(self, cfg: NocConfig = DEFAULT) -> str:
        """Return a short human-readable description (used in failure messages)."""
        src = "host" if self.src == cfg.host else f"({self.src_x},{self.src_y})"
        if self.mcast:
            dst = f"rect x{self.x0}..{self.x1} y{self.y0}..{self.y1}"
        elif (self.x0, self.y0) == cfg.host:
            dst = "host"
        else:
            dst = f"({self.x0},{self.y0})"
        return (f"{self.type_name} {src}->{dst} addr={self.addr:#x} "
                f"len={self.length}")


def _width(fld: data.Field) -> int:
    return Shape.cast(fld.shape).width


def _int(value) -> int:
    return int(value.value) if isinstance(value, PacketType) else int(value)


def encode_head(head: Head, cfg: NocConfig = DEFAULT, *, strict: bool = True) -> int:
    """Return the ``data`` bits of the head flit ``head``.

    Parameters
    ----------
    head : Head
    cfg : NocConfig
    strict : bool
        Raise ``ValueError`` if a field does not fit its width or ``type`` is reserved.
        Testbenches pass ``False`` to build malformed heads (values are then truncated).
    """
    word = 0
    for name, fld in cfg.head_layout:
        value = _int(getattr(head, name))
        width = _width(fld)
        if strict:
            if not 0 <= value < (1 << width):
                raise ValueError(f"head field `{name}` must fit {width} bits, not {value}")
            if name == "type":
                PacketType(value)
        word |= (value & ((1 << width) - 1)) << fld.offset
    return word


def decode_head(word: int, cfg: NocConfig = DEFAULT) -> Head:
    """Return the :class:`Head` whose ``data`` bits are ``word``.

    Reserved packet types decode to a plain ``int`` rather than raising.
    """
    values = {}
    for name, fld in cfg.head_layout:
        values[name] = (word >> fld.offset) & ((1 << _width(fld)) - 1)
    try:
        values["type"] = PacketType(values["type"])
    except ValueError:
        pass
    values["mcast"] = bool(values["mcast"])
    return Head(**values)


def pack_flit(data_bits: int, last: bool, cfg: NocConfig = DEFAULT) -> int:
    """Return the bit pattern of a flit (the ``payload`` of a NoC stream port).

    Raises
    ------
    ValueError
        If `data_bits` is negative or does not fit ``cfg.payload_width`` bits.
    """
    layout = cfg.flit_layout
    if not 0 <= data_bits < (1 << cfg.payload_width):
        raise ValueError(f"flit data must fit {cfg.payload_width} bits, not {data_bits:#x}")
    return (data_bits << layout["data"].offset) | (int(bool(last)) << layout["last"].offset)


def unpack_flit(word: int, cfg: NocConfig = DEFAULT) -> tuple[int, bool]:
    """Return ``(data, last)`` of the flit bit pattern ``word``."""
    layout = cfg.flit_layout
    return ((word >> layout["data"].offset) & ((1 << cfg.payload_width) - 1),
            bool((word >> layout["last"].offset) & 1))


@dataclass(frozen=True)
class Packet:
    """A whole packet: its head and its payload words (``data`` of the payload flits).

    ``head.length`` must equal ``len(payload)`` for a well-formed packet; :func:`build_packet`
    sets it.
    """

    head: Head
    payload: tuple[int, ...] = field(default=())

    def flits(self, cfg: NocConfig = DEFAULT, *, strict: bool = True) -> list[int]:
        """Return the packet as flit bit patterns, ``last`` set on the final one."""
        words = [encode_head(self.head, cfg, strict=strict), *self.payload]
        return [pack_flit(w, i == len(words) - 1, cfg) for i, w in enumerate(words)]

    @classmethod
    def from_flits(cls, flits: Sequence[int], cfg: NocConfig = DEFAULT) -> Packet:
        """Return the packet made of the flit bit patterns ``flits`` (head first).

        Raises
        ------
        ValueError
            If `flits` is empty.
        """
        if not flits:
            raise ValueError("a packet has at least one flit")
        words = [unpack_flit(f, cfg)[0] for f in flits]
        return cls(decode_head(words[0], cfg), tuple(words[1:]))

    def describe(self, cfg: NocConfig = DEFAULT) -> str:
        """Return a short human-readable description."""
        return f"[{self.head.describe(cfg)}, {len(self.payload)} payload flits]"


def build_packet(type: PacketType, *, src, dst=None, rect=None, addr: int = 0,
                 payload: Iterable[int] = (), cfg: NocConfig = DEFAULT) -> Packet:
    """Return a well-formed packet, its ``length`` taken from ``payload``.

    Parameters
    ----------
    type : PacketType
    src : (int, int) or HOST
        The sender.
    dst : (int, int) or HOST, optional
        Unicast destination.  Exactly one of ``dst`` and ``rect`` is given.
    rect : (int, int, int, int), optional
        Multicast rectangle ``(x0, x1, y0, y1)``, bounds inclusive.
    addr : int
        Target word address or register number.
    payload : iterable of int
        Data words (``payload_width`` bits each).

    Raises
    ------
    ValueError
        If a field does not fit, or a multicast packet is longer than
        ``cfg.mcast_max_flits``.
    """
    payload = tuple(int(w) for w in payload)
    if (dst is None) == (rect is None):
        raise ValueError("give exactly one of `dst` (unicast) and `rect` (multicast)")
    if len(payload) > cfg.max_length:
        raise ValueError(f"a packet carries at most {cfg.max_length} payload flits, "
                         f"not {len(payload)}")
    if dst is not None:
        head = Head.unicast(type, dst, src, addr=addr, length=len(payload), cfg=cfg)
    else:
        if 1 + len(payload) > cfg.mcast_max_flits:
            raise ValueError(f"a multicast packet has at most {cfg.mcast_max_flits} flits, "
                             f"not {1 + len(payload)}")
        head = Head.multicast(type, rect, src, addr=addr, length=len(payload), cfg=cfg)
    encode_head(head, cfg)  # range checks
    for w in payload:
        if not 0 <= w < (1 << cfg.payload_width):
            raise ValueError(f"payload words must fit {cfg.payload_width} bits, not {w:#x}")
    return Packet(head, payload)
