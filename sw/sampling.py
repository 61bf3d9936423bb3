"""Token sampling as llama2.c's ``run.c``: greedy, temperature, top-p, xorshift RNG.

With the same logits, temperature, top-p and seed, `Sampler` draws the same random numbers
in the same order as run.c's ``sample`` (one ``random_f32`` per non-greedy step) and does
its arithmetic in float32 as run.c does: temperature division, softmax with a sequential
(left-to-right) float32 sum, float32 cumulative sums, float32 coin.  Remaining differences:
numpy's ``exp`` may differ from the C library's ``expf`` in the last bit, and equal
probabilities are sorted in index order (a stable sort), where C's ``qsort`` leaves their
order to the C library.

Seeds (run.c's ``main``): run.c replaces a seed ``<= 0`` by ``time(NULL)``.  Here ``seed=None``
or ``0`` does the same (``int(time.time())``) and the seed used is kept in `Sampler.seed` so a
run can be repeated; a negative seed is an error rather than silently time-based.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["XORSHIFT_MULTIPLIER", "random_u32", "random_f32", "softmax", "sample_argmax",
           "sample_mult", "sample_topp", "Sampler"]

_MASK64 = (1 << 64) - 1
#: Output multiplier of the xorshift64* generator (run.c's ``0x2545F4914F6CDD1Dull``).
XORSHIFT_MULTIPLIER = 0x2545F4914F6CDD1D


def random_u32(state: int) -> tuple[int, int]:
    """Advance the xorshift64* state and return ``(value, new_state)``, as run.c's ``random_u32``.

    ``state ^= state >> 12; state ^= state << 25; state ^= state >> 27`` (64-bit), then
    ``value = (state * 0x2545F4914F6CDD1D mod 2**64) >> 32``.

    Parameters
    ----------
    state : int
        64-bit unsigned state (a zero state stays zero forever).

    Returns
    -------
    value : int
        In ``[0, 2**32)``.
    new_state : int
    """
    state &= _MASK64
    state ^= state >> 12
    state ^= (state << 25) & _MASK64
    state ^= state >> 27
    return ((state * XORSHIFT_MULTIPLIER) & _MASK64) >> 32, state


def random_f32(state: int) -> tuple[np.float32, int]:
    """Return ``(coin, new_state)``: a float32 in ``[0, 1)`` from the top 24 bits of `random_u32`.

    As run.c's ``random_f32``: ``(random_u32 >> 8) / 16777216.0f`` (exact in float32).
    """
    value, state = random_u32(state)
    return np.float32((value >> 8) / 16777216.0), state


def softmax(x: np.ndarray) -> np.ndarray:
    """Return run.c's ``softmax`` of `x` in float32: subtract the max, exp, divide by the sum.

    The sum is accumulated left to right in float32, as run.c's loop.

    Parameters
    ----------
    x : numpy.ndarray
        Shape ``(n,)``, converted to float32.
    """
    x = np.asarray(x, np.float32)
    e = np.exp(x - x.max())
    total = np.cumsum(e, dtype=np.float32)[-1]  # sequential float32 accumulation
    return e / total


def sample_argmax(probabilities: np.ndarray) -> int:
    """Return the index of the largest value (the first on ties), as run.c's ``sample_argmax``."""
    return int(np.argmax(probabilities))


def sample_mult(probabilities: np.ndarray, coin: float) -> int:
    """Sample from `probabilities` with `coin` in ``[0, 1)``, as run.c's ``sample_mult``.

    Returns the first index whose float32 cumulative sum exceeds `coin`, else the last index
    (rounding).
    """
    cdf = np.cumsum(np.asarray(probabilities, np.float32), dtype=np.float32)
    hits = np.flatnonzero(np.float32(coin) < cdf)
    return int(hits[0]) if hits.size else len(cdf) - 1


def sample_topp(probabilities: np.ndarray, topp: float, coin: float) -> int:
    """Nucleus sampling as run.c's ``sample_topp``.

    Keep the tokens with probability ``>= (1 - topp) / (n - 1)`` (no token below can be in the
    nucleus), sort them by decreasing probability, cut after the first one where the float32
    cumulative probability exceeds `topp`, and sample within that prefix with ``r = coin *
    (its cumulative probability)``.

    Parameters
    ----------
    probabilities : numpy.ndarray
        Shape ``(n,)``, summing to 1.
    topp : float
        In ``(0, 1)``.
    coin : float
        In ``[0, 1)``.

    Returns
    -------
    int
        A token index.  If no token passes the prefilter (possible only for a nearly uniform
        distribution and a tiny `topp`, where run.c reads out of bounds), the most probable
        token.
    """
    p = np.asarray(probabilities, np.float32)
    n = p.shape[0]
    if n == 1:
        return 0
    cutoff = (np.float32(1.0) - np.float32(topp)) / np.float32(n - 1)
    candidates = np.flatnonzero(p >= cutoff)
    if candidates.size == 0:
        return sample_argmax(p)
    order = candidates[np.argsort(-p[candidates], kind="stable")]
    cum = np.cumsum(p[order], dtype=np.float32)
    over = np.flatnonzero(cum > np.float32(topp))
    last = int(over[0]) if over.size else len(order) - 1
    r = np.float32(coin) * cum[last]
    hits = np.flatnonzero(r < cum[: last + 1])
    return int(order[hits[0] if hits.size else last])


def _is_int(v) -> bool:
    """``v`` is an integer (Python or numpy), not a bool or a float."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


class Sampler:
    """Pick the next token from logits, as run.c's ``Sampler``.

    Parameters
    ----------
    vocab_size : int
        Number of logits expected.
    temperature : float
        0 for greedy argmax (no random number drawn); otherwise logits are divided by it
        before the softmax.  run.c's default: 1.0.
    topp : float
        Nucleus mass in ``(0, 1)`` for top-p sampling; 0 or 1 samples from the whole
        distribution.  run.c's default: 0.9.
    seed : int, optional
        Initial xorshift state.  ``None`` or 0: the current Unix time in seconds, as run.c.

    Attributes
    ----------
    seed : int
        The seed in use (after the time-based replacement).
    state : int
        The current 64-bit xorshift state.

    Raises
    ------
    ValueError
        If `vocab_size` is not a positive integer, `temperature` is negative or not
        finite, `topp` is outside ``[0, 1]``, or `seed` is not an integer in
        ``[0, 2**64 - 1]``.  (run.c quietly replaces such values.)
    """

    def __init__(self, vocab_size: int, temperature: float = 1.0, topp: float = 0.9,
                 seed: int | None = None):
        if not _is_int(vocab_size) or int(vocab_size) <= 0:
            raise ValueError(f"`vocab_size` must be a positive integer, not {vocab_size!r}")
        if not (np.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"`temperature` must be a finite number >= 0, not {temperature}")
        if not 0 <= topp <= 1:
            raise ValueError(f"`topp` must be in [0, 1], not {topp}")
        if seed is not None and not (_is_int(seed) and 0 <= seed <= _MASK64):
            raise ValueError(f"`seed` must be an integer in [0, 2**64 - 1] (the xorshift "
                             f"state is 64 bits), not {seed}")
        self.vocab_size = int(vocab_size)
        self.temperature = np.float32(temperature)
        self.topp = np.float32(topp)
        self.seed = int(seed) if seed else int(time.time())
        self.state = self.seed & _MASK64

    def random_u32(self) -> int:
        """Draw the next 32-bit value (`random_u32`), advancing `state`."""
        value, self.state = random_u32(self.state)
        return value

    def random_f32(self) -> np.float32:
        """Draw the next float32 coin in ``[0, 1)`` (`random_f32`), advancing `state`."""
        coin, self.state = random_f32(self.state)
        return coin

    def sample(self, logits: np.ndarray) -> int:
        """Return the next token id for `logits` (which are not modified).

        Parameters
        ----------
        logits : numpy.ndarray
            Shape ``(vocab_size,)``; converted to float32.

        Raises
        ------
        ValueError
            If `logits` has the wrong shape or holds a NaN (no distribution to sample).
        """
        x = np.asarray(logits, np.float32)
        if x.shape != (self.vocab_size,):
            raise ValueError(f"`logits` must have shape ({self.vocab_size},), not {x.shape}")
        if np.isnan(x).any():
            raise ValueError(f"`logits` holds NaN (token {int(np.flatnonzero(np.isnan(x))[0])})")
        if self.temperature == 0:
            return sample_argmax(x)
        with np.errstate(over="ignore"):
            scaled = x / self.temperature
            span = scaled.max() - scaled.min()     # softmax subtracts the maximum
        if not np.isfinite(span):
            # A temperature so small that logits / T overflows float32 (e.g. 1e-38): the
            # distribution is the T -> 0 limit, all mass on the largest logit.  The coin is
            # still drawn, so the random stream advances as at any other temperature.
            self.random_f32()
            return sample_argmax(x)
        probs = softmax(scaled)
        coin = self.random_f32()
        if self.topp <= 0 or self.topp >= 1:
            return sample_mult(probs, coin)
        return sample_topp(probs, self.topp, coin)
