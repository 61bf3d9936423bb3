"""The UART backend: a chip on an FPGA board, reached over a serial port.

The board's top level (``chipotle.hw.fpga.UartChip``) bridges the chip's host link to an
8N1 UART.  Both directions carry host-link flits in the same byte framing (``docs/fpga.md``):

* a flit of ``F`` bits (``payload_width + 1``: data, then ``last`` as the MSB) is sent as
  ``n = ceil(F / 7)`` bytes, 7 flit bits per byte, least significant bits first;
* bit 7 of the first byte of a flit is 1 (the *sync* mark), bit 7 of the other bytes is 0;
* bits of the last byte above the flit are 0.

A receiver starts a flit at every byte with bit 7 set and takes the flit after ``n`` bytes;
a lost or corrupted byte costs at most the flit it was part of (the next sync byte starts a
new one), so the link cannot stay out of step.  The 64-bit flit of the default network is
10 bytes: 64 payload bits in 100 bit times of 8N1 (64 % of the line rate).

Members
-------
flit_bytes
    Bytes per flit.
encode_flits, FlitDecoder
    The framing, both ways.
Transport, SerialTransport
    What `UartBackend` sends bytes through; the pyserial one.
UartBackend
    The driver backend (``chipotle generate --backend uart --port /dev/ttyUSB0``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from chipotle.config import ChipConfig
from chipotle.hw.noc.packet import Packet

from . import hostlink as hl
from .backend import (
    DoorbellTimeout,
    PacketBackend,
    TileFault,
    _check_xy,
)

__all__ = ["flit_bytes", "encode_flits", "FlitDecoder", "Transport", "SerialTransport",
           "UartBackend", "DEFAULT_BAUD"]

#: Default line rate of the boards' UART (the FTDI parts run it without flow control).
DEFAULT_BAUD = 1_000_000

_TAG_BITS = 16


def flit_bytes(flit_width: int) -> int:
    """Return the bytes one flit of ``flit_width`` bits takes on the line (``ceil(F / 7)``).

    Raises
    ------
    ValueError
        If ``flit_width`` is not positive.
    """
    if flit_width <= 0:
        raise ValueError(f"flit width must be positive, not {flit_width}")
    return -(-flit_width // 7)


def encode_flits(flits: Iterable[int], flit_width: int) -> bytes:
    """Return the line bytes of ``flits`` (bit patterns of ``flit_width`` bits).

    Raises
    ------
    ValueError
        If a flit does not fit ``flit_width`` bits.
    """
    n = flit_bytes(flit_width)
    out = bytearray()
    for f in flits:
        f = int(f)
        if not 0 <= f < 1 << flit_width:
            raise ValueError(f"flit {f:#x} does not fit {flit_width} bits")
        for i in range(n):
            out.append((f >> 7 * i & 0x7F) | (0x80 if i == 0 else 0))
    return bytes(out)


class FlitDecoder:
    """Reassemble flits from line bytes (the receiving half of the framing).

    Parameters
    ----------
    flit_width : int
        Bits per flit.

    Attributes
    ----------
    dropped : int
        Flits abandoned because a sync byte came early, plus data bytes seen outside a flit
        and flits with bits set above ``flit_width`` (line errors).
    """

    def __init__(self, flit_width: int):
        self.flit_width = flit_width
        self.n = flit_bytes(flit_width)
        self.dropped = 0
        self._acc = 0
        self._count = 0       # bytes of the current flit so far; 0: waiting for a sync byte

    def feed(self, data: bytes) -> list[int]:
        """Take line bytes; return the flits completed by them, in order."""
        out = []
        for b in data:
            if b & 0x80:
                if self._count:
                    self.dropped += 1
                self._acc, self._count = b & 0x7F, 1
            elif self._count:
                self._acc |= (b & 0x7F) << 7 * self._count
                self._count += 1
            else:
                self.dropped += 1
                continue
            if self._count == self.n:
                self._count = 0
                if self._acc >> self.flit_width:
                    self.dropped += 1
                else:
                    out.append(self._acc)
        return out


@runtime_checkable
class Transport(Protocol):
    """A byte pipe to the board, with a clock to measure cycles by.

    Attributes
    ----------
    cycle : int
        Chip clock cycles since the transport was opened (measured or estimated).
    """

    @property
    def cycle(self) -> int: ...

    async def write(self, data: bytes) -> None:
        """Send ``data``."""

    async def read(self, max_cycles: int) -> bytes:
        """Return the bytes received so far (at least one), or ``b""`` after ``max_cycles``
        chip cycles without any."""


class SerialTransport:
    """`Transport` over a pyserial port (``serial.Serial``).

    Cycles are wall-clock time times ``clock_hz`` (the board's chip clock): the host cannot
    see the chip's clock, so per-step cycle figures include the UART transfer time.

    Parameters
    ----------
    port : str or serial.Serial-like
        A device name (``/dev/ttyUSB0``), opened 8N1 at ``baud``; or an open object with
        ``write``, ``read``, ``in_waiting`` and ``timeout`` (tests pass a fake).
    clock_hz : float
        The chip's clock on the board, Hz.
    baud : int
        Line rate (default `DEFAULT_BAUD`); must equal the bitstream's.

    Raises
    ------
    ValueError
        If ``clock_hz`` or ``baud`` is not positive.
    serial.SerialException
        If the port cannot be opened.
    """

    def __init__(self, port, clock_hz: float, baud: int = DEFAULT_BAUD):
        if clock_hz <= 0 or baud <= 0:
            raise ValueError(f"clock_hz and baud must be positive, not {clock_hz}, {baud}")
        if isinstance(port, str):
            import serial
            port = serial.Serial(port, baudrate=baud, bytesize=8, parity="N", stopbits=1,
                                 timeout=0.1)
        self.serial = port
        self.clock_hz = clock_hz
        self._t0 = time.monotonic()

    @property
    def cycle(self) -> int:
        """Wall-clock time since opening, in chip cycles."""
        return int((time.monotonic() - self._t0) * self.clock_hz)

    async def write(self, data: bytes) -> None:
        """Write ``data`` to the port."""
        self.serial.write(data)

    async def read(self, max_cycles: int) -> bytes:
        """Return what the port holds, waiting at most ``max_cycles`` chip cycles for one
        byte."""
        self.serial.timeout = max(max_cycles / self.clock_hz, 0.001)
        first = self.serial.read(1)
        if not first:
            return b""
        waiting = self.serial.in_waiting
        return first + (self.serial.read(waiting) if waiting else b"")


class UartBackend(PacketBackend):
    """The driver backend over a UART bridge (``chipotle.hw.fpga.UartChip``).

    Requests are sent as framed flits; answers are taken from the byte stream as they come
    (doorbells arriving meanwhile are kept for `wait_done`).  One request is in flight at a
    time.

    Parameters
    ----------
    transport : Transport
        The byte pipe (`SerialTransport` on a board; a cocotb UART model in simulation).
    config : ChipConfig
        The configuration the bitstream was built with.
    poll_cycles : int
        While waiting for a doorbell, read every tile's ``STATUS`` this often (chip cycles)
        to report a tile in the ERROR state (default 2**22, about 0.1 s at 40 MHz).

    Attributes
    ----------
    flits_in, flits_out : int
        Flits sent to and received from the chip.
    answers : int
        Packets received from the chip: read responses and doorbells.
    strays : int
        Packets received that are not the chip's answers or doorbells (a port that echoes
        what it is sent, noise that framed as a packet): dropped; ``last_stray`` describes
        the last.
    decoder : FlitDecoder
        Its ``dropped`` counts line errors seen.
    """

    def __init__(self, transport: Transport, config: ChipConfig, *, poll_cycles: int = 1 << 22):
        self.transport = transport
        self.config = config
        self.noc = config.noc
        self.poll_cycles = poll_cycles
        self.decoder = FlitDecoder(self.noc.flit_width)
        self.flits_in = self.flits_out = 0
        self.strays = self.answers = 0
        self.last_stray = ""
        self._last_bit = 1 << self.noc.flit_layout["last"].offset
        self._flits: list[int] = []
        self._bells: deque = deque()
        self._responses: dict = {}
        self._tag = 0

    @property
    def cycle(self) -> int:
        """The transport's cycle count."""
        return self.transport.cycle

    # -- link ------------------------------------------------------------------------------------

    async def send(self, packets) -> None:
        """Send ``packets`` (``Packet`` objects), framed, in order."""
        flits = [f for p in packets for f in p.flits(self.noc)]
        self.flits_in += len(flits)
        await self.transport.write(encode_flits(flits, self.noc.flit_width))

    async def _pump(self, max_cycles: int) -> bool:
        """Take received bytes (waiting up to ``max_cycles``); file what they complete.
        Return False if nothing arrived."""
        data = await self.transport.read(max_cycles)
        if not data:
            return False
        for flit in self.decoder.feed(data):
            self.flits_out += 1
            self._flits.append(flit)
            if flit & self._last_bit:
                flits, self._flits = self._flits, []
                try:
                    msg = hl.parse(Packet.from_flits(flits, self.noc))
                except ValueError as e:
                    # not a packet the chip sends the host (a port that echoes the host's
                    # own packets, line noise that framed): counted, not taken
                    self.strays += 1
                    self.last_stray = str(e)
                    continue
                self.answers += 1
                if isinstance(msg, hl.Doorbell):
                    self._bells.append((msg.tile, msg.code))
                else:
                    self._responses[msg.tag] = msg
        return True

    async def _read(self, xy, addr: int, count: int, space: int,
                    timeout_cycles: int = 1 << 26) -> list[int]:
        xy = _check_xy(self.config, xy)
        self._tag = tag = (self._tag + 1) % (1 << _TAG_BITS)
        build = hl.reg_read if space else hl.sram_read
        await self.send([build(xy, addr, count, tag, self.noc)])
        deadline = self.cycle + timeout_cycles
        while tag not in self._responses:
            left = deadline - self.cycle
            if left <= 0 or not await self._pump(left) and self.cycle >= deadline:
                raise DoorbellTimeout(timeout_cycles, detail=f"no answer to a read of {count} "
                                      f"words at {addr:#x} of tile {xy}")
        resp = self._responses.pop(tag)
        if resp.tile != xy or len(resp.words) != count:
            raise RuntimeError(f"read of {count} words at {addr:#x} from tile {xy} was "
                               f"answered by {resp.tile} with {len(resp.words)} words")
        return list(resp.words)

    async def _reads(self, xy, requests, space: int) -> list[list[int]]:
        # One read at a time: the serial line is the bottleneck, not the round trip.
        return [await self._read(xy, a, count, space) for a, count in requests]

    # -- Backend ---------------------------------------------------------------------------------

    async def _wait_cycles(self, n: int) -> None:
        deadline = self.cycle + n
        while self.cycle < deadline:
            await self._pump(deadline - self.cycle)

    async def wait_done(self, timeout_cycles: int) -> tuple[tuple[int, int], int]:
        """Return ``(xy, code)`` of the next doorbell.

        Raises
        ------
        TileFault
            If a tile is in the ERROR state (its ``STATUS`` is read every `poll_cycles`).
        DoorbellTimeout
            If none arrives within ``timeout_cycles`` cycles (with every tile's status).
        """
        deadline = self.cycle + timeout_cycles
        while not self._bells:
            left = deadline - self.cycle
            if left <= 0:
                statuses = {xy: await self.status(xy) for xy in self.config.tiles}
                raise DoorbellTimeout(timeout_cycles, statuses)
            if not await self._pump(min(left, self.poll_cycles)) and not self._bells:
                for xy in self.config.tiles:
                    s = await self.status(xy)
                    if s.state == "error":
                        raise TileFault(xy, s.error, s.pc)
        return self._bells.popleft()
