"""The backend protocol of the driver, its errors, and the ISA-simulator backend.

A backend is what the `Driver` talks to: a chip of one `ChipConfig`, reached through the
operations a host link offers (SRAM writes and reads, instruction-memory writes, starts,
doorbells, register reads).  Every operation is a coroutine, so that the RTL backend
(`chipotle.driver.rtl.RtlBackend`, inside a cocotb test) and the ISA-simulator backend
(`IsaSimBackend`, plain Python) share one driver.

Members
-------
Backend
    The protocol.
TileStatus
    A tile's decoded ``STATUS`` word.
PERF_NAMES, CONTROLLER_PERF, INTERFACE_PERF
    Names of the performance counters `Backend.read_perf` returns.
DriverError, DoorbellTimeout, TileFault, UnexpectedDoorbell, UnfinishedStep
    What goes wrong, with the tile, its error code and its PC.
read_tiles
    Performance counters, statuses and synchronisation counters of many tiles, in one
    flight of reads where the backend offers it.
IsaSimBackend
    The backend over `chipotle.isasim.IsaSim`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from chipotle.config import ChipConfig
from chipotle.hw.tile.controller import PerfIndex
from chipotle.isa import ErrorCode
from chipotle.isasim import DeadlockError, InstructionLimitError, IsaSim, TileState

__all__ = [
    "Backend", "PacketBackend", "TileStatus", "PERF_NAMES", "CONTROLLER_PERF", "INTERFACE_PERF",
    "DriverError", "DoorbellTimeout", "TileFault", "UnexpectedDoorbell", "UnfinishedStep",
    "IsaSimBackend", "decode_status", "read_tiles",
]

#: Controller performance counters: ``PerfIndex`` names of ``chipotle.hw.tile.controller``,
#: lower case, in register order (``PERF_BASE + k``).
CONTROLLER_PERF = tuple(p.name.lower() for p in PerfIndex)
#: Network-interface performance registers ``FLITS_SENT`` .. ``COMMANDS`` (``Reg`` 0x08 ..
#: 0x0D), lower case with the prefix ``ni_`` (the interface's ``NET_STALLS`` is not the
#: controller's).
INTERFACE_PERF = ("ni_flits_sent", "ni_flits_received", "ni_words_written", "ni_words_read",
                  "ni_net_stalls", "ni_commands")
#: Every name `Backend.read_perf` may return (the RTL returns all of them).
PERF_NAMES = CONTROLLER_PERF + INTERFACE_PERF

# isasim `Perf` field -> counter name, where isasim has an equivalent (estimates).
_ISASIM_PERF = {"cycles": "cycles", "instructions": "instructions",
                "vector_busy": "vector_cycles", "wait_stalls": "wait_cycles",
                "matrix_cycles": "matrix_cycles", "mac_cycles": "mac_cycles",
                "ni_flits_sent": "flits_sent"}


@dataclass(frozen=True)
class TileStatus:
    """A tile's controller status (the ``STATUS`` register, ``controller.Status``).

    Attributes
    ----------
    state : str
        A ``chipotle.isasim.TileState`` value: ``"idle"``, ``"running"``, ``"waiting"``,
        ``"halted"`` or ``"error"``.
    error : ErrorCode
        The first error since reset (``ErrorCode.NONE`` when clear).
    pc : int
        The PC; in state ``"error"`` the PC of the faulting instruction.
    """

    state: str
    error: ErrorCode
    pc: int

    def describe(self) -> str:
        """Return e.g. ``"error SRAM_RANGE at pc 12"``."""
        if self.state == TileState.ERROR:
            return f"error {self.error.name} at pc {self.pc}"
        return f"{self.state} at pc {self.pc}"


_STATES = (TileState.IDLE, TileState.RUNNING, TileState.WAITING, TileState.HALTED,
           TileState.ERROR)


def decode_status(word: int) -> TileStatus:
    """Return the `TileStatus` of a ``STATUS`` register word.

    Layout (``chipotle.hw.tile.controller.Status``): state in bits 0-2 (``ControllerState``:
    0 idle, 1 running, 2 waiting, 3 halted, 4 error), error code in bits 4-7, PC in 16-31.

    Raises
    ------
    ValueError
        If the state or error code is not a defined one.
    """
    state = word & 7
    if state >= len(_STATES):
        raise ValueError(f"STATUS word {word:#010x} holds the undefined state {state}")
    return TileStatus(_STATES[state], ErrorCode(word >> 4 & 15), word >> 16 & 0xFFFF)


class DriverError(RuntimeError):
    """Something went wrong on the chip (base of the driver's errors)."""


class TileFault(DriverError):
    """A tile stopped in its ERROR state.

    Attributes
    ----------
    tile : (int, int)
    error : ErrorCode
    pc : int
    """

    def __init__(self, tile, error: ErrorCode, pc: int, detail: str = ""):
        self.tile, self.error, self.pc = tuple(tile), ErrorCode(error), pc
        msg = f"tile ({tile[0]},{tile[1]}) stopped with error {self.error.name} at pc {pc}"
        super().__init__(msg + (f": {detail}" if detail else ""))


class UnexpectedDoorbell(DriverError):
    """A doorbell other than the one a step waits for rang first.

    A compiled step rings exactly one doorbell, from one tile with one code
    (``StepPlan.done``); any other is a fault of the program or of the chip, which a
    driver that dropped it would hide behind a step that still ends with the right one.

    Attributes
    ----------
    got, want : ((int, int), int)
        ``(tile, code)`` of the doorbell that rang and of the one awaited.
    """

    def __init__(self, got, want):
        self.got = (tuple(got[0]), int(got[1]))
        self.want = (tuple(want[0]), int(want[1]))
        (gx, gy), gc = self.got
        (wx, wy), wc = self.want
        super().__init__(f"doorbell {gc} from tile ({gx},{gy}) while waiting for doorbell {wc} "
                         f"from tile ({wx},{wy})")


class UnfinishedStep(DriverError):
    """A step's doorbell rang, but the chip is not at rest after it.

    Every compiled step ends with each tile it started halted and every synchronisation
    counter of every tile back at zero (each ``SEND`` to a counter is taken by a ``WAIT``:
    ``docs/isa.md`` section 1, "Architectural state of a tile"), as the ISA-simulator runner
    (``chipotle.compiler.run.run_plan_isasim``) also requires.  A tile still running or
    waiting, a counter left over or a doorbell rung after the step's own is a fault of the
    program or of the chip that the next step would inherit (a stale counter lets a
    ``WAIT`` pass early).

    Attributes
    ----------
    problems : dict
        ``(x, y) -> str``: what is wrong with each tile found, its findings joined by
        ``", "``: e.g. ``"waiting at pc 6"``, ``"counters 2=1 5=3"`` (counter 2 holds 1,
        counter 5 holds 3), ``"halted at pc 9, doorbell 85 rang after the step's own"``.
        The message joins the tiles by ``"; "``.
    """

    def __init__(self, problems: dict):
        self.problems = {tuple(xy): str(p) for xy, p in problems.items()}
        parts = [f"tile ({x},{y}): {p}" for (x, y), p in sorted(self.problems.items())]
        super().__init__("the step's doorbell rang but the chip is not at rest: "
                         + "; ".join(parts))


class DoorbellTimeout(DriverError):
    """No doorbell arrived within the allowed cycles.

    Attributes
    ----------
    cycles : int
        The timeout, in cycles.
    statuses : dict
        ``(x, y) -> TileStatus`` of every tile when it expired (may be empty).
    """

    def __init__(self, cycles: int, statuses: dict | None = None, detail: str = ""):
        self.cycles = cycles
        self.statuses = dict(statuses or {})
        parts = [f"({x},{y}) {s.describe()}" for (x, y), s in self.statuses.items()]
        msg = f"no doorbell within {cycles} cycles"
        if detail:
            msg += f" ({detail})"
        if parts:
            msg += "; tiles: " + ", ".join(parts)
        super().__init__(msg)


@runtime_checkable
class Backend(Protocol):
    """What the driver needs from a chip (the host link's operations, as coroutines).

    Addresses are byte addresses of a tile's SRAM; ``xy`` is a tile ``(x, y)``.

    Attributes
    ----------
    config : ChipConfig
    cycle : int
        Current cycle: RTL clock cycles since reset, or the ISA simulator's estimate.
    """

    config: ChipConfig

    @property
    def cycle(self) -> int: ...

    async def reset(self) -> None:
        """Reset every tile (controller, counters, error flags, performance counters)."""

    async def write_sram(self, xy, addr: int, data: bytes) -> None:
        """Write ``data`` at byte ``addr`` of tile ``xy``'s SRAM."""

    async def read_sram(self, xy, addr: int, nbytes: int) -> bytes:
        """Return ``nbytes`` bytes from byte ``addr`` of tile ``xy``'s SRAM."""

    async def write_imem(self, xy, words, at: int = 0) -> None:
        """Write 128-bit instruction ``words`` into tile ``xy``'s instruction memory."""

    async def start(self, xy, pc: int) -> None:
        """Start tile ``xy``'s controller at ``pc``."""

    async def wait_done(self, timeout_cycles: int) -> tuple[tuple[int, int], int]:
        """Return ``(xy, code)`` of the next doorbell; raise `DoorbellTimeout` or
        `TileFault`."""

    async def read_perf(self, xy) -> dict[str, int]:
        """Return tile ``xy``'s performance counters by name (see `PERF_NAMES`)."""

    async def status(self, xy) -> TileStatus:
        """Return tile ``xy``'s controller status."""

    async def counters(self, xy) -> list[int]:
        """Return tile ``xy``'s ``config.n_counters`` synchronisation counters (counts of
        ``SEND`` arrivals not yet taken by a ``WAIT``)."""

    def queued_doorbells(self) -> list[tuple[tuple[int, int], int]]:
        """Return ``(xy, code)`` of the doorbells that arrived and `wait_done` has not yet
        returned, oldest first (they stay queued)."""

    async def set_kv_layout(self, xy, layout) -> None:
        """Set tile ``xy``'s KV layout (``chipotle.isa.kv.KvLayout``, or None for none): the
        map its KV store appends (``kvapp``) into (``docs/tile.md``, "KV store")."""


def _asyncio_running() -> bool:
    """Whether an asyncio event loop runs this code (not cocotb's scheduler)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _check_xy(config: ChipConfig, xy) -> tuple[int, int]:
    xy = tuple(xy)
    if len(xy) != 2 or not (0 <= xy[0] < config.mesh_width and 0 <= xy[1] < config.mesh_height):
        raise ValueError(f"tile {xy} is not in the {config.mesh_width} x {config.mesh_height} "
                         "mesh")
    return xy


def _check_range(config: ChipConfig, addr: int, nbytes: int, what: str) -> None:
    if addr < 0 or nbytes < 0 or addr + nbytes > config.sram_bytes:
        raise ValueError(f"{what} of {nbytes} bytes at {addr:#x} leaves the SRAM "
                         f"({config.sram_bytes} bytes)")



class PacketBackend:
    """The host-link side shared by the backends that speak packets (RTL, UART).

    Subclasses provide ``config`` (`ChipConfig`), ``noc`` (its ``NocConfig``),
    ``async send(packets)`` (inject ``chipotle.hw.noc.packet.Packet`` objects in order),
    ``async _reads(xy, requests, space)`` (answer ``[(word or register address, count),
    ...]`` read requests of tile ``xy`` in ``space`` 0 = SRAM, 1 = registers, one list of
    words per request), ``async _wait_cycles(n)`` (let ``n`` chip cycles pass) and
    ``_bells`` (a deque of the ``(xy, code)`` doorbells received, not yet returned by
    ``wait_done``); this class builds every `Backend` operation on them (``docs/tile.md``,
    "Network interface").
    """

    def drain_cycles(self) -> int:
        """Cycles within which every packet on the network has landed once no tile starts
        another: each tile's last packet (at most ``max_length`` payload flits and its head)
        queued behind every other tile's on one link, plus the mesh's diameter at two
        cycles a hop (`reset` waits this long between its two phases)."""
        cfg = self.config
        return (cfg.n_tiles * (self.noc.max_length + 1)
                + 2 * (cfg.mesh_width + cfg.mesh_height) + 16)

    async def reset(self) -> None:
        """Reset every tile, in two phases; SRAM and instruction memory are kept, doorbells
        not yet taken are dropped.

        1. ``RESET`` = ``RESET_ALL`` (``0b111``: controller, counters, error flags and
           interface counters) to every tile, then a register read of each, which answers
           once its reset took effect.  A tile's network interface stops a ``SEND`` in
           progress at its packet boundary and drops its completion (the packet on the
           wire is finished: ``docs/noc.md``, "Limits and open points").
        2. After `drain_cycles`, when every such packet has landed, ``RESET`` = counters and
           error flags cleared (``0b110``) again, and again a read of each tile: a SEND's
           last packet that landed after phase 1 bumped its receivers' counter after they
           were cleared.
        """
        from chipotle.hw.tile.netif import Reg

        from . import hostlink as hl

        for bits, pause in ((hl.RESET_ALL, True), (hl.RESET_ALL & ~1, False)):
            await self.send([hl.reset(xy, bits, self.noc) for xy in self.config.tiles])
            for xy in self.config.tiles:
                await self.read_registers(xy, Reg.ID, 1)
            if pause:
                await self._wait_cycles(self.drain_cycles())
        self._bells.clear()

    def queued_doorbells(self) -> list[tuple[tuple[int, int], int]]:
        """Return the doorbells received that `wait_done` has not yet returned, oldest
        first."""
        return [(tuple(xy), int(code)) for xy, code in self._bells]

    async def read_registers(self, xy, reg: int, count: int) -> list[int]:
        """Return ``count`` control registers of tile ``xy`` from register ``reg`` on."""
        [words] = await self._reads(_check_xy(self.config, xy), [(reg, count)], 1)
        return words

    async def write_sram(self, xy, addr: int, data: bytes, *, skip_zero: bool = False) -> None:
        """Write ``data`` at byte ``addr`` of tile ``xy`` (packets of up to 255 words).

        Partial words at either end are read, merged and written back.  ``skip_zero``
        leaves out all-zero words (for an SRAM known to be zero).

        Raises
        ------
        ValueError
            If the tile is not in the mesh or the range leaves the SRAM.
        """
        from . import hostlink as hl

        xy = _check_xy(self.config, xy)
        data = bytes(data)
        _check_range(self.config, addr, len(data), "SRAM write")
        if not data:
            return
        w = self.config.word_bytes
        lo, hi = addr - addr % w, -(-(addr + len(data)) // w) * w
        if (lo, hi) != (addr, addr + len(data)):
            old = bytearray(await self.read_sram(xy, lo, hi - lo))
            old[addr - lo:addr - lo + len(data)] = data
            data, addr = bytes(old), lo
        await self.send(hl.sram_write_packets(xy, addr, data, self.noc, w, skip_zero=skip_zero))

    async def read_sram(self, xy, addr: int, nbytes: int) -> bytes:
        """Return ``nbytes`` bytes from byte ``addr`` of tile ``xy`` (reads of up to 255
        words).

        Raises
        ------
        ValueError
            If the tile is not in the mesh or the range leaves the SRAM.
        """
        from . import hostlink as hl

        xy = _check_xy(self.config, xy)
        _check_range(self.config, addr, nbytes, "SRAM read")
        if nbytes == 0:
            return b""
        w = self.config.word_bytes
        chunks = list(hl.sram_read_chunks(addr, nbytes, w, self.noc.max_length))
        words = [x for part in await self._reads(xy, chunks, 0) for x in part]
        raw = hl.words_to_bytes(words, w)
        return raw[addr % w:addr % w + nbytes]

    async def write_imem(self, xy, words, at: int = 0) -> None:
        """Write instruction ``words`` from instruction ``at`` on.

        Raises
        ------
        ValueError
            If the program does not fit the instruction memory.
        """
        from . import hostlink as hl

        xy = _check_xy(self.config, xy)
        words = [int(x) for x in words]
        if at < 0 or at + len(words) > self.config.imem_words:
            raise ValueError(f"a program of {len(words)} words at {at} does not fit the "
                             f"instruction memory ({self.config.imem_words} words)")
        await self.send(hl.imem_write_packets(xy, words, self.noc, at))

    async def start(self, xy, pc: int) -> None:
        """Write tile ``xy``'s ``START`` register."""
        from . import hostlink as hl

        await self.send([hl.start(_check_xy(self.config, xy), pc, self.noc)])

    async def status(self, xy) -> TileStatus:
        """Return tile ``xy``'s ``STATUS`` register, decoded."""
        from chipotle.hw.tile.netif import Reg

        [word] = await self.read_registers(xy, Reg.STATUS, 1)
        return decode_status(word)

    async def counters(self, xy) -> list[int]:
        """Return tile ``xy``'s synchronisation counters (registers ``COUNTER_BASE + c``)."""
        from chipotle.hw.tile.netif import COUNTER_BASE

        return await self.read_registers(xy, COUNTER_BASE, self.config.n_counters)

    async def set_kv_layout(self, xy, layout) -> None:
        """Write tile ``xy``'s five KV layout registers (``KV_BASE`` .. ``KV_MAX_POS``, one
        control packet) with ``layout.registers()``, or zeros (capacity 0) for None."""
        from chipotle.hw.tile.netif import KV_REGS

        from . import hostlink as hl

        words = [0] * len(KV_REGS) if layout is None else list(layout.registers())
        await self.send([hl.control(_check_xy(self.config, xy), KV_REGS[0], words, self.noc)])

    async def read_perf(self, xy) -> dict[str, int]:
        """Return every counter of `PERF_NAMES` (the controller's and the interface's)."""
        from chipotle.hw.tile.controller import N_PERF
        from chipotle.hw.tile.netif import PERF_BASE, Reg

        ctrl, ni = await self._reads(_check_xy(self.config, xy),
                                     [(PERF_BASE, N_PERF), (Reg.FLITS_SENT, len(INTERFACE_PERF))],
                                     1)
        return dict(zip(CONTROLLER_PERF + INTERFACE_PERF, ctrl + ni, strict=True))


class IsaSimBackend:
    """The backend over `chipotle.isasim.IsaSim` (instant host link, estimated cycles).

    Tiles run when the driver waits for a doorbell: `wait_done` runs the simulator until
    every started tile halts, stops on an error or blocks, then hands out the doorbells in
    the order executed.  ``cycle`` advances by the tiles' estimated cycles (the largest
    advance of any tile between two waits).

    Parameters
    ----------
    config : ChipConfig

    Attributes
    ----------
    sim : chipotle.isasim.IsaSim
        The simulator (tests inspect it).
    """

    def __init__(self, config: ChipConfig):
        self.config = config
        self.sim = IsaSim(config.mesh_width, config.mesh_height, config.isa_config())
        self._events: deque = deque()
        self._seen = 0
        self._cycle = 0
        self._mark = {t.xy: 0 for t in self.sim.tiles}

    @property
    def cycle(self) -> int:
        """Estimated cycles since construction."""
        return self._cycle

    async def reset(self) -> None:
        """Reset every tile (`IsaSim.reset`); SRAM and instruction memory are kept."""
        self.sim.reset()
        self._events.clear()
        self._seen = 0
        self._mark = {t.xy: 0 for t in self.sim.tiles}

    async def write_sram(self, xy, addr: int, data: bytes) -> None:
        """Write ``data`` at byte ``addr`` of tile ``xy``'s SRAM.

        Raises
        ------
        ValueError
            If the tile is not in the mesh or the range leaves the SRAM.
        """
        xy = _check_xy(self.config, xy)
        data = bytes(data)
        _check_range(self.config, addr, len(data), "SRAM write")
        self.sim.write(xy, addr, np.frombuffer(data, np.uint8))

    async def read_sram(self, xy, addr: int, nbytes: int) -> bytes:
        """Return ``nbytes`` bytes from byte ``addr`` of tile ``xy``'s SRAM.

        Raises
        ------
        ValueError
            If the tile is not in the mesh or the range leaves the SRAM.
        """
        xy = _check_xy(self.config, xy)
        _check_range(self.config, addr, nbytes, "SRAM read")
        return self.sim.read(xy, addr, nbytes).tobytes()

    async def write_imem(self, xy, words, at: int = 0) -> None:
        """Write instruction ``words`` from instruction ``at`` on.

        Raises
        ------
        ValueError
            If the program does not fit the instruction memory.
        """
        self.sim.load_program(_check_xy(self.config, xy), [int(w) for w in words], at)

    async def start(self, xy, pc: int) -> None:
        """Start tile ``xy`` at ``pc`` (it runs in `wait_done`).

        Raises
        ------
        ValueError
            If the tile's error flag is set or ``pc`` is out of range.
        """
        xy = _check_xy(self.config, xy)
        # Every tile's estimated clock is its own; a tile that sat halted while others ran
        # has fallen behind the host's time.  Start it at the latest clock of the mesh (the
        # moment the host starts the step), as the RTL's clock runs on while a tile idles;
        # otherwise a pipeline stage would seem to find its input already there.
        t = self.sim.tile(xy)
        t.perf.cycles = max(t.perf.cycles, max(u.perf.cycles for u in self.sim.tiles))
        self.sim.start(xy, pc)

    def _advance(self) -> None:
        # The step's estimated length: from the latest clock at the last mark to the latest
        # clock now (tiles are aligned to the latest clock when started).
        before = max(self._mark.values())
        adv = max(t.perf.cycles for t in self.sim.tiles) - before
        self._cycle += max(adv, 0)
        self._mark = {t.xy: t.perf.cycles for t in self.sim.tiles}

    def _fault(self):
        for t in self.sim.tiles:
            if t.state == TileState.ERROR:
                return TileFault(t.xy, t.error, t.error_pc or 0, t.error_message)
        return None

    async def wait_done(self, timeout_cycles: int) -> tuple[tuple[int, int], int]:
        """Run the tiles and return ``(xy, code)`` of the next doorbell.

        Raises
        ------
        TileFault
            If a tile stopped on an error before ringing.
        DoorbellTimeout
            If no doorbell comes: the tiles halted or deadlocked without one, or the
            doorbell came more than ``timeout_cycles`` estimated cycles after the wait began.
        """
        if not self._events:
            base = dict(self._mark)
            detail = ""
            try:
                # between rounds, hand control to the asyncio loop (when there is one: cocotb
                # runs this backend too), so that the task can be cancelled (Ctrl-C under
                # `asyncio.run`) within a round instead of at the end of the step
                pause = _asyncio_running()
                for _ in self.sim.rounds():
                    if pause:
                        await asyncio.sleep(0)
            except (DeadlockError, InstructionLimitError) as e:   # (the latter: no end)
                detail = str(e)
            new = self.sim.events[self._seen:]
            self._seen = len(self.sim.events)
            for ev in new:
                self._events.append((ev, ev.cycle - base[ev.tile]))
            self._advance()
            if not self._events:
                fault = self._fault()
                if fault is not None:
                    raise fault
                statuses = {t.xy: self._status(t) for t in self.sim.tiles}
                raise DoorbellTimeout(timeout_cycles, statuses,
                                      detail or "every tile stopped without ringing")
        ev, after = self._events.popleft()
        if after > timeout_cycles:
            raise DoorbellTimeout(timeout_cycles, {t.xy: self._status(t) for t in self.sim.tiles},
                                  f"tile {ev.tile} rang {ev.code:#x} only after {after} "
                                  "estimated cycles")
        return tuple(ev.tile), int(ev.code)

    @staticmethod
    def _status(t) -> TileStatus:
        pc = t.error_pc if t.state == TileState.ERROR and t.error_pc is not None else t.pc
        return TileStatus(t.state, ErrorCode(t.error), pc)

    async def status(self, xy) -> TileStatus:
        """Return tile ``xy``'s status."""
        return self._status(self.sim.tile(_check_xy(self.config, xy)))

    async def counters(self, xy) -> list[int]:
        """Return tile ``xy``'s synchronisation counters (``IsaSim`` tile ``counters``)."""
        return list(self.sim.tile(_check_xy(self.config, xy)).counters)

    def queued_doorbells(self) -> list[tuple[tuple[int, int], int]]:
        """Return the doorbells the last run rang that `wait_done` has not yet returned."""
        return [(tuple(ev.tile), int(ev.code)) for ev, _ in self._events]

    async def set_kv_layout(self, xy, layout) -> None:
        """Set tile ``xy``'s KV layout (`IsaSim.set_kv_layout`)."""
        self.sim.set_kv_layout(_check_xy(self.config, xy), layout)

    async def read_perf(self, xy) -> dict[str, int]:
        """Return the counters isasim estimates, under the RTL's names (32-bit wrapping).

        Only ``cycles``, ``instructions``, ``vector_busy``, ``wait_stalls``,
        ``matrix_cycles``, ``mac_cycles`` and ``ni_flits_sent``.
        """
        p = self.sim.tile(_check_xy(self.config, xy)).perf
        return {name: getattr(p, field) & 0xFFFFFFFF for name, field in _ISASIM_PERF.items()}


async def read_tiles(backend, tiles, *, perf: bool, state: bool) -> dict:
    """Read ``tiles``' performance counters and / or their state, one dict per tile.

    Returns ``{xy: {"perf": dict, "status": TileStatus, "counters": list[int]}}`` with
    ``"perf"`` (`Backend.read_perf`) if ``perf`` and ``"status"`` and ``"counters"``
    (`Backend.status`, `Backend.counters`) if ``state``.  A backend with a
    ``read_tiles_many(tiles, perf=, state=)`` (``RtlBackend``) answers with every read in
    flight at once; the others are asked tile by tile.
    """
    many = getattr(backend, "read_tiles_many", None)
    if many is not None:
        return await many(tiles, perf=perf, state=state)
    out = {}
    for xy in tiles:
        d = out[tuple(xy)] = {}
        if perf:
            d["perf"] = await backend.read_perf(xy)
        if state:
            d["status"] = await backend.status(xy)
            d["counters"] = await backend.counters(xy)
    return out
