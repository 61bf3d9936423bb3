"""FPGA builds of the chip: a UART host link and board top levels.

``chipotle.hw.fpga.uart``
    8N1 UART, the flit framing, `UartBridge`, `UartChip` (``docs/fpga.md``).
``chipotle.hw.fpga.boards``
    Board top levels and the configurations chosen per board (``make bitstream``).
"""

from .uart import (
    FlitDeframer,
    FlitFramer,
    UartBridge,
    UartChip,
    UartRx,
    UartTx,
    divisor,
    uart_chip_verilog,
)

__all__ = ["UartRx", "UartTx", "FlitDeframer", "FlitFramer", "UartBridge", "UartChip",
           "divisor", "uart_chip_verilog"]
