"""Where a step's cycles go: a per-tile, per-phase, per-instruction-class breakdown from the
ISA simulator's cost model (an estimate; the RTL is the authority on cycles).

``python -m chipotle.compiler.profile [--placement tensor] [--pos 64]`` prints the
breakdown of one decode step of stories260K (the command behind the table in
``docs/architecture.md``, "Where a decode step's cycles go"); with ``--timeline X,Y
[--layer L]`` it prints instead the step's instructions on tile (X, Y), one line each with
the cycles they became ready, started, retired and their unit finished (`timeline_plan`:
the source of that section's critical-path table); with ``--critical`` (not with
``--timeline``: they are alternatives) it prints the step's critical path across the tiles
(`critical_plan`, `format_critical`): walked back from the last instruction to retire,
through the instruction each one waited for (the previous one, the unit's last instruction
it stalled on, or, for a ``wait``, the ``send`` whose bump released it), its cycles summed
per phase and class (``net``: from a ``send`` to its ``wait``), per layer, per tile and per
instruction.

A *phase* is the text of the last comment the code generator put before an instruction
(``layer 3 attention ...`` and so on) with the layer number removed, so that the phases of
every layer add up.  Per phase and instruction class the table gives the busy cycles of the
class's unit (the instructions' cost in `chipotle.isa.instr_cycles`; ``wait`` the stalls on
counters), which overlap one another when the controller runs matrix, vector and network
instructions in the background, and ``clock``, the tile's clock advance in the phase (issue,
stalls on counters and on busy units): the clocks add up to the step.

The step's cycles here run from the start to the doorbell (`chipotle.compiler.run`); the
driver's ISA-simulator backend (``python -m chipotle.sim.bench --backend isasim``) counts to
the last tile's ``halt``, which the doorbell tile reaches one cycle after its ``done``: its
figures are one cycle larger (8,563 against 8,562 at position 64 on the default
configuration, at f45483d).
"""

from __future__ import annotations

import re
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, replace

__all__ = ["phase_of_pc", "line_of_pc", "profile_plan", "format_profile", "CLASSES", "Timed",
           "timeline_plan", "format_timeline", "Segment", "critical_path", "critical_plan",
           "format_critical"]

#: Instruction classes, in print order.
CLASSES = ("matrix", "vector", "send", "wait", "kvapp", "scalar")


def phase_of_pc(source: str, raw: bool = False) -> list:
    """Return the phase of every instruction of an assembly text (index = PC).

    Parameters
    ----------
    source : str
        A program of `chipotle.compiler` (comments ``; text``, labels ``name:``).
    raw : bool
        Keep the comment's text as it is (layer, row and head numbers included).

    Returns
    -------
    list of str
        One phase name per instruction; ``"entry"`` before the first comment.
    """
    return [phase if raw else _generic_phase(phase) for phase, _ in _instructions(source)]


def _generic_phase(phase: str) -> str:
    """A phase's text with its layer, row, head and column numbers removed, so that the
    same phase of every layer and tile has one name."""
    phase = re.sub(r"^layer \d+ ", "layer: ", phase)
    phase = re.sub(r"rows? \d+ \.\. \d+", "rows", phase)
    phase = re.sub(r"(KV|query) heads \d+ \.\. \d+", r"\1 heads", phase)
    phase = re.sub(r"KV head \d+", "KV head", phase)
    return re.sub(r"columns \d+ \.\. \d+", "columns", phase)


def _phase_layer(phase: str) -> int | None:
    """The layer a raw phase's text names (``layer 3 attention ...``: 3), or None."""
    m = re.match(r"layer (\d+) ", phase)
    return None if m is None else int(m[1])


def line_of_pc(source: str) -> list:
    """Return the source text of every instruction of an assembly text (index = PC), as
    `phase_of_pc` counts them: a trailing ``; comment`` removed."""
    return [text for _, text in _instructions(source)]


def _instructions(source: str):
    """Yield ``(comment, text)`` per instruction of an assembly text, in PC order: the last
    comment before it (``"entry"`` before the first) and its text without a trailing
    comment.  Blank lines, comments, labels and directives are not instructions."""
    phase = "entry"
    for line in source.splitlines():
        s = line.strip()
        if s.startswith(";") or s.startswith("#"):
            phase = s[1:].strip()
        elif s and not s.endswith(":") and not s.startswith("."):
            yield phase, s.split(";")[0].strip()


@contextmanager
def _hooked(sim, execute, sync, fetch):
    """Inside the block, `sim`'s ``_execute`` and ``_issue`` are ``execute(original)``, its
    ``_sync`` is ``sync(original)`` and its ``_fetch_next`` (the refill after a retire,
    `chipotle.isa.core.CostModel.refill`) ``fetch(original)`` (the wrappers of
    `profile_plan` and `timeline_plan`); the originals are back afterwards."""
    names = [n for n in ("_execute", "_issue") if hasattr(sim, n)]
    sync_name = "_sync" if hasattr(sim, "_sync") else "_mx_sync"
    extra = ["_fetch_next"] if hasattr(sim, "_fetch_next") else []
    originals = {n: getattr(sim, n) for n in (*names, sync_name, *extra)}
    for n in names:
        setattr(sim, n, execute(originals[n], n == "_execute"))
    setattr(sim, sync_name, sync(originals[sync_name]))
    for n in extra:
        setattr(sim, n, fetch(originals[n]))
    try:
        yield
    finally:
        for n in originals:
            delattr(sim, n)


def _klass(op) -> str:
    from ..isa.core import SCALAR_OPS, Opcode
    if op in SCALAR_OPS or op in (Opcode.NOP, Opcode.HALT, Opcode.DONE, Opcode.LD, Opcode.ST):
        return "scalar"
    if op == Opcode.WAIT:
        return "wait"
    if op == Opcode.SEND:
        return "send"
    if op in (Opcode.KVAPP, Opcode.COPY, Opcode.TABLE):
        return "kvapp"
    if op.value >> 4 == 3:
        return "matrix"
    return "vector"


def profile_plan(sim, compiled, plan) -> tuple:
    """Run one `StepPlan` on `sim` (as `chipotle.compiler.run.run_plan_isasim`) and return
    its result and the cycle breakdown.

    Returns
    -------
    (StepResult, dict)
        The dict maps ``(x, y)`` to ``{phase: {class: cycles}}``: per class of `CLASSES` the
        busy cycles of its unit (the instructions' cost; ``wait`` the stalls on counters),
        which overlap under the controller's background issue, and ``clock``: the tile's
        clock advance in the phase (issue, stalls on counters and on busy units).
    """
    from .run import run_plan_isasim
    phases = {xy: phase_of_pc(text) for xy, text in compiled.sources.items()}
    prof: dict = {xy: defaultdict(lambda: defaultdict(int)) for xy in compiled.sources}
    inner = set()                           # tiles inside `_issue` (which calls `_execute`)

    def wrap(fn, busy):
        def wrapper(t, *args, **kw):
            if t.xy not in prof:
                return fn(t, *args, **kw)
            nested = t.xy in inner
            c0, pc = t.perf.cycles, t.pc
            inner.add(t.xy)
            try:
                out = fn(t, *args, **kw)
            finally:
                if not nested:
                    inner.discard(t.xy)
            d, ph = t.perf.cycles - c0, prof[t.xy][phases[t.xy][pc]]
            if busy and (out is not None):
                k = _klass(args[0].op)
                if k == "wait":
                    ph["scalar"] += 1
                    ph["wait"] += d - 1
                else:
                    ph[k] += d
            if not nested and (out is not None or not busy):
                ph["clock"] += d
            return out
        return wrapper

    # (a refill after a retire is the retiring instruction's clock, in its phase)
    with _hooked(sim, wrap, lambda fn: wrap(fn, False), lambda fn: wrap(fn, False)):
        res = run_plan_isasim(sim, compiled, plan)
    return res, {xy: {ph: dict(d) for ph, d in p.items()} for xy, p in prof.items()}


@dataclass(frozen=True)
class Timed:
    """One instruction of a step on one tile, with its cycles (the ISA simulator's clock of
    the tile, counted from the step's start; an estimate).

    Attributes
    ----------
    pc : int
    phase : str
        The code generator's comment before it (`phase_of_pc` with ``raw``).
    text : str
        Its source line (`line_of_pc`).
    unit : str
        Its class (`CLASSES`).
    ready : int
        The cycle the previous instruction retired: this one is next.
    start : int
        The cycle it started, after its stalls on busy units (the scoreboard); for ``wait``
        the cycle it first tried.
    retire : int
        The cycle the controller moved on (a background instruction: once issued; ``wait``:
        once its counter arrived).
    finish : int
        The cycle its unit finished (``retire`` for the controller's own instructions).
    """
    pc: int
    phase: str
    text: str
    unit: str
    ready: int
    start: int
    retire: int
    finish: int


def timeline_plan(sim, compiled, plan, tiles=None) -> tuple:
    """Run one `StepPlan` on `sim` (as `profile_plan`) and return its result and the
    timeline of every instruction it ran on `tiles` (default: all).

    Returns
    -------
    (StepResult, dict)
        The dict maps ``(x, y)`` to a list of `Timed`, in execution order (a loop's body
        once per iteration).  The clocks are the tile's, from the step's start (cycles).
    """
    res, events, _ = _timeline(sim, compiled, plan, tiles)
    return res, events


def _timeline(sim, compiled, plan, tiles=None) -> tuple:
    """`timeline_plan`, and each instruction's dependencies: ``deps[xy][i]`` for event ``i``
    of tile ``xy`` holds ``"unit"``, the event ``(xy, j)`` whose unit's finish ended its
    stall on the scoreboard (if it stalled), and for a ``wait`` that stalled on its counter
    ``"net"``, the ``send`` event ``(xy2, k)`` whose bump arrived last (None for a bump from
    before the step or from the host)."""
    from ..isa.core import Opcode, background_unit
    from .run import run_plan_isasim
    want = set(compiled.sources if tiles is None else tiles)
    phases = {xy: phase_of_pc(compiled.sources[xy], raw=True) for xy in want}
    lines = {xy: line_of_pc(compiled.sources[xy]) for xy in want}
    out: dict = {xy: [] for xy in want}
    deps: dict = {xy: {} for xy in want}
    ready: dict = {}                    # tile -> the cycle its next instruction became next
    first: dict = {}                    # tile -> the cycle a blocked WAIT first tried
    blocker: dict = {}                  # tile -> (pc, until) of the entry that ended a stall
    entries: dict = {xy: {} for xy in want}     # tile -> {(pc, until): event index}
    arrivals: dict = {}                 # (tile, counter) -> [(cycle, sender event)]
    sending: list = [None]              # the SEND being executed: (counter, sender event)
    inner = set()

    def sync(fn):
        def wrapper(t, units, *args):
            if t.xy not in want:
                return fn(t, units, *args)
            ready.setdefault(t.xy, t.perf.cycles)
            c0 = t.perf.cycles
            snap = {u: (t._busy[u].pc, t._busy[u].until) for u in units if u in t._busy}
            out_ = fn(t, units, *args)
            if t.perf.cycles > c0 and snap:
                blocker[t.xy] = max(snap.values(), key=lambda e: e[1])
            return out_
        return wrapper

    def refill(fn):
        """A refill cycle after a retire (`CostModel.refill`): part of the retiring
        instruction, whose `retire` (and, for the controller's own, `finish`) it moves."""
        def wrapper(t, *args, **kw):
            if t.xy not in want or t.xy in inner:
                return fn(t, *args, **kw)
            out_ = fn(t, *args, **kw)
            if out[t.xy] and out[t.xy][-1].pc == t.pc:
                last = out[t.xy][-1]
                out[t.xy][-1] = replace(
                    last, retire=t.perf.cycles,
                    finish=t.perf.cycles if last.finish == last.retire else last.finish)
            return out_
        return wrapper

    def run(fn, _is_execute):
        def wrapper(t, i):
            if t.xy not in want or t.xy in inner:
                return fn(t, i)
            c0, pc = t.perf.cycles, t.pc
            wait = None
            if i.op == Opcode.WAIT and i.c < len(t._counters):
                wait = (list(t._counters[i.c]), t._len(i.n), t.perf.wait_cycles)
            if i.op == Opcode.SEND:
                sending[0] = (i.c, (t.xy, len(out[t.xy])))
            inner.add(t.xy)
            try:
                nxt = fn(t, i)
            finally:
                inner.discard(t.xy)
                sending[0] = None
            if nxt is None:                 # a WAIT blocked: it runs again later
                first.setdefault(t.xy, c0)
                ready.setdefault(t.xy, c0)
                return nxt
            start = first.pop(t.xy, c0)
            unit = background_unit(i.op) if sim.config.overlap else None
            entry = t._busy.get(unit) if unit is not None else None
            finish = entry.until if entry is not None and entry.pc == pc else t.perf.cycles
            k = len(out[t.xy])
            d = {}
            b = blocker.pop(t.xy, None)
            if b is not None and b in entries[t.xy]:
                d["unit"] = (t.xy, entries[t.xy][b])
            if wait is not None and wait[1] > 0 and t.perf.wait_cycles > wait[2]:
                last = wait[0][wait[1] - 1]
                d["net"] = next((s for c, s in arrivals.get((t.xy, i.c), ()) if c == last),
                                None)
            if d:
                deps[t.xy][k] = d
            if entry is not None and entry.pc == pc:
                entries[t.xy][(pc, entry.until)] = k
            out[t.xy].append(Timed(pc, phases[t.xy][pc], lines[t.xy][pc], _klass(i.op),
                                   ready.pop(t.xy, c0), start, t.perf.cycles, finish))
            return nxt
        return wrapper

    deliver = sim._deliver

    def delivered(r, arrival, flits):
        when = deliver(r, arrival, flits)
        if sending[0] is not None:
            arrivals.setdefault((r.xy, sending[0][0]), []).append((when, sending[0][1]))
        return when

    t0 = max(t.perf.cycles for t in sim.tiles)     # the step's start (run_plan_isasim's)
    sim._deliver = delivered
    try:
        with _hooked(sim, run, sync, refill):
            res = run_plan_isasim(sim, compiled, plan)
    finally:
        del sim._deliver
    return res, {xy: [replace(e, ready=e.ready - t0, start=e.start - t0,
                              retire=e.retire - t0, finish=e.finish - t0) for e in ev]
                 for xy, ev in out.items()}, deps


@dataclass(frozen=True)
class Segment:
    """A stretch of a step's critical path (`critical_path`): ``cycles`` spent on
    instruction ``index`` of tile ``xy``'s timeline (``kind`` ``"run"``: the instruction's
    own issue and, for one whose unit a later instruction waited for, its unit's work) or,
    ``kind`` ``"net"``, in the network between a ``send`` and the ``wait`` (event ``index``)
    its bump released (the sender's packet on its way and queued at the receiver's port)."""
    xy: tuple
    index: int
    kind: str
    begin: int
    end: int
    event: Timed

    @property
    def cycles(self) -> int:
        return self.end - self.begin


def critical_path(events: dict, deps: dict, end: tuple | None = None) -> list:
    """Return a step's critical path, as `Segment`s from its start to `end` (the last
    instruction of tile ``end`` by default: the tile whose last instruction retires last),
    from `_timeline`'s events and dependencies.

    Walking back from the end: a ``wait`` released by a bump continues on the sender's
    ``send`` (the cycles between are ``"net"``); an instruction that stalled on a busy unit
    continues on the instruction that unit ran (which the segment then covers from its
    start); any other continues on the tile's previous instruction.  The segments tile the
    interval from the step's start to the end's retirement: their cycles add up to it.
    """
    if end is None:
        end = max(events, key=lambda xy: (events[xy][-1].retire, xy))
    xy, i = end, len(events[end]) - 1
    t_end = events[xy][i].retire
    segs = []
    while True:
        e = events[xy][i]
        d = deps.get(xy, {}).get(i, {})
        net = d.get("net")
        if net is not None and events[net[0]][net[1]].retire <= t_end:
            s = events[net[0]][net[1]]
            segs.append(Segment(xy, i, "net", s.retire, t_end, e))
            xy, i, t_end = net[0], net[1], s.retire
            continue
        unit = d.get("unit")
        if e.start > e.ready and unit is not None and events[unit[0]][unit[1]].start <= e.start:
            segs.append(Segment(xy, i, "run", min(e.start, t_end), t_end, e))
            xy, i, t_end = unit[0], unit[1], min(e.start, t_end)
            continue
        segs.append(Segment(xy, i, "run", min(e.ready, t_end), t_end, e))
        if i == 0:
            break
        i, t_end = i - 1, min(e.ready, t_end)
    segs.reverse()
    return segs


def critical_plan(sim, compiled, plan) -> tuple:
    """Run one `StepPlan` on `sim` (as `timeline_plan`, every tile) and return its result,
    its critical path (`critical_path`, to the last instruction to retire) and the
    timelines."""
    res, events, deps = _timeline(sim, compiled, plan)
    return res, critical_path(events, deps), events


def _opname(text: str) -> str:
    return text.split()[0] if text else "?"


#: The instructions `format_critical` lists by default (``--top``).
CRITICAL_TOP = 12


def format_critical(segs: list, top: int = CRITICAL_TOP) -> str:
    """Return a critical path as text: its cycles per phase (the layer number removed, as
    `phase_of_pc`) and class (``net``: in the network between a ``send`` and its ``wait``),
    per layer, per tile, and the instructions that take most of it (summed over the
    layers)."""
    total = sum(s.cycles for s in segs)
    cols = ("matrix", "vector", "net", "send", "wait", "kvapp", "scalar")

    def klass(s):
        return "net" if s.kind == "net" else s.event.unit

    def phase(s):
        return _generic_phase(s.event.phase)
    by_phase: dict = {}
    for s in segs:
        by_phase.setdefault(phase(s), defaultdict(int))[klass(s)] += s.cycles
    head = "phase (summed over the layers)"
    w = max([len(head), *map(len, by_phase)]) + 1     # whole phase names, none cut
    lines = [f"critical path: {total:,} cycles, {len(segs)} segments (to the last tile's "
             f"halt, a cycle after the doorbell tile's `done`)", "",
             f"{head:<{w}}" + "".join(f"{c:>8}" for c in cols) + f"{'total':>8}"]
    for ph, d in by_phase.items():
        lines.append(f"{ph:<{w}}" + "".join(f"{d.get(c, 0):8,}" for c in cols)
                     + f"{sum(d.values()):8,}")
    tot = defaultdict(int)
    for s in segs:
        tot[klass(s)] += s.cycles
    lines.append(f"{'total':<{w}}" + "".join(f"{tot.get(c, 0):8,}" for c in cols)
                 + f"{total:8,}")
    layers: dict = {}
    seen = False                        # a layer's segment came already
    for s in segs:
        n = _phase_layer(s.event.phase)
        seen = seen or n is not None
        key = f"layer {n}" if n is not None else ("after the layers" if seen
                                                  else "before the layers")
        layers[key] = layers.get(key, 0) + s.cycles
    lines += ["", "per layer: " + ", ".join(f"{k} {v:,}" for k, v in layers.items())]
    tiles: dict = defaultdict(int)
    for s in segs:
        tiles[s.xy] += s.cycles
    lines.append("per tile: " + ", ".join(f"{xy} {v:,}" for xy, v in
                                          sorted(tiles.items(), key=lambda kv: -kv[1])))
    ins: dict = defaultdict(lambda: [0, 0])
    for s in segs:
        key = _opname(s.event.text)
        key = f"{key} (network to it)" if s.kind == "net" else key
        ins[(klass(s), phase(s), key)][0] += s.cycles
        ins[(klass(s), phase(s), key)][1] += 1
    lines += ["", f"the {top} instructions with most cycles on the path, per phase (summed "
                  f"over the layers and their runs on the path):"]
    for (k, ph, key), (c, n) in sorted(ins.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{c:7,} {n:4}x {k:<7} {key:<28} ; {ph[:70]}")
    return "\n".join(lines)


def format_timeline(events, phase_prefix: str | None = None) -> str:
    """Return a timeline (a list of `Timed`) as a text table, one instruction a line:
    ``ready``, ``stall`` (start - ready), ``start``, ``retire``, ``finish`` (cycles), the
    class, the source line and the phase; only the phases starting with `phase_prefix`
    if given (e.g. ``"layer 2 "``)."""
    lines = [f"{'pc':>5} {'ready':>7} {'stall':>6} {'start':>7} {'retire':>7} {'finish':>7} "
             f"{'unit':<7} instruction ; phase"]
    for e in events:
        if phase_prefix is not None and not e.phase.startswith(phase_prefix):
            continue
        lines.append(f"{e.pc:>5} {e.ready:>7,} {e.start - e.ready:>6,} {e.start:>7,} "
                     f"{e.retire:>7,} {e.finish:>7,} {e.unit:<7} {e.text} ; {e.phase}")
    return "\n".join(lines)


def format_profile(prof: dict, tiles=None) -> str:
    """Return the breakdown as a text table: per phase, cycles per class summed over
    `tiles` (default all) and divided by their number (a mean tile)."""
    tiles = list(prof) if tiles is None else list(tiles)
    order: list = []
    for xy in tiles:
        for ph in prof[xy]:
            if ph not in order:
                order.append(ph)
    cols = (*CLASSES, "clock")
    lines = [f"{'phase':<58}" + "".join(f"{c:>8}" for c in cols)]
    tot = defaultdict(float)
    for ph in order:
        row = {c: sum(prof[xy].get(ph, {}).get(c, 0) for xy in tiles) / len(tiles)
               for c in cols}
        for c in cols:
            tot[c] += row[c]
        lines.append(f"{ph[:58]:<58}" + "".join(f"{row[c]:8,.0f}" for c in cols))
    lines.append(f"{'total':<58}" + "".join(f"{tot[c]:8,.0f}" for c in cols))
    return "\n".join(lines)


def main(argv=None) -> None:
    """Print the cycle breakdown of one decode step of stories260K (or, with ``--rows``, of
    one prefill batch)."""
    import argparse

    from ..cli import ArgumentParser, compile_for_module, module_config, module_model
    from ..paths import DEFAULT_CHECKPOINT, default_model_dir
    from .run import load_isasim, run_step_isasim
    ap = ArgumentParser(prog="python -m chipotle.compiler.profile",
                        description=main.__doc__)
    ap.add_argument("--config", default="default",
                    help="chip configuration: a name of chipotle.config.CONFIGS and/or "
                         "key=value,... (default: %(default)s)")
    ap.add_argument("--placement", choices=("pipeline", "tensor"), default="tensor",
                    help="pipeline of stages, or every layer on every tile (tensor) (default: "
                         "%(default)s)")
    ap.add_argument("--pos", type=int, default=64,
                    help="position of the profiled step; the positions before it are "
                         "prefilled first (default: %(default)s)")
    ap.add_argument("--rows", type=int, default=1,
                    help="tokens of the profiled step at --pos: 1, a decode step (the "
                         "default), up to M, a prefill batch of that many rows")
    ap.add_argument("--context", type=int, default=None,
                    help="positions to compile for (default: the model's seq_len, or the "
                         "longest context the configuration holds, said so, if that is "
                         "shorter)")
    ap.add_argument("--kvapp", action=argparse.BooleanOptionalAction, default=None,
                    help="append K and V with kvapp (default: the placement's default, as "
                         "compile_model: with kvapp for the tensor placement)")
    ap.add_argument("--timeline", metavar="X,Y", default=None,
                    help="print the step's instructions on tile (X, Y) with their cycles "
                         "instead of the breakdown")
    ap.add_argument("--critical", action="store_true",
                    help="print the step's critical path across the tiles (per phase and "
                         "class, per layer, per tile, the instructions on it) instead of "
                         "the breakdown")
    ap.add_argument("--top", type=int, default=None,
                    help=f"with --critical: the instructions listed (default {CRITICAL_TOP})")
    ap.add_argument("--layer", type=int, default=None,
                    help="with --timeline: only the instructions of this layer")
    args = ap.parse_args(argv)
    cfg = module_config(ap, args)
    tile = None
    if args.timeline is not None:
        m = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", args.timeline)
        if m is None:
            ap.error(f"--timeline takes a tile as X,Y (e.g. 0,0), not {args.timeline!r}")
        tile = (int(m[1]), int(m[2]))
        if tile not in cfg.tiles:
            ap.error(f"--timeline: no tile {tile} on a {cfg.mesh_width} x {cfg.mesh_height} "
                     f"mesh")
    elif args.layer is not None:
        ap.error("--layer selects the lines of a --timeline; give --timeline X,Y too")
    if args.top is not None and not args.critical:
        ap.error("--top sets the instructions --critical lists; give --critical too")
    if args.top is not None and args.top < 1:
        ap.error(f"--top must be 1 or more (the instructions --critical lists), not {args.top}")
    if args.critical and tile is not None:
        ap.error("--critical and --timeline are alternatives (the critical path across the "
                 "tiles, or one tile's instructions): give one of them")
    if not 1 <= args.rows <= cfg.max_m:
        ap.error(f"--rows must be in 1 .. {cfg.max_m} (M), not {args.rows}")
    if args.pos < 0:
        ap.error(f"--pos must be a position (0 or more), not {args.pos}")
    # as `python -m chipotle.compiler`: one `error:` line (no --model here)
    qm = module_model(default_model_dir() / DEFAULT_CHECKPOINT, None, ap=ap)
    if args.layer is not None and not 0 <= args.layer < qm.config.n_layers:
        ap.error(f"--layer {args.layer}: the model has layers 0 .. {qm.config.n_layers - 1}")
    # as `python -m chipotle.compiler`: a refusal is one message naming the configurations
    # that fit (the --config text's own keys kept), and without --context a chip too small
    # for the model's seq_len is compiled for the longest context it holds
    cm, _ = compile_for_module(qm, cfg, args.config, args.context, DEFAULT_CHECKPOINT, ap=ap,
                               need=args.pos + args.rows,
                               needs=lambda n: (f"the {args.pos + args.rows} positions of "
                                                f"--pos {args.pos} with --rows {args.rows}: "
                                                f"give a --pos below {n - args.rows + 1}"),
                               placement=args.placement, kvapp=args.kvapp)
    if args.pos + args.rows > cm.context:
        ap.error(f"--pos {args.pos} with --rows {args.rows} needs {args.pos + args.rows} "
                 f"positions; the compiled context is {cm.context}")
    if tile is not None and tile not in cm.sources:      # (a pipeline leaves tiles idle)
        running = ", ".join(str(xy) for xy in cfg.tiles if xy in cm.sources)
        ap.error(f"--timeline: tile {tile} runs no program in the {args.placement} placement "
                 f"(tiles with programs: {running})")
    if args.layer is not None:                 # a pipeline stage's tile runs some layers
        layers = sorted({n for ph in phase_of_pc(cm.sources[tile], raw=True)
                         if (n := _phase_layer(ph)) is not None})
        if args.layer not in layers:
            ap.error(f"--layer {args.layer}: tile {tile} runs no instruction of layer "
                     f"{args.layer} in the {args.placement} placement ("
                     + (f"its layers: {', '.join(map(str, layers))}" if layers
                        else "none of the layers") + ")")
    sim = load_isasim(cm)
    toks = [(7 * i + 1) % qm.config.vocab_size for i in range(args.pos + args.rows)]
    M = cfg.max_m
    for p in range(0, args.pos, M):
        run_step_isasim(sim, cm, toks[p:min(p + M, args.pos)], p)
    what = ("decode step" if args.rows == 1 else f"prefill batch of {args.rows} rows")
    if args.critical:
        res, segs, _ = critical_plan(sim, cm, cm.step(toks[args.pos:], args.pos))
        print(f"{what} at position {args.pos}, {args.placement} placement, {cfg}: "
              f"{res.cycles:,} cycles (estimate, from the start to the doorbell)")
        print(format_critical(segs, CRITICAL_TOP if args.top is None else args.top))
        return
    if tile is not None:
        res, events = timeline_plan(sim, cm, cm.step(toks[args.pos:], args.pos), [tile])
        print(f"{what} at position {args.pos}, {args.placement} placement, {cfg}: "
              f"{res.cycles:,} cycles (estimate); tile {tile}, cycles from the step's start:")
        print(format_timeline(events[tile], None if args.layer is None
                              else f"layer {args.layer} "))
        return
    res, prof = profile_plan(sim, cm, cm.step(toks[args.pos:], args.pos))
    print(f"{what} at position {args.pos}, {args.placement} placement, {cfg}: "
          f"{res.cycles:,} cycles (estimate, from the start to the doorbell; the driver's "
          f"isasim backend, as in `python -m chipotle.sim.bench --backend isasim`, counts to "
          f"the last tile's halt, one cycle after the doorbell tile's `done`)")
    groups = {}
    for xy in prof:
        regions = cm.placement.tiles[xy].regions
        key = ("attention tiles" if "rope" in regions else
               "K / V partner tiles" if "l0.pw0" in regions else "other tiles")
        groups.setdefault(key, []).append(xy)
    for name, tiles in groups.items():
        print(f"\n{name} ({len(tiles)}), mean per tile:")
        print(format_profile(prof, tiles))


if __name__ == "__main__":
    from ..cli import run_main
    run_main(main)
