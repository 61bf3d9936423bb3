"""Repository-level pytest hooks (loaded for every invocation, even when a path given on the
command line does not exist, unlike ``tb/conftest.py``)."""

from pathlib import Path

import pytest


def pytest_configure(config):
    """Refuse a test path that does not exist by name (``make test PYTEST_ARGS=tb/typo.py``):
    under pytest-xdist the workers only report "no tests ran"."""
    where = Path(config.invocation_params.dir)
    missing = [a for a in config.args if not (where / a.split("::")[0]).exists()]
    if missing:
        raise pytest.UsageError(f"file or directory not found: {', '.join(missing)}")
