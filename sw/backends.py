"""Registry of generation backends: named factories from a checkpoint to a `Model`.

Built in:

``reference``
    `chipotle.reference.Transformer`, the float32 forward pass of llama2.c's run.c.
``golden``
    ``chipotle.golden.GoldenModel``, the bit-exact integer model of the hardware arithmetic.
    Imported only when chosen, so that the other backends work without it.

``isasim``
    The compiled model (`chipotle.compiler`) on the ISA-level simulator through
    `chipotle.driver`, one position per `forward` (the default chip configuration).
``verilator``, ``icarus``
    The compiled model on the RTL of `chipotle.hw.chip.Chip` under cocotb.  They run inside a
    simulator process (`chipotle.sim.chiprun.run_rtl`), not as a `Model`: ``chipotle
    generate`` runs every backend of `CHIP_BACKENDS` with the driver's own loop (prefill in
    batches, on-chip argmax).

``uart``
    The compiled model on an FPGA board (``make bitstream``) through
    `chipotle.driver.uart.UartBackend` over a serial port: ``--port``, ``--baud``.

Later backends add themselves with `register`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from .generate import Model
from .model import Checkpoint

__all__ = ["Backend", "BackendUnavailable", "register", "names", "get", "create",
           "CHIP_BACKENDS", "ChipModel"]

#: Backends that run the compiled model on a chip through `chipotle.driver`.
CHIP_BACKENDS = ("isasim", "verilator", "icarus", "uart")


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


class ChipModel:
    """A compiled model on `chipotle.driver.IsaSimBackend`, as a `Model` (one position a step).

    Parameters
    ----------
    checkpoint : Checkpoint or QuantizedModel
    config : ChipConfig, optional
        Default ``CONFIGS["default"]``.
    context : int, optional
        Positions to compile for (default: the compiler's).

    Attributes
    ----------
    compiled : chipotle.compiler.CompiledModel
    driver : chipotle.driver.Driver
    config : ModelConfig
        The model's, with ``seq_len`` the compiled context.
    """

    def __init__(self, checkpoint, config=None, context=None):
        import asyncio
        import dataclasses

        from .compiler import compile_model
        from .config import CONFIGS
        from .driver import Driver, IsaSimBackend

        chip = config or CONFIGS["default"]
        self.compiled = compile_model(checkpoint, chip, context=context)
        self.driver = Driver(self.compiled, IsaSimBackend(chip), perf=False)
        self.config = dataclasses.replace(self.compiled.model, seq_len=self.compiled.context)
        self._run = asyncio.run
        self._run(self.driver.load())

    def reset(self) -> None:
        """Start a new sequence (position 0 reloads the tables; the KV cache is overwritten)."""

    def forward(self, token: int, pos: int):
        """Run one position on the chip and return its int32 logits ``(vocab_size,)``."""
        return self._run(self.driver.step([token], pos, logits=True)).logits

    def dequantize_logits(self, logits):
        """Return the int32 logits as float32 real values."""
        from .driver.driver import _dequantize
        return _dequantize(logits)


def _isasim(checkpoint: Checkpoint) -> Model:
    _import_attr("chipotle.compiler", "compile_model", "the isasim backend (the compiler)")
    return ChipModel(checkpoint)


def _rtl(sim: str):
    def factory(checkpoint: Checkpoint) -> Model:
        raise BackendUnavailable(f"the {sim} backend runs inside a cocotb simulation; use "
                                 f"`chipotle generate --backend {sim}` or "
                                 "`chipotle.sim.chiprun.run_rtl`")
    return factory


register("isasim", "the compiled model on the ISA-level simulator (estimated cycles)", _isasim)
register("verilator", "the compiled model on the chip's RTL under Verilator (cocotb)",
         _rtl("verilator"))
register("icarus", "the compiled model on the chip's RTL under Icarus Verilog (cocotb)",
         _rtl("icarus"))


def _uart(checkpoint: Checkpoint) -> Model:
    raise BackendUnavailable("the uart backend drives a board through `chipotle generate "
                             "--backend uart --port DEV` (chipotle.driver.uart.UartBackend)")


register("uart", "the compiled model on an FPGA board over its serial port (--port, --baud; "
         "docs/fpga.md)", _uart)
