"""``python -m chipotle.compiler``: print the memory map of stories260K (``--bench``: cycles).

Options: ``--config NAME[,key=value...]`` (``chipotle.config.ChipConfig.from_string``),
``--context N`` (default: the model's ``seq_len``, or the longest context the configuration
holds), ``--model PATH`` (a llama2.c checkpoint; default stories260K; ``small``: the
regression's synthetic model), ``--tokenizer PATH`` (``--bench``'s, refused without it and
with ``--model small``; default beside the model), ``--placement pipeline|tensor`` (default
tensor, as ``chipotle generate``; `compile_model`'s default is pipeline), ``--programs``
(also print every tile's assembly), ``--bench`` (run on the ISA simulator, bit-exact against
the golden model, and print the estimated cycles of prefill and decode; it needs a context
of at least 2 positions).

Bad input is refused before anything is printed: a usage error (an empty ``--model`` or
``--tokenizer``, ``--tokenizer`` without ``--bench``, ``--bench`` with ``--context 1``, a bad
``--config`` or ``--context``) is one ``error:`` line, exit status 2; a missing or malformed
model file and a configuration that does not hold the model (`chipotle.cli.module_model`,
`chipotle.cli.compile_for_module`) are one ``error:`` line too.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

_TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
         "the park. One day, she saw a big, red ball. She wanted to play with it, but it was "
         "too high. Lily asked her mom to help her. Her mom said, \"Let's try to get it "
         "together.\" They jumped and jumped, and finally they got the ball. Lily was so happy "
         "and said thank you to her mom. They played with the ball all day long.")


def bench(compiled, prompt_tokens, out=None) -> dict:
    """Run prefill and decode on the ISA simulator; print and return the cycle figures.

    Prefills the first 64 of ``prompt_tokens`` (fewer, said so, when the context is shorter
    than 65; a context below 2 is refused with SystemExit) one batch of M per step, then
    with batches in flight (`CompiledModel.plans`), then decodes (teacher-forced with the
    same token stream) at positions 1, 64, 256 and the end of the stream, checking the
    logits against the golden model.  Returns ``{"prefill": [...], "decode": {pos: cycles}}``.
    """
    from ..golden import GoldenModel
    from .run import load_isasim, run_step_isasim
    out = sys.stdout if out is None else out        # (the stdout of the call, not of import)
    cfg = compiled.config
    M = cfg.max_m
    golden = GoldenModel(compiled.qm)
    figures = {"prefill": [], "decode": {}}
    if compiled.context < 2:
        raise SystemExit(f"error: --bench needs a context of at least 2 positions (a prefill "
                         f"and a decode step), not {compiled.context}")
    n_pre = min(64, compiled.context - 1)       # a position left for a decode step
    if n_pre < 64:
        print(f"(context {compiled.context}: the prefill is {n_pre} tokens, not 64, and the "
              f"decode positions are below {compiled.context})", file=out)
    pre = prompt_tokens[:n_pre]
    from .run import run_plan_isasim
    for how, plans in (("one step per batch", [compiled.step(pre[i:i + M], i)
                                               for i in range(0, len(pre), M)]),
                       ("batches in flight (CompiledModel.plans)", compiled.plans(pre, 0))):
        sim = load_isasim(compiled)
        golden.reset()
        cyc = macs = mat = 0
        for plan in plans:
            r = run_plan_isasim(sim, compiled, plan)
            cyc += r.cycles
            macs += r.perf["macs"]
            mat += r.perf["mac_cycles"]
        if not np.array_equal(r.logits, golden.forward_batch(pre, 0)[-1]):
            raise SystemExit("prefill: the logits differ from the golden model")
        util = macs / (cyc * cfg.peak_macs_per_cycle)
        busy = mat / (cyc * cfg.n_tiles)
        print(f"prefill of {len(pre)} tokens, {how}: {cyc:,} cycles ({cyc / len(pre):,.0f} "
              f"per token); {len(plans)} step(s); MACs / mesh peak {100 * util:.1f}%; "
              f"matrix units busy {100 * busy:.1f}% of tile-cycles (MAC_CYCLES, as make "
              f"sim and the bench count it)", file=out)
        figures["prefill"].append(dict(how=how, tokens=len(pre), cycles=cyc, macs=macs,
                                       utilisation=util, busy=busy))
    print("decode (MACs / mesh peak; weight and KV bytes / (mesh SRAM bandwidth x cycles)):",
          file=out)
    print(" pos   cycles  MACs/peak  weight+KV bytes  roofline", file=out)
    pos = len(pre)
    want = sorted({p for p in (1, 64, 256, len(prompt_tokens) - 1)
                   if p < min(len(prompt_tokens), compiled.context)})
    # a fresh sequence for the decode figures at small positions
    sim2 = load_isasim(compiled)
    golden.reset()
    pos = 0
    for target in want:
        while pos < target:                  # fill the cache up to `target` with prefill
            n = min(M, target - pos)
            run_step_isasim(sim2, compiled, prompt_tokens[pos:pos + n], pos)
            golden.forward_batch(prompt_tokens[pos:pos + n], pos)
            pos += n
        r = run_step_isasim(sim2, compiled, [prompt_tokens[pos]], pos)
        if not np.array_equal(r.logits, golden.forward(prompt_tokens[pos], pos)):
            raise SystemExit(f"decode at {pos}: the logits differ from the golden model")
        nbytes = compiled.weight_bytes_per_token() + compiled.kv_bytes(pos)
        roof = nbytes / (cfg.sram_read_bytes_per_cycle * r.cycles)
        mu = r.perf["macs"] / (r.cycles * cfg.peak_macs_per_cycle)
        print(f"{pos:4d} {r.cycles:8,d}  {100 * mu:8.2f}% {nbytes:16,d}  {100 * roof:7.1f}%",
              file=out)
        figures["decode"][pos] = r.cycles
        if pos == 64:
            busy = ", ".join(f"{_tile_name(compiled, xy)} {r.busy[xy]:,}"
                             for xy in compiled.placement.tiles)
            print(f"      busy cycles per tile at 64: {busy}", file=out)
        pos += 1
    return figures


def _tile_name(compiled, xy) -> str:
    """Return a short name of what tile `xy` computes."""
    pl = compiled.placement
    if pl.kind == "tensor":
        return f"({xy[0]},{xy[1]})"
    return "+".join(s.name for s in pl.tiles[xy].stages)


def main(argv=None) -> None:
    """Print the memory map (and with ``--bench`` the cycle estimates) of a model."""
    from ..cli import ArgumentParser, compile_for_module, module_config, module_model
    from ..paths import DEFAULT_CHECKPOINT, DEFAULT_TOKENIZER, default_model_dir
    from ..tokenizer import TokenizerError

    ap = ArgumentParser(prog="python -m chipotle.compiler",
                        description=main.__doc__.splitlines()[0])
    ap.add_argument("--config", default="default",
                    help="chip configuration: a name of chipotle.config.CONFIGS and/or "
                         "key=value,... (default: %(default)s)")
    ap.add_argument("--context", type=int, default=None,
                    help="positions to compile for (default: the model's seq_len, or the "
                         "longest context the configuration holds, said so, if that is "
                         "shorter)")
    ap.add_argument("--model", default=None,
                    help="a llama2.c checkpoint, or `small` (SMALL_MODEL_DIMS, synthetic)")
    ap.add_argument("--tokenizer", default=None,
                    help=f"--bench's tokenizer, only with --bench (default: {DEFAULT_TOKENIZER} "
                         "beside --model when it is given, else beside the default model)")
    ap.add_argument("--programs", action="store_true",
                    help="also print every tile's assembly")
    ap.add_argument("--bench", action="store_true",
                    help="also run prefill and decode on the ISA simulator, bit-exact against "
                         "the golden model, and print their estimated cycles")
    ap.add_argument("--placement", choices=("pipeline", "tensor"), default="tensor",
                    help="pipeline of stages, or every layer on every tile (tensor; the "
                         "placement of `chipotle generate` and `make sim`) (default: "
                         "%(default)s; compile_model's is pipeline)")
    ap.add_argument("--kvapp", action=argparse.BooleanOptionalAction, default=None,
                    help="append K and V with kvapp (the host writes CompiledModel.kv_layouts); "
                         "default: compile_model's (on for the tensor placement, as make sim)")
    args = ap.parse_args(argv)
    cfg = module_config(ap, args)
    # what is given, checked before any work (an empty --model was the default model, a
    # --tokenizer without --bench was ignored, --bench --context 1 was refused after the map)
    if args.model == "":
        ap.error("--model is empty: give a llama2.c checkpoint file or `small`, or leave "
                 "--model out for the default model")
    if args.tokenizer == "":
        ap.error("--tokenizer is empty: give a tokenizer file, or leave --tokenizer out for "
                 f"{DEFAULT_TOKENIZER} beside the model")
    if args.tokenizer is not None and not args.bench:
        ap.error("--tokenizer is --bench's (its prompt's tokens); give --bench too, or leave "
                 "--tokenizer out")
    if args.tokenizer is not None and args.model == "small":
        ap.error("--tokenizer: --model small's --bench runs synthetic token ids, no "
                 "tokenizer; leave --tokenizer out")
    if args.bench and args.context is not None and args.context < 2:
        ap.error(f"--bench needs a context of at least 2 positions (a prefill and a decode "
                 f"step), not --context {args.context}")
    path = Path(args.model) if args.model else default_model_dir() / DEFAULT_CHECKPOINT
    t = time.time()
    if args.model == "small":
        from .run import small_model
        qm = small_model()
    else:
        qm = module_model(path, "--model", given=bool(args.model), ap=ap)
    tokens = None
    if args.bench and args.model != "small":
        # the tokenizer before the compile, so that a missing one is refused at once
        from ..tokenizer import load_tokenizer
        tok_path = (Path(args.tokenizer) if args.tokenizer
                    else path.parent / DEFAULT_TOKENIZER if args.model
                    else default_model_dir() / DEFAULT_TOKENIZER)
        try:
            tok = load_tokenizer(tok_path, vocab_size=qm.config.vocab_size)
        except (OSError, TokenizerError) as e:
            ap.refuse(f"--tokenizer: {e} (give --tokenizer PATH)")
        tokens = tok.encode(_TEXT)
        while len(tokens) < 260:
            tokens += tok.encode(_TEXT, bos=False)
        tokens = tokens[:260]
    compiled, shorter = compile_for_module(qm, cfg, args.config, args.context,
                                           "the small model" if args.model == "small"
                                           else path.name, ap=ap,
                                           need=2 if args.bench else 0,
                                           needs="the 2 positions of --bench (a prefill and a "
                                                 "decode step)",
                                           placement=args.placement, kvapp=args.kvapp)
    context = args.context if shorter is None else shorter
    print(compiled.memory_map())
    print(f"\ncompiled in {time.time() - t:.1f} s; weight bytes per decode step "
          f"{compiled.weight_bytes_per_token():,}")
    if args.programs:
        for xy, text in compiled.sources.items():
            print(f"\n; ---- tile {xy} ----\n{text}")
    if args.bench and args.model == "small":
        ids = [(7 * i + 1) % qm.config.vocab_size for i in range(qm.config.seq_len)]
        print(f"\nISA-simulator estimates ({cfg})")
        bench(compiled, ids)
    elif args.bench:
        import shlex
        command = ["python", "-m", "chipotle.compiler", "--config", args.config]
        if context is not None:
            command += ["--context", str(context)]
        if args.model:
            command += ["--model", args.model]
        if args.tokenizer:
            command += ["--tokenizer", args.tokenizer]
        command += ["--placement", args.placement]
        if args.kvapp is not None:
            command += ["--kvapp" if args.kvapp else "--no-kvapp"]
        print(f"\nISA-simulator estimates ({cfg}, command: {shlex.join(command)} --bench)")
        bench(compiled, tokens)


if __name__ == "__main__":
    from ..cli import run_main
    run_main(main)
