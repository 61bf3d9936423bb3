"""Decode cycles at every position, for settings of the weighted sum's split: the measurement
behind `chipotle.compiler.tensor.WSUM_SPLIT_FROM`.

For each value of ``--split-from`` (``WSUM_SPLIT_FROM``, keys from which an attention tile
hands its weighted sum's tail to its helper; a value past the context: never) the model is
compiled (every setting before the first run, as ``python -m chipotle.compiler`` compiles:
for ``--context`` positions, by default the model's ``seq_len`` or the longest context the
configuration holds; one that does not hold the model is refused in one ``error:`` line
naming the configurations that do) and run as one decode step at each position
``0 .. --to`` (one token per step, no prefill batches: a step's cycles do not depend on what
the KV cache holds), and the step cycles are printed as means over bins of ``--bin``
positions, with each setting's difference from the first.  Session 32's run
(``docs/performance.md``, "Session 32")::

    python -m chipotle.sim.decode_sweep --backend verilator --to 511 --split-from 0,100000

(about 7 minutes per setting on the RTL with the build cached, on a loaded 2-core machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

__all__ = ["first_tail_keys", "sweep", "main"]


@contextlib.contextmanager
def _split_from(value: int):
    """`chipotle.compiler.tensor.WSUM_SPLIT_FROM` set to `value` while the context lasts."""
    from chipotle.compiler import tensor

    saved = tensor.WSUM_SPLIT_FROM
    tensor.WSUM_SPLIT_FROM = value
    try:
        yield tensor
    finally:
        tensor.WSUM_SPLIT_FROM = saved


def first_tail_keys(word_bytes: int) -> int:
    """Return the fewest keys whose decode weighted sum `chipotle.compiler.tensor`'s split
    gives a tail at ``WSUM_SPLIT_FROM = 0`` (below, the tile's share covers every key, so a
    sweep of positions below ``first_tail_keys - 1`` runs alike at every setting)."""
    with _split_from(0) as tensor:
        return next(n for n in range(1, 1 << 16) if tensor._wsum_split(n, word_bytes) < n)


def sweep(qm, config, split_from: int, last: int, backend: str = "verilator",
          compiled=None) -> list[int]:
    """Return the cycles of decode steps at positions ``0 .. last``.

    Parameters
    ----------
    qm : chipotle.golden.QuantizedModel
    config : chipotle.config.ChipConfig
    split_from : int
        `chipotle.compiler.tensor.WSUM_SPLIT_FROM` for this compile (restored after).
    last : int
        The last position (below the compiled context).
    backend : {"verilator", "icarus", "isasim"}
        The RTL (cycles measured) or the ISA simulator (estimated).
    compiled : chipotle.compiler.CompiledModel, optional
        `qm` already compiled for `config` with the tensor placement at `split_from` (as
        `main` does, which refuses a configuration that does not fit in one line, and
        compiles for a shorter context if only that fits); default: compiled here, for the
        model's ``seq_len``.

    Returns
    -------
    list of int
        Cycles of the step at each position, ``last + 1`` of them.

    Raises
    ------
    chipotle.compiler.FitError
        If `compiled` is not given and the model does not fit `config`.
    """
    from chipotle.compiler import compile_model

    if compiled is None:
        with _split_from(split_from):
            compiled = compile_model(qm, config, placement="tensor")
    cm = compiled
    steps = [([1], 0)] + [([5], p) for p in range(1, last + 1)]
    if backend == "isasim":
        from chipotle.driver import Driver, IsaSimBackend

        async def go():
            drv = Driver(cm, IsaSimBackend(config))
            await drv.load()
            return [(await drv.step(t, p)).cycles for t, p in steps]
        return asyncio.run(go())
    from chipotle.sim.chiprun import Job, run_rtl
    job = Job(config=config.as_dict(), model=cm, kind="steps", placement="tensor",
              step_list=steps, perf=False)
    r = run_rtl(job, sim=backend, progress=lambda m: print(m, file=sys.stderr, flush=True))
    return [s["cycles"] for s in r["steps"]]


def main(argv: list[str] | None = None) -> int:
    """Run the sweep (``python -m chipotle.sim.decode_sweep --help``)."""
    from chipotle.cli import (
        ArgumentParser,
        compile_for_module,
        module_config,
        module_model,
        positive_int,
    )
    from chipotle.compiler.tensor import WSUM_SPLIT_OFFSET, WSUM_SPLIT_SHARE
    from chipotle.paths import DEFAULT_CHECKPOINT, default_model_dir

    ap = ArgumentParser(prog="python -m chipotle.sim.decode_sweep",
                        description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("verilator", "icarus", "isasim"), default="verilator",
                    help="the RTL, or the ISA simulator's estimate (default: %(default)s)")
    ap.add_argument("--config", default="default", help="chip configuration (default: "
                    "default)")
    ap.add_argument("--context", type=int, default=None,
                    help="positions to compile for (default: the model's seq_len, or the "
                         "longest context the configuration holds, said so, if that is "
                         "shorter)")
    ap.add_argument("--to", type=positive_int, default=511, help="the last position "
                    "(default: %(default)s)")
    ap.add_argument("--split-from", default="0,100000", help="WSUM_SPLIT_FROM values, "
                    "comma-separated; the first is the one the others are compared with "
                    "(default: %(default)s: every tail, no tail)")
    ap.add_argument("--bin", type=positive_int, default=32, help="positions per printed mean "
                    "(default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        values = [int(v) for v in args.split_from.split(",")]
    except ValueError:
        ap.error(f"--split-from takes integers separated by commas, not {args.split_from!r}")
    if any(v < 0 for v in values):
        ap.error(f"--split-from values must not be negative, not {args.split_from!r}")
    config = module_config(ap, args)       # --config and --context, as the compiler's
    qm = module_model(default_model_dir() / DEFAULT_CHECKPOINT, None, ap=ap)
    if args.to >= qm.config.seq_len:
        ap.error(f"--to must be below the model's seq_len, {qm.config.seq_len}, not {args.to}")
    if args.context is not None and args.to >= args.context:
        ap.error(f"--to {args.to} needs {args.to + 1} positions, more than --context "
                 f"{args.context}: give --context {args.to + 1} or more, or a --to below "
                 f"{args.context}")
    # every setting compiled before any run, as `python -m chipotle.compiler` compiles: a
    # configuration too small for the model is one `error:` line naming those that fit, and
    # one that holds fewer positions than seq_len runs at the longest context it holds
    compiled, context = [], args.context
    for v in values:
        with _split_from(v):
            cm, shorter = compile_for_module(
                qm, config, args.config, context, DEFAULT_CHECKPOINT, ap=ap, need=args.to + 1,
                needs=lambda n: (f"the {args.to + 1} positions of --to {args.to}: give a --to "
                                 f"below {n}"),
                placement="tensor")
        context = context or shorter       # the others at the first one's context
        compiled.append(cm)
    runs = [sweep(qm, config, v, args.to, args.backend, cm)
            for v, cm in zip(values, compiled, strict=True)]
    first = first_tail_keys(config.word_bytes)
    if args.to + 1 < first:
        print(f"note: a weighted sum of fewer than {first} keys has no tail at any "
              f"--split-from (the tile's share, about {WSUM_SPLIT_SHARE} n + "
              f"{WSUM_SPLIT_OFFSET} keys, covers every key), so the columns are equal up to "
              f"position {first - 2}: give --to {first - 1} or more to see a difference",
              file=sys.stderr)
    kind = "estimated (isasim)" if args.backend == "isasim" else f"RTL ({args.backend})"
    print(f"decode cycles per step, {kind}, {config}; mean per bin of {args.bin} positions; "
          f"WSUM_SPLIT_FROM = {', '.join(map(str, values))}, the differences from "
          f"{values[0]}")
    print("positions      " + "".join(f"{v:>12}" for v in values)
          + "".join(f"{f'{v} - {values[0]}':>16}" for v in values[1:]))
    for lo in range(0, args.to + 1, args.bin):
        hi = min(lo + args.bin, args.to + 1)
        means = [sum(r[lo:hi]) / (hi - lo) for r in runs]
        print(f"{lo:>5} .. {hi - 1:<6}" + "".join(f"{m:>12,.1f}" for m in means)
              + "".join(f"{m - means[0]:>16,.1f}" for m in means[1:]))
    return 0


if __name__ == "__main__":
    from chipotle.cli import run_main
    run_main(main)
