"""The ``chipotle`` command.

``chipotle generate`` streams a story from a llama2.c checkpoint on a chosen backend, as
llama2.c's ``run <checkpoint> -i PROMPT -n STEPS -t T -p P -s SEED`` does: the prompt is echoed
as its tokens are forced, generated text follows as it is sampled, and a summary line goes to
standard error at the end.

Exit codes: 0 on success, 2 for a usage problem (a missing or malformed model file, a prompt
longer than the context, an unavailable backend), 1 for anything else.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import backends
from .generate import Done, PromptTooLongError, StopReason, generate
from .model import CheckpointError, load_checkpoint
from .paths import DEFAULT_CHECKPOINT, DEFAULT_TOKENIZER, FETCH_HINT, default_model_dir
from .sampling import Sampler
from .tokenizer import TokenizerError, load_tokenizer

__all__ = ["main", "build_parser"]

EXIT_USAGE = 2


class UsageError(Exception):
    """A problem the user can fix (reported without a traceback, exit code 2)."""


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``chipotle`` command."""
    parser = argparse.ArgumentParser(
        prog="chipotle", description="chipotle: an open LLM inference accelerator.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    g = sub.add_parser(
        "generate", help="generate text from a llama2.c checkpoint",
        description="Generate text from a llama2.c checkpoint, streaming it as it comes.",
        epilog="backends: " + "; ".join(f"{b.name}: {b.description}"
                                        for b in map(backends.get, backends.names())))
    g.add_argument("--backend", default="reference", choices=backends.names(),
                   help="where the forward pass runs (default: %(default)s)")
    g.add_argument("--model", type=Path, metavar="PATH",
                   help=f"checkpoint (default: {DEFAULT_CHECKPOINT} in $CHIPOTLE_MODEL_DIR, "
                        "else ../shared/models/)")
    g.add_argument("--tokenizer", type=Path, metavar="PATH",
                   help=f"tokenizer (default: {DEFAULT_TOKENIZER} beside the default model)")
    g.add_argument("--prompt", default="", metavar="TEXT",
                   help="text to continue (default: none, start from BOS)")
    g.add_argument("--steps", type=int, default=256, metavar="N",
                   help="largest number of tokens to generate; 0: up to the context length "
                        "(default: %(default)s)")
    g.add_argument("--temperature", type=float, default=1.0, metavar="T",
                   help="0 for greedy decoding (default: %(default)s, as llama2.c)")
    g.add_argument("--topp", type=float, default=0.9, metavar="P",
                   help="top-p (nucleus) mass; 0 or 1 samples the whole distribution "
                        "(default: %(default)s, as llama2.c)")
    g.add_argument("--seed", type=int, default=None, metavar="S",
                   help="xorshift seed (default or 0: the current time, as llama2.c; the seed "
                        "used is printed in the summary)")
    return parser


def _where(kind: str, path: Path, option: str) -> str:
    env = os.environ.get("CHIPOTLE_MODEL_DIR")
    if env is None:
        origin = "the default location; $CHIPOTLE_MODEL_DIR is not set"
    else:
        origin = f"from $CHIPOTLE_MODEL_DIR={env}"
    return (f"{kind} not found: {path} ({origin}; choose another file with {option}); "
            f"{FETCH_HINT}")


def _resolve(args) -> tuple[Path, Path]:
    d = default_model_dir()
    found = []
    for given, default, kind, option in ((args.model, DEFAULT_CHECKPOINT, "checkpoint", "--model"),
                                         (args.tokenizer, DEFAULT_TOKENIZER, "tokenizer",
                                          "--tokenizer")):
        if given is not None:
            if not given.is_file():
                raise UsageError(f"{kind} not found: {given} (given with {option})")
            found.append(given)
        else:
            path = d / default
            if not path.is_file():
                raise UsageError(_where(kind, path, option))
            found.append(path)
    return found[0], found[1]


def _generate(args, out, err) -> int:
    if args.steps < 0:
        raise UsageError(f"--steps must be a non-negative integer, not {args.steps}")
    model_path, tok_path = _resolve(args)
    try:
        checkpoint = load_checkpoint(model_path)
        tokenizer = load_tokenizer(tok_path, vocab_size=checkpoint.config.vocab_size)
    except (CheckpointError, TokenizerError) as e:
        raise UsageError(str(e)) from None
    try:
        sampler = Sampler(checkpoint.config.vocab_size, args.temperature, args.topp, args.seed)
    except ValueError as e:
        raise UsageError(str(e).replace("`temperature`", "--temperature")
                         .replace("`topp`", "--topp").replace("`seed`", "--seed")) from None
    try:
        model = backends.create(args.backend, checkpoint)
    except backends.BackendUnavailable as e:
        raise UsageError(str(e)) from None

    events = generate(model, tokenizer, sampler, args.prompt, args.steps or None,
                      context_length=checkpoint.config.seq_len)
    try:
        for event in events:
            if isinstance(event, Done):
                done = event
            else:
                out.write(event.text)
                out.flush()
    except PromptTooLongError as e:
        raise UsageError(str(e)) from None
    out.write(done.text + "\n")
    out.flush()
    stop = done.reason.value
    if done.reason is StopReason.STEPS:
        stop += f" ({args.steps})"
    err.write(f"[{args.backend}] {done.generated} tokens generated, {done.prompt_tokens} prompt "
              f"tokens (BOS included), stopped by {stop}; {done.positions} positions in "
              f"{done.seconds:.3f} s wall, {done.tokens_per_second:.1f} tok/s; "
              f"temperature {args.temperature:g}, top-p {args.topp:g}, seed {sampler.seed}\n")
    err.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``chipotle`` with `argv` (default: ``sys.argv[1:]``) and return the exit code."""
    args = build_parser().parse_args(argv)
    out, err = sys.stdout, sys.stderr
    try:
        if args.command == "generate":
            return _generate(args, out, err)
    except UsageError as e:
        err.write(f"chipotle: error: {e}\n")
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`chipotle generate | head`): stop quietly.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - avoid a second error at exit
        except OSError:
            pass
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
