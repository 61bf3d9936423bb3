"""cocotb-bus driver and monitor for Amaranth ``lib.stream`` ports.

Amaranth flattens a stream port ``i`` to the Verilog ports ``i__valid``, ``i__ready`` and
``i__payload`` (``__`` separates names), which is the bus these classes bind to.
Transfer rule (Amaranth's stream docs): a word moves on a rising clock edge where
``valid`` and ``ready`` are both 1; a source must not drop ``valid`` or change ``payload``
until the transfer.
"""

from __future__ import annotations

import random

from cocotb.triggers import ReadOnly, RisingEdge
from cocotb_bus.drivers import BusDriver
from cocotb_bus.monitors import BusMonitor

__all__ = ["StreamDriver", "StreamMonitor", "StreamSink"]


class StreamDriver(BusDriver):
    """Drive payloads (ints) into a stream input port of the DUT.

    Parameters
    ----------
    entity : cocotb handle
        The DUT.
    name : str
        Port name, e.g. ``"i"``.
    clock : cocotb handle
        Clock the port is synchronous to.
    idle_prob : float
        Probability of inserting an idle cycle (``valid`` low) before each word,
        to exercise bubbles.
    rng : random.Random, optional
        Random source (seed it for reproducible stimulus).
    """

    _signals = ["valid", "ready", "payload"]

    def __init__(self, entity, name, clock, *, idle_prob=0.0, rng=None, **kwargs):
        super().__init__(entity, name, clock, bus_separator="__", **kwargs)
        self.idle_prob = idle_prob
        self.rng = rng or random.Random(0)
        self.bus.valid.value = 0
        self.bus.payload.value = 0

    async def _driver_send(self, transaction, sync=True):
        clk = RisingEdge(self.clock)
        while self.rng.random() < self.idle_prob:
            self.bus.valid.value = 0
            await clk
        self.bus.payload.value = int(transaction)
        self.bus.valid.value = 1
        while True:
            await ReadOnly()
            accepted = int(self.bus.ready.value) == 1
            await clk
            if accepted:
                break
        self.bus.valid.value = 0


class StreamSink:
    """Drive the ``ready`` of a stream output port, dropping it at random.

    Parameters
    ----------
    entity, name, clock
        As for :class:`StreamDriver`.
    stall_prob : float
        Probability that ``ready`` is low in a given cycle (back-pressure).
    rng : random.Random, optional
    """

    def __init__(self, entity, name, clock, *, stall_prob=0.0, rng=None):
        self.ready = getattr(entity, f"{name}__ready")
        self.clock = clock
        self.stall_prob = stall_prob
        self.rng = rng or random.Random(1)
        self.ready.value = 0

    async def run(self):
        """Toggle ``ready`` forever (start with ``cocotb.start_soon``)."""
        clk = RisingEdge(self.clock)
        while True:
            self.ready.value = 0 if self.rng.random() < self.stall_prob else 1
            await clk


class StreamMonitor(BusMonitor):
    """Record every word transferred on a stream port (input or output of the DUT)."""

    _signals = ["valid", "ready", "payload"]

    def __init__(self, entity, name, clock, **kwargs):
        super().__init__(entity, name, clock, bus_separator="__", **kwargs)

    async def _monitor_recv(self):
        clk = RisingEdge(self.clock)
        while True:
            await clk
            await ReadOnly()
            if int(self.bus.valid.value) and int(self.bus.ready.value):
                self._recv(int(self.bus.payload.value))
