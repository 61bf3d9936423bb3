"""cocotb verification components of the tile-core benches (controller + units, ISA level).

The device under test is a ``TileCore`` (everything of a tile but the network interface).
The bench stands in for the network interface: it loads the SRAM through ``sram``, writes
the instruction memory through ``i_imem``, starts the controller through ``i_start`` and
answers ``o_net`` (``SEND`` to the tile itself, ``DONE``), ``o_wait`` (counters) the way
``NetworkInterface`` does.  The reference model is the ISA simulator
(``chipotle.isasim``) run on the same SRAM image and program; the scoreboard compares the
whole SRAM, the state, error code and PC, the counters, the ``DONE`` codes and the
number of instructions retired.

Members
-------
CORE_CONFIGS, SIM_CORE_CONFIGS
    Bench configurations and which simulator runs which.
BACKDOOR_SIGNALS
    The SRAM arrays a build exposes for the bench's back-door read-back.
NetModel
    The network interface's side of the controller, in Python.
CoreBench
    Driver + net model + reference model + scoreboard.
"""

from __future__ import annotations

import random
from dataclasses import replace

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge
from tbtile import SramMaster, bank_words

from chipotle.config import ChipConfig
from chipotle.hw.tile.controller import ControllerState, PerfIndex
from chipotle.hw.tile.datapath import TileConfig
from chipotle.hw.tile.kvstore import KvParams
from chipotle.hw.tile.netif import NetCommand, NetOp
from chipotle.isa import assemble
from chipotle.isa.core import ErrorCode
from chipotle.isasim import DeadlockError, IsaSim, TileState

#: The SRAM arrays a ``TileCore`` build named ``tile_core`` exposes for `CoreBench.read_sram`'s
#: back door (`chipotle.sim.run_cocotb`'s ``public``).
BACKDOOR_SIGNALS = (("tile_core.sram", "bank*"),)

__all__ = ["BACKDOOR_SIGNALS", "CORE_CONFIGS", "SIM_CORE_CONFIGS", "CORE_TESTS", "LAYER_CONFIG",
           "MESH_CONFIGS", "NetModel", "CoreBench"]

CLOCK_NS = 10


def _bytes(words, word_bytes):
    """Little-endian words as uint8 bytes."""
    return np.frombuffer(b"".join(w.to_bytes(word_bytes, "little") for w in words), np.uint8)

#: Bench configurations of ``TileCore`` (``kv=None``: the tile's KV layout is set at run time,
#: ``CoreBench.kv_layout``).
CORE_CONFIGS = {
    # product-size matrix unit (K up to 512); 16 KiB of SRAM keeps the whole-SRAM
    # read-back after every program short
    "core": TileConfig(sram_bytes=16384, word_bytes=8, n_banks=2, max_m=4, k_max=512,
                       kv=None, imem_words=256),
    # the other parameter values: W = 16, M = 2, V = 4, 4 banks, small SRAM (Icarus)
    "core_small": TileConfig(sram_bytes=8192, word_bytes=16, n_banks=4, max_m=2, k_max=176,
                              kv=None, imem_words=128, n_counters=4, loop_depth=3, lanes=4),
}
#: A stories260K layer on one tile (``chipotle.isa.programs``, ``max_pos`` 16: 59,528 bytes).
LAYER_CONFIG = TileConfig(sram_bytes=65536, word_bytes=8, n_banks=2, max_m=4, k_max=512,
                          kv=None, imem_words=128, lanes=8)
#: Chips of small tiles for the multi-tile bench (``chipotle.hw.chip_verilog``: one tile module,
#: a Verilator hierarchy block; V = 2, M = 2, K <= 64).
MESH_CONFIGS = {
    "mesh2x2": ChipConfig(mesh_width=2, mesh_height=2, sram_bytes=4096, word_bytes=8, n_banks=2,
                          max_m=2, k_max=64, imem_words=64, n_counters=4, lanes=2, vec_slots=3),
    "mesh2x1": ChipConfig(mesh_width=2, mesh_height=1, sram_bytes=4096, word_bytes=8, n_banks=2,
                          max_m=2, k_max=64, imem_words=64, n_counters=4, lanes=2, vec_slots=3),
}
# the other issue policy (``TileConfig.overlap=False``) on the small configuration
CORE_CONFIGS["core_small_serial"] = replace(CORE_CONFIGS["core_small"], overlap=False)
# the SRAM read/write port's other latencies (``TileConfig.sram_latency``): 3 in the
# regression (its delay lines are the longest; 2 runs on the whole chip in
# tb/driver/test_driver_e2e.py), 2 and the small tile's for `mutate_core.py` and by hand
CORE_CONFIGS["core_l2"] = replace(CORE_CONFIGS["core"], sram_latency=2)
CORE_CONFIGS["core_l3"] = replace(CORE_CONFIGS["core"], sram_latency=3)
CORE_CONFIGS["core_small_l3"] = replace(CORE_CONFIGS["core_small"], sram_latency=3)
SIM_CORE_CONFIGS = {"verilator": ("core", "core_l3"),
                    "icarus": ("core_small", "core_small_serial")}
#: The bench's tests a configuration runs when not all of them (``cocotb_core``'s names):
#: the other latencies leave out two of the three long overlap tests (about 40 s each on
#: Verilator), keeping the one with every unit on the port at once.
CORE_TESTS = {name: ("scalar_loops_copy", "matrix", "errors", "vector_dispatch",
                     "wait_send_done", "wait_arrivals", "kv_append", "kv_stream",
                     "overlap_units") for name in ("core_l2", "core_l3", "core_small_l3")}

_STATE_OF = {TileState.HALTED: ControllerState.HALTED, TileState.ERROR: ControllerState.ERROR,
             TileState.WAITING: ControllerState.WAITING, TileState.IDLE: ControllerState.IDLE,
             TileState.RUNNING: ControllerState.RUNNING}


def decode_status(word):
    """Return ``(state, error, pc)`` of a status word."""
    return ControllerState(word & 7), ErrorCode(word >> 4 & 15), word >> 16


class NetModel:
    """The network interface as the controller sees it, for a 1 x 1 mesh.

    ``WAIT``: ``o_wait.ready`` is raised in the cycle the counter suffices (decided on the
    falling edge, from ``valid`` and ``payload``), and the counter is decremented at that
    edge.  ``SEND``: checked in ``chipotle.isasim``'s order (``COUNTER``, ``ROUTE``,
    ``ALIGN``, ``SRAM_RANGE``), copied word by word through the ``sram`` port, then the
    counter bumped; ``DONE``: the code recorded.  The completion is then offered on
    ``i_net_done`` until taken.
    """

    def __init__(self, dut, cfg, sram, *, rng):
        self.dut = dut
        self.cfg = cfg
        self.sram = sram
        self.rng = rng
        self.counters = [0] * cfg.n_counters
        self.done_codes = []
        self.sends = 0
        dut.o_wait__ready.value = 0
        dut.o_net__ready.value = 0
        dut.i_net_done__valid.value = 0
        dut.i_net_done__payload.value = 0

    def reset(self):
        self.counters = [0] * self.cfg.n_counters
        self.done_codes = []
        self.sends = 0

    async def run_wait(self):
        dut = self.dut
        while True:
            await FallingEdge(dut.clk)
            take = None
            if int(dut.o_wait__valid.value):
                p = int(dut.o_wait__payload.value)
                c, need = p & 0xFF, p >> 8
                if self.counters[c] >= need:
                    take = (c, need)
            dut.o_wait__ready.value = int(take is not None)
            await RisingEdge(dut.clk)
            if take is not None:
                self.counters[take[0]] -= take[1]

    async def _execute(self, cmd):
        cfg = self.cfg
        W = cfg.word_bytes
        if cmd.op == NetOp.DONE:
            self.done_codes.append(int(cmd.code))
            return ErrorCode.NONE
        src, dst, n, c = int(cmd.src), int(cmd.dst), int(cmd.length), int(cmd.counter)
        x1, y1 = int(cmd.rect.x1), int(cmd.rect.y1)
        if c >= cfg.n_counters:
            return ErrorCode.COUNTER
        if x1 >= cfg.mesh_width or y1 >= cfg.mesh_height:
            return ErrorCode.ROUTE
        if n % W or src % W or dst % W:
            return ErrorCode.ALIGN
        if src + n > cfg.sram_bytes or dst + n > cfg.sram_bytes:
            return ErrorCode.SRAM_RANGE
        words = [w for w, _ in await self.sram.read(src // W, n // W)] if n else []
        if words:
            await self.sram.write(dst // W, words)
        self.counters[c] += 1
        self.sends += 1
        return ErrorCode.NONE

    async def run_net(self):
        dut = self.dut
        while True:
            await FallingEdge(dut.clk)
            if not int(dut.o_net__valid.value):
                continue
            cmd = NetCommand.from_bits(int(dut.o_net__payload.value))
            op = cmd.op
            dut.o_net__ready.value = 1
            await RisingEdge(dut.clk)
            dut.o_net__ready.value = 0
            for _ in range(self.rng.randrange(4)):
                await RisingEdge(dut.clk)
            err = await self._execute(cmd)
            dut.i_net_done__payload.value = op.value | err.value << 1
            dut.i_net_done__valid.value = 1
            while True:
                await ReadOnly()
                taken = int(dut.i_net_done__ready.value)
                await RisingEdge(dut.clk)
                if taken:
                    break
            dut.i_net_done__valid.value = 0


class CoreBench:
    """Run tile programs on a ``TileCore`` and on the ISA simulator, and compare.

    Parameters
    ----------
    dut
        The DUT handle.
    cfg : TileConfig
    seed : int
    """

    def __init__(self, dut, cfg, *, seed=1):
        self.dut = dut
        self.cfg = cfg
        self.isa = cfg.isa_config()
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.sram = SramMaster(dut, "sram", dut.clk, max_wait=100000,
                               latency=cfg.sram_latency)
        self.net = NetModel(dut, cfg, self.sram, rng=random.Random(seed + 1))
        dut.i_imem__valid.value = 0
        dut.i_start__valid.value = 0
        dut.soft_reset.value = 0
        dut.kv_layout.value = 0
        #: The KV layout the bench drives on ``kv_layout`` (the host's KV registers) and
        #: gives the reference; None: all registers 0.
        self.kv_layout = None
        self.log = dut._log
        self.results = []
        self.background = self.np_rng.integers(0, 256, cfg.sram_bytes, dtype=np.uint8)
        self._rtl_image = None      # what the RTL SRAM holds, when known
        #: the SRAM's bank arrays when the build exposes them (`BACKDOOR_SIGNALS`), else None
        try:
            self._banks = [getattr(dut.sram, f"bank{b}") for b in range(cfg.n_banks)]
        except AttributeError:
            self._banks = None
        self._front_checked = False

    def image(self):
        """Return a copy of the bench's random SRAM background (cheap to load)."""
        return self.background.copy()

    async def start(self):
        """Start the clock and the network model; reset the DUT."""
        cocotb.start_soon(Clock(self.dut.clk, CLOCK_NS, unit="ns").start())
        cocotb.start_soon(self.net.run_wait())
        cocotb.start_soon(self.net.run_net())
        await self.reset()

    async def reset(self):
        """Reset the controller and units (``soft_reset``), as the host's RESET does."""
        self.dut.soft_reset.value = 1
        await ClockCycles(self.dut.clk, 2)
        self.dut.soft_reset.value = 0
        self.net.reset()
        await RisingEdge(self.dut.clk)

    def status(self):
        return decode_status(int(self.dut.status.value))

    def perf(self, k):
        return int(getattr(self.dut, f"perf__{int(k)}").value)

    async def write_imem(self, words, at=0):
        """Write instruction words from index ``at`` (one per cycle)."""
        dut = self.dut
        for i, w in enumerate(words):
            dut.i_imem__payload.value = (at + i) | int(w) << 16
            dut.i_imem__valid.value = 1
            await RisingEdge(dut.clk)
        dut.i_imem__valid.value = 0

    async def load_sram(self, image: np.ndarray):
        """Make the SRAM hold `image` (uint8, ``sram_bytes``): writes the words that differ
        from what the RTL is known to hold (everything the first time)."""
        W = self.cfg.word_bytes
        new = image.reshape(-1, W)
        if self._rtl_image is None:
            todo = np.arange(new.shape[0])
        else:
            todo = np.flatnonzero((self._rtl_image.reshape(-1, W) != new).any(axis=1))
        reqs = [(1, int(a), int.from_bytes(new[a].tobytes(), "little"), (1 << W) - 1)
                for a in todo]
        if reqs:
            out = await self.sram.transfer(reqs)
            assert not any(e for _, e in out)
        self._rtl_image = image.copy()

    async def read_sram(self) -> np.ndarray:
        """Read the whole SRAM back (uint8, ``sram_bytes``).

        Through the bank arrays when the build exposes them (`BACKDOOR_SIGNALS`: no clock
        cycles), after ``2 L + 2`` cycles so that a write still in the port's register
        stages lands; the bench's first read then also goes through the host port
        (``sram_words`` cycles) and must give the same bytes, so the port's read path stays
        covered.  Through the host port alone when the arrays are not exposed.

        Raises
        ------
        AssertionError
            If the host port and the bank arrays disagree.
        """
        W = self.cfg.word_bytes
        if self._banks is None:
            return await self._read_front()
        await ClockCycles(self.dut.clk, 2 * self.cfg.sram_latency + 2)
        got = _bytes(bank_words(self._banks, self.cfg.sram_words), W)
        if not self._front_checked:
            front = await self._read_front()
            diff = np.flatnonzero(front != got)
            assert not diff.size, (
                f"the host port reads {diff.size} bytes other than the bank arrays hold, "
                f"first at {diff[0]:#x}: {front[diff[0]]:#04x} != {got[diff[0]]:#04x}")
            self._front_checked = True
        return got

    async def _read_front(self) -> np.ndarray:
        got = await self.sram.read(0, self.cfg.sram_words)
        return _bytes([w for w, _ in got], self.cfg.word_bytes)

    async def set_kv_layout(self, layout):
        """Drive ``kv_layout`` with `layout` (a ``KvLayout``, or None for all zeros) and wait
        until the KV store's capacity has settled."""
        self.kv_layout = layout
        self.dut.kv_layout.value = 0 if layout is None else \
            KvParams.from_layout(layout).as_bits()
        await ClockCycles(self.dut.clk, 5)

    async def start_at(self, pc):
        dut = self.dut
        dut.i_start__payload.value = pc
        dut.i_start__valid.value = 1
        while True:
            await ReadOnly()
            taken = int(dut.i_start__ready.value)
            await RisingEdge(dut.clk)
            if taken:
                break
        dut.i_start__valid.value = 0

    async def wait_stopped(self, max_cycles):
        """Wait until the controller halts or stops on an error; return the cycles waited."""
        for cyc in range(max_cycles):
            await ReadOnly()
            state, _, _ = self.status()
            if state in (ControllerState.HALTED, ControllerState.ERROR):
                await RisingEdge(self.dut.clk)
                return cyc
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"watchdog: the tile did not stop within {max_cycles} cycles "
                             f"(status {self.status()})")

    async def _arrive(self, cycle, counter, byte_addr, data):
        """A write-and-bump packet `cycle` cycles from now (see `check_program`)."""
        W = self.cfg.word_bytes
        if byte_addr % W or len(data) % W:
            raise ValueError(f"an arrival must be whole words, not {len(data)} bytes at "
                             f"{byte_addr:#x}")
        await ClockCycles(self.dut.clk, cycle)
        words = [int.from_bytes(bytes(data[i:i + W]), "little") for i in range(0, len(data), W)]
        assert not any(await self.sram.write(byte_addr // W, words))
        self.net.counters[counter] += 1

    async def check_program(self, name, program, image=None, *, pc=0, max_cycles=200000,
                            expect=ErrorCode.NONE, bumps=(), arrivals=()):
        """Run `program` (text or words) from `pc` on `image` in the RTL and in isasim.

        Compares the whole SRAM, the state, error code and PC, counters, DONE codes and
        instructions retired; `expect` (an ``ErrorCode``, default ``NONE``) is the error the
        reference must stop with, so that neither an error test nor a success test passes
        vacuously (both sides faulting alike on a program that was meant to run clean);
        None skips that check.  `bumps` are counter increments made by the host before the start.
        `arrivals` are ``(cycle, counter, byte_addr, data)`` packets arriving during the run,
        as a write-and-bump does: ``cycle`` cycles after the start the bench writes ``data``
        (bytes, whole words) at ``byte_addr`` through the network interface's SRAM port,
        then bumps ``counter``.  The reference has the data and the bumps from the start
        (its results do not depend on when they arrive); the RTL's image holds the
        background there until the packet arrives, so an instruction after a WAIT that
        runs before the WAIT is granted reads the old bytes.
        Returns a dict of measurements (RTL and estimated cycles).
        """
        words = assemble(program) if isinstance(program, str) else [int(w) for w in program]
        if image is None:
            image = self.image()
        ref_image = image.copy()
        for _, _c, addr, data in arrivals:
            ref_image[addr:addr + len(data)] = np.frombuffer(bytes(data), np.uint8)
        ref = IsaSim(1, 1, self.isa)
        ref.set_kv_layout((0, 0), self.kv_layout)
        ref.write((0, 0), 0, ref_image)
        ref.load_program((0, 0), words)
        for c in list(bumps) + [c for _, c, _, _ in arrivals]:
            ref.bump_counter((0, 0), c)
        ref.start((0, 0), pc)
        try:
            ref.run(max_instructions=1_000_000)
        except DeadlockError as e:
            raise AssertionError(f"{name}: the reference deadlocks: {e}") from None
        rt = ref.tile((0, 0))
        want_state = _STATE_OF[rt.state]
        if expect is not None:
            assert rt.error == expect, f"{name}: the reference stopped with {rt.error!r} " \
                                       f"({rt.error_message}), the test expects {expect!r}"

        await self.reset()
        await self.load_sram(image)
        await self.write_imem(words)
        for c in bumps:
            self.net.counters[c] += 1
        await self.start_at(pc)
        tasks = [cocotb.start_soon(self._arrive(*a)) for a in arrivals]
        await self.wait_stopped(max_cycles)
        for task in tasks:
            await task
        state, error, rtl_pc = self.status()
        got = await self.read_sram()
        self._rtl_image = got.copy()
        ref_sram = rt.sram
        diff = np.flatnonzero(got != ref_sram)
        msg = []
        if state != want_state or error != rt.error:
            msg.append(f"state {state.name}/{error.name}, reference {want_state.name}/"
                       f"{rt.error.name} ({rt.error_message})")
        if rtl_pc != rt.pc if rt.error == ErrorCode.NONE else rtl_pc != rt.error_pc:
            msg.append(f"pc {rtl_pc}, reference {rt.pc if rt.error_pc is None else rt.error_pc}")
        if diff.size:
            msg.append(f"SRAM differs at {diff.size} bytes, first "
                       + ", ".join(f"{a:#x}: {got[a]:#04x} != {ref_sram[a]:#04x}"
                                   for a in diff[:6]))
        if self.net.counters != rt.counters:
            msg.append(f"counters {self.net.counters}, reference {rt.counters}")
        ref_codes = [e.code for e in ref.events]
        if self.net.done_codes != ref_codes:
            msg.append(f"DONE codes {self.net.done_codes}, reference {ref_codes}")
        capacity = int(self.dut.kv_capacity.value)
        if capacity != rt.kv_capacity:
            msg.append(f"KV capacity {capacity}, reference {rt.kv_capacity}")
        instr = self.perf(PerfIndex.INSTRUCTIONS)
        if instr != rt.perf.instructions:
            msg.append(f"{instr} instructions retired, reference {rt.perf.instructions}")
        assert not msg, f"{name}: " + "; ".join(msg)
        rtl_cycles = self.perf(PerfIndex.CYCLES)
        res = {"name": name, "rtl_cycles": rtl_cycles, "est_cycles": rt.perf.cycles,
               "instructions": instr, "error": rt.error.name,
               "mac_cycles": self.perf(PerfIndex.MAC_CYCLES),
               "matrix_cycles": self.perf(PerfIndex.MATRIX_CYCLES),
               "est_matrix_cycles": rt.perf.matrix_cycles}
        self.log.info("%s: ok (%s, %d RTL cycles, estimate %d)", name, rt.error.name,
                      rtl_cycles, rt.perf.cycles)
        self.results.append(res)
        return res
