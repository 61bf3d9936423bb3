"""Small stream building blocks shared by the gateware.

Members
-------
SkidBuffer
    A registered stream stage that cuts the combinational ``ready`` and ``payload``
    paths and still sustains one transfer per cycle.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """Register a stream without losing throughput (a two-entry "skid" buffer).

    ``o.valid``/``o.payload`` come from a register, and ``i.ready`` from a register, so
    neither the forward nor the backward path is combinational across the stage.  One
    transfer per cycle is sustained while the sink is ready; when the sink stalls, the
    word already accepted parks in the skid register.  Latency: 1 cycle.

    Parameters
    ----------
    shape : shape-like
        Payload shape (an ``int`` width, or a ``data.Layout``).

    Members
    -------
    i : ``In(stream.Signature(shape))``
        Upstream.
    o : ``Out(stream.Signature(shape))``
        Downstream.
    """

    def __init__(self, shape):
        self._shape = shape
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    @property
    def shape(self):
        """Payload shape."""
        return self._shape

    def elaborate(self, platform):
        m = Module()
        skid = Signal.like(self.i.payload)
        skid_valid = Signal()

        m.d.comb += self.i.ready.eq(~skid_valid)
        with m.If(self.o.ready | ~self.o.valid):
            # The output register is free (or being emptied) this cycle.
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & self.i.ready):
            # The output is stalled: park the accepted word.
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m
