"""Where a step's cycles go: a per-tile, per-phase, per-instruction-class breakdown from the
ISA simulator's cost model (an estimate; the RTL is the authority on cycles).

``python -m chipotle.compiler.profile [--placement tensor] [--pos 64]`` prints the
breakdown of one decode step of stories260K (the command behind the table in
``docs/architecture.md``, "Where a decode step's cycles go"); with ``--timeline X,Y
[--layer L]`` it prints instead the step's instructions on tile (X, Y), one line each with
the cycles they became ready, started, retired and their unit finished (`timeline_plan`:
the source of that section's critical-path table).

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
           "timeline_plan", "format_timeline"]

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
    out = []
    for phase, _ in _instructions(source):
        if not raw:
            phase = re.sub(r"^layer \d+ ", "layer: ", phase)
            phase = re.sub(r"rows? \d+ \.\. \d+", "rows", phase)
            phase = re.sub(r"(KV|query) heads \d+ \.\. \d+", r"\1 heads", phase)
            phase = re.sub(r"KV head \d+", "KV head", phase)
            phase = re.sub(r"columns \d+ \.\. \d+", "columns", phase)
        out.append(phase)
    return out


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
def _hooked(sim, execute, sync):
    """Inside the block, `sim`'s ``_execute`` and ``_issue`` are ``execute(original)`` and its
    ``_sync`` is ``sync(original)`` (the wrappers of `profile_plan` and `timeline_plan`); the
    originals are back afterwards."""
    names = [n for n in ("_execute", "_issue") if hasattr(sim, n)]
    sync_name = "_sync" if hasattr(sim, "_sync") else "_mx_sync"
    originals = {n: getattr(sim, n) for n in (*names, sync_name)}
    for n in names:
        setattr(sim, n, execute(originals[n], n == "_execute"))
    setattr(sim, sync_name, sync(originals[sync_name]))
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
        def wrapper(t, *args):
            if t.xy not in prof:
                return fn(t, *args)
            nested = t.xy in inner
            c0, pc = t.perf.cycles, t.pc
            inner.add(t.xy)
            try:
                out = fn(t, *args)
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

    with _hooked(sim, wrap, lambda fn: wrap(fn, False)):
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
    from ..isa.core import background_unit
    from .run import run_plan_isasim
    want = set(compiled.sources if tiles is None else tiles)
    phases = {xy: phase_of_pc(compiled.sources[xy], raw=True) for xy in want}
    lines = {xy: line_of_pc(compiled.sources[xy]) for xy in want}
    out: dict = {xy: [] for xy in want}
    ready: dict = {}                    # tile -> the cycle its next instruction became next
    first: dict = {}                    # tile -> the cycle a blocked WAIT first tried
    inner = set()

    def sync(fn):
        def wrapper(t, *args):
            if t.xy in want:
                ready.setdefault(t.xy, t.perf.cycles)
            return fn(t, *args)
        return wrapper

    def run(fn, _is_execute):
        def wrapper(t, i):
            if t.xy not in want or t.xy in inner:
                return fn(t, i)
            c0, pc = t.perf.cycles, t.pc
            inner.add(t.xy)
            try:
                nxt = fn(t, i)
            finally:
                inner.discard(t.xy)
            if nxt is None:                 # a WAIT blocked: it runs again later
                first.setdefault(t.xy, c0)
                ready.setdefault(t.xy, c0)
                return nxt
            start = first.pop(t.xy, c0)
            unit = background_unit(i.op) if sim.config.overlap else None
            entry = t._busy.get(unit) if unit is not None else None
            finish = entry.until if entry is not None and entry.pc == pc else t.perf.cycles
            out[t.xy].append(Timed(pc, phases[t.xy][pc], lines[t.xy][pc], _klass(i.op),
                                   ready.pop(t.xy, c0), start, t.perf.cycles, finish))
            return nxt
        return wrapper

    t0 = max(t.perf.cycles for t in sim.tiles)     # the step's start (run_plan_isasim's)
    with _hooked(sim, run, sync):
        res = run_plan_isasim(sim, compiled, plan)
    return res, {xy: [replace(e, ready=e.ready - t0, start=e.start - t0,
                              retire=e.retire - t0, finish=e.finish - t0) for e in ev]
                 for xy, ev in out.items()}


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

    from ..config import ChipConfig
    from ..golden import quantize
    from ..model import load_checkpoint
    from ..paths import DEFAULT_CHECKPOINT, default_model_dir
    from . import compile_model
    from .run import load_isasim, run_step_isasim
    ap = argparse.ArgumentParser(prog="python -m chipotle.compiler.profile",
                                 description=main.__doc__)
    ap.add_argument("--config", default="default")
    ap.add_argument("--placement", choices=("pipeline", "tensor"), default="tensor")
    ap.add_argument("--pos", type=int, default=64)
    ap.add_argument("--rows", type=int, default=1,
                    help="tokens of the profiled step at --pos: 1, a decode step (the "
                         "default), up to M, a prefill batch of that many rows")
    ap.add_argument("--context", type=int, default=None)
    ap.add_argument("--kvapp", action=argparse.BooleanOptionalAction, default=None,
                    help="append K and V with kvapp (default: the placement's default, as "
                         "compile_model: with kvapp for the tensor placement)")
    ap.add_argument("--timeline", metavar="X,Y", default=None,
                    help="print the step's instructions on tile (X, Y) with their cycles "
                         "instead of the breakdown")
    ap.add_argument("--layer", type=int, default=None,
                    help="with --timeline: only the instructions of this layer")
    args = ap.parse_args(argv)
    cfg = ChipConfig.from_string(args.config)
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
    if not 1 <= args.rows <= cfg.max_m:
        ap.error(f"--rows must be in 1 .. {cfg.max_m} (M), not {args.rows}")
    if args.pos < 0:
        ap.error(f"--pos must be a position (0 or more), not {args.pos}")
    path = default_model_dir() / DEFAULT_CHECKPOINT
    if not path.is_file():
        from ..cli import _where
        ap.error(_where("checkpoint", path, "$CHIPOTLE_MODEL_DIR"))
    qm = quantize(load_checkpoint(path))
    if args.layer is not None and not 0 <= args.layer < qm.config.n_layers:
        ap.error(f"--layer {args.layer}: the model has layers 0 .. {qm.config.n_layers - 1}")
    cm = compile_model(qm, cfg, args.context, placement=args.placement, kvapp=args.kvapp)
    if args.pos + args.rows > cm.context:
        ap.error(f"--pos {args.pos} with --rows {args.rows} needs {args.pos + args.rows} "
                 f"positions; the compiled context is {cm.context}")
    sim = load_isasim(cm)
    toks = [(7 * i + 1) % qm.config.vocab_size for i in range(args.pos + args.rows)]
    M = cfg.max_m
    for p in range(0, args.pos, M):
        run_step_isasim(sim, cm, toks[p:min(p + M, args.pos)], p)
    what = ("decode step" if args.rows == 1 else f"prefill batch of {args.rows} rows")
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
    main()
