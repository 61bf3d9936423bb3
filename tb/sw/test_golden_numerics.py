"""chipotle.golden.numerics: the integer primitives pinned on edge values.

Each primitive is checked against the formula of docs/numerics.md evaluated with Python's
unbounded integers (or, for the approximations, against float math within a stated bound).
"""

import math

import numpy as np
import pytest

from chipotle.golden import numerics as nx


def ref_requant(x, m, s, lo, hi):
    """docs/numerics.md's rounding rule on Python integers."""
    y = 0 if s >= 63 else (x * m + ((1 << s) >> 1)) >> s
    return min(max(y, lo), hi)


# -- the rounding rule --------------------------------------------------------------------------

@pytest.mark.parametrize(("x", "expected"), [
    (5, 3), (-5, -2),          # +2.5 -> 3, -2.5 -> -2: half up (towards +inf)
    (3, 2), (-3, -1),          # +1.5 -> 2, -1.5 -> -1
    (1, 1), (-1, 0),           # +0.5 -> 1, -0.5 -> 0
    (7, 4), (-7, -3),          # +3.5 -> 4, -3.5 -> -3
    (4, 2), (-4, -2), (0, 0),  # exact values stay exact
])
def test_requant_ties_round_half_up(x, expected):
    assert int(nx.requant(np.int32(x), 1, 1, bits=32)) == expected


def test_requant_ties_with_multiplier():
    # 3 * 2**14 / 2**15 = 1.5 -> 2; -1.5 -> -1; 5 * 2**14 / 2**15 = 2.5 -> 3; -2.5 -> -2.
    y = nx.requant(np.array([3, -3, 5, -5], np.int32), 1 << 14, 15, bits=8)
    assert y.tolist() == [2, -1, 3, -2]


def test_requant_matches_integer_formula_on_extremes():
    rng = np.random.default_rng(0)
    xs = np.concatenate([[-(1 << 31), (1 << 31) - 1, -128, 127, 0, -1, 1],
                         rng.integers(-(1 << 31), 1 << 31, 300)]).astype(np.int64)
    for m in (1, (1 << 14), (1 << 15) - 1, 1 << 16):
        for s in (0, 1, 7, 15, 31, 46, 62, 63, 90):
            for bits in (8, 16, 32):
                lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
                got = nx.requant(xs, m, s, bits)
                assert got.dtype == {8: np.int8, 16: np.int16, 32: np.int32}[bits]
                want = [ref_requant(int(x), m, s, lo, hi) for x in xs]
                assert got.tolist() == want, (m, s, bits)


def test_requant_all_minus_128():
    x = np.full(16, -128, np.int8)
    assert nx.requant(x, 1 << 14, 15).tolist() == [-64] * 16           # exact
    assert nx.requant(x, 1, 0).tolist() == [-128] * 16                 # identity
    assert nx.requant(x, 3, 0).tolist() == [-128] * 16                 # -384 saturates
    # -128 * 32767 / 256 = -16383.5: a tie, rounded up to -16383.
    assert nx.requant(x, (1 << 15) - 1, 8, bits=16).tolist() == [-16383] * 16
    assert nx.requant(x, 1 << 16, 0, bits=8, unsigned=True).tolist() == [0] * 16


def test_requant_saturates_not_wraps():
    x = np.array([40000, -40000, 1 << 40, -(1 << 40)], np.int64)
    assert nx.requant(x, 1, 0, bits=16).tolist() == [32767, -32768, 32767, -32768]
    assert nx.requant(x, 1, 0, bits=8).tolist() == [127, -128, 127, -128]
    assert nx.requant(x, 1, 0, bits=16, unsigned=True).tolist() == [40000, 0, 65535, 0]


def test_requant_rejects_out_of_range_operands():
    with pytest.raises(ValueError, match="`m` must be in"):
        nx.requant(1, 1 << 17, 0)
    with pytest.raises(ValueError, match="`s` must be non-negative"):
        nx.requant(1, 1, -1)
    with pytest.raises(ValueError, match="below 2\\*\\*46"):
        nx.requant(np.int64(1 << 50), 1, 0)
    with pytest.raises(TypeError, match="integer"):
        nx.requant(np.float32(1.0), 1, 0)


def test_quantize_multiplier():
    for real in (1.0, 0.5, 0.75, 3.0e-9, 1234.5, 2.0 ** -40, 0.999999):
        m, s = nx.quantize_multiplier(real)
        assert (1 << 14) <= m < (1 << 15) and s >= 0
        assert abs(m * 2.0 ** -s / real - 1) <= 2.0 ** -15
    with pytest.raises(ValueError, match="positive"):
        nx.quantize_multiplier(0.0)
    with pytest.raises(ValueError, match="< 2\\*\\*15"):
        nx.quantize_multiplier(1e6)


def test_leading_one():
    x = np.array([0, 1, 2, 3, 4, 255, 256, (1 << 46) + 5, (1 << 62)], np.int64)
    assert nx.leading_one(x).tolist() == [-1, 0, 1, 1, 2, 7, 8, 46, 62]


@pytest.mark.parametrize("n", [1, 64, 65, 300])
def test_leading_one_both_ways(n):
    """Up to 64 elements take Python's ``int.bit_length``, more the numpy passes: both give
    ``bit_length - 1`` at every power of two, on either side of it, and at 0 and
    ``2**63 - 1``, in any shape."""
    edges = [0, 1, 2**63 - 1] + [v for b in range(1, 63) for v in ((1 << b) - 1, 1 << b)]
    rng = np.random.default_rng(n)
    x = rng.choice(np.array(edges, np.int64), size=n)
    want = [int(v).bit_length() - 1 for v in x.tolist()]
    assert nx.leading_one(x).tolist() == want
    if n % 2 == 0:
        assert nx.leading_one(x.reshape(2, -1)).tolist() == np.reshape(want, (2, -1)).tolist()
    assert nx.leading_one(np.int64(x[-1])).shape == ()
    with pytest.raises(ValueError, match="non-negative"):
        nx.leading_one(np.append(x, -1))


# -- matrix unit ---------------------------------------------------------------------------------

def test_matmul_all_minus_128_at_max_k():
    k = nx.MAX_K
    x = np.full((2, k), -128, np.int8)
    w = np.full((3, k), -128, np.int8)
    acc = nx.matmul(x, w)
    assert acc.dtype == np.int32
    assert (acc == k * 128 * 128).all() and k * 128 * 128 == 1 << 30


def test_matmul_k_not_multiple_of_8():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (3, 172)).astype(np.int8)
    w = rng.integers(-128, 128, (5, 172)).astype(np.int8)
    want = [[sum(int(a) * int(b) for a, b in zip(xr, wr, strict=True)) for wr in w] for xr in x]
    assert nx.matmul(x, w).tolist() == want


def test_matmul_checks_k_and_dtypes():
    with pytest.raises(ValueError, match="`K` must be ≤ 65536, not 65537"):
        nx.check_k(65537)
    with pytest.raises(ValueError, match="`K` must be ≤ 65536, not 70000"):
        nx.matmul(np.zeros((1, 70000), np.int8), np.zeros((1, 70000), np.int8))
    with pytest.raises(TypeError, match="int8"):
        nx.matmul(np.zeros((1, 4), np.int16), np.zeros((1, 4), np.int8))
    with pytest.raises(ValueError, match="differ"):
        nx.matmul(np.zeros((1, 4), np.int8), np.zeros((1, 5), np.int8))


def test_quantize_rows():
    w = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [3.0, 1.5, -3.0]])
    q, scale = nx.quantize_rows(w)
    assert q.dtype == np.int8
    assert q.tolist() == [[64, -127, 32], [0, 0, 0], [127, 64, -127]]
    assert np.allclose(scale, [1 / 127, 1.0, 3 / 127])


# -- dynamic quantisation ------------------------------------------------------------------------

def test_dynquant_scale_code_and_dequantisation():
    rng = np.random.default_rng(2)
    tab = nx.dynquant_table()
    v = rng.integers(-30000, 30000, (50, 64)).astype(np.int32)
    x, mu, b = nx.dynquant(v, tab)
    assert x.dtype == np.int8 and mu.shape == (50, 1) and b.shape == (50, 1)
    sigma = mu.astype(np.float64) * 2.0 ** b / nx.DQ_UNIT   # the scale of x, units of v
    assert np.abs(x * sigma - v).max() <= (0.5 + 1e-3) * sigma.max()
    # The largest magnitude maps to +-127 (126 at worst through the table's rounding).
    assert (np.abs(x).max(axis=-1) >= 126).all()


def test_dynquant_all_zero_and_one_outlier():
    tab = nx.dynquant_table()
    x, mu, b = nx.dynquant(np.zeros((2, 8), np.int16), tab)
    assert not x.any() and not mu.any() and not b.any()
    v = np.array([[3, -2, 1 << 30, 5, -(1 << 29)]], np.int32)
    x, mu, b = nx.dynquant(v, tab)
    # Scale = mid_0 * 2**30 / 127 (mid_0 = 1 + 0.5/256): 2**30 -> 126.75 -> 127, -2**29 ->
    # -63.38 -> -63; the small entries vanish.  No wrap, no sign flip.
    assert x.tolist() == [[0, 0, 127, 0, -63]]
    assert int(b[0, 0]) == 30
    v = np.array([[-32768, 1, 0, 32767]], np.int16)
    x, _, _ = nx.dynquant(v, tab)
    assert x.tolist() == [[-127, 0, 0, 127]]


def test_requant_dyn():
    acc = np.array([[1000, -1000]], np.int32)
    assert nx.requant_dyn(acc, 1, 0, 1 << 14, 15).tolist() == [[127, -128]]
    assert nx.requant_dyn(acc, 3, 2, 1 << 14, 15, bits=16).tolist() == [[6000, -6000]]
    with pytest.raises(ValueError, match="s - b"):
        nx.requant_dyn(acc, 1, 20, 1 << 14, 15)


# -- RMSNorm -------------------------------------------------------------------------------------

def _norm_params(g, frac_bits=10):
    n = g.shape[0]
    real = g * math.sqrt(n) / (np.abs(g).max() * math.sqrt(n) / 32767)
    shift = int(math.floor(math.log2(32767 / np.abs(real).max())))
    gain = np.rint(real * 2.0 ** shift).astype(np.int16)
    return gain, shift, int(round(1e-5 * n * 4 ** frac_bits)), np.abs(g).max() * math.sqrt(n)


def test_rmsnorm_all_zero_input_gives_zeros():
    tab = nx.rsqrt_table()
    gain, shift, eps, _ = _norm_params(np.linspace(0.5, 2.0, 16))
    for e in (eps, 0):
        y = nx.rmsnorm(np.zeros((3, 16), np.int16), gain, shift, e, tab)
        assert y.dtype == np.int16 and not y.any()


def test_rmsnorm_against_float():
    rng = np.random.default_rng(3)
    g = rng.uniform(-2.0, 3.0, 64)
    gain, shift, eps, bound = _norm_params(g)
    x = rng.integers(-6000, 6000, (20, 64)).astype(np.int16)
    y = nx.rmsnorm(x, gain, shift, eps, nx.rsqrt_table()).astype(np.float64) * bound / 32767
    xf = x / 1024.0
    want = g * xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + 1e-5)
    # rsqrt table: <= 2**-9 relative; gain and output rounding: a few LSBs of 32767.
    assert np.abs(y - want).max() <= 2.0 ** -9 * np.abs(want).max() + 4 * bound / 32767


def test_rmsnorm_one_huge_outlier():
    tab = nx.rsqrt_table()
    gain, shift, eps, _ = _norm_params(np.ones(64))
    x = np.ones((1, 64), np.int16)
    x[0, 5] = 32767
    y = nx.rmsnorm(x, gain, shift, eps, tab)
    # x/rms(x) is ~sqrt(64) = 8 at the outlier: the top of the int16 format (no wrap).
    assert 32600 <= y[0, 5] <= 32767 and (y[0, np.arange(64) != 5] >= 0).all()
    x[0, 5] = -32768
    y = nx.rmsnorm(x, gain, shift, eps, tab)
    assert -32768 <= y[0, 5] <= -32600


def test_rsqrt_table():
    t = nx.rsqrt_table()
    assert t.shape == (768,) and (t > 1 << 14).all() and (t < 1 << 15).all()
    assert (np.diff(t) <= 0).all()


# -- softmax -------------------------------------------------------------------------------------

def test_softmax_all_equal_scores_are_uniform():
    e, r = nx.exp2_table(), nx.recip_table()
    for T in (1, 2, 3, 7, 64, 512):
        for value in (0, -(1 << 31), (1 << 31) - 1, 12345):
            p = nx.softmax(np.full((2, T), value, np.int32), None, e, r)
            assert p.dtype == np.uint16
            assert (p == p[0, 0]).all(), (T, value)
            assert abs(int(p[0, 0]) * T - 32768) <= max(T, 32768 >> 8)


def test_softmax_masked_and_extreme_spread():
    e, r = nx.exp2_table(), nx.recip_table()
    t = np.array([[0, 1 << 30, -(1 << 31), 5]], np.int32)
    mask = np.array([[True, False, True, True]])
    p = nx.softmax(t, mask, e, r)
    assert p[0, 1] == 0 and p[0, 2] == 0            # masked; far below the max: 2**-big = 0
    # Entries 0 and 3 differ by 5/256 in log2 units.
    assert abs(p[0, 0] / p[0, 3] - 2.0 ** (-5 / 256)) < 1e-3
    assert abs(int(p.sum()) - 32768) <= 64
    # a row with every entry masked has no distribution: refused, naming it
    with pytest.raises(ValueError, match="at least one valid"):
        nx.softmax(np.zeros((2, 3), np.int32), np.array([[True, False, False], [False] * 3]),
                   e, r)


def test_softmax_against_float():
    rng = np.random.default_rng(4)
    t = rng.integers(-3000, 3000, (10, 100)).astype(np.int32)
    p = nx.softmax(t, None, nx.exp2_table(), nx.recip_table()) / 32768.0
    z = t / 256.0 * math.log(2)
    want = np.exp(z - z.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    assert np.abs(p - want).max() < 2.5e-3


# -- RoPE, SiLU, argmax, tables ------------------------------------------------------------------

def test_rope_tables_and_rotation():
    cos, sin = nx.rope_tables(16, 8)
    assert cos.dtype == np.int16 and cos.shape == (16, 4)
    assert (cos[0] == 1 << 14).all() and (sin[0] == 0).all()
    x = np.array([[-32768, 32767, 100, -100, 5, 6, -7, 8]], np.int16)
    assert (nx.rope(x, cos[0], sin[0], 14, 16) == x).all()          # position 0: identity
    y = nx.rope(x, cos[3], sin[3], 14, 16)
    a = x.astype(np.float64)
    ang = 3 * 10000.0 ** (-np.arange(0, 8, 2) / 8)
    want0 = a[0, 0::2] * np.cos(ang) - a[0, 1::2] * np.sin(ang)
    want1 = a[0, 0::2] * np.sin(ang) + a[0, 1::2] * np.cos(ang)
    assert np.abs(y[0, 0::2] - np.clip(want0, -32768, 32767)).max() <= 4
    assert np.abs(y[0, 1::2] - np.clip(want1, -32768, 32767)).max() <= 4
    # A pair at full scale rotated by 45 degrees exceeds int16: it saturates, it does not wrap.
    c45 = np.array([round(2 ** 14 / math.sqrt(2))], np.int16)
    z = nx.rope(np.array([[32767, -32768]], np.int16), c45, c45, 14, 16)
    assert z.tolist() == [[32767, -1]]       # (32767 - 32768) * 0.7071 = -0.71 -> -1


def test_silu_against_float_and_extremes():
    tab = nx.sigmoid_table()
    assert tab.shape == (1024,) and tab.min() >= 0 and tab.max() < 1 << 15
    h = np.arange(-32768, 32768, 7, dtype=np.int64).astype(np.int16)
    y = nx.silu(h, 11, tab)
    hf = h / 2048.0
    want = hf / (1 + np.exp(-hf))
    # Table step 1/64 (nearest point: |dsigma| <= 1/512) plus 2**-17 entry rounding.
    assert np.abs(y / 2048.0 - want).max() <= np.abs(hf).max() / 400 + 2 / 2048
    assert nx.silu(np.array([32767, -32768], np.int16), 11, tab).tolist()[0] > 32700
    with pytest.raises(ValueError, match="frac_bits"):
        nx.silu(h, 3, tab)


def test_argmax_first_maximum():
    x = np.array([[3, 9, 9, -1], [-5, -5, -5, -5]], np.int32)
    assert nx.argmax(x).tolist() == [1, 0]
    with pytest.raises(TypeError):
        nx.argmax(np.zeros(3, np.float32))


def test_tables():
    e = nx.exp2_table()
    assert e.shape == (256,) and e[0] == 1 << 15 and (np.diff(e) < 0).all() and e[-1] > 1 << 14
    r = nx.recip_table()
    assert r.shape == (256,) and (r > 1 << 14).all() and (r < 1 << 15).all()
    d = nx.dynquant_table()
    assert d.shape == (256,) and (d > 127 << 8).all() and (d < 127 << 9).all()
