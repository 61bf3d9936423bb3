"""The text generation loop, shared by every backend (reference, golden, ISA simulator, RTL).

It is llama2.c ``run.c``'s ``generate``: encode the prompt with BOS, run the model position by
position, force the prompt's tokens while there are any, then sample; stop on a sampled BOS or
EOS, after the requested number of sampled tokens, or at the context length.  It yields
events, so that callers can stream text, collect ids or time steps as they please.

A model is anything with ``forward(token, pos) -> logits`` (shape ``(vocab_size,)``, any real
dtype; it is sampled as float32) and ``reset()``; see `Model`.  A model whose logits are fixed
point (the golden model, the accelerator) also has ``dequantize_logits(logits)``, which the loop
applies before sampling so that temperature and top-p see the logits' real values.

Differences from run.c: ``steps`` counts sampled tokens, not positions (run.c's ``-n`` includes
the prompt); EOS stops generation as BOS does; a prompt longer than the context is an error
(run.c overruns its KV cache).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .sampling import Sampler
from .tokenizer import BOS, EOS, Tokenizer

__all__ = ["Model", "StopReason", "Step", "Done", "PromptTooLongError", "check_prompt_length",
           "encode_prompt", "generate"]


class Model(Protocol):
    """What the generation loop needs from a backend."""

    def forward(self, token: int, pos: int) -> np.ndarray:
        """Run `token` at position `pos` and return the next-token logits ``(vocab_size,)``."""

    def reset(self) -> None:
        """Forget the KV cache, to start a new sequence at position 0."""

    # Optional: ``dequantize_logits(logits) -> np.ndarray`` (float32 real values), for
    # backends whose logits are fixed-point integers.


class StopReason(enum.Enum):
    """Why generation ended."""

    STEPS = "steps"                    #: the requested number of tokens was sampled
    BOS_EOS = "BOS/EOS"                #: the model sampled BOS (1) or EOS (2)
    CONTEXT = "context length"         #: every position of the context was used


class PromptTooLongError(ValueError):
    """The prompt needs more positions than the model's context length."""


@dataclass(frozen=True)
class Step:
    """One token added to the sequence.

    Attributes
    ----------
    pos : int
        Position whose logits chose `token` (so `token` sits at ``pos + 1``).
    prev : int
        The token at `pos`.
    token : int
        The new token.
    forced : bool
        True for a prompt token (forced, not sampled).
    text : str
        The printable text `token` adds (may be empty: part of a UTF-8 character, a control
        byte).
    """

    pos: int
    prev: int
    token: int
    forced: bool
    text: str


@dataclass(frozen=True)
class Done:
    """The last event of a generation.

    Attributes
    ----------
    reason : StopReason
    prompt_tokens : int
        Number of prompt tokens, BOS included.
    generated : int
        Number of sampled tokens added to the sequence (a stopping BOS/EOS is not counted).
    positions : int
        Number of forward steps run.
    seconds : float
        Wall time of the whole loop, forward steps and sampling.
    tokens : tuple of int
        The whole sequence: prompt (with BOS) and generated tokens.
    text : str
        Text still held by the streaming decoder (an unfinished UTF-8 character), else "".
    """

    reason: StopReason
    prompt_tokens: int
    generated: int
    positions: int
    seconds: float
    tokens: tuple[int, ...]
    text: str = ""

    @property
    def tokens_per_second(self) -> float:
        """Forward steps per second of wall time (0 if nothing ran)."""
        return self.positions / self.seconds if self.seconds > 0 else 0.0


def encode_prompt(tokenizer: Tokenizer, prompt: str | bytes, context_length: int) -> list[int]:
    """Encode `prompt` with BOS, checking that it fits the context.

    Raises
    ------
    PromptTooLongError
        If the prompt has more tokens than `context_length` positions.
    """
    ids = tokenizer.encode(prompt, bos=True, eos=False)
    check_prompt_length(len(ids), context_length)
    return ids


def check_prompt_length(n: int, context_length: int, what: str | None = None,
                        fix: str | None = None) -> None:
    """Check that a prompt of `n` tokens (BOS included) fits `context_length` positions.

    Parameters
    ----------
    what : str, optional
        Where the limit comes from, for the message (default: "the model's seq_len").
    fix : str, optional
        What the user can change, appended to the message (default: shorten the prompt).

    Raises
    ------
    PromptTooLongError
        If ``n > context_length``; the message names the two numbers, the limit's source and
        the fix.
    """
    if n > context_length:
        default_what = "the model's seq_len"
        raise PromptTooLongError(
            f"the prompt is {n} tokens (BOS included), longer than the context length of "
            f"{context_length} position{'s' * (context_length != 1)} "
            f"({what or default_what}): "
            f"{fix or 'shorten the prompt'}")


def generate(model: Model, tokenizer: Tokenizer, sampler: Sampler, prompt: str | bytes = "",
             steps: int | None = 256, context_length: int | None = None
             ) -> Iterator[Step | Done]:
    """Generate text: yield a `Step` per token added, then one `Done`.

    Parameters
    ----------
    model : Model
        Reset before the first step.
    tokenizer : chipotle.tokenizer.Tokenizer
    sampler : chipotle.sampling.Sampler
    prompt : str or bytes
        Text to continue; empty starts from BOS alone.
    steps : int or None
        Largest number of tokens to sample; ``None`` or 0: until BOS/EOS or the context ends.
    context_length : int, optional
        Number of positions the model has; defaults to ``model.config.seq_len``.

    Raises
    ------
    PromptTooLongError
        Before any step, if the prompt does not fit the context.
    ValueError
        If `steps` is negative, or no context length is given or found.
    """
    if steps is not None and steps < 0:
        raise ValueError(f"`steps` must be a non-negative integer, not {steps}")
    if context_length is None:
        config = getattr(model, "config", None)
        if config is None:
            raise ValueError("`context_length` is needed: the model has no `config.seq_len`")
        context_length = config.seq_len
    ids = encode_prompt(tokenizer, prompt, context_length)
    n_prompt = len(ids)
    limit = steps or None
    decoder = tokenizer.stream_decoder()

    to_real = getattr(model, "dequantize_logits", None)
    model.reset()
    start = time.perf_counter()
    token, pos, generated = ids[0], 0, 0
    while True:
        if limit is not None and generated >= limit:
            reason = StopReason.STEPS
            break
        if pos >= context_length:
            reason = StopReason.CONTEXT
            break
        logits = model.forward(token, pos)
        forced = pos < n_prompt - 1
        if forced:
            nxt = ids[pos + 1]
        else:
            real = to_real(logits) if to_real is not None else logits
            nxt = sampler.sample(np.asarray(real, np.float32))
            if nxt in (BOS, EOS):
                pos += 1
                reason = StopReason.BOS_EOS
                break
            generated += 1
            ids.append(nxt)
        yield Step(pos, token, nxt, forced, decoder.feed(token, nxt))
        pos += 1
        token = nxt
    seconds = time.perf_counter() - start
    yield Done(reason, n_prompt, generated, pos, seconds, tuple(ids), decoder.flush())
