"""The host side of the tile packet protocol, as plain Python (no simulator needed).

A host talks to a chip only through packets on the host link (``docs/tile.md``, "Network
interface"; ``docs/noc.md``): it writes and reads tile SRAM, reads control registers, writes
instruction memory, starts and resets controllers and bumps counters with ``CONTROL``
packets, and is told that a step finished by ``DONE`` doorbells (a ``CONTROL`` packet to the
host's register ``DOORBELL``).  This module builds the packets the host sends and classifies
the packets it receives.  Every field position comes from ``chipotle.hw.noc.packet`` and the
register map from ``chipotle.hw.tile.netif``.

Members
-------
sram_write, sram_read, reg_read, control, counter_add, imem_write, start, reset
    Build one packet a host sends to a tile (word addresses, ``payload_width``-bit words).
read_request_word
    The payload word of an ``SRAM_READ`` (``read_request_layout``).
sram_write_packets, imem_write_packets, sram_read_chunks
    Split a byte image, a program or a read into packets of at most ``max_length`` words.
bytes_to_words, words_to_bytes
    Little-endian conversion between SRAM bytes and flit payload words.
ReadResponse, Doorbell, parse
    What arrives at the host: a read response (words, from which tile, ``resp_addr`` tag) or
    a doorbell (tile and 16-bit code).
RESET_ALL
    The ``RESET`` register value that resets a tile as ``IsaSim.reset`` does (``0b111``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from chipotle.hw.noc.packet import HOST, Head, NocConfig, Packet, PacketType
from chipotle.hw.tile.netif import COUNTER_BASE, IMEM_BASE, Reg

__all__ = [
    "sram_write", "sram_read", "reg_read", "control", "counter_add", "imem_write", "start",
    "reset", "read_request_word", "sram_write_packets", "imem_write_packets",
    "sram_read_chunks", "bytes_to_words", "words_to_bytes", "ReadResponse", "Doorbell",
    "parse", "RESET_ALL", "INSTR_BITS",
]

#: Width of one instruction word.
INSTR_BITS = 128
#: ``RESET`` value: controller reset, counters cleared, error flags and interface counters
#: cleared (``IsaSim.reset`` of one tile).
RESET_ALL = 0b111


def _uni(ptype, dst, addr: int, payload, cfg: NocConfig, src=HOST) -> Packet:
    payload = tuple(int(w) for w in payload)
    if len(payload) > cfg.max_length:
        raise ValueError(f"a packet carries at most {cfg.max_length} payload words, not "
                         f"{len(payload)}")
    head = Head.unicast(ptype, dst, src, addr=addr, length=len(payload), cfg=cfg)
    return Packet(head, payload)


def sram_write(dst, addr: int, words, cfg: NocConfig) -> Packet:
    """Return a host write of ``words`` at word ``addr`` of tile ``dst = (x, y)``.

    Raises
    ------
    ValueError
        If there are more than ``cfg.max_length`` words.
    """
    return _uni(PacketType.SRAM_WRITE, dst, addr, list(words), cfg)


def read_request_word(count: int, resp_addr: int, space: int, cfg: NocConfig) -> int:
    """Return the payload word of an ``SRAM_READ`` (``read_request_layout``).

    ``count`` words (``length_width`` bits), ``space`` 0 for SRAM and 1 for registers,
    ``resp_addr`` the ``addr`` of the answer's head (the host uses it as a tag).

    Raises
    ------
    ValueError
        If a field does not fit its width.
    """
    lw = cfg.length_width
    if not 0 <= count <= cfg.max_length:
        raise ValueError(f"`count` must be in [0, {cfg.max_length}], not {count}")
    if space not in (0, 1):
        raise ValueError(f"`space` must be 0 (SRAM) or 1 (registers), not {space}")
    if not 0 <= resp_addr < (1 << cfg.addr_width):
        raise ValueError(f"`resp_addr` must fit {cfg.addr_width} bits, not {resp_addr}")
    return count | space << lw | resp_addr << (lw + 1)


def sram_read(dst, addr: int, count: int, resp_addr: int, cfg: NocConfig) -> Packet:
    """Return a host read of ``count`` SRAM words from word ``addr`` of tile ``dst``."""
    return _uni(PacketType.SRAM_READ, dst, addr, [read_request_word(count, resp_addr, 0, cfg)],
                cfg)


def reg_read(dst, reg: int, count: int, resp_addr: int, cfg: NocConfig) -> Packet:
    """Return a host read of ``count`` registers from register ``reg`` of tile ``dst``."""
    return _uni(PacketType.SRAM_READ, dst, reg, [read_request_word(count, resp_addr, 1, cfg)],
                cfg)


def control(dst, reg: int, words, cfg: NocConfig) -> Packet:
    """Return a host write of ``words`` to registers ``reg``, ``reg + 1``, ... of ``dst``."""
    return _uni(PacketType.CONTROL, dst, reg, list(words), cfg)


def counter_add(dst, counter: int, inc: int, cfg: NocConfig) -> Packet:
    """Return a host write adding ``inc`` to counter ``counter`` of ``dst``.

    Raises
    ------
    ValueError
        If ``counter`` is not in ``[0, 256)`` (the counters' register window: another
        value would address another register).
    """
    if not 0 <= counter < 256:
        raise ValueError(f"`counter` must be in [0, 256), not {counter}")
    return control(dst, COUNTER_BASE + counter, [inc], cfg)


def start(dst, pc: int, cfg: NocConfig) -> Packet:
    """Return a write of the ``START`` register: start the controller at ``pc``.

    Raises
    ------
    ValueError
        If ``pc`` is not in ``[0, 2**16)``.
    """
    if not 0 <= pc < 1 << 16:
        raise ValueError(f"`pc` must be in [0, 65536), not {pc}")
    return control(dst, Reg.START, [pc], cfg)


def reset(dst, bits: int, cfg: NocConfig) -> Packet:
    """Return a write of the ``RESET`` register (``RESET_ALL`` resets everything)."""
    return control(dst, Reg.RESET, [bits], cfg)


def _instr_words(instrs: Iterable[int], cfg: NocConfig) -> list[int]:
    pw = cfg.payload_width
    per = -(-INSTR_BITS // pw)
    out = []
    for ins in instrs:
        ins = int(ins)
        if not 0 <= ins < 1 << INSTR_BITS:
            raise ValueError(f"an instruction must fit {INSTR_BITS} bits, not {ins:#x}")
        out += [(ins >> (pw * k)) & ((1 << pw) - 1) for k in range(per)]
    return out


def imem_write(dst, index: int, instrs, cfg: NocConfig) -> Packet:
    """Return a host write of 128-bit ``instrs`` at instruction ``index`` of ``dst``.

    Raises
    ------
    ValueError
        If ``index`` is not in ``[0, 65536)`` (the instruction memory's register window), or
        an instruction does not fit 128 bits.
    """
    if not 0 <= index < 1 << 16:
        raise ValueError(f"`index` must be in [0, 65536), not {index}")
    return control(dst, IMEM_BASE + index, _instr_words(instrs, cfg), cfg)


def imem_write_packets(dst, instrs, cfg: NocConfig, index: int = 0) -> list[Packet]:
    """Return the packets writing a whole program ``instrs`` from instruction ``index`` on.

    Each packet carries as many whole instructions as ``cfg.max_length`` words allow.
    """
    instrs = [int(i) for i in instrs]
    per = -(-INSTR_BITS // cfg.payload_width)
    step = cfg.max_length // per
    return [imem_write(dst, index + k, instrs[k:k + step], cfg)
            for k in range(0, len(instrs), step)]


def bytes_to_words(data: bytes, word_bytes: int) -> list[int]:
    """Return little-endian words of ``word_bytes`` bytes (``len(data)`` a multiple of it).

    Raises
    ------
    ValueError
        If ``len(data)`` is not a multiple of ``word_bytes``.
    """
    data = bytes(data)
    if len(data) % word_bytes:
        raise ValueError(f"the data length ({len(data)} bytes) must be a multiple of the word "
                         f"size ({word_bytes} bytes)")
    return [int.from_bytes(data[i:i + word_bytes], "little")
            for i in range(0, len(data), word_bytes)]


def words_to_bytes(words: Iterable[int], word_bytes: int) -> bytes:
    """Return the little-endian bytes of ``words`` (inverse of :func:`bytes_to_words`)."""
    return b"".join(int(w).to_bytes(word_bytes, "little") for w in words)


def sram_write_packets(dst, byte_addr: int, data: bytes, cfg: NocConfig, word_bytes: int,
                       *, skip_zero: bool = False) -> list[Packet]:
    """Return ``SRAM_WRITE`` packets putting ``data`` at ``byte_addr`` of tile ``dst``.

    Parameters
    ----------
    dst : (int, int)
    byte_addr : int
        A multiple of ``word_bytes``.
    data : bytes
        A multiple of ``word_bytes`` long.
    cfg : NocConfig
    word_bytes : int
        W.
    skip_zero : bool
        Leave out runs of all-zero words (for an SRAM known to be zero, as after
        configuration of the RTL).

    Raises
    ------
    ValueError
        If the address or the length is not word-aligned.
    """
    if byte_addr % word_bytes:
        raise ValueError(f"`byte_addr` must be a multiple of W = {word_bytes}, not "
                         f"{byte_addr:#x}")
    words = bytes_to_words(data, word_bytes)
    base = byte_addr // word_bytes
    out = []
    i, n = 0, len(words)
    step = cfg.max_length
    while i < n:
        if skip_zero and words[i] == 0:
            i += 1
            continue
        j = i
        while j < n and j - i < step and not (skip_zero and words[j] == 0):
            j += 1
        out.append(sram_write(dst, base + i, words[i:j], cfg))
        i = j
    return out


def sram_read_chunks(byte_addr: int, nbytes: int, word_bytes: int, max_length: int
                     ) -> Iterator[tuple[int, int]]:
    """Yield ``(word_addr, count)`` of the reads covering ``nbytes`` bytes at ``byte_addr``.

    The range is widened to whole words; each read is at most ``max_length`` words.
    """
    lo = byte_addr // word_bytes
    hi = -(-(byte_addr + nbytes) // word_bytes)
    for a in range(lo, hi, max_length):
        yield a, min(max_length, hi - a)


@dataclass(frozen=True)
class ReadResponse:
    """A ``READ_RESP`` reaching the host.

    Attributes
    ----------
    tile : (int, int)
        The tile that answered.
    tag : int
        The head's ``addr``: the ``resp_addr`` of the request.
    words : tuple of int
        The words read (empty for a read past the SRAM end).
    """

    tile: tuple[int, int]
    tag: int
    words: tuple[int, ...]


@dataclass(frozen=True)
class Doorbell:
    """A tile's ``DONE``: a ``CONTROL`` packet to the host's ``DOORBELL`` register.

    Attributes
    ----------
    tile : (int, int)
    code : int
        The ``done`` instruction's 16-bit code.
    """

    tile: tuple[int, int]
    code: int


def parse(packet: Packet) -> ReadResponse | Doorbell:
    """Classify a packet that reached the host.

    Raises
    ------
    ValueError
        If it is neither a read response nor a doorbell (no tile sends anything else to
        the host).
    """
    h = packet.head
    tile = (h.src_x, h.src_y)
    if h.type == PacketType.READ_RESP:
        return ReadResponse(tile, h.addr, tuple(packet.payload))
    if h.type == PacketType.CONTROL and h.addr == Reg.DOORBELL and len(packet.payload) == 1:
        return Doorbell(tile, packet.payload[0] & 0xFFFF)
    raise ValueError(f"unexpected packet at the host: {packet.describe()}")
