"""The ``chipotle`` command.

``chipotle generate`` streams a story from a llama2.c checkpoint on a chosen backend, as
llama2.c's ``run <checkpoint> -i PROMPT -n STEPS -t T -p P -s SEED`` does: the prompt is echoed
as its tokens are forced, generated text follows as it is sampled, and a summary line goes to
standard error at the end.  One difference: ``--steps N`` counts generated tokens only, where
llama2.c's ``-n`` counts positions, prompt included (``--steps N`` with a P-token prompt is
``-n P + N`` there).

Exit codes: 0 on success, 2 for a usage problem (a missing or malformed model file, a prompt
longer than the context, an unavailable backend), 1 for anything else.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
from pathlib import Path

from . import backends
from .config import CONFIGS
from .generate import Done, PromptTooLongError, StopReason, generate
from .model import CheckpointError, check_checkpoint_header, load_checkpoint
from .paths import (
    DEFAULT_CHECKPOINT,
    DEFAULT_TOKENIZER,
    FETCH_HINT,
    check_published,
    default_model_dir,
)
from .reference import FloatOverflowError
from .sampling import Sampler
from .tokenizer import TokenizerError, load_tokenizer

__all__ = ["main", "build_parser"]

EXIT_USAGE = 2


def positive_int(text: str) -> int:
    """argparse type of a count that must be at least 1 (``--sim-threads``, ``--context``).

    Raises
    ------
    argparse.ArgumentTypeError
        If `text` is not a whole number of at least 1.
    """
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return n


#: The largest ``--clock-mhz`` taken: 100 GHz, far above any chip's clock, and small enough
#: that the figures made from it (tokens/s) stay finite.
MAX_CLOCK_MHZ = 100_000.0


def clock_mhz(text: str) -> float:
    """argparse type of ``--clock-mhz``: a positive clock frequency in MHz, at most
    `MAX_CLOCK_MHZ`.

    Raises
    ------
    argparse.ArgumentTypeError
        If `text` is not a number, or is zero, negative, NaN, infinite or above
        `MAX_CLOCK_MHZ`.
    """
    import argparse
    import math

    try:
        f = float(text)
    except ValueError:
        f = math.nan
    if not (math.isfinite(f) and 0 < f <= MAX_CLOCK_MHZ):
        raise argparse.ArgumentTypeError(f"must be a positive clock frequency in MHz of at "
                                          f"most {MAX_CLOCK_MHZ:,.0f}, not {text!r}")
    return f


class UsageError(Exception):
    """A problem the user can fix (reported without a traceback, exit code 2)."""


class RunFailure(Exception):
    """A run that failed on the way, e.g. a board that stopped answering (reported in one
    line without a traceback, exit code 1)."""


#: The most tiles a chip may have before an Icarus run warns that it will be very slow.
ICARUS_TILES = 4

#: The clock (MHz) of the tokens/s figure and the UART line rate (baud) when not given.
DEFAULT_CLOCK_MHZ, DEFAULT_BAUD = 100.0, 1_000_000


def _ulx3s_clock_mhz() -> float:
    """The clock of make bitstream's ULX3S 85F design, MHz (``Board.clk_hz``)."""
    from .hw.fpga.boards import BOARDS
    return BOARDS["ulx3s-85f"].clk_hz / 1e6


#: make's variable for each command-line option of ``chipotle generate`` and the bench, as
#: the Makefile's ``sim`` and ``bench`` targets pass them (``--model`` and ``--tokenizer``
#: come from the directory ``MODEL_DIR=``).
MAKE_VARIABLES = {"--config": "CONFIG", "--context": "CONTEXT", "--steps": "STEPS",
                  "--temperature": "TEMPERATURE", "--topp": "TOPP", "--seed": "SEED",
                  "--sim-threads": "THREADS", "--clock-mhz": "CLOCK_MHZ",
                  "--placement": "PLACEMENT", "--prompt": "PROMPT", "--prompts": "PROMPTS",
                  "--backend": "BACKEND", "--port": "PORT", "--baud": "BAUD",
                  "--model": "MODEL_DIR", "--tokenizer": "MODEL_DIR"}


def run_by_make() -> bool:
    """Whether ``make sim`` / ``make bench`` runs the command (they set
    ``$CHIPOTLE_MAKE_CONFIG``): its messages then name make's variables."""
    return "CHIPOTLE_MAKE_CONFIG" in os.environ


def option_text(option: str, value) -> str:
    """``--option value`` as the user gives it: ``VAR=value`` (`MAKE_VARIABLES`) when run by
    ``make sim`` / ``make bench`` ($CHIPOTLE_MAKE_CONFIG set), so that a suggested
    configuration can be typed back on make's command line as it is printed."""
    if run_by_make() and option in MAKE_VARIABLES:
        return f"{MAKE_VARIABLES[option]}={value}"
    return f"{option} {value}"


def fit_option(fit, given: str, note: bool = True) -> str:
    """A `chipotle.compiler.Fit` as the whole options to give (`config_tips`), its note in
    parentheses after them (with `note`): a configuration change ``sram_kib=175`` as
    ``--config <given>,sram_kib=175`` (the parts of `given` the change replaces, and
    ``default``, dropped), a context as ``--context N``, a placement as ``--placement P``.
    Under make each option is make's variable (`option_text`: ``CONFIG=...``)."""
    from .config import ChipConfig

    def fields_of(key: str) -> set:
        return set(ChipConfig.key_fields(key))

    parts = []
    if fit.context is not None:
        parts.append(option_text("--context", fit.context))
    if fit.config:
        # a changed key takes the place of the part of `given` it replaces (the first one:
        # `mesh=` replaces `mesh_width=` and `mesh_height=`), a new key goes last, so the
        # suggestions keep the order the user wrote
        out, placed = [], set()
        new = {key: f"{key}={value}" for key, value in fit.config}
        for part in (p.strip() for p in given.split(",")):
            if not part or part == "default":
                continue
            hit = [key for key in new
                   if fields_of(part.split("=", 1)[0].strip()) & fields_of(key)]
            if not hit:
                out.append(part)
            for key in hit:
                if key not in placed:
                    out.append(new[key])
                    placed.add(key)
        out += [text for key, text in new.items() if key not in placed]
        parts.append(option_text("--config", ",".join(out)))
    if fit.placement is not None:
        parts.append(option_text("--placement", fit.placement))
    return " ".join(parts) + (f" ({fit.note})" if note and fit.note else "")


def fit_options(error, given: str, prompt_tokens: int = 0) -> list[str]:
    """The suggestions of a `chipotle.compiler.FitError` as whole options (`fit_option`),
    those with a context shorter than `prompt_tokens` left out; [] for any other error."""
    return [fit_option(f, given) for f in getattr(error, "fits", ())
            if f.context is None or f.context >= prompt_tokens]


def slower_notes(compiled, given: str, seq_len: int | None = None) -> list[str]:
    """Return a line per thing the compile left out for want of room, with the options that
    keep it (`chipotle.compiler.CompiledModel.slower_fits`): ``"without the V partner's
    scores: slower decode (a tile's SRAM is too small for them); --config
    small,sram_kib=19 keeps them"``.  Empty when nothing was left out.  `seq_len`: the
    model's, when the compile took a shorter context because the configuration holds no
    more; the options then keep everything at `seq_len` positions, and say so."""
    lines = []
    for room, fit in compiled.slower_fits(seq_len):
        if fit.config:
            keep = f"{fit_option(fit, given, note=False)} keeps them" + (
                f" and the model's seq_len, {seq_len} positions" if seq_len else "")
        else:
            keep = "no size this configuration takes keeps them"
        lines.append(f"{fit.note} (a tile's {room} is too small for them); {keep}")
    return lines


def run_main(main, argv=None) -> None:
    """Run a module's ``main(argv)`` for ``python -m`` and exit with its status (an int it
    returns; 0 for None).  A reader that goes away (``python -m chipotle.compiler | head``)
    ends it quietly instead of with a `BrokenPipeError` traceback: stdout is pointed at
    ``os.devnull`` so that the exit's flush cannot fail again (the recipe of Python's
    `signal` documentation, "Note on SIGPIPE"), exit status 1.  Ctrl-C ends it with one
    line, ``python -m <module>: interrupted``, exit status 130, not a traceback.  A
    simulator that ends early (`chipotle.sim.flow.SimulatorExit`: killed or crashed) ends it
    with one line too, ``python -m <module>: error: ...`` naming the simulator's exit
    status, exit status 1."""
    try:
        code = main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)    # a second one: not mid-report
        print(f"\npython -m {_module_name(main)}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except RuntimeError as e:
        if not _simulator_exit(e):
            raise
        # a simulator killed or crashed: one line (its own messages came before it)
        sys.stdout.flush()
        print(f"\npython -m {_module_name(main)}: error: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    raise SystemExit(code if isinstance(code, int) else 0)


def _simulator_exit(e: BaseException) -> bool:
    """Whether `e` is a simulator that ended early (`chipotle.sim.flow.SimulatorExit`),
    which `run_main` and `main` report as one ``error:`` line (its module imported only then:
    the host-only commands need no simulation flow)."""
    from chipotle.sim.flow import SimulatorExit
    return isinstance(e, SimulatorExit)


def _module_name(main) -> str:
    """The ``python -m`` name of the running module (``main``'s module if not run so)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name.removesuffix(".__main__") if spec else main.__module__


def config_tips(error, given: str, prompt_tokens: int = 0, needs=None) -> str:
    """Return a refusal with each configuration it suggests written as the options to give.

    A `chipotle.compiler.FitError`'s suggestions (`chipotle.compiler.Fit`) become whole
    options: configuration changes ``sram_kib=175`` as ``--config <given>,sram_kib=175`` (the
    parts of `given` the change replaces, and ``default``, dropped), a context as
    ``--context N``, a placement as ``--placement P``.  A suggested context shorter than
    `prompt_tokens` (the prompt, BOS included) is not offered: the refusal says the prompt
    is longer than it instead (`needs`: what needs the `prompt_tokens` positions and what to
    do, in place of the prompt's; a str, or a function of that longest context returning
    one).  Any other error, or a `FitError` without suggestions, is returned as its text.
    """
    fits = getattr(error, "fits", ())
    if not fits:
        return str(error)
    short = [f.context for f in fits if f.context is not None and f.context < prompt_tokens]
    what = error.what
    if short:
        if callable(needs):
            needs = needs(max(short))
        what += (f"; the longest context it holds, {max(short)}, is shorter than "
                 + (needs or f"the prompt's {prompt_tokens} tokens (BOS included): shorten the "
                             f"prompt to at most {max(short)} tokens"))
    options = fit_options(error, given, prompt_tokens)
    return f"{what}; a configuration that fits: {' or '.join(options)}" if options else what


def under_make(message: str) -> str:
    """Return `message` with make's names of the options it mentions, when run by ``make sim``
    or ``make bench`` (which set ``$CHIPOTLE_MAKE_CONFIG``); otherwise `message` unchanged.

    E.g. ``--config: unknown configuration 'x'`` becomes ``--config: unknown configuration
    'x' (make: --config is CONFIG=)``.  An option whose variable the message already names
    (``... (`make sim`: CONTEXT=)``) is not repeated.
    """
    import re

    if not run_by_make():
        return message
    names = {}                                   # make variable -> the first option naming it
    for option, var in MAKE_VARIABLES.items():
        if (var not in names and re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", message)
                and not re.search(rf"(?<![\w$]){var}=", message)):
            names[var] = option
    if not names:
        return message
    said = ", ".join(f"{o} is {v}=" + (" (the directory)" if v == "MODEL_DIR" else "")
                     for v, o in names.items())
    return f"{message} (make: {said})"


class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose errors are one line, as the command's other
    refusals: ``<prog>: error: <message> (<prog> --help lists the options)``, exit code 2,
    instead of the usage block followed by the error (its subcommands' parsers too)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {under_make(message)} ({self.prog} --help lists "
                     f"the options)\n")

    def _check_value(self, action, value):
        """As ``argparse``'s, with the choice meant after the list when a misspelt one is
        close to one (``--backend isa``: ``(did you mean --backend isasim?)``, under ``make
        sim`` / ``make bench`` ``(did you mean BACKEND=isasim?)``; a subcommand's: ``(did
        you mean generate?)``)."""
        from .config import did_you_mean
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            option = f"{action.option_strings[-1]} " if action.option_strings else ""
            var = MAKE_VARIABLES.get(option.strip()) if option and run_by_make() else None
            if var:
                option = f"{var}="
            hint = did_you_mean(str(value), [str(c) for c in action.choices],
                                lambda c: f"{option}{c}")
            if var:                 # in make's terms throughout: `BACKEND=isa: invalid ...`
                choices = ", ".join(map(repr, action.choices))
                raise argparse.ArgumentError(None, f"{var}={value}: invalid choice (choose "
                                                   f"from {choices}){hint}") from None
            if not hint:
                raise
            raise argparse.ArgumentError(action, f"{e.message}{hint}") from None

    def parse_args(self, args=None, namespace=None):
        """As ``argparse``'s, but an unrecognised argument after a subcommand is refused by
        that subcommand's parser (``chipotle generate: error: ... (chipotle generate --help
        lists the options)``), whose options the user is giving, not by this one; a
        misspelt long option is followed by the one meant when one is close (``--promt``:
        ``(did you mean --prompt?)``)."""
        from .config import did_you_mean
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self
            for action in self._actions:
                if isinstance(action, argparse._SubParsersAction):
                    parser = action.choices.get(getattr(parsed, action.dest, None), self)
            options = [o[2:] for a in parser._actions for o in a.option_strings
                       if o.startswith("--")]
            # each misspelt option followed by the one meant, as make's refusal of
            # misspelt variables does (`--promt x --stpes 3`: two hints, each in its place)
            given = [e + (did_you_mean(e.split("=", 1)[0][2:], options, lambda o: f"--{o}")
                          if e.startswith("--") else "") for e in extras]
            parser.error(f"unrecognized arguments: {' '.join(given)}")
        return parsed

    def refuse(self, message: str):
        """Exit as `error` does, for a refusal that is not about the options' syntax (a
        missing file, a model that does not fit): without the pointer to ``--help``."""
        self.exit(2, f"{self.prog}: error: {under_make(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``chipotle`` command."""
    parser = ArgumentParser(
        prog="chipotle", description="chipotle: an open LLM inference accelerator.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="what to do (chipotle COMMAND --help lists its options)")
    g = sub.add_parser(
        "generate", help="generate text from a llama2.c checkpoint",
        description="Generate text from a llama2.c checkpoint, streaming it as it comes.",
        epilog="backends: " + "; ".join(f"{b.name}: {b.description}"
                                        for b in map(backends.get, backends.names())))
    g.add_argument("--backend", default="reference", choices=backends.names(),
                   help="where the forward pass runs (default: %(default)s)")
    g.add_argument("--model", type=file_path, metavar="PATH",
                   help=f"checkpoint (default: {DEFAULT_CHECKPOINT} in $CHIPOTLE_MODEL_DIR, "
                        "else ../shared/models/)")
    g.add_argument("--tokenizer", type=file_path, metavar="PATH",
                   help=f"tokenizer (default: {DEFAULT_TOKENIZER} beside --model's "
                        f"checkpoint, or beside the default model)")
    g.add_argument("--prompt", default="", metavar="TEXT",
                   help="text to continue (default: none, start from BOS)")
    g.add_argument("--steps", type=int, default=256, metavar="N",
                   help="largest number of tokens to generate, prompt not counted (llama2.c's "
                        "-n counts it); 0: up to the context length (default: %(default)s)")
    g.add_argument("--temperature", type=float, default=1.0, metavar="T",
                   help="0 for greedy decoding (default: %(default)s, as llama2.c)")
    g.add_argument("--topp", type=float, default=0.9, metavar="P",
                   help="top-p (nucleus) mass; 0 or 1 samples the whole distribution "
                        "(default: %(default)s, as llama2.c)")
    g.add_argument("--seed", type=int, default=None, metavar="S",
                   help="xorshift seed (default or 0: the current time, as llama2.c; the seed "
                        "used is printed in the summary)")
    g.add_argument("--config", default=None, metavar="CONFIG",
                   help="chip configuration of the chip backends: a "
                        f"name ({', '.join(CONFIGS)}) and/or key=value,... (e.g. "
                        "mesh=2x2,sram_kib=64) (default: default; uart: the chip of make "
                        f"bitstream's ULX3S build, {_uart_default_config()})")
    g.add_argument("--context", type=positive_int, default=None, metavar="N",
                   help="positions to compile for (chip backends; default: the model's "
                        "seq_len, or the longest the configuration holds if that is shorter, "
                        "as the run then says; uart without --config: the ULX3S build's, "
                        f"{_uart_default_context()})")
    g.add_argument("--placement", choices=("pipeline", "tensor"), default="tensor",
                   help="how the compiler maps the model on the mesh (docs/architecture.md): "
                        "a pipeline of stages, or every layer split over all tiles (tensor) "
                        "(default: %(default)s)")
    g.add_argument("--clock-mhz", type=clock_mhz, default=None, metavar="F",
                   help="assumed clock frequency for the tokens/s figure of the simulated chip "
                        f"backends (default: {DEFAULT_CLOCK_MHZ:g}; the routed Fmax of the "
                        "boards' chips is in docs/fpga.md); uart: the bitstream's clock, "
                        "required (the step figures are wall time times it; the ULX3S build "
                        f"of make bitstream: {_ulx3s_clock_mhz():g})")
    g.add_argument("--sim-threads", type=positive_int, default=1, metavar="N",
                   help="verilator: threads of the simulated model (Verilator --threads; a "
                        "build of its own).  On a 2-core machine 2 was once a quarter faster, "
                        "but slower with PGO=1 and far slower when other jobs share the cores "
                        "(docs/performance.md) (default: %(default)s)")
    g.add_argument("--backdoor-load", action="store_true",
                   help="verilator, icarus: write the SRAM images straight into the simulated "
                        "memories instead of through the host link (a faster load; Verilator "
                        "then needs the SRAM arrays public, which switches to the flat build: "
                        "a build of its own, several times longer than the hierarchical one "
                        "for the 4 x 4 chip, that also simulates slower)")
    g.add_argument("--port", default=None, metavar="DEV",
                   help="uart: the board's serial port, e.g. /dev/ttyUSB0 (docs/fpga.md; "
                        "--config and --clock-mhz must match the bitstream)")
    g.add_argument("--baud", type=positive_int, default=None, metavar="B",
                   help=f"uart: line rate of the bitstream (default: {DEFAULT_BAUD})")
    return parser


def _where(kind: str, path: Path, option: str | None) -> str:
    """The refusal of a missing default model file `path`: where it was looked for and how
    to fetch it.  Under ``make sim`` / ``make bench`` in make's terms (``MODEL_DIR=``, the
    ``make models`` command for that directory, or another ``MODEL_DIR=``), else in the
    command's: another folder with ``$CHIPOTLE_MODEL_DIR``, or another file with `option`
    (``--model``; None for a command that reads the file only from that folder, e.g.
    ``python -m chipotle.compiler.profile``)."""
    import shlex
    env = os.environ.get("CHIPOTLE_MODEL_DIR")
    under_make = run_by_make()
    if env is not None and path.parent.is_file():
        return (f"{'MODEL_DIR' if under_make else '$CHIPOTLE_MODEL_DIR'}={path.parent} is a "
                f"file; give the folder that holds the model files ({path.parent.parent})")
    if under_make:
        d = path.parent
        where = f"MODEL_DIR={d}" if env is not None else f"the default MODEL_DIR, {d}"
        fetch = "make models" + ("" if env is None else f" MODEL_DIR={shlex.quote(str(d))}")
        return (f"{kind} not found: {path} ({where}); `{fetch}` downloads stories260K.bin "
                f"and tok512.bin there, or give MODEL_DIR=<a folder holding them>")
    if env is None:
        origin = "the default location; $CHIPOTLE_MODEL_DIR is not set"
    else:
        origin = f"from $CHIPOTLE_MODEL_DIR={env}"
    choose = "choose another folder with $CHIPOTLE_MODEL_DIR" + (
        f" or another file with {option}" if option else "")
    return f"{kind} not found: {path} ({origin}; {choose}); {FETCH_HINT}"


def file_path(text: str) -> Path:
    """An ``argparse`` type for a file option: `text` as a `Path`, refusing an empty one
    (``Path("")`` is the current folder, which a refusal would then name as ``.``)."""
    if not text:
        raise argparse.ArgumentTypeError("is empty: give the file, or leave the option out "
                                         "for the default")
    return Path(text)


def given_file_problem(given: Path, kind: str, option: str, default: str) -> str | None:
    """The refusal of a model file `given` with `option` (``--model``) that is not a regular
    file: a folder (naming the `default` file name in it), a missing path, a device or a
    pipe; None for a file.  `kind`: ``"checkpoint"`` or ``"tokenizer"``."""
    if given.is_dir():
        return f"{option} {given} is a directory; give the {kind} file (e.g. {given / default})"
    if not given.exists():
        return f"{kind} not found: {given} (given with {option})"
    if not given.is_file():
        return (f"{option} {given} is not a regular file (a device or a pipe); give the "
                f"{kind} file itself")
    return None


def _resolve(args) -> tuple[Path, Path]:
    d = default_model_dir()
    found = []
    for given, default, kind, option in ((args.model, DEFAULT_CHECKPOINT, "checkpoint", "--model"),
                                         (args.tokenizer, DEFAULT_TOKENIZER, "tokenizer",
                                          "--tokenizer")):
        if given is not None:
            problem = given_file_problem(given, kind, option, default)
            if problem:
                raise UsageError(problem)
            found.append(given)
        elif kind == "tokenizer" and args.model is not None:
            # beside the checkpoint given, as `python -m chipotle.compiler` and the bench
            # look for it, taken as it is (the model's own files, not the published ones)
            path = found[0].parent / default
            if not path.is_file():
                try:            # a --model that is no checkpoint is the mistake to name
                    check_checkpoint_header(found[0])
                except (CheckpointError, OSError) as e:
                    raise UsageError(str(e)) from None
                raise UsageError(f"tokenizer not found: {path} (looked for beside --model "
                                 f"{found[0]}); give it with --tokenizer")
            found.append(path)
        else:
            path = d / default
            if not path.is_file():
                raise UsageError(_where(kind, path, option))
            try:
                check_published(path, option)
            except ValueError as e:
                raise UsageError(str(e)) from None
            found.append(path)
    return found[0], found[1]


def _wall_of(backend: str) -> str:
    """What a chip backend's wall time measures: the simulation, or the board's run."""
    return "the board's" if backend == "uart" else "simulation"


def _other_backends(wrong: dict, backend: str) -> str:
    """The refusal of options given for backends other than `backend`: `wrong` maps the
    backends an option applies to onto the options given (every one named, not only the
    first: ``--port, --baud apply to the uart backend, not isasim: leave them out, ...``)."""
    clauses, n = [], sum(map(len, wrong.values()))
    for where, options in wrong.items():
        verb = "applies" if len(options) == 1 else "apply"
        clauses.append(f"{', '.join(options)} {verb} to the {', '.join(where)} backend"
                       f"{'s' * (len(where) > 1)}")
    groups = list(wrong)
    common = [b for b in groups[0] if all(b in where for where in groups[1:])]
    if not common:
        return (f"{'; '.join(clauses)}, not {backend}, and no one backend takes them all: "
                f"leave out those of the backends you do not want, and choose the one you do "
                f"with --backend")
    if len(groups) == 1:
        choose = "one of them" if len(common) > 1 else "it"
    else:
        choose = common[0] if len(common) == 1 else f"one of {', '.join(common)}"
    return (f"{'; '.join(clauses)}, not {backend}: leave {'them' if n > 1 else 'it'} out, or "
            f"choose {choose} with --backend")


def _generate(args, out, err) -> int:
    if args.steps < 0:
        raise UsageError(f"--steps must be a non-negative integer, not {args.steps}")
    chip = backends.CHIP_BACKENDS
    wrong: dict = {}                 # the backends an option applies to -> the options given
    for given, option, where in ((args.context is not None, "--context", chip),
                                 (args.config is not None, "--config", chip),
                                 (args.placement != "tensor", "--placement", chip),
                                 (args.backdoor_load, "--backdoor-load", ("verilator", "icarus")),
                                 (args.port is not None, "--port", ("uart",)),
                                 (args.baud is not None, "--baud", ("uart",)),
                                 (args.clock_mhz is not None, "--clock-mhz", chip)):
        if given and args.backend not in where:
            wrong.setdefault(tuple(where), []).append(option)
    if wrong:
        raise UsageError(_other_backends(wrong, args.backend))
    if args.sim_threads != 1 and args.backend != "verilator":
        raise UsageError(f"--sim-threads {args.sim_threads}: only the verilator backend runs "
                         f"simulator threads, not {args.backend}: leave it out, or choose "
                         f"--backend verilator")
    model_path, tok_path = _resolve(args)
    try:
        checkpoint = load_checkpoint(model_path)
        tokenizer = load_tokenizer(tok_path, vocab_size=checkpoint.config.vocab_size)
    except (CheckpointError, TokenizerError) as e:
        hint = "" if args.model or args.tokenizer else (
            " (a damaged download? `make models` checks the files and fetches them again)")
        raise UsageError(f"{e}{hint}") from None
    try:
        sampler = Sampler(checkpoint.config.vocab_size, args.temperature, args.topp, args.seed)
    except ValueError as e:
        raise UsageError(str(e).replace("`temperature`", "--temperature")
                         .replace("`topp`", "--topp").replace("`seed`", "--seed")) from None
    if args.backend in backends.CHIP_BACKENDS:
        return _generate_chip(args, checkpoint, tokenizer, model_path, tok_path, out, err)
    try:
        model = backends.create(args.backend, checkpoint)
    except backends.BackendUnavailable as e:
        raise UsageError(str(e)) from None
    except ValueError as e:      # a checkpoint the golden model's quantiser cannot take
        raise UsageError(f"{model_path}: {e}") from None

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
    except TokenizerError as e:
        raise UsageError(f"--prompt: {e}") from None
    except FloatOverflowError as e:
        raise RunFailure(f"{model_path}: {e}") from None
    out.write(done.text + "\n")
    out.flush()
    stop = _stop(done.reason.value, args.steps, checkpoint.config.seq_len)
    err.write(f"[{args.backend}] {_count(done.generated, 'token')} generated, "
              f"{_count(done.prompt_tokens, 'prompt token')} (BOS included), stopped by {stop}; "
              f"{_count(done.positions, 'position')} in "
              f"{done.seconds:.3f} s wall, {done.tokens_per_second:.1f} positions/s; "
              f"{_sampling(args, sampler.seed)}\n")
    err.flush()
    return 0


def _stop(reason: str, steps: int, context: int) -> str:
    """Return the summary's reason a generation stopped (a `StopReason` value) with its
    bound: ``"steps (16)"``, ``"context length (512 positions)"``, ``"BOS/EOS"``."""
    if reason == StopReason.STEPS.value:
        return f"{reason} ({steps})"
    if reason == StopReason.CONTEXT.value:
        return f"{reason} ({context} positions)"
    return reason


def _count(n: int, noun: str) -> str:
    """Return ``"1 token"`` / ``"2 tokens"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _sampling(args, seed: int) -> str:
    """Return how tokens were chosen: greedy at temperature 0 (no seed), else the sampler's."""
    if args.temperature == 0:
        return "greedy (temperature 0: argmax, no random draws)"
    return f"temperature {args.temperature:g}, top-p {args.topp:g}, seed {seed}"


#: What the cycles of a chip run are, by backend (the RTL simulators': measured).
_CYCLES_KIND = {"isasim": "the ISA simulator's estimated cycles",
                "uart": "wall-time cycles, the UART's transfers included"}


def _chip_summary(args, g: dict, compiled, config) -> str:
    """Return the figures of a chip run (``g`` as `chipotle.sim.cocotb_chip` writes it)."""
    from .driver.driver import mac_busy

    steps, npre = g["steps"], g["prefill_steps"]
    dec = steps[npre:]
    lines = [f"time to first token: {g['ttft_cycles']:,} cycles ({_count(npre, 'prefill step')}, "
             f"{_count(g['prompt_tokens'], 'prompt token')}"
             + ("; the steps' own cycles summed, not the host's traffic between them)"
                if npre > 1 else ")")]
    if dec:
        lines.append(f"decode: {g['decode_cycles_per_token']:,.0f} cycles per token "
                     f"(positions {dec[0]['pos']} .. {dec[-1]['pos']})")

    def util(sel, phase):
        if not sel:
            return "n/a (no such steps)"
        summed = g.get(f"perf_{phase}")     # the phase's counters (also when read per phase)
        if summed is not None:
            sel = [{"cycles": sum(s["cycles"] for s in sel), "perf": summed}]
        busy = mac_busy(sel, config.n_tiles)
        return "n/a (no mac_cycles counter)" if busy is None else f"{100 * busy:.1f}%"
    lines.append(f"matrix units busy (share of tile-cycles a unit streamed weights, "
                 f"MAC_CYCLES / tiles x cycles): prefill {util(steps[:npre], 'prefill')}, "
                 f"decode {util(dec, 'decode')}; not the share of peak MACs: a busy cycle "
                 f"does m of the M = {config.max_m} rows' MACs, decode m = 1")
    if dec:
        need = sum(compiled.weight_bytes_per_token() + compiled.kv_bytes(s["pos"]) for s in dec)
        cyc = sum(s["cycles"] for s in dec)
        ideal = need / config.sram_read_bytes_per_cycle
        whole = need / config.sram_peak_read_bytes_per_cycle
        lines.append(f"decode roofline efficiency: {100 * ideal / cyc:.1f}% (weight + KV bytes "
                     f"over {config.sram_read_bytes_per_cycle} B/cycle, the matrix units' "
                     f"read ports, over {_CYCLES_KIND.get(args.backend, 'measured cycles')})"
                     f"; {100 * whole / cyc:.1f}% of the "
                     f"SRAM's whole read bandwidth ({config.sram_peak_read_bytes_per_cycle} "
                     f"B/cycle with the {config.n_banks}-word reads of the read/write ports)")
        tps = args.clock_mhz * 1e6 / g["decode_cycles_per_token"]
        line = (f"decode: {tps:,.0f} tokens/s at an assumed {args.clock_mhz:g} MHz clock "
                f"(--clock-mhz)")
        if getattr(args, "clock_assumed", False):
            from chipotle.hw.fpga.boards import BOARDS
            for board in BOARDS.values():
                if board.config == config:      # this chip is a board's: its clock too
                    mhz = board.clk_hz / 1e6
                    line += (f"; {mhz * 1e6 / g['decode_cycles_per_token']:,.0f} at the "
                             f"{mhz:g} MHz of make bitstream's {board.name} build")
        lines.append(line)
    if args.backend == "isasim":
        lines.append("(isasim cycles are the ISA simulator's estimate, not a measurement; the "
                     "RTL is the authority and takes more: docs/performance.md compares them)")
    elif args.backend == "uart":
        lines.append("(uart cycles are the host's wall time x --clock-mhz, so they include the "
                     "UART's transfers of each step's start and doorbell; the chip's own "
                     "CYCLES counters are exact: docs/fpga.md)")
    if "cycles_per_second" in g:
        lines.append(f"simulation: {g['cycles_per_second']:,.0f} cycles per wall second; "
                     f"load {g['load_bytes']:,} bytes in {g['load_cycles']:,} cycles, "
                     f"{g['load_seconds']:.1f} s")
    return "\n".join(lines)


def _uart_default_config() -> str:
    """The `chipotle.config.CONFIGS` name of the chip ``make bitstream`` builds for its
    default board (the ULX3S 85F), the ``--backend uart`` default."""
    from chipotle.hw.fpga.boards import BOARDS
    board = BOARDS["ulx3s-85f"]
    return next(name for name, c in CONFIGS.items() if c == board.config)


def _uart_default_context() -> int:
    """The context (positions) of the ULX3S 85F build's chip, the ``--backend uart``
    default (`chipotle.hw.fpga.boards.Board.context`)."""
    from chipotle.hw.fpga.boards import BOARDS
    return BOARDS["ulx3s-85f"].context


def _shorter_context(error, positions: int) -> int | None:
    """The context of a `chipotle.compiler.FitError` suggestion that changes nothing but the
    context, if it holds `positions`; else None."""
    for fit in getattr(error, "fits", ()):
        if (not fit.config and fit.placement is None and fit.context is not None
                and fit.context >= positions):
            return fit.context
    return None


def _longest_context(model, config, placement: str) -> int | None:
    """The longest context `config` holds `model` for with `placement`: the model's
    ``seq_len`` if that fits, else the longest the compiler's refusal names (None: no
    context holds it)."""
    from .compiler import FitError, compile_model
    try:
        compile_model(model, config, context=None, placement=placement)
    except (FitError, ValueError) as e:
        return _shorter_context(e, 0)
    return model.config.seq_len


class FitRefusal(Exception):
    """`compile_fitting` refuses: the message says what does not fit and what would."""


def shorter_context_note(shorter: int, config, seq_len: int, make_target: str) -> str:
    """The line that says a chip runs at `shorter` positions, the longest context `config`
    holds the model for, instead of the checkpoint's `seq_len` (`compile_fitting`'s second
    result, no ``--context`` given); `make_target` is ``sim`` or ``bench``, whose ``CONTEXT=``
    sets it."""
    return (f"context {shorter}: the longest this chip ({config}) holds the model for; its "
            f"seq_len, {seq_len}, does not fit (--context sets the context; "
            f"`make {make_target}`: CONTEXT=)")


def search_note(name: str) -> str:
    """The line a command prints before the compiler searches for the configurations that
    fit the model `name` (a file name, ``stories260K.bin``; `compile_fitting`'s
    `on_search`): the search compiles the sizes it tries, a minute or more for stories260K
    on a loaded machine, and prints nothing itself."""
    return (f"checking which configurations fit {name} (it does not fit as given; this can "
            f"take a minute) ...")


def compile_fitting(model, config, given: str, context: int | None, need: int = 0,
                    needs=None, need_of: str = "", steps: int = 0, on_search=None, **kw):
    """Compile `model` for a command as `chipotle generate`, ``chipotle.sim.bench`` and
    ``python -m chipotle.compiler`` do.

    With `context` None (the command's ``--context`` not given) and the model's ``seq_len``
    not fitting `config`, compile for the longest context the refusal names instead, if it
    holds `need` positions (the prompt, BOS included, and any decode steps).

    Parameters
    ----------
    model : chipotle.model.Checkpoint or chipotle.golden.QuantizedModel
    config : chipotle.config.ChipConfig
    given : str
        The ``--config`` text, for the options the refusal suggests (`config_tips`).
    context : int or None
        The ``--context`` given, or None.
    need : int
        Positions the run needs (0: any context will do).
    needs : str or callable, optional
        What needs the `need` positions, for the refusal (`config_tips`).
    need_of : str
        Whose the `need` positions are, in the refusal's ``for <need_of> N positions, a
        configuration that fits: ...`` (e.g. ``"the prompt's "``).
    steps : int
        Tokens the run is to generate after the `need` positions: the configurations that
        refusal names hold ``need + steps - 1`` positions (the last generated token is not
        decoded), up to the model's ``seq_len``, so that the run they offer is not stopped
        by the context; 0 (the default): `need` positions.
    on_search : callable, optional
        Called with no arguments before the first search for configurations that fit
        (`chipotle.compiler.compile_model`'s `on_search`), at most once however many
        compiles the refusal takes; not at all when the model fits as asked.
    **kw
        Passed to `chipotle.compiler.compile_model` (``placement``, ``kvapp``).

    Returns
    -------
    (CompiledModel, int or None)
        The compiled model, and the shorter context it was compiled for instead of
        ``seq_len`` (None: as asked).

    Raises
    ------
    FitRefusal
        The model does not fit: the message (`config_tips`) names what does not fit and
        the options that would; when only a context shorter than `need` holds the model,
        also the configurations that hold `need` positions.
    """
    from .compiler import FitError, compile_model
    if on_search is not None:
        kw["on_search"] = functools.cache(on_search)      # once: its first call only
    try:
        return compile_model(model, config, context=context, **kw), None
    except (FitError, ValueError) as e:
        error = e
    shorter = _shorter_context(error, need) if context is None else None
    if shorter is not None:
        try:
            return compile_model(model, config, context=shorter, **kw), shorter
        except (FitError, ValueError) as e:
            raise FitRefusal(config_tips(e, given, need, needs)) from None
    message = config_tips(error, given, need, needs)
    if (context is None and _shorter_context(error, 0) is not None
            and need <= model.config.seq_len):
        # it holds a context shorter than `need`: the configurations that hold `need`
        # positions and the steps after them
        want = min(need + max(steps - 1, 0), model.config.seq_len)
        try:
            compile_model(model, config, context=want, **kw)
        except (FitError, ValueError) as e:
            if options := fit_options(e, given, want):
                what = (f"{need_of}{need} positions" if want == need else
                        f"{want} positions ({need_of}{need} and {want - need} more for "
                        f"{option_text('--steps', steps)})")
                message += (f"; for {what}, a configuration that fits: "
                            f"{' or '.join(options)}")
    raise FitRefusal(message)


def module_config(ap, args):
    """The ``--config`` and ``--context`` of a ``python -m`` module's parsed `args`
    (``chipotle.compiler`` and its ``profile``): the `ChipConfig`, or `ap`'s usage error
    (exit 2) naming the option."""
    from .config import ChipConfig
    try:
        cfg = ChipConfig.from_string(args.config)
    except ValueError as e:
        ap.error(f"--config: {e}")
    if args.context is not None and args.context < 1:
        ap.error(f"--context must be a positive number of positions, not {args.context}")
    return cfg


def _module_refusal(ap, message: str):
    """End a ``python -m`` command with one line: `ap`'s ``refuse`` (``<prog>: error:
    <message>``, exit status 2), or without a parser ``error: <message>``, exit status 1."""
    if ap is not None:
        ap.refuse(message)
    raise SystemExit(f"error: {message}")


def module_model(path: Path, option: str | None, given: bool = False, ap=None):
    """The quantised model of a ``python -m`` module's `main` (``chipotle.compiler`` and its
    ``profile``), read from the checkpoint at `path`, or the command's end in one ``error:``
    line (`SystemExit`; with the command's `ArgumentParser` `ap`, ``<prog>: error: ...`` and
    exit status 2 as its other refusals): a missing default file says where it was looked
    for (`_where`, `option` the command's file option, None if it has none), a default file
    that is not the published one says so (`chipotle.paths.check_published`), an unreadable
    or malformed checkpoint and one the quantiser refuses name the problem.  A file `given`
    with `option` is taken as it is."""
    from .golden import quantize
    if not given and not path.is_file():
        _module_refusal(ap, _where("checkpoint", path, option))
    problem = given and given_file_problem(path, "checkpoint", option, DEFAULT_CHECKPOINT)
    if problem:             # (as chipotle generate's --model: a folder, a missing path)
        _module_refusal(ap, problem)
    try:
        if not given:
            check_published(path, option)
        ckpt = load_checkpoint(path)
    except (OSError, ValueError) as e:      # CheckpointError is a ValueError
        _module_refusal(ap, str(e))
    try:
        return quantize(ckpt)
    except ValueError as e:                 # a checkpoint the quantiser cannot take
        _module_refusal(ap, f"{path}: {e}")


def compile_for_module(model, config, given: str, context: int | None,
                       name: str = "the model", ap=None, **kw):
    """`compile_fitting` for a ``python -m`` module's `main` (``chipotle.compiler`` and its
    ``profile``): a refusal ends the command with its one-line message (`SystemExit`; with
    the command's `ArgumentParser` `ap`, ``<prog>: error: ...``, exit status 2), and
    a context shorter than the model's ``seq_len`` chosen instead is said on stderr, and so
    is what the compile left out for want of room (`slower_notes`); before a search for the
    configurations that fit, `search_note` of `name` (the model file's name) is too.
    Returns `compile_fitting`'s ``(CompiledModel, shorter context or None)``."""
    def searching():
        print(search_note(name), file=sys.stderr, flush=True)
    try:
        compiled, shorter = compile_fitting(model, config, given, context,
                                            on_search=searching, **kw)
    except FitRefusal as e:
        _module_refusal(ap, str(e))
    if shorter is not None:
        print(f"context {shorter}: the longest this configuration holds the model for; its "
              f"seq_len, {model.config.seq_len}, does not fit (--context sets the context)",
              file=sys.stderr)
    for line in slower_notes(compiled, given,
                             None if shorter is None else model.config.seq_len):
        print(line, file=sys.stderr)
    return compiled, shorter


def _generate_chip(args, checkpoint, tokenizer, model_path, tok_path, out, err) -> int:
    """Run `generate` for a backend of `backends.CHIP_BACKENDS` through `chipotle.driver`."""
    import asyncio

    from .compiler import FitError, compile_model
    from .config import ChipConfig
    from .generate import check_prompt_length, encode_prompt

    if args.backend == "uart" and (not args.port or args.clock_mhz is None):
        # both named at once when both are missing (a fresh user was asked for one per run)
        need = [*(["--port (e.g. /dev/ttyUSB0)"] if not args.port else []),
                *([f"--clock-mhz, the bitstream's clock (the ULX3S build of make bitstream: "
                   f"{_ulx3s_clock_mhz():g}): the board's step figures are the wall time "
                   f"times it"] if args.clock_mhz is None else [])]
        raise UsageError(f"--backend uart needs {' and '.join(need)}")
    if args.config is None and args.backend == "uart":
        # the board's chip, not the simulators' 4 x 4 default: the bitstream fixes the chip
        args.config = _uart_default_config()
        if args.context is None:
            args.context = _uart_default_context()
        err.write(f"[uart] the chip of make bitstream's ULX3S 85F build: --config "
                  f"{args.config} --context {args.context} (give --config for another "
                  f"bitstream's)\n")
    elif args.config is None:
        args.config = "default"
    try:
        config = ChipConfig.from_string(args.config)
    except ValueError as e:
        raise UsageError(f"--config: {e}") from None
    args.clock_assumed = args.clock_mhz is None        # (the summary names a board's clock)
    if args.clock_mhz is None:
        args.clock_mhz = DEFAULT_CLOCK_MHZ
    if args.backend in ("verilator", "icarus"):   # the flow's switches, before any work
        from chipotle.sim.flow import env_flag
        try:
            for name in ("PGO", "WAVES", "HIERARCHICAL"):
                env_flag(name, False)
        except ValueError as e:
            raise UsageError(str(e)) from None
    seq_len = checkpoint.config.seq_len

    def check_context(most: int, whose: str) -> None:
        check_prompt_length(len(ids), args.context, what=f"--context {args.context}",
                            fix=f"give --context {len(ids)} or more (`make sim`: CONTEXT=; "
                                f"{whose}, {most}, is the most)")
    ids = None
    try:   # before the compile: the context compiled for is at most this
        ids = encode_prompt(tokenizer, args.prompt, seq_len)
        if args.context is not None:
            check_context(seq_len, "the model's seq_len")
    except TokenizerError as e:
        raise UsageError(f"--prompt: {e}") from None
    except PromptTooLongError as e:
        if ids is not None and args.context is not None and len(ids) <= seq_len:
            most = _longest_context(checkpoint, config, args.placement)
            if most is None or most < len(ids):
                try:    # would the longer context the message asks for fit the configuration?
                    compile_model(checkpoint, config, context=len(ids),
                                  placement=args.placement)
                except (FitError, ValueError) as fe:
                    raise UsageError(
                        f"the prompt is {len(ids)} tokens (BOS included), longer than --context "
                        f"{args.context}, and a context of {len(ids)} does not fit this "
                        f"configuration either ({config_tips(fe, args.config, len(ids))}): "
                        f"shorten the prompt, or give a configuration with more SRAM") from None
            elif most < seq_len:    # the configuration's limit, not the model's
                try:
                    check_context(most, "the longest context this configuration holds")
                except PromptTooLongError as shorter:
                    raise UsageError(str(shorter)) from None
        raise UsageError(str(e)) from None
    err.write(f"[{args.backend}] compiling {model_path.name} for {config}, "
              f"{args.placement} placement\n")
    err.flush()
    def searching():
        err.write(f"[{args.backend}] {search_note(model_path.name)}\n")
        err.flush()
    try:
        compiled, shorter = compile_fitting(checkpoint, config, args.config, args.context,
                                            len(ids), need_of="the prompt's ",
                                            steps=args.steps, placement=args.placement,
                                            on_search=searching)
    except FitRefusal as e:
        raise UsageError(str(e)) from None
    if shorter is not None:   # no --context: the longest context this configuration holds
        err.write(f"[{args.backend}] {shorter_context_note(shorter, config, seq_len, 'sim')}\n")
        err.flush()
        args.context = shorter
    for line in slower_notes(compiled, args.config, None if shorter is None else seq_len):
        err.write(f"[{args.backend}] {line}\n")
        err.flush()
    try:
        check_prompt_length(len(ids), compiled.context, what=f"compiled for {config}",
                            fix="shorten the prompt, or give a configuration with more SRAM "
                                "per tile (--config; `make sim`: CONFIG=)")
    except PromptTooLongError as e:
        raise UsageError(str(e)) from None
    steps = args.steps or None
    if args.backend in ("isasim", "uart"):
        from .driver import DoorbellTimeout, Driver, IsaSimBackend
        if args.backend == "uart":
            from .driver.uart import SerialTransport, UartBackend
            try:
                link = SerialTransport(args.port, args.clock_mhz * 1e6,
                                       DEFAULT_BAUD if args.baud is None else args.baud)
            except (ValueError, OSError) as e:
                raise UsageError(f"--port {args.port}: {e}") from None
            board = UartBackend(link, config)
            drv = Driver(compiled, board, tokenizer)
        else:
            drv = Driver(compiled, IsaSimBackend(config), tokenizer)

        def on_token(ev):
            out.write(ev.text)
            out.flush()

        async def go():
            await drv.load()
            return await drv.generate(ids, steps, temperature=args.temperature,
                                      topp=args.topp, seed=args.seed, on_token=on_token)
        try:
            r = asyncio.run(go())
        except DoorbellTimeout as e:
            if args.backend != "uart":
                raise
            if board.strays and not board.answers:
                # packets came back, none of them the chip's: the host's own, echoed
                raise UsageError(
                    f"--port {args.port}: no answer from the board, but {board.strays:,} "
                    f"packets came back that the chip does not send (the last: "
                    f"{board.last_stray}): does the port echo what it is sent (a loopback, a "
                    f"terminal with echo on)?") from None
            if board.flits_out:
                # it answered, then went quiet (reset, unplugged, another bitstream)
                raise RunFailure(
                    f"--port {args.port}: the board stopped answering after "
                    f"{board.flits_out:,} flits from it and {board.flits_in:,} to it: {e}"
                ) from None
            # not a flit back: no board answering there, or not at this line rate
            raise UsageError(
                f"--port {args.port}: no answer from the board on this port within "
                f"{e.cycles / (args.clock_mhz * 1e6):.1f} s: is it programmed with make "
                f"bitstream's bitstream (docs/fpga.md), and at --baud "
                f"{DEFAULT_BAUD if args.baud is None else args.baud}, the bitstream's line "
                f"rate?") from None
        out.write("\n")
        g = {"tokens": list(r.tokens), "stop_reason": r.stop_reason.value, "seed": r.seed,
             "generated": r.generated, "prompt_tokens": r.prompt_tokens,
             "prefill_steps": r.prefill_steps, "ttft_cycles": r.ttft_cycles,
             "decode_cycles_per_token": r.decode_cycles_per_token,
             "steps": [{"pos": s.pos, "cycles": s.cycles, "perf": s.perf} for s in r.steps]}
        seconds = r.seconds
    else:
        from chipotle.sim.chiprun import Job, run_rtl

        def progress(msg):
            err.write(f"[{args.backend}] {msg}\n")
            err.flush()
        if args.backend == "icarus" and config.n_tiles > ICARUS_TILES:
            progress(f"note: Icarus simulates a chip of {config.n_tiles} tiles very slowly (the "
                     f"4 x 4 chip gave no token in 15 minutes, README); Verilator (`make sim`'s "
                     f"default) runs it at thousands of cycles per second")
        job = Job(config=config.as_dict(), model=compiled, tokenizer=str(tok_path),
                  prompt_tokens=ids, steps=steps, temperature=args.temperature, topp=args.topp,
                  seed=args.seed, stream=True, backdoor=args.backdoor_load,
                  perf="phase")   # per-step counter reads: ~300 host-link cycles a step
        g = run_rtl(job, sim=args.backend, progress=progress,
                    threads=args.sim_threads if args.backend == "verilator" else 1)
        seconds = g["sim_seconds"]
    out.flush()
    stop = _stop(g["stop_reason"], args.steps, compiled.context)
    err.write(f"[{args.backend}] {_count(g['generated'], 'token')} generated, "
              f"{_count(g['prompt_tokens'], 'prompt token')} (BOS included), stopped by {stop}; "
              f"{seconds:.1f} s of {_wall_of(args.backend)} wall time ("
              f"{'build and ' * (args.backend in ('verilator', 'icarus'))}weight load not "
              f"included); "
              f"{_sampling(args, g['seed'])}\n")
    err.write(_chip_summary(args, g, compiled, config) + "\n")
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
        # the prefix of argparse's refusals of the same command (`ArgumentParser.error`)
        err.write(f"chipotle {args.command}: error: {under_make(str(e))}\n")
        return EXIT_USAGE
    except (RunFailure, RuntimeError) as e:
        if not isinstance(e, RunFailure) and not _simulator_exit(e):
            raise
        # a run that failed, or its simulator killed or crashed (`SimulatorExit`): one line
        out.flush()
        err.write(f"\nchipotle {args.command}: error: {e}\n")
        return 1
    except BrokenPipeError:
        # The reader went away (`chipotle generate | head`): stop quietly.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - avoid a second error at exit
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        # Ctrl-C: one line, not the asyncio / cocotb runner traceback (the simulator, a
        # child in the same process group, stops on the same signal); a second interrupt
        # does not break the report
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        err.write("\nchipotle: interrupted\n")
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
