"""ISA-level simulator: tile programs on a W x H mesh, in Python and numpy.

Every tile has an SRAM (bytes), an instruction memory, 16 scalar registers, counters
(semaphores), a hardware loop stack, the vector unit's tables, a PC, an error flag and an
estimated cycle count.  SEND writes into other tiles' SRAM (unicast or a multicast
rectangle) and bumps a counter there; WAIT blocks until a counter holds a value and takes it.
A deterministic scheduler interleaves the tiles and detects deadlock.  The arithmetic of
every vector and matrix instruction is the golden model's (`chipotle.golden.numerics`): this
module reads operands, calls the golden primitive and writes the result, so it is bit-exact
with `chipotle.golden.GoldenModel` by construction.  The instruction set is specified in
``docs/isa.md``.

Cycle counts are an estimate (`chipotle.isa.instr_cycles` plus WAIT stalls, network latency
and the queueing of arriving flits at each tile's network port); the RTL is the authority on
cycles.

Example
-------
>>> from chipotle.isasim import IsaSim
>>> sim = IsaSim(2, 1)
>>> sim.load_program((0, 0), "send 0x100, 0x0, 8, (1, 0), 0\\nhalt")
>>> sim.load_program((1, 0), "wait 0, 1\\ndone 7\\nhalt")
>>> sim.start((0, 0)); sim.start((1, 0)); sim.run()
>>> sim.events[0].code
7
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from .golden import numerics as nx
from .isa import asm
from .isa.core import (
    DTYPE_INFO,
    SCALAR_OPS,
    TABLE_ENTRIES,
    Addr,
    Dtype,
    ErrorCode,
    IllegalInstruction,
    Instr,
    IsaConfig,
    Len,
    Opcode,
    TableId,
    background_unit,
    decode,
    go_cycles,
    hazard,
    instr_cycles,
    is_decode_op,
    issue_cycles,
    kvapp_footprint,
    matrix_footprint,
    mem_footprint,
    rect_decode,
    scoreboard_limit,
    send_flits,
    send_footprint,
    signed_imm,
    table_footprint,
    vector_footprint,
)
from .isa.kv import KvLayout

__all__ = ["IsaSim", "Tile", "Perf", "DoneEvent", "DeadlockError", "InstructionLimitError",
           "TileState", "weighted_sum"]

_MASK32 = 0xFFFFFFFF


class TileState:
    """States of a tile's controller (strings, for readable reports)."""

    IDLE = "idle"          #: never started, or reset
    RUNNING = "running"
    WAITING = "waiting"    #: blocked on a WAIT
    HALTED = "halted"      #: executed HALT
    ERROR = "error"        #: stopped with its error flag set


@dataclass
class Perf:
    """Performance counters of one tile (estimates; cycles are the tile's clock).

    Attributes
    ----------
    cycles : int
        Estimated cycles since reset, WAIT stalls included.
    instructions : int
        Instructions executed.
    matrix_cycles, vector_cycles, dma_cycles : int
        Cycles spent in matrix, vector and data-movement (COPY, SEND, TABLE) instructions.
    wait_cycles : int
        Cycles stalled on WAIT.
    macs : int
        Useful int8 multiply-accumulates of the matrix unit (``M * N * K`` per instruction).
    mac_cycles : int
        Cycles the matrix unit issues a weight word, ``N * ceil(K / W)`` per instruction: the
        RTL's ``MAC_CYCLES`` counter (``docs/tile.md``, "Performance counters").
    flits_sent : int
        NoC flits sent, heads included.
    bytes_sent, bytes_received : int
        SRAM bytes moved by SEND, counted at the sender and at each receiver.
    """

    cycles: int = 0
    instructions: int = 0
    matrix_cycles: int = 0
    vector_cycles: int = 0
    dma_cycles: int = 0
    wait_cycles: int = 0
    macs: int = 0
    mac_cycles: int = 0
    flits_sent: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0


@dataclass(frozen=True)
class DoneEvent:
    """A DONE instruction's notification to the host.

    Attributes
    ----------
    tile : tuple of int
        ``(x, y)`` of the tile.
    code : int
        The instruction's 16-bit code.
    cycle : int
        The tile's estimated cycle count when it executed DONE.
    """

    tile: tuple
    code: int
    cycle: int


class InstructionLimitError(RuntimeError):
    """`IsaSim.run` gave up after its ``max_instructions``: a program that does not end."""


class DeadlockError(RuntimeError):
    """Every tile is halted or waiting, and at least one is waiting.

    Attributes
    ----------
    waiting : list of tuple
        ``((x, y), pc, counter, needed, held)`` for every waiting tile.
    """

    def __init__(self, waiting, others):
        self.waiting = waiting
        parts = [f"tile ({x},{y}) at pc {pc} waits for counter {c} to reach {need} "
                 f"(it holds {have})" for (x, y), pc, c, need, have in waiting]
        parts += [f"tile ({x},{y}) is {state}" for (x, y), state in others]
        super().__init__("deadlock: no tile can make progress: " + "; ".join(parts))


#: The controller's own SRAM instructions: they wait only on a hazard.
_MEM_OPS = frozenset({Opcode.LD, Opcode.ST, Opcode.COPY})


class _Fault(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class _InFlight:
    """A unit's last background instruction (``IsaConfig.overlap``): a scoreboard entry."""

    reads: list
    write: tuple
    until: int                  # estimated cycle the unit finishes it
    pc: int
    fault: _Fault | None        # its error, reported at the next sync point
    seq: int                    # issue order (the oldest fault is reported)


def weighted_sum(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Return ``sum_t p[t] * v[t, :]``: attention's probability-weighted sum of V rows.

    The golden model computes this inline (``np.einsum`` in ``GoldenModel.forward_batch``,
    ``docs/numerics.md`` section 4.6); this adapter is the same int32 sum for one head.

    Parameters
    ----------
    p : numpy.ndarray
        uint16 Q1.15, shape ``(T,)``.
    v : numpy.ndarray
        int8, shape ``(T, D)``.

    Returns
    -------
    numpy.ndarray
        int32, shape ``(D,)``, wrapping at 32 bits as the vector unit's accumulator does
        (``|.| < 2**24`` for a softmax's probabilities, which sum to about ``2**15``).
    """
    return (p.astype(np.int32)[None, :] @ v.astype(np.int32))[0]


class Tile:
    """The architectural state of one tile (owned by an `IsaSim`).

    Attributes
    ----------
    x, y : int
        Coordinates in the mesh.
    sram : numpy.ndarray
        uint8, shape ``(sram_bytes,)``.
    imem : list of int
        ``imem_words`` instruction words.  Write them with `IsaSim.load_program`: the tile
        keeps each PC's decoded instruction and cycle estimate until the next load, so a
        word assigned here directly runs as the old one.
    regs : list of int
        16 unsigned 32-bit registers (``regs[0]`` is always 0).
    pc : int
    state : str
        A `TileState` value.
    error : ErrorCode
        The first error since reset (``ErrorCode.NONE`` when the flag is clear).
    error_pc : int or None
        PC of the instruction that raised the error.
    error_message : str
        What went wrong, for people.
    perf : Perf
    kv_layout : KvLayout or None
        The KV layout the host set (the tile's KV registers; ``None``: never set).  Kept by
        `reset`, like the SRAM.
    """

    def __init__(self, sim: IsaSim, x: int, y: int):
        c = sim.config
        self._sim = sim
        self.x, self.y = x, y
        self.sram = np.zeros(c.sram_bytes, np.uint8)
        self.imem = [0] * c.imem_words
        self._decoded: dict = {}
        # `instr_cycles` of the instruction at a PC, by (pc, n, k): a pure function of the
        # instruction there (`_decoded`'s) and its resolved operands, cleared with it
        self._cycles: dict = {}
        self.kv_layout: KvLayout | None = None
        self.reset()

    @property
    def kv_capacity(self) -> int:
        """Positions per (layer, KV head) the tile reports (its ``KV_CAPACITY`` register).

        ``kv_layout.max_pos`` when a layout is set and lies inside the SRAM, else 0.
        """
        L = self.kv_layout
        return 0 if L is None else L.capacity_in(self.sram.size // self._sim.config.word_bytes)

    def reset(self) -> None:
        """Clear registers, counters, tables, loop stack, error flag and performance counters.

        SRAM and instruction memory keep their contents.
        """
        c = self._sim.config
        self.regs = [0] * 16
        self._counters: list[list[int]] = [[] for _ in range(c.n_counters)]
        self.tables: dict = {}
        self._loops: list[list[int]] = []
        self.pc = 0
        self.state = TileState.IDLE
        self.error = ErrorCode.NONE
        self.error_pc = None
        self.error_message = ""
        self.perf = Perf()
        self._wait = None
        #: The controller's instruction-memory read port is a word ahead (`CostModel.refill`)
        self._ahead = False
        #: the instruction being run was held before it ran (a scoreboard wait)
        self._stalled = False
        #: the instruction being run settled the fetch itself (`IsaSim._fetch_next`)
        self._fetched = False
        #: The scoreboard: unit (`BACKGROUND_UNITS`) -> its entry, while in flight or faulted.
        self._busy: dict[str, _InFlight] = {}
        self._seq = 0
        #: Cycles in which the tile's network port delivers a flit (`IsaSim._deliver`):
        #: sorted, disjoint ``[start, end)`` intervals.
        self._port: list[list[int]] = []

    @property
    def counters(self) -> list[int]:
        """Current value of every counter."""
        return [len(q) for q in self._counters]

    @property
    def xy(self) -> tuple:
        """``(x, y)``."""
        return self.x, self.y

    # -- operand access -------------------------------------------------------------------------

    def _val(self, a: Addr) -> int:
        return (self.regs[a.reg] + a.off) & _MASK32

    def _len(self, n: Len) -> int:
        return (self.regs[n.reg] + n.imm) & _MASK32

    def _span(self, addr: int, nbytes: int, align: int = 1, what: str = "operand") -> None:
        if addr % align:
            raise _Fault(ErrorCode.ALIGN, f"{what} address {addr:#x} is not a multiple of "
                                          f"{align}")
        if addr + nbytes > self.sram.size:
            raise _Fault(ErrorCode.SRAM_RANGE,
                         f"{what} {addr:#x}..{addr + nbytes - 1:#x} is past the end of the "
                         f"SRAM ({self.sram.size} bytes)")

    def _read(self, addr: int, count: int, dtype: Dtype, what: str = "source",
              align: int | None = None) -> np.ndarray:
        info = DTYPE_INFO[dtype]
        self._span(addr, count * info.size, align or info.size, what)
        return self.sram[addr:addr + count * info.size].view(info.np).copy()

    def _write(self, addr: int, values: np.ndarray, dtype: Dtype, what: str = "destination",
               align: int | None = None) -> None:
        info = DTYPE_INFO[dtype]
        raw = np.ascontiguousarray(np.asarray(values).astype(info.np)).view(np.uint8)
        self._span(addr, raw.size, align or info.size, what)
        self.sram[addr:addr + raw.size] = raw.reshape(-1)

    def _rows(self, addr: int, rows: int, stride: int, length: int, what: str) -> np.ndarray:
        """Read ``rows`` rows of ``length`` int8 at ``addr + r * stride``."""
        end = addr + (rows - 1) * stride + length
        if end > self.sram.size:
            raise _Fault(ErrorCode.SRAM_RANGE, f"{what} rows {addr:#x}..{end - 1:#x} reach past "
                                               f"the end of the SRAM ({self.sram.size} bytes)")
        idx = addr + np.arange(rows)[:, None] * stride + np.arange(length)[None, :]
        return self.sram[idx].view(np.int8)

    def _table(self, tid: TableId) -> np.ndarray:
        if tid not in self.tables:
            raise _Fault(ErrorCode.TABLE, f"the {tid.name.lower()} table was never loaded "
                                          f"(TABLE {tid.name.lower()}, addr)")
        return self.tables[tid]


#: The instructions the controller can retire in their first cycle (state Execute): the
#: single-cycle scalar ones, ``wait`` (its request then waits in registers) and, with
#: ``overlap``, a ``send`` the network interface takes at once (`CostModel.refill`).
_FIRST_CYCLE_OPS = (SCALAR_OPS - {Opcode.LOOP}) | {Opcode.WAIT, Opcode.SEND}


class IsaSim:
    """Instruction-level simulator of a ``width`` x ``height`` mesh of tiles.

    Parameters
    ----------
    width, height : int
        Mesh columns and rows (1 .. 16 each: a SEND rectangle has 4-bit coordinates).
    config : IsaConfig, optional
        Tile parameters (SRAM size, W, M, V, ...); the default is `IsaConfig()`.

    Raises
    ------
    ValueError
        If `width` or `height` is not an integer in ``[1, 16]``.

    Attributes
    ----------
    config : IsaConfig
    width, height : int
    events : list of DoneEvent
        DONE notifications, in the order executed.

    Notes
    -----
    Tiles are addressed by ``(x, y)`` tuples.  The scheduler (`run`) visits running tiles in
    row-major order, each for up to ``quantum`` instructions or until it blocks or stops, so a
    run is deterministic.  A SEND's data is in the receivers' SRAM as soon as the SEND
    executes; a correct program reads it only after a WAIT on the counter the SEND bumps.
    """

    def __init__(self, width: int = 1, height: int = 1, config: IsaConfig | None = None):
        for name, v in (("width", width), ("height", height)):
            if not isinstance(v, int) or not 1 <= v <= 16:
                raise ValueError(f"`{name}` must be an integer in [1, 16], not {v!r}")
        self.config = config or IsaConfig()
        # the scoreboard's range limit (`scoreboard_limit`), once, not per hazard check
        self._sb_limit = scoreboard_limit(self.config.sram_bytes)
        self.width, self.height = width, height
        self._tiles = {(x, y): Tile(self, x, y) for y in range(height) for x in range(width)}
        self.events: list[DoneEvent] = []

    # -- host API -------------------------------------------------------------------------------

    def tile(self, xy) -> Tile:
        """Return the tile at ``xy = (x, y)``.

        Raises
        ------
        KeyError
            If there is no such tile.
        """
        xy = tuple(xy)
        if xy not in self._tiles:
            raise KeyError(f"no tile at {xy} in a {self.width} x {self.height} mesh")
        return self._tiles[xy]

    @property
    def tiles(self) -> list[Tile]:
        """Every tile, row-major."""
        return list(self._tiles.values())

    def write(self, xy, addr: int, data) -> None:
        """Write bytes (or any numpy array, as its little-endian bytes) into a tile's SRAM.

        Raises
        ------
        ValueError
            If the range leaves the SRAM.
        """
        t = self.tile(xy)
        raw = np.ascontiguousarray(np.asarray(data) if not isinstance(data, (bytes, bytearray))
                                   else np.frombuffer(data, np.uint8))
        if raw.dtype.byteorder == ">":
            raw = raw.astype(raw.dtype.newbyteorder("<"))
        raw = raw.view(np.uint8).reshape(-1)
        if not (0 <= addr and addr + raw.size <= t.sram.size):
            raise ValueError(f"SRAM write {addr:#x} + {raw.size} bytes leaves the SRAM "
                             f"({t.sram.size} bytes)")
        t.sram[addr:addr + raw.size] = raw

    def read(self, xy, addr: int, count: int, dtype=np.uint8) -> np.ndarray:
        """Read ``count`` elements of ``dtype`` (little-endian) from a tile's SRAM.

        Returns
        -------
        numpy.ndarray
            Shape ``(count,)``, a copy.

        Raises
        ------
        ValueError
            If ``count`` is negative or the range leaves the SRAM.
        """
        t = self.tile(xy)
        if count < 0:
            raise ValueError(f"`count` must not be negative, not {count}")
        dt = np.dtype(dtype).newbyteorder("<")
        nbytes = count * dt.itemsize
        if not (0 <= addr and addr + nbytes <= t.sram.size):
            raise ValueError(f"SRAM read {addr:#x} + {nbytes} bytes leaves the SRAM "
                             f"({t.sram.size} bytes)")
        return t.sram[addr:addr + nbytes].view(dt).copy()

    def load_program(self, xy, program, at: int = 0) -> None:
        """Write instruction words (or assembly text, assembled here) into a tile's imem.

        Raises
        ------
        ValueError
            If the program does not fit the instruction memory.
        chipotle.isa.AsmError
            If assembly text does not assemble.
        """
        words = asm.assemble(program) if isinstance(program, str) else [int(w) for w in program]
        t = self.tile(xy)
        if not (0 <= at and at + len(words) <= len(t.imem)):
            raise ValueError(f"a program of {len(words)} words at {at} does not fit the "
                             f"instruction memory ({len(t.imem)} words)")
        t.imem[at:at + len(words)] = words
        t._decoded.clear()
        t._cycles.clear()

    def start(self, xy, pc: int = 0) -> None:
        """Start (or restart) a tile at ``pc``; registers, counters and tables are kept.

        Raises
        ------
        ValueError
            If the tile's error flag is set (`reset` it first) or `pc` is out of range.
        """
        t = self.tile(xy)
        if t.error != ErrorCode.NONE:
            raise ValueError(f"tile {t.xy} has its error flag set ({t.error.name}); reset it "
                             f"first")
        if not 0 <= pc < len(t.imem):
            raise ValueError(f"`pc` must be in [0, {len(t.imem)}), not {pc}")
        t.pc, t._loops, t._wait = pc, [], None
        t._ahead = False
        t.state = TileState.RUNNING

    def reset(self, xy=None) -> None:
        """Reset one tile (or every tile): see `Tile.reset`; also clears `events` for all."""
        for t in ([self.tile(xy)] if xy is not None else self.tiles):
            t.reset()
        if xy is None:
            self.events.clear()

    def set_kv_layout(self, xy, layout: KvLayout | None) -> None:
        """Set a tile's KV layout, as the host does by writing its KV registers.

        Parameters
        ----------
        xy : tuple of int
        layout : KvLayout or None
            Word addresses, ``word_bytes`` equal to the tile's W, with ``k_header`` (the K
            rows are records); ``None`` clears it (capacity 0, every ``kvapp`` refused).  A
            layout reaching past the SRAM is accepted and gives capacity 0, as on the tile.

        Raises
        ------
        TypeError
            If `layout` is not a `KvLayout` or None.
        ValueError
            If its ``word_bytes`` is not the tile's or it has no K header word.
        """
        t = self.tile(xy)
        if layout is not None:
            if not isinstance(layout, KvLayout):
                raise TypeError(f"`layout` must be a KvLayout or None, not {layout!r}")
            if layout.word_bytes != self.config.word_bytes:
                raise ValueError(f"`layout.word_bytes` must be the tile's W = "
                                 f"{self.config.word_bytes}, not {layout.word_bytes}")
            layout.registers()          # raises without a K header
        t.kv_layout = layout

    def bump_counter(self, xy, counter: int, k: int = 1) -> None:
        """Add `k` to a tile's counter, as a host write with a counter bump does.

        Raises
        ------
        ValueError
            If ``counter`` is not one of the tile's counters, or ``k`` is below 1.
        """
        t = self.tile(xy)
        if not 0 <= counter < len(t._counters):
            raise ValueError(f"`counter` must be in [0, {len(t._counters)}), not {counter}")
        if k < 1:
            raise ValueError(f"`k` must be at least 1, not {k}")
        t._counters[counter].extend([0] * k)
        t._counters[counter].sort()

    def run(self, max_instructions: int = 10_000_000, quantum: int = 64) -> None:
        """Run every started tile until all are halted, stopped on an error, or idle.

        Parameters
        ----------
        max_instructions : int
            Give up after this many instructions in total.
        quantum : int
            Instructions a tile runs before the scheduler moves to the next tile.

        Raises
        ------
        DeadlockError
            If tiles wait on counters that nothing can bump any more.
        InstructionLimitError
            If `max_instructions` is exceeded.
        """
        for _ in self.rounds(max_instructions, quantum):
            pass

    def rounds(self, max_instructions: int = 10_000_000, quantum: int = 64):
        """Run as `run` does, one round at a time: a generator that yields after each round
        (every active tile ran up to `quantum` instructions; about a thousand instructions
        on the 4 x 4 chip), so that a caller can stop between rounds (the driver's ISA
        backend lets an asyncio task be cancelled there: Ctrl-C).  Raises as `run`."""
        total = 0
        while True:
            active = [t for t in self.tiles if t.state in (TileState.RUNNING, TileState.WAITING)]
            if not active:
                return
            progress = 0
            for t in active:
                progress += self._run_tile(t, quantum)
            total += progress
            if not progress:
                waiting = [(t.xy, t.pc, *t._wait, len(t._counters[t._wait[0]]))
                           for t in self.tiles if t.state == TileState.WAITING]
                others = [(t.xy, t.state) for t in self.tiles if t.state != TileState.WAITING]
                raise DeadlockError(waiting, others)
            if total > max_instructions:
                raise InstructionLimitError(f"stopped after {total} instructions "
                                            f"(max_instructions)")
            yield

    # -- execution -----------------------------------------------------------------------------

    def _run_tile(self, t: Tile, quantum: int) -> int:
        done = 0
        while done < quantum and t.state in (TileState.RUNNING, TileState.WAITING):
            pc = t.pc
            try:
                if not 0 <= pc < len(t.imem):
                    raise _Fault(ErrorCode.IMEM_RANGE, f"PC {pc} is outside the instruction "
                                                       f"memory ({len(t.imem)} words)")
                instr = t._decoded.get(pc)
                if instr is None:
                    try:
                        instr = decode(t.imem[pc])
                    except IllegalInstruction as e:
                        instr = e
                    t._decoded[pc] = instr
                if isinstance(instr, IllegalInstruction):
                    raise _Fault(ErrorCode.ILLEGAL, f"illegal instruction "
                                                    f"{t.imem[pc]:#034x}: {instr}")
                c_pre = t.perf.cycles
                if t._busy:
                    # an instruction issued from the decode register waits from its second
                    # cycle on (the first one resolves its operands)
                    # (a vector instruction's and TABLE's Issue-Go cycle too: `CostModel.issue_go`)
                    lead = (self.config.cost.decode if is_decode_op(instr.op) else 0) \
                        + go_cycles(instr.op, self.config)
                    self._sync(t, self._sync_units(t, instr), lead)
                t._stalled = t.perf.cycles > c_pre
                t._fetched = False
                c0 = t.perf.cycles
                if self.config.overlap and background_unit(instr.op) is not None:
                    nxt = self._issue(t, instr)
                else:
                    nxt = self._execute(t, instr)
                if nxt is None:            # blocked on WAIT
                    return done
                if not t._fetched:
                    self._fetch_next(t, nxt, instr.op in _FIRST_CYCLE_OPS and not t._stalled
                                     and t.perf.cycles - c0 == 1)
            except _Fault as f:
                err = f
                first = self._first_fault(t)
                if first is not None:
                    # an earlier background instruction's error comes first in program order
                    err, pc = first.fault, first.pc
                t.state = TileState.ERROR
                t.error, t.error_pc, t.error_message = err.code, pc, str(err)
                return done + 1
            done += 1
            t.perf.instructions += 1
            if t.state == TileState.HALTED:
                return done
            # zero-overhead loops: compare the next PC with the innermost loop's end
            while t._loops and nxt == t._loops[-1][1]:
                t._loops[-1][2] -= 1
                if t._loops[-1][2] > 0:
                    nxt = t._loops[-1][0]
                    break
                t._loops.pop()
            t.pc = nxt
        return done

    @staticmethod
    def _in_memory_after(t: Tile, nxt: int) -> bool:
        """Whether the next PC `nxt` (before the loop cascade) lands inside the instruction
        memory once the loop stack has looked at it, without changing the stack."""
        for start, end, count in reversed(t._loops):
            if nxt != end:
                break
            if count > 1:
                return start < len(t.imem)
        return nxt < len(t.imem)

    def _fetch_next(self, t: Tile, nxt: int, single: bool, skip: bool = False) -> None:
        """Play the controller's instruction register after an instruction retires to `nxt`
        (before the loop cascade; `CostModel.refill`): one that retired in its first cycle
        (`single`) while the read port was not a word ahead, or a ``loop`` skipped (`skip`),
        waits a refill cycle, after which the port is a word ahead; any other retire leaves
        it not ahead.  A retire past the memory goes to Fetch (IMEM_RANGE): no refill."""
        t._fetched = True
        if not self._in_memory_after(t, nxt):
            return
        if skip or single and not t._ahead:
            t.perf.cycles += self.config.cost.refill
            t._ahead = True
        else:
            t._ahead = False

    def _sync_units(self, t: Tile, i: Instr) -> list:
        """Return the scoreboard entries `i` waits for (``docs/tile.md``, "Issue policy").

        Scalar and control instructions: none.  A matrix or vector instruction: its own
        unit's entry and every entry it has a hazard with (`hazard` of its footprint and the
        entry's ranges); ``LD``, ``ST``, ``COPY`` (the controller's own): the entries they
        have a hazard with.  Every other instruction, ``SEND`` included (its packets release
        everything before it), waits for all.
        """
        op = i.op
        if op in SCALAR_OPS:
            return []
        unit = background_unit(op)
        if op == Opcode.TABLE:          # the vector unit's, and a RAW hazard on its entries
            unit = "vector"
        elif unit not in ("matrix", "vector", "kv") and op not in _MEM_OPS:
            return list(t._busy)
        reads, write = self._footprint(t, i)
        return [u for u, e in t._busy.items()
                if u == unit or (op == Opcode.KVQK and u == "kv")
                or hazard(reads, write, e.reads, e.write, self._sb_limit)]

    def _footprint(self, t: Tile, i: Instr) -> tuple:
        """The SRAM byte ranges (reads, write) of a background instruction, resolved now."""
        W = self.config.word_bytes
        d, a, b, n = t._val(i.d), t._val(i.a), t._val(i.b), t._len(i.n)
        if i.op in _MEM_OPS:
            return mem_footprint(i.op, d, a, n)
        if i.op == Opcode.SEND:
            return send_footprint(d, a, n)
        if i.op == Opcode.TABLE:
            return table_footprint(a, i.c)
        if i.op.value >> 4 in (1, 2):
            return vector_footprint(i.op, d, a, b, n, i.c, i.imm, W)
        if i.op in (Opcode.KVAPP, Opcode.KVQK):
            # the KV map's bytes and head size (none without a layout)
            L = t.kv_layout
            kv_map = None if L is None else (W * L.base, W * L.end)
            head_size = 0 if L is None else L.head_size
            if i.op == Opcode.KVAPP:
                return kvapp_footprint(a, b, kv_map, W, head_size)
            return matrix_footprint(i.op, d, a, b, n, i.c, i.m, head_size, i.td, W, kv_map)
        return matrix_footprint(i.op, d, a, b, n, i.c, i.m, i.imm, i.td, W)

    def _first_fault(self, t: Tile) -> _InFlight | None:
        """The oldest scoreboard entry that finished with an error, if any."""
        bad = [e for e in t._busy.values() if e.fault is not None]
        return min(bad, key=lambda e: e.seq) if bad else None

    def _sync(self, t: Tile, units: list, lead: int = 0) -> None:
        """Wait for the entries of `units`; if one of them failed, raise the oldest error of
        all entries (the RTL drains every unit and reports the first in program order).
        `lead`: cycles of the instruction that pass before it waits (charged with it)."""
        if any(t._busy[u].fault is not None for u in units):
            raise self._first_fault(t).fault
        for u in units:
            t.perf.cycles = max(t.perf.cycles, t._busy.pop(u).until - lead)

    def _issue(self, t: Tile, i: Instr):
        """Run a background instruction (``overlap``): execute it now (the simulator is
        sequential; the hazard rule makes that equivalent), note its error instead of
        raising it, and enter it in the scoreboard with the cycle its unit finishes."""
        cfg = self.config
        unit = background_unit(i.op)
        reads, write = self._footprint(t, i)
        start = t.perf.cycles
        fault = None
        try:
            self._execute(t, i)
        except _Fault as f:
            if unit == "kv" or unit == "matrix" and f.code != ErrorCode.ARITH:
                raise               # its checks come before it retires: not deferred
            fault = f               # the matrix unit's ARITH (charged), the others' checks
            if unit != "matrix":
                t.perf.cycles = start + instr_cycles(i, cfg, 0)
        # a vector instruction retires a cycle after its Issue-Go compare (`CostModel.issue_go`),
        # and its unit starts then
        go = go_cycles(i.op, cfg) if unit == "vector" else 0
        t.perf.cycles += go
        if unit == "matrix":
            # the controller retires it after its range ends, its checks and the issue (4
            # cycles); its ARITH is the only error found in the background (the checks
            # raised above) (KVQK: 3 more, the KV store's acceptance, decode and hand-over of
            # the command)
            fg = (2 + cfg.cost.issue + cfg.cost.mat_ends
                  + (cfg.cost.kv_stream + 1 if i.op == Opcode.KVQK else 0))
            until, t.perf.cycles = t.perf.cycles, start + fg
        elif unit == "kv":
            # the controller retires it once the KV store accepted and checked it (3 cycles)
            until, t.perf.cycles = t.perf.cycles, start + issue_cycles(i.op, cfg.cost) + 2
        else:
            until, t.perf.cycles = t.perf.cycles, start + issue_cycles(i.op, cfg.cost) + go
        t._seq += 1
        t._busy[unit] = _InFlight(reads, write, until, t.pc, fault, t._seq)
        return t.pc + 1

    def _write_record(self, t: Tile, d: int, y) -> None:
        """Write ``dynquant(y)`` (`y`: shape (1, n), int16 or int32) as a record at byte `d`:
        the header word (int16 ``mu``, ``b``, zeros), then the n int8 (docs/isa.md section 3;
        the span checked by the caller)."""
        W = self.config.word_bytes
        x8, mu, b = nx.dynquant(y, t._table(TableId.DYNQ))
        header = np.zeros(W // 2, np.int16)
        header[0], header[1] = mu[0, 0], b[0, 0]
        t._write(d, header, Dtype.I16)
        t._write(d + W, x8[0], Dtype.I8)

    def _charge(self, t: Tile, instr: Instr, n: int, unit: str | None = None,
                k: int | None = None) -> int:
        key = (t.pc, n, k)      # `instr` is the one at t.pc (every handler charges its own)
        cyc = t._cycles.get(key)
        if cyc is None:
            cyc = t._cycles[key] = instr_cycles(instr, self.config, n, k)
        t.perf.cycles += cyc
        if unit:
            setattr(t.perf, unit, getattr(t.perf, unit) + cyc)
        return cyc

    def _execute(self, t: Tile, i: Instr):
        """Execute one instruction; return the next PC, or None when blocked on WAIT."""
        op = i.op
        handler = _HANDLERS.get(op)
        if handler is not None:
            return handler(self, t, i)
        if op.value >> 4 in (1, 2):
            return self._vector(t, i)
        return self._matrix(t, i)

    # control and scalar

    def _nop(self, t, i):
        self._charge(t, i, 0)
        return t.pc + 1

    def _halt(self, t, i):
        self._charge(t, i, 0)
        t.state = TileState.HALTED
        return t.pc

    def _done(self, t, i):
        self._charge(t, i, 0)
        self.events.append(DoneEvent(t.xy, i.imm, t.perf.cycles))
        return t.pc + 1

    def _setreg(self, t, r, v):
        if r:
            t.regs[r] = v & _MASK32

    def _li(self, t, i):
        self._setreg(t, i.d.reg, i.c << 16 | i.imm)
        self._charge(t, i, 0)
        return t.pc + 1

    def _add(self, t, i):
        self._setreg(t, i.d.reg, t._val(i.a) + t._val(i.b))
        self._charge(t, i, 0)
        return t.pc + 1

    def _sub(self, t, i):
        self._setreg(t, i.d.reg, t._val(i.a) - t._val(i.b))
        self._charge(t, i, 0)
        return t.pc + 1

    def _mul(self, t, i):
        self._setreg(t, i.d.reg, t._val(i.a) * i.imm)
        self._charge(t, i, 0)
        return t.pc + 1

    def _ld(self, t, i):
        self._setreg(t, i.d.reg, int(t._read(t._val(i.a), 1, Dtype.U32)[0]))
        self._charge(t, i, 0)
        return t.pc + 1

    def _st(self, t, i):
        t._write(t._val(i.d), np.array([t._val(i.a)], np.uint32), Dtype.U32)
        self._charge(t, i, 0)
        return t.pc + 1

    def _loop(self, t, i):
        count, end = t._len(i.n), i.c
        if end <= t.pc + 1:
            raise _Fault(ErrorCode.LOOP, f"loop end {end} leaves an empty body")
        if end > len(t.imem):
            raise _Fault(ErrorCode.IMEM_RANGE, f"loop end {end} is outside the instruction "
                                               f"memory")
        if t._loops and end > t._loops[-1][1]:
            raise _Fault(ErrorCode.LOOP, f"loop end {end} is after its outer loop's end "
                                         f"{t._loops[-1][1]}")
        self._charge(t, i, count)
        if count == 0:
            self._fetch_next(t, end, False, skip=True)
            return end
        if len(t._loops) >= self.config.loop_depth:
            raise _Fault(ErrorCode.LOOP, f"loops nested deeper than {self.config.loop_depth}")
        t._loops.append([t.pc + 1, end, count])
        return t.pc + 1

    def _counter(self, t, c):
        if c >= len(t._counters):
            raise _Fault(ErrorCode.COUNTER, f"counter {c} does not exist "
                                            f"({len(t._counters)} counters)")
        return t._counters[c]

    def _wait_op(self, t, i):
        q = self._counter(t, i.c)
        need = t._len(i.n)
        if len(q) < need:
            t.state, t._wait = TileState.WAITING, (i.c, need)
            return None
        taken, q[:] = q[:need], q[need:]
        self._charge(t, i, need)
        self._fetch_next(t, t.pc + 1, not t._stalled)     # before the hold below
        # The RTL retires a WAIT at once and holds the next instruction until the network
        # interface grants the request it registered (``docs/tile.md``, "Registered WAIT"):
        # the next instruction runs in the cycle of the grant, one before the cycle after
        # the last bump's arrival (held at least a cycle, it finds the read port a word
        # ahead; a refill cycle before it is not a held one).
        ready = taken[-1] - 1 if taken else 0
        if ready > t.perf.cycles:
            t.perf.wait_cycles += ready - t.perf.cycles
            t.perf.cycles = ready
            t._ahead = True
        t.state, t._wait = TileState.RUNNING, None
        return t.pc + 1

    def _send(self, t, i):
        cfg = self.config
        W = cfg.word_bytes
        dst, src, n = t._val(i.d), t._val(i.a), t._len(i.n)
        x0, x1, y0, y1 = rect_decode(i.imm)
        q_index = i.c
        if q_index >= cfg.n_counters:
            raise _Fault(ErrorCode.COUNTER, f"counter {q_index} does not exist "
                                            f"({cfg.n_counters} counters)")
        if x1 >= self.width or y1 >= self.height:
            raise _Fault(ErrorCode.ROUTE, f"rectangle x{x0}..{x1} y{y0}..{y1} leaves the "
                                          f"{self.width} x {self.height} mesh")
        if n % W:
            raise _Fault(ErrorCode.ALIGN, f"SEND length {n} is not a multiple of W = {W}")
        t._span(src, n, W, "SEND source")
        t._span(dst, n, W, "SEND destination")
        payload = t.sram[src:src + n].copy()
        self._charge(t, i, n, "dma_cycles")
        t.perf.flits_sent += send_flits(n, (x0, y0) != (x1, y1), cfg)
        t.perf.bytes_sent += n
        flits = send_flits(n, (x0, y0) != (x1, y1), cfg)
        for y in range(y0, y1 + 1):
            for x in range(x0, x1 + 1):
                r = self._tiles[(x, y)]
                r.sram[dst:dst + n] = payload
                r.perf.bytes_received += n
                arrival = t.perf.cycles + cfg.cost.hop * (abs(x - t.x) + abs(y - t.y))
                q = r._counters[q_index]
                q.append(self._deliver(r, arrival, flits))
                q.sort()
        return t.pc + 1

    @staticmethod
    def _deliver(r: Tile, arrival: int, flits: int) -> int:
        """Book `flits` cycles of tile `r`'s network port for a SEND whose last flit would
        arrive at `arrival` on an idle network; return when its last flit (the bump) arrives.

        The tile takes one flit per cycle, so SENDs that reach it together (a gather: every
        tile multicasting its slice to the whole mesh) queue there: each takes the earliest
        `flits` free consecutive cycles from ``arrival - flits`` on (first fit: the simulator
        runs the tiles in turn, not in time order).  The links between routers are not
        modelled (``docs/isa.md`` section 6).
        """
        port = r._port
        s = arrival - flits
        i = bisect.bisect_right(port, [s, float("inf")]) - 1
        if i >= 0 and port[i][1] > s:
            s = port[i][1]
        i += 1
        while i < len(port) and port[i][0] < s + flits:
            s = max(s, port[i][1])
            i += 1
        # merge with the neighbours it touches
        lo, hi = s, s + flits
        j = bisect.bisect_left(port, [lo, lo])
        k = j
        if j > 0 and port[j - 1][1] == lo:
            j -= 1
            lo = port[j][0]
        while k < len(port) and port[k][0] <= hi:
            hi = max(hi, port[k][1])
            k += 1
        port[j:k] = [[lo, hi]]
        return s + flits

    def _table_op(self, t, i):
        tid = TableId(i.c)
        addr = t._val(i.a)
        tab = t._read(addr, TABLE_ENTRIES[tid], Dtype.U16, "table")
        t.tables[tid] = tab.astype(np.int32)
        self._charge(t, i, 0, "dma_cycles")
        return t.pc + 1

    def _copy(self, t, i):
        dst, src, n = t._val(i.d), t._val(i.a), t._len(i.n)
        t._span(src, n, 1, "COPY source")
        t._span(dst, n, 1, "COPY destination")
        t.sram[dst:dst + n] = t.sram[src:src + n].copy()
        cyc = instr_cycles(i, self.config, n, addrs=(dst, src))
        t.perf.cycles += cyc
        t.perf.dma_cycles += cyc
        return t.pc + 1

    def _kvapp(self, t, i):
        cfg = self.config
        W = cfg.word_bytes
        L = t.kv_layout
        hs = L.head_size if L is not None else 0        # the KV_HEAD_SIZE register
        kw, vw = 1 + -(-hs // W), -(-hs // W)           # K record (header + data), V row
        slot, k_src, v_src, pos = t._val(i.d), t._val(i.a), t._val(i.b), t._len(i.n)
        t._span(k_src, kw * W, W, "KVAPP K record")
        t._span(v_src, vw * W, W, "KVAPP V row")
        layer, head = slot >> 8, slot & 0xFF
        if (L is None or slot >> 16 or layer >= L.n_layers or head >= L.n_kv_heads
                or pos >= t.kv_capacity):
            raise _Fault(ErrorCode.KV_RANGE,
                         f"KVAPP of (layer {layer}, head {head}) at position {pos} is outside "
                         f"the KV layout ({'none set' if L is None else L}, capacity "
                         f"{t.kv_capacity})")
        last = hs - (vw - 1) * W                        # bytes of a row's last word
        # word by word, K then V, increasing addresses: the KV store's order
        for src, dst, words in ((k_src, W * L.k_row(layer, head, pos), kw),
                                (v_src, W * L.v_row(layer, head, pos), vw)):
            for j in range(words):
                n = last if j == words - 1 else W
                t.sram[dst + j * W:dst + j * W + n] = t.sram[src + j * W:src + j * W + n]
        self._charge(t, i, kw + vw, "dma_cycles")
        return t.pc + 1

    # vector unit

    def _vector(self, t: Tile, i: Instr):
        op = i.op
        n = t._len(i.n)
        if n == 0:
            raise _Fault(ErrorCode.SHAPE, f"{op.name.lower()} needs at least one element")
        d, a = t._val(i.d), t._val(i.a)
        td = DTYPE_INFO[i.td]
        src = i.src
        try:
            if op in (Opcode.VADD, Opcode.VSUB, Opcode.VMUL):
                x = t._read(a, n, src).astype(np.int64)
                y = t._read(t._val(i.b), n, src).astype(np.int64)
                r = x + y if op == Opcode.VADD else x - y if op == Opcode.VSUB else x * y
                out = nx.sat(r, td.bits, td.unsigned)
            elif op == Opcode.REQI:
                out = nx.requant(t._read(a, n, src), i.imm, i.c, td.bits, td.unsigned)
            elif op == Opcode.REQM:
                m, s = t._read(t._val(i.b), 2, Dtype.U16, "multiplier pair", 4)
                out = nx.requant(t._read(a, n, src), int(m), int(s), td.bits, td.unsigned)
            elif op in (Opcode.RSUM, Opcode.RSUMSQ, Opcode.RMAX, Opcode.RMAXABS,
                        Opcode.ARGMAX):
                x = t._read(a, n, src)
                x64 = x.astype(np.int64)
                r = {Opcode.RSUM: lambda: x64.sum(),
                     Opcode.RSUMSQ: lambda: (x64 * x64).sum(),
                     Opcode.RMAX: lambda: x64.max(),
                     Opcode.RMAXABS: lambda: np.abs(x64).max(),
                     Opcode.ARGMAX: lambda: nx.argmax(x)}[op]()
                out = nx.sat(np.asarray([r]), td.bits, td.unsigned)
            elif op == Opcode.RMSNORM:
                x = t._read(a, n, Dtype.I16)
                g = t._read(t._val(i.b), n, Dtype.I16, "gain")
                eps = int(t._read(i.c, 1, Dtype.I64, "epsilon")[0])
                out = nx.rmsnorm(x[None], g, signed_imm(i.imm), eps, t._table(TableId.RSQRT),
                                 td.bits)[0]
            elif op == Opcode.RMSNORMQ:
                # the record dynq(rmsnorm(...)) with the int16 normalised vector in between
                # (docs/isa.md section 4): RMSNorm's checks and errors first, then the
                # record's, then the dynq table
                W = self.config.word_bytes
                x = t._read(a, n, Dtype.I16)
                g = t._read(t._val(i.b), n, Dtype.I16, "gain")
                eps = int(t._read(i.c, 1, Dtype.I64, "epsilon")[0])
                y = nx.rmsnorm(x[None], g, signed_imm(i.imm), eps, t._table(TableId.RSQRT), 16)
                t._span(d, W + n, W, "record")
                self._write_record(t, d, y)
                self._charge(t, i, n, "vector_cycles")
                return t.pc + 1
            elif op == Opcode.DYNQ:
                W = self.config.word_bytes
                t._span(d, W + n, W, "record")
                self._write_record(t, d, t._read(a, n, src)[None])
                self._charge(t, i, n, "vector_cycles")
                return t.pc + 1
            elif op == Opcode.SOFTMAX:
                if n > nx.MAX_SEQ_LEN:
                    raise _Fault(ErrorCode.SHAPE, f"softmax over {n} > {nx.MAX_SEQ_LEN} "
                                                  f"elements")
                x = t._read(a, n, Dtype.I32)
                out = nx.softmax(x[None], None, t._table(TableId.EXP2),
                                 t._table(TableId.RECIP))[0]
            elif op == Opcode.ROPE:
                hs = i.imm
                if n % hs:
                    raise _Fault(ErrorCode.SHAPE, f"rope length {n} is not a multiple of the "
                                                  f"head size {hs}")
                x = t._read(a, n, Dtype.I16)
                cs = t._read(t._val(i.b), hs, Dtype.I16, "cos/sin row")
                out = nx.rope(x.reshape(-1, hs), cs[None, :hs // 2], cs[None, hs // 2:],
                              i.c, td.bits).reshape(-1)
            elif op == Opcode.SILU:
                out = nx.silu(t._read(a, n, Dtype.I16), i.imm, t._table(TableId.SIGMOID))
            elif op == Opcode.WSUM:
                p = t._read(a, n, Dtype.U16, "probabilities")
                v = t._rows(t._val(i.b), n, i.c, i.imm, "V")
                out = weighted_sum(p, v)
                self._charge(t, i, n, "vector_cycles")
                t._write(d, out, Dtype.I32)
                return t.pc + 1
            else:  # pragma: no cover - every vector opcode is handled above
                raise AssertionError(op)
        except ValueError as e:
            raise _Fault(ErrorCode.ARITH, f"{op.name.lower()}: {e}") from None
        t._write(d, out, i.td)
        self._charge(t, i, n, "vector_cycles")
        return t.pc + 1

    # matrix unit

    def _kvqk_rows(self, t: Tile, i: Instr, N: int) -> int:
        """Check a ``KVQK`` in the RTL's order after its shape (X, the pair at ``c``, Y, then
        the KV store's slot and position checks); return the byte address of its first K
        record (the header of K row 0 of the slot)."""
        cfg = self.config
        W = cfg.word_bytes
        L = t.kv_layout
        K = L.head_size if L is not None else 0
        xa, ya = t._val(i.a), t._val(i.d)
        if xa % W:
            raise _Fault(ErrorCode.ALIGN, f"matrix operand X at {xa:#x} is not word-aligned "
                                          f"(W = {W})")
        t._rows(xa + W, i.m, cfg.record_bytes(K), K, "X")
        t._span(i.c, 4, 4, "multiplier pair")
        es = DTYPE_INFO[i.td].size
        t._span(ya, (i.m - 1) * cfg.pad(N * es) + N * es, es, "Y")
        slot = t._val(i.b)
        layer, head = slot >> 8, slot & 0xFF
        if (L is None or slot >> 16 or layer >= L.n_layers or head >= L.n_kv_heads
                or not 1 <= N <= t.kv_capacity):
            raise _Fault(ErrorCode.KV_RANGE,
                         f"KVQK of (layer {layer}, head {head}) over "
                         f"{f'positions 0..{N - 1}' if N else 'no positions (n = 0)'} is "
                         f"outside the KV layout ({'none set' if L is None else L}, capacity "
                         f"{t.kv_capacity})")
        return W * L.k_row(layer, head, 0)

    def _matrix(self, t: Tile, i: Instr):
        cfg = self.config
        W = cfg.word_bytes
        op, M, K = i.op, i.m, i.imm
        N = t._len(i.n)
        kv = op == Opcode.KVQK
        if kv:                          # K is the KV layout's head size
            K = t.kv_layout.head_size if t.kv_layout is not None else 0
        if M > cfg.max_m:
            raise _Fault(ErrorCode.SHAPE, f"M = {M} is above the matrix unit's {cfg.max_m} rows")
        if K > cfg.k_max:
            raise _Fault(ErrorCode.SHAPE, f"K = {K} is above the matrix unit's k_max = "
                                          f"{cfg.k_max}")
        if kv:
            # the K records of positions 0 .. N-1, addressed by the KV store: then as MATQK
            wa = self._kvqk_rows(t, i, N)
            op = Opcode.MATQK
        elif N == 0:
            raise _Fault(ErrorCode.SHAPE, "N must be at least 1")
        xa, ya = t._val(i.a), t._val(i.d)
        if not kv:
            wa = t._val(i.b)
        for name, addr in (("X", xa), ("W", wa)):
            if addr % W:
                raise _Fault(ErrorCode.ALIGN, f"matrix operand {name} at {addr:#x} is not "
                                              f"word-aligned (W = {W})")
        plain, rec = cfg.pad(K), cfg.record_bytes(K)
        if op == Opcode.MATRAW:
            x8 = t._rows(xa, M, plain, K, "X")
        else:
            x8 = t._rows(xa + W, M, rec, K, "X")
            xh = t._rows(xa, M, rec, 4, "X header").view(np.int16).astype(np.int64)
        if op == Opcode.MATQK:
            w8 = t._rows(wa + W, N, rec, K, "W")
            wh = t._rows(wa, N, rec, 4, "W header").view(np.int16).astype(np.int64)
        else:
            w8 = t._rows(wa, N, plain, K, "W")
        es = DTYPE_INFO[i.td].size
        ystride = cfg.pad(N * es)
        if cfg.overlap:         # the RTL's order: Y is checked before the unit starts
            t._span(ya, (M - 1) * ystride + N * es, es, "Y")
        try:
            acc = nx.matmul(x8, w8)
            if op == Opcode.MATMUL:
                ms = t._read(i.c, 2 * N, Dtype.U16, "requantisation table", 4)
                y = nx.requant_dyn(acc, xh[:, :1], xh[:, 1:2], ms[0::2][None, :],
                                   ms[1::2][None, :], DTYPE_INFO[i.td].bits)
            elif op == Opcode.MATQK:
                m, s = t._read(i.c, 2, Dtype.U16, "multiplier pair", 4)
                y = nx.requant_dyn(acc, xh[:, :1] * wh[None, :, 0], xh[:, 1:2] + wh[None, :, 1],
                                   int(m), int(s), DTYPE_INFO[i.td].bits)
            else:
                y = acc
        except ValueError as e:
            fault = _Fault(ErrorCode.ARITH, f"{i.op.name.lower()}: {e}")
            if not cfg.overlap:
                raise fault from None
            y = None            # the RTL checks Y before it finds the ARITH (above)
        else:
            fault = None
        t._span(ya, (M - 1) * ystride + N * es, es, "Y")
        if y is not None:
            for r in range(M):
                t._write(ya + r * ystride, y[r], i.td)
            t.perf.macs += M * N * K
            t.perf.mac_cycles += N * -(-K // W)
        self._charge(t, i, N, "matrix_cycles", k=K)
        t.perf.cycles += self.config.cost.mat_ends      # state Matrix-Ends, before the unit
        if fault is not None:
            raise fault
        return t.pc + 1


_HANDLERS = {
    Opcode.NOP: IsaSim._nop, Opcode.HALT: IsaSim._halt, Opcode.DONE: IsaSim._done,
    Opcode.LI: IsaSim._li, Opcode.ADD: IsaSim._add, Opcode.SUB: IsaSim._sub,
    Opcode.MUL: IsaSim._mul, Opcode.LD: IsaSim._ld, Opcode.ST: IsaSim._st,
    Opcode.LOOP: IsaSim._loop, Opcode.WAIT: IsaSim._wait_op, Opcode.SEND: IsaSim._send,
    Opcode.TABLE: IsaSim._table_op, Opcode.COPY: IsaSim._copy, Opcode.KVAPP: IsaSim._kvapp,
}
