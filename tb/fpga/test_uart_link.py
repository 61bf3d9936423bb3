"""The UART framing and `UartBackend` without hardware: byte-level round trips, line errors,
and the backend over `SerialTransport` against a fake serial port with a tiny chip model
behind it (SRAM writes and reads, register reads, starts answered by doorbells)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from chipotle.config import CONFIGS
from chipotle.driver.uart import (
    FlitDecoder,
    SerialTransport,
    UartBackend,
    encode_flits,
    flit_bytes,
)
from chipotle.hw.noc.packet import HOST, Head, Packet, PacketType
from chipotle.hw.tile.netif import Reg
from tbcommon.pysim import run_testbench

CONFIG = CONFIGS["small"]
NOC = CONFIG.noc


def test_flit_bytes():
    assert flit_bytes(65) == 10 and flit_bytes(7) == 1 and flit_bytes(8) == 2
    with pytest.raises(ValueError, match="flit width must be positive, not 0"):
        flit_bytes(0)


def test_roundtrip_and_sync_marks():
    rng = np.random.default_rng(0)
    w = NOC.flit_width
    flits = [int(x) for x in rng.integers(0, 1 << 62, 50)] + [(1 << w) - 1, 0, 1 << (w - 1)]
    line = encode_flits(flits, w)
    n = flit_bytes(w)
    assert len(line) == n * len(flits)
    assert [b >> 7 for b in line] == ([1] + [0] * (n - 1)) * len(flits)
    dec = FlitDecoder(w)
    got = []
    for i in range(0, len(line), 7):          # arbitrary chunking
        got += dec.feed(line[i:i + 7])
    assert got == flits and dec.dropped == 0
    with pytest.raises(ValueError, match=f"does not fit {w} bits"):
        encode_flits([1 << w], w)


def test_line_errors_cost_one_flit():
    w = NOC.flit_width
    flits = [0x123456789, (1 << w) - 2, 42, 7]
    line = bytearray(encode_flits(flits, w))
    n = flit_bytes(w)
    del line[n + 4]                            # a byte of flit 1 is lost
    dec = FlitDecoder(w)
    assert dec.feed(bytes([0x05, 0x06]) + line) == [flits[0], *flits[2:]]
    assert dec.dropped == 3                    # two stray bytes, one cut flit
    # bits above the flit width in the last byte: a line error, not a flit
    bad = bytearray(encode_flits([0], w))
    bad[-1] = 0x7F
    assert FlitDecoder(w).feed(bytes(bad)) == []


class FakeChip:
    """A serial port whose far end is a tiny chip: per-tile SRAM words, ``STATUS`` /
    ``ID`` registers, and a ``DONE`` doorbell (code = start PC) per start."""

    def __init__(self, config):
        self.config = config
        self.sram = {xy: {} for xy in config.tiles}
        self.out = bytearray()
        self.timeout = None
        self._dec = FlitDecoder(config.noc.flit_width)
        self._flits = []
        self.started = []

    def _reply(self, pkt: Packet):
        self.out += encode_flits(pkt.flits(NOC), NOC.flit_width)

    def write(self, data):
        for f in self._dec.feed(bytes(data)):
            self._flits.append(f)
            if f >> NOC.payload_width:
                self._handle(Packet.from_flits(self._flits, NOC))
                self._flits = []
        return len(data)

    def _handle(self, p: Packet):
        h, xy = p.head, (p.head.x0, p.head.y0)
        if h.type == PacketType.SRAM_WRITE:
            for k, word in enumerate(p.payload):
                self.sram[xy][h.addr + k] = word
        elif h.type == PacketType.SRAM_READ:
            lw = NOC.length_width
            req = p.payload[0]
            count, space, tag = req & (1 << lw) - 1, req >> lw & 1, req >> lw + 1
            if space:
                regs = {Reg.ID: 0xC0, Reg.STATUS: 3}          # STATUS: halted at pc 0
                words = [regs.get(h.addr + k, 0) for k in range(count)]
            else:
                words = [self.sram[xy].get(h.addr + k, 0) for k in range(count)]
            self._reply(Packet(Head.unicast(PacketType.READ_RESP, HOST, xy, addr=tag,
                                            length=count, cfg=NOC), tuple(words)))
        elif h.type == PacketType.CONTROL and h.addr == Reg.START:
            self.started.append(xy)
            self._reply(Packet(Head.unicast(PacketType.CONTROL, HOST, xy, addr=Reg.DOORBELL,
                                            length=1, cfg=NOC), (p.payload[0] + 0x100,)))

    @property
    def in_waiting(self):
        return len(self.out)

    def read(self, n):
        data, self.out[:] = bytes(self.out[:n]), self.out[n:]
        return data


def test_backend_over_fake_serial():
    chip = FakeChip(CONFIG)
    be = UartBackend(SerialTransport(chip, clock_hz=50e6), CONFIG, poll_cycles=1000)
    rng = np.random.default_rng(1)
    blob = rng.integers(0, 256, 1000, dtype=np.uint8).tobytes()

    async def run():
        await be.reset()
        await be.write_sram((1, 0), 0x13, blob)           # unaligned: merged words
        back = await be.read_sram((1, 0), 0x10, 1006)
        await be.start((0, 1), 5)
        bell = await be.wait_done(10_000)
        status = await be.status((1, 1))
        return back, bell, status

    back, bell, status = asyncio.run(run())
    assert back == bytes(3) + blob + bytes(3)
    assert bell == ((0, 1), 5 + 0x100) and chip.started == [(0, 1)]
    assert status.state == "halted"
    assert be.decoder.dropped == 0 and be.flits_out > 0


def test_backend_bad_input():
    be = UartBackend(SerialTransport(FakeChip(CONFIG), clock_hz=50e6), CONFIG)
    with pytest.raises(ValueError, match=r"tile \(5, 5\) is not in the 2 x 2 mesh"):
        asyncio.run(be.write_sram((5, 5), 0, b"x"))
    with pytest.raises(ValueError, match="SRAM read of 8 bytes at 0x7ffc leaves the SRAM"):
        asyncio.run(be.read_sram((0, 0), CONFIG.sram_bytes - 4, 8))
    with pytest.raises(ValueError, match="clock_hz and baud must be positive, not 0"):
        SerialTransport(FakeChip(CONFIG), clock_hz=0)


def test_bitstream_bad_config_is_a_usage_error(capsys, monkeypatch):
    """``make bitstream CONFIG=...`` with an unknown configuration: a one-line usage error
    (exit 2) naming the known ones, not a traceback, and nothing is built."""
    from chipotle.sim import bitstream

    with pytest.raises(SystemExit) as e:
        bitstream.main(["--synth-only", "--config", "bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    from chipotle.config import CONFIGS

    assert "--config bogus: unknown configuration 'bogus'; known: " + ", ".join(CONFIGS) in err
    assert "Traceback" not in err
    # under make, the error names make's variable instead of the option
    monkeypatch.setenv("CHIPOTLE_MAKE_BITSTREAM", "1")
    with pytest.raises(SystemExit) as e:
        bitstream.main(["--synth-only", "--config", "bogus"])
    assert e.value.code == 2
    assert "CONFIG=bogus: unknown configuration 'bogus'" in capsys.readouterr().err


def test_bridge_overflow_framing_error_and_glitch():
    """The UART bridge's receive side on Amaranth's simulator, bit by bit on its pin: with
    the chip holding ``o_flit`` off, flits beyond the FIFO's are dropped and counted
    (``overflows``) while the buffered ones come out whole and in order; a byte with a low
    stop bit is dropped and counted (``framing_errors``) and costs only its flit; a low
    pulse shorter than half a bit is no start bit.  (No test provoked these before: a
    coverage audit's finding.)"""

    from chipotle.hw.fpga.uart import UartBridge

    width, d, depth = 16, 4, 8
    dut = UartBridge(width, clk_hz=4_000_000, baud=1_000_000, fifo_depth=depth)
    flits = [0x1234 + 0x0101 * k for k in range(depth + 2)]
    seen, counts = [], {}

    async def byte(ctx, b, stop=1):
        for bit in [0, *((b >> i) & 1 for i in range(8)), stop]:
            ctx.set(dut.rx, bit)
            await ctx.tick().repeat(d)
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(d)

    async def collect(ctx, cycles):
        # the chip takes flits only here, so that every transfer is seen
        ctx.set(dut.o_flit.ready, 1)
        for _ in range(cycles):
            if ctx.get(dut.o_flit.valid):
                seen.append(ctx.get(dut.o_flit.payload))
            await ctx.tick()
        ctx.set(dut.o_flit.ready, 0)

    async def bench(ctx):
        ctx.set(dut.o_flit.ready, 0)
        await ctx.tick().repeat(5)
        for b in encode_flits(flits, width):           # 10 flits into a FIFO of 8
            await byte(ctx, b)
        counts["overflows"] = ctx.get(dut.overflows)
        await collect(ctx, 20)
        counts["framing"] = ctx.get(dut.framing_errors)
        line = encode_flits([0x0BAD, 0x600D], width)
        n = flit_bytes(width)
        for k, b in enumerate(line):                   # the first flit's 2nd byte: stop low
            await byte(ctx, b, stop=0 if k == 1 else 1)
        await collect(ctx, 10 * d)
        for k, b in enumerate(encode_flits([0x7777], width)):
            if k == 1:     # inside the flit, a glitch: low for under half a bit (taken as a
                ctx.set(dut.rx, 0)          # start bit it would make a 0xFF byte, a sync
                await ctx.tick().repeat(d // 2 - 1)     # mark, and cut the flit)
                ctx.set(dut.rx, 1)
                await ctx.tick().repeat(2 * d)
            await byte(ctx, b)
        await collect(ctx, 10 * d)
        counts["framing_after"] = ctx.get(dut.framing_errors)
        counts["overflows_after"] = ctx.get(dut.overflows)
        assert n == 3

    run_testbench(dut, bench)
    assert counts["overflows"] == 2 and counts["framing"] == 0, counts
    assert seen[:depth] == flits[:depth], [hex(f) for f in seen]
    # the broken flit is lost, the next one and the one after the glitch arrive whole
    assert seen[depth:] == [0x600D, 0x7777], [hex(f) for f in seen[depth:]]
    assert counts["framing_after"] == 1 and counts["overflows_after"] == 2, counts
