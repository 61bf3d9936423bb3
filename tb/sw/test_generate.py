"""chipotle.generate: prompt forcing, sampling and the stop rules, on a scripted model."""

import numpy as np
import pytest

from chipotle.generate import Done, PromptTooLongError, Step, StopReason, generate
from chipotle.sampling import Sampler
from chipotle.tokenizer import BOS, EOS, Tokenizer

PIECES = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [f"<0x{b:02X}>".encode() for b in range(256)] + [
    b" ", b"a", b"b", b" a", b" b"]
VOCAB = len(PIECES)
ID = {p: i for i, p in enumerate(PIECES)}


@pytest.fixture
def tok():
    return Tokenizer(PIECES, [0.0] * 259 + [-1.0, -1.0, -1.0, -2.0, -2.0], 6)


class Scripted:
    """A model whose greedy choice at position p is script[p]; records its calls."""

    def __init__(self, script, seq_len=16):
        self.script, self.calls, self.resets = script, [], 0
        self.config = type("C", (), {"seq_len": seq_len})()

    def reset(self):
        self.resets += 1
        self.calls.clear()

    def forward(self, token, pos):
        self.calls.append((token, pos))
        logits = np.zeros(VOCAB, np.float64)   # any real dtype; the loop samples float32
        logits[self.script[pos % len(self.script)]] = 5.0
        return logits


def run(model, tok, prompt="", steps=None, **kw):
    events = list(generate(model, tok, Sampler(VOCAB, temperature=0.0, seed=1), prompt, steps,
                           **kw))
    assert all(isinstance(e, Step) for e in events[:-1]) and isinstance(events[-1], Done)
    return events[:-1], events[-1]


def test_prompt_forcing_then_sampling(tok):
    ids = tok.encode("ab")                        # BOS, " a", "b"
    assert ids == [BOS, ID[b" a"], ID[b"b"]]
    model = Scripted([ID[b"b"]] * 3 + [ID[b" b"]] * 10)
    steps, done = run(model, tok, "ab", steps=4)
    assert model.resets == 1
    # The prompt's tokens are fed whatever the model prefers; sampling starts at the last one.
    assert [(s.pos, s.prev, s.token, s.forced) for s in steps] == [
        (0, BOS, ID[b" a"], True), (1, ID[b" a"], ID[b"b"], True),
        (2, ID[b"b"], ID[b"b"], False), (3, ID[b"b"], ID[b" b"], False),
        (4, ID[b" b"], ID[b" b"], False), (5, ID[b" b"], ID[b" b"], False)]
    assert model.calls == [(s.prev, s.pos) for s in steps]
    assert "".join(s.text for s in steps) == "abb b b b"   # the dummy space after BOS is dropped
    assert (done.reason, done.prompt_tokens, done.generated, done.positions) == (
        StopReason.STEPS, 3, 4, 6)
    assert done.tokens == tuple(ids) + tuple(s.token for s in steps[2:])


@pytest.mark.parametrize("stop", [BOS, EOS])
def test_stops_on_bos_or_eos(tok, stop):
    steps, done = run(Scripted([ID[b"a"], ID[b"b"], stop]), tok, "", steps=10)
    assert [s.token for s in steps] == [ID[b"a"], ID[b"b"]]
    assert (done.reason, done.generated, done.positions) == (StopReason.BOS_EOS, 2, 3)
    assert BOS not in done.tokens[1:] and EOS not in done.tokens


@pytest.mark.parametrize("steps", [None, 0, 100])
def test_stops_at_context_length(tok, steps):
    model = Scripted([ID[b"a"]], seq_len=5)
    events, done = run(model, tok, "b", steps=steps)
    # Positions 0..4 run; the token sampled at position 4 ends the sequence unfed.
    assert done.reason is StopReason.CONTEXT and done.positions == 5
    assert [pos for _, pos in model.calls] == [0, 1, 2, 3, 4]
    assert len(done.tokens) == 6 and done.generated == 6 - done.prompt_tokens


def test_prompt_filling_the_context(tok):
    prompt = "b" * 4                                 # BOS, " b", b, b, b: 5 tokens
    _, done = run(Scripted([ID[b"a"]], seq_len=5), tok, prompt, steps=3)
    assert (done.reason, done.generated) == (StopReason.CONTEXT, 1)
    with pytest.raises(PromptTooLongError, match="the prompt is 6 tokens .* context length of 5"):
        run(Scripted([ID[b"a"]], seq_len=5), tok, "b" * 5)


def test_context_length_argument(tok):
    class Bare:
        def reset(self):
            pass

        def forward(self, token, pos):
            return np.eye(VOCAB, dtype=np.float32)[ID[b"a"]]

    _, done = run(Bare(), tok, "", steps=None, context_length=3)
    assert (done.reason, done.positions) == (StopReason.CONTEXT, 3)
    with pytest.raises(ValueError, match="`context_length` is needed"):
        run(Bare(), tok, "")
    with pytest.raises(ValueError, match="`steps` must be a non-negative integer, not -1"):
        run(Bare(), tok, "", steps=-1, context_length=3)


def test_utf8_split_over_byte_tokens(tok):
    emoji = [b + 3 for b in "😀".encode()]
    steps, done = run(Scripted(emoji + [ID[b"a"]]), tok, "", steps=5)
    assert [s.text for s in steps] == ["", "", "", "😀", "a"]
    # Cut in the middle of the character: the rest is flushed as U+FFFD in Done.text.
    steps, done = run(Scripted(emoji), tok, "", steps=2)
    assert "".join(s.text for s in steps) == "" and done.text == "\ufffd"


@pytest.mark.model
def test_reference_backend_story(model_paths):
    from chipotle.model import load_checkpoint
    from chipotle.reference import Transformer
    from chipotle.tokenizer import load_tokenizer

    ckpt = load_checkpoint(model_paths[0])
    tok512 = load_tokenizer(model_paths[1], 512)
    events = list(generate(Transformer(ckpt), tok512, Sampler(512, 0.0, seed=1),
                           "Once upon a time", 30))
    done = events[-1]
    text = "".join(e.text for e in events[:-1])
    assert text == tok512.decode(done.tokens)
    assert text.startswith("Once upon a time, there was a little girl named Lily.")
    assert (done.prompt_tokens, done.generated, done.positions) == (5, 30, 34)


class RandomLogits:
    """A model with random real logits (multiples of 2**-16), the same at each reset."""

    def __init__(self, seq_len=16):
        self.config = type("C", (), {"seq_len": seq_len})()
        self.reset()

    def reset(self):
        self.rng = np.random.default_rng(7)

    def forward(self, token, pos):
        return np.round(self.rng.normal(0, 2, VOCAB) * 65536) / 65536


class RawQ16(RandomLogits):
    """The same logits served as Q16 int32, without saying how to dequantise them."""

    def forward(self, token, pos):
        return np.round(super().forward(token, pos) * 65536).astype(np.int32)


class Q16(RawQ16):
    """The same logits served as Q16 int32, with dequantize_logits (like the golden model)."""

    def dequantize_logits(self, logits):
        return (logits / 65536.0).astype(np.float32)


def test_fixed_point_logits_are_dequantized_before_sampling(tok):
    def ids(model):
        sampler = Sampler(VOCAB, temperature=1.0, topp=0.9, seed=42)
        return list(generate(model, tok, sampler, "", 12))[-1].tokens

    real = ids(RandomLogits())
    assert ids(Q16()) == real
    # Sampled raw, Q16 logits are 65536x too sharp: the choices become greedy and differ.
    assert ids(RawQ16()) != real
