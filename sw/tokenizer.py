"""The llama2.c byte-pair tokenizer (``tok*.bin`` files), as ``run.c`` encodes and decodes.

File format (llama2.c ``tokenizer.py`` / ``export``, read by ``run.c``'s ``build_tokenizer``),
little-endian: an int32 ``max_token_length``, then for every token an float32 merge score,
an int32 byte length and that many bytes of the piece (no terminator).  The file does not
store the vocabulary size (``run.c`` takes it from the checkpoint); here it is whatever the
file holds, optionally checked against the model's.

Ids 0, 1, 2 are ``<unk>``, BOS and EOS; ids ``3 .. 258`` are the byte pieces ``<0x00>`` ..
``<0xFF>`` used for byte fallback.
"""

from __future__ import annotations

import codecs
import os
import re
import struct
from pathlib import Path

import numpy as np

__all__ = ["BOS", "EOS", "BYTE_OFFSET", "TokenizerError", "Tokenizer", "describe_tokenizer",
           "load_tokenizer"]

#: Begin-of-sequence token id (llama2.c: 1).  A generated BOS also ends a story.
BOS = 1
#: End-of-sequence token id (llama2.c: 2).
EOS = 2
#: Id of the byte piece ``<0x00>``: byte ``b`` falls back to id ``b + BYTE_OFFSET``.
BYTE_OFFSET = 3

_BYTE_PIECE = re.compile(rb"<0x([0-9A-Fa-f]{2})>")
# run.c starts its best merge score at -1e10 (a float), so a pair scoring lower never merges.
_NO_SCORE = float(np.float32(-1e10))


class TokenizerError(ValueError):
    """A tokenizer file is malformed, or text cannot be encoded with this vocabulary."""


class Tokenizer:
    """A llama2.c BPE vocabulary with run.c's ``encode`` and ``decode``.

    Parameters
    ----------
    pieces : sequence of bytes
        The piece of every token id.
    scores : sequence of float
        The merge score of every token id (float32 values; higher merges first).
    max_token_length : int
        Length bound of the pieces, as stored in the file.

    Raises
    ------
    TokenizerError
        If the lists differ in length, there are fewer than 3 tokens (``<unk>``, BOS, EOS), or
        a piece is longer than `max_token_length`.
    """

    def __init__(self, pieces, scores, max_token_length: int):
        self.pieces: list[bytes] = [bytes(p) for p in pieces]
        self.scores: list[float] = [float(np.float32(s)) for s in scores]
        self.max_token_length = int(max_token_length)
        if len(self.pieces) != len(self.scores):
            raise TokenizerError(f"{len(self.pieces)} pieces but {len(self.scores)} scores")
        if len(self.pieces) < 3:
            raise TokenizerError(f"a vocabulary needs at least 3 tokens (<unk>, BOS, EOS), "
                                 f"not {len(self.pieces)}")
        for i, p in enumerate(self.pieces):
            if len(p) > self.max_token_length:
                raise TokenizerError(f"token {i} has {len(p)} bytes, more than "
                                     f"max_token_length {self.max_token_length}")
        # run.c finds pieces by binary search over the sorted vocabulary; with duplicate
        # pieces (none in real files) we take the lowest id.
        self._lookup: dict[bytes, int] = {}
        for i, p in enumerate(self.pieces):
            self._lookup.setdefault(p, i)

    @property
    def vocab_size(self) -> int:
        """Number of tokens."""
        return len(self.pieces)

    @classmethod
    def load(cls, path: str | os.PathLike, vocab_size: int | None = None) -> Tokenizer:
        """Read a ``tok*.bin`` file (format: see the module docstring).

        Parameters
        ----------
        path : str or os.PathLike
        vocab_size : int, optional
            The model's vocabulary size; the file must hold exactly that many tokens.

        Raises
        ------
        TokenizerError
            If the file is truncated, a length is negative or exceeds ``max_token_length``,
            or the token count differs from `vocab_size`.  The message names the file.
        OSError
            If the file cannot be read.
        """
        path = Path(path)
        data = path.read_bytes()
        try:
            return cls._parse(data, vocab_size)
        except TokenizerError as e:
            from .model import describe_checkpoint
            what = describe_checkpoint(data)
            raise TokenizerError(f"{path}: " + (f"the file is {what}, not a tokenizer" if what
                                                 else str(e))) from None

    @classmethod
    def _parse(cls, data, vocab_size):
        if len(data) < 4:
            raise TokenizerError(f"file is truncated: {len(data)} bytes is shorter than the "
                                 "4-byte max_token_length header")
        (max_len,) = struct.unpack_from("<i", data)
        if not 0 < max_len <= len(data):
            raise TokenizerError("not a llama2.c tokenizer file: its first int32, "
                                 "`max_token_length`, must be a positive integer"
                                 + ("" if max_len <= 0 else f" no larger than the file "
                                    f"({len(data):,} bytes)") + f", not {max_len:,}")
        pieces, scores, at = [], [], 4
        while at < len(data):
            i = len(pieces)
            if at + 8 > len(data):
                raise TokenizerError(f"file is truncated in the score and length of token {i} "
                                     f"at byte {at} (file has {len(data)} bytes)")
            score, n = struct.unpack_from("<fi", data, at)
            at += 8
            if n < 0:
                raise TokenizerError(f"token {i} has a negative length {n}")
            if n > max_len:
                raise TokenizerError(f"token {i} has {n} bytes, more than max_token_length "
                                     f"{max_len}")
            if at + n > len(data):
                raise TokenizerError(f"file is truncated in the {n}-byte piece of token {i} "
                                     f"at byte {at} (file has {len(data)} bytes)")
            pieces.append(data[at:at + n])
            scores.append(score)
            at += n
        if vocab_size is not None and len(pieces) != vocab_size:
            raise TokenizerError(f"file holds {len(pieces)} tokens, the model's vocabulary has "
                                 f"{vocab_size}")
        return cls(pieces, scores, max_len)

    # -- encoding -------------------------------------------------------------------------------

    def _byte_fallback(self, raw: bytes) -> list[int]:
        ids = [b + BYTE_OFFSET for b in raw]
        if ids and max(ids) >= self.vocab_size:
            raise TokenizerError(f"byte 0x{max(raw):02x} has no byte-fallback token: id "
                                 f"{max(ids)} is beyond the vocabulary of {self.vocab_size}")
        return ids

    def encode(self, text: str | bytes, bos: bool = True, eos: bool = False) -> list[int]:
        """Encode `text` into token ids, as run.c's ``encode``.

        Steps: BOS if `bos`; the dummy-prefix token ``" "`` if the text is not empty; one token
        per UTF-8 code point found in the vocabulary, else one byte-fallback token per byte
        (id ``byte + 3``); then, repeatedly, merge the adjacent pair whose concatenation is the
        highest-scoring vocabulary piece (the leftmost on ties) until no pair is in the
        vocabulary; EOS if `eos`.  As in run.c, a code point is at most 4 bytes and stray
        continuation bytes stand alone.

        Parameters
        ----------
        text : str or bytes
            A ``str`` is encoded to UTF-8 with ``errors="surrogateescape"``, so a string that
            came from undecodable bytes (``os.fsdecode``, ``sys.argv``) gives back those bytes.
            ``bytes`` are taken as they are, valid UTF-8 or not.  Unlike run.c (C strings), a
            NUL byte does not end the text; it becomes the byte token ``<0x00>``.
        bos, eos : bool
            Whether to prepend BOS (1) and append EOS (2).

        Returns
        -------
        list of int

        Raises
        ------
        TokenizerError
            If a byte needs a byte-fallback id the vocabulary does not have.
        """
        raw = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
        tokens: list[int] = []
        if raw:
            space = self._lookup.get(b" ")
            # run.c would emit id -1 here; fall back to the byte token instead.
            tokens += [space] if space is not None else self._byte_fallback(b" ")
        i, n = 0, len(raw)
        while i < n:
            # One code point: this byte and up to 3 following continuation bytes (10xxxxxx).
            j = i + 1
            while j < n and (raw[j] & 0xC0) == 0x80 and j - i < 4:
                j += 1
            point = raw[i:j]
            tid = self._lookup.get(point)
            tokens += [tid] if tid is not None else self._byte_fallback(point)
            i = j
        tokens = self._merge(tokens)
        return ([BOS] if bos else []) + tokens + ([EOS] if eos else [])

    def _pair(self, a: int, b: int) -> tuple[float, int] | None:
        tid = self._lookup.get(self.pieces[a] + self.pieces[b])
        return None if tid is None else (self.scores[tid], tid)

    def _merge(self, tokens: list[int]) -> list[int]:
        # cand[i] is the merge of tokens[i] and tokens[i + 1]; only its neighbours change
        # after a merge, so they are the only ones looked up again (run.c looks all up).
        cand = [self._pair(a, b) for a, b in zip(tokens, tokens[1:], strict=False)]
        while True:
            best, best_idx = _NO_SCORE, -1
            for idx, c in enumerate(cand):
                if c is not None and c[0] > best:
                    best, best_idx = c[0], idx
            if best_idx < 0:
                return tokens
            tokens[best_idx] = cand[best_idx][1]
            del tokens[best_idx + 1]
            del cand[best_idx]
            if best_idx > 0:
                cand[best_idx - 1] = self._pair(tokens[best_idx - 1], tokens[best_idx])
            if best_idx < len(cand):
                cand[best_idx] = self._pair(tokens[best_idx], tokens[best_idx + 1])

    # -- decoding -------------------------------------------------------------------------------

    def decode_piece(self, prev: int | None, token: int) -> bytes:
        """Return the bytes `token` stands for when it follows `prev`, as run.c's ``decode``.

        After BOS a leading space is dropped (the dummy prefix; sentencepiece does the same),
        and a byte piece ``<0xNN>`` stands for the raw byte ``0xNN``.

        Parameters
        ----------
        prev : int or None
            The previous token id (``None`` at the start of a text).
        token : int

        Raises
        ------
        IndexError
            If `token` is not in the vocabulary.
        """
        if not 0 <= token < self.vocab_size:
            raise IndexError(f"`token` must be in [0, {self.vocab_size}), not {token}")
        piece = self.pieces[token]
        if prev == BOS and piece.startswith(b" "):
            piece = piece[1:]
        m = _BYTE_PIECE.fullmatch(piece)
        return bytes([int(m.group(1), 16)]) if m else piece

    def decode_bytes(self, ids, prev: int | None = None) -> bytes:
        """Return the concatenated `decode_piece` bytes of `ids`, skipping BOS and EOS.

        BOS and EOS are control tokens that run.c never prints; they still count as `prev`
        for the next token.

        Parameters
        ----------
        ids : iterable of int
        prev : int, optional
            The token before ``ids[0]``, if any.
        """
        out = []
        for t in ids:
            t = int(t)
            if t not in (BOS, EOS):
                out.append(self.decode_piece(prev, t))
            prev = t
        return b"".join(out)

    def decode(self, ids, prev: int | None = None) -> str:
        """Return `decode_bytes` as text (UTF-8, invalid sequences replaced by U+FFFD)."""
        return self.decode_bytes(ids, prev).decode("utf-8", errors="replace")

    def stream_decoder(self) -> StreamDecoder:
        """Return a `StreamDecoder` turning tokens into text one at a time."""
        return StreamDecoder(self)


class StreamDecoder:
    """Incremental token-to-text decoder, for printing tokens as they are generated.

    A UTF-8 character split across byte-fallback tokens is returned whole once its last byte
    arrives; invalid bytes become U+FFFD.  Unlike run.c's ``safe_printf`` (which drops every
    single-byte piece that is not printable ASCII, and with it multi-byte characters made of
    byte tokens), only control characters other than newline and tab are dropped.
    """

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, prev: int | None, token: int) -> str:
        """Return the new printable text of `token`, following `prev` (may be empty)."""
        if token in (BOS, EOS):
            return ""
        text = self._utf8.decode(self.tokenizer.decode_piece(prev, token))
        return "".join(ch for ch in text if ch.isprintable() or ch in "\n\t")

    def flush(self) -> str:
        """Return what an unfinished UTF-8 sequence at the end decodes to (U+FFFD or "")."""
        return self._utf8.decode(b"", final=True)


def describe_tokenizer(data: bytes) -> str | None:
    """Say what tokenizer `data` (a whole file's bytes) is, if it is one.

    `chipotle.model.load_checkpoint` uses it to say that a file given as a model is a
    tokenizer.  A tokenizer needs at least the three special tokens (`Tokenizer`).

    Returns
    -------
    str or None
        ``"a llama2.c tokenizer file (512 tokens)"``, or ``None`` if `data` is not one.
    """
    try:
        t = Tokenizer._parse(data, None)
    except TokenizerError:
        return None
    return f"a llama2.c tokenizer file ({t.vocab_size} tokens)"


def load_tokenizer(path: str | os.PathLike, vocab_size: int | None = None) -> Tokenizer:
    """Read a ``tok*.bin`` file; the same as `Tokenizer.load`."""
    return Tokenizer.load(path, vocab_size)
