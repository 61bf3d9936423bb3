"""The golden integer model: a forward step in integers only, the specification of the hardware.

`GoldenModel` runs a llama2 transformer with the integer parameters of a `QuantizedModel`.
Decode (`GoldenModel.forward`) and prefill (`GoldenModel.forward_batch`) are one code path: a
batch of M consecutive positions, with matrix–matrix products on the matrix unit and a causal
mask in attention, so a batch is bit-identical to M single steps.  Each step can record its
intermediates (all integer arrays) in a ``trace`` dict for the RTL testbenches.
"""

from __future__ import annotations

import numpy as np

from ..model import Checkpoint
from . import numerics as nx
from .quantize import QLinear, QuantizedModel, quantize

__all__ = ["GoldenModel"]


def _linear(xq, lin: QLinear, bits: int) -> np.ndarray:
    """Matrix unit then requantisation: ``requant(acc * mu, m[row], s[row] - b)``.

    `xq` is ``(x8, mu, b)``: int8 rows and their dynamic scale codes (``(M, 1)`` each).
    """
    x8, mu, b = xq
    return nx.requant_dyn(nx.matmul(x8, lin.w), mu, b, lin.m, lin.s, bits)


class GoldenModel:
    """Integer-only llama2 forward pass with an int8 KV cache: the hardware's arithmetic.

    Parameters
    ----------
    source : chipotle.model.Checkpoint or QuantizedModel
        A float checkpoint (quantised here with `chipotle.golden.quantize` and its default
        self-generated calibration) or an already quantised model.

    Attributes
    ----------
    q : QuantizedModel
        The integer parameters.
    config : chipotle.model.ModelConfig
    key_cache, value_cache : numpy.ndarray
        int8, shape ``(n_layers, seq_len, kv_dim)``: keys after RoPE and values (static
        scale ``s_v``) of the positions run so far.
    key_mu, key_exp : numpy.ndarray
        int16 and int8, shape ``(n_layers, seq_len, n_kv_heads)``: the dynamic scale code
        ``(mu, b)`` of each cached key head.
    """

    #: Fractional bits of the int32 logits: ``logit = logits * 2**-logit_frac_bits``.
    logit_frac_bits = 16

    def __init__(self, source: Checkpoint | QuantizedModel):
        self.q = source if isinstance(source, QuantizedModel) else quantize(source)
        c = self.config = self.q.config
        self.key_cache = np.zeros((c.n_layers, c.seq_len, c.kv_dim), np.int8)
        self.value_cache = np.zeros_like(self.key_cache)
        self.key_mu = np.zeros((c.n_layers, c.seq_len, c.n_kv_heads), np.int16)
        self.key_exp = np.zeros((c.n_layers, c.seq_len, c.n_kv_heads), np.int8)
        self._filled = 0

    def reset(self) -> None:
        """Forget every cached position, to start a new sequence."""
        self.key_cache[...] = 0
        self.value_cache[...] = 0
        self.key_mu[...] = 0
        self.key_exp[...] = 0
        self._filled = 0

    def forward(self, token: int, pos: int, trace: dict | None = None) -> np.ndarray:
        """Run one position and return the int32 logits of the next token.

        Parameters
        ----------
        token : int
            Input token id, in ``[0, vocab_size)``.
        pos : int
            Position, in ``[0, seq_len)``; positions ``0 .. pos - 1`` must have been run since
            the last `reset` (running an earlier position rewinds the sequence to it).
        trace : dict, optional
            Filled with the intermediates of this step, as `forward_batch` with ``M = 1`` and
            the leading axis removed.

        Returns
        -------
        numpy.ndarray
            int32, shape ``(vocab_size,)``: logits with ``LOGIT_FRAC_BITS`` (16) fractional
            bits.

        Raises
        ------
        ValueError
            If `token` or `pos` is out of range, or `pos` skips positions.
        """
        sub = None if trace is None else {}
        logits = self.forward_batch([token], pos, sub)
        if trace is not None:
            trace.update({k: v[0] for k, v in sub.items()})
        return logits[0]

    def forward_batch(self, tokens, start_pos: int, trace: dict | None = None) -> np.ndarray:
        """Run M consecutive positions as one batch (prefill) and return their logits.

        Bit-identical to M calls of `forward` at ``start_pos, start_pos + 1, ...``.

        Parameters
        ----------
        tokens : sequence of int
            M token ids, M ≥ 1.
        start_pos : int
            Position of ``tokens[0]``; ``start_pos + M <= seq_len``.
        trace : dict, optional
            Filled with integer arrays, each with a leading axis of length M:
            ``"x.emb"`` (int16 residual after the embedding), per layer ``l`` the names
            ``"l{l}.<name>"`` for ``att_norm`` (int16 ``(dim,)``, RMSNorm's output),
            ``att_norm8`` (int8, its dynamic quantisation), ``q16`` / ``k16`` (int16, after
            RoPE, ``(heads, head_size)``), ``q`` / ``k`` (int8, their dynamic quantisation),
            ``v`` (int8), ``scores`` (int32 ``(n_heads, T)``, ``q . k``), ``t`` (int32,
            base-2 scores), ``p`` (uint16 Q1.15 probabilities, 0 beyond the causal limit),
            ``att_acc`` (int32 ``(dim,)``, ``sum p v``), ``att_out8`` (int8, its dynamic
            quantisation), ``att_res`` (int16 residual after attention), ``ffn_norm`` (int16),
            ``ffn_norm8`` (int8), ``h1`` / ``h3`` (int16), ``silu`` (int16), ``gate`` (int32,
            ``silu * h3``), ``gate8`` (int8), ``res`` (int16 residual after the block); then
            ``"final_norm"`` (int16) and ``"logits"`` (int32).  ``T = start_pos + M``;
            entries of ``scores`` and ``t`` beyond a row's position are unspecified.

        Returns
        -------
        numpy.ndarray
            int32, shape ``(M, vocab_size)``.

        Raises
        ------
        ValueError
            If a token or a position is out of range, or `start_pos` skips positions.
        """
        qm, c = self.q, self.config
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        M = tokens.shape[0]
        if M < 1:
            raise ValueError("`tokens` must hold at least one token")
        if tokens.min() < 0 or tokens.max() >= c.vocab_size:
            raise ValueError(f"`tokens` must be in [0, {c.vocab_size}), not "
                             f"{int(tokens.min())}..{int(tokens.max())}")
        if not 0 <= start_pos or start_pos + M > c.seq_len:
            raise ValueError(f"positions must be in [0, {c.seq_len}) (the context length), not "
                             f"{start_pos}..{start_pos + M - 1}")
        if start_pos > self._filled:
            raise ValueError(f"`start_pos` {start_pos} skips positions: only "
                             f"0..{self._filled - 1} are in the KV cache")

        def rec(name, value):
            if trace is not None:
                trace[name] = value

        H, KV, hs, g = c.n_heads, c.n_kv_heads, c.head_size, c.kv_mul
        T = start_pos + M
        pos = np.arange(start_pos, T)
        cos = qm.rope_cos[pos][:, None, :]                     # (M, 1, hs/2)
        sin = qm.rope_sin[pos][:, None, :]
        causal = (np.arange(T)[None, :] <= pos[:, None])[:, None, None, :]   # (M,1,1,T)

        dq = qm.dynquant_table
        emb = qm.embedding
        x = nx.requant(emb.w[tokens], emb.m[tokens][:, None], emb.s[tokens][:, None], 16)
        rec("x.emb", x)
        for li, ly in enumerate(qm.layers):
            p_ = f"l{li}."
            # -- attention ------------------------------------------------------------------
            n = ly.att_norm
            xn = nx.rmsnorm(x, n.gain, n.shift, n.eps, qm.rsqrt_table)       # int16
            xq = nx.dynquant(xn, dq)                                          # int8 + code
            q16 = nx.rope(_linear(xq, ly.wq, 16).reshape(M, H, hs), cos, sin,
                          nx.ROPE_FRAC_BITS, 16)
            k16 = nx.rope(_linear(xq, ly.wk, 16).reshape(M, KV, hs), cos, sin,
                          nx.ROPE_FRAC_BITS, 16)
            v8 = _linear(xq, ly.wv, 8)
            q8, q_mu, q_b = nx.dynquant(q16, dq)                  # one code per query head
            k8, k_mu, k_b = nx.dynquant(k16, dq)                  # one code per KV head
            self.key_cache[li, pos] = k8.reshape(M, -1)
            self.key_mu[li, pos] = k_mu[..., 0]
            self.key_exp[li, pos] = k_b[..., 0]
            self.value_cache[li, pos] = v8
            keys = self.key_cache[li, :T].reshape(T, KV, hs).astype(np.int32)
            kmu = self.key_mu[li, :T].astype(np.int64)            # (T, KV)
            kb = self.key_exp[li, :T].astype(np.int64)
            vals = self.value_cache[li, :T].reshape(T, KV, hs).astype(np.int32)
            # Query head h = kv * g + j reads KV head kv = h // kv_mul.
            qg = q8.reshape(M, KV, g, hs).astype(np.int32)
            nx.check_k(hs)
            scores = np.einsum("mkjd,tkd->mkjt", qg, keys)    # int32, |.| <= hs * 2**14
            mu = q_mu.reshape(M, KV, g, 1).astype(np.int64) * kmu.T[None, :, None, :]
            be = q_b.reshape(M, KV, g, 1).astype(np.int64) + kb.T[None, :, None, :]
            t = nx.requant_dyn(scores, mu, be, ly.att_m, ly.att_s, 32)
            p = nx.softmax(t, causal, qm.exp2_table, qm.recip_table)      # uint16 Q1.15
            acc = np.einsum("mkjt,tkd->mkjd", p.astype(np.int32), vals)   # |.| < 2**24
            acc = acc.reshape(M, H * hs)
            aq = nx.dynquant(acc, dq)
            x = nx.sat(x.astype(np.int32) + _linear(aq, ly.wo, 16), 16)
            rec(p_ + "att_norm", xn)
            rec(p_ + "att_norm8", xq[0])
            rec(p_ + "q16", q16)
            rec(p_ + "k16", k16)
            rec(p_ + "q", q8)
            rec(p_ + "k", k8)
            rec(p_ + "v", v8)
            rec(p_ + "scores", scores.reshape(M, H, T))
            rec(p_ + "t", t.reshape(M, H, T))
            rec(p_ + "p", p.reshape(M, H, T))
            rec(p_ + "att_acc", acc)
            rec(p_ + "att_out8", aq[0])
            rec(p_ + "att_res", x)
            # -- feed-forward ---------------------------------------------------------------
            n = ly.ffn_norm
            xn = nx.rmsnorm(x, n.gain, n.shift, n.eps, qm.rsqrt_table)
            xq = nx.dynquant(xn, dq)
            h1 = _linear(xq, ly.w1, 16)
            h3 = _linear(xq, ly.w3, 16)
            sl = nx.silu(h1, ly.hidden_frac_bits, qm.sigmoid_table)
            gate = sl.astype(np.int32) * h3.astype(np.int32)      # |.| <= 2**30
            gq = nx.dynquant(gate, dq)
            x = nx.sat(x.astype(np.int32) + _linear(gq, ly.w2, 16), 16)
            rec(p_ + "ffn_norm", xn)
            rec(p_ + "ffn_norm8", xq[0])
            rec(p_ + "h1", h1)
            rec(p_ + "h3", h3)
            rec(p_ + "silu", sl)
            rec(p_ + "gate", gate)
            rec(p_ + "gate8", gq[0])
            rec(p_ + "res", x)
        n = qm.final_norm
        xn = nx.rmsnorm(x, n.gain, n.shift, n.eps, qm.rsqrt_table)
        logits = _linear(nx.dynquant(xn, dq), qm.classifier, 32)
        rec("final_norm", xn)
        rec("logits", logits)
        self._filled = T
        return logits

    def dequantize_logits(self, logits: np.ndarray) -> np.ndarray:
        """Return int32 logits as real values, ``logits * 2**-16`` (float32).

        Host-side only (sampling with a temperature, accuracy reports); never part of a
        forward step.
        """
        from .quantize import LOGIT_FRAC_BITS
        return (np.asarray(logits, np.float64) / (1 << LOGIT_FRAC_BITS)).astype(np.float32)
