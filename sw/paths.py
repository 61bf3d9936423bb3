"""Where chipotle looks for the model and tokenizer files."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_model_dir", "model_dir_from_env", "DEFAULT_CHECKPOINT", "DEFAULT_TOKENIZER",
           "FETCH_HINT"]

DEFAULT_CHECKPOINT = "stories260K.bin"
DEFAULT_TOKENIZER = "tok512.bin"

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
