"""Where the RTL spends cycles the ISA simulator's estimate does not: one step traced on both.

The benchmark (`chipotle.sim.bench`) gives a step's cycles on the RTL and the estimate of the
ISA simulator's cost model (``docs/isa.md`` section 6); this tool says where they part.  It
runs the same steps of a compiled model on `chipotle.isasim` and on the ``Chip`` RTL under
cocotb (`chipotle.sim.cocotb_trace`), and for one step (the decode step at ``--pos``, after
the prompt's prefill) compares:

* **per instruction**: every tile's controller retires its program's instructions in the
  same order on both (the programs are deterministic), so the cycles between one retire and
  the next, RTL minus estimate, are the cycles the RTL lost *at* that instruction (waiting for
  its unit, for a hazard, for a counter, or running it).  They are summed per phase (the
  compiler's comments, as `chipotle.compiler.profile`) and per class of the instruction that
  retired late (``matrix``, ``vector``, ``send``, ``wait``, ``kvapp``, ``scalar``), and the
  instructions that lost most are listed.  The RTL's retires come from the controller's
  ``retired`` port and ``pc`` register, sampled every cycle in a flat build in which these
  and the SRAM arrays are public (`chipotle.hw.chip.TRACE_SIGNALS`, `run_rtl`'s ``public``:
  ``--config small --pos 6`` took 88 s with its build, idle 2 cores);
* **per tile**: the step's performance counters (`chipotle.driver.PERF_NAMES`) against the
  simulator's (vector busy, wait stalls, matrix cycles), and the RTL's ``sram_stalls`` and
  the network interface's ``ni_net_stalls``, which the estimate does not model.  With
  ``--counters-only`` the retires are not recorded and the build is the usual ports-only
  (hierarchical) one: the cached 4 x 4 build of ``make bench`` serves.

Run::

    python -m chipotle.sim.trace --config small --pos 6          # synthetic model, 2 x 2
    python -m chipotle.sim.trace --config default --pos 64 --counters-only

Members
-------
isasim_trace, rtl_trace
    Run the steps on one side; return the steps and the traced step's retires.
compare
    Line the two traces up; return a `TraceReport`.
TraceReport
    The comparison, ``str()`` is the printed tables.
"""

from __future__ import annotations

import asyncio
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from . import toolchain

__all__ = ["step_list", "isasim_trace", "rtl_trace", "compare", "TraceReport", "main"]

#: Instruction classes of the per-phase table (`chipotle.compiler.profile.CLASSES`).
CLASSES = ("matrix", "vector", "send", "wait", "kvapp", "scalar")


def step_list(compiled, pos: int, seed_token: int = 7) -> list:
    """Return the ``(tokens, pos)`` steps of a prompt of ``pos`` tokens and a decode step.

    The prompt (tokens ``(7 i + 1) mod vocab``, as `chipotle.compiler.profile`) is run in
    batches of up to M tokens (one `CompiledModel.step` each), then one token at ``pos``.

    Parameters
    ----------
    compiled : chipotle.compiler.CompiledModel
    pos : int
        Position of the decode step (>= 0, below the compiled context).

    Raises
    ------
    ValueError
        If ``pos`` is negative or not below the compiled context.
    """
    if not 0 <= pos < compiled.context:
        raise ValueError(f"`pos` must be in 0 .. {compiled.context - 1} (the compiled "
                         f"context), not {pos}")
    vocab = compiled.model.vocab_size
    toks = [(seed_token * i + 1) % vocab for i in range(pos + 1)]
    M = compiled.config.max_m
    steps = [(toks[p:min(p + M, pos)], p) for p in range(0, pos, M)]
    return steps + [([toks[pos]], pos)]


def _step_dict(s) -> dict:
    return {"tokens": list(s.tokens), "pos": s.pos, "token": s.token, "logits": s.logits,
            "cycles": s.cycles, "perf": dict(s.perf),
            "perf_per_tile": {tuple(xy): dict(d) for xy, d in s.perf_per_tile.items()}}


def isasim_trace(compiled, steps: list, trace_step: int = -1) -> dict:
    """Run ``steps`` on the ISA simulator through the driver; record one step's retires.

    Parameters
    ----------
    compiled : chipotle.compiler.CompiledModel
    steps : list of (list of int, int)
        ``(tokens, pos)`` per step (`step_list`).
    trace_step : int
        Index in ``steps`` of the traced step (negative: from the end).

    Returns
    -------
    dict
        ``steps`` (per step ``tokens``, ``pos``, ``token``, ``logits``, ``cycles``, ``perf``,
        ``perf_per_tile``) and ``retires``: ``{(x, y): [(cycle, pc), ...]}``, the estimated
        cycle (from the step's start) at which each instruction retired: for a background
        instruction when the controller let it go, for the others when it finished.
    """
    from chipotle.driver import Driver, IsaSimBackend

    trace_step %= len(steps)
    backend = IsaSimBackend(compiled.config)
    sim = backend.sim
    drv = Driver(compiled, backend)
    retires: dict = {xy: [] for xy in compiled.programs}
    origin = [None]
    inner: set = set()

    def wrap(fn):
        def wrapper(t, *args):
            nested = t.xy in inner
            pc = t.pc
            inner.add(t.xy)
            try:
                out = fn(t, *args)
            finally:
                if not nested:
                    inner.discard(t.xy)
            if not nested and out is not None and origin[0] is not None and t.xy in retires:
                retires[t.xy].append((t.perf.cycles - origin[0], pc))
            return out
        return wrapper

    real_start = backend.start

    async def start(xy, pc):
        if origin[0] is None:
            origin[0] = max(u.perf.cycles for u in sim.tiles)
        await real_start(xy, pc)

    async def go():
        await drv.load()
        out = []
        for k, (tokens, pos) in enumerate(steps):
            if k == trace_step:
                backend.start = start
                for name in ("_execute", "_issue"):
                    setattr(sim, name, wrap(getattr(type(sim), name).__get__(sim)))
            out.append(_step_dict(await drv.step(tokens, pos, logits=True)))
            if k == trace_step:
                backend.start = real_start
                for name in ("_execute", "_issue"):
                    delattr(sim, name)
        return out

    return {"steps": asyncio.run(go()), "retires": retires}


def rtl_trace(compiled, steps: list, trace_step: int = -1, *, sim: str = "verilator",
              retires: bool = True, cxx_opt: str | None = None, progress=None) -> dict:
    """Run ``steps`` on the RTL of ``compiled.config``; record one step's retires.

    Parameters
    ----------
    compiled, steps, trace_step
        As `isasim_trace`.
    sim : {"verilator", "icarus"}
    retires : bool
        Record the retires (a flat build with public signals, the model back-door loaded);
        False: only the performance counters, on the usual ports-only build.
    cxx_opt : str, optional
        Verilator's C++ optimisation of the build; default ``-O1`` with ``retires`` (the
        flat build compiles faster), else `chipotle.sim.toolchain.FAST_CXX_OPT` (the build
        of `chipotle.sim.bench`).
    progress : callable of str, optional
        Told about the slow phases.

    Returns
    -------
    dict
        As `isasim_trace` (``retires`` empty when not recorded), plus ``starts``: the cycle
        at which the host started each tile in the traced step, from the first START.
    """
    from chipotle.hw.chip import TRACE_SIGNALS

    from .chiprun import Job, run_rtl

    if cxx_opt is None:
        cxx_opt = "-O1" if retires else toolchain.FAST_CXX_OPT
    job = Job(config=compiled.config.as_dict(), model=compiled, kind="steps",
              step_list=[(list(t), p) for t, p in steps], trace_step=trace_step % len(steps),
              trace_retires=retires, backdoor=retires)
    return run_rtl(job, sim=sim, cxx_opt=cxx_opt, public=TRACE_SIGNALS if retires else False,
                   progress=progress,
                   test_module="chipotle.sim.cocotb_trace")


@dataclass
class TraceReport:
    """The comparison of one step traced on the ISA simulator and on the RTL.

    Attributes
    ----------
    cycles : (int, int)
        The step's cycles, estimate and RTL (the driver's: first START to the doorbell).
    tiles : dict
        Per tile ``(x, y)``: ``{"last": (est, rtl)}`` (the last retire), ``"counters"``:
        ``{name: (est or None, rtl)}``, ``"group"``: the tile's group name.
    phases : list of (str, dict)
        In program order: phase name and, per group, ``{"est": mean cycles, "rtl": ...,
        "lost": {class: mean cycles}}`` (per tile of the group).
    top : list of tuple
        ``(lost cycles summed over tiles, phase, opcode, occurrences)``, most first.
    mismatch : list of str
        Tiles whose retire sequences differ (compared up to the first difference).
    bit_exact : bool
        Every step's token and logits equal on both sides.
    traced : bool
        The RTL's retires were recorded (else only the counters are compared).
    """

    cycles: tuple
    tiles: dict
    phases: list
    top: list
    groups: dict
    mismatch: list = field(default_factory=list)
    bit_exact: bool = True
    title: str = ""
    traced: bool = True

    def __str__(self) -> str:
        e, r = self.cycles
        out = [self.title,
               f"step cycles: estimate {e:,}, RTL {r:,}, RTL - estimate {r - e:+,} "
               f"({100 * (r - e) / max(e, 1):+.1f}%); tokens and logits "
               f"{'equal' if self.bit_exact else 'DIFFER'} on both"]
        for m in self.mismatch:
            out.append(f"warning: {m}")
        names = ("vector_busy", "wait_stalls", "matrix_cycles", "instructions")
        out.append("\nper tile (estimate / RTL; sram_stalls and ni_net_stalls: RTL only):")
        out.append(f"{'tile':<8}{'group':<12}{'last retire':>16}" +
                   "".join(f"{n:>16}" for n in names) + f"{'sram_stalls':>13}"
                   f"{'ni_net_stalls':>15}")
        for xy in sorted(self.tiles):
            t = self.tiles[xy]
            c = t["counters"]
            le, lr = t["last"]
            last = f"{le:,} / {lr:,}" if self.traced else f"{le:,} / -"
            out.append(f"{str(xy):<8}{t['group'][:11]:<12}{last:>16}" + "".join(
                f"{_pair(c.get(n)):>16}" for n in names) +
                f"{c.get('sram_stalls', (None, 0))[1]:>13,}"
                f"{c.get('ni_net_stalls', (None, 0))[1]:>15,}")
        if not self.traced:
            out.append("\n(no retires recorded: the per-phase comparison needs the retire "
                       "trace, without --counters-only)")
        for g, members in self.groups.items() if self.traced else ():
            out.append(f"\n{g} ({len(members)} tiles), mean per tile: the phase's cycles "
                       f"(first retire to the next phase's) and the RTL's extra cycles by the "
                       f"class of the instruction that retired late")
            out.append(f"{'phase':<52}{'estimate':>9}{'RTL':>8}{'extra':>8}" +
                       "".join(f"{c:>8}" for c in CLASSES))
            te = tr = 0.0
            tl = defaultdict(float)
            for ph, per in self.phases:
                d = per.get(g)
                if d is None:
                    continue
                te, tr = te + d["est"], tr + d["rtl"]
                for c in CLASSES:
                    tl[c] += d["lost"].get(c, 0.0)
                out.append(f"{ph[:51]:<52}{d['est']:9,.0f}{d['rtl']:8,.0f}"
                           f"{d['rtl'] - d['est']:+8,.0f}" +
                           "".join(f"{d['lost'].get(c, 0.0):+8,.0f}" for c in CLASSES))
            out.append(f"{'total (to the last retire)':<52}{te:9,.0f}{tr:8,.0f}{tr - te:+8,.0f}"
                       + "".join(f"{tl[c]:+8,.0f}" for c in CLASSES))
        if self.top and self.traced:
            out.append("\ninstructions that lost most (RTL - estimate, summed over tiles):")
            out.append(f"{'extra':>8}{'count':>7}  {'opcode':<8}phase")
            for lost, ph, op, n in self.top:
                out.append(f"{lost:+8,}{n:>7}  {op:<8}{ph}")
        return "\n".join(out)


def _pair(p) -> str:
    if p is None:
        return "-"
    e, r = p
    return f"{'-' if e is None else f'{e:,}'} / {r:,}"


def _groups(compiled) -> dict:
    """Tiles by role: attention tiles (those with RoPE tables) and the others."""
    out: dict = {}
    for xy in sorted(compiled.programs):
        regions = getattr(compiled.placement.tiles.get(xy), "regions", {}) \
            if hasattr(compiled, "placement") else {}
        key = "attention tiles" if "rope" in regions else "other tiles"
        out.setdefault(key, []).append(xy)
    return out


def compare(compiled, est: dict, rtl: dict, trace_step: int = -1, top: int = 15
            ) -> TraceReport:
    """Line up the traced step of `isasim_trace` and `rtl_trace`; return the report.

    Parameters
    ----------
    compiled : chipotle.compiler.CompiledModel
    est, rtl : dict
        The two results.
    trace_step : int
        The traced step's index (as given to both).
    top : int
        Instructions listed in ``TraceReport.top``.
    """
    import numpy as np

    from chipotle.compiler.profile import _klass, phase_of_pc
    from chipotle.isa import decode

    se, sr = est["steps"][trace_step], rtl["steps"][trace_step]
    exact = all(a["token"] == b["token"] and np.array_equal(a["logits"], b["logits"])
                for a, b in zip(est["steps"], rtl["steps"], strict=True))
    groups = _groups(compiled)
    group_of = {xy: g for g, members in groups.items() for xy in members}
    tiles, mismatch = {}, []
    phase_sum: dict = {}            # phase -> group -> {"est", "rtl", "lost": {class}}
    order: list = []
    lost_at: dict = defaultdict(lambda: [0, 0])
    for xy in sorted(compiled.programs):
        pe, pr = se["perf_per_tile"].get(xy, {}), sr["perf_per_tile"].get(xy, {})
        counters = {k: (pe.get(k), v) for k, v in pr.items()}
        re_, rr = est["retires"].get(xy, []), rtl["retires"].get(xy, [])
        tiles[xy] = {"group": group_of[xy], "counters": counters,
                     "last": (re_[-1][0] if re_ else 0, rr[-1][0] if rr else 0)}
        if not rr:
            continue
        n = min(len(re_), len(rr))
        k_bad = next((k for k in range(n) if re_[k][1] != rr[k][1]), None)
        if k_bad is not None or len(re_) != len(rr):
            mismatch.append(f"tile {xy}: {len(re_)} retires estimated, {len(rr)} on the RTL"
                            + (f", first different PC at retire {k_bad} (estimate "
                               f"{re_[k_bad][1]}, RTL {rr[k_bad][1]})" if k_bad is not None
                               else ""))
            n = n if k_bad is None else k_bad
        phases = phase_of_pc(compiled.sources[xy])
        words = compiled.programs[xy]
        g = group_of[xy]
        prev_e = prev_r = 0          # both from the step's first START
        for k in range(n):
            (te, pc), (tr, _) = re_[k], rr[k]
            de, dr = te - prev_e, tr - prev_r
            prev_e, prev_r = te, tr
            ph = phases[pc] if pc < len(phases) else "?"
            op = decode(int(words[pc])).op
            if ph not in phase_sum:
                phase_sum[ph] = {}
                order.append(ph)
            d = phase_sum[ph].setdefault(g, {"est": 0.0, "rtl": 0.0, "lost": defaultdict(float)})
            d["est"] += de
            d["rtl"] += dr
            d["lost"][_klass(op)] += dr - de
            a = lost_at[(ph, op.name.lower())]
            a[0] += dr - de
            a[1] += 1
    phases_out = []
    for ph in order:
        per = {}
        for g, d in phase_sum[ph].items():
            k = len(groups[g])
            per[g] = {"est": d["est"] / k, "rtl": d["rtl"] / k,
                      "lost": {c: v / k for c, v in d["lost"].items()}}
        phases_out.append((ph, per))
    tops = sorted(((v[0], ph, op, v[1]) for (ph, op), v in lost_at.items()),
                  key=lambda r: -abs(r[0]))[:top]
    return TraceReport(cycles=(se["cycles"], sr["cycles"]), tiles=tiles, phases=phases_out,
                       top=tops, groups=groups, mismatch=mismatch, bit_exact=exact,
                       traced=any(rtl["retires"].values()))


def main(argv: list[str] | None = None) -> int:
    """Trace one decode step on the ISA simulator and the RTL; print the comparison.

    Bad input ends the command with one ``error:`` line, exit status 2, before the model is
    compiled or the RTL built: a bad ``--config`` or a ``--context`` below 1
    (`chipotle.cli.module_config`), an empty ``--model``, a ``--top`` below 1; a missing or
    unreadable checkpoint, a configuration that does not hold the model (naming those that
    do, `chipotle.cli.config_tips`), a ``--pos`` or ``--step`` outside the steps, before the
    RTL is built.
    """
    from chipotle.cli import ArgumentParser, _where, config_tips, module_config
    from chipotle.compiler import FitError, compile_model, small_model
    from chipotle.model import CheckpointError, load_checkpoint
    from chipotle.paths import DEFAULT_CHECKPOINT, default_model_dir

    ap = ArgumentParser(prog="python -m chipotle.sim.trace",
                        description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="small", help="chip configuration (ChipConfig."
                    "from_string; default: small)")
    ap.add_argument("--model", default=None, help="llama2.c checkpoint, or 'synthetic' "
                    "(the regression's small model); default: synthetic on the small "
                    "configuration, else stories260K")
    ap.add_argument("--placement", choices=("pipeline", "tensor"), default="tensor",
                    help="pipeline of stages, or every layer on every tile (tensor) (default: "
                         "%(default)s)")
    ap.add_argument("--pos", type=int, default=6, help="position of the traced decode step "
                    "(the prompt before it is prefilled; default 6)")
    ap.add_argument("--context", type=int, default=None,
                    help="positions to compile for (default: 16 for the synthetic model, "
                         "else the compiler's)")
    ap.add_argument("--sim", choices=("verilator", "icarus"), default="verilator",
                    help="the RTL simulator (default: %(default)s)")
    ap.add_argument("--counters-only", action="store_true", help="compare the per-tile "
                    "performance counters only (ports-only build, no retire trace)")
    ap.add_argument("--cxx-opt", default=None, help="Verilator C++ optimisation (default: "
                    f"-O1 with the retire trace, {toolchain.FAST_CXX_OPT} with "
                    "--counters-only)")
    ap.add_argument("--top", type=int, default=15, help="instructions listed (default 15)")
    ap.add_argument("--step", type=int, default=-1, help="index of the traced step in the "
                    "step list: the prompt's prefill steps of M tokens, then the decode step "
                    "(default -1: the decode step)")
    args = ap.parse_args(argv)
    config = module_config(ap, args)    # --config, and --context (0 was taken as 16)
    if args.model == "":
        ap.error("--model is empty: give a llama2.c checkpoint file or 'synthetic', or leave "
                 "--model out for the default model")
    if args.top < 1:
        ap.error(f"--top must be 1 or more (the instructions listed), not {args.top}")
    model = args.model or ("synthetic" if args.config == "small" else None)
    if model == "synthetic":
        source = small_model()
        context = 16 if args.context is None else args.context
    else:
        path = Path(model) if model else default_model_dir() / DEFAULT_CHECKPOINT
        if model is None and not path.is_file():     # where it looked, and the fetch hint
            ap.refuse(_where("checkpoint", path, "--model"))
        try:
            source = load_checkpoint(path)
        except (CheckpointError, OSError) as e:
            ap.refuse(f"--model {path}: {e}")
        context = args.context
    try:
        compiled = compile_model(source, config, context=context, placement=args.placement)
    except (FitError, ValueError) as e:       # the configurations that fit, as whole options
        ap.refuse(config_tips(e, args.config))
    try:
        steps = step_list(compiled, args.pos)
    except ValueError as e:
        ap.error(f"--pos: {e}")
    if not -len(steps) <= args.step < len(steps):
        ap.error(f"--step must be in {-len(steps)} .. {len(steps) - 1} ({len(steps)} steps), "
                 f"not {args.step}")
    k = args.step % len(steps)
    est = isasim_trace(compiled, steps, k)
    rtl = rtl_trace(compiled, steps, k, sim=args.sim, retires=not args.counters_only,
                    cxx_opt=args.cxx_opt,
                    progress=lambda m: print(f"[trace] {m}", file=sys.stderr, flush=True))
    rep = compare(compiled, est, rtl, k, top=args.top)
    toks, p = steps[k]
    what = (f"decode step at position {p}" if k == len(steps) - 1 else
            f"prefill step {k} ({len(toks)} tokens at positions {p} .. {p + len(toks) - 1})")
    rep.title = (f"# {what}, {config}, {args.placement} placement, "
                 f"{'synthetic model' if model == 'synthetic' else 'stories260K'}: ISA "
                 f"simulator estimate against the RTL ({args.sim})")
    print(rep)
    return 0 if rep.bit_exact else 1


if __name__ == "__main__":
    from chipotle.cli import run_main
    run_main(main)
