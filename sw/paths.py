"""Where chipotle looks for the model and tokenizer files."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_model_dir", "DEFAULT_CHECKPOINT", "DEFAULT_TOKENIZER", "FETCH_HINT"]

DEFAULT_CHECKPOINT = "stories260K.bin"
DEFAULT_TOKENIZER = "tok512.bin"

FETCH_HINT = (
    "fetch them with 'make models' (downloads stories260K.bin and tok512.bin from "
    "karpathy/tinyllamas on Hugging Face into $CHIPOTLE_MODEL_DIR or ../shared/models/)"
)


def default_model_dir() -> Path:
    """Return ``$CHIPOTLE_MODEL_DIR`` if set, else ``../shared/models/`` beside the checkout."""
    env = os.environ.get("CHIPOTLE_MODEL_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "models"
