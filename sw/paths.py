"""Where chipotle looks for the model and tokenizer files."""

from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path

__all__ = ["default_model_dir", "model_dir_from_env", "DEFAULT_CHECKPOINT", "DEFAULT_TOKENIZER",
           "FETCH_HINT", "PUBLISHED_SHA256", "check_published"]

DEFAULT_CHECKPOINT = "stories260K.bin"
DEFAULT_TOKENIZER = "tok512.bin"

#: sha256 of the published files (karpathy/tinyllamas; the Makefile's ``SHA_<file>``, which
#: ``make models`` checks: ``tb/sw/test_cli.py`` keeps the two equal).
PUBLISHED_SHA256 = {
    DEFAULT_CHECKPOINT: "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696",
    DEFAULT_TOKENIZER: "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312",
}

FETCH_HINT = (
    "fetch them with 'make models' (downloads stories260K.bin and tok512.bin from "
    "karpathy/tinyllamas on Hugging Face into $CHIPOTLE_MODEL_DIR or ../shared/models/)"
)


def model_dir_from_env() -> Path | None:
    """Return ``$CHIPOTLE_MODEL_DIR`` as a path, or None when it is unset or empty (``make
    models`` takes an empty one as unset too)."""
    env = os.environ.get("CHIPOTLE_MODEL_DIR")
    return Path(env) if env else None


def default_model_dir() -> Path:
    """Return ``$CHIPOTLE_MODEL_DIR`` if set, else ``../shared/models/`` beside the checkout."""
    return model_dir_from_env() or \
        Path(__file__).resolve().parent.parent.parent / "shared" / "models"


def check_published(path: str | os.PathLike, option: str | None) -> None:
    """Raise ValueError unless the default file at `path` is the published one.

    Used where a command falls back to the default model files: a damaged or replaced
    ``stories260K.bin`` loads (any float32 bytes are weights) and tells another story
    than the docs' without a word.  A file given with `option` is taken as it is (None: the
    command has no such option, e.g. ``python -m chipotle.compiler.profile``, and the
    refusal offers none).

    Raises
    ------
    ValueError
        If `path`'s name is one of `PUBLISHED_SHA256` and its sha256 differs (names the file,
        both digests' starts and the fixes; run by ``make sim`` or ``make bench``, which set
        ``$CHIPOTLE_MAKE_CONFIG`` and take no `option`, the fixes in make's terms).
    """
    path = Path(path)
    want = PUBLISHED_SHA256.get(path.name)
    if want is None:
        return
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != want:
        # the folder make's MODEL_DIR= names ($CHIPOTLE_MODEL_DIR), or make's default
        fetch = "make models" + (f" MODEL_DIR={shlex.quote(str(path.parent))}"
                                 if "CHIPOTLE_MODEL_DIR" in os.environ else "")
        if "CHIPOTLE_MAKE_CONFIG" in os.environ:      # make's MODEL_DIR=, not `option`
            use = (f", or give MODEL_DIR=<a folder holding the published {DEFAULT_CHECKPOINT} "
                   f"and {DEFAULT_TOKENIZER}>")
        else:
            use = f", or give it with {option} to use it as it is" if option else ""
        raise ValueError(f"{path}: its sha256 ({got[:16]}...) is not the published file's "
                         f"({want[:16]}...): a damaged or replaced file; `{fetch}` fetches "
                         f"it again{use}")
