"""The end-to-end performance benchmark of issue 5: decode and prefill of stories260K on the chip.

For each prompt length ``L`` the benchmark compiles the model for the configuration, runs
``Driver.generate`` with an ``L``-token prompt (BOS included) and greedy decoding for one or
more decode steps, and prints, from the backend's cycle counts and performance counters:

* **decode cycles per token at position L** (the first decode step runs at position ``L``:
  prompt positions ``0 .. L - 1`` are prefill);
* **decode roofline efficiency** at that position: the int8 weight and KV-cache bytes a
  decode step must read (``CompiledModel.weight_bytes_per_token() + kv_bytes(L)``) divided by
  the mesh's SRAM read bandwidth (``ChipConfig.sram_read_bytes_per_cycle``, W bytes per tile
  and cycle: the matrix units' read ports, the only way weights reach the MACs), over the
  measured cycles; beside it the same bytes over the SRAM's whole read bandwidth
  (``ChipConfig.sram_peak_read_bytes_per_cycle``: the read/write ports' `n_banks`-word
  reads too, three times as much on the default chip);
* **prefill**: time to first token (cycles of the prefill steps) and how busy the matrix
  units were over them: ``mac_cycles`` (the RTL's ``MAC_CYCLES``, cycles a unit issued a
  weight word) summed over tiles / (cycles x tiles).  A MAC cycle does W x m MACs for an
  instruction of m activation rows, so the fraction of the mesh's peak MACs is this figure
  times m / M: about the same in prefill (batches of M rows), at most 1/M of it in decode
  (one row per weight word);
* the matrix units' busy fraction in decode, and tokens/s at ``--clock-mhz``.

The prompt is stories260K's own greedy continuation from BOS on ``GoldenModel`` (BOS and EOS
excluded from the argmax so it never ends early): natural text, the same on every run.
Every step's token and int32 logits are compared with ``GoldenModel`` and the result printed
("bit-exact"): a benchmark figure from a run that does not match is flagged, not hidden.

Backends: ``verilator`` / ``icarus`` (the RTL under cocotb, through `chipotle.sim.chiprun`;
cycles are the RTL's) or ``isasim`` (the ISA simulator's estimate; fast).  One simulator
run per prompt length.  Run::

    python -m chipotle.sim.bench --backend verilator --config default --prompts 1,64,256

(the default configuration's first Verilator build takes about 20 minutes; a 256-token
prompt is about 1.5 million cycles of prefill).  ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["story_prompt", "golden_logits", "run_one", "main"]

BOS, EOS = 1, 2


def story_prompt(qm, length: int) -> list[int]:
    """Return ``length`` tokens: BOS, then `GoldenModel`'s greedy continuation from it.

    Parameters
    ----------
    qm : chipotle.golden.QuantizedModel
    length : int
        Tokens, BOS included (>= 1, <= the model's ``seq_len``).

    Returns
    -------
    list of int
        Token ids; BOS and EOS are never chosen after the first token.
    """
    return _story(qm, length)[0]


def _story(qm, length: int) -> tuple[list[int], set[int]]:
    """`story_prompt`'s tokens, and the positions after which `GoldenModel`'s greedy choice
    (unmasked) is BOS or EOS: a prompt that ends there stops the chip before it decodes."""
    from chipotle.golden import GoldenModel

    g = GoldenModel(qm)
    ids, stops = [BOS], set()
    for pos in range(length - 1):
        logits = g.forward(ids[pos], pos).astype(np.int64)
        if int(np.argmax(logits)) in (BOS, EOS):
            stops.add(pos)
        logits[[BOS, EOS]] = np.iinfo(np.int64).min
        ids.append(int(np.argmax(logits)))
    return ids, stops


def golden_logits(qm, tokens: list[int]) -> list[np.ndarray]:
    """Return `GoldenModel`'s int32 logits at every position of ``tokens``."""
    from chipotle.golden import GoldenModel

    g = GoldenModel(qm)
    return [g.forward(t, p) for p, t in enumerate(tokens)]


def _check(steps, want_tokens, qm) -> tuple[bool, str]:
    """Compare each step's token and logits (at its last position) with the golden model.

    `want_tokens`: the run's tokens, prompt and generated; the last one is the last step's
    result, which no step ran (so the golden model does not either: it may sit at position
    ``seq_len``, past the model's positions)."""
    logits = golden_logits(qm, want_tokens[:-1])
    for s in steps:
        last = s["pos"] + len(s["tokens"]) - 1
        if s["token"] != int(np.argmax(logits[last])):
            return False, f"token differs at position {last}"
        if s["logits"] is not None and not np.array_equal(s["logits"], logits[last]):
            return False, f"logits differ at position {last}"
    return True, ""


def run_one(compiled, prompt: list[int], decode_steps: int, backend: str,
            tokenizer=None) -> dict:
    """Run one prompt on ``backend`` and return its raw result.

    Parameters
    ----------
    compiled : chipotle.compiler.CompiledModel
    prompt : list of int
        BOS included.
    decode_steps : int
        Decode steps after the prefill (>= 1).
    backend : {"verilator", "icarus", "isasim"}

    Returns
    -------
    dict
        ``steps`` (per step ``tokens``, ``pos``, ``token``, ``logits``, ``cycles``, ``perf``),
        ``prefill_steps``, ``tokens``, ``wall_seconds`` and, on the RTL,
        ``cycles_per_second``.
    """
    steps = decode_steps + 1        # the first sampled token comes from the prefill's logits
    if backend == "isasim":
        from chipotle.driver import Driver, IsaSimBackend

        drv = Driver(compiled, IsaSimBackend(compiled.config))

        async def go():
            await drv.load()
            return await drv.generate(prompt, steps, temperature=0.0, read_logits=True)
        t0 = time.perf_counter()
        r = asyncio.run(go())
        return {"steps": [{"tokens": list(s.tokens), "pos": s.pos, "token": s.token,
                           "logits": s.logits, "cycles": s.cycles, "perf": dict(s.perf)}
                          for s in r.steps],
                "prefill_steps": r.prefill_steps, "tokens": list(r.tokens),
                "wall_seconds": time.perf_counter() - t0}
    from chipotle.sim.chiprun import Job, run_rtl

    job = Job(config=compiled.config.as_dict(), model=compiled, tokenizer=tokenizer,
              prompt_tokens=list(prompt), steps=steps, temperature=0.0, read_logits=True)
    return run_rtl(job, sim=backend,
                   progress=lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True))


def figures(compiled, prompt_len: int, result: dict) -> dict:
    """Return the benchmark's figures for one run (see the module docstring)."""
    from chipotle.driver.driver import mac_busy

    cfg = compiled.config
    steps, npre = result["steps"], result["prefill_steps"]
    pre, dec = steps[:npre], steps[npre:]

    def util(sel):
        return mac_busy(sel, cfg.n_tiles)
    first = dec[0]
    need = compiled.weight_bytes_per_token() + compiled.kv_bytes(first["pos"])
    return {"prompt_tokens": prompt_len, "decode_pos": first["pos"],
            "decode_cycles": first["cycles"],
            "roofline": need / cfg.sram_read_bytes_per_cycle / first["cycles"],
            "sram_share": need / cfg.sram_peak_read_bytes_per_cycle / first["cycles"],
            "decode_bytes": need, "decode_mac_util": util(dec[:1]),
            "ttft_cycles": sum(s["cycles"] for s in pre), "prefill_steps": npre,
            "prefill_mac_util": util(pre)}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (``python -m chipotle.sim.bench --help``)."""
    from chipotle.cli import (
        DEFAULT_CLOCK_MHZ,
        ArgumentParser,
        FitRefusal,
        clock_mhz,
        compile_fitting,
        search_note,
        shorter_context_note,
    )
    from chipotle.config import ChipConfig
    from chipotle.model import CheckpointError, load_checkpoint
    from chipotle.paths import DEFAULT_CHECKPOINT, DEFAULT_TOKENIZER, default_model_dir

    ap = ArgumentParser(prog="python -m chipotle.sim.bench",
                        description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("verilator", "icarus", "isasim"), default="verilator",
                    help="the RTL under Verilator or Icarus, or the ISA simulator's estimate "
                         "(isasim, no build) (default: %(default)s)")
    ap.add_argument("--config", default="default", help="chip configuration (ChipConfig."
                    "from_string: a name and/or key=value,...; default: default)")
    ap.add_argument("--placement", choices=("pipeline", "tensor"), default="tensor",
                    help="pipeline of stages, or every layer on every tile (tensor) (default: "
                         "%(default)s)")
    ap.add_argument("--prompts", default="1,64,256", help="prompt lengths in tokens, BOS "
                    "included; decode is measured at position = length (default: 1,64,256)")
    ap.add_argument("--decode-steps", type=int, default=1, help="decode steps per prompt "
                    "(figures are those of the first; default 1)")
    ap.add_argument("--context", type=int, default=None, help="positions to compile for "
                    "(default: the compiler's)")
    ap.add_argument("--clock-mhz", type=clock_mhz, default=DEFAULT_CLOCK_MHZ,
                    help="assumed clock of the tokens/s figures (default: %(default)s)")
    ap.add_argument("--model", default=None,
                    help="a llama2.c checkpoint, taken as it is (default: stories260K.bin in "
                         "$CHIPOTLE_MODEL_DIR, else ../shared/models/, checked against the "
                         "published sha256)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.model == "":          # (Path("") is ".", the folder)
        ap.error("--model is empty: give a llama2.c checkpoint file, or leave --model out for "
                 "the default model")
    args.model = None if args.model is None else Path(args.model)

    try:
        lengths = [int(x) for x in args.prompts.split(",")]
    except ValueError:
        ap.error(f"--prompts must be comma-separated integers, not {args.prompts!r}")
    if not lengths or min(lengths) < 1:
        ap.error("--prompts: every prompt length must be at least 1 (BOS)")
    if args.decode_steps < 1:
        ap.error("--decode-steps must be at least 1")
    if args.json is not None:
        # where the figures go, before minutes of simulation: a folder that is not there or
        # a path that cannot be written lost them at the end
        if args.json.is_dir():
            ap.error(f"--json {args.json}: is a folder; give a file name")
        if not args.json.parent.is_dir():
            ap.error(f"--json {args.json}: the folder {args.json.parent} does not exist")
        if not os.access(args.json.parent, os.W_OK) or (
                args.json.exists() and not os.access(args.json, os.W_OK)):
            ap.error(f"--json {args.json}: cannot be written")
    try:
        config = ChipConfig.from_string(args.config)
    except ValueError as e:
        ap.error(f"--config: {e}")
    model_path = args.model or default_model_dir() / DEFAULT_CHECKPOINT
    if args.model is not None:      # (as chipotle generate's --model)
        from chipotle.cli import given_file_problem
        problem = given_file_problem(args.model, "checkpoint", "--model", DEFAULT_CHECKPOINT)
        if problem:
            ap.refuse(problem)
    if args.model is None and not model_path.exists():   # where it looked, and the fetch hint
        from chipotle.cli import _where
        ap.refuse(_where("checkpoint", model_path, "--model"))
    if args.model is None:
        from chipotle.paths import check_published
        try:
            check_published(model_path, "--model")
        except ValueError as e:
            ap.refuse(str(e))
    try:
        checkpoint = load_checkpoint(model_path)
    except (CheckpointError, OSError) as e:
        ap.refuse(str(e) if str(model_path) in str(e) else f"--model {model_path}: {e}")
    need = max(lengths) + args.decode_steps
    steps = f"{args.decode_steps} decode step{'s' * (args.decode_steps != 1)}"
    seq_len = checkpoint.config.seq_len
    # past the model's seq_len no context helps: refused before the compile, with the
    # prompt lengths or the decode steps that fit (a prompt of seq_len tokens or more leaves
    # no position for a decode step; else the decode steps are too many for the prompts)
    if need > seq_len and max(lengths) >= seq_len:
        most = (f"of at most {seq_len - args.decode_steps} (--prompts)"
                if args.decode_steps < seq_len else
                f"below {seq_len} (--prompts) and fewer --decode-steps")
        ap.refuse(f"a {max(lengths)}-token prompt and {steps} need {need} positions, more "
                  f"than the model's seq_len {seq_len}: give prompt lengths {most}")
    if need > seq_len:
        longest = " (the longest of --prompts)" if len(set(lengths)) > 1 else ""
        ap.error(f"--decode-steps {args.decode_steps} with a {max(lengths)}-token prompt"
                 f"{longest} needs {need} positions, more than the model's seq_len "
                 f"{seq_len}: give --decode-steps {seq_len - max(lengths)} or fewer")

    def needs(longest: int) -> str:
        what = f"the {need} positions the longest prompt and the decode steps need: give "
        if longest > args.decode_steps:
            return (f"{what}prompt lengths of at most {longest - args.decode_steps} (--prompts;"
                    f" `make bench`: PROMPTS=)")
        if longest > max(lengths):       # no prompt is short enough: fewer decode steps
            return f"{what}--decode-steps {longest - max(lengths)} or fewer"
        return (f"{what}prompt lengths below {longest} (--prompts; `make bench`: PROMPTS=) "
                f"and fewer --decode-steps, {longest} positions in all")

    @functools.cache    # once: before the first search for configurations that fit
    def searching():
        print(search_note(model_path.name), file=sys.stderr, flush=True)
    if args.context is not None and args.context < need <= seq_len:
        try:    # would the longer context the refusal below asks for fit the configuration?
            compile_fitting(checkpoint, config, args.config, need, need, needs,
                            placement=args.placement, on_search=searching)
        except FitRefusal as e:
            ap.refuse(f"a {max(lengths)}-token prompt and {steps} need {need} positions, more "
                      f"than --context {args.context}, and a context of {need} does not fit "
                      f"this configuration either: {e}")
    try:
        compiled, shorter = compile_fitting(checkpoint, config, args.config, args.context,
                                            need, needs, placement=args.placement,
                                            on_search=searching)
    except FitRefusal as e:
        ap.refuse(str(e))
    if shorter is not None:   # no --context: the longest context this configuration holds
        print(shorter_context_note(shorter, config, seq_len, "bench"), file=sys.stderr,
              flush=True)
    if need > compiled.context:          # (at most seq_len: refused above)
        ap.refuse(f"a {max(lengths)}-token prompt and {steps} need {need} positions, more "
                  f"than the compiled context {compiled.context}: give --context {need} or "
                  f"more (at most the model's seq_len, {seq_len})")
    tok_path = model_path.parent / DEFAULT_TOKENIZER
    tokenizer = str(tok_path) if tok_path.exists() else None

    qm = compiled.qm
    story, stops = _story(qm, max(lengths) + args.decode_steps)
    if early := [n for n in lengths if n - 1 in stops]:
        n = early[0]
        near = min((m for m in range(1, len(story) + 1) if m - 1 not in stops
                    and m + args.decode_steps <= compiled.context),
                   key=lambda m: (abs(m - n), m), default=None)
        ap.refuse(f"after the first {n} tokens of the model's own story the golden model's "
                  f"greedy token is BOS or EOS, so the chip would stop before a decode step"
                  + (f" (a {near}-token prompt decodes)" if near else "")
                  + ": give other --prompts")
    print(f"[bench] {args.backend}, {config}, {args.placement} placement, context "
          f"{compiled.context}; peak {config.peak_macs_per_cycle} MACs/cycle, "
          f"{config.sram_read_bytes_per_cycle} SRAM bytes/cycle on the matrix units' ports "
          f"({config.sram_peak_read_bytes_per_cycle} on all ports)", file=sys.stderr,
          flush=True)
    rows = []
    for n in lengths:
        r = run_one(compiled, story[:n], args.decode_steps, args.backend, tokenizer)
        ok, why = _check(r["steps"], list(r["tokens"]), qm)
        f = figures(compiled, n, r)
        f.update(bit_exact=ok, mismatch=why, wall_seconds=r.get("wall_seconds"),
                 cycles_per_second=r.get("cycles_per_second"))
        rows.append(f)
        print(_row(f, args.clock_mhz), file=sys.stderr, flush=True)
    print(_table(rows, args, config))
    if args.json:
        args.json.write_text(json.dumps({"backend": args.backend, "config": str(config),
                                         "placement": args.placement, "rows": rows}, indent=1))
    return 0 if all(f["bit_exact"] for f in rows) else 1


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _row(f: dict, mhz: float) -> str:
    return (f"[bench] prompt {f['prompt_tokens']}: decode at position {f['decode_pos']} "
            f"{f['decode_cycles']:,} cycles ({mhz * 1e6 / f['decode_cycles']:,.0f} tokens/s "
            f"at an assumed {mhz:g} MHz), roofline {_pct(f['roofline'])} "
            f"({_pct(f['sram_share'])} of all SRAM ports); "
            f"TTFT {f['ttft_cycles']:,} cycles, prefill matrix units busy "
            f"{_pct(f['prefill_mac_util'])}; "
            f"{'bit-exact' if f['bit_exact'] else 'MISMATCH: ' + f['mismatch']}")


def command_line(args) -> str:
    """Return the command that repeats the run of ``args`` (this module's parsed options)."""
    import shlex

    from chipotle.cli import DEFAULT_CLOCK_MHZ
    words = ["python", "-m", "chipotle.sim.bench", "--backend", args.backend, "--config",
             args.config, "--placement", args.placement, "--prompts", args.prompts]
    if args.decode_steps != 1:
        words += ["--decode-steps", str(args.decode_steps)]
    if args.context is not None:
        words += ["--context", str(args.context)]
    if args.clock_mhz != DEFAULT_CLOCK_MHZ:
        words += ["--clock-mhz", f"{args.clock_mhz:g}"]
    if args.model is not None:
        words += ["--model", str(args.model)]
    return " ".join(shlex.quote(w) for w in words)


def _table(rows, args, config) -> str:
    kind = ("cycles are the ISA simulator's estimate, not a measurement; the RTL is the "
            "authority" if args.backend == "isasim" else "cycles measured on the RTL")
    head = (f"# chipotle benchmark: {args.backend} ({kind}), {config}, {args.placement} placement "
            f"({command_line(args)})\n"
            "| prompt tokens | decode position | decode cycles/token | roofline | of all SRAM "
            "ports | decode MAC busy | TTFT cycles | prefill MAC busy | vs GoldenModel |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    lines = [head]
    for f in rows:
        lines.append(f"| {f['prompt_tokens']} | {f['decode_pos']} | {f['decode_cycles']:,} | "
                     f"{_pct(f['roofline'])} | {_pct(f['sram_share'])} | "
                     f"{_pct(f['decode_mac_util'])} | "
                     f"{f['ttft_cycles']:,} | {_pct(f['prefill_mac_util'])} | "
                     f"{'bit-exact' if f['bit_exact'] else 'MISMATCH'} |")
    lines.append(f"roofline: the step's weight and KV bytes over the matrix units' read "
                 f"ports ({config.sram_read_bytes_per_cycle} B/cycle), over its cycles; of all "
                 f"SRAM ports: the same over every port's reads "
                 f"({config.sram_peak_read_bytes_per_cycle} B/cycle).")
    lines.append("TTFT: the prefill steps' own cycles summed (each from its start to its "
                 "doorbell; the host's traffic between the steps is not in it).")
    lines.append(f"MAC busy: the share of tile-cycles a matrix unit streamed weights "
                 f"(MAC_CYCLES / tiles x cycles), not of the peak MACs: a busy cycle does the "
                 f"MACs of m of the M = {config.max_m} rows (decode m = 1: at most 1/{config.max_m}"
                 f" of the figure is the share of the peak {config.peak_macs_per_cycle} "
                 f"MACs/cycle).")
    return "\n".join(lines)


if __name__ == "__main__":
    from chipotle.cli import run_main
    run_main(main)
