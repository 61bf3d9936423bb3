"""chipotle.model: llama2.c checkpoint formats, round trips and rejections.

Only the legacy stories260K file exists on disk, so every format is exercised on small
synthetic checkpoints written by `write_checkpoint`, and the byte layouts are checked against
llama2.c's export.py independently of the reader (offsets computed here by hand).
"""

import struct

import numpy as np
import pytest

from chipotle.model import (
    HEADER_SIZE,
    MAGIC,
    Checkpoint,
    CheckpointError,
    ModelConfig,
    load_checkpoint,
    synthetic_checkpoint,
    weight_shapes,
    write_checkpoint,
)

# Grouped-query (4 query heads over 2 KV heads), hidden not a multiple of dim.
GQA = dict(dim=16, hidden_dim=24, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=32,
           seq_len=8)


def config(**changes):
    return ModelConfig(**{**GQA, **changes})


def assert_same_weights(a, b):
    for name in weight_shapes(a.config):
        np.testing.assert_array_equal(getattr(a.weights, name), getattr(b.weights, name),
                                      err_msg=name)


# -- config -------------------------------------------------------------------------------------

def test_config_properties():
    c = config()
    assert (c.head_size, c.kv_dim, c.kv_mul) == (4, 8, 2)


@pytest.mark.parametrize("field, value", [("dim", 0), ("n_layers", -1), ("seq_len", 2.0),
                                          ("vocab_size", True)])
def test_config_rejects_non_positive(field, value):
    with pytest.raises(ValueError, match=f"`{field}` must be a positive integer, not"):
        config(**{field: value})


def test_config_rejects_bad_heads():
    with pytest.raises(ValueError, match="`n_heads` must divide `dim`"):
        config(n_heads=3)
    with pytest.raises(ValueError, match="`n_kv_heads` must divide `n_heads`"):
        config(n_kv_heads=3)
    with pytest.raises(ValueError, match="must be even for RoPE"):
        config(dim=12, n_heads=4, n_kv_heads=4)


# -- the real file ------------------------------------------------------------------------------

@pytest.mark.model
def test_stories260k(model_paths):
    ckpt = load_checkpoint(model_paths[0])
    # The shapes the design brief states for stories260K.
    assert ckpt.format == "legacy"
    assert ckpt.config == ModelConfig(64, 172, 5, 8, 4, 512, 512, shared_classifier=True)
    assert ckpt.weights.wcls is ckpt.weights.token_embedding
    ckpt.weights.check(ckpt.config)
    assert not ckpt.weights.wq.flags.writeable


# -- round trips --------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["legacy", "v1"])
@pytest.mark.parametrize("shared", [True, False])
def test_float_round_trip(tmp_path, fmt, shared):
    src = synthetic_checkpoint(config(shared_classifier=shared), seed=1)
    path = tmp_path / "m.bin"
    write_checkpoint(path, src, format=fmt)
    got = load_checkpoint(path)
    assert got.format == fmt and got.config == src.config and got.group_size is None
    assert_same_weights(src, got)
    assert (got.weights.wcls is got.weights.token_embedding) == shared
    assert load_checkpoint(path, format=fmt).format == fmt


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("group_size", [4, 16])
def test_v2_round_trip(tmp_path, shared, group_size):
    src = synthetic_checkpoint(config(shared_classifier=shared), seed=2)
    path = tmp_path / "m.bin"
    write_checkpoint(path, src, format="v2", group_size=group_size)
    got = load_checkpoint(path)
    assert got.format == "v2" and got.group_size == group_size and got.config == src.config
    for name in weight_shapes(src.config):
        a, b = getattr(src.weights, name), getattr(got.weights, name)
        assert b.dtype == np.float32 and b.shape == a.shape
        if name.startswith("rms_"):
            np.testing.assert_array_equal(a, b, err_msg=name)  # norms stay float32
        else:
            # Q8_0: error at most half a step, a step being max|group| / 127.
            groups = a.reshape(-1, group_size)
            step = np.abs(groups).max(axis=1, keepdims=True) / 127
            err = np.abs(b.reshape(-1, group_size) - groups)
            assert np.all(err <= step / 2 * (1 + 1e-5) + 1e-12), name
    # Writing the loaded v2 checkpoint again gives back the same int8 values.
    again = tmp_path / "again.bin"
    write_checkpoint(again, got)
    np.testing.assert_allclose(load_checkpoint(again).weights.w2, got.weights.w2, rtol=1e-6)


def test_legacy_layout(tmp_path):
    """Check the legacy bytes against export.py's legacy_export, offset by offset."""
    c = config(shared_classifier=False)
    src = synthetic_checkpoint(c, seed=3)
    path = tmp_path / "m.bin"
    write_checkpoint(path, src, format="legacy")
    data = path.read_bytes()
    assert struct.unpack_from("<7i", data) == (16, 24, 2, 4, 2, -32, 8)  # negative vocab
    f = np.frombuffer(data[28:], "<f4")
    L, d, h, kv, v = 2, 16, 24, 8, 32
    order = [("token_embedding", v * d), ("rms_att", L * d), ("wq", L * d * d),
             ("wk", L * kv * d), ("wv", L * kv * d), ("wo", L * d * d), ("rms_ffn", L * d),
             ("w1", L * h * d), ("w2", L * d * h), ("w3", L * h * d), ("rms_final", d),
             ("freq_cis_real", 8 * 2), ("freq_cis_imag", 8 * 2), ("wcls", v * d)]
    at = 0
    for name, n in order:
        if name.startswith("freq_cis"):
            table = f[at:at + n].reshape(8, 2)        # (seq_len, head_size / 2)
            angle = np.outer(np.arange(8), [1.0, 0.01])  # 10000 ** -(0/4), 10000 ** -(2/4)
            ref = np.cos(angle) if name.endswith("real") else np.sin(angle)
            np.testing.assert_allclose(table, ref, atol=1e-6)
        else:
            np.testing.assert_array_equal(f[at:at + n], getattr(src.weights, name).ravel())
        at += n
    assert at == len(f)


def test_v1_layout(tmp_path):
    """Check the v1 header and tensor order against export.py's version1_export."""
    src = synthetic_checkpoint(config(), seed=4)
    path = tmp_path / "m.bin"
    write_checkpoint(path, src, format="v1")
    data = path.read_bytes()
    assert data[:4] == b"24ka"  # 0x616b3432 little-endian
    assert struct.unpack_from("<Ii7iB", data) == (MAGIC, 1, 16, 24, 2, 4, 2, 32, 8, 1)
    assert data[37:HEADER_SIZE] == bytes(HEADER_SIZE - 37)
    f = np.frombuffer(data[HEADER_SIZE:], "<f4")
    w = src.weights
    expected = np.concatenate([a.ravel() for a in (w.rms_att, w.rms_ffn, w.rms_final,
                                                   w.token_embedding, w.wq, w.wk, w.wv, w.wo,
                                                   w.w1, w.w2, w.w3)])
    np.testing.assert_array_equal(f, expected)


def test_v2_layout(tmp_path):
    """Check the v2 header and Q8_0 layout against export.py's version2_export and runq.c."""
    src = synthetic_checkpoint(config(), seed=5)
    path = tmp_path / "m.bin"
    write_checkpoint(path, src, format="v2", group_size=8)
    data = path.read_bytes()
    assert struct.unpack_from("<Ii7iB", data) == (MAGIC, 2, 16, 24, 2, 4, 2, 32, 8, 1)
    assert struct.unpack_from("<i", data, 37)[0] == 8  # group size right after the flag byte
    assert data[41:HEADER_SIZE] == bytes(HEADER_SIZE - 41)
    at = HEADER_SIZE
    norms = np.frombuffer(data, "<f4", 2 * 16 + 2 * 16 + 16, at)
    w = src.weights
    np.testing.assert_array_equal(norms, np.concatenate([w.rms_att.ravel(), w.rms_ffn.ravel(),
                                                         w.rms_final]))
    at += norms.nbytes
    # Token embedding: int8 values, then one float32 scale per 8 values.
    q = np.frombuffer(data, np.int8, 32 * 16, at)
    s = np.frombuffer(data, "<f4", 32 * 16 // 8, at + q.nbytes)
    groups = w.token_embedding.reshape(-1, 8)
    np.testing.assert_allclose(s, np.abs(groups).max(axis=1) / 127, rtol=1e-6)
    assert np.abs(q).max() == 127
    at += q.nbytes + s.nbytes
    # Then wq layer 0 (its own values and scales), then wq layer 1.
    q0 = np.frombuffer(data, np.int8, 16 * 16, at)
    s0 = np.frombuffer(data, "<f4", 16 * 16 // 8, at + 256)
    np.testing.assert_allclose((q0.reshape(-1, 8) * s0[:, None]).reshape(16, 16), w.wq[0],
                               atol=np.abs(w.wq[0]).max() / 127)
    # Total: norms + (values + scales) of every quantised tensor, per layer.
    n = 32 * 16 + 2 * (16 * 16 + 8 * 16 + 8 * 16 + 16 * 16 + 3 * 24 * 16)
    assert len(data) == HEADER_SIZE + norms.nbytes + n + 4 * n // 8


# -- rejections ---------------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path):
    """Return a function writing a valid checkpoint in a format and returning its bytes."""
    def make(fmt, **kw):
        path = tmp_path / f"ok-{fmt}.bin"
        write_checkpoint(path, synthetic_checkpoint(config(), seed=6), format=fmt, **kw)
        return path.read_bytes()
    return make


def load_bytes(tmp_path, data, **kw):
    path = tmp_path / "bad.bin"
    path.write_bytes(data)
    return load_checkpoint(path, **kw)


@pytest.mark.parametrize("fmt", ["legacy", "v1", "v2"])
def test_rejects_truncated(tmp_path, files, fmt):
    data = files(fmt, **({"group_size": 8} if fmt == "v2" else {}))
    with pytest.raises(CheckpointError,
                       match=rf"bad\.bin: file is truncated: .* implies {len(data)} bytes, "
                             rf"file has {len(data) - 1}"):
        load_bytes(tmp_path, data[:-1])


@pytest.mark.parametrize("fmt", ["legacy", "v1", "v2"])
def test_rejects_trailing_bytes(tmp_path, files, fmt):
    data = files(fmt)
    with pytest.raises(CheckpointError, match=rf"sizes do not add up: header .* implies "
                                              rf"{len(data)} bytes, file has {len(data) + 4}"):
        load_bytes(tmp_path, data + bytes(4))


def test_rejects_short_headers(tmp_path, files):
    with pytest.raises(CheckpointError, match="shorter than the 28-byte legacy header"):
        load_bytes(tmp_path, b"")
    with pytest.raises(CheckpointError, match="shorter than the 256-byte header"):
        load_bytes(tmp_path, files("v1")[:100])


def test_rejects_wrong_magic(tmp_path, files):
    data = b"24kb" + files("v1")[4:]
    with pytest.raises(CheckpointError, match=r"bad magic 0x626b3432, expected 0x616b3432"):
        load_bytes(tmp_path, data, format="v1")
    # Without a format, the file is taken as legacy and its header does not make sense.
    with pytest.raises(CheckpointError, match="no 'ak42' magic"):
        load_bytes(tmp_path, data)


def test_rejects_wrong_format(tmp_path, files):
    with pytest.raises(CheckpointError, match="expected a legacy checkpoint, found v1"):
        load_bytes(tmp_path, files("v1"), format="legacy")
    with pytest.raises(CheckpointError, match="`format` must be one of"):
        load_bytes(tmp_path, files("v1"), format="v3")


def test_rejects_unknown_version(tmp_path, files):
    data = bytearray(files("v1"))
    struct.pack_into("<i", data, 4, 3)
    with pytest.raises(CheckpointError, match="unknown checkpoint version 3"):
        load_bytes(tmp_path, bytes(data))


@pytest.mark.parametrize("index, value, message", [
    (0, 0, "`dim` must be a positive integer, not 0"),
    (1, -5, "`hidden_dim` must be a positive integer, not -5"),
    (2, 0, "`n_layers` must be a positive integer, not 0"),
    (6, 0, "`seq_len` must be a positive integer, not 0"),
    (3, 3, "`n_heads` must divide `dim`"),
    (4, 3, "`n_kv_heads` must divide `n_heads`"),
])
@pytest.mark.parametrize("fmt", ["legacy", "v1"])
def test_rejects_bad_header(tmp_path, files, fmt, index, value, message):
    data = bytearray(files(fmt))
    struct.pack_into("<i", data, (0 if fmt == "legacy" else 8) + 4 * index, value)
    with pytest.raises(CheckpointError, match=f"bad header: {message}"):
        load_bytes(tmp_path, bytes(data))


def test_rejects_zero_vocab(tmp_path, files):
    data = bytearray(files("legacy"))
    struct.pack_into("<i", data, 20, 0)
    with pytest.raises(CheckpointError, match="`vocab_size` must be a positive integer, not 0"):
        load_bytes(tmp_path, bytes(data))


def test_rejects_bad_flag(tmp_path, files):
    data = bytearray(files("v1"))
    data[36] = 2
    with pytest.raises(CheckpointError, match="shared-classifier flag must be 0 or 1, not 2"):
        load_bytes(tmp_path, bytes(data))


@pytest.mark.parametrize("group_size, message", [
    (12, "`group_size` must divide dim 16, not 12"),
    (0, "`group_size` must be a positive integer, not 0"),
])
def test_rejects_bad_group_size(tmp_path, files, group_size, message):
    data = bytearray(files("v2", group_size=8))
    struct.pack_into("<i", data, 37, group_size)
    with pytest.raises(CheckpointError, match=f"bad header: {message}"):
        load_bytes(tmp_path, bytes(data))


def test_write_rejections(tmp_path):
    ckpt = synthetic_checkpoint(config())
    with pytest.raises(CheckpointError, match="`format` must be one of"):
        write_checkpoint(tmp_path / "x.bin", ckpt, format="gguf")
    with pytest.raises(CheckpointError, match="`group_size` must divide dim 16, not 5"):
        write_checkpoint(tmp_path / "x.bin", ckpt, format="v2", group_size=5)
    w = ckpt.weights
    bad = Checkpoint(ckpt.config, type(w)(**{**vars(w), "wk": w.wq}))
    with pytest.raises(CheckpointError, match=r"weight `wk` must have shape \(2, 8, 16\)"):
        write_checkpoint(tmp_path / "x.bin", bad)


def test_rejects_huge_header_quickly(tmp_path, files):
    data = bytearray(files("v2", group_size=8))
    struct.pack_into("<i", data, 16, 2**31 - 1)   # n_layers
    with pytest.raises(CheckpointError, match="file is truncated: header .* implies"):
        load_bytes(tmp_path, bytes(data))


@pytest.mark.parametrize("fmt, first", [("legacy", "token_embedding"), ("v1", "rms_att")])
def test_rejects_non_finite_weights(tmp_path, files, fmt, first):
    """A NaN or an infinity in a weight is refused at load, naming the tensor (it failed
    later as "Probabilities contain NaN" in calibration, or gave <unk> tokens)."""
    data = bytearray(files(fmt))
    off = 28 if fmt == "legacy" else 256                 # the first tensor's first float
    struct.pack_into("<f", data, off + 4 * 5, float("nan"))
    with pytest.raises(CheckpointError, match=rf"bad\.bin: weight `{first}` holds 1 "
                       r"NaN or infinite value\(s\) \(the first at flat index 5: nan\)"):
        load_bytes(tmp_path, bytes(data))
    struct.pack_into("<f", data, off + 4 * 5, float("-inf"))
    with pytest.raises(CheckpointError, match=r"index 5: -inf"):
        load_bytes(tmp_path, bytes(data))


def test_wrong_size_refused_before_reading(tmp_path, files, monkeypatch):
    """A file whose size the header does not imply is refused from its header and its size:
    the rest is never read (a 2 GB file took 9 s and 2 GB of memory to refuse, a larger one
    than memory ended in MemoryError)."""
    from pathlib import Path
    data = files("v1")
    path = tmp_path / "big.bin"
    with path.open("wb") as f:
        f.write(data)
        f.truncate(1 << 30)                               # sparse: 1 GiB, mostly a hole
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read the whole file"))
    with pytest.raises(CheckpointError, match=rf"sizes do not add up: header .* implies "
                                              rf"{len(data)} bytes, file has {1 << 30}"):
        load_checkpoint(path)


def test_a_tokenizer_given_as_the_model_is_named(tmp_path):
    """A llama2.c tokenizer file given as the checkpoint: the refusal says what the file is."""
    path = tmp_path / "tok.bin"
    with open(path, "wb") as f:
        f.write(struct.pack("<i", 2))
        for piece in (b"<unk>"[:2], b"\n", b"ab", b"c"):
            f.write(struct.pack("<fi", 0.0, len(piece)) + piece)
    with pytest.raises(CheckpointError, match=r"tok\.bin: the file is a llama2\.c tokenizer "
                       r"file \(4 tokens\), not a model checkpoint$"):
        load_checkpoint(path)


def test_a_text_file_given_as_the_model_is_named(tmp_path):
    """A text file (a README) given as the checkpoint: the refusal says it is text and how
    it starts, not the header fields read from its letters (session 39's fresh user); a
    binary file that is no checkpoint keeps the header's own complaint."""
    path = tmp_path / "README.md"
    path.write_text("# chipotle\n\nAn open accelerator.\n" * 40)
    with pytest.raises(CheckpointError, match=r"README\.md: the file is text \('# chipotle An "
                       r"open accel' \.\.\.\), not a model checkpoint$"):
        load_checkpoint(path)
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert "the file is text" not in str(e.value), e.value


def test_a_malformed_checkpoint_is_not_called_a_tokenizer(tmp_path):
    path = tmp_path / "bad.bin"
    path.write_bytes(struct.pack("<7i", 16, 0, 1, 2, 1, 300, 8) + bytes(100))
    with pytest.raises(CheckpointError, match=r"`hidden_dim` must be a positive integer, not 0 "
                       r"\(the file has no 'ak42' magic[^;]*$"):
        load_checkpoint(path)


def test_a_truncated_legacy_file_is_not_explained_as_a_wrong_format(tmp_path):
    """The note on the missing 'ak42' magic comes only with a refused header: a legacy file
    cut short is refused for its size alone."""
    src = tmp_path / "full.bin"
    write_checkpoint(src, synthetic_checkpoint(config(), seed=3), format="legacy")
    cut = tmp_path / "cut.bin"
    cut.write_bytes(src.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match=r"cut\.bin: file is truncated: header \(dim .*\) "
                       r"implies \d+ bytes, file has \d+$"):
        load_checkpoint(cut)
