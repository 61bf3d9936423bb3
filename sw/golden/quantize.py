"""Offline preparation of the golden model: calibration, weight quantisation, multipliers, tables.

Everything here runs once on the host, in floating point, and produces a `QuantizedModel`:
the int8 weights, the integer multipliers and shifts of every requantisation, the tables and
the fixed-point formats.  The forward step (`chipotle.golden.model`) reads only the integer
fields.  The choices are specified (and measured) in ``docs/numerics.md``.

Calibration
-----------
Static activation scales come from the largest magnitudes seen by a float32 forward pass over
calibration sequences.  The default sequences are made by the model itself (data-free, as
LLM-QAT's self-generated data, Liu et al. 2023): BOS, one random token, then tokens sampled at
temperature 1 from the float reference, with fixed seeds.  They are not the evaluation text
(the float model's greedy continuations), though they are drawn from the same model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..model import Checkpoint, ModelConfig
from . import numerics as nx

__all__ = ["QLinear", "QNorm", "QLayer", "QuantizedModel", "Margins", "quantize",
           "calibration_sequences", "float_ranges", "LOGIT_FRAC_BITS", "RMS_EPS"]

#: Logits are int32 with this many fractional bits.
LOGIT_FRAC_BITS = 16
#: llama2.c's RMSNorm epsilon.
RMS_EPS = 1e-5


@dataclass
class QLinear:
    """A quantised matrix with the requantisation of its accumulators.

    Attributes
    ----------
    w : numpy.ndarray
        int8, shape ``(N, K)``, values in ``[-127, 127]``.
    m : numpy.ndarray
        int32, shape ``(N,)``: multiplier per output row, in ``[2**14, 2**15)``.
    s : numpy.ndarray
        int32, shape ``(N,)``: shift per output row, in ``[0, 62]``.
    scale : numpy.ndarray
        float64, shape ``(N,)``: the weight scale per row (offline information only: the
        forward step never reads it).
    """

    w: np.ndarray
    m: np.ndarray
    s: np.ndarray
    scale: np.ndarray


@dataclass
class QNorm:
    """An RMSNorm: its per-channel gain in fixed point and its epsilon.

    The output is int16 with scale ``max|g| sqrt(n) / 32767`` (the largest possible
    ``|g x / rms(x)|`` fits, so it never saturates); it is then quantised dynamically to int8.

    Attributes
    ----------
    gain : numpy.ndarray
        int16, shape ``(n,)``: ``round(g * sqrt(n) / s_out * 2**shift)``.
    shift : int
        Fractional bits of `gain`.
    eps : int
        ``round(1e-5 * n * 2**(2 * F_res))``.
    """

    gain: np.ndarray
    shift: int
    eps: int


@dataclass
class QLayer:
    """The integer parameters of one transformer block.

    Every matrix input is quantised dynamically (`numerics.dynquant`), so the multipliers fold
    ``1 / DQ_UNIT`` and the shifts have the input's exponent ``b`` subtracted at run time
    (`numerics.requant_dyn`); see ``docs/numerics.md``.

    Attributes
    ----------
    att_norm, ffn_norm : QNorm
    wq, wk : QLinear
        Accumulators requantised to the int16 pre-RoPE formats of q and k.
    wv : QLinear
        Accumulators requantised to int8 values (static scale ``s_v``): the V cache format.
    wo, w2 : QLinear
        Accumulators requantised to the int16 residual format.
    w1, w3 : QLinear
        Accumulators requantised to int16 with ``hidden_frac_bits`` fractional bits.
    att_m, att_s : int
        Requantisation of the ``q . k`` dot products (times both scale mantissas) to base-2
        scores with ``EXP2_FRAC_BITS`` fractional bits (folds ``1/sqrt(head_size)`` and
        ``log2(e)``).
    hidden_frac_bits : int
        Fractional bits of the int16 ``w1``/``w3`` outputs and of the SiLU output.
    """

    att_norm: QNorm
    wq: QLinear
    wk: QLinear
    wv: QLinear
    att_m: int
    att_s: int
    wo: QLinear
    ffn_norm: QNorm
    w1: QLinear
    w3: QLinear
    hidden_frac_bits: int
    w2: QLinear


@dataclass
class QuantizedModel:
    """Every integer parameter of the golden model: what the compiler places in tile SRAM.

    Attributes
    ----------
    config : chipotle.model.ModelConfig
    res_frac_bits : int
        Fractional bits of the int16 residual stream.
    embedding : QLinear
        Token embedding rows (int8, one scale per token) with the requantisation to the
        residual format.
    layers : list of QLayer
    final_norm : QNorm
    classifier : QLinear
        int8 classifier with the requantisation to int32 logits (``LOGIT_FRAC_BITS``).  When
        the checkpoint shares it, ``classifier.w is embedding.w``.
    rope_cos, rope_sin : numpy.ndarray
        int16 Q1.14, shape ``(seq_len, head_size // 2)``.
    rsqrt_table, exp2_table, recip_table, sigmoid_table, dynquant_table : numpy.ndarray
        int32 (see `chipotle.golden.numerics`).
    scales : dict
        Offline information (float activation scales and calibrated ranges by site), for the
        documentation and the measurements; the forward step never reads it.
    """

    config: ModelConfig
    res_frac_bits: int
    embedding: QLinear
    layers: list
    final_norm: QNorm
    classifier: QLinear
    rope_cos: np.ndarray
    rope_sin: np.ndarray
    rsqrt_table: np.ndarray
    exp2_table: np.ndarray
    recip_table: np.ndarray
    sigmoid_table: np.ndarray
    dynquant_table: np.ndarray
    scales: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Margins:
    """Headroom factors applied to calibrated maxima when choosing the static formats.

    A static format holds ``margin * max|x|`` (calibrated); values beyond saturate.
    """

    residual: float = 2.0
    qk: float = 2.0
    v: float = 1.0
    hidden: float = 2.0


# -- calibration ---------------------------------------------------------------------------------

def calibration_sequences(checkpoint: Checkpoint, n: int = 4, length: int = 128,
                          seed: int = 1234) -> list[list[int]]:
    """Return self-generated calibration token sequences (offline, float).

    Each sequence is BOS (token 1), one uniformly random token, then tokens sampled at
    temperature 1 from `chipotle.reference.Transformer`, with ``numpy.random.default_rng``
    seeded by `seed` + sequence number.

    Parameters
    ----------
    checkpoint : chipotle.model.Checkpoint
    n : int
        Number of sequences.
    length : int
        Tokens per sequence, at most ``seq_len``.

    Returns
    -------
    list of list of int
    """
    from ..reference import Transformer

    c = checkpoint.config
    length = min(length, c.seq_len)
    ref = Transformer(checkpoint)
    out = []
    for i in range(n):
        rng = np.random.default_rng(seed + i)
        ref.reset()
        toks = [1 % c.vocab_size, int(rng.integers(c.vocab_size))]
        for pos in range(length - 1):
            logits = ref.forward(toks[pos], pos).astype(np.float64)
            if pos + 1 < len(toks):
                continue
            p = np.exp(logits - logits.max())
            toks.append(int(rng.choice(c.vocab_size, p=p / p.sum())))
        out.append(toks[:length])
    return out


def _rms(x, g):
    return g * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + RMS_EPS)


def float_ranges(checkpoint: Checkpoint, sequences) -> tuple[dict, list[np.ndarray]]:
    """Run a float32 forward pass over whole sequences and return the largest magnitudes per site.

    Each sequence is processed as one causal batch (the same function as
    `chipotle.reference.Transformer.forward` at every position).

    Returns
    -------
    ranges : dict
        ``{site: float}`` for the model-wide sites ``"res"``, ``"final_norm"``, ``"logits"``
        and ``{site: numpy.ndarray (n_layers,)}`` for ``"att_norm"``, ``"q"``, ``"k"``,
        ``"v"``, ``"att_out"``, ``"ffn_norm"``, ``"hidden"``, ``"gate"`` (q, k after RoPE).
    logits : list of numpy.ndarray
        float32, one ``(len(seq), vocab_size)`` array per sequence.
    """
    c, w = checkpoint.config, checkpoint.weights
    L, hs, H, KV = c.n_layers, c.head_size, c.n_heads, c.n_kv_heads
    per_layer = ("att_norm", "q", "k", "v", "att_out", "ffn_norm", "hidden", "gate")
    r = {k: np.zeros(L) for k in per_layer}
    r.update(res=0.0, final_norm=0.0, logits=0.0)
    all_logits = []

    def upd(key, layer, a):
        r[key][layer] = max(r[key][layer], float(np.abs(a).max()))

    for seq in sequences:
        T = len(seq)
        pos = np.arange(T)
        freq = 10000.0 ** (-np.arange(0, hs, 2) / hs)
        ang = pos[:, None] * freq[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def rot(v, cos=cos, sin=sin):
            out = np.empty_like(v)
            out[..., 0::2] = v[..., 0::2] * cos - v[..., 1::2] * sin
            out[..., 1::2] = v[..., 0::2] * sin + v[..., 1::2] * cos
            return out

        causal = pos[None, :] <= pos[:, None]
        x = w.token_embedding[np.asarray(seq)].astype(np.float32)
        r["res"] = max(r["res"], float(np.abs(x).max()))
        for lay in range(L):
            xb = _rms(x, w.rms_att[lay])
            upd("att_norm", lay, xb)
            q = rot((xb @ w.wq[lay].T).reshape(T, H, hs))
            k = rot((xb @ w.wk[lay].T).reshape(T, KV, hs))
            v = (xb @ w.wv[lay].T).reshape(T, KV, hs)
            upd("q", lay, q)
            upd("k", lay, k)
            upd("v", lay, v)
            kh = np.arange(H) // c.kv_mul
            s = np.einsum("mhd,thd->hmt", q, k[:, kh]) / np.sqrt(hs)
            s = np.where(causal[None], s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            o = np.einsum("hmt,thd->mhd", p, v[:, kh]).reshape(T, -1)
            upd("att_out", lay, o)
            x = x + o @ w.wo[lay].T
            r["res"] = max(r["res"], float(np.abs(x).max()))
            xb = _rms(x, w.rms_ffn[lay])
            upd("ffn_norm", lay, xb)
            h1, h3 = xb @ w.w1[lay].T, xb @ w.w3[lay].T
            upd("hidden", lay, np.concatenate([h1, h3], -1))
            g = h1 / (1.0 + np.exp(-h1)) * h3
            upd("gate", lay, g)
            x = x + g @ w.w2[lay].T
            r["res"] = max(r["res"], float(np.abs(x).max()))
        xb = _rms(x, w.rms_final)
        r["final_norm"] = max(r["final_norm"], float(np.abs(xb).max()))
        logits = xb @ w.wcls.T
        r["logits"] = max(r["logits"], float(np.abs(logits).max()))
        all_logits.append(logits.astype(np.float32))
    return r, all_logits


# -- quantisation --------------------------------------------------------------------------------

def _mults(reals) -> tuple[np.ndarray, np.ndarray]:
    pairs = [nx.quantize_multiplier(v) for v in np.atleast_1d(reals)]
    return (np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.int32))


def _linear(w, out_scale_of_row, name: str = "a weight matrix") -> QLinear:
    """Quantise `w` per row; requantise ``acc`` to a format ``real = acc * out_scale(row)``.

    Raises ValueError naming `name` if a row's requantisation multiplier does not fit.
    """
    q, scale = nx.quantize_rows(w)
    try:
        m, s = _mults(scale * out_scale_of_row)
    except ValueError as e:
        raise ValueError(f"`{name}` cannot be quantised: {e} (its weights or the calibrated "
                         f"activation ranges are out of the integer formats' reach: a "
                         f"degenerate or corrupt checkpoint, all-zero or huge weights)") from None
    return QLinear(q, m, s, scale)


def _norm(g) -> tuple[np.ndarray, float]:
    """Return ``g * sqrt(n) / s_out`` and ``s_out`` of a norm's int16 output."""
    g = np.asarray(g, np.float64)
    bound = float(np.abs(g).max()) * math.sqrt(g.shape[0])
    s_out = (bound if bound > 0 else 1.0) / 32767.0
    return g * math.sqrt(g.shape[0]) / s_out, s_out


def _qnorm(g, res_frac_bits: int) -> tuple[QNorm, float]:
    real, s_out = _norm(g)
    amax = float(np.abs(real).max())
    # |x * gain| <= 2**30 keeps x * gain in int32; shift + 15 + k stays small.
    shift = 0 if amax == 0 else int(math.floor(math.log2(32767.0 / amax)))
    gain = np.clip(np.rint(real * 2.0 ** shift), -32768, 32767).astype(np.int16)
    eps = int(round(RMS_EPS * g.shape[0] * 4.0 ** res_frac_bits))
    return QNorm(gain, shift, eps), s_out


def _frac_bits(amax: float, margin: float, lo: int, hi: int) -> int:
    """Fractional bits of an int16 format holding ``margin * amax``."""
    if amax <= 0:
        return hi
    f = 15 - int(math.ceil(math.log2(amax * margin)))
    return max(lo, min(hi, f))


def _scale(amax: float, margin: float, qmax: int) -> float:
    return (amax * margin if amax > 0 else 1.0) / qmax


def _check_dyn(lin: QLinear, max_b: int, name: str) -> None:
    if int(lin.s.min()) < max_b:
        raise ValueError(f"static shift of `{name}` ({int(lin.s.min())}) is below the largest "
                         f"dynamic exponent ({max_b}): the formats do not fit this checkpoint")


def _check_calibration(calibration, vocab_size: int, seq_len: int) -> None:
    """Refuse calibration data that would calibrate nothing or index outside the model."""
    seqs = list(calibration)
    if not seqs:
        raise ValueError("`calibration` holds no token sequence: the activation formats "
                         "would be calibrated on nothing")
    for i, seq in enumerate(seqs):
        toks = np.asarray(seq).reshape(-1)
        if toks.size == 0:
            raise ValueError(f"calibration sequence {i} is empty")
        if toks.dtype.kind not in "iu":
            raise ValueError(f"calibration sequence {i} must hold integer token ids, not "
                             f"{toks.dtype}")
        if toks.size > seq_len:
            raise ValueError(f"calibration sequence {i} has {toks.size} tokens, more than "
                             f"the model's seq_len {seq_len}")
        bad = toks[(toks < 0) | (toks >= vocab_size)]
        if bad.size:
            raise ValueError(f"calibration sequence {i} holds token {int(bad[0])}, outside "
                             f"the vocabulary [0, {vocab_size})")


def quantize(checkpoint: Checkpoint, calibration=None, margins: Margins = Margins()
             ) -> QuantizedModel:
    """Quantise a checkpoint into the golden model's integer parameters (offline, float).

    Parameters
    ----------
    checkpoint : chipotle.model.Checkpoint
    calibration : list of list of int, optional
        Token sequences for the static activation formats; default `calibration_sequences`.
    margins : Margins
        Headroom over the calibrated maxima.

    Returns
    -------
    QuantizedModel

    Raises
    ------
    ValueError
        If a reduction length exceeds `numerics.MAX_K`, ``head_size`` exceeds 2048 or
        ``seq_len`` exceeds `numerics.MAX_SEQ_LEN`; if ``calibration`` is empty, holds an
        empty sequence, one longer than ``seq_len`` or a token outside the vocabulary; or if
        the calibrated formats do not fit the integer pipeline (the score shift below 30, a
        static shift below the largest dynamic exponent).
    """
    c, w = checkpoint.config, checkpoint.weights
    for name, k in (("dim", c.dim), ("hidden_dim", c.hidden_dim)):
        if k > nx.MAX_K:
            raise ValueError(f"`K` must be ≤ {nx.MAX_K}, not {k} (`{name}`)")
    if c.head_size > 2048:
        raise ValueError(f"`head_size` must be ≤ 2048, not {c.head_size}")
    if c.seq_len > nx.MAX_SEQ_LEN:
        raise ValueError(f"`seq_len` must be ≤ {nx.MAX_SEQ_LEN}, not {c.seq_len}")
    if calibration is None:
        calibration = calibration_sequences(checkpoint)
    _check_calibration(calibration, c.vocab_size, c.seq_len)
    ranges, _ = float_ranges(checkpoint, calibration)

    # Residual: int16 with as many fractional bits as the calibrated maximum allows.
    fr = _frac_bits(ranges["res"], margins.residual, 0, 15)
    res_real = 2.0 ** fr
    unit = float(nx.DQ_UNIT)
    hs = c.head_size
    layers, site_scales = [], []
    for lay in range(c.n_layers):
        att_norm, s_xb = _qnorm(w.rms_att[lay], fr)
        ffn_norm, s_xf = _qnorm(w.rms_ffn[lay], fr)
        s_q = _scale(ranges["q"][lay], margins.qk, 32767)      # int16, pre- and post-RoPE
        s_k = _scale(ranges["k"][lay], margins.qk, 32767)
        s_v = _scale(ranges["v"][lay], margins.v, 127)
        fh = _frac_bits(ranges["hidden"][lay], margins.hidden, nx.SIGMOID_STEP_BITS, 15)
        try:
            att_m, att_s = nx.quantize_multiplier(
                s_q * s_k / unit ** 2 / math.sqrt(hs) * math.log2(math.e)
                * 2.0 ** nx.EXP2_FRAC_BITS)
        except ValueError as e:
            raise ValueError(f"layer {lay}'s attention score scale cannot be quantised: {e} "
                             f"(the calibrated q / k ranges are out of the integer formats' "
                             f"reach: a degenerate or corrupt checkpoint)") from None
        if att_s < 30:
            raise ValueError(f"score shift {att_s} is below 30: the q/k formats do not fit")
        ly = QLayer(
            att_norm=att_norm,
            wq=_linear(w.wq[lay], s_xb / unit / s_q, f"layers[{lay}].wq"),
            wk=_linear(w.wk[lay], s_xb / unit / s_k, f"layers[{lay}].wk"),
            wv=_linear(w.wv[lay], s_xb / unit / s_v, f"layers[{lay}].wv"),
            att_m=att_m, att_s=att_s,
            wo=_linear(w.wo[lay], s_v * 2.0 ** -nx.PROB_FRAC_BITS / unit * res_real,
                       f"layers[{lay}].wo"),
            ffn_norm=ffn_norm,
            w1=_linear(w.w1[lay], s_xf / unit * 2.0 ** fh, f"layers[{lay}].w1"),
            w3=_linear(w.w3[lay], s_xf / unit * 2.0 ** fh, f"layers[{lay}].w3"),
            hidden_frac_bits=fh,
            w2=_linear(w.w2[lay], 2.0 ** (-2 * fh) / unit * res_real, f"layers[{lay}].w2"),
        )
        for name in ("wq", "wk", "wv", "w1", "w3"):
            _check_dyn(getattr(ly, name), 15, f"layers[{lay}].{name}")
        for name in ("wo", "w2"):
            _check_dyn(getattr(ly, name), 31, f"layers[{lay}].{name}")
        layers.append(ly)
        site_scales.append(dict(att_norm=s_xb, q16=s_q, k16=s_k, v=s_v, ffn_norm=s_xf,
                                hidden_frac_bits=fh))
    final_norm, s_fin = _qnorm(w.rms_final, fr)
    emb = _linear(w.token_embedding, res_real, "token_embedding")
    if c.shared_classifier:
        try:
            m, s = _mults(emb.scale * s_fin / unit * 2.0 ** LOGIT_FRAC_BITS)
        except ValueError as e:
            raise ValueError(f"the shared classifier cannot be quantised: {e} (a degenerate "
                             f"or corrupt checkpoint)") from None
        cls = QLinear(emb.w, m, s, emb.scale)
    else:
        cls = _linear(w.wcls, s_fin / unit * 2.0 ** LOGIT_FRAC_BITS, "wcls")
    _check_dyn(cls, 15, "classifier")
    cos, sin = nx.rope_tables(c.seq_len, hs)
    return QuantizedModel(
        config=c, res_frac_bits=fr, embedding=emb, layers=layers,
        final_norm=final_norm, classifier=cls, rope_cos=cos, rope_sin=sin,
        rsqrt_table=nx.rsqrt_table(), exp2_table=nx.exp2_table(),
        recip_table=nx.recip_table(), sigmoid_table=nx.sigmoid_table(),
        dynquant_table=nx.dynquant_table(),
        scales=dict(ranges=ranges, layers=site_scales, final_norm=s_fin, margins=margins,
                    calibration_tokens=sum(len(q) for q in calibration)),
    )
