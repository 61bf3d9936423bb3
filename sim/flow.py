"""Turn Amaranth components into cocotb runs under Verilator or Icarus, with cached builds.

A build is keyed by a hash of the generated Verilog, the simulator, its arguments (among
them ``--hierarchical``: Verilator builds the modules the Verilog marks as hierarchy blocks
once for all their instances, see `run_cocotb`) and the waveform setting, so an unchanged
design is never rebuilt: the first Verilator build of a design pays the C++ compile, every
later test of the same design starts at once.  Builds are serialised with a file lock so
that parallel pytest workers (``pytest -n``) share them safely.  Generated files go to
``build/`` at the top of the checkout (or ``$CHIPOTLE_BUILD_DIR``) and are never committed.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import signal
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import toolchain

__all__ = ["SIMULATORS", "CocotbRun", "SimulatorExit", "build_root", "check_build_dir",
           "env_flag", "generate_verilog",
           "generate_verilog_cached", "hier_blocks", "source_digest", "run_cocotb"]

SIMULATORS = ("verilator", "icarus")


def build_root() -> Path:
    """Return the folder for generated Verilog and simulator builds.

    ``$CHIPOTLE_BUILD_DIR`` if set, else ``build/`` at the top of the checkout.
    """
    env = os.environ.get("CHIPOTLE_BUILD_DIR")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parent.parent / "build"


def check_build_dir(path, *, create: bool = True) -> Path:
    """Return `path`, the folder a command's build writes to (``--build-dir``), checked
    before any work: created with its parents if it is missing (unless `create` is false:
    then only the problems below are looked for).

    Raises
    ------
    ValueError
        In one line naming `path` (the caller puts the option before it): for an empty path
        (``Path("")`` is the current directory, whose files a build would write and delete),
        a file or anything else that is not a folder in its place (``x: is a file, not a
        folder``), a folder that cannot be created or is not writable (the OS's reason).
    """
    if not str(path):
        raise ValueError("is empty: give a folder (an empty one would be the current "
                         "directory)")
    path = Path(path)
    if path.is_file():
        raise ValueError(f"{path}: is a file, not a folder")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path}: is not a folder")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{path}: is not writable (Permission denied)")
    elif create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"{path}: cannot be created ({e.strerror or e})") from None
    return path


def generate_verilog(component, name: str) -> str:
    """Return the Verilog text of an Amaranth ``wiring.Component``.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
        The design; its signature gives the top-level ports (flattened with ``__``,
        e.g. ``i__payload``).
    name : str
        Name of the top-level Verilog module.
    """
    from amaranth.back import verilog

    return verilog.convert(component, name=name, emit_src=False)


def source_digest() -> str:
    """Return a SHA-256 over the sources that determine generated Verilog.

    Covers every ``*.py`` of ``chipotle.hw`` (``hw/``, the board tops and UART bridge of
    ``hw/fpga/`` included), ``chipotle.isa`` (``sw/isa/``, whose
    instruction layout the controller imports), ``sw/config.py`` and the Amaranth version.
    """
    import amaranth

    here = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(f"amaranth {amaranth.__version__}\n".encode())
    files = sorted([*(here / "hw").rglob("*.py"), *(here / "sw" / "isa").rglob("*.py"),
                    here / "sw" / "config.py"])
    for f in files:
        h.update(str(f.relative_to(here)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _process_digest() -> str:
    """`source_digest` as this process first saw it (the first cached generation).

    A long run (``chipotle.sim.bench`` over several prompts) generates from the modules it
    imported at its start; if ``hw/`` is edited meanwhile, the digest of the files on disk
    no longer describes those modules, and caching their Verilog under it would hand the old
    design to the next run as the new one.  The process's first digest keeps naming what
    the process generates."""
    return source_digest()


def generate_verilog_cached(factory, name: str, key: str, *, progress=None) -> str:
    """Return the Verilog of ``factory()``, generated once per `key` and source version.

    Generating a large design (the 4 x 4 `Chip`: about two minutes) is the slow part of a
    warm run, so the text is kept in ``build/verilog/<name>-<hash>.v``, where the hash
    covers `key` (e.g. the configuration's ``repr``) and `source_digest` as the process
    first computed it (so sources edited during a run do not rename the modules already
    imported).  Parallel callers share the file through a lock.

    Parameters
    ----------
    factory : callable returning amaranth.lib.wiring.Component or str
        Called only on a cache miss; a string is taken as the Verilog text itself (e.g.
        from ``chipotle.hw.chip.chip_verilog``).
    name : str
        Top-level module name.
    key : str
        Everything besides the sources that changes the design (its parameters).
    progress : callable of str, optional
        Told when a (slow) generation starts and ends.
    """
    digest = hashlib.sha256(f"{name}\0{key}\0{_process_digest()}".encode()).hexdigest()[:16]
    path = build_root() / "verilog" / f"{name}-{digest}.v"
    with _locked(path.with_suffix(".lock")):
        if path.exists():
            return path.read_text()
        if progress:
            progress(f"generating Verilog for {name} (cached in {path})")
        made = factory()
        text = made if isinstance(made, str) else generate_verilog(made, name=name)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        if progress:
            progress(f"generated {len(text) // 1024} KiB of Verilog")
        return text


@contextlib.contextmanager
def _environ(**values: str):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _make_vars(**values: str):
    """Context manager: pass ``values`` to every ``make`` the runner starts, as command-line
    variables through ``$MAKEFLAGS``, escaped as make writes them (`toolchain.make_assignments`)."""
    return _environ(MAKEFLAGS=toolchain.makeflags_with(os.environ.get("MAKEFLAGS", ""), values))


# GCC profile-guided optimisation of the Verilated model (`run_cocotb`'s ``pgo_train``):
# instrument, train, rebuild from the profile.  ``-fprofile-partial-training`` keeps the
# code the training run did not reach optimised as without a profile.
PGO_GENERATE = {"CXXFLAGS": "-fprofile-generate -fprofile-update=prefer-atomic",
                "USER_LDFLAGS": "-fprofile-generate"}
PGO_USE = {"CXXFLAGS": "-fprofile-use -fprofile-partial-training -Wno-missing-profile"}


def _with_icarus_dump(verilog: str, toplevel: str, path: Path) -> str:
    """Return ``verilog`` with a Verilog-2005 ``$dumpvars`` block in module ``toplevel``.

    The dump format is FST, chosen by the ``-fst`` argument the runner gives ``vvp``.
    """
    start = verilog.index(f"module {toplevel}(")
    end = verilog.index("endmodule", start)
    block = f'  initial begin\n    $dumpfile("{path}");\n    $dumpvars(0, {toplevel});\n  end\n'
    return verilog[:end] + block + verilog[end:]


def _public_ports_config(verilog: str, toplevel: str,
                         extra: Sequence[tuple[str, str]] = ()) -> str:
    """Return a Verilator configuration file making only the ports of ``toplevel`` public,
    and the variables ``extra`` names: ``(module, variable)`` pairs (Verilator's
    ``public_flat_rw``; the variable may hold ``*`` wildcards).

    cocotb reaches the design through these; ``--public-depth 1`` would also make every
    wire of ``toplevel`` (the nets between its instances) writable through VPI, which
    Verilator then treats like inputs: the logic behind them joins its "input
    combinational" region and is evaluated again at every ``eval()``, about four times
    per clock cycle under cocotb (a third of the 4 x 4 chip's run time).
    """
    head = re.search(rf"^module {re.escape(toplevel)}\((.*?)\);", verilog, re.M | re.S)
    if head is None:
        raise ValueError(f"no module {toplevel!r} in the Verilog")
    ports = [p.strip().lstrip("\\") for p in head.group(1).split(",") if p.strip()]
    lines = [f'public_flat_rw -module "{toplevel}" -var "{p}"' for p in ports]
    for module, var in extra:
        if not re.search(rf"^module \\?{re.escape(module)}[\s(]", verilog, re.M):
            raise ValueError(f"public signal {module}.{var}: no module {module!r} in the "
                             f"Verilog")
        lines.append(f'public_flat_rw -module "{module}" -var "{var}"')
    return "`verilator_config\n" + "\n".join(lines) + "\n"


_HIER_BLOCK = re.compile(r"/\*\s*verilator\s+hier_block\s*\*/")


def hier_blocks(verilog: str) -> list[str]:
    """Return the names of the modules that ``verilog`` marks as Verilator hierarchy blocks.

    A module is marked by a ``/* verilator hier_block */`` metacomment in its body (as
    `chipotle.hw.chip.chip_verilog` marks the tile); names are in order of appearance.
    """
    names = []
    for m in _HIER_BLOCK.finditer(verilog):
        heads = list(re.finditer(r"^module\s+\\?([^\s(;]+)", verilog[:m.start()], re.M))
        if not heads or verilog.rfind("endmodule", heads[-1].end(), m.start()) >= 0:
            raise ValueError(f"a hier_block metacomment outside a module at offset {m.start()}")
        names.append(heads[-1].group(1))
    return names


def env_flag(name: str, default: bool) -> bool:
    """Return the boolean environment variable `name`: ``1``, ``true``, ``yes``, ``on`` are
    True and ``0``, ``false``, ``no``, ``off`` False (any case); `default` when it is unset
    or empty.

    Raises
    ------
    ValueError
        For any other value (naming the variable: ``$WAVES``, or ``WAVES=`` when make ran
        the command, ``$MAKELEVEL`` set), rather than guessing.
    """
    value = os.environ.get(name, "").strip().lower()
    if value == "":
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    # under make (``make sim WAVES=maybe``) in make's notation, the variable given there
    what = f"{name}=" if "MAKELEVEL" in os.environ else f"${name}"
    raise ValueError(f"{what} must be 1/true/yes/on or 0/false/no/off, not "
                     f"{os.environ[name]!r}")


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fd:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


class SimulatorExit(RuntimeError):
    """The simulator process of a cocotb run ended with a non-zero exit status.

    Raised by `run_cocotb` instead of cocotb's runner's ``RuntimeError("Command failed with
    return code: N")``, whose traceback was all a host command showed of a simulator killed
    or crashed (session 40's fresh user: SIGINT sent to the simulator alone).

    Attributes
    ----------
    sim : str
        ``"verilator"`` or ``"icarus"``.
    returncode : int
        The exit status; negative: killed by that signal (`subprocess` convention).
    """

    def __init__(self, sim: str, returncode: int):
        self.sim, self.returncode = sim, returncode
        if returncode < 0:
            try:
                why = f"killed by {signal.Signals(-returncode).name}"
            except ValueError:
                why = f"killed by signal {-returncode}"
        elif returncode == 130:
            why = "exit status 130: SIGINT reached the simulator"
        else:
            why = f"exit status {returncode}"
        super().__init__(f"the {sim} simulation ended early ({why}); its messages are above")


@dataclass
class CocotbRun:
    """The outcome of one cocotb run.

    Attributes
    ----------
    sim : str
        "verilator" or "icarus".
    results_xml : Path
        The JUnit results file cocotb wrote (in the build folder, beside any waveform:
        ``dump.vcd`` under Verilator, ``<toplevel>.fst`` under Icarus).
    passed, failed : list of str
        Names of the cocotb tests that passed and failed.
    failures : dict of str to str
        Failure message per failed test.
    """

    sim: str
    results_xml: Path

    @property
    def build_dir(self) -> Path:
        """The build folder of this run (cached Verilog, simulator build, waveforms)."""
        return self.results_xml.parent

    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)

    def raise_on_failure(self, expected: Sequence[str] | None = None) -> None:
        """Raise ``AssertionError`` naming each failed cocotb test and its message.

        Also raises when no test ran at all, and when a test named in `expected` did not
        pass (cocotb drops a test name that matches no test with only a log line, and a
        skipped test is neither passed nor failed), so a mistyped or renamed test name
        cannot pass.

        Parameters
        ----------
        expected : sequence of str, optional
            Names of cocotb tests that must have passed (``run_cocotb``'s ``testcase``).
        """
        if self.failed:
            msgs = "\n".join(f"  {t}: {self.failures.get(t, '')}" for t in self.failed)
            raise AssertionError(f"{len(self.failed)} cocotb test(s) failed on {self.sim}:\n{msgs}")
        if not self.passed:
            raise AssertionError(f"no cocotb test ran on {self.sim} ({self.results_xml})")
        missing = [t for t in (expected or ()) if t not in self.passed]
        if missing:
            raise AssertionError(f"cocotb test(s) {', '.join(missing)} did not pass on "
                                 f"{self.sim}: no such test, or skipped (passed: "
                                 f"{', '.join(self.passed)}; {self.results_xml})")


def _parse_results(sim: str, path: Path) -> CocotbRun:
    run = CocotbRun(sim=sim, results_xml=path)
    tree = ET.parse(path)
    for case in tree.iter("testcase"):
        name = case.get("name", "?")
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            run.failed.append(name)
            run.failures[name] = (bad.get("message") or bad.text or "").strip()
        elif case.find("skipped") is None:
            run.passed.append(name)
    return run


#: The C++ compilers whose commands `compiled_cxx_files` counts in a build log.
_CXX_NAMES = ("c++", "g++", "clang++")


def compiled_cxx_files(log_text: str) -> int:
    """Return how many C++ files a Verilator build's make output `log_text` has compiled.

    Counts the compiler commands that make an object (``c++ ... -c ...``, also through
    ``ccache`` and with a path or a target prefix, ``/usr/bin/x86_64-linux-gnu-g++``); the
    precompiled headers' preprocessing (``-E``, no ``-c``) and the link are not files
    compiled.
    """
    n = 0
    for line in log_text.splitlines():
        words = line.split()
        if words and words[0] == "ccache":
            words = words[1:]
        if words and words[0].rsplit("/", 1)[-1].endswith(_CXX_NAMES) and "-c" in words:
            n += 1
    return n


def _make_list(mk: str, names: tuple) -> set:
    """Return the words of the make variables `names` in the makefile text `mk`, as
    Verilator writes its lists (``VM_USER_CLASSES = \\`` and one word a line)."""
    words, var = set(), None
    for line in mk.splitlines():
        if var is None:
            m = re.match(r"(\w+)\s*\+?=(.*)$", line)
            if not m or m.group(1) not in names:
                continue
            var, line = m.group(1), m.group(2)
        cont = line.rstrip().endswith("\\")
        words.update(w for w in line.rstrip().rstrip("\\").split())
        if not cont:
            var = None
    return words


def verilated_cxx_files(build_dir: Path) -> int | None:
    """Return how many C++ files the make step of a Verilator build in `build_dir` compiles.

    Counts the objects of Verilator's makefiles as ``verilated.mk`` builds them, in
    `build_dir` (the top) and in each folder of it that holds a hierarchy block: the
    generated classes (``VM_CLASSES_*``, ``VM_SUPPORT_*``) one file each, or a single
    ``<prefix>__ALL.cpp`` when ``VM_PARALLEL_BUILDS`` is not 1 (Verilator's choice for a
    small design); the Verilator runtime (``VM_GLOBAL_*``); the user's files
    (``VM_USER_CLASSES``: cocotb's ``verilator.cpp``, ``sim/verilator_finish.cpp``); and the
    objects a rule names (a hierarchy block's library wrapper, ``chipotle_tile.o``).  The
    makefiles are complete once Verilator has finished, which it has when make compiles
    the first file.

    Returns
    -------
    int or None
        The number of files, None if `build_dir` holds no ``<prefix>_classes.mk`` yet
        (Verilator still running, or not a Verilator build).
    """
    classes = ("VM_CLASSES_FAST", "VM_CLASSES_SLOW", "VM_SUPPORT_FAST", "VM_SUPPORT_SLOW")
    others = ("VM_GLOBAL_FAST", "VM_GLOBAL_SLOW", "VM_USER_CLASSES")
    total, seen = 0, False
    for d in [build_dir, *sorted(p for p in build_dir.iterdir() if p.is_dir())]:
        if not any(d.glob("*_classes.mk")):
            continue
        seen = True
        text = "\n".join(mk.read_text(errors="replace") for mk in sorted(d.glob("*.mk")))
        parallel = _make_list(text, ("VM_PARALLEL_BUILDS",)) == {"1"}
        names = _make_list(text, others)
        gen = _make_list(text, classes)
        names |= gen if parallel else {"__ALL"} if gen else set()
        for line in text.splitlines():
            rule = re.match(r"[^\s#=]+:(?!=)(.*)$", line)
            if rule:
                names |= {w[:-2] for w in rule.group(1).split() if re.fullmatch(r"\w+\.o", w)}
        total += len(names)
    return total if seen else None


@contextlib.contextmanager
def _build_progress(log: Path, what: str, every: float = 30.0):
    """Send a simulator build's output to `log` and report progress on stderr instead.

    Prints one line when the build starts, one every `every` seconds (elapsed time and,
    once make compiles, the C++ files compiled so far, counted in `log`, of the total
    `verilated_cxx_files` finds in the build folder, ``log.parent``: ``12 of 37 C++ files
    compiled``), and one at the end; if the build fails, the last 40 lines of `log` and its
    path, then the error propagates (interrupted, `KeyboardInterrupt`: one line saying so).
    The total counts every file of the build: a rebuild whose make finds objects of an
    interrupted build up to date compiles fewer.
    """
    import threading

    t0 = time.perf_counter()
    print(f"chipotle.sim.flow: {what} (compiler output in {log})", file=sys.stderr, flush=True)
    stop = threading.Event()

    def beat():
        while not stop.wait(every):
            try:
                n = compiled_cxx_files(log.read_text(errors="replace"))
                total = verilated_cxx_files(log.parent) if n else None
            except OSError:
                n, total = 0, None
            if n and total and total >= n:
                done = f", {n} of {total} C++ files compiled"
            else:
                done = f", {n} C++ file(s) compiled so far" if n else ""
            print(f"chipotle.sim.flow: {what}: {time.perf_counter() - t0:.0f} s{done}",
                  file=sys.stderr, flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    except KeyboardInterrupt:
        # Ctrl-C stops make too: an interrupted build, not a failed one, and its log's
        # last lines are make's "Interrupt" (the next run builds it again, from what
        # ccache and make kept)
        stop.set()
        print(f"chipotle.sim.flow: {what} interrupted after {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
        raise
    except BaseException:
        stop.set()
        try:
            tail = log.read_text(errors="replace").splitlines()[-40:]
        except OSError:
            tail = []
        print("\n".join([f"chipotle.sim.flow: {what} FAILED; last lines of {log}:", *tail]),
              file=sys.stderr, flush=True)
        raise
    finally:
        stop.set()
        thread.join()
    print(f"chipotle.sim.flow: {what} done in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr, flush=True)


def _run_tests(runner, sim: str, toplevel: str, test_module: str, test_dir, build_dir: Path,
               testcase, extra_env: Mapping[str, str] | None, waves: bool, seed: int | None,
               tag: str = "") -> CocotbRun:
    """Run ``test_module``'s cocotb tests on the build in ``build_dir``; return the results."""
    # Each run gets its own results file so parallel workers do not collide.
    what = repr((test_module, testcase, sorted((extra_env or {}).items())))
    tag = f"{tag}{os.getpid()}-{hashlib.sha256(what.encode()).hexdigest()[:8]}"
    results = build_dir / f"results-{tag}.xml"
    env = {"PYTHONPATH": os.pathsep.join([str(test_dir or "."), *sys.path])}
    # numpy's BLAS would start a thread per core whose spin-waits after each call take
    # cycles from the simulator (measured with `perf` in the 4 x 4 bench: 8% of the samples);
    # the testbench's matrix products are small.  A value in the environment wins.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = os.environ.get(var, "1")
    env.update(extra_env or {})
    # the simulator starts with Ctrl-C ignored (`_execute_shielded`); the build above is not
    # shielded: make and its compilers stop on Ctrl-C themselves
    runner._execute_cmds = functools.partial(_execute_shielded, runner)
    try:
        with _environ(WAVES="1" if waves else "0"):
            runner.test(
                hdl_toplevel=toplevel,
                test_module=test_module,
                test_dir=build_dir,
                build_dir=build_dir,
                testcase=testcase,
                extra_env=env,
                waves=bool(waves),
                seed=seed,
                results_xml=str(results),
                timescale=("1ns", "1ps") if sim == "verilator" else None,
            )
    except SystemExit:
        # Under pytest the runner exits on a failed cocotb test; report the failures from
        # the results file instead, with their messages.
        if not results.exists():
            raise
    except RuntimeError as e:
        m = re.fullmatch(r"Command failed with return code: (-?\d+)", str(e))
        if m is None:
            raise
        raise SimulatorExit(sim, int(m.group(1))) from None
    finally:
        del runner._execute_cmds
    return _parse_results(sim, results)


def _execute_shielded(runner, cmds, cwd, stdout=None) -> None:
    """Run the simulator commands of a cocotb run as cocotb's runner does
    (``Runner._execute_cmds`` of cocotb 2.1.0, which `_run_tests` replaces with this for the
    test phase), but with SIGINT ignored in the simulator: Ctrl-C then reaches only the host
    process, whose `KeyboardInterrupt` kills the simulator (SIGKILL) and ends with one line.

    The simulator used to take the terminal's Ctrl-C itself, and one that arrived while its
    embedded Python started printed the interpreter's errors (``Failed to import the site
    module``, session 40: 1 of 20 interrupts 0-0.4 s after ``running the ... chip``, with
    `chipotle.simstart.quiet_interrupt` already in place).  An ignored signal stays ignored
    across ``exec``, and the simulator's hook keeps it so; the host ignores SIGINT only for
    the ``fork`` and ``exec`` of `subprocess.Popen` (about a millisecond), and only in the
    main thread, where Python lets a handler be set (elsewhere the simulator takes Ctrl-C
    as before, and the hook ends it quietly).

    Raises
    ------
    RuntimeError
        ``Command failed with return code: N`` for a command that ends with a non-zero
        status N, as cocotb's runner does (`_run_tests` turns it into `SimulatorExit`).
    """
    import subprocess
    import threading

    for cmd in cmds:
        stderr = None if stdout is None else subprocess.STDOUT
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=runner.env, stdout=stdout,
                                    stderr=stderr)
        finally:
            if main:        # (None: a handler not set from Python; the default then)
                signal.signal(signal.SIGINT, signal.SIG_DFL if old is None else old)
        try:
            code = proc.wait()
        except BaseException:           # Ctrl-C (KeyboardInterrupt) or any other error
            proc.kill()
            proc.wait()
            raise
        if code != 0:
            raise RuntimeError(f"Command failed with return code: {code}")


def run_cocotb(
    *,
    sim: str,
    verilog: str,
    toplevel: str,
    test_module: str,
    test_dir: str | os.PathLike | None = None,
    testcase: str | Sequence[str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    waves: bool | None = None,
    seed: int | None = None,
    check: bool = True,
    cxx_opt: str = "-O0",
    public: bool | Sequence[tuple[str, str]] = True,
    threads: int = 1,
    hierarchical: bool | None = None,
    pgo_train: Mapping[str, str] | None = None,
) -> CocotbRun:
    """Build (cached) and run cocotb tests of a Verilog design.

    Parameters
    ----------
    sim : {"verilator", "icarus"}
        Simulator.
    verilog : str
        Verilog text of the design, e.g. from :func:`generate_verilog`.
    toplevel : str
        Name of the top-level module in ``verilog``.
    test_module : str
        Python module (importable from ``test_dir``) holding the ``@cocotb.test`` functions.
    test_dir : path, optional
        Folder put on the simulator's ``PYTHONPATH`` so ``test_module`` imports.
    testcase : str or list of str, optional
        Run only these cocotb tests.
    extra_env : mapping, optional
        Extra environment for the simulation (the cocotb tests read their parameters
        from it).
    waves : bool, optional
        Dump waveforms (FST under Icarus, VCD under Verilator).  Default: ``$WAVES``.
    seed : int, optional
        cocotb random seed.
    check : bool
        Raise ``AssertionError`` if any cocotb test failed, none ran, or one named in
        `testcase` did not pass (`CocotbRun.raise_on_failure`).
    cxx_opt : str
        Verilator only: C++ optimisation of the model (see
        :func:`chipotle.sim.toolchain.verilator_environment`); ``-O0`` builds fastest,
        ``toolchain.FAST_CXX_OPT`` (``-O3``) simulates fastest.
    public : bool or sequence of (str, str)
        Verilator only: make every signal of the design visible to cocotb (the runner's
        ``--public-flat-rw``, the default).  ``False`` exposes only the toplevel's ports
        (``--no-public-flat-rw`` and a configuration file naming them), which lets Verilator
        optimise the model:
        about 10 times faster for the 2 x 2 ``Chip`` (7,100 against 550 cycles per second
        with ``-O0``: a cocotb test awaiting one long ``Timer``, 2 loaded cores).
        ``(module, variable)`` pairs expose the ports and these variables only (e.g. the
        SRAM arrays of `chipotle.sim.chiprun.BACKDOOR_SIGNALS`; ``variable`` may hold
        ``*``): a flat build, but one Verilator still optimises (the ``small`` chip's
        driver test built in 68 s instead of 145 s and ran in 95 s instead of 238 s: ``SIM=
        verilator pytest tb/driver/test_driver_rtl.py`` from an empty ``$CHIPOTLE_BUILD_DIR``,
        idle 2 cores, session 34).
    threads : int
        Verilator only: threads of the model (``--threads``; default 1, a single-threaded
        model).
    hierarchical : bool, optional
        Verilator only: hierarchical verilation (``--hierarchical``).  Each module that
        `verilog` marks with a ``/* verilator hier_block */`` metacomment (`hier_blocks`:
        the tile of `chipotle.hw.chip.chip_verilog`) is verilated and compiled once into a
        library of its own that all its instances share, instead of being emitted once
        per instance: the 4 x 4 chip builds in a fraction of the time and simulates faster
        (figures in ``docs/performance.md``).  Default: ``$HIERARCHICAL`` (``0`` for the
        flat build), else on.  It needs a ports-only build without waveforms, because
        Verilator can neither trace nor reach through VPI the signals inside a hierarchy
        block: with ``public`` or ``waves`` the build is flat, and says so on stderr when
        it builds.  A design without marked modules is always built flat.
    pgo_train : mapping, optional
        Verilator only: build the model with GCC profile-guided optimisation, trained by a
        run of ``test_module`` with this extra environment (instead of ``extra_env``): the
        model is compiled instrumented (``-fprofile-generate``), the training run writes
        its ``.gcda`` profile into the build folder, and the model is compiled again with
        ``-fprofile-use``.  The build costs two compiles and the training run; the
        simulation is about 20 % faster (``docs/performance.md``).  Behaviour does not
        change: the profile only steers GCC's code layout, inlining and branch
        decisions.  Cached apart from the plain build.  Ignored under Icarus.

    Returns
    -------
    CocotbRun

    Raises
    ------
    SimulatorNotFound
        If the simulator is not installed (with how to install it).
    ValueError
        If ``threads`` is below 1, or (Verilator) a ``hier_block`` metacomment of `verilog`
        is outside a module, or a module ``public`` names is not in `verilog`.
    AssertionError
        If the ``pgo_train`` run failed (the build is not stamped, so the next run
        rebuilds).
    """
    from cocotb_tools.runner import get_runner

    if threads < 1:
        raise ValueError(f"`threads` must be at least 1, not {threads}")
    toolchain.check_simulator(sim)
    if waves is None:
        waves = env_flag("WAVES", False)
    if hierarchical is None:
        hierarchical = env_flag("HIERARCHICAL", True)
    flat_because, blocks = None, []
    public_vars = () if isinstance(public, bool) else tuple(tuple(p) for p in public)
    everything = public is True
    if sim == "verilator":
        blocks = hier_blocks(verilog) if hierarchical else []
        if blocks and (everything or public_vars or waves):
            if waves:
                need = "waveforms"
            elif everything:
                need = "public signals (public=True)"
            else:
                need = "the public signals of " + ", ".join(f"{m}.{v}" for m, v in public_vars)
            flat_because = (f"{need} need a flat build: Verilator cannot trace or expose the "
                            f"signals inside the hierarchy block(s) {', '.join(blocks)}")
            blocks = []
        session = toolchain.verilator_session(cxx_opt=cxx_opt,
                                              objcache_dir=build_root() / "ccache")
        build_args = toolchain.verilator_build_args()
        if not everything:
            build_args = build_args + ["--no-public-flat-rw"]
            port_config = _public_ports_config(verilog, toplevel, public_vars)
        if waves:
            build_args = build_args + ["--trace-structs"]   # the runner adds --trace (VCD)
        if threads != 1:
            build_args = build_args + ["--threads", str(threads)]
        if blocks:
            build_args = build_args + ["--hierarchical"]
    else:
        session = contextlib.nullcontext()
        build_args = toolchain.icarus_build_args()
        cxx_opt = ""
        pgo_train = None
    if sim != "verilator" or everything:
        port_config = ""

    key = "\0".join([sim, toplevel, verilog, " ".join(build_args), str(bool(waves)), cxx_opt,
                     port_config] + (["pgo"] if pgo_train is not None else []))
    key = hashlib.sha256(key.encode()).hexdigest()[:16]
    build_dir = build_root() / sim / f"{toplevel}-{key}"
    src = build_dir / f"{toplevel}.v"
    stamp = build_dir / "built.ok"
    if port_config:
        build_args = build_args + [str(build_dir / "ports.vlt")]

    runner = get_runner(sim)
    # cocotb's runner lets $WAVES override its `waves` argument; pin $WAVES to what this
    # run wants.  Icarus builds without the runner's waves, whose dump module is
    # SystemVerilog (which -g2005 rejects); _with_icarus_dump adds a Verilog-2005 one.
    build_waves = "1" if waves and sim == "verilator" else "0"
    with _locked(build_root() / sim / f"{toplevel}-{key}.lock"), session, \
            _environ(WAVES=build_waves):
        cached = stamp.exists()
        if not cached:
            print(f"chipotle.sim.flow: {sim} build of {toplevel}: not in the cache (a new "
                  f"design, configuration or build option): building it, minutes for a "
                  f"large chip (README, 'first make sim')", file=sys.stderr, flush=True)
            if flat_because:
                cost = ("a flat 4 x 4 chip with every signal public takes about 30 minutes "
                        "on 2 cores: README" if everything else
                        "longer than the hierarchical build, and a build of its own")
                print(f"chipotle.sim.flow: flat Verilator build of {toplevel}: {flat_because} "
                      f"({cost})", file=sys.stderr, flush=True)
            build_dir.mkdir(parents=True, exist_ok=True)
            if sim == "icarus" and waves:
                # cocotb's own dump module is SystemVerilog, which -g2005 rejects.
                verilog = _with_icarus_dump(verilog, toplevel, build_dir / f"{toplevel}.fst")
            src.write_text(verilog)
            if port_config:
                (build_dir / "ports.vlt").write_text(port_config)
        else:
            print(f"chipotle.sim.flow: {sim} build of {toplevel}: cached in {build_dir}",
                  file=sys.stderr, flush=True)
            # The runner's build() also records the configuration that test() reads; on
            # a cache hit keep that bookkeeping but skip the compile commands.
            runner._build_command = lambda: []
        t_build = time.perf_counter()
        log = build_dir / "build.log"

        def build(what: str = "", make_vars: Mapping[str, str] | None = None,
                  log: Path = log) -> None:
            with contextlib.ExitStack() as stack:
                if not cached:
                    stack.enter_context(_build_progress(log, f"{sim} {what}build of {toplevel}"))
                stack.enter_context(_make_vars(**(make_vars or {})))
                runner.build(
                    sources=[src],
                    hdl_toplevel=toplevel,
                    build_args=build_args,
                    build_dir=build_dir,
                    waves=bool(waves) and sim == "verilator",
                    timescale=("1ns", "1ps"),
                    always=True,
                    log_file=None if cached else log,
                )

        if cached or pgo_train is None:
            build()
        else:
            for stale in build_dir.rglob("*.gcda"):    # a profile of an interrupted build
                stale.unlink()
            build("instrumented (profile-guided, 1 of 2) ", PGO_GENERATE,
                  build_dir / "build-instrumented.log")
            t_train = time.perf_counter()
            print(f"chipotle.sim.flow: profile-guided build of {toplevel}: training run",
                  file=sys.stderr, flush=True)
            _run_tests(runner, sim, toplevel, test_module, test_dir, build_dir, testcase,
                       pgo_train, waves, seed, tag="pgo-train").raise_on_failure()
            print(f"chipotle.sim.flow: training run done in "
                  f"{time.perf_counter() - t_train:.0f} s", file=sys.stderr, flush=True)
            for obj in [*build_dir.rglob("*.o"), *build_dir.rglob("*.a")]:
                obj.unlink()                              # make would keep them: same sources
            build("profile-guided (2 of 2) ", PGO_USE)
        if not cached and sim == "verilator" and not (build_dir / toplevel).exists():
            # e.g. a MAKEFLAGS value that make read as its own options (`-n`): never stamp it
            raise RuntimeError(f"the Verilator build of {toplevel} made no executable "
                               f"{build_dir / toplevel}: see {log}")
        if not cached:
            mode = f"hierarchical {' '.join(blocks)}" if blocks else "flat"
            pgo = "" if pgo_train is None else "pgo yes\n"
            stamp.write_text(f"ok\nbuild_seconds {time.perf_counter() - t_build:.1f}\n"
                             f"build {mode}\n{pgo}")

    run = _run_tests(runner, sim, toplevel, test_module, test_dir, build_dir, testcase,
                     extra_env, waves, seed)
    if check:
        run.raise_on_failure([testcase] if isinstance(testcase, str) else testcase)
    return run
