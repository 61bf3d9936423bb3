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

