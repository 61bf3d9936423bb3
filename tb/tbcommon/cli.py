"""Shared pieces of the ``chipotle generate`` command-line tests.

Members
-------
PIECES
    Tokenizer pieces of the tiny model: the three llama2.c specials, the 256 byte pieces,
    and four short merges.
write_tiny_model
    Write a synthetic checkpoint and a matching tokenizer; return them as CLI arguments.
run
    Run ``chipotle generate`` in-process; return (exit code, stdout, stderr).
refused
    Run a module command's ``main`` in-process; assert that it refuses the input in one
    ``<prog>: error:`` line, exit status 2; return the message.
"""

from __future__ import annotations

import struct

import pytest

from chipotle import cli
from chipotle.model import ModelConfig, synthetic_checkpoint, write_checkpoint

__all__ = ["PIECES", "write_tiny_model", "run", "refused"]

PIECES = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [f"<0x{b:02X}>".encode() for b in range(256)] + [
    b" ", b"a", b"b", b" a"]


def write_tiny_model(folder) -> list[str]:
    """Write ``tiny.bin`` (llama2.c v1, seq_len 8) and ``tiny-tok.bin`` into `folder`;
    return ``["--model", ..., "--tokenizer", ...]``."""
    c = ModelConfig(dim=16, hidden_dim=24, n_layers=1, n_heads=2, n_kv_heads=1,
                    vocab_size=len(PIECES), seq_len=8)
    model = folder / "tiny.bin"
    write_checkpoint(model, synthetic_checkpoint(c, seed=4), format="v1")
    tok = folder / "tiny-tok.bin"
    tok.write_bytes(struct.pack("<i", 6) + b"".join(
        struct.pack("<fi", -1.0, len(p)) + p for p in PIECES))
    return ["--model", str(model), "--tokenizer", str(tok)]


def run(capsys, *args):
    """Run ``chipotle generate *args``; return ``(exit code, stdout, stderr)``."""
    code = cli.main(["generate", *args])
    out, err = capsys.readouterr()
    return code, out, err


#: The start of the progress line a command prints before searching for the configurations
#: that fit (`chipotle.cli.search_note`, up to the model's name), which may come before its
#: refusal.
SEARCH_LINE = cli.search_note("\0").partition("\0")[0]


def refused(capsys, main, argv, prog: str) -> str:
    """Run ``main(argv)`` (a ``python -m`` command's); assert that it refuses the input the
    project's way (``chipotle.cli.ArgumentParser``): `SystemExit` with status 2, nothing on
    stdout, one line on stderr starting ``<prog>: error: `` (after at most the progress line
    of a search for the configurations that fit, `SEARCH_LINE`), no traceback.  Return the
    rest of that line (the message, with any ``(<prog> --help lists the options)``, no
    newline).
    """
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    code = e.value.code
    del e       # its traceback holds main's frames, and what they built, in a cycle
    out, err = capsys.readouterr()
    lines = err.splitlines()
    if len(lines) == 2 and lines[0].startswith(SEARCH_LINE):
        err = err.split("\n", 1)[1]
    assert code == 2 and out == "" and err.count("\n") == 1, (argv, code, out, err)
    assert err.startswith(f"{prog}: error: ") and "Traceback" not in err, err
    return err[len(f"{prog}: error: "):].rstrip("\n")
