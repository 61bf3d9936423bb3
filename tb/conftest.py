"""pytest configuration shared by the chipotle regression.

Fixtures
--------
sim
    Parametrised over the simulators selected by ``$SIM`` (default: Verilator and
    Icarus); every RTL test runs once per simulator.
model_paths
    Paths of the stories260K checkpoint and tok512 tokenizer.  A missing file skips
    the test on a developer's machine but fails it under CI (``CI=true``); a
    ``$CHIPOTLE_MODEL_DIR`` (make: ``MODEL_DIR=``) without them refuses the run, and so
    does a file there (or in the default folder) that is not the published one (its
    sha256, ``chipotle.paths.check_published``).

Tests marked ``slow`` (the default 4 x 4 chip, about 7 minutes from a cold build cache) are
deselected unless the ``-m`` expression names ``slow`` (``make test-default`` runs ``-m
slow``), so that ``make test PYTEST_ARGS="-m rtl"`` does not start them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from chipotle.paths import DEFAULT_CHECKPOINT, DEFAULT_TOKENIZER, model_dir_from_env  # noqa: E402
from chipotle.sim import simulators_from_env  # noqa: E402

#: The stories260K checkpoint and tok512 tokenizer (`model_paths`).
MODEL_FILES = (DEFAULT_CHECKPOINT, DEFAULT_TOKENIZER)


def pytest_configure(config):
    """Refuse a bad ``$SIM`` or a ``$CHIPOTLE_MODEL_DIR`` that is not a model folder once, before
    any test runs (``make test SIM=iverilog``, ``MODEL_DIR=/typo``), instead of an error per
    test or a run whose model tests all skip."""
    try:
        simulators_from_env()
    except ValueError as e:
        raise pytest.UsageError(f"{e} (make test: SIM=)") from None
    d = model_dir_from_env()
    if d is not None and d.exists() and not d.is_dir():
        raise pytest.UsageError(f"$CHIPOTLE_MODEL_DIR (make: MODEL_DIR=) is a file, not a "
                                f"folder: {d}; give the folder that holds the model files")
    if d is not None and not d.exists():
        raise pytest.UsageError(f"$CHIPOTLE_MODEL_DIR (make: MODEL_DIR=) {d} does not exist; "
                                f"`make models MODEL_DIR={d}` creates it and downloads "
                                "stories260K.bin and tok512.bin there, or give MODEL_DIR=<a "
                                "folder holding them>")
    if d is not None:
        # A folder given on purpose must hold the model: its absence is a mistake, not a
        # machine without the files (which skips the model tests, the default folder's way).
        missing = [n for n in MODEL_FILES if not (d / n).is_file()]
        if missing:
            raise pytest.UsageError(f"$CHIPOTLE_MODEL_DIR (make: MODEL_DIR=) {d} lacks "
                                    f"{', '.join(missing)}; `make models MODEL_DIR={d}` "
                                    "fetches them")
    # A damaged or replaced model file would fail every model test with a traceback (a
    # truncated checkpoint) or a story other than the docs' (any float32 bytes load): refuse
    # it once, as `make sim` does, with the fetch that repairs it.
    from chipotle.paths import check_published, default_model_dir
    for name in MODEL_FILES:
        path = default_model_dir() / name
        if path.is_file():
            try:
                check_published(path, None)
            except ValueError as e:
                raise pytest.UsageError(f"{e} (make test: MODEL_DIR=)") from None


def pytest_collection_modifyitems(config, items):
    """Deselect the ``slow`` tests unless ``-m`` names them; run the ``rtl`` tests first.

    The RTL tests (a simulator build and run each, up to minutes) are the long ones; started
    first, they spread over pytest-xdist's workers while the many short tests fill the
    cores at the end.  In collection order the RTL tests of ``tb/tile`` came last, and one
    worker ran them alone for minutes after the other had run out of work."""
    if "slow" not in (config.option.markexpr or ""):
        slow = [it for it in items if it.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [it for it in items if not it.get_closest_marker("slow")]
    items.sort(key=lambda it: it.get_closest_marker("rtl") is None)     # stable


def pytest_generate_tests(metafunc):
    if "sim" in metafunc.fixturenames:
        metafunc.parametrize("sim", simulators_from_env())


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def model_paths():
    """Return ``(checkpoint, tokenizer)`` paths of stories260K, or skip/fail if absent."""
    from chipotle.paths import default_model_dir

    d = default_model_dir()
    ckpt, tok = (d / n for n in MODEL_FILES)
    missing = [p for p in (ckpt, tok) if not p.is_file()]
    if missing:
        msg = (f"model files not found: {', '.join(map(str, missing))} "
               "(set $CHIPOTLE_MODEL_DIR, make's MODEL_DIR=, or place them in "
               "../shared/models/; `make models` fetches them)")
        if _in_ci():
            pytest.fail(msg)
        pytest.skip(msg)
    return ckpt, tok
