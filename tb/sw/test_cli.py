"""chipotle.cli: ``chipotle generate`` on the real model and on small synthetic files."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from chipotle import backends, cli
from chipotle.paths import FETCH_HINT
from tbcommon.cli import run, write_tiny_model

#: The checkout's top folder (where `make` runs).
ROOT = Path(__file__).resolve().parents[2]


def _board_mhz():
    """The ULX3S build's clock, MHz (``Board.clk_hz``)."""
    from chipotle.hw.fpga.boards import BOARDS
    return BOARDS["ulx3s-85f"].clk_hz / 1e6


@pytest.fixture(autouse=True)
def _no_outer_make(monkeypatch):
    """These tests run make themselves: an outer make's command line (``make test JOBS=1``:
    ``$MAKEFLAGS``) must not reach it as the inner make's own command line."""
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def tiny(tmp_path):
    """A synthetic checkpoint (seq_len 8) and a matching tokenizer, as CLI arguments."""
    return write_tiny_model(tmp_path)


@pytest.mark.model
def test_reference_greedy(capsys, model_paths):
    code, out, err = run(capsys, "--backend", "reference", "--temperature", "0", "--steps", "20",
                         "--model", str(model_paths[0]), "--tokenizer", str(model_paths[1]))
    assert code == 0
    assert out.startswith("Once upon a time, there was a little girl named Lily.")
    assert out.endswith("\n")
    assert err.startswith("[reference] 20 tokens generated, 1 prompt token (BOS included), "
                          "stopped by steps (20); 20 positions in ")
    assert "positions/s" in err


@pytest.mark.model
def test_default_model_dir_and_entry_point(model_paths, monkeypatch):
    # Through a real process and the default paths ($CHIPOTLE_MODEL_DIR).
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(model_paths[0].parent))
    r = subprocess.run([sys.executable, "-m", "chipotle.cli", "generate", "--prompt",
                        "Once upon a time", "--steps", "8", "--seed", "42"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Once upon a time")
    assert "8 tokens generated, 5 prompt tokens" in r.stderr and "seed 42" in r.stderr


def test_synthetic_seeded_run_is_reproducible(capsys, tiny):
    first = run(capsys, *tiny, "--prompt", "ab", "--steps", "4", "--seed", "7")
    second = run(capsys, *tiny, "--prompt", "ab", "--steps", "4", "--seed", "7")
    assert first[0] == 0 and first[1] == second[1]
    assert first[1].startswith("ab")
    assert "seed 7" in first[2]


def test_greedy_run_names_no_seed(capsys, tiny):
    # At temperature 0 no random number is drawn, so a seed in the summary would mislead.
    code, out, err = run(capsys, *tiny, "--prompt", "ab", "--steps", "3", "--temperature", "0",
                         "--seed", "7")
    assert code == 0
    assert "greedy (temperature 0" in err and "seed" not in err


def test_steps_zero_runs_to_context(capsys, tiny):
    code, out, err = run(capsys, *tiny, "--steps", "0", "--temperature", "0")
    assert code == 0
    # greedy on the tiny model's weights: no BOS/EOS before its 8 positions fill up
    assert "stopped by context length (8 positions)" in err, err


def test_missing_default_files(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(tmp_path))
    code, out, err = run(capsys)
    assert code == 2 and out == ""
    assert f"checkpoint not found: {tmp_path / 'stories260K.bin'}" in err
    assert f"$CHIPOTLE_MODEL_DIR={tmp_path}; choose another folder with $CHIPOTLE_MODEL_DIR " \
        "or another file with --model)" in err, err
    assert FETCH_HINT in err


def test_missing_default_files_under_make(capsys, tmp_path, monkeypatch):
    """Under ``make sim`` the refusal names MODEL_DIR= and the ``make models`` command that
    fetches the files there, in one short line."""
    d = tmp_path / "my models"
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(d))
    monkeypatch.setenv("CHIPOTLE_MAKE_CONFIG", "default")
    code, out, err = run(capsys)
    assert code == 2 and out == ""
    assert err == (f"chipotle generate: error: checkpoint not found: {d / 'stories260K.bin'} "
                   f"(MODEL_DIR={d}); `make models MODEL_DIR='{d}'` downloads stories260K.bin "
                   f"and tok512.bin there, or give MODEL_DIR=<a folder holding them>\n"), err
    f = tmp_path / "stories260K.bin"                # MODEL_DIR naming a file, not a folder
    f.write_bytes(b"x")
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(f))
    code, out, err = run(capsys)
    assert code == 2 and err == (f"chipotle generate: error: MODEL_DIR={f} is a file; give the "
                                 f"folder that holds the model files ({tmp_path})\n"), err
    monkeypatch.delenv("CHIPOTLE_MODEL_DIR")
    monkeypatch.setattr("chipotle.cli.default_model_dir", lambda: tmp_path / "none")
    code, out, err = run(capsys)
    assert code == 2 and f"(the default MODEL_DIR, {tmp_path / 'none'}); `make models` " \
        "downloads" in err


def test_damaged_default_files_under_make_in_makes_terms(capsys, tmp_path, monkeypatch):
    """Under ``make sim`` and ``make bench`` a default file that is not the published one is
    refused with the fixes in make's terms: ``make models`` and ``MODEL_DIR=``, not
    ``--model``, which make does not take (it said "give it with --model ... (make: --model is
    MODEL_DIR= (the directory))", and another MODEL_DIR= is refused the same way)."""
    from chipotle.sim import bench
    for name in ("stories260K.bin", "tok512.bin"):
        (tmp_path / name).write_bytes(b"not the published file")
    folder = "or give MODEL_DIR=<a folder holding the published stories260K.bin and tok512.bin>"
    monkeypatch.setenv("CHIPOTLE_MAKE_CONFIG", "default")
    for env, fetch in ((str(tmp_path), f"make models MODEL_DIR={tmp_path}"), (None, "make models")):
        if env is None:                          # make's default folder
            monkeypatch.delenv("CHIPOTLE_MODEL_DIR")
            monkeypatch.setattr("chipotle.cli.default_model_dir", lambda: tmp_path)
            monkeypatch.setattr("chipotle.paths.default_model_dir", lambda: tmp_path)
        else:
            monkeypatch.setenv("CHIPOTLE_MODEL_DIR", env)
        code, out, err = run(capsys, "--backend", "isasim", "--steps", "2")
        with pytest.raises(SystemExit):
            bench.main(["--backend", "isasim", "--prompts", "1"])
        err += capsys.readouterr().err
        assert code == 2 and out == "" and len(err.splitlines()) == 2, err
        for line in err.splitlines():
            assert line.endswith(f"a damaged or replaced file; `{fetch}` fetches it again, "
                                 f"{folder}") and "--model" not in line, line


def test_missing_default_tokenizer(capsys, tmp_path, monkeypatch, tiny):
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(tmp_path))
    code, _, err = run(capsys)
    assert code == 2 and f"checkpoint not found: {tmp_path / 'stories260K.bin'}" in err
    assert FETCH_HINT in err


def test_the_tokenizer_is_looked_for_beside_the_model_given(capsys, tmp_path, monkeypatch,
                                                            tiny):
    """With --model and no --tokenizer, ``chipotle generate`` takes tok512.bin beside the
    checkpoint, as ``python -m chipotle.compiler`` and the bench do (it looked in the
    default model folder: session 30's fresh user), and refuses in one line, naming where
    it looked, when there is none."""
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(other))       # no model files there
    code, _, err = run(capsys, "--model", tiny[1], "--backend", "golden", "--steps", "2")
    assert code == 2 and err.count("\n") == 1, err
    assert (f"tokenizer not found: {tmp_path / 'tok512.bin'} (looked for beside --model "
            f"{tiny[1]}); give it with --tokenizer") in err, err
    (tmp_path / "tok512.bin").write_bytes(Path(tiny[3]).read_bytes())
    code, out, err = run(capsys, "--model", tiny[1], "--backend", "golden", "--steps", "2",
                         "--temperature", "0")
    assert code == 0 and out, err
    # the same text as with the tokenizer given explicitly
    code2, out2, err2 = run(capsys, *tiny, "--backend", "golden", "--steps", "2",
                            "--temperature", "0")
    assert (code2, out2) == (0, out), err2


def test_missing_given_file(capsys, tmp_path):
    code, _, err = run(capsys, "--model", str(tmp_path / "nope.bin"))
    assert code == 2
    assert f"checkpoint not found: {tmp_path / 'nope.bin'} (given with --model)" in err


def test_malformed_checkpoint(capsys, tmp_path, tiny):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(open(tiny[1], "rb").read()[:-3])
    code, _, err = run(capsys, "--model", str(bad), "--tokenizer", tiny[3])
    assert code == 2 and "bad.bin: file is truncated" in err


def test_prompt_longer_than_context(capsys, tiny):
    code, out, err = run(capsys, *tiny, "--prompt", "b" * 10)
    assert code == 2 and out == ""
    assert "the prompt is 12 tokens (BOS included), longer than the context length of 8" \
        in err


def test_prompt_longer_than_context_is_refused_before_the_compile(capsys, tiny):
    code, out, err = run(capsys, *tiny, "--backend", "isasim", "--prompt", "b" * 10)
    assert code == 2 and out == "" and "compiling" not in err
    assert "the prompt is 12 tokens (BOS included), longer than the context length of 8" in err
    assert "(the model's seq_len): shorten the prompt" in err
    code, out, err = run(capsys, *tiny, "--backend", "isasim", "--context", "4", "--prompt", "bbb")
    assert code == 2 and "compiling" not in err
    assert "the prompt is 5 tokens (BOS included), longer than the context length of 4" in err
    # the limit is the flag's, not the model's: the message says which value would do
    assert ("(--context 4): give --context 5 or more (`make sim`: CONTEXT=; the model's "
            "seq_len, 8, is the most)") in err


def test_prompt_longer_than_the_model_with_a_context(capsys, tiny):
    """With --context, a prompt longer than the model's seq_len is refused as without it
    (an UnboundLocalError traceback before)."""
    code, out, err = run(capsys, *tiny, "--backend", "isasim", "--context", "4", "--prompt",
                         "b" * 10)
    assert code == 2 and out == "" and "compiling" not in err
    assert ("the prompt is 12 tokens (BOS included), longer than the context length of 8 "
            "positions (the model's seq_len): shorten the prompt") in err, err


def test_bad_flow_switch_is_refused_before_the_compile(capsys, tiny, monkeypatch):
    monkeypatch.delenv("MAKELEVEL", raising=False)
    monkeypatch.setenv("PGO", "maybe")
    code, out, err = run(capsys, *tiny, "--backend", "verilator")
    assert code == 2 and "compiling" not in err
    assert "$PGO must be 1/true/yes/on or 0/false/no/off, not 'maybe'" in err
    # run by make (make sim PGO=maybe): in make's notation
    monkeypatch.setenv("MAKELEVEL", "1")
    code, out, err = run(capsys, *tiny, "--backend", "verilator")
    assert code == 2 and "PGO= must be 1/true/yes/on or 0/false/no/off, not 'maybe'" in err


def test_env_flag_values(monkeypatch):
    from chipotle.sim.flow import env_flag
    for text, want in (("1", True), ("ON", True), ("yes", True), ("off", False),
                       ("False", False), ("0", False)):
        monkeypatch.setenv("CHIPOTLE_TEST_FLAG", text)
        assert env_flag("CHIPOTLE_TEST_FLAG", not want) is want
    monkeypatch.setenv("CHIPOTLE_TEST_FLAG", "")
    assert env_flag("CHIPOTLE_TEST_FLAG", True) is True
    monkeypatch.setenv("CHIPOTLE_TEST_FLAG", "2")
    with pytest.raises(ValueError, match=r"\$CHIPOTLE_TEST_FLAG must be"):
        env_flag("CHIPOTLE_TEST_FLAG", False)


def test_bad_options(capsys, tiny):
    code, _, err = run(capsys, *tiny, "--temperature", "-1")
    assert code == 2 and "--temperature must be a finite number >= 0, not -1.0" in err
    code, _, err = run(capsys, *tiny, "--steps", "-2")
    assert code == 2 and "--steps must be a non-negative integer, not -2" in err
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli.main(["generate", "--backend", "abacus"])
    assert e.value.code == 2
    # one line, as the other refusals: no usage block before it
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("chipotle generate: error: argument "
                                                    "--backend: invalid choice: 'abacus'"), err
    assert err.rstrip().endswith("(chipotle generate --help lists the options)")
    for bad in ("0", "-5", "nan", "inf", "fast", "1e308", "100001"):
        with pytest.raises(SystemExit) as e:
            cli.main(["generate", *tiny, "--clock-mhz", bad])
        assert e.value.code == 2
        assert "must be a positive clock frequency in MHz" in capsys.readouterr().err
    for option in ("--sim-threads", "--context"):
        for bad in ("0", "-1", "1.5", "two"):
            with pytest.raises(SystemExit) as e:
                cli.main(["generate", *tiny, option, bad])
            assert e.value.code == 2
            assert f"{option}: must be a whole number >= 1, not {bad!r}" in \
                capsys.readouterr().err


def test_unrecognized_arguments_point_to_the_subcommand_help(capsys):
    """An unknown option of ``chipotle generate`` is refused by its parser, pointing to its
    own --help (it pointed to ``chipotle --help``, which lists no options of generate)."""
    with pytest.raises(SystemExit) as e:
        cli.main(["generate", "--bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err == ("chipotle generate: error: unrecognized arguments: --bogus (chipotle "
                   "generate --help lists the options)\n"), err


@pytest.mark.parametrize("given, meant", [("--promt", "--prompt"), ("--temprature=0.5",
                                                                    "--temperature"),
                                          ("--backdor-load", "--backdoor-load")])
def test_misspelt_option_names_the_one_meant(capsys, given, meant):
    with pytest.raises(SystemExit) as e:
        cli.main(["generate", given, "x"] if "=" not in given else ["generate", given])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {given}" in err and f"(did you mean {meant}?)" in err, err


def test_two_misspelt_options_each_name_the_one_meant(capsys):
    """Each misspelt option is followed by the one meant, in its place (as make's refusal of
    misspelt variables does), not the hints of all of them after the list."""
    with pytest.raises(SystemExit) as e:
        cli.main(["generate", "--promt", "x", "--stpes", "3", "--bogus"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == (
        "chipotle generate: error: unrecognized arguments: --promt (did you mean --prompt?) x "
        "--stpes (did you mean --steps?) 3 --bogus (chipotle generate --help lists the "
        "options)\n"), err


def test_uart_names_every_missing_option_at_once(capsys, tiny):
    """``--backend uart`` without ``--port`` and ``--clock-mhz`` names both in one refusal."""
    code, out, err = run(capsys, *tiny, "--backend", "uart")
    assert code == 2 and out == "" and err == (
        "chipotle generate: error: --backend uart needs --port (e.g. /dev/ttyUSB0) and "
        f"--clock-mhz, the bitstream's clock (the ULX3S build of make bitstream: "
        f"{_board_mhz():g}): the board's step figures are the wall time times it\n"), err


def test_summary_counts_and_wall_time_words(capsys, tiny):
    """The summary's counts take the singular (``1 position``, not ``1 positions``), and the
    isasim backend's wall time says what it leaves out: the weight load, not a build it does
    not have."""
    code, _out, err = run(capsys, *tiny, "--backend", "reference", "--prompt", "",
                          "--steps", "1")
    assert code == 0 and "; 1 position in " in err, err
    code, _out, err = run(capsys, *tiny, "--backend", "isasim", "--config", "small",
                          "--prompt", "", "--steps", "1")
    assert code == 0 and "s of simulation wall time (weight load not included); " in err, err


def test_backdoor_load_help_names_the_flat_build(capsys, monkeypatch):
    """``--backdoor-load``'s help says what it costs under Verilator: the flat build."""
    monkeypatch.setenv("COLUMNS", "1000")        # the help on one line
    with pytest.raises(SystemExit) as e:
        cli.main(["generate", "--help"])
    assert e.value.code == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "--backdoor-load  " in ln)
    assert "switches to the flat build" in line and "a build of its own" in line, line


def test_unavailable_backend(capsys, tiny, monkeypatch):
    def missing(checkpoint):
        return backends._import_attr("chipotle.no_such_module", "Model", "the test backend")
    monkeypatch.setitem(backends._REGISTRY, "golden",
                        backends.Backend("golden", "stand-in", missing))
    code, out, err = run(capsys, *tiny, "--backend", "golden")
    assert code == 2 and out == ""
    assert "the test backend needs `chipotle.no_such_module`, which is not part of this " \
           "installation yet" in err


def test_registry():
    assert backends.names()[:2] == ["reference", "golden"]
    with pytest.raises(KeyError, match="unknown backend 'abacus' \\(known: reference, golden"):
        backends.get("abacus")


@pytest.mark.model
def test_make_sim_passes_prompt_and_config_verbatim(model_paths, monkeypatch):
    """``make sim`` hands PROMPT and CONFIG to the CLI through the environment: a newline,
    quotes, ``$`` and backquotes reach the model as typed, and a CONFIG holding shell syntax
    is refused as a configuration name instead of running."""
    models = f"MODEL_DIR={model_paths[0].parent}"
    prompt = 'Line one\nLine "two" $HOME `echo x` \\n'
    r = subprocess.run(["make", "-s", "sim", "BACKEND=reference", "STEPS=1", "TEMPERATURE=0",
                        f"PROMPT={prompt}", models], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith(prompt), (r.stdout, r.stderr)
    r = subprocess.run(["make", "-s", "sim", "BACKEND=isasim", "STEPS=1", models,
                        'CONFIG=default"; echo INJECTED; "'], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "INJECTED\n" not in r.stdout + r.stderr
    assert "unknown configuration 'default\"; echo INJECTED; \"'" in r.stderr, r.stderr
    # every other variable too: no shell syntax runs, no extra option slips in, and make
    # does not expand `$(...)` in a value (it would, exporting a command-line variable)
    stamp = Path(__file__).parent / "no-such-stamp"
    for var in (["STEPS=1;echo INJECTED"], ["STEPS=1 --model /etc/passwd"],
                ["TEMPERATURE=0 `echo INJECTED`"], ["PLACEMENT=tensor;echo INJECTED"],
                [f"PROMPT=$(shell touch {stamp})", "CONTEXT=3"]):
        r = subprocess.run(["make", "-s", "sim", "BACKEND=isasim", models, *var], cwd=ROOT,
                           capture_output=True, text=True)
        assert r.returncode != 0 and "INJECTED\n" not in r.stdout + r.stderr, (var, r.stderr)
        assert not stamp.exists(), var
    assert "invalid int value: '1 --model /etc/passwd'" in subprocess.run(
        ["make", "-s", "sim", "BACKEND=isasim", models, "STEPS=1 --model /etc/passwd"],
        cwd=ROOT, capture_output=True, text=True).stderr
    r = subprocess.run(["make", "-s", "sim", "SIM=iverilog", models], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode != 0 and ("SIM=iverilog (did you mean SIM=icarus?): make sim and make "
                                  "bench take SIM=verilator") in r.stderr, r.stderr
    # a misspelt simulator names the one meant (session 30's fresh user), by make for make
    # sim and by the regression's configuration for make test
    r = subprocess.run(["make", "-s", "sim", "SIM=verilater", models], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode != 0 and ("SIM=verilater (did you mean SIM=verilator?): make sim and "
                                  "make bench take SIM=verilator") in r.stderr, r.stderr
    from chipotle.sim import simulators_from_env
    # (iverilg: a misspelt alias finds the alias's simulator, session 37's fresh user)
    for given, meant in (("icarsu", "icarus"), ("iverilog", "icarus"), ("iverilg", "icarus"),
                         ("verilatr", "verilator")):
        monkeypatch.setenv("SIM", given)
        with pytest.raises(ValueError, match=rf"not '{given}' \(did you mean SIM={meant}\?\)"):
            simulators_from_env()
    # the RTL simulators' variables with a backend that runs none: refused by make, naming
    # the variable; in the environment (as `make test` passes SIM to its tests) they are not
    for var in ("SIM=icarus", "WAVES=1", "PGO=1", "HIERARCHICAL=0"):
        r = subprocess.run(["make", "-s", "sim", "BACKEND=isasim", var, models], cwd=ROOT,
                           capture_output=True, text=True)
        assert r.returncode != 0 and f"{var} applies to the RTL simulators (BACKEND=" \
            "verilator or icarus), not BACKEND=isasim" in r.stderr, (var, r.stderr)
    r = subprocess.run(["make", "-s", "sim", "BACKEND=reference", "STEPS=1", models],
                       cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "SIM": "verilator,icarus", "WAVES": "1"})
    assert r.returncode == 0, r.stderr
    # ... and accepted with the default backend (the RTL under SIM, verilator) or a matching
    # BACKEND= (make -n: make's checks run, the recipe does not)
    # (a user's environment: not `make test`'s SIM=verilator,icarus, which no make sim takes)
    clean = {k: v for k, v in os.environ.items()
             if k not in ("SIM", "WAVES", "PGO", "HIERARCHICAL", "BACKEND")}
    for args in (["PGO=1"], ["WAVES=1"], ["HIERARCHICAL=0"], ["SIM=icarus"], ["SIM=verilator"],
                 ["BACKEND=icarus", "SIM=icarus", "WAVES=1"]):
        r = subprocess.run(["make", "-n", "sim", *args, models], cwd=ROOT,
                           capture_output=True, text=True, env=clean)
        assert r.returncode == 0, (args, r.stderr)
    # two simulators named, and one target's variables given to the other: refused by name
    for args, message in (
            (["sim", "BACKEND=verilator", "SIM=icarus"],
             "SIM=icarus and BACKEND=verilator name two simulators"),
            (["bench", "PROMPT=hi"], "PROMPT= applies to make sim, not make bench"),
            (["bench", "TEMPERATURE=0.8"], "TEMPERATURE= applies to make sim, not make bench"),
            (["sim", "PROMPTS=1"], "PROMPTS= applies to make bench, not make sim"),
            (["sim", "SIM=icarus", "PGO=1"], "PGO=1 is a Verilator build option; the "
                                             "simulator here is Icarus")):
        r = subprocess.run(["make", "-n", *args, models], cwd=ROOT, capture_output=True,
                           text=True, env=clean)
        assert r.returncode != 0 and message in r.stderr, (args, r.stderr)


@pytest.mark.model
def test_make_sim_echoes_the_command_it_runs(model_paths):
    """``make sim`` (not ``-s``) first prints the command with the values it passes filled in
    and quoted as a shell needs them, one line that runs as printed; ``make -s`` does not."""
    models = f"MODEL_DIR={model_paths[0].parent}"
    prompt = 'It\'s "two" $HOME'
    r = subprocess.run(["make", "sim", "BACKEND=golden", "STEPS=1", f"PROMPT={prompt}", models],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    line = r.stdout.splitlines()[0]
    argv = shlex.split(line)
    assert argv[0].endswith("/chipotle") and argv[1] == "generate", line
    assert argv[argv.index("--prompt") + 1] == prompt and "CHIPOTLE_MAKE" not in line, line
    assert argv[argv.index("--steps") + 1] == "1", line
    assert r.stdout.splitlines()[1].startswith(prompt), r.stdout
    r = subprocess.run(["make", "-s", "sim", "BACKEND=golden", "STEPS=1", models], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("Once upon a time"), r.stdout


@pytest.mark.model
def test_make_sim_seed_and_topp_reach_the_sampler(model_paths):
    """``make sim SEED= TOPP=``: a sampled story is repeatable by its seed and changes with
    it, and the summary names the seed and top-p used."""

    def story(seed):
        r = subprocess.run(["make", "-s", "sim", "BACKEND=reference", "STEPS=40",
                            "TEMPERATURE=1.0", "TOPP=0.8", f"SEED={seed}",
                            f"MODEL_DIR={model_paths[0].parent}"], cwd=ROOT,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert f"top-p 0.8, seed {seed}" in r.stderr, r.stderr
        return r.stdout

    first = story(7)
    assert first == story(7)
    assert first != story(8), "another seed gave the same 40-token story: the seed is unused"


def test_ctrl_c_is_one_line(capsys, tiny, monkeypatch):
    """Ctrl-C during a run: exit status 130 and one line, no traceback."""
    import chipotle.cli as cli

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_generate", interrupted)
    code, out, err = run(capsys, *tiny, "--prompt", "a")
    assert code == 130 and err.strip() == "chipotle: interrupted", err


def test_errors_under_make_name_make_variables(capsys, tiny, monkeypatch):
    """Run by ``make sim`` / ``make bench`` ($CHIPOTLE_MAKE_CONFIG set), a refusal names the
    make variable of each option it mentions, once, and not when it names it already;
    run directly, the message is unchanged."""
    import chipotle.cli as cli

    msg = "--config: bad value; --context 3 is short; see --prompts, not --prompt"
    monkeypatch.delenv("CHIPOTLE_MAKE_CONFIG", raising=False)
    assert cli.under_make(msg) == msg
    monkeypatch.setenv("CHIPOTLE_MAKE_CONFIG", "default")
    assert cli.under_make(msg) == (msg + " (make: --config is CONFIG=, --context is CONTEXT=, "
                                   "--prompt is PROMPT=, --prompts is PROMPTS=)")
    assert cli.under_make("--context 3 (`make sim`: CONTEXT=)").endswith("CONTEXT=)")
    # $CHIPOTLE_MODEL_DIR= is not make's MODEL_DIR=
    assert cli.under_make("not found ($CHIPOTLE_MODEL_DIR=/x; use --model)").endswith(
        "(make: --model is MODEL_DIR= (the directory))")
    assert cli.under_make("no options here") == "no options here"
    code, _out, err = run(capsys, *tiny, "--backend", "isasim", "--config", "mesh=9")
    assert code == 2 and err.strip().endswith("(make: --config is CONFIG=)"), err
    with pytest.raises(SystemExit) as e:       # argparse's own refusals too
        cli.main(["generate", *tiny, "--clock-mhz", "0"])
    assert e.value.code == 2
    assert "(make: --clock-mhz is CLOCK_MHZ=)" in capsys.readouterr().err


def test_sim_threads_only_with_verilator(capsys, tiny):
    """``--sim-threads`` (``make sim THREADS=``) with another backend is refused, not ignored."""
    for backend in ("isasim", "reference", "icarus"):
        code, out, err = run(capsys, *tiny, "--backend", backend, "--sim-threads", "2")
        assert code == 2 and out == ""
        assert (f"--sim-threads 2: only the verilator backend runs simulator threads, not "
                f"{backend}: leave it out, or choose --backend verilator") in err, err


@pytest.mark.model
def test_make_models_and_model_dir_with_spaces(model_paths, tmp_path):
    """``make models`` keeps files whose sha256 is the published one, fetches a truncated one
    again (here from a ``file://`` MODEL_URL), refuses a download whose sha256 is wrong
    without replacing anything, and ``MODEL_DIR=`` may hold spaces."""
    import shutil
    d = tmp_path / "my models"
    d.mkdir()
    for p in model_paths:
        shutil.copyfile(p, d / p.name)
    good = (d / "tok512.bin").read_bytes()
    (d / "tok512.bin").write_bytes(good[:1000])                  # a truncated download
    src = f"MODEL_URL=file://{model_paths[0].parent}"
    r = subprocess.run(["make", "-s", "models", f"MODEL_DIR={d}", src], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tok512.bin: sha256 is not the published one: fetching it again" in r.stdout
    assert "stories260K.bin: sha256" not in r.stdout              # the good file is kept
    assert (d / "tok512.bin").read_bytes() == good
    # a source serving a wrong file: refused, the file in place untouched
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tok512.bin").write_bytes(good[:-1] + b"\0")
    (d / "tok512.bin").write_bytes(good[:10])
    r = subprocess.run(["make", "-s", "models", f"MODEL_DIR={d}", f"MODEL_URL=file://{bad}"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and "the download's sha256 is not" in r.stdout, r.stdout
    assert (d / "tok512.bin").read_bytes() == good[:10]
    (d / "tok512.bin").write_bytes(good)
    r = subprocess.run(["make", "-s", "sim", "BACKEND=reference", "STEPS=2", "TEMPERATURE=0",
                        f"MODEL_DIR={d}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("Once upon a time"), r.stderr
    r = subprocess.run(["make", "-s", "models", f"MODEL_DIR={d / 'tok512.bin'}"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "is a file; give the folder" in r.stderr, r.stderr


LEAVE_OUT = ": leave it out, or choose one of them with --backend"
LEAVE_OUT_1 = ": leave it out, or choose it with --backend"


def test_options_of_other_backends_are_refused(capsys, tiny, tmp_path):
    """An option the chosen backend does not use is refused by name, not ignored, with the
    prefix of argparse's refusals; a directory given as a model file is named as one."""
    for argv, message in (
            (["--backend", "reference", "--context", "8"],
             "--context applies to the isasim, verilator, icarus, uart backends, not "
             "reference" + LEAVE_OUT),
            (["--backend", "golden", "--config", "small"],
             "--config applies to the isasim, verilator, icarus, uart backends, not golden"
             + LEAVE_OUT),
            (["--backend", "isasim", "--backdoor-load"],
             "--backdoor-load applies to the verilator, icarus backends, not isasim"
             + LEAVE_OUT),
            (["--backend", "isasim", "--port", "/dev/null"],
             "--port applies to the uart backend, not isasim" + LEAVE_OUT_1),
            (["--backend", "reference", "--placement", "pipeline"],
             "--placement applies to the isasim, verilator, icarus, uart backends, not "
             "reference" + LEAVE_OUT),
            (["--backend", "isasim", "--baud", "9600"],
             "--baud applies to the uart backend, not isasim" + LEAVE_OUT_1),
            (["--backend", "golden", "--clock-mhz", "100"],
             "--clock-mhz applies to the isasim, verilator, icarus, uart backends, not "
             "golden" + LEAVE_OUT),
            (["--backend", "uart", "--port", "/dev/null"],
             "--backend uart needs --clock-mhz, the bitstream's clock (the ULX3S build of "
             f"make bitstream: {_board_mhz():g}): the board's step "
             "figures are the wall time times it")):
        code, out, err = run(capsys, *tiny, *argv)
        assert code == 2 and out == "" and err == f"chipotle generate: error: {message}\n", \
            (argv, err)
    i = tiny.index("--model")
    code, _out, err = run(capsys, *tiny[:i], "--model", str(tmp_path), *tiny[i + 2:])
    assert code == 2 and f"--model {tmp_path} is a directory; give the checkpoint file" in err
    # a --model that is no checkpoint is named as such, not "tokenizer not found" beside it
    # (session 39's fresh user); a checkpoint whose folder lacks tok512.bin still says that
    (tmp_path / "notes.txt").write_text("not a model\n" * 100)
    code, _out, err = run(capsys, "--model", str(tmp_path / "notes.txt"))
    assert code == 2 and (f"error: {tmp_path / 'notes.txt'}: the file is text ('not a model "
                          f"not a model' ...), not a model checkpoint") in err, err
    code, _out, err = run(capsys, "--model", tiny[3])           # the tokenizer
    assert code == 2 and f"error: {tiny[3]}: the file is a llama2.c tokenizer" in err, err
    code, _out, err = run(capsys, "--model", tiny[1])           # tiny.bin, no tok512.bin
    assert code == 2 and "tokenizer not found: " in err, err
    # an empty one is not the current folder ("--model . is a directory", session 39)
    for option in ("--model", "--tokenizer"):
        with pytest.raises(SystemExit) as e:          # the parser's refusal
            run(capsys, *tiny, option, "")
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"argument {option}: is empty: give the file" in err, err


def test_every_option_of_other_backends_is_named(capsys, tiny):
    """Several options of other backends are refused together, every one named (only the
    first was), with the backend that takes them all, or the words that none does."""
    for argv, message in (
            (["--backend", "isasim", "--port", "/dev/null", "--baud", "9600"],
             "--port, --baud apply to the uart backend, not isasim: leave them out, or choose "
             "it with --backend"),
            (["--backend", "reference", "--context", "8", "--port", "/dev/null"],
             "--context applies to the isasim, verilator, icarus, uart backends; --port "
             "applies to the uart backend, not reference: leave them out, or choose uart with "
             "--backend"),
            (["--backend", "golden", "--config", "small", "--backdoor-load"],
             "--config applies to the isasim, verilator, icarus, uart backends; "
             "--backdoor-load applies to the verilator, icarus backends, not golden: leave "
             "them out, or choose one of verilator, icarus with --backend"),
            (["--backend", "isasim", "--backdoor-load", "--port", "/dev/null"],
             "--backdoor-load applies to the verilator, icarus backends; --port applies to "
             "the uart backend, not isasim, and no one backend takes them all: leave out "
             "those of the backends you do not want, and choose the one you do with "
             "--backend")):
        code, out, err = run(capsys, *tiny, *argv)
        assert code == 2 and out == "" and err == f"chipotle generate: error: {message}\n", \
            (argv, err)


def test_a_search_for_configurations_that_fit_is_said_first(capsys, tiny, monkeypatch):
    """A configuration the model does not fit: one line on stderr says that the compiler
    checks which configurations fit, before its search (over a minute for stories260K with
    ``--config small``, in which the command printed nothing: a fresh user's finding); the
    refusal after it is the one the command gives without that line; a configuration that
    fits runs no search and prints no such line."""
    args = ("--backend", "isasim", "--config", "small,sram_kib=4", "--steps", "1", *tiny)
    code, out, err = run(capsys, *args)
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 3, err
    assert lines[1] == ("[isasim] checking which configurations fit tiny.bin (it does not fit "
                        "as given; this can take a minute) ..."), err
    assert lines[2].startswith("chipotle generate: error: tile (0, 0) of the tensor "
                               "placement"), err
    fitting = cli.compile_fitting
    monkeypatch.setattr(cli, "compile_fitting",
                        lambda *a, on_search=None, **kw: fitting(*a, **kw))
    code, out, quiet = run(capsys, *args)
    assert code == 2 and quiet.splitlines() == [lines[0], lines[2]], quiet
    monkeypatch.undo()
    code, out, err = run(capsys, "--backend", "isasim", "--config", "small", "--steps", "1",
                         *tiny)
    assert code == 0 and "checking which" not in err, err


def test_fit_tips_are_whole_config_options():
    """A fit refusal's configuration changes become the whole ``--config`` to give: the
    given configuration's other parts kept in the order given, each part a change replaces
    replaced where it stood (`mesh=` where the first of `mesh_width=` / `mesh_height=`
    stood), new keys last."""
    from chipotle.cli import config_tips
    from chipotle.compiler import Fit, FitError
    e = FitError("tile (0, 0) needs 9 bytes", [
        Fit(context=4), Fit((("sram_kib", "115"),), note="note"),
        Fit((("mesh", "3x3"), ("imem_words", "1024"))),
        Fit((("imem_words", "1024"),), context=7), Fit(placement="pipeline")])
    assert str(e) == (
        "tile (0, 0) needs 9 bytes; a configuration that fits: --context 4 or sram_kib=115 "
        "(note) or mesh=3x3,imem_words=1024 or --context 7 with imem_words=1024 or "
        "--placement pipeline")
    assert config_tips(e, "small,sram_kib=100,lanes=4") == (
        "tile (0, 0) needs 9 bytes; a configuration that fits: --context 4 or "
        "--config small,sram_kib=115,lanes=4 (note) or "
        "--config small,sram_kib=100,lanes=4,mesh=3x3,imem_words=1024 or "
        "--context 7 --config small,sram_kib=100,lanes=4,imem_words=1024 or "
        "--placement pipeline")
    assert config_tips(FitError("x", [Fit((("sram_kib", "2"),))]), "default") == \
        "x; a configuration that fits: --config sram_kib=2"
    assert config_tips(FitError("x", [Fit((("mesh", "3x2"), ("imem_words", "2048")))]),
                       "imem_words=1024,mesh_width=2,lanes=4,mesh_height=2") == \
        "x; a configuration that fits: --config imem_words=2048,mesh=3x2,lanes=4"
    assert config_tips(ValueError("bad"), "default") == "bad"


def test_fit_tips_under_make_are_make_variables(monkeypatch):
    """Run by ``make sim`` / ``make bench`` ($CHIPOTLE_MAKE_CONFIG set), the configurations a
    fit refusal offers are written as make's variables, to type back as printed, and the
    refusal does not add ``(make: --config is CONFIG=)`` for options it no longer names."""
    from chipotle.cli import config_tips, under_make
    from chipotle.compiler import Fit, FitError
    e = FitError("tile (0, 0) needs 9 bytes", [
        Fit(context=4), Fit((("sram_kib", "115"),), note="note"),
        Fit((("imem_words", "1024"),), context=7), Fit(placement="pipeline")])
    monkeypatch.setenv("CHIPOTLE_MAKE_CONFIG", "small")
    text = config_tips(e, "small,lanes=4")
    assert text == (
        "tile (0, 0) needs 9 bytes; a configuration that fits: CONTEXT=4 or "
        "CONFIG=small,lanes=4,sram_kib=115 (note) or CONTEXT=7 CONFIG=small,lanes=4,"
        "imem_words=1024 or PLACEMENT=pipeline")
    assert under_make(text) == text
    monkeypatch.delenv("CHIPOTLE_MAKE_CONFIG")
    assert "--context 7 --config small,lanes=4,imem_words=1024 or" in config_tips(
        e, "small,lanes=4")


def test_make_test_refuses_a_missing_test_path():
    """``make test PYTEST_ARGS=tb/typo.py`` names the missing path (under pytest-xdist the
    workers alone only say "no tests ran"); an existing node id still runs."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "tb/typo.py",
                        "tb/sw/test_tokenizer.py::nonexistent_too"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "file or directory not found: tb/typo.py" in r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "--co",
                        "tb/sw/test_sampling.py"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "test_sampling.py::" in r.stdout, r.stdout + r.stderr


@pytest.mark.model
def test_make_test_refuses_a_damaged_model_file_before_any_test(tmp_path, model_paths):
    """``make test MODEL_DIR=<a folder with a truncated stories260K.bin>`` is refused once,
    before any test, naming the file and the fetch that repairs it (it ran every test, and
    each model test failed with a traceback: session 30's fresh user)."""
    ckpt, tok = model_paths
    (tmp_path / "stories260K.bin").write_bytes(ckpt.read_bytes()[:1000])
    (tmp_path / "tok512.bin").write_bytes(tok.read_bytes())
    env = dict(os.environ, CHIPOTLE_MODEL_DIR=str(tmp_path))
    env.pop("CI", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q",
                        "tb/sw/test_sampling.py"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 4 and "passed" not in out and "failed" not in out, out
    assert (f"{tmp_path}/stories260K.bin: its sha256" in out
            and f"`make models MODEL_DIR={tmp_path}` fetches it again" in out
            and "(make test: MODEL_DIR=)" in out), out


def test_make_test_refuses_a_model_dir_without_the_model(tmp_path):
    """``make test MODEL_DIR=<a folder without the model>`` is refused before any test
    instead of skipping every model test and passing."""
    env = dict(os.environ, CHIPOTLE_MODEL_DIR=str(tmp_path))
    env.pop("CI", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q",
                        "tb/sw/test_sampling.py"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 4, r.stdout + r.stderr
    assert f"{tmp_path} lacks stories260K.bin, tok512.bin" in r.stdout + r.stderr
    # a folder that does not exist (a typo) names the fetch that creates it, as make sim's
    # refusal does; a file in its place is named as one (session 38's fresh user)
    for given, says in ((tmp_path / "typo", f"{tmp_path / 'typo'} does not exist; `make "
                         f"models MODEL_DIR={tmp_path / 'typo'}` creates it"),
                        (tmp_path / "f.bin", f"is a file, not a folder: {tmp_path / 'f.bin'}")):
        (tmp_path / "f.bin").write_bytes(b"")
        env["CHIPOTLE_MODEL_DIR"] = str(given)
        r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q",
                            "tb/sw/test_sampling.py"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 4 and says in r.stdout + r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "typo").exists()
    # an empty $CHIPOTLE_MODEL_DIR is unset, as chipotle.paths and make models take it
    env["CHIPOTLE_MODEL_DIR"] = ""
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "--co",
                        "tb/sw/test_sampling.py"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "test_sampling.py::" in r.stdout, r.stdout + r.stderr


def _prompt_longer_than(tok_path, positions):
    """A prompt of more than `positions` tokens (BOS included): (text, tokens)."""
    from chipotle.tokenizer import load_tokenizer
    tok = load_tokenizer(tok_path)
    n = 1
    while True:
        text = " ".join(["Once upon a time there was a big dog."] * n)
        if len(tok.encode(text)) > positions:
            return text, len(tok.encode(text))
        n += 1


def _suggested_config_holds(err, prompt_tokens, ckpt):
    """The ``--config ulx3s,sram_kib=N`` that `err` suggests holds a context of
    `prompt_tokens` (compiled, not just printed)."""
    import re

    from chipotle.compiler import compile_model
    from chipotle.config import ChipConfig
    from chipotle.golden import quantize
    from chipotle.model import load_checkpoint
    m = re.search(r"a configuration that fits: --config (ulx3s,sram_kib=\d+)", err)
    assert m, err
    compile_model(quantize(load_checkpoint(ckpt)), ChipConfig.from_string(m.group(1)),
                  prompt_tokens, placement="tensor")


@pytest.mark.model
def test_prompt_longer_than_the_context_and_the_configuration(capsys, model_paths):
    """A prompt longer than --context whose length the configuration cannot hold either:
    the refusal says so, gives the longest context the configuration holds as the prompt's
    limit and the configurations that hold the prompt, and suggests no context shorter than
    the prompt (a fresh user was told ``--context 140`` for a longer prompt, session 15)."""
    from chipotle.hw.fpga.boards import BOARDS
    ckpt, tok = model_paths
    most = BOARDS["ulx3s-85f"].context      # the chip's longest (test_fpga_build checks it)
    prompt, n = _prompt_longer_than(tok, most)
    code, out, err = run(capsys, "--backend", "isasim", "--config", "ulx3s", "--context",
                         str(most), "--model", str(ckpt), "--tokenizer", str(tok),
                         "--prompt", prompt)
    assert code == 2 and out == ""
    assert f"the prompt is {n} tokens (BOS included), longer than --context {most}, and a " \
           f"context of {n} does not fit this configuration either" in err
    assert f"the longest context it holds, {most}, is shorter than the prompt's {n} tokens " \
           f"(BOS included): shorten the prompt to at most {most} tokens; a configuration " \
           "that fits: --config ulx3s,sram_kib=" in err and "compiling" not in err, err
    assert "fits: --context" not in err and "or --context" not in err, err
    _suggested_config_holds(err, n, ckpt)


@pytest.mark.model
def test_short_context_names_the_longest_the_configuration_holds(capsys, model_paths):
    """A prompt longer than --context that the configuration holds: the refusal asks for a
    longer context up to the configuration's longest, not up to the model's seq_len (``make
    sim BACKEND=isasim CONFIG=ulx3s CONTEXT=3`` said the 512 of seq_len was the most, for a
    chip holding 204 positions: a fresh user's finding)."""
    from chipotle.hw.fpga.boards import BOARDS
    ckpt, tok = model_paths
    most = BOARDS["ulx3s-85f"].context      # the chip's longest (test_fpga_build checks it)
    code, out, err = run(capsys, "--backend", "isasim", "--config", "ulx3s", "--context", "3",
                         "--prompt", "Once upon a time", "--model", str(ckpt), "--tokenizer",
                         str(tok))
    assert code == 2 and out == "" and "compiling" not in err
    assert err.count("\n") == 1 and ("the prompt is 5 tokens (BOS included), longer than the "
                                     "context length of 3 positions (--context 3): give "
                                     "--context 5 or more (`make sim`: CONTEXT=; the longest "
                                     f"context this configuration holds, {most}, is the most)"
                                     ) in err, err


@pytest.mark.model
def test_no_context_takes_the_longest_the_configuration_holds(capsys, model_paths):
    """Without --context, a configuration that cannot hold the model's seq_len compiles for
    the longest context it holds, and the run says so; with --context, no such fallback."""
    import re

    from chipotle.hw.fpga.boards import BOARDS
    ckpt, tok = model_paths
    most = BOARDS["ulx3s-85f"].context
    files = ("--model", str(ckpt), "--tokenizer", str(tok))
    code, out, err = run(capsys, "--backend", "isasim", "--config", "ulx3s", "--steps", "2",
                         "--temperature", "0", *files)
    assert code == 0, err
    assert out.startswith("Once upon")
    assert (f"[isasim] context {most}: the longest this chip ({BOARDS['ulx3s-85f'].config}) "
            "holds the model for; its seq_len, 512, does not fit") in err
    # the board's chip: tokens/s at the bitstream's clock too, when no clock was given
    assert re.search(r"tokens/s at an assumed 100 MHz clock \(--clock-mhz\); [\d,]+ at the "
                     rf"{_board_mhz():g} MHz of make bitstream's ulx3s-85f build",
                     out + err), out + err
    # the roofline over the matrix unit's port (8 B/cycle on the one-tile board chip) and
    # the same bytes over every SRAM port (its one-bank read/write port's word too: 16)
    m = re.search(r"decode roofline efficiency: ([\d.]+)% \(weight \+ KV bytes over 8 "
                  r"B/cycle, the matrix units' read ports, over the ISA simulator's estimated "
                  r"cycles\); ([\d.]+)% of the SRAM's whole read bandwidth \(16 B/cycle "
                  r"with the 1-word reads of the read/write ports\)", err)
    assert m, err
    assert abs(float(m.group(2)) - float(m.group(1)) / 2) <= 0.06, m.group(0)
    code, out, err = run(capsys, "--backend", "isasim", "--config", "ulx3s", "--context",
                         str(most + 1), "--steps", "2", *files)
    assert code == 2 and out == "" and f"a configuration that fits: --context {most}" in err
    # a prompt longer than the longest context: refused with the compiler's refusal, which
    # does not offer the context too short for the prompt (a fresh user's finding)
    prompt, n = _prompt_longer_than(tok, most)
    code, out, err = run(capsys, "--backend", "isasim", "--config", "ulx3s", "--prompt", prompt,
                         "--steps", "3", *files)
    assert code == 2 and out == "", err
    assert re.search(r"needs [\d,]+ bytes of SRAM at context 512, but a tile has 393,216; the "
                     rf"longest context it holds, {most}, is shorter than the prompt's {n} "
                     rf"tokens \(BOS included\): shorten the prompt to at most {most} tokens",
                     err), err
    assert f"--context {most}" not in err, err
    # the configuration offered holds the prompt and the steps after it (the last token
    # generated is not decoded: 2 more positions), so its run is not stopped by the context
    assert re.search(rf"shorten the prompt to at most {most} tokens; for {n + 2} positions "
                     rf"\(the prompt's {n} and 2 more for --steps 3\), a configuration that "
                     r"fits: --config ulx3s,sram_kib=\d+$", err.rstrip()), err
    _suggested_config_holds(err, n + 2, ckpt)


@pytest.mark.model
def test_uart_defaults_to_the_board_chip(capsys, model_paths, tmp_path):
    """``--backend uart`` without --config compiles for the chip of the ULX3S bitstream at
    its context (not the simulators' 4 x 4 default), and says so."""
    from chipotle.hw.fpga.boards import BOARDS
    ckpt, tok = model_paths
    board = BOARDS["ulx3s-85f"]
    code, out, err = run(capsys, "--backend", "uart", "--port", str(tmp_path / "no-such-tty"),
                         "--clock-mhz", "15", "--steps", "1", "--model", str(ckpt),
                         "--tokenizer", str(tok))
    assert (f"[uart] the chip of make bitstream's ULX3S 85F build: --config ulx3s --context "
            f"{board.context}") in err
    assert f"compiling stories260K.bin for {board.config}" in err
    # no board there: the port is refused after the compile, by name
    assert code == 2 and f"--port {tmp_path / 'no-such-tty'}" in err


def _uart_run_on_a_silent_pty(capsys, tiny):
    """``generate --backend uart`` on a pty nobody reads (no board answering), the wait
    2**26 cycles of --clock-mhz 1000, 0.07 s; returns (port, exit code, stdout, stderr)."""
    master, slave = os.openpty()
    try:
        port = os.ttyname(slave)
        code, out, err = run(capsys, *tiny, "--backend", "uart", "--config", "small", "--port",
                             port, "--clock-mhz", "1000", "--baud", "115200", "--steps", "2")
    finally:
        os.close(slave)
        os.close(master)
    return port, code, out, err


def test_uart_without_a_board_answering_is_one_line(capsys, tiny):
    """A serial port with no board answering (a pty nobody reads): the run is refused in one
    line naming the port, the time waited and what to check, not with the driver's
    DoorbellTimeout traceback (a fresh user's finding).  The wait is 2**26 cycles of
    --clock-mhz: at 1000, 0.07 s."""
    port, code, out, err = _uart_run_on_a_silent_pty(capsys, tiny)
    assert code == 2 and out == "", err
    assert err.splitlines()[-1] == (
        f"chipotle generate: error: --port {port}: no answer from the board on this port "
        "within 0.1 s: is it programmed with make bitstream's bitstream (docs/fpga.md), and at "
        "--baud 115200, the bitstream's line rate?"), err


def test_uart_board_that_goes_quiet_is_one_line(capsys, tiny, monkeypatch):
    """A board that answered and then stopped (reset, unplugged) ends the run with one
    line naming the port, the flits either way and the driver's timeout, exit code 1, not
    the DoorbellTimeout traceback.  The board here is the pty nobody reads, with the
    backend's count of flits from it made non-zero."""
    import chipotle.driver.uart as uart

    class Quiet(uart.UartBackend):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.flits_out = 7          # as if it had answered before

    monkeypatch.setattr(uart, "UartBackend", Quiet)
    port, code, out, err = _uart_run_on_a_silent_pty(capsys, tiny)
    assert code == 1, err
    last = err.splitlines()[-1]
    assert last.startswith(f"chipotle generate: error: --port {port}: the board stopped "
                           "answering after 7 flits from it and "), err
    assert "no doorbell within" in last and "Traceback" not in err, err


def _make(*argv):
    """``make -n ARGV`` in the checkout (nothing runs): (exit code, stderr)."""
    r = subprocess.run(["make", "-n", *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stderr


@pytest.mark.parametrize("argv", [("bitstream",), ("bitstream", "CONFIG=small", "SYNTH_ONLY=1"),
                                  ("sim", "BACKEND=reference"), ("bench", "BACKEND=isasim")])
def test_make_echoes_commands_without_empty_lines(argv):
    """The commands make echoes have no empty continuation lines (options left out by make
    conditionals used to leave ``\\``-only lines in the echo: a fresh user's finding)."""
    r = subprocess.run(["make", "-n", *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert not [ln for ln in lines if ln.strip() in ("", "\\")], r.stdout
    assert any("chipotle" in ln for ln in lines), r.stdout


def test_config_tips_replace_aliases_and_drop_short_contexts():
    """A suggested change replaces the given parts it overrides under any of their names
    (``sram_bytes`` by ``sram_kib``, ``mesh_width`` by ``mesh``, ``V`` by ``lanes``), where
    they stood, so the suggested --config parses; a suggested context shorter than the
    prompt is left out and said instead."""
    from chipotle.compiler import Fit, FitError
    from chipotle.config import ChipConfig
    e = FitError("it does not fit", [Fit((("sram_kib", "414"),)), Fit((("mesh", "2x1"),)),
                                     Fit((("lanes", "4"),)), Fit(context=140)])
    text = cli.config_tips(e, "ulx3s,sram_bytes=262144,mesh_width=1,V=2", 199)
    tips = text.split("a configuration that fits: ")[1].split(" or ")
    assert tips == ["--config ulx3s,sram_kib=414,mesh_width=1,V=2",
                    "--config ulx3s,sram_bytes=262144,mesh=2x1,V=2",
                    "--config ulx3s,sram_bytes=262144,mesh_width=1,lanes=4"], text
    for tip in tips:
        ChipConfig.from_string(tip.removeprefix("--config "))       # no key given twice
    assert "the longest context it holds, 140, is shorter than the prompt's 199 tokens" in text
    assert "--context" not in text
    # a short context is kept when the prompt fits it
    assert "--context 140" in cli.config_tips(e, "ulx3s", 100)


def test_make_bitstream_variables_stay_with_it():
    """make bitstream refuses the variables of other targets given to it alone (CLOCK_MHZ=50
    would not set the board's clock), other targets refuse its BOARD= and SYNTH_ONLY=, and
    SYNTH_ONLY takes 1 or 0 only (``no`` meant synth-only before, session 15's fresh user)."""
    code, err = _make("bitstream", "CLOCK_MHZ=50", "STEPS=3")
    assert code == 2 and ("CLOCK_MHZ= applies to make sim or make bench; STEPS= applies to "
                          "make sim or make test-default, not make bitstream (make bitstream "
                          "takes BOARD=, CONFIG= and SYNTH_ONLY=1; the clock is the "
                          "board's") in err, err
    code, err = _make("sim", "BACKEND=reference", "BOARD=ulx3s-85f")
    assert code == 2 and "BOARD= applies to make bitstream, not make sim" in err, err
    code, err = _make("bitstream", "SYNTH_ONLY=no")
    assert code == 2 and "SYNTH_ONLY=no: give SYNTH_ONLY=1" in err, err
    for ok in (("bitstream", "SYNTH_ONLY=0"), ("bitstream", "SYNTH_ONLY=1", "CONFIG=small"),
               ("sim", "bitstream", "BOARD=icebreaker", "BACKEND=reference")):
        code, err = _make(*ok)
        assert code == 0, (ok, err)


def test_make_bitstream_passes_values_unparsed():
    """BOARD= and CONFIG= reach the flow as given, not through the shell (a backquote in
    CONFIG ran as a command before)."""
    r = subprocess.run(["make", "-s", "bitstream", "CONFIG=`echo x`"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "CONFIG=`echo x`: unknown configuration '`echo x`'" in \
        r.stderr, r.stderr
    r = subprocess.run(["make", "-s", "bitstream", 'BOARD=a b"c'], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and 'BOARD=a b"c: not a board of this flow' in r.stderr, r.stderr


def test_make_refuses_variables_no_target_takes():
    """A misspelt variable is refused by name (with the variable meant, when it is a plural
    or singular away or a close spelling), not ignored; the Makefile's own variables and
    CHIPOTLE_* pass."""
    code, err = _make("sim", "STEP=3", "BACKEND=reference")
    assert code == 2 and ("STEP= (did you mean STEPS=?): no target of this Makefile takes "
                          "it; `make help` lists the variables of each target") in err
    code, err = _make("sim", "PROMT=Hi", "CONFG=small")
    assert code == 2 and "no target of this Makefile takes these" in err, err
    assert "PROMT= (did you mean PROMPT=?)" in err and "CONFG= (did you mean CONFIG=?)" in err
    code, err = _make("help", "FOO=1", "THREAD=2")
    assert code == 2 and ("FOO=, THREAD= (did you mean THREADS=?): no target of this Makefile "
                          "takes these") in err, err
    for var, meant in (("prompt=hi", "PROMPT"), ("TEMP=1", "TEMPERATURE"),
                       ("CLOCK=20", "CLOCK_MHZ")):      # case, a unique prefix
        code, err = _make("sim", var)
        assert code == 2 and f"(did you mean {meant}=?)" in err, (var, err)
    # several names begin with it: those the goals take (a fresh user's MODEL= got no hint;
    # the next one was offered MODEL_URL=, which make sim refuses), else each
    code, err = _make("sim", "MODEL=x")
    assert code == 2 and "MODEL= (did you mean MODEL_DIR=?)" in err, err
    code, err = _make("models", "MODEL=x")
    assert code == 2 and "MODEL= (did you mean MODEL_DIR= or MODEL_URL=?)" in err, err
    code, err = _make("lint", "MODEL=x")
    assert code == 2 and "MODEL= (did you mean MODEL_DIR= or MODEL_URL=?)" in err, err
    # a variable of this Makefile that none of the goals takes, and a goal that is no target
    code, err = _make("test", "CONFIG=ulx3s")
    assert code == 2 and ("CONFIG= applies to make sim or make bench or make bitstream, not "
                          "make test") in err, err
    code, err = _make("test-default", "PROMPT=x")
    assert code == 2 and "PROMPT= applies to make sim, not make test-default" in err, err
    code, err = _make("lint", "STEPS=3")
    assert code == 2 and "STEPS= applies to make sim or make test-default, not make lint" \
        in err, err
    code, err = _make("sim", "A;touch /tmp/chipotle-no-such-file;B=1", "BACKEND=reference")
    assert code == 2 and "'A;touch' '/tmp/chipotle-no-such-file;B=1' are no targets of this " \
        "Makefile (its targets: venv " in err, err
    # the Python side's environment variables are taken, any other CHIPOTLE_ name is not
    code, err = _make("sim", "STEPS=3", "BACKEND=reference", "CHIPOTLE_MODL_DIR=x")
    assert code == 2 and "CHIPOTLE_MODL_DIR= (did you mean CHIPOTLE_MODEL_DIR=?)" in err, err
    for argv in (("sim", "STEPS=3", "BACKEND=reference", "CHIPOTLE_BUILD_DIR=build"),
                 ("test", "JOBS=1", "PYTEST_ARGS=-k x", "SIM=icarus", "WAVES=0"),
                 ("bitstream", "BOARD=icebreaker", "SYNTH_ONLY=1")):
        code, err = _make(*argv)
        assert code == 0, (argv, err)


def test_make_refuses_misspelt_targets_with_the_one_meant():
    """A goal that is no target is refused, with the target meant when one is spelt close
    to it (a fresh user's `make simm` got the list of targets only)."""
    code, err = _make("simm", "BACKEND=reference")
    assert code == 2 and "'simm' (did you mean sim?) is no target of this Makefile" in err, err
    code, err = _make("bitsream", "tst")
    assert code == 2 and ("'bitsream' (did you mean bitstream?) 'tst' (did you mean test?) "
                          "are no targets of this Makefile") in err, err
    code, err = _make("xyzzy")
    assert code == 2 and "'xyzzy' is no target of this Makefile (its targets: venv" in err, err
    # a variable given without its value (a fresh user's `make sim PROMPT`)
    code, err = _make("sim", "prompt")
    assert code == 2 and "'prompt' (did you mean PROMPT=...?) is no target" in err, err
    # a target in other case, also a variable's name (`make Sim` suggested SIM=... only)
    code, err = _make("Sim", "BENCH")
    assert code == 2 and ("'Sim' (did you mean sim or SIM=...?) 'BENCH' (did you mean "
                          "bench?) are no targets") in err, err
    # a target with more after it (`make simulate` had no hint: too far for difflib)
    code, err = _make("simulate", "test-defaults")
    assert code == 2 and ("'simulate' (did you mean sim?) 'test-defaults' (did you mean "
                          "test-default?) are no targets") in err, err


def test_make_test_refuses_a_bad_jobs_count():
    for jobs in ("x", "1x", ""):
        code, err = _make("test", f"JOBS={jobs}")
        assert code == 2 and (f"JOBS={jobs}: make test takes JOBS=N, the number of pytest "
                              "workers (0: in one process), or JOBS=auto") in err, err
    for jobs in ("0", "12", "auto"):
        assert _make("test", f"JOBS={jobs}")[0] == 0


def test_make_test_default_refuses_a_bad_steps_count():
    """make test-default's TEST_STEPS= (or STEPS=) is a whole number of at least 1, refused
    by name otherwise (TEST_STEPS=abc failed the test module's collection with int()'s
    traceback, a fresh user's finding)."""
    for var in ("TEST_STEPS", "STEPS"):
        for steps in ("abc", "0", "-3", "1.5", "", "1 2"):
            code, err = _make("test-default", f"{var}={steps}")
            assert code == 2 and (f"{var}={steps}: make test-default takes {var}=N, the number "
                                  "of tokens to generate greedily from BOS, a whole number of "
                                  "at least 1 (default 120)") in err, (var, steps, err)
    for argv in ((), ("TEST_STEPS=4",), ("STEPS=16",), ("TEST_STEPS=abc", "STEPS=2")):
        code, err = _make("test-default", *argv)
        assert code == 0, (argv, err)


def test_make_test_default_refuses_another_simulator():
    """make test-default runs the 4 x 4 chip under Verilator only: SIM=icarus is refused, not
    ignored (a fresh user's finding); SIM=verilator, and SIM= for make test beside it, pass."""
    code, err = _make("test-default", "SIM=icarus")
    assert code == 2 and ("SIM=icarus: make test-default runs the 4 x 4 chip under Verilator "
                          "only (too slow for Icarus); leave SIM out or give SIM=verilator") \
        in err, err
    for argv in (("test-default", "SIM=verilator"), ("test", "test-default", "SIM=icarus")):
        code, err = _make(*argv)
        assert code == 0, (argv, err)


def test_make_bitstream_errors_name_make_variables():
    """``make bitstream``'s refusals of a board or configuration name BOARD= and CONFIG=."""
    for var, message in (("BOARD=ulx3s", "BOARD=ulx3s: not a board of this flow (did you mean "
                                         "BOARD=ulx3s-85f?); the boards: icebreaker, ulx3s-85f"),
                         ("CONFIG=nope", "CONFIG=nope: unknown configuration 'nope'")):
        r = subprocess.run(["make", "-s", "bitstream", var], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 2 and message in r.stderr, r.stderr
        # one line, without argparse's usage of options make users do not type
        assert r.stderr.strip().startswith("make bitstream: error: ") and "usage:" not in \
            r.stderr, r.stderr


def test_misspelt_backend_and_board_name_the_one_meant(capsys, monkeypatch):
    """A misspelt choice is refused with the valid ones and the one meant (difflib), in the
    command's terms, and under make in make's (``make sim BACKEND=isa``: ``BACKEND=isasim``,
    ``make bitstream BOARD=ulx3s``: ``BOARD=ulx3s-85f``), at once: no build starts first."""
    from chipotle.sim import bench, bitstream
    monkeypatch.delenv("CHIPOTLE_MAKE_CONFIG", raising=False)
    monkeypatch.delenv("CHIPOTLE_MAKE_BITSTREAM", raising=False)
    for main, argv, meant in ((cli.main, ["generate", "--backend", "isa"], "--backend isasim"),
                              (cli.main, ["generat"], "generate"),
                              (bench.main, ["--backend", "isa"], "--backend isasim"),
                              (bitstream.main, ["--board", "ulx3s"], "--board ulx3s-85f")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"(did you mean {meant}?)" in err, (argv, err)
        assert "(choose from '" in err or "the boards: icebreaker, ulx3s-85f" in err, err
    with pytest.raises(SystemExit):                       # none close: no suggestion
        cli.main(["generate", "--backend", "abacus"])
    assert "did you mean" not in capsys.readouterr().err
    for argv, message in (
            # make's terms throughout, not argparse's `argument --backend: invalid choice`
            (("sim", "BACKEND=isa", "STEPS=2"), "chipotle generate: error: BACKEND=isa: "
             "invalid choice (choose from 'reference', 'golden', 'isasim', 'verilator', "
             "'icarus', 'uart') (did you mean BACKEND=isasim?) (chipotle generate --help lists "
             "the options)"),
            (("bench", "BACKEND=isa"), "(choose from 'verilator', 'icarus', 'isasim') (did you "
             "mean BACKEND=isasim?)"),
            (("bitstream", "BOARD=ulx3s"), "make bitstream: error: BOARD=ulx3s: not a board of "
             "this flow (did you mean BOARD=ulx3s-85f?); the boards: icebreaker, ulx3s-85f")):
        r = subprocess.run(["make", "-s", *argv], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
        lines = r.stderr.splitlines()
        # the refusal first, then make's own line: nothing built or run before it
        assert r.returncode == 2 and message in lines[0] and len(lines) == 2, r.stderr
        assert r.stdout.count("\n") <= 1, r.stdout       # the command make echoes


@pytest.mark.parametrize("backend", ["golden", "isasim"])
def test_prompt_the_tokenizer_cannot_encode_is_one_line(capsys, tmp_path, backend):
    """A prompt character with no piece and no byte-fallback piece (a vocabulary without the
    256 byte pieces) is a usage error naming --prompt, not a traceback."""
    import struct

    from chipotle.model import ModelConfig, synthetic_checkpoint, write_checkpoint
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n", b"a", b"b", b" "]
    c = ModelConfig(dim=16, hidden_dim=24, n_layers=1, n_heads=2, n_kv_heads=1,
                    vocab_size=len(pieces), seq_len=8)
    model, tok = tmp_path / "m.bin", tmp_path / "t.bin"
    write_checkpoint(model, synthetic_checkpoint(c, seed=4), format="v1")
    tok.write_bytes(struct.pack("<i", 6) + b"".join(
        struct.pack("<fi", -1.0, len(p)) + p for p in pieces))
    code, out, err = run(capsys, "--backend", backend, "--model", str(model), "--tokenizer",
                         str(tok), "--prompt", "ab \u00c4", "--steps", "2")
    assert code == 2 and out == "", err
    assert "error: --prompt: " in err and "byte-fallback" in err and "Traceback" not in err
    # what it can encode runs
    assert run(capsys, "--backend", backend, "--model", str(model), "--tokenizer", str(tok),
               "--prompt", "ab", "--steps", "2", "--temperature", "0")[0] == 0


def test_checkpoint_the_quantiser_cannot_take_is_one_line(capsys, tmp_path, tiny):
    """A checkpoint of finite but degenerate weights (an all-zero embedding) is refused in
    one line naming the file and the tensor, on the host's golden model as on the chip's
    compile path."""
    import numpy as np

    from chipotle.model import load_checkpoint, write_checkpoint
    ck = load_checkpoint(tiny[1])
    w = ck.weights
    zero = np.zeros_like(w.token_embedding)
    change = {"token_embedding": zero, **({"wcls": zero} if ck.config.shared_classifier else {})}
    bad = tmp_path / "zeros.bin"
    write_checkpoint(bad, type(ck)(ck.config, type(w)(**{**vars(w), **change}), ck.format,
                                   ck.group_size), format=ck.format)
    for backend in ("golden", "isasim"):
        code, out, err = run(capsys, "--backend", backend, "--model", str(bad), "--tokenizer",
                             tiny[3], "--steps", "2")
        assert code == 2, (backend, err)
        assert "`token_embedding` cannot be quantised" in err and "Traceback" not in err


def test_uart_port_that_echoes_is_one_line(capsys, tiny):
    """A port that echoes what it is sent (a loopback): the host's own packets come back,
    which the chip never sends; the run is refused in one line saying so (a traceback from
    the packet parser before)."""
    import threading

    master, slave = os.openpty()
    stop = threading.Event()

    def echo():
        import select
        while not stop.is_set():
            if select.select([master], [], [], 0.02)[0]:
                try:
                    os.write(master, os.read(master, 4096))
                except OSError:
                    return

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    try:
        port = os.ttyname(slave)
        code, out, err = run(capsys, *tiny, "--backend", "uart", "--config", "small", "--port",
                             port, "--clock-mhz", "1000", "--baud", "115200", "--steps", "2")
    finally:
        stop.set()
        t.join()
        os.close(slave)
        os.close(master)
    assert code == 2 and "Traceback" not in err, err
    last = err.splitlines()[-1]
    assert last.startswith(f"chipotle generate: error: --port {port}: no answer from the "
                           f"board, but "), err
    assert "packets came back that the chip does not send (the last: unexpected packet at " \
           "the host: " in last and last.endswith("does the port echo what it is sent (a "
                                                  "loopback, a terminal with echo on)?"), last


def test_model_that_is_not_a_regular_file(capsys, tiny):
    """A device given as the checkpoint exists: it is named as not a regular file, not
    "not found"."""
    code, _, err = run(capsys, "--model", "/dev/null", "--tokenizer", tiny[3])
    assert code == 2 and "--model /dev/null is not a regular file" in err, err


def test_published_sha256_are_the_makefiles():
    """The digests the CLI checks the default files against are the ones `make models`
    checks (one list in the Makefile, one in chipotle.paths)."""
    import re

    from chipotle.paths import PUBLISHED_SHA256
    text = (ROOT / "Makefile").read_text()
    make = dict(re.findall(r"^SHA_(\S+)\s*:=\s*([0-9a-f]{64})$", text, re.M))
    assert make == PUBLISHED_SHA256


@pytest.mark.model
def test_damaged_default_model_is_refused(capsys, tmp_path, monkeypatch, model_paths):
    """A default stories260K.bin that is not the published file (twenty bytes flipped: it
    still loads, and tells another story) is refused in one line with the fixes; given with
    --model it runs as it is."""
    data = bytearray(model_paths[0].read_bytes())
    for i in range(1000, 1020):
        data[i] ^= 0xFF
    (tmp_path / "stories260K.bin").write_bytes(bytes(data))
    (tmp_path / "tok512.bin").write_bytes(model_paths[1].read_bytes())
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(tmp_path))
    code, out, err = run(capsys, "--backend", "golden", "--steps", "2", "--temperature", "0")
    assert code == 2 and out == "", err
    assert "stories260K.bin: its sha256 (" in err and "is not the published file's" in err
    # the fetch names the folder given (make's MODEL_DIR=), not make's default one
    assert f"`make models MODEL_DIR={tmp_path}` fetches it again, or give it with --model" in err
    code, out, err = run(capsys, "--backend", "golden", "--steps", "2", "--temperature", "0",
                         "--model", str(tmp_path / "stories260K.bin"))
    assert code == 0, err


def test_every_command_line_option_has_help(monkeypatch):
    """Every option (and positional argument, and subcommand) of every command-line entry
    point (``chipotle`` and each module with a ``main`` that builds an argparse parser:
    ``python -m chipotle.compiler``, ``chipotle.compiler.profile``, ``chipotle.isa.programs``,
    ``chipotle.sim.bench``, ``chipotle.sim.bitstream``, ...) has a help text in ``--help``
    (``--programs`` and ``--bench`` of ``python -m chipotle.compiler`` had none)."""
    import argparse
    import importlib
    import importlib.util
    import pkgutil
    import tomllib

    class Parsed(Exception):
        """Raised with the parser in place of parsing: nothing of `main` runs after it."""

    def capture(self, *_args, **_kwargs):
        raise Parsed(self)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    modules = []
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]                  # (chipotle.sim and chipotle.hw are folders of their own)
    for info in (i for package in packages for i in pkgutil.iter_modules(
            importlib.import_module(package).__path__, f"{package}.")):
        origin = importlib.util.find_spec(info.name).origin
        text = Path(origin).read_text() if origin and origin.endswith(".py") else ""
        if "ArgumentParser(" in text and "\ndef main(" in text:
            modules.append(info.name)
    assert {"chipotle.cli", "chipotle.compiler.__main__", "chipotle.compiler.profile",
            "chipotle.isa.programs", "chipotle.sim.bench", "chipotle.sim.bitstream"} <= \
        set(modules), modules
    missing = []

    def walk(parser):
        for action in parser._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)
    for name in modules:
        with pytest.raises(Parsed) as e:
            importlib.import_module(name).main([])
        walk(e.value.args[0])
    assert not missing, f"options without help: {', '.join(missing)}"


@pytest.mark.model
def test_a_chip_run_says_what_the_configuration_leaves_out(capsys, model_paths):
    """stories260K on 4 x 4 tiles of 110 KiB: the tensor placement fits, at a shorter context,
    without some of its schemes; the run says which, and the SRAM that keeps them at the
    model's seq_len (`slower_notes`), and that SRAM's run says nothing of the kind (a fresh
    user's path: the size named at the shorter context used to drop schemes again at 512)."""
    import re
    ckpt, tok = model_paths
    files = ("--model", str(ckpt), "--tokenizer", str(tok))
    code, out, err = run(capsys, "--backend", "isasim", "--config", "sram_kib=110", "--steps",
                         "1", "--temperature", "0", *files)
    assert code == 0, err
    # 110 KiB holds 498 positions, not the seq_len of 512: the size named keeps every
    # scheme at 512, which that size's run then takes
    assert "[isasim] context 498: the longest" in err, err
    m = re.search(r"\[isasim\] without ([^:\n]+): slower (prefill|decode|prefill and decode|"
                  r"(?:prefill, and )?decode from position \d+ on) \(a tile's SRAM is too "
                  r"small for them\); --config sram_kib=(\d+) keeps them and the model's "
                  r"seq_len, 512 positions\n", err)
    assert m, err
    # the weighted sums' split without a scheme of every decode step: slower decode from
    # its first position with a tail only (it said "slower prefill and decode")
    from chipotle.compiler.tensor import WSUM_SPLIT_FROM
    if m.group(1).split(", ") == ["a prefill batch's last rows on the helpers",
                                  "the weighted sums split with the partners"]:
        assert m.group(2) == f"prefill, and decode from position {WSUM_SPLIT_FROM - 1} on", err
    code, out, err = run(capsys, "--backend", "isasim", "--config",
                         f"sram_kib={m.group(3)}", "--steps", "1", "--temperature", "0",
                         *files)
    assert code == 0, err
    assert "too small for them" not in err and "the longest" not in err, err


@pytest.mark.parametrize("backend", ["reference", "golden"])
def test_a_checkpoint_that_overflows_float32_is_refused(capsys, tiny, backend):
    """A checkpoint with weights of about 1e30 (a fresh user's finding: the reference printed
    numpy warnings and a story of nonsense): both host backends end with one line that
    names the file and the problem, no traceback; nothing of a story is printed."""
    from chipotle.model import load_checkpoint, synthetic_checkpoint, write_checkpoint
    path = tiny[1]
    c = load_checkpoint(path).config
    write_checkpoint(path, synthetic_checkpoint(c, seed=4, scale=1e30), format="v1")
    code, out, err = run(capsys, *tiny, "--backend", backend, "--steps", "3")
    assert code in (1, 2) and out == "", (code, out, err)
    assert err.strip().count("\n") == 0 and "Traceback" not in err and "Warning" not in err
    assert (f"error: {path}: the float reference leaves float32's range at position 0, the "
            "attention RMSNorm of layer 0") in err, err


@pytest.mark.parametrize("mesh, noted", [("3x2", True), ("2x2", False)])
def test_icarus_on_a_large_chip_says_it_is_slow(capsys, tiny, monkeypatch, mesh, noted):
    """`--backend icarus` (make sim SIM=icarus) on a chip of more than `cli.ICARUS_TILES`
    tiles says first that Icarus runs it very slowly (a fresh user's finding: the 4 x 4
    chip started silently, the README says no token came in 15 minutes); on a small chip it
    says nothing.  The simulation itself is replaced by a stop right after the note."""
    import chipotle.sim.chiprun as chiprun

    def stop(*args, **kwargs):
        raise cli.RunFailure("stopped before the simulation")
    monkeypatch.setattr(chiprun, "run_rtl", stop)
    code, out, err = run(capsys, *tiny, "--backend", "icarus", "--config",
                         f"small,mesh={mesh}", "--steps", "1")
    assert code == 1 and "stopped before the simulation" in err, err
    note = "[icarus] note: Icarus simulates a chip of 6 tiles very slowly"
    assert (note in err) == noted, err


@pytest.mark.parametrize("code, why", [(130, "exit status 130: SIGINT reached the simulator"),
                                       (-11, "killed by SIGSEGV"), (3, "exit status 3")])
def test_a_simulator_that_ends_early_is_one_line(capsys, tiny, monkeypatch, tmp_path, code,
                                                 why):
    """A simulator process that is killed or crashes ends ``chipotle generate`` with one
    line naming its exit status, exit status 1, not cocotb's runner's ``RuntimeError:
    Command failed with return code: N`` traceback (session 40's fresh user: SIGINT to the
    simulator alone).  `chipotle.sim.flow._run_tests` turns the runner's error into
    `SimulatorExit`; the runner here is a stand-in that fails as cocotb's does."""
    import chipotle.sim.chiprun as chiprun
    from chipotle.sim import flow

    class Runner:
        def test(self, **kwargs):
            raise RuntimeError(f"Command failed with return code: {code}")

    with pytest.raises(flow.SimulatorExit) as e:
        flow._run_tests(Runner(), "verilator", "top", "m", None, tmp_path, None, None, False,
                        None)
    assert e.value.returncode == code and str(e.value) == (
        f"the verilator simulation ended early ({why}); its messages are above")
    assert isinstance(e.value, RuntimeError)

    class Other:
        def test(self, **kwargs):
            raise RuntimeError("something else")
    with pytest.raises(RuntimeError, match="something else"):
        flow._run_tests(Other(), "icarus", "top", "m", None, tmp_path, None, None, False, None)

    def simulator_ends(*args, **kwargs):
        raise e.value
    monkeypatch.setattr(chiprun, "run_rtl", simulator_ends)
    rc, out, err = run(capsys, *tiny, "--backend", "verilator", "--config", "small",
                       "--steps", "1")
    assert rc == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == f"chipotle generate: error: {e.value}", err


def test_a_module_command_whose_simulator_ends_early_is_one_line(capsys):
    """`cli.run_main` (every ``python -m chipotle...`` command) reports a simulator that
    ended early as one ``error:`` line, exit status 1 (before: the runner's traceback);
    other errors keep their traceback."""
    from chipotle.sim.flow import SimulatorExit

    def ends(argv):
        raise SimulatorExit("icarus", -9)
    with pytest.raises(SystemExit) as e:
        cli.run_main(ends, [])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err.strip() == (f"python -m {ends.__module__}: error: the icarus simulation ended "
                           "early (killed by SIGKILL); its messages are above"), err

    def fails(argv):
        raise RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):
        cli.run_main(fails, [])
