"""One transformer layer on one tile in the ISA simulator, bit for bit against GoldenModel.

`chipotle.isa.programs` lays out a layer (weights, tables, RoPE, KV cache) in one tile's SRAM
and emits its decode-step program; the simulator runs it for consecutive positions and every
intermediate the golden model traces for that layer — norm outputs, q, k, v, scores,
probabilities, attention output, residuals, FFN hidden states — and the whole KV cache
(values and the keys' scale codes) must be identical.  On stories260K (first and last
layer) and on a small synthetic model with K not a multiple of W and a head size below W;
also the embedding lookup and the model's head (final norm, classifier, argmax).
"""

import numpy as np
import pytest

from chipotle.golden import GoldenModel, quantize
from chipotle.golden import numerics as nx
from chipotle.golden.quantize import calibration_sequences
from chipotle.isa import ErrorCode, IsaConfig, assemble, disassemble
from chipotle.isa.programs import (
    LayerLayout,
    layer_program,
    place_layer,
    read_layer_trace,
    write_step_input,
)
from chipotle.isasim import IsaSim, TileState
from chipotle.model import ModelConfig, load_checkpoint, synthetic_checkpoint
from tbcommon.cli import refused

TILE = (0, 0)
SMALL = dict(dim=16, hidden_dim=40, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=32,
             seq_len=24)


@pytest.fixture(scope="module")
def stories_qm(model_paths):
    return quantize(load_checkpoint(model_paths[0]))


@pytest.fixture(scope="module")
def small_qm():
    ckpt = synthetic_checkpoint(ModelConfig(**SMALL), seed=5, scale=0.3)
    return quantize(ckpt, calibration_sequences(ckpt, n=2, length=16))


def run_layer(qm, layer, tokens, isa, max_pos, check_at=None):
    """Run `layer` for positions 0 .. len(tokens) - 1; compare at `check_at` (default all)."""
    lay = LayerLayout(qm, isa, max_pos=max_pos)
    sim = IsaSim(1, 1, isa)
    place_layer(sim, TILE, lay, layer)
    sym = {}
    sim.load_program(TILE, assemble(layer_program(lay, layer), symbols_out=sym))
    golden = GoldenModel(qm)
    checked = []
    for pos, tok in enumerate(tokens):
        trace = {}
        golden.forward(tok, pos, trace)
        x = trace["x.emb"] if layer == 0 else trace[f"l{layer - 1}.res"]
        write_step_input(sim, TILE, lay, pos, x)
        sim.start(TILE, 0 if pos == 0 else sym["step"])     # tables are loaded once
        sim.run()
        t = sim.tile(TILE)
        assert t.state == TileState.HALTED and t.error == ErrorCode.NONE, t.error_message
        assert sim.events[-1].code == 1
        if check_at is not None and pos not in check_at:
            continue
        got = read_layer_trace(sim, TILE, lay, pos)
        caches = {"key_cache": golden.key_cache, "value_cache": golden.value_cache,
                  "key_mu": golden.key_mu, "key_exp": golden.key_exp}
        for name, value in got.items():
            ref = caches[name][layer, :pos + 1] if name in caches else trace[f"l{layer}.{name}"]
            assert value.dtype == ref.dtype and value.shape == ref.shape, (name, pos)
            if not np.array_equal(value, ref):
                bad = np.argwhere(value != ref)
                pytest.fail(f"layer {layer} position {pos}: `{name}` differs at {len(bad)} "
                            f"element(s), first {bad[0].tolist()}: ISA {value[tuple(bad[0])]}, "
                            f"golden {ref[tuple(bad[0])]}")
        checked.append(pos)
    return sim, lay, checked


@pytest.mark.model
@pytest.mark.parametrize("layer", [0, 4])
def test_stories260k_layer_bit_exact(stories_qm, layer):
    isa = IsaConfig(sram_bytes=128 * 1024)
    tokens = [1, 403, 407, 261, 378, 45, 2, 300, 59]
    sim, lay, checked = run_layer(stories_qm, layer, tokens, isa, max_pos=64,
                                  check_at={0, 1, 5, 8})
    assert checked == [0, 1, 5, 8]
    assert lay.size > 45_000          # the int8 weights alone are ~45 KB
    perf = sim.tile(TILE).perf
    per_token = 64 * 64 * 2 + 32 * 64 * 2 + 172 * 64 * 3             # wq wo, wk wv, w1 w3 w2
    scores = 8 * 8 * sum(range(1, len(tokens) + 1))                    # 8 heads x T x hs
    assert perf.macs == len(tokens) * per_token + scores


def test_small_model_layers_bit_exact(small_qm):
    """dim 16, hidden 40 (K = 40 not a multiple of W = 16), head_size 4 < W, GQA 2:1."""
    isa = IsaConfig(sram_bytes=16 * 1024, word_bytes=16, max_m=2, lanes=4)
    for layer in (0, 1):
        _, _, checked = run_layer(small_qm, layer, [1, 5, 9, 3, 30, 2, 7, 7], isa, max_pos=24)
        assert checked == list(range(8))


def test_program_is_position_independent_and_short(small_qm):
    isa = IsaConfig(sram_bytes=16 * 1024)
    lay = LayerLayout(small_qm, isa, max_pos=24)
    words = assemble(layer_program(lay, 0))
    assert len(words) < 80
    assert assemble(disassemble(words)) == words
    with pytest.raises(ValueError, match="needs .* bytes of SRAM"):
        LayerLayout(small_qm, IsaConfig(sram_bytes=4096), max_pos=24)
    assert "kcache" in lay.memory_map()


def test_embedding_and_head_bit_exact(small_qm):
    """Embedding lookup (`reqm` at a token-dependent address), final norm, classifier, argmax."""
    qm, c = small_qm, small_qm.config
    isa = IsaConfig(sram_bytes=16 * 1024)
    W = isa.word_bytes
    E, EMS, G, EPS, TOK, X = 0x0, 0x400, 0x500, 0x540, 0x548, 0x600
    XN, XQ, LOG, OUT = 0x640, 0x680, 0x700, 0x800
    TABS = 0x1000
    sim = IsaSim(1, 1, isa)
    emb = np.zeros((c.vocab_size, isa.pad(c.dim)), np.int8)
    emb[:, :c.dim] = qm.embedding.w
    sim.write(TILE, E, emb)
    sim.write(TILE, EMS, np.stack([qm.embedding.m, qm.embedding.s], 1).astype("<u2"))
    CMS = 0x900
    sim.write(TILE, CMS, np.stack([qm.classifier.m, qm.classifier.s], 1).astype("<u2"))
    sim.write(TILE, G, qm.final_norm.gain.astype("<i2"))
    sim.write(TILE, EPS, np.array([qm.final_norm.eps], "<i8"))
    sim.write(TILE, TABS, qm.rsqrt_table.astype("<u2"))
    sim.write(TILE, TABS + 0x800, qm.dynquant_table.astype("<u2"))
    sym = {}
    sim.load_program(TILE, assemble(f"""
        table rsqrt, {TABS}
        table dynq, {TABS + 0x800}
        ld    r1, {TOK}
        mul   r2, r1, {isa.pad(c.dim)}
        mul   r3, r1, 4
        reqm.i16.i8     {X}, r2+{E}, r3+{EMS}, {c.dim}      ; x = requant(E8[tok], m, s)
    head:
        rmsnorm.i16.i16 {XN}, {X}, {G}, {c.dim}, {EPS}, {qm.final_norm.shift}
        dynq.i8.i16     {XQ}, {XN}, {c.dim}
        matmul.i32      {LOG}, {XQ}, {E}, {CMS}, {c.vocab_size}, {c.dim}, 1   ; shared weights
        argmax.i32.i32  {OUT}, {LOG}, {c.vocab_size}
        halt
    """, symbols_out=sym))
    assert qm.classifier.w is qm.embedding.w
    golden = GoldenModel(qm)
    for tok in (0, 7, c.vocab_size - 1):
        trace = {}
        golden.forward(tok, 0, trace)
        x = trace["x.emb"]
        sim.write(TILE, TOK, np.array([tok], "<i4"))
        sim.start(TILE)
        sim.run()
        assert sim.tile(TILE).error == ErrorCode.NONE, sim.tile(TILE).error_message
        np.testing.assert_array_equal(sim.read(TILE, X, c.dim, np.int16), x)
        # the head's numerics (final norm, classifier, argmax) applied to this row
        xn = nx.rmsnorm(x[None], qm.final_norm.gain, qm.final_norm.shift, qm.final_norm.eps,
                        qm.rsqrt_table)
        x8, mu, b = nx.dynquant(xn, qm.dynquant_table)
        logits = nx.requant_dyn(nx.matmul(x8, qm.classifier.w), mu, b, qm.classifier.m,
                                qm.classifier.s, 32)[0]
        np.testing.assert_array_equal(sim.read(TILE, LOG, c.vocab_size, np.int32), logits)
        assert sim.read(TILE, OUT, 1, np.int32)[0] == nx.argmax(logits)
        np.testing.assert_array_equal(sim.read(TILE, XQ + W, c.dim, np.int8), x8[0])
        # the golden model's own head: its last residual through the program from `head`
        # gives its final norm, logits and argmax
        sim.write(TILE, X, trace[f"l{c.n_layers - 1}.res"].astype("<i2"))
        sim.start(TILE, sym["head"])
        sim.run()
        assert sim.tile(TILE).error == ErrorCode.NONE, sim.tile(TILE).error_message
        np.testing.assert_array_equal(sim.read(TILE, XN, c.dim, np.int16),
                                      trace["final_norm"].reshape(-1))
        np.testing.assert_array_equal(sim.read(TILE, LOG, c.vocab_size, np.int32),
                                      trace["logits"].reshape(-1))
        assert sim.read(TILE, OUT, 1, np.int32)[0] == int(np.argmax(trace["logits"]))


@pytest.mark.parametrize("argv", [["--sram", "0"], ["--sram", "-5"],
                                  ["--sram", "100000000"], ["--sram", "513"]])
def test_programs_command_refuses_sram_sizes_a_tile_cannot_have(capsys, argv):
    """``python -m chipotle.isa.programs --sram``: a size that is not positive or is beyond
    what a tile's SRAM word addresses reach (`chipotle.config.sram_reach`: 512 KiB with
    8-byte words) is one usage line, before the model is read (``--sram 100000000`` asked
    numpy for 95 GiB; 0 was a traceback)."""
    from chipotle.isa.programs import main
    err = refused(capsys, main, argv, "python -m chipotle.isa.programs")
    assert (f"--sram must be in 1 .. 512 (KiB; a tile's SRAM word addresses reach 512 KiB "
            f"with 8-byte words), not {argv[1]} (python -m chipotle.isa.programs --help "
            f"lists the options)") == err, err


@pytest.mark.model
@pytest.mark.parametrize("argv, message", [
    (["--max-pos", "0"], "--max-pos must be in 1 .. 512 (the model's seq_len), not 0 ("),
    (["--max-pos", "-1"], "--max-pos must be in 1 .. 512 (the model's seq_len), not -1 ("),
    (["--max-pos", "513"], "--max-pos must be in 1 .. 512 (the model's seq_len), not 513 ("),
    (["--max-pos", "512"], "--max-pos 512: the layer needs 138,888 bytes of SRAM, beyond the "
                           "131,072 bytes (128 KiB) the program's immediate offsets reach, "
                           "whatever --sram: give --max-pos 463 or less\n"),
    (["--sram", "1"], "--max-pos 64: the layer needs 67,208 bytes of SRAM (66 KiB); the tile "
                      "has 1,024 (--sram 1): give --sram 66 or more\n"),
    (["--sram", "64"], "the tile has 65,536 (--sram 64): give --sram 66 or more, or --max-pos "
                       "53 or less\n"),
    (["--sram", "60", "--max-pos", "40", "--positions", "30"],
     "give --sram 62 or more, or --max-pos 27 or less with --positions 27 or fewer\n"),
    (["--positions", "65"], "--positions 65 needs --max-pos 65 or more (the KV cache holds "
                            "--max-pos 64 positions) ("),
    (["--max-pos", "4", "--positions", "8"], "--positions 8 needs --max-pos 8 or more (the KV "
                                             "cache holds --max-pos 4 positions) ("),
    (["--positions", "500"], "and with --sram 128 the layer fits the tile up to --max-pos 463: "
                             "give --positions 463 or fewer ("),
    (["--positions", "513"], "--positions must be in 1 .. 512 (the model's seq_len), not 513"),
    (["--positions", "0"], "--positions must be 1 or more (the decode steps run), not 0"),
    (["--positions", "-3"], "--positions must be 1 or more (the decode steps run), not -3"),
    (["--layer", "5"], "--layer 5: the model has layers 0 .. 4 ("),
    (["--layer", "-6"], "--layer -6: the model has layers 0 .. 4 ("),
    (["--layer", "-1"], "--layer -1: the model has layers 0 .. 4 ("),
])
def test_programs_command_refuses_bad_options_before_any_table(capsys, model_paths,
                                                               monkeypatch, argv, message):
    """``python -m chipotle.isa.programs``: a ``--max-pos`` outside the model's positions or
    too long for the tile, ``--positions`` beyond ``--max-pos`` (or none), a ``--layer`` the
    model lacks: one usage line naming what fits, before any table is printed (each was a
    traceback after the memory map, or a silently empty table)."""
    from chipotle.isa.programs import main
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(model_paths[0].parent))
    err = refused(capsys, main, argv, "python -m chipotle.isa.programs")
    assert message in err + "\n", err     # a message ending in "\n" ends the line


@pytest.mark.model
def test_programs_command_runs_the_largest_max_pos_it_names(capsys, model_paths, monkeypatch):
    """The ``--max-pos`` the refusal of 512 names is one that runs (the last layer)."""
    from chipotle.isa.programs import main
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(model_paths[0].parent))
    main(["--max-pos", "463", "--positions", "2", "--layer", "4"])
    out = capsys.readouterr().out
    assert out.startswith("stories260K layer 4, ") and out.splitlines()[-1].startswith("  1 ")
