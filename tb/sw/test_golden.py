"""chipotle.golden: the integer model on synthetic checkpoints and on stories260K.

* integer-only forward: every local variable of every chipotle.golden frame during a forward
  step is an integer (traced with sys.settrace), and every traced intermediate has an integer
  dtype;
* batched prefill bit-identical to sequential decode;
* any llama2.c shape (grouped-query, separate classifier, K not a multiple of 8);
* stories260K: the accuracy targets of docs/numerics.md (teacher-forced top-1 agreement
  >= 95% over 256 positions, >= 32 identical greedy tokens from BOS and "Once upon a time").
"""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from chipotle.golden import GoldenModel, QuantizedModel, quantize
from chipotle.golden import numerics as nx
from chipotle.golden.measure import free_running, greedy, teacher_forced
from chipotle.golden.quantize import calibration_sequences, float_ranges
from chipotle.model import ModelConfig, load_checkpoint, synthetic_checkpoint
from chipotle.reference import Transformer
from tbcommon.cli import refused

GOLDEN_DIR = str(Path(nx.__file__).resolve().parent)

SMALL = dict(dim=16, hidden_dim=40, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=32,
             seq_len=24)


@pytest.fixture(scope="module")
def small():
    ckpt = synthetic_checkpoint(ModelConfig(**SMALL), seed=5, scale=0.3)
    return ckpt, quantize(ckpt, calibration_sequences(ckpt, n=2, length=16))


@pytest.fixture(scope="session")
def stories(model_paths):
    """stories260K, its quantised parameters (once per session) and the float reference."""
    ckpt = load_checkpoint(model_paths[0])
    return ckpt, quantize(ckpt), Transformer(ckpt)


# -- integer-only --------------------------------------------------------------------------------

def _floaty(v):
    if isinstance(v, (float, complex, np.floating, np.complexfloating)):
        return True
    return isinstance(v, np.ndarray) and v.dtype.kind in "fc"


def test_forward_is_integer_only(small):
    ckpt, qm = small
    model = GoldenModel(qm)
    offenders = set()
    traced = set()

    def local(frame, event, arg):
        for name, v in frame.f_locals.items():
            if _floaty(v):
                offenders.add((frame.f_code.co_name, name, type(v).__name__))
        if event == "return" and _floaty(arg):
            offenders.add((frame.f_code.co_name, "<return>", type(arg).__name__))
        return local

    def tracer(frame, event, arg):
        if frame.f_code.co_filename.startswith(GOLDEN_DIR):
            traced.add(frame.f_code.co_name)
            return local
        return None

    sys.settrace(tracer)
    try:
        model.forward(3, 0)
        model.forward(7, 1)
        model.forward_batch([1, 2, 3, 4], 2)
    finally:
        sys.settrace(None)
    # the tracer looked inside the golden model's frames (a GOLDEN_DIR that matched no
    # frame's file name, a path spelt another way, would leave nothing to check and pass)
    assert {"forward", "forward_batch", "matmul", "rmsnorm", "softmax", "rope",
            "silu"} <= traced, sorted(traced)
    assert not offenders, sorted(offenders)


def test_trace_is_integer_and_complete(small):
    ckpt, qm = small
    model = GoldenModel(qm)
    model.forward(1, 0)
    trace = {}
    logits = model.forward(2, 1, trace)
    c = ckpt.config
    assert logits.dtype == np.int32 and logits.shape == (c.vocab_size,)
    for name, v in trace.items():
        assert isinstance(v, np.ndarray) and v.dtype.kind in "iu", name
    assert trace["l0.att_norm8"].dtype == np.int8 and trace["l0.att_norm8"].shape == (c.dim,)
    assert trace["l1.q"].shape == (c.n_heads, c.head_size) and trace["l1.q"].dtype == np.int8
    assert trace["l1.k"].shape == (c.n_kv_heads, c.head_size)
    assert trace["l0.p"].shape == (c.n_heads, 2) and trace["l0.p"].dtype == np.uint16
    assert trace["l1.gate"].shape == (c.hidden_dim,) and trace["l1.res"].dtype == np.int16
    assert (trace["logits"] == logits).all()
    # the names and dtypes `forward_batch` documents, and no others
    want = {"x.emb": np.int16, "final_norm": np.int16, "logits": np.int32}
    per_layer = dict(att_norm=np.int16, att_norm8=np.int8, q16=np.int16, k16=np.int16,
                     q=np.int8, k=np.int8, v=np.int8, scores=np.int32, t=np.int32,
                     p=np.uint16, att_acc=np.int32, att_out8=np.int8, att_res=np.int16,
                     ffn_norm=np.int16, ffn_norm8=np.int8, h1=np.int16, h3=np.int16,
                     silu=np.int16, gate=np.int32, gate8=np.int8, res=np.int16)
    for li in range(c.n_layers):
        want.update({f"l{li}.{k}": v for k, v in per_layer.items()})
    assert {k: v.dtype for k, v in trace.items()} == {k: np.dtype(v) for k, v in want.items()}
    # Every probability row sums to 1.0 (2**15) within the reciprocal table's precision.
    assert (np.abs(trace["l0.p"].astype(np.int64).sum(-1) - 32768) < 128).all()


# -- prefill / decode ----------------------------------------------------------------------------

def test_batch_is_bit_identical_to_sequential(small):
    ckpt, qm = small
    rng = np.random.default_rng(6)
    tokens = rng.integers(0, ckpt.config.vocab_size, 20).tolist()
    seq = GoldenModel(qm)
    want = np.stack([seq.forward(t, p) for p, t in enumerate(tokens)])
    bat = GoldenModel(qm)
    got = np.concatenate([bat.forward_batch(tokens[:7], 0), bat.forward_batch(tokens[7:8], 7),
                          bat.forward_batch(tokens[8:], 8)])
    assert got.dtype == np.int32
    assert (got == want).all()
    assert (bat.key_cache == seq.key_cache).all() and (bat.value_cache == seq.value_cache).all()
    assert (bat.key_mu == seq.key_mu).all() and (bat.key_exp == seq.key_exp).all()
    # Traces agree row for row too.
    tb, ts = {}, {}
    bat.forward_batch(tokens[:5], 0, tb)
    for p, t in enumerate(tokens[:5]):
        ts = {}
        seq.forward(t, p, ts)
        for name in ("l1.q", "l1.k", "l1.v", "l0.att_acc", "l1.h1", "l1.gate", "logits"):
            assert (tb[name][p] == ts[name]).all(), (name, p)
        assert (tb["l1.p"][p][:, :p + 1] == ts["l1.p"]).all()
        assert not tb["l1.p"][p][:, p + 1:].any()          # causal mask


def test_reset_and_rewind(small):
    ckpt, qm = small
    model = GoldenModel(qm)
    a = [model.forward(t, p) for p, t in enumerate([1, 5, 9])]
    model.reset()
    b = [model.forward(t, p) for p, t in enumerate([1, 5, 9])]
    assert all((x == y).all() for x, y in zip(a, b, strict=True))
    model.forward(2, 1)                              # rewind to position 1, other token
    model.forward(5, 1)                              # and back
    assert (model.forward(9, 2) == a[2]).all()


def test_errors(small):
    ckpt, qm = small
    model = GoldenModel(qm)
    with pytest.raises(ValueError, match="skips positions"):
        model.forward(1, 3)
    with pytest.raises(ValueError, match="`tokens` must be in"):
        model.forward(ckpt.config.vocab_size, 0)
    with pytest.raises(ValueError, match="context length"):
        model.forward_batch([1] * (ckpt.config.seq_len + 1), 0)
    big = SimpleNamespace(config=ModelConfig(dim=1 << 17, hidden_dim=8, n_layers=1, n_heads=1,
                                             n_kv_heads=1, vocab_size=4, seq_len=4),
                          weights=None)
    with pytest.raises(ValueError, match="`K` must be ≤ 65536, not 131072"):
        quantize(big)
    # degenerate weights: the error names what cannot be quantised
    w = ckpt.weights

    def with_weights(**change):
        return type(ckpt)(ckpt.config, type(w)(**{**vars(w), **change}), ckpt.format,
                          ckpt.group_size)

    zero = np.zeros_like(w.token_embedding)
    shared = {"wcls": zero} if ckpt.config.shared_classifier else {}
    with pytest.raises(ValueError, match="`token_embedding` cannot be quantised"):
        quantize(with_weights(token_embedding=zero, **shared), [[1, 2, 3]])
    huge = w.wq.copy()
    huge[0, 0, 3] = 1e30
    with pytest.raises(ValueError, match="layer 0's attention score scale cannot be quantised"):
        quantize(with_weights(wq=huge), [[1, 2, 3]])
    # calibration data that calibrates nothing, or indexes outside the model
    V, T = ckpt.config.vocab_size, ckpt.config.seq_len
    for calib, msg in [([], "holds no token sequence"), ([[1, 2], []], "sequence 1 is empty"),
                       ([[1, V]], f"token {V}, outside the vocabulary"),
                       ([[-1]], "token -1, outside"), ([[0.5, 1.5]], "integer token ids"),
                       ([[1] * (T + 1)], f"more than the model's seq_len {T}")]:
        with pytest.raises(ValueError, match=msg):
            quantize(ckpt, calib)


# -- shapes --------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [
    dict(),
    dict(shared_classifier=False),
    dict(n_kv_heads=4),                               # multi-head (kv_mul 1)
    dict(n_kv_heads=1, hidden_dim=172 // 4),          # multi-query, hidden not a multiple of 8
    dict(dim=24, n_heads=2, n_kv_heads=1, hidden_dim=172),   # head_size 12, K = 172
])
def test_any_shape_tracks_float(changes):
    cfg = ModelConfig(**{**SMALL, **changes})
    ckpt = synthetic_checkpoint(cfg, seed=7, scale=0.3)
    qm = quantize(ckpt, calibration_sequences(ckpt, n=2, length=16))
    if not cfg.shared_classifier:
        assert qm.classifier.w is not qm.embedding.w
    golden, ref = GoldenModel(qm), Transformer(ckpt)
    tokens = np.random.default_rng(8).integers(0, cfg.vocab_size, 16).tolist()
    gl = golden.dequantize_logits(golden.forward_batch(tokens, 0))
    rl = np.stack([ref.forward(t, p) for p, t in enumerate(tokens)])
    rng_ = rl.max() - rl.min()
    assert np.abs(gl - rl).mean() < 0.03 * rng_, np.abs(gl - rl).mean() / rng_
    assert (np.argmax(gl, -1) == np.argmax(rl, -1)).mean() >= 0.75


def test_calibration_forward_matches_reference(small):
    ckpt, _ = small
    tokens = [1, 4, 9, 16, 25, 3, 7]
    _, (logits,) = float_ranges(ckpt, [tokens])
    ref = Transformer(ckpt)
    want = np.stack([ref.forward(t, p) for p, t in enumerate(tokens)])
    np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-4)


def test_quantized_model_fields(small):
    ckpt, qm = small
    assert isinstance(qm, QuantizedModel)
    for ly in qm.layers:
        for lin in (ly.wq, ly.wk, ly.wv, ly.wo, ly.w1, ly.w2, ly.w3):
            assert lin.w.dtype == np.int8 and np.abs(lin.w.astype(np.int32)).max() <= 127
            assert ((lin.m >= 1 << 14) & (lin.m < 1 << 15)).all() and (lin.s >= 0).all()
        assert ly.att_norm.gain.dtype == np.int16
    assert qm.rope_cos.shape == (ckpt.config.seq_len, ckpt.config.head_size // 2)
    assert qm.classifier.w is qm.embedding.w                         # shared classifier


# -- stories260K ---------------------------------------------------------------------------------

@pytest.mark.model
def test_stories_teacher_forced_agreement(stories):
    ckpt, qm, ref = stories
    tf = teacher_forced(GoldenModel(qm), ref, 256)
    assert tf.agreement >= 0.95, tf


@pytest.mark.model
@pytest.mark.parametrize("prompt", ["", "Once upon a time"])
def test_stories_free_running_greedy(stories, model_paths, prompt):
    from chipotle.tokenizer import load_tokenizer

    ckpt, qm, ref = stories
    ids = load_tokenizer(model_paths[1], 512).encode(prompt, bos=True)
    fr = free_running(GoldenModel(qm), ref, ids, len(ids) + 40, prompt)
    assert fr.identical >= 32, fr


@pytest.mark.model
def test_stories_batch_equals_sequential(stories):
    ckpt, qm, ref = stories
    tokens = greedy(ref, [1], 24)
    seq = GoldenModel(qm)
    want = np.stack([seq.forward(t, p) for p, t in enumerate(tokens)])
    bat = GoldenModel(qm)
    got = np.concatenate([bat.forward_batch(tokens[:13], 0), bat.forward_batch(tokens[13:], 13)])
    assert (got == want).all()


@pytest.mark.model
@pytest.mark.parametrize(("args", "says"), [
    (["--positions", "512"], "--positions must be in 1 .. 511"),
    (["--positions", "0"], "--positions must be in 1 .. 511"),
    (["--steps", "5"], "--steps must be in 6 .. 512 (more than the longest prompt's 5 tokens"),
    (["--steps", "513"], "--steps must be in 6 .. 512"),
    (["--model", "{dir}/nope.bin"], "--model {dir}/nope.bin: no such file"),
    (["--model", ""], "argument --model: is empty: give the file"),
    (["--model", "{tok}"], "{tok}: the file is a llama2.c tokenizer file"),
    (["--tokenizer", "{ckpt}"], "{ckpt}: the file is a legacy llama2.c model checkpoint"),
])
def test_measure_refuses_bad_input_in_one_line(model_paths, tmp_path, capsys, args, says):
    """``python -m chipotle.golden.measure`` refuses options outside the model's seq_len and
    files that are not a checkpoint or a tokenizer with one ``error:`` line, exit status 2,
    before any work (``--positions 512`` ended in a traceback from the reference's forward
    step after quantising, session 39)."""
    from chipotle.golden.measure import main
    ckpt, tok = model_paths
    names = {"dir": tmp_path, "tok": tok, "ckpt": ckpt}
    err = refused(capsys, main, [a.format(**names) for a in args],
                  "python -m chipotle.golden.measure")
    assert says.format(**names) in err, err
