"""Registry of generation backends: named factories from a checkpoint to a `Model`.

Built in:

``reference``
    `chipotle.reference.Transformer`, the float32 forward pass of llama2.c's run.c.
``golden``
    ``chipotle.golden.GoldenModel``, the bit-exact integer model of the hardware arithmetic.
    Imported only when chosen, so that the other backends work without it.

Later backends (ISA simulator, RTL under cocotb, a board) add themselves with `register`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from .generate import Model
from .model import Checkpoint

__all__ = ["Backend", "BackendUnavailable", "register", "names", "get", "create"]


class BackendUnavailable(RuntimeError):
    """A backend is registered but cannot be created here (a module or tool is missing)."""


@dataclass(frozen=True)
class Backend:
    """A named way to build a model.

    Attributes
    ----------
    name : str
    description : str
        One line, for ``--help``.
    factory : callable
        ``factory(checkpoint) -> Model``; raises `BackendUnavailable` when it cannot run.
    """

    name: str
    description: str
    factory: Callable[[Checkpoint], Model]


_REGISTRY: dict[str, Backend] = {}


def register(name: str, description: str, factory: Callable[[Checkpoint], Model]) -> None:
    """Add (or replace) the backend `name`."""
    _REGISTRY[name] = Backend(name, description, factory)


def names() -> list[str]:
    """Return the registered backend names, in registration order."""
    return list(_REGISTRY)


def get(name: str) -> Backend:
    """Return the backend `name`.

    Raises
    ------
    KeyError
        If no backend has that name (the message lists the known ones).
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r} (known: {', '.join(_REGISTRY)})") from None


def create(name: str, checkpoint: Checkpoint) -> Model:
    """Build the model of backend `name` for `checkpoint`.

    Raises
    ------
    KeyError
        If the backend is unknown.
    BackendUnavailable
        If the backend cannot run here.
    """
    return get(name).factory(checkpoint)


def _import_attr(module: str, attr: str, what: str):
    """Import ``module.attr``, turning the module's absence into `BackendUnavailable`."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:   # the module exists but something it imports is missing
            raise
        raise BackendUnavailable(f"{what} needs `{module}`, which is not part of this "
                                 "installation yet") from None
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise BackendUnavailable(f"{what} needs `{module}.{attr}`, which `{module}` does "
                                 "not define") from None


def _reference(checkpoint: Checkpoint) -> Model:
    from .reference import Transformer
    return Transformer(checkpoint)


def _golden(checkpoint: Checkpoint) -> Model:
    cls = _import_attr("chipotle.golden", "GoldenModel",
                       "the golden backend (the integer golden model, issue 2)")
    return cls(checkpoint)


register("reference", "float32 forward pass, as llama2.c run.c", _reference)
register("golden", "bit-exact integer model of the hardware arithmetic", _golden)
