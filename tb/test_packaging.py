"""pyproject.toml's package list and package data against the source folders.

setuptools installs only the packages listed in ``[tool.setuptools] packages``: a
sub-package missing there works in the editable checkout and is absent from a wheel.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_source_package_is_listed():
    st = _setuptools()
    found = set()
    for name, folder in st["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    # a sub-package of one root (chipotle.hw) is also a folder of another (sw/ has no hw/)
    assert found == set(st["packages"])


def test_package_data_exists():
    st = _setuptools()
    for package, patterns in st["package-data"].items():
        folder = ROOT / st["package-dir"][package]
        for pattern in patterns:
            assert list(folder.glob(pattern)), (package, pattern)
