"""`chipotle.sim.bench`, the end-to-end performance benchmark, on the ISA simulator backend with
the compiler's small synthetic model: the figures follow from the run's own cycles and
counters, and a run that differs from ``GoldenModel`` is reported as a mismatch."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from chipotle.compiler import compile_model, small_model
from chipotle.config import CONFIGS
from chipotle.sim import bench
from tbcommon.cli import refused

SMALL = CONFIGS["small"]


@functools.cache
def _compiled(placement):
    return compile_model(small_model(), SMALL, context=16, placement=placement)


@pytest.mark.parametrize("placement", ["pipeline", "tensor"])
def test_figures_from_a_run(placement):
    cm = _compiled(placement)
    prompt = bench.story_prompt(cm.qm, 6)
    assert prompt[0] == bench.BOS and len(prompt) == 6
    assert not {bench.BOS, bench.EOS} & set(prompt[1:])
    r = bench.run_one(cm, prompt, 2, "isasim")
    ok, why = bench._check(r["steps"], r["tokens"], cm.qm)
    assert ok, why
    f = bench.figures(cm, 6, r)
    pre, dec = r["steps"][:r["prefill_steps"]], r["steps"][r["prefill_steps"]:]
    assert len(dec) == 2 and f["decode_pos"] == 6 == dec[0]["pos"]
    assert f["decode_cycles"] == dec[0]["cycles"] > 0
    assert f["ttft_cycles"] == sum(s["cycles"] for s in pre) > 0
    need = cm.weight_bytes_per_token() + cm.kv_bytes(6)
    assert f["decode_bytes"] == need
    assert f["roofline"] == pytest.approx(need / SMALL.sram_read_bytes_per_cycle
                                          / dec[0]["cycles"])
    # every port's reads: the matrix unit's word and the read/write port's n_banks words
    ports = SMALL.n_tiles * SMALL.word_bytes * (1 + SMALL.n_banks)
    assert f["sram_share"] == pytest.approx(need / ports / dec[0]["cycles"])
    assert f["sram_share"] < f["roofline"]
    # the prompt covers positions 0..5 in batches of at most M tokens
    assert sum(len(s["tokens"]) for s in pre) == 6
    assert all(len(s["tokens"]) <= SMALL.max_m for s in pre)


@pytest.mark.parametrize("placement", ["pipeline", "tensor"])
def test_roofline_bytes_count_the_quantised_models_arrays(placement):
    """The roofline's numerator counted from the golden model's own int8 arrays (each row
    padded to whole W-byte words, as tile SRAM stores it), not from the compiler's formula
    the bench uses: every layer matrix, the classifier and one embedding row per token;
    the K records (a header word and the head's int8 per KV head) and the V rows of
    positions 0 .. pos of every layer."""
    cm = _compiled(placement)
    qm, W = cm.qm, SMALL.word_bytes

    def stored(w):      # an int8 matrix (rows, cols), rows padded to words
        rows, cols = w.shape
        return rows * -(-cols // W) * W

    mats = [getattr(layer, n).w for layer in qm.layers
            for n in ("wq", "wk", "wv", "wo", "w1", "w3", "w2")] + [qm.classifier.w]
    assert all(m.dtype == np.int8 for m in mats)
    emb = qm.embedding.w
    want = sum(stored(m) for m in mats) + stored(emb[:1])
    assert cm.weight_bytes_per_token() == want
    c = qm.config
    for pos in (0, 5, 15):
        k = c.n_kv_heads * (W + -(-c.head_size // W) * W)
        v = -(-c.n_kv_heads * c.head_size // W) * W
        assert cm.kv_bytes(pos) == c.n_layers * (pos + 1) * (k + v), pos


def test_a_run_that_fills_the_context_is_checked():
    """Prompt and decode steps that use every position of the context: the last generated
    token sits at position `context`, which no step runs, so the check does not ask the
    golden model for it (it raised there, after the whole run, losing the table)."""
    model = small_model()
    cm = compile_model(model, SMALL, context=model.config.seq_len, placement="tensor")
    n, steps = cm.context - 2, 2
    r = bench.run_one(cm, bench.story_prompt(cm.qm, n), steps, "isasim")
    assert len(r["tokens"]) == cm.context + 1 == cm.qm.config.seq_len + 1
    ok, why = bench._check(r["steps"], r["tokens"], cm.qm)
    assert ok, why


def test_a_prompt_after_which_the_model_stops_is_refused_before_the_run(tmp_path, monkeypatch,
                                                                         capsys):
    """A prompt length after which the golden model's greedy token is BOS or EOS would stop
    the chip before its decode step: refused before anything runs, with a length that
    decodes.  (The small model never stops on its own story: `_story` is made to say so.)"""
    from chipotle.compiler.run import SMALL_MODEL_DIMS
    from chipotle.model import ModelConfig, synthetic_checkpoint, write_checkpoint
    path = tmp_path / "small.bin"
    write_checkpoint(path, synthetic_checkpoint(ModelConfig(**SMALL_MODEL_DIMS), seed=7,
                                                scale=0.3))
    story = bench._story
    monkeypatch.setattr(bench, "_story", lambda qm, n: (story(qm, n)[0], {2, 3}))
    monkeypatch.setattr(bench, "run_one", lambda *a, **k: pytest.fail("the run started"))
    with pytest.raises(SystemExit) as e:
        bench.main(["--backend", "isasim", "--config", "small", "--context", "16",
                    "--model", str(path), "--prompts", "2,3"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert ("after the first 3 tokens of the model's own story the golden model's greedy token "
            "is BOS or EOS, so the chip would stop before a decode step (a 2-token prompt "
            "decodes): give other --prompts") in err, err


def test_mismatch_is_reported():
    cm = _compiled("tensor")
    r = bench.run_one(cm, bench.story_prompt(cm.qm, 3), 1, "isasim")
    last = r["steps"][-1]
    bad = np.array(last["logits"], copy=True)
    bad[0] += 1
    last["logits"] = bad
    ok, why = bench._check(r["steps"], r["tokens"], cm.qm)
    assert not ok and f"position {last['pos']}" in why
    last["logits"] = None
    last["token"] = (last["token"] + 1) % cm.model.vocab_size
    ok, why = bench._check(r["steps"], r["tokens"], cm.qm)
    assert not ok and "token differs" in why


def test_bad_arguments_are_usage_errors(capsys):
    for argv in (["--prompts", "0"], ["--prompts", "a,b"], ["--prompts", "1,,9"], ["--prompts", ""],
                 ["--clock-mhz", "0"], ["--clock-mhz", "-5"], ["--clock-mhz", "nan"],
                 ["--clock-mhz", "inf"],
                 ["--decode-steps", "0"],
                 ["--config", "mesh=banana"]):
        with pytest.raises(SystemExit) as e:
            bench.main(argv)
        assert e.value.code == 2, argv


@pytest.mark.parametrize("model, message", [
    ("", "--model is empty: give a llama2.c checkpoint file, or leave --model out for the "
         "default model (python -m chipotle.sim.bench --help lists the options)"),
    (".", "--model . is a directory; give the checkpoint file (e.g. stories260K.bin)"),
    ("/no/such/checkpoint.bin", "checkpoint not found: /no/such/checkpoint.bin (given with "
                                "--model)"),
])
def test_model_that_is_no_file_is_named_as_what_it_is(capsys, model, message):
    """An empty ``--model`` (which is ``Path('.')``), a folder and a missing file: one line
    each saying what was given (they were ``[Errno 21] Is a directory: '.'`` and ``[Errno
    2] No such file or directory``), before anything runs."""
    with pytest.raises(SystemExit) as e:
        bench.main(["--backend", "isasim", "--prompts", "1", "--model", model])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and err == (
        f"python -m chipotle.sim.bench: error: {message}\n"), err


def test_json_path_is_checked_before_the_run(capsys, tmp_path):
    """A --json the figures cannot be written to is refused before the benchmark runs (a
    missing folder failed with a traceback after the run, its figures lost)."""
    for path, why in [(tmp_path / "no" / "x.json", "does not exist"),
                      (tmp_path, "is a folder")]:
        with pytest.raises(SystemExit) as e:
            bench.main(["--backend", "isasim", "--prompts", "1", "--json", str(path)])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"--json {path}: " in err and why in err, err


def test_missing_model_dir_says_where_it_looked(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(tmp_path / "none"))
    with pytest.raises(SystemExit) as e:
        bench.main(["--backend", "isasim", "--prompts", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"checkpoint not found: {tmp_path / 'none' / 'stories260K.bin'} (from " \
           f"$CHIPOTLE_MODEL_DIR={tmp_path / 'none'}" in err and "make models" in err


@pytest.mark.model
def test_tensor_fit_error_is_one_usage_line(capsys, model_paths):
    """A mesh too small for stories260K's tensor placement: the fit error and a mesh that
    fits, as a usage error (the search for a fit used to end in a traceback), after the line
    that says the search runs."""
    import re
    with pytest.raises(SystemExit) as e:
        bench.main(["--backend", "isasim", "--model", str(model_paths[0]), "--prompts", "1",
                    "--config", "mesh=1x3"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 2, err
    assert lines[0] == ("checking which configurations fit stories260K.bin (it does not fit as "
                        "given; this can take a minute) ..."), err
    assert re.search(r"needs [\d,]+ bytes of SRAM .* a configuration that fits: "
                     r"--config mesh=\d+x\d+", err), err


@pytest.mark.model
def test_prompt_past_the_context_is_refused(capsys, model_paths):
    with pytest.raises(SystemExit) as e:
        bench.main(["--backend", "isasim", "--model", str(model_paths[0]), "--context", "64",
                    "--prompts", "1,64"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err == ("python -m chipotle.sim.bench: error: a 64-token prompt and 1 decode step "
                   "need 65 positions, more than the compiled context 64: give --context 65 "
                   "or more (at most the model's seq_len, 512)\n"), err
    # past the model's seq_len no context helps: the prompts must be shorter
    with pytest.raises(SystemExit) as e:
        bench.main(["--backend", "isasim", "--model", str(model_paths[0]), "--prompts", "600"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == (
        "python -m chipotle.sim.bench: error: a 600-token prompt and 1 decode step need 601 "
        "positions, more than the model's seq_len 512: give prompt lengths of at most 511 "
        "(--prompts)\n"), err


@pytest.mark.model
@pytest.mark.parametrize("argv, message", [
    (["--decode-steps", "9999999999"],
     "--decode-steps 9999999999 with a 256-token prompt (the longest of --prompts) needs "
     "10000000255 positions, more than the model's seq_len 512: give --decode-steps 256 or "
     "fewer (python -m chipotle.sim.bench --help lists the options)"),
    (["--prompts", "1", "--decode-steps", "512"],
     "--decode-steps 512 with a 1-token prompt needs 513 positions, more than the model's "
     "seq_len 512: give --decode-steps 511 or fewer (python -m chipotle.sim.bench --help "
     "lists the options)"),
    (["--prompts", "600", "--decode-steps", "600"],
     "a 600-token prompt and 600 decode steps need 1200 positions, more than the model's "
     "seq_len 512: give prompt lengths below 512 (--prompts) and fewer --decode-steps"),
    (["--config", "ulx3s", "--prompts", "1", "--decode-steps", "300"],
     "the longest context it holds, 204, is shorter than the 301 positions the longest "
     "prompt and the decode steps need: give --decode-steps 203 or fewer; for 301 positions, "
     "a configuration that fits: --config ulx3s,sram_kib="),
])
def test_decode_steps_past_the_context_name_the_most_that_fit(capsys, model_paths, argv,
                                                              message):
    """Decode steps beyond what the model's positions (or the chip's longest context) leave
    after the longest prompt: one line naming the most ``--decode-steps`` that fit, not a
    negative prompt length (``give prompt lengths of at most -9999999487``) or 0; past the
    model's ``seq_len`` before any compile."""
    with pytest.raises(SystemExit) as e:
        bench.main(["--backend", "isasim", "--model", str(model_paths[0]), *argv])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "", err
    lines = err.splitlines()
    assert lines[-1].startswith("python -m chipotle.sim.bench: error: ") and (
        message in lines[-1]), err
    # only the search's note before it, when the chip holds fewer positions than seq_len
    assert len(lines) == (2 if "ulx3s" in argv else 1), err


@pytest.mark.model
def test_printed_command_repeats_the_run(capsys, model_paths):
    """The table's header names a command that reruns the benchmark as it ran (every option
    that changes a figure: context, clock, model, decode steps)."""
    import re
    import shlex
    argv = ["--backend", "isasim", "--config", "ulx3s", "--prompts", "1", "--context", "8",
            "--clock-mhz", "15.25", "--decode-steps", "2", "--model", str(model_paths[0])]
    assert bench.main(argv) == 0
    first = capsys.readouterr().out
    [cmd] = re.findall(r"^# chipotle benchmark: .*\((python -m chipotle\.sim\.bench .*)\)$",
                       first, re.M)
    words = shlex.split(cmd)
    assert words[:3] == ["python", "-m", "chipotle.sim.bench"]
    for opt in ("--context", "--clock-mhz", "--decode-steps", "--model"):
        assert opt in words, cmd
    assert bench.main(words[3:]) == 0
    assert capsys.readouterr().out == first
    # the "MAC busy" columns say what they measure (not a share of the peak MACs)
    assert "MAC busy: the share of tile-cycles a matrix unit streamed weights" in first


@pytest.mark.model
def test_bench_does_not_suggest_a_context_too_short_for_its_prompts(capsys, model_paths):
    """The default prompts (up to 256 tokens) on the ulx3s chip, which holds fewer positions:
    the refusal says the prompts need more positions than the chip holds, and does not offer
    the --context that the bench would then refuse."""
    from chipotle.hw.fpga.boards import BOARDS
    most = BOARDS["ulx3s-85f"].context
    assert most < 257
    with pytest.raises(SystemExit) as e:
        bench.main(["--backend", "isasim", "--config", "ulx3s", "--model", str(model_paths[0])])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert (f"the longest context it holds, {most}, is shorter than the 257 positions the "
            f"longest prompt and the decode steps need: give prompt lengths of at most "
            f"{most - 1} (--prompts") in err, err
    assert f"--context {most}" not in err, err
    # and what holds them: a configuration that compiles for the 257 positions
    import re

    from chipotle.config import ChipConfig
    from chipotle.model import load_checkpoint
    m = re.search(r"for 257 positions, a configuration that fits: --config (ulx3s,\S+)", err)
    assert m, err
    compile_model(load_checkpoint(model_paths[0]), ChipConfig.from_string(m.group(1)), 257,
                  placement="tensor")


@pytest.mark.model
def test_bench_does_not_ask_for_a_context_the_chip_cannot_hold(capsys, model_paths):
    """With --context too short for the prompts, the refusal asks for the context the
    prompts need only if the chip holds it; on the ulx3s chip, which holds `most`
    positions, prompts needing `most + 1` are told the longest prompt that fits instead."""
    from chipotle.hw.fpga.boards import BOARDS
    most = BOARDS["ulx3s-85f"].context
    argv = ["--backend", "isasim", "--config", "ulx3s", "--model", str(model_paths[0]),
            "--context", "8", "--decode-steps", "1"]
    with pytest.raises(SystemExit):
        bench.main([*argv, "--prompts", str(most)])
    err = capsys.readouterr().err
    assert f"and a context of {most + 1} does not fit this configuration either" in err, err
    assert f"give prompt lengths of at most {most - 1}" in err, err
    assert f"--context {most + 1}" not in err, err
    with pytest.raises(SystemExit):            # one position fewer: that context is the fix
        bench.main([*argv, "--prompts", str(most - 1)])
    err = capsys.readouterr().err
    assert f"give --context {most} or more" in err, err


def test_decode_sweep_compares_the_weighted_sum_split(monkeypatch):
    """`chipotle.sim.decode_sweep.sweep` on the ISA simulator, the small model on 3 x 2
    tiles (whose partners take weighted-sum tails) with session 13's share of the keys (the
    one that leaves the small context tails): a step at every position; with every tail
    (`WSUM_SPLIT_FROM` 0) the steps differ from those without (a value past the context)
    exactly where the split hands a tail over, and the compiler's setting is restored."""
    from chipotle.compiler import tensor
    from chipotle.sim.decode_sweep import sweep
    monkeypatch.setattr(tensor, "WSUM_SPLIT_SHARE", 0.545)
    monkeypatch.setattr(tensor, "WSUM_SPLIT_OFFSET", 6.5)
    qm, cfg, last = small_model(), SMALL.replace(mesh_width=3, mesh_height=2,
                                                 imem_words=1024), 20
    saved = tensor.WSUM_SPLIT_FROM
    tails, none = (sweep(qm, cfg, v, last, "isasim") for v in (0, 10_000))
    assert tensor.WSUM_SPLIT_FROM == saved
    assert len(tails) == len(none) == last + 1 and min(none) > 0
    W = cfg.word_bytes
    monkeypatch.setattr(tensor, "WSUM_SPLIT_FROM", 0)     # the positions with a tail then
    split = [p for p in range(last + 1) if tensor._wsum_split(p + 1, W) < p + 1]
    assert split, "no position with a tail: the test shows nothing"
    assert [p for p in range(last + 1) if tails[p] != none[p]] == split, (tails, none)


def test_decode_sweep_first_tail_is_where_the_split_starts(monkeypatch):
    """`first_tail_keys` is the fewest keys with a tail at every split setting, and leaves
    the compiler's setting as it was (the sweep's note: a ``--to`` below it compares
    nothing)."""
    from chipotle.compiler import tensor
    from chipotle.sim.decode_sweep import first_tail_keys
    saved = tensor.WSUM_SPLIT_FROM
    for W in (8, 16):
        n = first_tail_keys(W)
        assert tensor.WSUM_SPLIT_FROM == saved
        monkeypatch.setattr(tensor, "WSUM_SPLIT_FROM", 0)
        assert tensor._wsum_split(n, W) < n
        assert all(tensor._wsum_split(k, W) == k for k in range(1, n))
        monkeypatch.setattr(tensor, "WSUM_SPLIT_FROM", saved)


@pytest.mark.model
@pytest.mark.parametrize("argv, message", [
    (["--config", "default,mesh=1x1"], "bytes of SRAM at context 512, but a tile has 131,072; "
                                       "a configuration that fits: --config mesh=3x3"),
    (["--config", "small"], "a configuration that fits: --config small,sram_kib="),
    (["--config", "ulx3s", "--to", "300"], "the longest context it holds, 204, is shorter than "
                                           "the 301 positions of --to 300: give a --to below "
                                           "204; for 301 positions, a configuration that "
                                           "fits: --config ulx3s,sram_kib="),
])
def test_decode_sweep_refuses_a_configuration_that_does_not_fit(capsys, model_paths,
                                                                 monkeypatch, argv, message):
    """``python -m chipotle.sim.decode_sweep`` on a chip too small for stories260K: the
    refusal ``python -m chipotle.compiler`` gives (`chipotle.cli.compile_for_module`), one
    ``error:`` line naming the configurations that fit, before any step runs (it was a
    `FitError` traceback); nothing on stdout."""
    from chipotle.compiler.__main__ import main as compiler_main
    from chipotle.sim.decode_sweep import main
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(model_paths[0].parent))
    given = argv
    refusal = refused(capsys, main, ["--backend", "isasim", *given,
                                     *([] if "--to" in given else ["--to", "3"])],
                      "python -m chipotle.sim.decode_sweep")
    assert message in refusal, refusal
    # the compiler's own refusal of that configuration, word for word (but for --to and
    # the progress line of its search, on stderr before it)
    if "--to" not in given:
        with pytest.raises(SystemExit) as c:
            compiler_main(given)
        err = capsys.readouterr().err
        assert c.value.code == 2 and err.endswith(f"python -m chipotle.compiler: error: "
                                                  f"{refusal}\n"), err


@pytest.mark.model
def test_decode_sweep_runs_at_the_longest_context_the_chip_holds(capsys, model_paths,
                                                                 monkeypatch):
    """On a chip that holds fewer positions than the model's ``seq_len`` the sweep runs at
    the longest context it holds, and says so, as ``python -m chipotle.compiler``; a ``--to``
    past a ``--context`` given is one usage line before the compile."""
    from chipotle.sim.decode_sweep import main
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(model_paths[0].parent))
    assert main(["--backend", "isasim", "--config", "ulx3s", "--to", "3", "--bin", "2",
                 "--split-from", "0"]) == 0
    out, err = capsys.readouterr()
    assert "context 204: the longest this configuration holds the model for" in err, err
    assert out.splitlines()[-1].startswith("    2 .. 3 "), out
    with pytest.raises(SystemExit) as e:
        main(["--backend", "isasim", "--to", "40", "--context", "30"])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and err == (
        "python -m chipotle.sim.decode_sweep: error: --to 40 needs 41 positions, more than "
        "--context 30: give --context 41 or more, or a --to below 30 (python -m "
        "chipotle.sim.decode_sweep --help lists the options)\n"), err
