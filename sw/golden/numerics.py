"""Integer primitives of chipotle's arithmetic: the one rounding rule, matrix products, tables.

Every function here is what one hardware operation computes, bit for bit; `GoldenModel` is
built from them, and the ISA-level simulator calls them directly.  Inside these functions (and
inside a forward step) no floating-point value exists: arrays are ``np.int8``, ``np.int16``,
``np.int32`` or ``np.int64`` and every widening is explicit, so that overflow behaviour is the
specified one (saturation) and never numpy's default promotion.  The table builders
(``*_table``) and `quantize_multiplier` run offline on the host and may use floats.

The formats, tables and algorithms are specified in ``docs/numerics.md``; the names of the
constants below are the ones used there.

The rounding rule
-----------------
One rule everywhere (`requant`)::

    y = sat((x * m + 2**(s - 1)) >> s)        (s >= 1;  s == 0 gives y = sat(x * m))

with an int64 product, an arithmetic (floor) right shift and saturation to the destination
width: round half up (towards +inf), so ``+2.5 -> 3`` and ``-2.5 -> -2``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "MAX_K", "MAX_SEQ_LEN", "MULT_BITS",
    "RSQRT_INDEX_BITS", "RSQRT_FRAC_BITS", "EXP2_FRAC_BITS", "EXP_FRAC_BITS",
    "RECIP_INDEX_BITS", "RECIP_FRAC_BITS", "PROB_FRAC_BITS",
    "SIGMOID_STEP_BITS", "SIGMOID_RANGE_BITS", "SIGMOID_FRAC_BITS", "ROPE_FRAC_BITS",
    "sat", "requant", "quantize_multiplier", "leading_one", "matmul", "check_k",
    "rsqrt_table", "exp2_table", "recip_table", "sigmoid_table", "rope_tables",
    "rmsnorm", "softmax", "rope", "silu", "argmax", "quantize_rows",
    "DQ_INDEX_BITS", "DQ_TABLE_SHIFT", "DQ_UNIT", "dynquant_table", "dynquant", "requant_dyn",
]

#: Largest reduction length K of the matrix unit: ``K * 128 * 128 <= 2**30 < 2**31``.
MAX_K = 1 << 16
#: Largest context length: keeps the softmax denominator below ``2**31`` (see `softmax`).
MAX_SEQ_LEN = 1 << 15
#: Requantisation multipliers are unsigned 15-bit mantissas in ``[2**14, 2**15)``.
MULT_BITS = 15

#: rsqrt table: index = the top ``RSQRT_INDEX_BITS`` bits of the sum of squares normalised to
#: an even exponent, ``[2**(B-2), 2**B)``, so ``3 * 2**(B-2)`` entries.
RSQRT_INDEX_BITS = 10
#: rsqrt table entries are unsigned Q0.15, in ``(2**14, 2**15)``.
RSQRT_FRAC_BITS = 15
#: Softmax works in base 2 on scores with ``EXP2_FRAC_BITS`` fractional bits (log2 units);
#: the exp2 table has ``2**EXP2_FRAC_BITS`` entries, one per fraction.
EXP2_FRAC_BITS = 8
#: exp2 table entries and softmax numerators are unsigned Q1.15 (``1.0 = 2**15``).
EXP_FRAC_BITS = 15
#: Reciprocal table: index = the ``RECIP_INDEX_BITS`` bits after the leading one.
RECIP_INDEX_BITS = 8
#: Reciprocal table entries are unsigned Q0.15, in ``(2**14, 2**15)``.
RECIP_FRAC_BITS = 15
#: Attention probabilities are unsigned Q1.15 (``1.0 = 2**15``), held in 16 bits.
PROB_FRAC_BITS = 15
#: Sigmoid table: input step ``2**-SIGMOID_STEP_BITS``, input range ``[-2**R, 2**R)`` with
#: ``R = SIGMOID_RANGE_BITS``, so ``2**(R + SIGMOID_STEP_BITS + 1)`` entries.
SIGMOID_STEP_BITS = 6
SIGMOID_RANGE_BITS = 3
#: Sigmoid table entries are unsigned Q0.15.
SIGMOID_FRAC_BITS = 15
#: RoPE cos/sin tables are signed Q1.14 int16 (``1.0 = 2**14``).
ROPE_FRAC_BITS = 14
#: Dynamic int8 quantisation: mantissa index bits of a vector's max-abs (scale code).
DQ_INDEX_BITS = 8
#: Dynamic int8 quantisation table entries are unsigned, ``round(2**9 * 127 / mid)``, in
#: ``(127 * 2**8, 127 * 2**9)``; this is the 9.
DQ_TABLE_SHIFT = 9
#: The scale code's mantissa ``mu`` has ``DQ_INDEX_BITS + 2`` bits and weight
#: ``2**-(DQ_INDEX_BITS + 1)``: the static multipliers of consumers fold ``1 / DQ_UNIT``.
DQ_UNIT = 127 * (1 << (DQ_INDEX_BITS + 1))

_INT_DTYPES = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
_UINT_DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32}


def _as_int64(x, name="x"):
    a = np.asarray(x)
    if a.dtype.kind not in "iub":
        raise TypeError(f"`{name}` must be an integer array, not {a.dtype}")
    return a.astype(np.int64)


def sat(x, bits: int = 8, unsigned: bool = False) -> np.ndarray:
    """Saturate integers to a two's-complement (or unsigned) width.

    Parameters
    ----------
    x : array_like of int
        Any integer dtype, any shape.
    bits : int
        Destination width: 8, 16, 32 (or 64, signed only).
    unsigned : bool
        Saturate to ``[0, 2**bits - 1]`` instead of ``[-2**(bits-1), 2**(bits-1) - 1]``.

    Returns
    -------
    numpy.ndarray
        Same shape as `x`, dtype ``int<bits>`` (``uint<bits>`` when `unsigned`).
    """
    a = _as_int64(x)
    if unsigned:
        lo, hi, dt = 0, (1 << bits) - 1, _UINT_DTYPES[bits]
    else:
        lo, hi, dt = -(1 << (bits - 1)), (1 << (bits - 1)) - 1, _INT_DTYPES[bits]
    return np.clip(a, lo, hi).astype(dt)


def requant(x, m, s, bits: int = 8, unsigned: bool = False) -> np.ndarray:
    """Apply the one rounding rule: ``sat((x * m + 2**(s-1)) >> s)``.

    The product is exact in int64; the shift is arithmetic (floor), so the rounding is half up
    (towards +inf): ``+2.5 -> 3``, ``-2.5 -> -2``.  ``s == 0`` adds nothing.  Saturation, not
    wrap-around, to the destination width.

    Parameters
    ----------
    x : array_like of int
        Value to scale, any integer dtype; ``|x| < 2**46`` (so that ``|x * m| < 2**62``
        for any allowed ``m``).
    m : int or array_like of int
        Multiplier, ``0 <= m <= 2**16`` (requantisation multipliers are 15-bit mantissas;
        table entries are at most ``2**15``); broadcast against `x`.
    s : int or array_like of int
        Right shift, ``s >= 0``; broadcast against `x` (per row, per vector).  A shift of 63
        or more gives 0, as the formula does (``|x * m| < 2**62 <= 2**(s-1)``).
    bits, unsigned
        Destination format, as in `sat`.

    Returns
    -------
    numpy.ndarray
        Broadcast shape of `x`, `m`, `s`; dtype as `sat`.

    Raises
    ------
    ValueError
        If `m` or `s` is out of range, or ``|x|`` reaches ``2**46``.
    """
    xa, ma, sa = _as_int64(x), _as_int64(m, "m"), _as_int64(s, "s")
    if ma.size and (ma.min() < 0 or ma.max() > (1 << 16)):
        raise ValueError(f"`m` must be in [0, 65536], not {int(ma.min())}..{int(ma.max())}")
    if sa.size and sa.min() < 0:
        raise ValueError(f"`s` must be non-negative, not {int(sa.min())}")
    if xa.size and int(np.abs(xa).max()) >= (1 << 46):
        raise ValueError(f"`x` must be below 2**46 in magnitude (so that x * m < 2**62), "
                         f"not {int(np.abs(xa).max())}")
    big = sa > 62
    sa = np.minimum(sa, 62)
    half = np.left_shift(np.int64(1), sa) >> 1
    y = (xa * ma + half) >> sa
    if big.any():
        y = np.where(big, 0, y)
    return sat(y, bits, unsigned)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """Return ``(m, s)`` with ``m * 2**-s`` closest to `real`, ``m`` a 15-bit mantissa (offline).

    ``m`` is in ``[2**14, 2**15)`` (the multiplier is normalised, as gemmlowp's
    ``QuantizeMultiplier`` does with 31 bits), ``s >= 0``.  ``s`` may exceed 62 where a
    dynamic exponent is subtracted from it before use (`requant_dyn`).

    Parameters
    ----------
    real : float
        Positive real multiplier, ``real < 2**15``.

    Raises
    ------
    ValueError
        If `real` is not positive and finite, or is too large (negative shift).
    """
    real = float(real)
    if not real > 0 or not math.isfinite(real):
        raise ValueError(f"`real` must be a positive finite number, not {real}")
    frac, exp = math.frexp(real)                 # real = frac * 2**exp, frac in [0.5, 1)
    m = round(frac * (1 << MULT_BITS))
    if m == 1 << MULT_BITS:
        m, exp = m >> 1, exp + 1
    s = MULT_BITS - exp
    if s < 0:
        raise ValueError(f"`real` multiplier must be < 2**15, not {real:g}")
    return m, s


def leading_one(x) -> np.ndarray:
    """Return the position of the leading one (``floor(log2(x))``) of non-negative integers.

    Parameters
    ----------
    x : array_like of int
        Non-negative, below ``2**63``.

    Returns
    -------
    numpy.ndarray
        int64, shape of `x`: ``floor(log2(x))``, or ``-1`` where ``x == 0``.

    Raises
    ------
    ValueError
        If an element of `x` is negative.
    """
    v = _as_int64(x)
    if v.size and v.min() < 0:
        raise ValueError("`x` must be non-negative")
    if v.size <= 64:        # a scalar or a short row (the common case): Python's exact
        # int.bit_length, without the six numpy passes below (about 10x faster here)
        return np.array([int(e).bit_length() - 1 for e in v.ravel().tolist()],
                        np.int64).reshape(v.shape)
    b = np.zeros(v.shape, np.int64)
    for sh in (32, 16, 8, 4, 2, 1):
        big = v >= (np.int64(1) << sh)
        b += np.where(big, sh, 0)
        v = np.where(big, v >> sh, v)
    return np.where(_as_int64(x) > 0, b, -1)


def check_k(k: int) -> None:
    """Raise if a reduction of length `k` could overflow the int32 accumulator.

    Raises
    ------
    ValueError
        If ``k`` is not in ``[1, MAX_K]``.
    """
    if not 1 <= k <= MAX_K:
        raise ValueError(f"`K` must be ≤ {MAX_K}, not {k}" if k > MAX_K
                         else f"`K` must be a positive integer, not {k}")


def matmul(x, w) -> np.ndarray:
    """Return the matrix unit's int32 accumulators ``x @ w.T`` (exact, no overflow).

    Parameters
    ----------
    x : numpy.ndarray
        int8, shape ``(M, K)``: M activation rows.
    w : numpy.ndarray
        int8, shape ``(N, K)``: N weight rows (llama2.c's ``(out, in)`` layout).

    Returns
    -------
    numpy.ndarray
        int32, shape ``(M, N)``.  ``|acc| <= K * 128 * 128 <= 2**30``.

    Raises
    ------
    TypeError
        If an operand is not int8.
    ValueError
        If the K axes differ or ``K > MAX_K``.
    """
    x, w = np.asarray(x), np.asarray(w)
    if x.dtype != np.int8 or w.dtype != np.int8:
        raise TypeError(f"matmul operands must be int8, not {x.dtype} and {w.dtype}")
    if x.shape[-1] != w.shape[-1]:
        raise ValueError(f"`K` of x ({x.shape[-1]}) and w ({w.shape[-1]}) differ")
    check_k(x.shape[-1])
    return x.astype(np.int32) @ w.astype(np.int32).T


def quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantise a float matrix to int8 with one symmetric scale per row (offline).

    ``scale[r] = max|w[r]| / 127``, ``q = clip(round_half_even(w / scale), -127, 127)``; an
    all-zero row gets scale 1 and zeros.

    Parameters
    ----------
    w : numpy.ndarray
        float, shape ``(N, K)``.

    Returns
    -------
    q : numpy.ndarray
        int8, shape ``(N, K)``, values in ``[-127, 127]``.
    scale : numpy.ndarray
        float64, shape ``(N,)``: ``w ≈ q * scale[:, None]``.
    """
    w = np.asarray(w, np.float64)
    amax = np.abs(w).max(axis=-1)
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


# -- tables (built offline by the host) ---------------------------------------------------------

def rsqrt_table(index_bits: int = RSQRT_INDEX_BITS) -> np.ndarray:
    """Return the reciprocal-square-root table: entry ``j`` for ``i = j + 2**(B-2)``.

    ``entry = round(2**15 / sqrt((i + 0.5) / 2**(B-2)))``, the midpoint of the interval of
    normalised sums ``u = i / 2**(B-2)`` in ``[1, 4)`` that share index ``i``.

    Returns
    -------
    numpy.ndarray
        int32, shape ``(3 * 2**(B-2),)``, values in ``(2**14, 2**15)``.
    """
    base = 1 << (index_bits - 2)
    i = np.arange(base, 4 * base, dtype=np.float64)
    return np.rint((1 << RSQRT_FRAC_BITS) / np.sqrt((i + 0.5) / base)).astype(np.int32)


def exp2_table(frac_bits: int = EXP2_FRAC_BITS) -> np.ndarray:
    """Return the exp2 table: ``entry[f] = round(2**15 * 2**(-f / 2**F))``, ``f < 2**F``.

    Returns
    -------
    numpy.ndarray
        int32, shape ``(2**F,)``, values in ``(2**14, 2**15]`` (entry 0 is ``2**15``).
    """
    f = np.arange(1 << frac_bits, dtype=np.float64)
    return np.rint((1 << EXP_FRAC_BITS) * np.exp2(-f / (1 << frac_bits))).astype(np.int32)


def recip_table(index_bits: int = RECIP_INDEX_BITS) -> np.ndarray:
    """Return the reciprocal table: ``entry[j] = round(2**15 / (1 + (j + 0.5) / 2**B))``.

    Returns
    -------
    numpy.ndarray
        int32, shape ``(2**B,)``, values in ``(2**14, 2**15)``.
    """
    j = np.arange(1 << index_bits, dtype=np.float64)
    return np.rint((1 << RECIP_FRAC_BITS) / (1.0 + (j + 0.5) / (1 << index_bits))
                   ).astype(np.int32)


def sigmoid_table(step_bits: int = SIGMOID_STEP_BITS,
                  range_bits: int = SIGMOID_RANGE_BITS) -> np.ndarray:
    """Return the sigmoid table: ``entry[j] = round(2**15 * sigmoid((j - 2**(R+S)) / 2**S))``.

    Returns
    -------
    numpy.ndarray
        int32, shape ``(2**(R+S+1),)``, values in ``[0, 2**15)``.
    """
    half = 1 << (range_bits + step_bits)
    z = (np.arange(2 * half, dtype=np.float64) - half) / (1 << step_bits)
    return np.rint((1 << SIGMOID_FRAC_BITS) / (1.0 + np.exp(-z))).astype(np.int32)


def rope_tables(seq_len: int, head_size: int, theta: float = 10000.0
                ) -> tuple[np.ndarray, np.ndarray]:
    """Return RoPE's cos and sin tables in Q1.14, as the host writes them to the tiles.

    ``angle[p, j] = p * theta**(-2j / head_size)``, computed in float64;
    ``cos = round(2**14 * cos(angle))``, likewise sin.

    Returns
    -------
    cos, sin : numpy.ndarray
        int16, shape ``(seq_len, head_size // 2)``, values in ``[-2**14, 2**14]``.
    """
    j = np.arange(head_size // 2, dtype=np.float64)
    freq = theta ** (-2.0 * j / head_size)
    ang = np.arange(seq_len, dtype=np.float64)[:, None] * freq[None, :]
    one = 1 << ROPE_FRAC_BITS
    return (np.rint(one * np.cos(ang)).astype(np.int16),
            np.rint(one * np.sin(ang)).astype(np.int16))


def dynquant_table(index_bits: int = DQ_INDEX_BITS) -> np.ndarray:
    """Return the dynamic-quantisation table: ``entry[j] = round(2**9 * 127 / mid_j)``.

    ``mid_j = 1 + (j + 0.5) / 2**B`` is the midpoint of the mantissas sharing index ``j``.

    Returns
    -------
    numpy.ndarray
        int32, shape ``(2**B,)``, values in ``(127 * 2**8, 127 * 2**9)`` (16 bits unsigned).
    """
    mid = 1.0 + (np.arange(1 << index_bits, dtype=np.float64) + 0.5) / (1 << index_bits)
    return np.rint((1 << DQ_TABLE_SHIFT) * 127.0 / mid).astype(np.int32)


# -- vector-unit operations ---------------------------------------------------------------------

def rmsnorm(x, gain, gain_shift: int, eps, table: np.ndarray, bits: int = 16) -> np.ndarray:
    """Normalise rows of the residual stream (integer RMSNorm).

    ``y = sat(round(x * gain * rsqrt(ss) * 2**-gain_shift))`` with ``ss = sum(x**2) + eps``:
    the per-vector ``rsqrt`` comes from the leading-one position ``b`` of ``ss`` (``k = b//2``,
    ``2**(2k) <= ss < 2**(2k+2)``) and the table entry at the top bits of ``ss``:
    ``i = ss >> (2k + 2 - B)`` (a left shift if negative), ``r = table[i - 2**(B-2)]``,
    ``rsqrt(ss) ≈ r * 2**-(15 + k)``.  Then ``y = requant(x * gain, r, 15 + k + gain_shift)``.
    ``ss == 0`` (possible only with ``eps == 0``) gives ``r = 0`` and zeros.

    Parameters
    ----------
    x : numpy.ndarray
        int16, shape ``(M, n)``: residual rows (any fixed point; it cancels).
    gain : numpy.ndarray
        int16, shape ``(n,)``: ``round(g * sqrt(n) / s_out * 2**gain_shift)``.
    gain_shift : int
        Fractional bits of `gain`.
    eps : int
        ``round(1e-5 * n * 2**(2 F_res))``, added to the sum of squares.
    table : numpy.ndarray
        `rsqrt_table`.
    bits : int
        Output width (16: the format ``s_out`` can hold ``max|g| sqrt(n)``, the largest
        possible ``|g x / rms(x)|``, so it never saturates).

    Returns
    -------
    numpy.ndarray
        ``int<bits>``, shape ``(M, n)``.

    Raises
    ------
    TypeError
        If `x` is not int16.
    ValueError
        If the row length is not in ``[1, MAX_K]`` (`check_k`).
    """
    x = np.asarray(x)
    if x.dtype != np.int16:
        raise TypeError(f"rmsnorm input must be int16, not {x.dtype}")
    check_k(x.shape[-1])
    x64 = x.astype(np.int64)
    ss = (x64 * x64).sum(axis=-1, keepdims=True) + np.int64(eps)     # < 2**47
    b = leading_one(ss)
    k = np.maximum(b, 0) >> 1
    index_bits = leading_one(np.int64(table.shape[0] // 3)) + 2
    sh = 2 * k + 2 - index_bits
    i = np.where(sh >= 0, ss >> np.maximum(sh, 0), ss << np.maximum(-sh, 0))
    base = np.int64(1) << (index_bits - 2)
    r = np.where(ss > 0, table[np.clip(i - base, 0, table.shape[0] - 1)], 0)
    xg = x.astype(np.int32) * gain.astype(np.int32)                  # |.| <= 2**30
    return requant(xg, r, RSQRT_FRAC_BITS + k + gain_shift, bits)


def softmax(t, mask, exp_table: np.ndarray, recip_tab: np.ndarray) -> np.ndarray:
    """Return integer softmax probabilities (Q1.15) of base-2 scores, along the last axis.

    Steps: ``d = max(t) - t`` (over valid entries), ``n = min(d >> F, 31)``,
    ``f = d & (2**F - 1)``; ``e = requant(exp_table[f], 1, n)`` (``2**15 * 2**(-d / 2**F)``);
    masked entries get ``e = 0``; ``Z = sum(e)`` (at least ``2**15``: the maximum contributes
    ``2**15``); with ``b`` the leading one of ``Z`` and ``j = (Z >> (b - B)) - 2**B``,
    ``p = requant(e, recip_tab[j], b, 16, unsigned)`` (``2**15 * e / Z``).

    Parameters
    ----------
    t : numpy.ndarray
        int32, shape ``(..., T)``: scores in log2 units with ``F = EXP2_FRAC_BITS`` fractional
        bits.
    mask : numpy.ndarray of bool or None
        Shape broadcastable to `t`; False entries are excluded (causal mask).  At least one
        entry per row must be valid.
    exp_table, recip_tab : numpy.ndarray
        `exp2_table` and `recip_table`.

    Returns
    -------
    numpy.ndarray
        uint16, shape of `t`: probabilities, ``2**15`` = 1.0; all-equal valid scores give equal
        probabilities.

    Raises
    ------
    TypeError
        If `t` is not int32.
    ValueError
        If ``T > MAX_SEQ_LEN``, or a row has no valid entry.
    """
    t = np.asarray(t)
    if t.dtype != np.int32:
        raise TypeError(f"softmax input must be int32, not {t.dtype}")
    if t.shape[-1] > MAX_SEQ_LEN:
        raise ValueError(f"`T` must be ≤ {MAX_SEQ_LEN}, not {t.shape[-1]}")
    fbits = leading_one(np.int64(exp_table.shape[0]))
    t64 = t.astype(np.int64)
    lowest = np.int64(np.iinfo(np.int32).min)
    if mask is not None:
        if not np.broadcast_to(mask, t.shape).any(axis=-1).all():
            raise ValueError("every softmax row needs at least one valid (unmasked) entry")
        t64 = np.where(mask, t64, lowest)
    mx = t64.max(axis=-1, keepdims=True)
    d = mx - t64                                                     # >= 0, < 2**32
    n = np.minimum(d >> fbits, 31)
    f = d & ((np.int64(1) << fbits) - 1)
    e = requant(exp_table[f], 1, n, bits=32)
    if mask is not None:
        e = np.where(mask, e, 0).astype(np.int32)
    z = e.astype(np.int64).sum(axis=-1, keepdims=True)              # in [2**15, 2**30]
    b = leading_one(z)
    rbits = leading_one(np.int64(recip_tab.shape[0]))
    j = (z >> (b - rbits)) - (np.int64(1) << rbits)
    return requant(e, recip_tab[j], b, bits=16, unsigned=True)


def rope(x, cos, sin, shift: int, bits: int) -> np.ndarray:
    """Rotate pairs ``(x[2j], x[2j+1])`` by the tabulated angle, with one requantisation.

    ``y[2j] = requant(x[2j] cos[j] - x[2j+1] sin[j], 1, shift)``,
    ``y[2j+1] = requant(x[2j] sin[j] + x[2j+1] cos[j], 1, shift)``.

    Parameters
    ----------
    x : numpy.ndarray
        int16, shape ``(..., heads, head_size)``.
    cos, sin : numpy.ndarray
        int16 Q1.14, shape broadcastable to ``(..., heads, head_size // 2)``.
    shift : int
        Right shift of the int32 products (14 keeps the scale of `x`).
    bits : int
        Destination width (8 or 16).

    Returns
    -------
    numpy.ndarray
        ``int<bits>``, shape of `x`.

    Raises
    ------
    TypeError
        If `x` is not int16.
    """
    x = np.asarray(x)
    if x.dtype != np.int16:
        raise TypeError(f"rope input must be int16, not {x.dtype}")
    a, b = x[..., 0::2].astype(np.int32), x[..., 1::2].astype(np.int32)
    c, s = cos.astype(np.int32), sin.astype(np.int32)
    out = np.empty(x.shape, _INT_DTYPES[bits])
    out[..., 0::2] = requant(a * c - b * s, 1, shift, bits)          # |.| <= 2**30
    out[..., 1::2] = requant(a * s + b * c, 1, shift, bits)
    return out


def silu(h, frac_bits: int, table: np.ndarray) -> np.ndarray:
    """Return ``h * sigmoid(h)`` for int16 fixed point ``h`` (``frac_bits`` fractional bits).

    ``j = clip(requant(h, 1, frac_bits - S), -2**(R+S), 2**(R+S) - 1)`` (``S`` =
    `SIGMOID_STEP_BITS`, ``R`` = `SIGMOID_RANGE_BITS`, nearest table point),
    ``sig = table[j + 2**(R+S)]`` (Q0.15), ``y = requant(h * sig, 1, 15, 16)``: same format
    as `h`.

    Parameters
    ----------
    h : numpy.ndarray
        int16, any shape.
    frac_bits : int
        Fractional bits of `h`; at least `SIGMOID_STEP_BITS`.
    table : numpy.ndarray
        `sigmoid_table`.

    Returns
    -------
    numpy.ndarray
        int16, shape of `h`.

    Raises
    ------
    TypeError
        If `h` is not int16.
    ValueError
        If ``frac_bits`` is below `SIGMOID_STEP_BITS`.
    """
    h = np.asarray(h)
    if h.dtype != np.int16:
        raise TypeError(f"silu input must be int16, not {h.dtype}")
    if frac_bits < SIGMOID_STEP_BITS:
        raise ValueError(f"`frac_bits` must be ≥ {SIGMOID_STEP_BITS}, not {frac_bits}")
    half = table.shape[0] // 2
    j = requant(h, 1, frac_bits - SIGMOID_STEP_BITS, bits=32)
    j = np.clip(j.astype(np.int64), -half, half - 1) + half
    sig = table[j]
    return requant(h.astype(np.int32) * sig, 1, SIGMOID_FRAC_BITS, bits=16)


def dynquant(v, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantise vectors to int8 with a dynamic per-vector scale code ``(mu, b)``.

    Along the last axis: ``a = max|v|``, ``b = leading_one(a)``, ``j`` = the ``B`` bits after
    the leading one (``(a >> (b - B)) - 2**B``, or a left shift when ``b < B``);
    ``x = requant(v, table[j], 9 + b, 8)`` (``≈ 127 v / (mid_j 2**b)``) and
    ``mu = 2**(B+1) + 2 j + 1``.  The scale of ``x`` is exactly
    ``sigma = mu * 2**b / DQ_UNIT`` units of `v`: ``v ≈ x * sigma``.  An all-zero vector gives
    ``x = 0``, ``mu = 0``, ``b = 0``.

    Parameters
    ----------
    v : numpy.ndarray
        int16 or int32, shape ``(..., n)``.
    table : numpy.ndarray
        `dynquant_table`.

    Returns
    -------
    x : numpy.ndarray
        int8, shape ``(..., n)``.
    mu : numpy.ndarray
        int32, shape ``(..., 1)``, in ``[2**(B+1), 2**(B+2))`` (or 0).
    b : numpy.ndarray
        int32, shape ``(..., 1)``, in ``[0, 31]``.

    Raises
    ------
    TypeError
        If `v` is neither int16 nor int32.
    """
    v = np.asarray(v)
    if v.dtype not in (np.int16, np.int32):
        raise TypeError(f"dynquant input must be int16 or int32, not {v.dtype}")
    bits = leading_one(np.int64(table.shape[0]))
    v64 = v.astype(np.int64)
    a = np.abs(v64).max(axis=-1, keepdims=True)
    b = np.maximum(leading_one(a), 0)
    sh = b - bits
    j = np.where(sh >= 0, a >> np.maximum(sh, 0), a << np.maximum(-sh, 0)) - (1 << bits)
    j = np.clip(j, 0, table.shape[0] - 1)
    x = requant(v64, table[j], DQ_TABLE_SHIFT + b, 8)
    mu = np.where(a > 0, (2 << bits) + 2 * j + 1, 0)
    return x, mu.astype(np.int32), b.astype(np.int32)


def requant_dyn(acc, mu, b, m, s, bits: int = 8) -> np.ndarray:
    """Requantise accumulators of a dynamically quantised operand: ``requant(acc * mu, m, s - b)``.

    ``acc * mu`` is exact (int64); `b` is subtracted from the static shift `s` (which must
    stay non-negative).  With ``mu = 1, b = 0`` this is plain `requant`.

    Parameters
    ----------
    acc : numpy.ndarray
        int32 accumulators.
    mu, b : numpy.ndarray
        Scale code of the dynamic operand (or the product of the mantissas and the sum of the
        exponents of two operands), broadcast against `acc`; ``|acc * mu| < 2**46``.
    m, s : int or numpy.ndarray
        Static multiplier and shift (per output row), with ``1 / DQ_UNIT`` folded in.

    Raises
    ------
    ValueError
        If ``s - b`` is negative.
    """
    sh = np.asarray(s, np.int64) - np.asarray(b, np.int64)
    if sh.size and sh.min() < 0:
        raise ValueError(f"static shift too small for the dynamic exponent: s - b = "
                         f"{int(sh.min())}")
    return requant(np.asarray(acc).astype(np.int64) * np.asarray(mu, np.int64), m, sh, bits)


def argmax(x) -> np.ndarray:
    """Return the index of the first maximum along the last axis (the on-chip argmax).

    Parameters
    ----------
    x : numpy.ndarray
        Integer, shape ``(..., n)``.

    Returns
    -------
    numpy.ndarray
        int64, shape ``(...)``.

    Raises
    ------
    TypeError
        If `x` is not of an integer dtype.
    """
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"argmax input must be integer, not {x.dtype}")
    return np.argmax(x, axis=-1).astype(np.int64)
