"""Where a step's cycles go: a per-tile, per-phase, per-instruction-class breakdown from the
ISA simulator's cost model (an estimate; the RTL is the authority on cycles).

``python -m chipotle.compiler.profile [--placement tensor] [--pos 64]`` prints the
breakdown of one decode step of stories260K (the command behind the table in
``docs/architecture.md``, "Where a decode step's cycles go").

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

__all__ = ["phase_of_pc", "profile_plan", "format_profile", "CLASSES"]

#: Instruction classes, in print order.
CLASSES = ("matrix", "vector", "send", "wait", "kvapp", "scalar")


def phase_of_pc(source: str) -> list:
    """Return the phase of every instruction of an assembly text (index = PC).

    Parameters
    ----------
    source : str
        A program of `chipotle.compiler` (comments ``; text``, labels ``name:``).

    Returns
    -------
    list of str
        One phase name per instruction; ``"entry"`` before the first comment.
    """
    phase, out = "entry", []
    for line in source.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith(";") or s.startswith("#"):
            phase = re.sub(r"^layer \d+ ", "layer: ", s[1:].strip())
            phase = re.sub(r"rows? \d+ \.\. \d+", "rows", phase)
            phase = re.sub(r"(KV|query) heads \d+ \.\. \d+", r"\1 heads", phase)
            phase = re.sub(r"KV head \d+", "KV head", phase)
            phase = re.sub(r"columns \d+ \.\. \d+", "columns", phase)
            continue
        if s.endswith(":") or s.startswith("."):
            continue
        out.append(phase)
    return out


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

    names = [n for n in ("_execute", "_issue") if hasattr(sim, n)]
    sync = "_sync" if hasattr(sim, "_sync") else "_mx_sync"
    originals = {n: getattr(sim, n) for n in (*names, sync)}
    sim._execute = wrap(originals["_execute"], True)
    if "_issue" in originals:
        sim._issue = wrap(originals["_issue"], False)
    setattr(sim, sync, wrap(originals[sync], False))
    try:
        res = run_plan_isasim(sim, compiled, plan)
    finally:
        for n in originals:
            delattr(sim, n)
    return res, {xy: {ph: dict(d) for ph, d in p.items()} for xy, p in prof.items()}


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
    from ..paths import default_model_dir
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
    args = ap.parse_args(argv)
    cfg = ChipConfig.from_string(args.config)
    if not 1 <= args.rows <= cfg.max_m:
        ap.error(f"--rows must be in 1 .. {cfg.max_m} (M), not {args.rows}")
    qm = quantize(load_checkpoint(default_model_dir() / "stories260K.bin"))
    cm = compile_model(qm, cfg, args.context, placement=args.placement, kvapp=args.kvapp)
    sim = load_isasim(cm)
    toks = [(7 * i + 1) % qm.config.vocab_size for i in range(args.pos + args.rows)]
    M = cfg.max_m
    for p in range(0, args.pos, M):
        run_step_isasim(sim, cm, toks[p:min(p + M, args.pos)], p)
    res, prof = profile_plan(sim, cm, cm.step(toks[args.pos:], args.pos))
    what = ("decode step" if args.rows == 1 else f"prefill batch of {args.rows} rows")
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
