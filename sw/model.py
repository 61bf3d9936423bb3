"""Read and write llama2.c checkpoints.

Three on-disk formats exist, all little-endian, all produced by llama2.c's ``export.py``:

``"legacy"`` (``legacy_export``, read by ``run.c``)
    A header of 7 int32 (``dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
    seq_len``), then float32 tensors in the order ``token_embedding, rms_att, wq, wk, wv, wo,
    rms_ffn, w1, w2, w3, rms_final, freq_cis_real, freq_cis_imag`` and, only when the
    classifier is not shared with the token embedding, ``wcls``.  A negative ``vocab_size``
    is the flag for a separate classifier.  The two RoPE tables (``seq_len * head_size / 2``
    floats each) are skipped on load: the forward pass computes RoPE itself, as ``run.c``
    does.

``"v1"`` (``version1_export``)
    A 256-byte header: uint32 magic ``0x616b3432`` (``"ak42"``), int32 version 1, the same
    7 int32 (``vocab_size`` always positive), a uint8 ``shared_classifier`` flag, zero
    padding.  Then float32 tensors in the order ``rms_att, rms_ffn, rms_final,
    token_embedding, wq, wk, wv, wo, w1, w2, w3`` and ``wcls`` when not shared.

``"v2"`` (``version2_export``, read by ``runq.c``)
    The v1 header with version 2 and an int32 ``group_size`` right after the flag byte (byte
    offset 37, unaligned), zero padding to 256 bytes.  Then the norm weights as float32
    (``rms_att, rms_ffn, rms_final``), then the Q8_0 tensors ``token_embedding``, each layer
    of ``wq``, ``wk``, ``wv``, ``wo``, ``w1``, ``w2``, ``w3``, and ``wcls`` when not shared;
    each one is its int8 values followed by its float32 scales (one per ``group_size``
    consecutive values of the flattened tensor).  Loading dequantises to float32
    (``value = q * scale``, as ``runq.c``'s ``dequantize``).

Every size comes from the header; a file whose length disagrees with its header is rejected.
Matrices use llama2.c's ``(out, in)`` layout: ``y = w @ x``.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "FORMATS",
    "MAGIC",
    "HEADER_SIZE",
    "CheckpointError",
    "ModelConfig",
    "TransformerWeights",
    "Checkpoint",
    "describe_checkpoint",
    "check_checkpoint_header",
    "load_checkpoint",
    "write_checkpoint",
    "weight_shapes",
    "synthetic_checkpoint",
]

#: Checkpoint formats, in the naming of this module.
FORMATS = ("legacy", "v1", "v2")
#: Magic number of versioned exports: the ASCII bytes ``"ak42"`` read as a big-endian uint32.
MAGIC = 0x616B3432
#: Header size of versioned exports, in bytes.
HEADER_SIZE = 256

_CONFIG_FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size",
                  "seq_len")
_LEGACY_HEADER = struct.Struct("<7i")
# magic, version, 7 config ints, shared-classifier byte (then, in v2, the group size).
_V_HEADER = struct.Struct("<Ii7iB")
_V2_GROUP = struct.Struct("<i")

# Tensor order of each format (``rope`` stands for the two skipped legacy RoPE tables).
_LEGACY_ORDER = ("token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2",
                 "w3", "rms_final", "rope")
_V1_ORDER = ("rms_att", "rms_ffn", "rms_final", "token_embedding", "wq", "wk", "wv", "wo",
             "w1", "w2", "w3")
_V2_FLOAT_ORDER = ("rms_att", "rms_ffn", "rms_final")
_V2_QUANT_ORDER = ("token_embedding", "wq", "wk", "wv", "wo", "w1", "w2", "w3")
# Tensors with a leading layer axis; v2 quantises each layer as its own tensor.
_PER_LAYER = frozenset({"rms_att", "rms_ffn", "wq", "wk", "wv", "wo", "w1", "w2", "w3"})


class CheckpointError(ValueError):
    """A checkpoint file is malformed, or a checkpoint cannot be written in a format."""


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, not {value!r}")
    return int(value)


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a llama2 transformer, as stored in a llama2.c checkpoint header.

    Parameters
    ----------
    dim : int
        Model (residual stream) width.
    hidden_dim : int
        Width of the SwiGLU feed-forward layer.
    n_layers : int
        Number of transformer blocks.
    n_heads : int
        Number of query heads; must divide ``dim``.
    n_kv_heads : int
        Number of key/value heads (grouped-query attention); must divide ``n_heads``.
    vocab_size : int
        Number of tokens (always positive here; the legacy sign flag is ``shared_classifier``).
    seq_len : int
        Context length: the largest number of positions, and the KV-cache depth.
    shared_classifier : bool
        Whether the output classifier is the token embedding matrix.

    Raises
    ------
    ValueError
        If a size is not a positive integer, ``n_heads`` does not divide ``dim``,
        ``n_kv_heads`` does not divide ``n_heads``, or the head size is odd (RoPE rotates
        pairs of elements).
    """

    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int
    shared_classifier: bool = True

    def __post_init__(self):
        for name in _CONFIG_FIELDS:
            object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        object.__setattr__(self, "shared_classifier", bool(self.shared_classifier))
        if self.dim % self.n_heads:
            raise ValueError(f"`n_heads` must divide `dim`, but dim {self.dim} is not a "
                             f"multiple of n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"`n_kv_heads` must divide `n_heads`, but n_heads {self.n_heads} "
                             f"is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_size % 2:
            raise ValueError(f"head size (dim / n_heads) must be even for RoPE, not "
                             f"{self.head_size}")

    @property
    def head_size(self) -> int:
        """Width of one attention head: ``dim // n_heads``."""
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        """Width of the key and value vectors: ``n_kv_heads * head_size``."""
        return self.n_kv_heads * self.head_size

    @property
    def kv_mul(self) -> int:
        """Number of query heads sharing one KV head: ``n_heads // n_kv_heads``."""
        return self.n_heads // self.n_kv_heads


def weight_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Return the shape of every weight tensor of `config`, in llama2.c's names and layout.

    Parameters
    ----------
    config : ModelConfig

    Returns
    -------
    dict of str to tuple of int
        ``token_embedding (vocab, dim)``, ``rms_att (L, dim)``, ``wq (L, dim, dim)``,
        ``wk (L, kv_dim, dim)``, ``wv (L, kv_dim, dim)``, ``wo (L, dim, dim)``,
        ``rms_ffn (L, dim)``, ``w1 (L, hidden, dim)``, ``w2 (L, dim, hidden)``,
        ``w3 (L, hidden, dim)``, ``rms_final (dim,)``, ``wcls (vocab, dim)``.
    """
    c = config
    L, d, h, kv, v = c.n_layers, c.dim, c.hidden_dim, c.kv_dim, c.vocab_size
    return {
        "token_embedding": (v, d),
        "rms_att": (L, d),
        "wq": (L, d, d),
        "wk": (L, kv, d),
        "wv": (L, kv, d),
        "wo": (L, d, d),
        "rms_ffn": (L, d),
        "w1": (L, h, d),
        "w2": (L, d, h),
        "w3": (L, h, d),
        "rms_final": (d,),
        "wcls": (v, d),
    }


@dataclass
class TransformerWeights:
    """The float32 weights of a llama2 transformer (shapes: see `weight_shapes`).

    Matrices are ``(out, in)``: a layer computes ``w @ x``.  ``wcls`` is the same array
    object as ``token_embedding`` when the classifier is shared.  Arrays loaded from a file
    are read-only.
    """

    token_embedding: np.ndarray
    rms_att: np.ndarray
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    rms_ffn: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    w3: np.ndarray
    rms_final: np.ndarray
    wcls: np.ndarray

    def check(self, config: ModelConfig) -> None:
        """Check that every tensor is float32 with the shape `config` implies.

        Raises
        ------
        ValueError
            Naming the first tensor whose dtype or shape is wrong, or that holds a NaN or an
            infinity.
        """
        for name, shape in weight_shapes(config).items():
            a = getattr(self, name)
            if not isinstance(a, np.ndarray) or a.dtype != np.float32:
                raise ValueError(f"weight `{name}` must be a float32 numpy array, not "
                                 f"{getattr(a, 'dtype', type(a).__name__)}")
            if a.shape != shape:
                raise ValueError(f"weight `{name}` must have shape {shape}, not {a.shape}")
            finite = np.isfinite(a)
            if not finite.all():
                bad = np.flatnonzero(~finite)
                raise ValueError(f"weight `{name}` holds {bad.size} NaN or infinite value(s) "
                                 f"(the first at flat index {int(bad[0])}: "
                                 f"{a.reshape(-1)[bad[0]]}); a model needs finite weights")


@dataclass
class Checkpoint:
    """A model configuration with its weights, and the format it was read from.

    Attributes
    ----------
    config : ModelConfig
    weights : TransformerWeights
    format : str
        One of `FORMATS`: ``"legacy"``, ``"v1"`` or ``"v2"``.
    group_size : int or None
        Q8_0 group size of a ``"v2"`` file (``None`` for the float formats).
    """

    config: ModelConfig
    weights: TransformerWeights
    format: str = "legacy"
    group_size: int | None = field(default=None)


# -- sizes --------------------------------------------------------------------------------------

def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _segments(config, fmt, group_size):
    """Yield ``(name, kind, shape, nbytes)`` in file order after the header.

    ``kind`` is ``"f32"``, ``"q80"`` (one layer or one whole tensor of int8 + scales) or
    ``"skip"`` (legacy RoPE tables).
    """
    shapes = weight_shapes(config)
    if fmt == "legacy":
        for name in _LEGACY_ORDER:
            if name == "rope":
                n = config.seq_len * config.head_size // 2
                yield "freq_cis_real", "skip", (n,), 4 * n
                yield "freq_cis_imag", "skip", (n,), 4 * n
            else:
                yield name, "f32", shapes[name], 4 * _numel(shapes[name])
        if not config.shared_classifier:
            yield "wcls", "f32", shapes["wcls"], 4 * _numel(shapes["wcls"])
    elif fmt == "v1":
        names = _V1_ORDER + (() if config.shared_classifier else ("wcls",))
        for name in names:
            yield name, "f32", shapes[name], 4 * _numel(shapes[name])
    else:
        for name in _V2_FLOAT_ORDER:
            yield name, "f32", shapes[name], 4 * _numel(shapes[name])
        names = _V2_QUANT_ORDER + (() if config.shared_classifier else ("wcls",))
        for name in names:
            shape = shapes[name]
            layers = shape[0] if name in _PER_LAYER else 1
            one = shape[1:] if name in _PER_LAYER else shape
            n = _numel(one)
            for _ in range(layers):
                yield name, "q80", one, n + 4 * (n // group_size)


def _expected_size(config, fmt, group_size):
    """Return the file size `config` implies, by arithmetic (a garbage header can claim
    billions of layers, too many to walk through `_segments`)."""
    shapes = weight_shapes(config)
    if fmt != "v2":
        header = _LEGACY_HEADER.size if fmt == "legacy" else HEADER_SIZE
        return header + sum(seg[3] for seg in _segments(config, fmt, group_size))
    size = HEADER_SIZE + 4 * sum(_numel(shapes[name]) for name in _V2_FLOAT_ORDER)
    names = _V2_QUANT_ORDER + (() if config.shared_classifier else ("wcls",))
    for name in names:
        n = _numel(shapes[name])   # whole tensor, all layers: groups never straddle layers
        size += n + 4 * (n // group_size)
    return size


def _check_group_size(config, group_size):
    _positive_int("group_size", group_size)
    # Every quantised tensor has `dim` as one axis, so this makes every tensor a whole number
    # of groups (export.py backs off the group size until it divides dim, for this reason).
    if config.dim % group_size:
        raise ValueError(f"`group_size` must divide dim {config.dim}, not {group_size}")


# -- reading ------------------------------------------------------------------------------------

def load_checkpoint(path: str | os.PathLike, format: str | None = None) -> Checkpoint:
    """Load a llama2.c checkpoint (formats: see the module docstring).

    Without `format`, the format is recognised by the first four bytes: the ``ak42`` magic
    marks a versioned export, anything else is read as a legacy file.

    Parameters
    ----------
    path : str or os.PathLike
    format : str, optional
        ``"legacy"``, ``"v1"`` or ``"v2"`` to insist on one format: a file in another one is
        rejected (a versioned file with a wrong magic, for instance).

    Returns
    -------
    Checkpoint
        With float32 weights (v2 files are dequantised).

    Raises
    ------
    CheckpointError
        If `format` is not one of `FORMATS`; if the file is shorter than its header, has an
        unknown version, a header size is not positive, the head counts do not divide, the
        group size does not divide ``dim``, or the file length is not the one the header
        implies (checked from the header and the file's size, before the file is read); or
        if a weight is NaN or infinite.  The message names the file and the problem.
    OSError
        If the file cannot be read.
    """
    if format is not None and format not in FORMATS:
        raise CheckpointError(f"`format` must be one of {', '.join(FORMATS)}, not {format!r}")
    path = Path(path)
    # the header and the file's size first: a file of the wrong size (a model far too large,
    # say) is refused without reading it
    check_checkpoint_header(path, format)
    try:
        checkpoint = _parse(path.read_bytes(), format)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {_not_a_checkpoint(path) or e}") from None
    if format is not None and checkpoint.format != format:
        raise CheckpointError(f"{path}: expected a {format} checkpoint, found {checkpoint.format}")
    return checkpoint


#: Bytes read before the rest of a checkpoint: every header (legacy 28, versioned 256).
_HEAD_BYTES = 4096


def check_checkpoint_header(path: str | os.PathLike, format: str | None = None) -> None:
    """Check that `path` starts as a checkpoint of `format` (None: any format in `FORMATS`)
    would, without reading its tensors: the checks `load_checkpoint` makes first (the
    header, and the file size it implies).

    Raises
    ------
    CheckpointError
        As `load_checkpoint` for a file that is not a checkpoint, naming what the file is
        when it is a tokenizer.
    OSError
        If the file cannot be read.
    """
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(_HEAD_BYTES)
        size = os.fstat(f.fileno()).st_size
    try:
        _parse(_Head(head, size), format)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {_not_a_checkpoint(path) or e}") from None


def describe_checkpoint(data: bytes) -> str | None:
    """Say what checkpoint `data` (a whole file's bytes) holds, if it is one.

    Only the header and the size it implies are checked (no tensor is read), so this is
    cheap enough for an error path: `chipotle.tokenizer.Tokenizer.load` uses it to say
    that a file given as a tokenizer is a model checkpoint.

    Returns
    -------
    str or None
        ``"a legacy llama2.c model checkpoint (dim 64, ...)"``, or ``None`` if `data` is not a
        checkpoint of any format in `FORMATS`.
    """
    head = _Head(bytes(data[:_HEAD_BYTES]), len(data))
    try:
        _parse(head, None)
    except CheckpointError:
        return None
    return f"a {head.format} llama2.c model checkpoint ({_fields_text(head.config)})"


#: Files larger than this are not read to tell whether they are tokenizers (llama2.c's
#: 32,000-token ``tokenizer.bin`` is 434 KB).
_TOKENIZER_MAX_BYTES = 16 << 20


def _not_a_checkpoint(path: Path) -> str:
    """``"the file is a llama2.c tokenizer file ..."`` when the refused file is one, ``"the
    file is text ('# chipotle ...'), ..."`` when its first 4 KiB are printable UTF-8 text
    (a README given as the model: the header's fields read from its letters are no help),
    else ``""``."""
    from .tokenizer import describe_tokenizer
    try:
        with path.open("rb") as f:
            head = f.read(_HEAD_BYTES)
        if path.stat().st_size <= _TOKENIZER_MAX_BYTES:
            what = describe_tokenizer(path.read_bytes())
            if what:
                return f"the file is {what}, not a model checkpoint"
    except OSError:
        return ""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:      # (also a multi-byte character cut at 4 KiB: not named)
        return ""
    if text and all(ch.isprintable() or ch in "\n\r\t" for ch in text):
        start = " ".join(text.split())[:24].rstrip()
        return f"the file is text ({start!r} ...), not a model checkpoint"
    return ""


class _Head(bytes):
    """The first bytes of a file, whose ``len`` is the whole file's: parsing it checks the
    header and the size the header implies, and stops before the tensors (`_read_tensors`),
    leaving what the header says in ``config`` and ``format``."""

    def __new__(cls, head: bytes, size: int):
        obj = super().__new__(cls, head)
        obj.size = size
        return obj

    def __len__(self) -> int:
        return self.size


def _parse(data: bytes, format: str | None) -> Checkpoint:
    magic = struct.unpack_from("<I", data)[0] if len(data) >= 4 else None
    if magic == MAGIC:
        return _parse_versioned(data)
    if format in ("v1", "v2"):
        shown = "none (file shorter than 4 bytes)" if magic is None else f"0x{magic:08x}"
        raise CheckpointError(f"bad magic {shown}, expected 0x{MAGIC:08x} ('ak42') at the "
                              f"start of a {format} checkpoint")
    try:
        return _parse_legacy(data)
    except _LegacyHeaderError as e:
        # (only when the header is refused: a legacy file whose size or weights are wrong
        # was read as what it is)
        raise CheckpointError(f"{e} (the file has no 'ak42' magic, the uint32 0x616b3432 "
                              "little-endian, i.e. the bytes '24ka', so it was read as a "
                              "legacy llama2.c checkpoint)") from None


class _LegacyHeaderError(CheckpointError):
    """A legacy header refused: too short, or values no configuration has."""


def _make_config(values, shared):
    try:
        return ModelConfig(*values, shared_classifier=shared)
    except ValueError as e:
        raise CheckpointError(f"bad header: {e}") from None


def _parse_legacy(data):
    if len(data) < _LEGACY_HEADER.size:
        raise _LegacyHeaderError(f"file is truncated: {len(data)} bytes is shorter than the "
                                 f"{_LEGACY_HEADER.size}-byte legacy header")
    values = list(_LEGACY_HEADER.unpack_from(data))
    shared = values[5] > 0
    values[5] = abs(values[5])
    try:
        config = _make_config(values, shared)
    except CheckpointError as e:
        raise _LegacyHeaderError(str(e)) from None
    return _read_tensors(data, config, "legacy", None, _LEGACY_HEADER.size)


def _parse_versioned(data):
    if len(data) < HEADER_SIZE:
        raise CheckpointError(f"file is truncated: {len(data)} bytes is shorter than the "
                              f"{HEADER_SIZE}-byte header of a versioned ('ak42') checkpoint")
    magic, version, *values, flag = _V_HEADER.unpack_from(data)
    if version not in (1, 2):
        raise CheckpointError(f"unknown checkpoint version {version} (known: 1 float32, "
                              "2 int8 Q8_0)")
    if flag not in (0, 1):
        raise CheckpointError(f"bad header: the shared-classifier flag must be 0 or 1, "
                              f"not {flag}")
    config = _make_config(values, bool(flag))
    group_size = None
    if version == 2:
        (group_size,) = _V2_GROUP.unpack_from(data, _V_HEADER.size)
        try:
            _check_group_size(config, group_size)
        except ValueError as e:
            raise CheckpointError(f"bad header: {e}") from None
    return _read_tensors(data, config, f"v{version}", group_size, HEADER_SIZE)


def _read_tensors(data, config, fmt, group_size, offset):
    expected = _expected_size(config, fmt, group_size)
    if len(data) < expected:
        raise CheckpointError(f"file is truncated: header ({_describe(config)}) implies "
                              f"{expected} bytes, file has {len(data)}")
    if len(data) != expected:
        raise CheckpointError(f"sizes do not add up: header ({_describe(config)}) implies "
                              f"{expected} bytes, file has {len(data)}")
    if isinstance(data, _Head):      # the header only: what it says, for the caller
        data.config, data.format = config, fmt
        return None
    parts: dict[str, list[np.ndarray]] = {}
    for name, kind, shape, nbytes in _segments(config, fmt, group_size):
        if kind == "f32":
            a = np.frombuffer(data, "<f4", _numel(shape), offset).reshape(shape)
            parts.setdefault(name, []).append(a.astype(np.float32, copy=False))
        elif kind == "q80":
            n = _numel(shape)
            q = np.frombuffer(data, np.int8, n, offset)
            s = np.frombuffer(data, "<f4", n // group_size, offset + n)
            w = (q.reshape(-1, group_size).astype(np.float32) * s[:, None]).reshape(shape)
            parts.setdefault(name, []).append(w)
        offset += nbytes
    shapes = weight_shapes(config)
    tensors = {}
    for name, arrays in parts.items():
        # A float tensor is one segment; a v2 per-layer tensor is one segment per layer.
        a = arrays[0] if len(arrays) == 1 else np.stack(arrays)
        a = a.reshape(shapes[name])
        a.flags.writeable = False
        tensors[name] = a
    if config.shared_classifier:
        tensors["wcls"] = tensors["token_embedding"]
    weights = TransformerWeights(**tensors)
    try:
        weights.check(config)
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    return Checkpoint(config, weights, fmt, group_size)


def _fields_text(config):
    return ", ".join(f"{n} {getattr(config, n)}" for n in _CONFIG_FIELDS)


def _describe(config):
    return _fields_text(config) + (
        ", shared classifier" if config.shared_classifier else ", separate classifier")


# -- writing ------------------------------------------------------------------------------------

def _rope_tables(config):
    """Return the legacy ``freq_cis_real``/``freq_cis_imag`` tables, as llama2.c's model.py."""
    hs = config.head_size
    freqs = 1.0 / (10000.0 ** (np.arange(0, hs, 2, dtype=np.float32)[: hs // 2] / hs))
    angles = np.outer(np.arange(config.seq_len, dtype=np.float32), freqs)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _quantize_q80(w, group_size):
    """Quantise like export.py's ``quantize_q80``: symmetric int8 in [-127, 127] per group.

    ``scale = max|w| / 127`` per group of `group_size` consecutive values, ``q =
    round(w / scale)`` (round half to even, as ``torch.round``).  An all-zero group gets
    scale 0 and values 0 (export.py would divide by zero).
    """
    g = np.asarray(w, np.float32).reshape(-1, group_size)
    scale = (np.abs(g).max(axis=1) / np.float32(127.0)).astype(np.float32)
    safe = np.where(scale == 0, np.float32(1.0), scale)
    q = np.round(g / safe[:, None]).astype(np.int8)
    return q.reshape(-1), scale


def write_checkpoint(path: str | os.PathLike, checkpoint: Checkpoint, format: str | None = None,
                     group_size: int | None = None) -> None:
    """Write `checkpoint` as a llama2.c file, byte for byte as llama2.c's export.py would.

    Intended for round-trip tests and for making small synthetic models: what it writes,
    `load_checkpoint` reads back (exactly for ``"legacy"`` and ``"v1"``; for ``"v2"`` the
    weights come back Q8_0-quantised).

    Parameters
    ----------
    path : str or os.PathLike
    checkpoint : Checkpoint
        Its weights must match its config (see `TransformerWeights.check`).  With a shared
        classifier only ``token_embedding`` is written.
    format : str, optional
        ``"legacy"``, ``"v1"`` or ``"v2"``; defaults to ``checkpoint.format``.
    group_size : int, optional
        Q8_0 group size for ``"v2"``; it must divide ``dim``.  Defaults to
        ``checkpoint.group_size``, else to export.py's choice: 64, halved until it divides
        ``dim``.

    Raises
    ------
    CheckpointError
        If the format is unknown, the weights do not match the config, or the group size
        does not divide ``dim``.
    """
    fmt = checkpoint.format if format is None else format
    if fmt not in FORMATS:
        raise CheckpointError(f"`format` must be one of {', '.join(FORMATS)}, not {fmt!r}")
    c, w = checkpoint.config, checkpoint.weights
    try:
        w.check(c)
        if fmt == "v2":
            if group_size is None:
                group_size = checkpoint.group_size
            if group_size is None:
                # export.py's default: 64, halved until it divides dim.
                group_size = 64
                while c.dim % group_size:
                    group_size //= 2
            _check_group_size(c, group_size)
    except ValueError as e:
        raise CheckpointError(str(e)) from None

    chunks: list[bytes] = []
    if fmt == "legacy":
        vocab = c.vocab_size if c.shared_classifier else -c.vocab_size
        chunks.append(_LEGACY_HEADER.pack(c.dim, c.hidden_dim, c.n_layers, c.n_heads,
                                          c.n_kv_heads, vocab, c.seq_len))
        rope = _rope_tables(c)
    else:
        version = int(fmt[1])
        head = _V_HEADER.pack(MAGIC, version, *(getattr(c, n) for n in _CONFIG_FIELDS),
                              int(c.shared_classifier))
        if version == 2:
            head += _V2_GROUP.pack(group_size)
        chunks.append(head + bytes(HEADER_SIZE - len(head)))

    layer_index: dict[str, int] = {}
    for name, kind, _shape, _nbytes in _segments(c, fmt, group_size):
        if kind == "skip":
            table = rope[0] if name == "freq_cis_real" else rope[1]
            chunks.append(table.astype("<f4").tobytes())
        elif kind == "f32":
            chunks.append(np.asarray(getattr(w, name)).astype("<f4").tobytes())
        else:
            a = np.asarray(getattr(w, name))
            if name in _PER_LAYER:
                i = layer_index.get(name, 0)
                layer_index[name] = i + 1
                a = a[i]
            q, s = _quantize_q80(a, group_size)
            chunks.append(q.tobytes() + s.astype("<f4").tobytes())
    Path(path).write_bytes(b"".join(chunks))


def synthetic_checkpoint(config: ModelConfig, seed: int = 0, scale: float = 0.1) -> Checkpoint:
    """Return a checkpoint of `config` with random weights, for tests.

    Matrices are normal with standard deviation `scale`; norm weights are ``1 + N(0, scale)``.
    With ``config.shared_classifier`` the classifier is the token embedding.

    Parameters
    ----------
    config : ModelConfig
    seed : int
        Seed of ``numpy.random.default_rng``.
    scale : float
        Standard deviation of the random values.
    """
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in weight_shapes(config).items():
        a = rng.normal(0.0, scale, shape)
        if name.startswith("rms_"):
            a += 1.0
        tensors[name] = a.astype(np.float32)
    if config.shared_classifier:
        tensors["wcls"] = tensors["token_embedding"]
    return Checkpoint(config, TransformerWeights(**tensors), "legacy")
