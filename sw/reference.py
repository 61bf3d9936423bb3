"""Float32 reference forward pass of a llama2 transformer, as llama2.c's ``run.c``.

This is the accuracy yardstick of the integer golden model and of the hardware.  It follows
``run.c``'s ``forward`` step by step, in float32 throughout (numpy's float32 dot products sum
in a different order than ``run.c``'s loops, so logits agree to float32 rounding, not bit for
bit):

* ``x = token_embedding[token]``;
* per layer: ``xb = rmsnorm(x, rms_att[l])``; ``q = wq[l] @ xb``, ``k = wk[l] @ xb``,
  ``v = wv[l] @ xb``; RoPE on ``q`` and ``k``; ``k``, ``v`` stored in the KV cache at
  ``pos``; per query head ``h``, attention over positions ``0..pos`` against KV head
  ``h // kv_mul`` with scores ``q.k / sqrt(head_size)`` and a softmax; ``x += wo[l] @ att``;
  ``xb = rmsnorm(x, rms_ffn[l])``; ``x += w2[l] @ (silu(w1[l] @ xb) * (w3[l] @ xb))``;
* ``logits = wcls @ rmsnorm(x, rms_final)``.

``rmsnorm(x, w) = w * x / sqrt(mean(x**2) + 1e-5)``.  RoPE rotates each pair
``(x[i], x[i+1])``, ``i`` even, by the angle ``pos * 10000 ** -(i % head_size / head_size)``:
``(x0 cos - x1 sin, x0 sin + x1 cos)``.  ``silu(x) = x / (1 + exp(-x))``.
"""

from __future__ import annotations

import numpy as np

from .model import Checkpoint

__all__ = ["RMS_EPS", "ROPE_THETA", "Transformer", "rmsnorm", "softmax", "rope_cos_sin"]

#: RMSNorm epsilon (run.c's ``1e-5f``).
RMS_EPS = np.float32(1e-5)
#: RoPE base (run.c's ``10000.0f``).
ROPE_THETA = np.float32(10000.0)


class FloatOverflowError(ValueError):
    """`Transformer.forward` left float32's range: an RMSNorm's sum of squares or a logit is
    infinite or NaN, so the output means nothing (run.c would go on and print it).  A
    degenerate or corrupt checkpoint (huge weights); a sane model never gets near it."""


def rmsnorm(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Return ``weight * (x / sqrt(mean(x**2) + 1e-5))`` in float32, as run.c's ``rmsnorm``.

    Parameters
    ----------
    x, weight : numpy.ndarray
        float32, shape ``(n,)``.

    Raises
    ------
    FloatOverflowError
        If the sum of squares is not finite (``|x|`` beyond about 1.8e19, or a non-finite
        ``x``): the norm would be ``0 * x``, meaningless (run.c goes on with it).
    """
    ss = np.dot(x, x)
    if not np.isfinite(ss):
        raise FloatOverflowError("the activations' sum of squares is not finite")
    ss = ss / np.float32(x.shape[0]) + RMS_EPS
    return weight * (np.float32(1.0) / np.sqrt(np.float32(ss)) * x)


def softmax(x: np.ndarray) -> np.ndarray:
    """Return the softmax of `x` along its last axis, in float32, subtracting the maximum first.

    Parameters
    ----------
    x : numpy.ndarray
        float32, any shape.
    """
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rope_cos_sin(pos: int, head_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Return RoPE's cosines and sines at `pos`, one per pair of a head, as run.c computes them.

    Pair ``j`` (elements ``2j`` and ``2j + 1`` of a head) turns by ``pos * freq`` with
    ``freq = 1 / 10000 ** (2j / head_size)``, all in float32.

    Returns
    -------
    cos, sin : numpy.ndarray
        float32, shape ``(head_size // 2,)``.
    """
    head_dim = np.arange(0, head_size, 2, dtype=np.float32)
    freq = np.float32(1.0) / np.power(ROPE_THETA, head_dim / np.float32(head_size))
    val = np.float32(pos) * freq
    return np.cos(val), np.sin(val)


def _rope(vec, cos, sin):
    """Rotate `vec` (shape ``(heads, head_size)``) pairwise, returning a new array."""
    v0, v1 = vec[:, 0::2], vec[:, 1::2]
    out = np.empty_like(vec)
    out[:, 0::2] = v0 * cos - v1 * sin
    out[:, 1::2] = v0 * sin + v1 * cos
    return out


class Transformer:
    """Float32 llama2 transformer with a KV cache: run.c's ``forward``.

    Parameters
    ----------
    checkpoint : chipotle.model.Checkpoint
        Any format; the weights are used as they are (float32).

    Attributes
    ----------
    config : chipotle.model.ModelConfig
    weights : chipotle.model.TransformerWeights
    key_cache, value_cache : numpy.ndarray
        float32, shape ``(n_layers, seq_len, kv_dim)``: keys (after RoPE) and values of the
        positions seen so far.
    """

    def __init__(self, checkpoint: Checkpoint):
        self.config = checkpoint.config
        self.weights = checkpoint.weights
        c = self.config
        self.key_cache = np.zeros((c.n_layers, c.seq_len, c.kv_dim), np.float32)
        self.value_cache = np.zeros_like(self.key_cache)
        self._filled = 0
        # Query head h reads KV head h // kv_mul (grouped-query attention).
        self._kv_head = np.arange(c.n_heads) // c.kv_mul

    def reset(self) -> None:
        """Forget every cached position, to start a new sequence."""
        self.key_cache[...] = 0
        self.value_cache[...] = 0
        self._filled = 0

    def forward(self, token: int, pos: int) -> np.ndarray:
        """Run one position and return the logits of the next token.

        Parameters
        ----------
        token : int
            Input token id, in ``[0, vocab_size)``.
        pos : int
            Position of `token`, in ``[0, seq_len)``.  Positions ``0 .. pos - 1`` must have been
            run since the last `reset`; running an earlier position again rewinds the sequence
            to it.

        Returns
        -------
        numpy.ndarray
            float32, shape ``(vocab_size,)``: the classifier output (not a softmax).

        Raises
        ------
        ValueError
            If `token` or `pos` is out of range, or `pos` skips positions not yet run.
        FloatOverflowError
            (a ValueError) If an RMSNorm's sum of squares or a logit is infinite or NaN.
        """
        c, w = self.config, self.weights
        if not 0 <= token < c.vocab_size:
            raise ValueError(f"`token` must be in [0, {c.vocab_size}), not {token}")
        if not 0 <= pos < c.seq_len:
            raise ValueError(f"`pos` must be in [0, {c.seq_len}) (the context length), "
                             f"not {pos}")
        if pos > self._filled:
            held = f"only 0..{self._filled - 1} are" if self._filled else "none is"
            raise ValueError(f"`pos` {pos} skips positions: {held} in the KV cache")
        hs, n_heads, n_kv = c.head_size, c.n_heads, c.n_kv_heads
        inv_sqrt_hs = np.float32(1.0) / np.sqrt(np.float32(hs))
        cos, sin = rope_cos_sin(pos, hs)

        x = np.array(w.token_embedding[token], np.float32)
        layer, stage = 0, "attention"  # the norm running, for an overflow's error
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                for layer in range(c.n_layers):
                    stage = "attention"
                    xb = rmsnorm(x, w.rms_att[layer])
                    q = _rope((w.wq[layer] @ xb).reshape(n_heads, hs), cos, sin)
                    k = _rope((w.wk[layer] @ xb).reshape(n_kv, hs), cos, sin)
                    v = w.wv[layer] @ xb
                    self.key_cache[layer, pos] = k.reshape(-1)
                    self.value_cache[layer, pos] = v

                    keys = self.key_cache[layer, : pos + 1].reshape(pos + 1, n_kv, hs)
                    values = self.value_cache[layer, : pos + 1].reshape(pos + 1, n_kv, hs)
                    keys = keys[:, self._kv_head]          # (T, n_heads, hs)
                    values = values[:, self._kv_head]
                    scores = np.einsum("hd,thd->ht", q, keys) * inv_sqrt_hs
                    att = softmax(scores)                  # (n_heads, T)
                    out = np.einsum("ht,thd->hd", att, values).reshape(-1)
                    x = x + w.wo[layer] @ out

                    stage = "feed-forward"
                    xb = rmsnorm(x, w.rms_ffn[layer])
                    h1 = w.w1[layer] @ xb
                    h3 = w.w3[layer] @ xb
                    hb = h1 * (np.float32(1.0) / (np.float32(1.0) + np.exp(-h1))) * h3
                    x = x + w.w2[layer] @ hb

                stage = "final"
                x = rmsnorm(x, w.rms_final)
                logits = (w.wcls @ x).astype(np.float32, copy=False)
        except FloatOverflowError as e:
            where = ("the final RMSNorm" if stage == "final"
                     else f"the {stage} RMSNorm of layer {layer}")
            raise FloatOverflowError(
                f"the float reference leaves float32's range at position {pos}, {where} ({e}): "
                f"a degenerate or corrupt checkpoint, huge or non-finite weights") from None
        self._filled = pos + 1
        if not np.isfinite(logits).all():
            raise FloatOverflowError(
                f"the float reference's logits at position {pos} are not finite: a "
                f"degenerate or corrupt checkpoint, huge or non-finite weights")
        return logits
