"""chipotle.tokenizer: run.c's encode/decode on tok512 and on small crafted vocabularies."""

import struct

import pytest

from chipotle.tokenizer import BOS, EOS, Tokenizer, TokenizerError, load_tokenizer


@pytest.fixture(scope="module")
def tok512(model_paths):
    return load_tokenizer(model_paths[1], vocab_size=512)


def write_tok(path, pieces, scores, max_len=None):
    max_len = max(len(p) for p in pieces) if max_len is None else max_len
    out = [struct.pack("<i", max_len)]
    for p, s in zip(pieces, scores, strict=True):
        out.append(struct.pack("<fi", s, len(p)) + p)
    path.write_bytes(b"".join(out))
    return path


BYTES = [f"<0x{b:02X}>".encode() for b in range(256)]
SPECIAL = [b"<unk>", b"\n<s>\n", b"\n</s>\n"]


def crafted(extra):
    """A vocabulary: <unk>, BOS, EOS, the 256 byte pieces, then `extra` (piece -> score)."""
    pieces = SPECIAL + BYTES + list(extra)
    scores = [0.0] * (3 + 256) + list(extra.values())
    return Tokenizer(pieces, scores, max(map(len, pieces)))


# -- tok512 -------------------------------------------------------------------------------------

@pytest.mark.model
def test_once_upon_a_time(tok512):
    # The expectation stated in issue 2 (and what llama2.c's run.c produces).
    assert tok512.encode("Once upon a time") == [1, 403, 407, 261, 378]
    assert tok512.encode("Once upon a time", bos=False, eos=True) == [403, 407, 261, 378, 2]
    assert tok512.decode([1, 403, 407, 261, 378]) == "Once upon a time"


@pytest.mark.model
def test_empty_prompt(tok512):
    assert tok512.encode("") == [BOS]
    assert tok512.encode("", bos=False) == []
    assert tok512.encode(b"", eos=True) == [BOS, EOS]


@pytest.mark.model
@pytest.mark.parametrize("text", ["héllo 😀 wörld", "日本語", "  two leading spaces",
                                  "tab\tand\nnl", "x\x00y"])
def test_unicode_round_trip(tok512, text):
    ids = tok512.encode(text)
    assert ids[0] == BOS and all(0 <= i < 512 for i in ids)
    assert tok512.decode(ids) == text


@pytest.mark.model
def test_emoji_uses_byte_fallback(tok512):
    ids = tok512.encode("😀", bos=False)
    # Not in tok512: the dummy-prefix space, then the 4 UTF-8 bytes as ids byte + 3.
    assert ids == [tok512.encode(" ", bos=False)[0]] + [b + 3 for b in "😀".encode()]


@pytest.mark.model
@pytest.mark.parametrize("raw", [b"\xff\xfeabc", b"abc\x80\x80\x80\x80\x80", b"\xc3", b"a\xe2\x82"])
def test_invalid_utf8_round_trip(tok512, raw):
    for text in (raw, raw.decode("utf-8", "surrogateescape")):
        ids = tok512.encode(text)
        assert tok512.decode_bytes(ids) == raw
        assert tok512.decode(ids) == raw.decode("utf-8", "replace")


@pytest.mark.model
def test_decode_piece(tok512):
    once = tok512.encode("Once", bos=False)[0]
    assert tok512.pieces[once] == b" Once"
    assert tok512.decode_piece(BOS, once) == b"Once"       # dummy prefix dropped after BOS
    assert tok512.decode_piece(once, once) == b" Once"
    assert tok512.decode_piece(None, 3 + 0x41) == b"A"     # <0x41>
    assert tok512.decode_piece(None, 3 + 0xFF) == b"\xff"
    with pytest.raises(IndexError, match=r"`token` must be in \[0, 512\), not 512"):
        tok512.decode_piece(None, 512)


@pytest.mark.model
def test_stream_decoder(tok512):
    ids = tok512.encode("a😀b\x01")
    dec = tok512.stream_decoder()
    parts = [dec.feed(p, t) for p, t in zip(ids, ids[1:], strict=False)]
    # The emoji's 4 byte tokens print nothing until the last; the control byte is dropped.
    assert "".join(parts) + dec.flush() == "a😀b"
    assert parts.count("") >= 3


# -- merge rules on a crafted vocabulary --------------------------------------------------------

def test_merge_priority_and_ties():
    t = crafted({b" ": -1.0, b"a": -1.0, b"b": -1.0, b"c": -1.0, b"ab": -2.0, b"bc": -2.0,
                 b" a": -5.0})
    ids = {p: i for i, p in enumerate(t.pieces)}
    # " ", a, b, c: "ab" and "bc" tie at -2, the leftmost merges; then nothing merges.
    assert t.encode("abc") == [BOS, ids[b" "], ids[b"ab"], ids[b"c"]]
    # Raising " a" above "ab" changes the first merge; then "bc" follows.
    t2 = crafted({b" ": -1.0, b"a": -1.0, b"b": -1.0, b"c": -1.0, b"ab": -2.0, b"bc": -2.0,
                  b" a": -1.5})
    ids2 = {p: i for i, p in enumerate(t2.pieces)}
    assert t2.encode("abc") == [BOS, ids2[b" a"], ids2[b"bc"]]


def test_code_points_and_fallback():
    t = crafted({b" ": -1.0, "é".encode(): -1.0})
    e = t.pieces.index("é".encode())
    assert t.encode("éü", bos=False) == [t.pieces.index(b" "), e, 0xC3 + 3, 0xBC + 3]
    # A run of 6 continuation bytes splits into code-point buffers of at most 4 bytes.
    assert t.encode(b"\x80" * 6, bos=False)[1:] == [0x80 + 3] * 6


def test_no_byte_tokens():
    t = Tokenizer(SPECIAL + [b" ", b"a"], [0.0] * 5, 6)
    assert t.encode("a a") == [BOS, 3, 4, 3, 4]
    with pytest.raises(TokenizerError, match="byte 0x62 has no byte-fallback token"):
        t.encode("b")


# -- malformed files ----------------------------------------------------------------------------

def test_load_round_trip(tmp_path):
    pieces, scores = SPECIAL + BYTES + [b" hello"], [0.0] * 259 + [-3.5]
    t = load_tokenizer(write_tok(tmp_path / "t.bin", pieces, scores), vocab_size=260)
    assert t.pieces == pieces and t.scores == scores and t.max_token_length == 6


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d[:2], "truncated: 2 bytes is shorter than the 4-byte max_token_length header"),
    (lambda d: d[:-1], r"truncated in the 2-byte piece of token 3"),
    (lambda d: d[:-5], r"truncated in the score and length of token 3"),
    (lambda d: struct.pack("<i", 0) + d[4:],
     "not a llama2.c tokenizer file: its first int32, `max_token_length`, must be a positive "
     "integer, not 0"),
    (lambda d: struct.pack("<i", 5) + d[4:], "token 2 has 6 bytes, more than max_token_length 5"),
    (lambda d: d + struct.pack("<fi", 0.0, -1), "token 4 has a negative length -1"),
])
def test_rejects_malformed(tmp_path, mutate, message):
    good = write_tok(tmp_path / "good.bin", SPECIAL + [b"ab"], [0.0] * 4).read_bytes()
    bad = tmp_path / "bad.bin"
    bad.write_bytes(mutate(good))
    with pytest.raises(TokenizerError, match=f"bad.bin: (file is )?{message}"):
        load_tokenizer(bad)


@pytest.mark.parametrize("fmt", ["legacy", "v1", "v2"])
def test_a_model_checkpoint_given_as_the_tokenizer_is_named(tmp_path, fmt):
    """A checkpoint of any format given as the tokenizer: the refusal says what the file is."""
    from chipotle.model import ModelConfig, synthetic_checkpoint, write_checkpoint
    cfg = ModelConfig(dim=16, hidden_dim=24, n_layers=1, n_heads=2, n_kv_heads=1,
                      vocab_size=300, seq_len=8)
    path = tmp_path / "model.bin"
    write_checkpoint(path, synthetic_checkpoint(cfg, seed=0), format=fmt,
                     **({"group_size": 8} if fmt == "v2" else {}))
    with pytest.raises(TokenizerError, match=rf"model\.bin: the file is a {fmt} llama2\.c "
                       r"model checkpoint \(dim 16, hidden_dim 24, n_layers 1, n_heads 2, "
                       r"n_kv_heads 1, vocab_size 300, seq_len 8\), not a tokenizer$"):
        load_tokenizer(path)


def test_a_malformed_tokenizer_is_not_called_a_checkpoint(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(struct.pack("<i", -7) + bytes(40))
    with pytest.raises(TokenizerError, match=r"must be a positive integer, not -7$"):
        load_tokenizer(bad)
    # random bytes: a header no token could reach (a fresh user's file was refused only at
    # "token 0 has 2099892363 bytes, more than max_token_length 1707940918")
    bad.write_bytes(struct.pack("<i", 1_707_940_918) + bytes(40))
    with pytest.raises(TokenizerError, match=r"bad.bin: not a llama2.c tokenizer file: its first "
                       r"int32, `max_token_length`, must be a positive integer no larger than "
                       r"the file \(44 bytes\), not 1,707,940,918$"):
        load_tokenizer(bad)


def test_rejects_wrong_vocab_size(tmp_path):
    path = write_tok(tmp_path / "t.bin", SPECIAL + [b"ab"], [0.0] * 4)
    with pytest.raises(TokenizerError, match="file holds 4 tokens, the model's vocabulary has 5"):
        load_tokenizer(path, vocab_size=5)
    with pytest.raises(TokenizerError, match="at least 3 tokens"):
        load_tokenizer(write_tok(tmp_path / "t2.bin", SPECIAL[:2], [0.0] * 2))
