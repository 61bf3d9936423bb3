"""The host driver: one API over the ISA simulator and the RTL under cocotb.

``chipotle.driver.hostlink``
    The host side of the packet protocol (packet builders, response parsing).
``chipotle.driver.backend``
    The `Backend` protocol, `IsaSimBackend`, the errors (`TileFault`, `DoorbellTimeout`,
    `UnexpectedDoorbell`, `UnfinishedStep`).
``chipotle.driver.rtl``
    `RtlBackend`, a ``Chip`` under cocotb (import it only inside a cocotb test).
``chipotle.driver.driver``
    `Driver`: load a compiled model, run steps, generate text.
"""

from .backend import (
    CONTROLLER_PERF,
    INTERFACE_PERF,
    PERF_NAMES,
    Backend,
    DoorbellTimeout,
    DriverError,
    IsaSimBackend,
    TileFault,
    TileStatus,
    UnexpectedDoorbell,
    UnfinishedStep,
    decode_status,
)
from .driver import Driver, GenerateResult, StepResult

__all__ = [
    "Backend", "IsaSimBackend", "TileStatus", "decode_status", "PERF_NAMES", "CONTROLLER_PERF",
    "INTERFACE_PERF", "DriverError", "DoorbellTimeout", "TileFault", "UnexpectedDoorbell",
    "UnfinishedStep", "Driver", "StepResult", "GenerateResult",
]
