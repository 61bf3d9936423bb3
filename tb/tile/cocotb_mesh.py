"""cocotb bench: tile programs on a mesh of whole tiles (a small ``chipotle.hw.Chip``, from
``chip_verilog``) through the host link, against ``chipotle.isasim``.

The host (``tb/noc/nocbench.py``'s packet driver and monitor on the mesh's host link, packets
built by ``netifmodel``) writes every tile's SRAM image and program, starts the tiles, waits
for their ``DONE`` doorbells, then reads back every tile's whole SRAM, its status and its
counters; the ISA simulator runs the same programs on the same images.  Everything must be
equal; the doorbell codes too (per tile, in order).

Environment: ``MESH_CONFIG`` (a key of ``tbcore.MESH_CONFIGS``), ``SEED``.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from netifmodel import control, imem_write, reg_read, sram_read, sram_write, start
from tbcore import MESH_CONFIGS, decode_status

from chipotle.hw.chip import RESET_LATENCY
from chipotle.hw.noc import PacketType
from chipotle.hw.noc.packet import Packet
from chipotle.hw.tile.controller import ControllerState
from chipotle.hw.tile.netif import COUNTER_BASE, KV_REGS, Reg
from chipotle.isa import ErrorCode, assemble
from chipotle.isa.kv import KvLayout, kv_slot
from chipotle.isasim import IsaSim, TileState
from tbcommon.stream import StreamSink

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "noc"))
from nocbench import PacketDriver, PacketMonitor  # noqa: E402

CFG = MESH_CONFIGS[os.environ.get("MESH_CONFIG", "mesh2x2")]
SEED = int(os.environ.get("SEED", "1"))
NOC = CFG.noc
W = CFG.word_bytes
TILES = [(x, y) for y in range(CFG.mesh_height) for x in range(CFG.mesh_width)]


class _Tx:
    def __init__(self, flits):
        self.flits = flits
        self.t_head = self.t_tail = -1


class MeshBench:
    """Host driver, doorbell/response monitor, isasim reference and comparison."""

    def __init__(self, dut, seed=SEED):
        self.dut = dut
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.packets = []

    async def start(self):
        dut = self.dut
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        self.host = PacketDriver(dut, "i_host", dut.clk, idle_prob=0.1,
                                 rng=random.Random(self.rng.random()))
        self.mon = PacketMonitor(dut, "o_host", dut.clk, cfg=NOC,
                                 callback=lambda f: self.packets.append(
                                     Packet.from_flits(list(f), NOC)))
        self.sink = StreamSink(dut, "o_host", dut.clk, stall_prob=0.2,
                               rng=random.Random(self.rng.random()))
        cocotb.start_soon(self.sink.run())
        dut.rst.value = 1
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        await ClockCycles(dut.clk, RESET_LATENCY)  # the chip's reset pipeline

    def send(self, pkt):
        self.host.append(_Tx(pkt.flits(NOC)))

    async def until(self, cond, cycles, what):
        for _ in range(cycles // 10):
            if cond():
                return
            await ClockCycles(self.dut.clk, 10)
        raise AssertionError(f"watchdog: {what} not within {cycles} cycles")

    async def read(self, xy, addr, count, space_reg=False):
        """Read ``count`` SRAM words (or registers) of ``xy``; return them."""
        out = []
        step = NOC.max_length
        for a in range(addr, addr + count, step):
            n = min(step, addr + count - a)
            before = len(self.packets)
            self.send((reg_read if space_reg else sram_read)(xy, a, n, a & 0xFFFF, NOC))
            await self.until(lambda b=before: any(p.head.type == PacketType.READ_RESP
                                                  for p in self.packets[b:]), 20000,
                             "read response")
            resp = [p for p in self.packets[before:] if p.head.type == PacketType.READ_RESP][0]
            self.packets.remove(resp)
            assert (resp.head.src_x, resp.head.src_y) == xy and len(resp.payload) == n, resp
            out += list(resp.payload)
        return out

    def doorbells(self):
        return [(p.head.src_x, p.head.src_y, p.payload[0]) for p in self.packets
                if p.head.type == PacketType.CONTROL and p.head.addr == Reg.DOORBELL]

    async def run(self, name, programs, images, max_cycles=200000, kv_layouts=None,
                  expect=None):
        """Run ``programs[xy]`` on ``images[xy]`` everywhere (RTL and isasim) and compare;
        ``kv_layouts[xy]`` (a ``KvLayout``) is written to the tile's KV registers first.
        ``expect[xy]`` is the error tile ``xy``'s reference must stop with (default
        ``NONE``: halted cleanly).  Returns the reference simulator."""
        isa = CFG.isa_config()
        ref = IsaSim(CFG.mesh_width, CFG.mesh_height, isa)
        for xy, layout in (kv_layouts or {}).items():
            ref.set_kv_layout(xy, layout)
            self.send(control(xy, KV_REGS[0], list(layout.registers()), NOC))
        words = {xy: assemble(programs[xy]) for xy in TILES}
        for xy in TILES:
            ref.write(xy, 0, images[xy])
            ref.load_program(xy, words[xy])
        for xy in TILES:
            ref.start(xy)
        ref.run()
        # a reference that faults where the test means it to run clean (an assembler or
        # layout regression) would fault the RTL alike and pass the comparisons below
        expect = expect or {}
        bad = {xy: (ref.tile(xy).error.name, ref.tile(xy).error_message) for xy in TILES
               if ref.tile(xy).error != expect.get(xy, ErrorCode.NONE)}
        assert not bad, f"{name}: the reference's errors differ from the test's: {bad}"
        want = [(e.tile[0], e.tile[1], e.code) for e in ref.events]
        assert want, f"{name}: the reference rang no doorbell"
        for xy in TILES:
            img = images[xy].reshape(-1, W)
            nz = np.flatnonzero(img.any(axis=1))
            # runs of non-zero words (the RTL SRAM is zero after configuration)
            runs, i = [], 0
            while i < len(nz):
                j = i
                while j + 1 < len(nz) and nz[j + 1] == nz[j] + 1 and j - i < NOC.max_length - 1:
                    j += 1
                runs.append((int(nz[i]), int(nz[j]) + 1))
                i = j + 1
            for lo, hi in runs:
                self.send(sram_write(xy, lo, [int.from_bytes(img[a].tobytes(), "little")
                                              for a in range(lo, hi)], NOC))
            per = (NOC.max_length // 2)
            for k in range(0, len(words[xy]), per):
                self.send(imem_write(xy, k, words[xy][k:k + per], NOC))
        for xy in TILES:
            self.send(start(xy, 0, NOC))
        await self.until(lambda: len(self.doorbells()) >= len(want), max_cycles, "doorbells")
        await ClockCycles(self.dut.clk, 200)
        got_bells = self.doorbells()
        per_tile = {xy: [c for x, y, c in got_bells if (x, y) == xy] for xy in TILES}
        ref_tile = {xy: [c for x, y, c in want if (x, y) == xy] for xy in TILES}
        assert per_tile == ref_tile, (per_tile, ref_tile)
        self.packets = [p for p in self.packets if p.head.addr != Reg.DOORBELL]
        for i, xy in enumerate(TILES):
            t = ref.tile(xy)
            state, error, pc = decode_status(int(getattr(self.dut, f"status__{i}").value))
            [status] = await self.read(xy, Reg.STATUS, 1, space_reg=True)
            assert decode_status(status) == (state, error, pc)
            want_state = {TileState.HALTED: ControllerState.HALTED,
                          TileState.ERROR: ControllerState.ERROR}[t.state]
            assert (state, error) == (want_state, t.error), (xy, state, error, t.error)
            cnt = await self.read(xy, COUNTER_BASE, CFG.n_counters, space_reg=True)
            assert cnt == t.counters, (xy, cnt, t.counters)
            got = await self.read(xy, 0, CFG.sram_words)
            raw = np.frombuffer(b"".join(w.to_bytes(W, "little") for w in got), np.uint8)
            diff = np.flatnonzero(raw != t.sram)
            assert not diff.size, f"{name}: tile {xy} SRAM differs at {diff.size} bytes, " \
                                  f"first {[hex(a) for a in diff[:8]]}"
        self.dut._log.info("%s: ok, doorbells %s", name, got_bells)
        return ref


@cocotb.test()
async def send_wait_multicast(dut):
    """(0,0) sends to (1,0) and multicasts to the bottom row; replies come back with SEND."""
    tb = MeshBench(dut)
    await tb.start()
    size = CFG.sram_bytes
    images = {xy: np.zeros(size, np.uint8) for xy in TILES}
    x = tb.np_rng.integers(-3000, 3000, 64).astype("<i2")
    images[(0, 0)][0x100:0x180] = x.view(np.uint8)
    for xy in TILES:
        images[xy][0x400:0x480] = tb.np_rng.integers(-3000, 3000, 64).astype("<i2").view(np.uint8)
    last = CFG.mesh_width - 1
    programs = {
        (0, 0): f"""
            send  0x200, 0x100, 128, ({last}, 0), 0        ; unicast to the row's end
            send  0x280, 0x100, 128, (0:{last}, 1:1), 1    ; multicast to the bottom row
            send  0, 0, 0, (0:{last}, 0:1), 3              ; signal-only to every tile
            loop  {len(TILES) - 1}, w
            wait  2, 1                                     ; one reply per other tile
        w:
            wait  3, 1
            vadd.i16.i16 0x600, 0x300, 0x400, 64
            done  0x10
            halt
        """,
    }
    for xy in TILES:
        if xy == (0, 0):
            continue
        i = TILES.index(xy)
        src = 0x200 if xy == (last, 0) else 0x280
        programs[xy] = f"""
            wait  {0 if xy == (last, 0) else 1}, 1
            vadd.i16.i16 0x500, {src:#x}, 0x400, 64
            wait  3, 1
            send  {0x300 if i == 1 else 0x700 + 0x80 * i:#x}, 0x500, 128, (0, 0), 2
            done  {0x20 + i}
            halt
        """
    await tb.run("send_wait_multicast", programs, images)


@cocotb.test()
async def kv_registers_and_append(dut):
    """The host sets a different KV layout in every tile through the host link (one reaching
    past the SRAM: capacity 0), reads the registers and KV_CAPACITY back; the tiles append
    K records and V rows with KVAPP; one tile's append at its capacity is refused
    (KV_RANGE) and another's in the layout that does not fit, while the others finish:
    every SRAM, status and doorbell as in the simulator."""
    tb = MeshBench(dut, seed=SEED + 7)
    await tb.start()
    size = CFG.sram_bytes
    lay = {
        (0, 0): KvLayout(n_layers=1, n_kv_heads=2, head_size=8, max_pos=4, base=400,
                         word_bytes=W, k_header=True),
        (1, 0): KvLayout(n_layers=2, n_kv_heads=1, head_size=12, max_pos=3, base=300,
                         word_bytes=W, k_header=True),
        (0, 1): KvLayout(n_layers=1, n_kv_heads=3, head_size=20, max_pos=2, base=256,
                         word_bytes=W, k_header=True),
        (1, 1): KvLayout(n_layers=1, n_kv_heads=1, head_size=5, max_pos=6,
                         base=CFG.sram_words - 12, word_bytes=W, k_header=True),
    }
    assert lay[(1, 1)].end > CFG.sram_words
    images = {xy: tb.np_rng.integers(0, 256, size, dtype=np.uint8) for xy in TILES}
    programs = {}
    for xy, L in lay.items():
        krec, vrow = W * L.k_row_words, W * L.v_row_words
        body = "\n".join(
            f"kvapp {kv_slot(layer, head)}, {0x100 + krec * k:#x}, {0x300 + vrow * k:#x}, {pos}"
            for k, (layer, head, pos) in enumerate(
                (layer, head, pos) for pos in range(L.max_pos)
                for layer in range(L.n_layers) for head in range(L.n_kv_heads)))
        programs[xy] = body + f"\ndone {0x30 + TILES.index(xy)}\nhalt"
    # (1, 0): one more append at its capacity; (1, 1): its first append is refused
    programs[(1, 0)] = programs[(1, 0)].replace(
        "\ndone", f"\nkvapp {kv_slot(1, 0)}, 0x100, 0x300, {lay[(1, 0)].max_pos}\ndone")
    ref = await tb.run("kv_registers_and_append", programs, images, kv_layouts=lay,
                       expect={(1, 0): ErrorCode.KV_RANGE, (1, 1): ErrorCode.KV_RANGE})
    for xy, L in lay.items():
        t = ref.tile(xy)
        got = await tb.read(xy, Reg.KV_BASE, len(KV_REGS) + 1, space_reg=True)
        assert got == [*L.registers(), t.kv_capacity], (xy, got)
        assert t.kv_capacity == (0 if xy == (1, 1) else L.max_pos)
