"""Benchmark: how many clock cycles per wall-clock second the ``Chip``'s RTL simulates.

Runs a greedy generation on the RTL of a configuration under cocotb (`chipotle.sim.chiprun`)
and prints the simulated cycles per wall second of the decode steps alone (from the first
generated token to the last, where the chip computes and the host only waits for doorbells),
of the whole run after the load, and of the host-link load; with ``--idle`` also of the bare
model, the clock running and no testbench work (the floor the testbench overhead sits on).

The model is the regression's synthetic model (`chipotle.compiler.small_model`, context 16)
for ``--model synthetic`` (the default for ``--config small``), else a llama2.c checkpoint
(default ``/work/shared/models/stories260K.bin``)::

    python -m chipotle.sim.bench_simspeed --config small --steps 8 --idle 20000
    python -m chipotle.sim.bench_simspeed --config default --steps 16 --placement tensor

The first run of a configuration pays the Verilator build, hierarchical by default (the
tile verilated and compiled once, `chipotle.sim.flow.run_cocotb`); ``--flat`` builds the flat
model instead (``HIERARCHICAL=0``), for comparison.  Builds are cached in
``build/verilator/``; the benchmark prints how long the build it used took and which kind it
is (from the build's ``built.ok``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from chipotle.config import ChipConfig
from chipotle.paths import DEFAULT_CHECKPOINT, default_model_dir
from chipotle.sim import toolchain

PROMPT = [1, 5, 9, 13, 17, 21]      # the regression's prompt for the synthetic model


def decode_speed(result: dict) -> tuple[int, float, float]:
    """Return ``(cycles, wall seconds, CPU seconds)`` from the first generated token to the
    last (CPU: of the simulator process).

    Parameters
    ----------
    result : dict
        A ``"generate"`` result of `chipotle.sim.chiprun.run_rtl` (its ``token_marks``).

    Raises
    ------
    ValueError
        If fewer than two tokens were generated (no decode step to time).
    """
    marks = result["token_marks"]
    if len(marks) < 2:
        raise ValueError("need at least two generated tokens to time the decode steps")
    (c0, t0, p0), (c1, t1, p1) = marks[0], marks[-1]
    return c1 - c0, t1 - t0, p1 - p0


def build_record(build_dir: str | Path) -> dict[str, str]:
    """Return the ``key value`` lines of a build's ``built.ok`` (`chipotle.sim.flow.run_cocotb`
    writes ``build_seconds`` and ``build``, flat or hierarchical) as a dict; empty for an
    older stamp without them.

    Raises
    ------
    FileNotFoundError
        If ``build_dir`` holds no ``built.ok`` (not a finished build).
    """
    lines = (Path(build_dir) / "built.ok").read_text().splitlines()
    return dict(line.split(" ", 1) for line in lines if " " in line)


def _build_line(result: dict) -> str:
    rec = build_record(result["build_dir"])
    secs = rec.get("build_seconds", "?")
    pgo = ", profile-guided (PGO=1; training run included)" if rec.get("pgo") == "yes" else ""
    return f"build: {rec.get('build', 'unknown kind')}{pgo}, {secs} s (C++ compile included; " \
           f"cached in {result['build_dir']})"


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (`chipotle.cli.ArgumentParser`: its errors are one line)."""
    from chipotle.cli import ArgumentParser

    p = ArgumentParser(prog="python -m chipotle.sim.bench_simspeed",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="small",
                   help="configuration name or key=value list (ChipConfig.from_string; "
                        "default small)")
    p.add_argument("--model", default=None,
                   help="'synthetic' or a llama2.c checkpoint (default: synthetic for small, "
                        f"else {DEFAULT_CHECKPOINT} in the model folder, $CHIPOTLE_MODEL_DIR "
                        "or ../shared/models)")
    p.add_argument("--steps", type=int, default=8, help="tokens to generate (default 8)")
    p.add_argument("--placement", default="tensor", choices=("pipeline", "tensor"),
                   help="pipeline of stages, or every layer on every tile (tensor) (default: "
                        "%(default)s)")
    p.add_argument("--sim", default="verilator", choices=("verilator", "icarus"),
                   help="the RTL simulator (default: %(default)s)")
    p.add_argument("--cxx-opt", default=toolchain.FAST_CXX_OPT,
                   help=f"Verilator C++ optimisation, one string for several flags (default "
                        f"{toolchain.FAST_CXX_OPT}; the regression uses -O0)")
    p.add_argument("--clock", default="gpi", choices=("gpi", "py"),
                   help="cocotb clock implementation (default gpi)")
    p.add_argument("--threads", type=int, default=1,
                   help="Verilator model threads (--threads; default 1)")
    p.add_argument("--flat", action="store_true",
                   help="flat Verilator build instead of the hierarchical one (HIERARCHICAL=0)")
    p.add_argument("--verilog", default=None, metavar="FILE",
                   help="the chip's Verilog (e.g. a build folder's chip.v) instead of the "
                        "current sources' (keeps runs on one design while hw/ changes)")
    p.add_argument("--idle", type=int, default=0, metavar="CYCLES",
                   help="also time CYCLES cycles of the clock alone (no generation)")
    p.add_argument("--no-generate", action="store_true", help="only the --idle run")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print one line per figure; return 0.

    Bad input ends the command with one ``error:`` line, exit status 2, before the chip's
    Verilog is generated or anything is built: an unknown ``--config``, ``--steps`` below 2,
    ``--idle`` below 0, ``--threads`` below 1, ``--no-generate`` without ``--idle``, an empty
    ``--model`` or ``--verilog``, a ``--verilog`` that is missing or not text, a model file
    that is missing or not a checkpoint.
    """
    from chipotle.cli import _where
    from chipotle.sim.chiprun import Job, run_rtl

    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        config = ChipConfig.from_string(args.config)
    except ValueError as e:
        ap.error(f"--config: {e}")
    if args.no_generate and not args.idle:
        ap.error("--no-generate runs only the --idle run; give --idle CYCLES")
    if args.steps < 2 and not args.no_generate:
        ap.error(f"--steps must be at least 2 (the first token ends the prefill), not "
                 f"{args.steps}")
    if args.idle < 0:
        ap.error(f"--idle must be a number of cycles, 0 or more, not {args.idle}")
    if args.threads < 1:
        ap.error(f"--threads must be 1 or more, not {args.threads}")
    if args.model == "":
        ap.error("--model is empty: give 'synthetic' or a llama2.c checkpoint")
    verilog = None
    if args.verilog is not None:
        from chipotle.sim.paths import read_input
        try:
            verilog = read_input(args.verilog, "the chip's Verilog", "--verilog")
        except ValueError as e:
            (ap.error if args.verilog == "" else ap.refuse)(str(e))
    if args.flat:
        os.environ["HIERARCHICAL"] = "0"    # read by chipotle.sim.flow.run_cocotb
    name = args.model or ("synthetic" if args.config == "small"
                          else str(default_model_dir() / DEFAULT_CHECKPOINT))
    if name != "synthetic" and not args.no_generate:
        # before the Verilog and the build, which take minutes
        from chipotle.model import CheckpointError, load_checkpoint
        if not Path(name).is_file():
            ap.refuse(f"--model {name}: no such file" if args.model is not None
                      else _where("checkpoint", Path(name), "--model"))
        try:
            load_checkpoint(name)
        except (CheckpointError, OSError) as e:
            ap.refuse(f"--model: {e}")

    def progress(msg):
        print(f"[bench] {msg}", file=sys.stderr, flush=True)

    from chipotle.sim.chiprun import chip_verilog

    # once: both runs use one build
    verilog = verilog if verilog is not None else chip_verilog(config, progress)
    kind = ("flat" if args.flat else "hierarchical") if args.sim == "verilator" else ""
    head = f"{config}, {args.sim} {kind} {args.cxx_opt if args.sim == 'verilator' else ''}, " \
           f"{args.threads} thread(s), clock {args.clock}"
    if args.idle:
        job = Job(config=config.as_dict(), model=None, kind="idle", idle_cycles=args.idle,
                  clock=args.clock)
        r = run_rtl(job, sim=args.sim, cxx_opt=args.cxx_opt, public=False,
                    threads=args.threads, verilog=verilog, progress=progress)
        print(f"idle: {r['sim_cycles']} cycles in {r['sim_seconds']:.2f} s = "
              f"{r['cycles_per_second']:,.0f} cycles/s; CPU {r['sim_cpu_seconds']:.2f} s = "
              f"{r['sim_cycles'] / r['sim_cpu_seconds']:,.0f} cycles/CPU-s ({head})", flush=True)
        print(_build_line(r), flush=True)
    if args.no_generate:
        return 0

    if name == "synthetic":
        from chipotle.compiler import small_model
        model, context, prompt, tok = small_model(), 16, PROMPT, None
    else:
        model, context, tok = Path(name), None, None
        prompt = PROMPT[:1]     # BOS: a story from scratch
        tok_path = Path(name).with_name("tok512.bin")
        tok = str(tok_path) if tok_path.exists() else None
    job = Job(config=config.as_dict(), model=model, tokenizer=tok, context=context,
              placement=args.placement, prompt_tokens=prompt, steps=args.steps,
              temperature=0.0, clock=args.clock)
    t = time.perf_counter()
    r = run_rtl(job, sim=args.sim, cxx_opt=args.cxx_opt, threads=args.threads,
                verilog=verilog, progress=progress)
    wall = time.perf_counter() - t
    cycles, secs, cpu = decode_speed(r)
    n = len(r["token_marks"]) - 1
    print(f"decode: {cycles} cycles of {n} steps ({cycles / n:,.0f} simulated per token, the "
          f"host's traffic between the steps included) in {secs:.2f} s = "
          f"{cycles / secs:,.0f} cycles/s; CPU {cpu:.2f} s = {cycles / cpu:,.0f} cycles/CPU-s "
          f"({head}, {args.placement}, {name})")
    print(f"after load: {r['sim_cycles']} cycles in {r['sim_seconds']:.2f} s = "
          f"{r['cycles_per_second']:,.0f} cycles/s; CPU {r['sim_cpu_seconds']:.2f} s = "
          f"{r['sim_cycles'] / r['sim_cpu_seconds']:,.0f} cycles/CPU-s")
    print(f"load: {r['load_cycles']} cycles in {r['load_seconds']:.2f} s = "
          f"{r['load_cycles'] / r['load_seconds']:,.0f} cycles/s")
    if not args.idle:
        print(_build_line(r))
    print(f"wall: {wall:.1f} s in all (Verilog, build if not cached, compile, load, run)")
    return 0


if __name__ == "__main__":
    from chipotle.cli import run_main
    run_main(main)
