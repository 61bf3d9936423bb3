"""``chipotle generate`` on the chip backends (isasim here; the RTL ones in the benchmarks)."""

from __future__ import annotations

import re

import pytest

from chipotle import backends
from tbcommon.cli import run, write_tiny_model


@pytest.fixture
def tiny(tmp_path):
    """A synthetic checkpoint (seq_len 8) and a matching tokenizer, as CLI arguments."""
    return write_tiny_model(tmp_path)


def test_chip_backends_are_listed():
    for name in backends.CHIP_BACKENDS:
        assert name in backends.names()


@pytest.mark.parametrize("sampling", [("--temperature", "0"),
                                      ("--temperature", "0.9", "--seed", "5")])
def test_isasim_equals_golden(capsys, tiny, sampling):
    common = [*tiny, "--prompt", "ab a", "--steps", "3", *sampling]
    code, gold, _ = run(capsys, "--backend", "golden", *common)
    assert code == 0
    code, out, err = run(capsys, "--backend", "isasim", "--config", "small", *common)
    assert code == 0, err
    assert out == gold and len(gold.strip()) > 0
    assert "time to first token" in err and "decode roofline efficiency" in err
    assert "estimate, not a measurement" in err
    # TTFT sums the prefill steps' own cycles: said when there are several
    npre = int(re.search(r"time to first token: [\d,]+ cycles \((\d+) prefill step", err)[1])
    assert ("the steps' own cycles summed, not the host's traffic between them" in err) \
        == (npre > 1), err


def test_ttft_of_several_prefill_steps_says_what_it_sums(capsys, tiny):
    """A prompt of more than one prefill step: the time to first token says it is the steps'
    own cycles summed (docs/performance.md, "Definitions")."""
    code, _, err = run(capsys, "--backend", "isasim", "--config", "small", "--prompt",
                       "ab a ab", "--steps", "1", "--temperature", "0", *tiny)
    assert code == 0, err
    m = re.search(r"time to first token: [\d,]+ cycles \((\d+) prefill steps, (\d+) prompt "
                  r"tokens; the steps' own cycles summed, not the host's traffic between "
                  r"them\)", err)
    assert m and int(m[1]) > 1, err


def test_run_stopped_by_the_context_names_it(capsys, tiny):
    """A chip run that fills the compiled context says so, with the context's length."""
    code, _, err = run(capsys, "--backend", "isasim", "--config", "small", "--context", "6",
                       "--prompt", "ab", "--steps", "0", "--temperature", "0", *tiny)
    assert code == 0, err
    assert "stopped by context length (6 positions)" in err, err


def test_bad_config_is_a_usage_error(capsys, tiny):
    code, _, err = run(capsys, "--backend", "isasim", "--config", "mesh=2x2,bogus=3", *tiny)
    assert code == 2 and "unknown configuration key 'bogus'" in err


@pytest.mark.parametrize("text, expect", [
    ("default,vec_slot=3", "unknown configuration key 'vec_slot' (did you mean 'vec_slots'?); "
                           "known: mesh, sram_kib, mesh_width"),
    ("ulx3s,SRAM_LATENCY=2", "unknown configuration key 'SRAM_LATENCY' (did you mean "
                             "'sram_latency'?)"),
    ("defualt", "unknown configuration 'defualt' (did you mean 'default'?); known: default, "),
    ("mesh=2x2,bogus=3", "unknown configuration key 'bogus'; known: "),
])
def test_misspelt_config_names_the_one_meant(capsys, tiny, text, expect):
    """An unknown configuration or key names the closest known one, when one is close."""
    code, _, err = run(capsys, "--backend", "isasim", "--config", text, *tiny)
    assert code == 2 and f"--config: {expect}" in err and "compiling" not in err


@pytest.mark.parametrize("text, expect", [
    ("mesh=9", "bad value '9' for 'mesh' in 'mesh=9': expected WxH, two integers (e.g. mesh=4x4)"),
    ("sram_kib=1.5", "bad value '1.5' for 'sram_kib' in 'sram_kib=1.5': expected a positive "
                     "integer (KiB of SRAM per tile)"),
    ("small,sram_kib=-1", "bad value '-1' for 'sram_kib' in 'small,sram_kib=-1': expected a "
                          "positive integer (KiB of SRAM per tile)"),
    ("overlap=yes", "bad value 'yes' for 'overlap' in 'overlap=yes': expected 0, 1, true or "
                    "false"),
    ("default,mesh", "'mesh' needs a value, e.g. mesh=4x4"),
    ("lanes", "'lanes' needs a value, e.g. lanes=<integer>"),
    ("V", "'V' needs a value, e.g. V=<integer>"),
    ("V=x", "bad value 'x' for 'lanes' in 'V=x': expected an integer"),
])
def test_bad_config_value_says_what_is_expected(capsys, tiny, text, expect):
    code, _, err = run(capsys, "--backend", "isasim", "--config", text, *tiny)
    assert code == 2 and f"--config: {expect}" in err and "compiling" not in err


def test_config_takes_the_letters_it_prints():
    """``--config`` takes the W, M and V of the configuration banner (``str(config)``) as
    well as the field names, so a printed configuration can be typed back."""
    from chipotle.config import CONFIGS, ChipConfig
    c = ChipConfig.from_string("small,V=8,M=2,W=16,mesh=3x1")
    assert (c.lanes, c.max_m, c.word_bytes) == (8, 2, 16)
    assert c == CONFIGS["small"].replace(lanes=8, max_m=2, word_bytes=16, mesh_width=3,
                                         mesh_height=1)
    assert str(c).endswith("W=16, M=2, V=8, vec_slots=4")
    assert ChipConfig.from_string(f"mesh=3x1,sram_kib=32,{str(c).split('SRAM/tile, ')[1]}"
                                  .replace(" ", ""), base=CONFIGS["small"]) == c


def test_chip_model_forward_equals_golden(tiny):
    import numpy as np

    from chipotle.config import CONFIGS
    from chipotle.golden import GoldenModel
    from chipotle.model import load_checkpoint

    ckpt = load_checkpoint(tiny[1])
    chip = backends.ChipModel(ckpt, CONFIGS["small"])
    gold = GoldenModel(chip.compiled.qm)
    for pos, tok in enumerate([1, 260, 261, 5]):
        assert np.array_equal(chip.forward(tok, pos), gold.forward(tok, pos)), pos
    assert chip.config.seq_len == chip.compiled.context


@pytest.mark.rtl
def test_ctrl_c_during_an_rtl_run_is_one_line(tiny, tmp_path):
    """Ctrl-C (SIGINT to the process group) while the simulator runs: exit status 130 and
    ``chipotle: interrupted``, without the simulator's KeyboardInterrupt traceback
    (`chipotle.sim.cocotb_chip` ends the simulation quietly).  The handler is the cocotb
    test's, the same under both simulators, so one run: under Icarus when ``$SIM`` has it
    (its build of the chip takes seconds, Verilator's minutes), else under Verilator."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from chipotle.sim import simulators_from_env

    sims = simulators_from_env()
    sim = "icarus" if "icarus" in sims else sims[0]

    err_path = tmp_path / "err.txt"
    with open(err_path, "w") as err:
        p = subprocess.Popen(
            [sys.executable, "-m", "chipotle.cli", "generate", "--backend", sim, "--config",
             "small", *tiny, "--steps", "0", "--temperature", "0"],
            cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL, stderr=err,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 1800           # the first run builds the chip
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
            if "[load] " in err_path.read_text():    # the simulation is running
                os.killpg(p.pid, signal.SIGINT)
                break
        else:
            p.kill()
        p.wait(timeout=300)
    text = err_path.read_text()
    assert p.returncode == 130, text
    assert text.rstrip().endswith("chipotle: interrupted") and "Traceback" not in text, text


def test_the_simulator_quiets_ctrl_c_before_cocotb_is_imported(monkeypatch):
    """`run_rtl` runs `chipotle.simstart.quiet_interrupt` as the simulator's first entry
    point, then exactly cocotb's own (the installed cocotb's default ``$PYGPI_USERS``), so
    that Ctrl-C while the simulator's Python imports cocotb ends it quietly: a traceback of
    up to 170 lines came out under ``chipotle: interrupted`` when Ctrl-C came 1-1.5 s after
    ``running the ... chip`` (session 39, the small chip under Icarus: before the change 2 of
    6 delays from 0.2 to 1.5 s, after it none)."""

    from pygpi import entry

    from chipotle.sim import chiprun

    class Seen(Exception):
        pass

    def get_list(name, default):
        raise Seen(name, tuple(default))
    monkeypatch.setattr(entry._env, "get_list", get_list)
    with pytest.raises(Seen) as e:
        entry.load_entry()
    assert e.value.args == ("PYGPI_USERS", chiprun.COCOTB_ENTRY_POINTS)
    assert chiprun.PYGPI_USERS == ("chipotle.simstart:quiet_interrupt",
                                   *chiprun.COCOTB_ENTRY_POINTS)
    # the hook: SIGINT then ends the process at once, status 130, nothing printed (the
    # default disposition first, as from a terminal: CI may start the tests with SIGINT
    # ignored)
    r = _hook_then_sigint("SIG_DFL", 30, "not interrupted")
    assert (r.returncode, r.stdout, r.stderr) == (130, "", ""), r


def _hook_then_sigint(disposition: str, sleep: float, after: str):
    """Run `quiet_interrupt` in a Python whose SIGINT is first set to `disposition` (a
    `signal` name), send that process SIGINT, sleep `sleep` s and print `after`; return the
    `subprocess.CompletedProcess`."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c",
                           "import os, signal, time\n"
                           f"signal.signal(signal.SIGINT, signal.{disposition})\n"
                           "from chipotle.simstart import quiet_interrupt\n"
                           "quiet_interrupt()\n"
                           "os.kill(os.getpid(), signal.SIGINT)\n"
                           f"time.sleep({sleep})\n"
                           f"print({after!r})\n"],
                          capture_output=True, text=True, timeout=120)


def test_the_simulators_ctrl_c_hook_is_installed_before_any_heavy_import():
    """The hook's module imports nothing but the standard library's `os` and `signal` (and
    the ``chipotle`` package's own ``__init__``, which imports nothing): the window between
    the simulator's interpreter start-up and the hook is then about a millisecond, where
    importing it from ``chipotle.sim.chiprun`` took 38 ms (``chipotle.sim.flow``, `xml`,
    ...), and a Ctrl-C there printed a traceback (session 40's fresh user, 3 of 20
    interrupts about 2 s into ``make sim``)."""
    import subprocess
    import sys

    from chipotle.sim import chiprun

    module = chiprun.PYGPI_USERS[0].split(":")[0]       # the simulator's first entry point
    r = subprocess.run([sys.executable, "-c",
                        "import sys\n"
                        "before = set(sys.modules)\n"
                        f"import {module}\n"
                        "print(' '.join(sorted(set(sys.modules) - before)))\n"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r
    loaded = set(r.stdout.split())
    assert loaded <= {"chipotle", module, "signal", "enum", "_signal", "os", "__future__"}, \
        loaded


def test_the_simulator_keeps_an_ignored_ctrl_c_ignored():
    """A process that inherited SIGINT as ignored (a job in the background of a
    non-interactive shell, whose host command ignores Ctrl-C too) keeps it ignored: before,
    the simulator ended with status 130 while the host command, still running, reported a
    failed simulation with a ``RuntimeError`` traceback (session 40's fresh user,
    ``kill -INT -- -<pgid>`` of ``setsid bash -c 'make sim ... &'``)."""
    r = _hook_then_sigint("SIG_IGN", 0.2, "still running")
    assert (r.returncode, r.stdout, r.stderr) == (0, "still running\n", ""), r


def test_ctrl_c_while_the_command_imports_is_one_line():
    """The ``chipotle`` script's entry point is `chipotle.entry.main`, which catches Ctrl-C
    while `chipotle.cli` and its imports load (about 0.3 s): ``chipotle: interrupted``, exit
    status 130, not a ``KeyboardInterrupt`` traceback (session 39's fresh user, interrupting
    ``make sim`` within 0.3 s).  The interrupt is raised by the import of `chipotle.cli`
    itself here, so that the test does not depend on timing."""
    import subprocess
    import sys
    from importlib.metadata import entry_points

    [script] = [e for e in entry_points(group="console_scripts") if e.name == "chipotle"]
    assert script.value == "chipotle.entry:main", script
    code = ("import sys\n"
            "class Interrupt:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'chipotle.cli':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "from chipotle.entry import main\n"
            "sys.exit(main())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (130, "", "\nchipotle: interrupted\n"), r


def test_the_simulator_starts_with_ctrl_c_ignored(tmp_path):
    """`chipotle.sim.flow._execute_shielded` (the test phase's commands of every cocotb run)
    starts the simulator with SIGINT ignored and restores the host's handler; a command
    that fails raises the runner's own ``RuntimeError``; Ctrl-C in the host (its
    `KeyboardInterrupt`) kills the simulator.  Before, the simulator took the terminal's
    Ctrl-C itself, and one that came while its embedded Python started printed
    ``Failed to import the site module`` (session 40: 1 of 20 interrupts 0-0.4 s after
    ``running the ... chip``; none of 34 after the change)."""
    import inspect
    import os
    import signal
    import subprocess
    import sys

    from cocotb_tools.runner import Runner as CocotbRunner

    from chipotle.sim import flow

    # the method it stands in for: cocotb 2.1.0's, called by the runner for every command
    assert list(inspect.signature(CocotbRunner._execute_cmds).parameters) == \
        ["self", "cmds", "cwd", "stdout"]
    assert "self._execute_cmds(" in inspect.getsource(CocotbRunner._execute)

    class Runner:
        env = dict(os.environ)

    out = tmp_path / "out.txt"
    # Python's own handler, as from a terminal (CI may start the tests with SIGINT ignored,
    # which the simulator would then inherit whatever the shielding did)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with open(out, "w") as f:
            flow._execute_shielded(Runner(), [[sys.executable, "-c",
                                               "import signal; print(signal.getsignal("
                                               "signal.SIGINT) is signal.SIG_IGN)"]],
                                   tmp_path, f)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, handler)
    assert out.read_text().strip() == "True"
    with pytest.raises(RuntimeError, match=r"^Command failed with return code: 3$"):
        flow._execute_shielded(Runner(), [[sys.executable, "-c", "raise SystemExit(3)"]],
                               tmp_path)
    # Ctrl-C in the host while the simulator runs (in a process of its own, so that the
    # signal does not reach pytest): the simulator is killed, the interrupt propagates
    script = (
        "import os, signal, sys, threading, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from chipotle.sim import flow\n"
        "class R:\n"
        "    env = dict(os.environ)\n"
        "pidfile = sys.argv[1]\n"
        "threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        "try:\n"
        "    flow._execute_shielded(R(), [[sys.executable, '-c', 'import os, sys, time; "
        "open(sys.argv[1], \"w\").write(str(os.getpid())); time.sleep(60)', pidfile]], '.')\n"
        "except KeyboardInterrupt:\n"
        "    pid = int(open(pidfile).read())\n"
        "    try:\n"
        "        os.kill(pid, 0)\n"
        "        print('simulator still running')\n"
        "    except ProcessLookupError:\n"
        "        print('simulator ended')\n")
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path / "pid")],
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout.strip()) == (0, "simulator ended"), r
