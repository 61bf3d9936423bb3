"""``chipotle generate`` on the chip backends (isasim here; the RTL ones in the benchmarks)."""

from __future__ import annotations

import struct

import pytest

from chipotle import backends, cli
from chipotle.model import ModelConfig, synthetic_checkpoint, write_checkpoint

PIECES = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [f"<0x{b:02X}>".encode() for b in range(256)] + [
    b" ", b"a", b"b", b" a"]


@pytest.fixture
def tiny(tmp_path):
    """A synthetic checkpoint (seq_len 8) and a matching tokenizer, as CLI arguments."""
    c = ModelConfig(dim=16, hidden_dim=24, n_layers=1, n_heads=2, n_kv_heads=1,
                    vocab_size=len(PIECES), seq_len=8)
    model = tmp_path / "tiny.bin"
    write_checkpoint(model, synthetic_checkpoint(c, seed=4), format="v1")
    tok = tmp_path / "tiny-tok.bin"
    tok.write_bytes(struct.pack("<i", 6) + b"".join(
        struct.pack("<fi", -1.0, len(p)) + p for p in PIECES))
    return ["--model", str(model), "--tokenizer", str(tok)]


def run(capsys, *args):
    code = cli.main(["generate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_chip_backends_are_listed():
    for name in backends.CHIP_BACKENDS:
        assert name in backends.names()


@pytest.mark.parametrize("sampling", [("--temperature", "0"),
                                      ("--temperature", "0.9", "--seed", "5")])
def test_isasim_equals_golden(capsys, tiny, sampling):
    common = [*tiny, "--prompt", "ab a", "--steps", "3", *sampling]
    code, gold, _ = run(capsys, "--backend", "golden", *common)
    assert code == 0
    code, out, err = run(capsys, "--backend", "isasim", "--config", "small", *common)
    assert code == 0, err
    assert out == gold and len(gold.strip()) > 0
    assert "time to first token" in err and "decode roofline efficiency" in err


def test_bad_config_is_a_usage_error(capsys, tiny):
    code, _, err = run(capsys, "--backend", "isasim", "--config", "mesh=2x2,bogus=3", *tiny)
    assert code == 2 and "unknown configuration key 'bogus'" in err


def test_chip_model_forward_equals_golden(tiny):
    import numpy as np

    from chipotle.config import CONFIGS
    from chipotle.golden import GoldenModel
    from chipotle.model import load_checkpoint

    ckpt = load_checkpoint(tiny[1])
    chip = backends.ChipModel(ckpt, CONFIGS["small"])
    gold = GoldenModel(chip.compiled.qm)
    for pos, tok in enumerate([1, 260, 261, 5]):
        assert np.array_equal(chip.forward(tok, pos), gold.forward(tok, pos)), pos
    assert chip.config.seq_len == chip.compiled.context
