"""The mesh generator of the chipotle network-on-chip.

Members
-------
Mesh
    ``width`` x ``height`` routers, their local ports and the host link.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from __future__ import annotations

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from .packet import DEFAULT, NocConfig
from .router import Router

__all__ = ["Mesh"]


class Mesh(wiring.Component):
    """A ``width`` x ``height`` mesh of :class:`~.router.Router`.

    Coordinates: ``x`` is the column, 0 at the west edge, growing east; ``y`` is the row, 0 at
    the north edge, growing south.  Tile ``i`` is at ``(i % width, i // width)`` (row-major).
    The host link is the west port of router (0, 0); its coordinates in head flits are
    ``cfg.host`` (column "-1", row 0).  The ports of the routers on the other edges face
    nothing: their inputs are held idle and their outputs always ready (no packet is ever
    routed to them: heads addressed outside the mesh are dropped where they enter).

    Latency: one cycle per router from an input FIFO write to the next FIFO write, so a
    packet injected on ``i_local[i]`` at edge *t* is offered on ``o_local[j]`` at
    *t* + 1 + hops(i, j).  ``errors`` lags the routers' counters by one cycle.

    Parameters
    ----------
    width, height : int
        Mesh size, 1 x 1 up to ``cfg.max_width`` x ``cfg.max_height`` (15 x 16 by default).
    cfg : NocConfig
        Network parameters.

    Members
    -------
    i_local : ``In(stream.Signature(cfg.flit_layout)).array(width * height)``
        Injection port of each tile, row-major.
    o_local : ``Out(stream.Signature(cfg.flit_layout)).array(width * height)``
        Delivery port of each tile, row-major.  Must eventually accept every flit.
    i_host : ``In(stream.Signature(cfg.flit_layout))``
        Host link into the mesh (west input of router (0, 0)).
    o_host : ``Out(stream.Signature(cfg.flit_layout))``
        Host link out of the mesh (west output of router (0, 0)): packets addressed to
        ``cfg.host``.  Must eventually accept every flit.
    router_errors : ``Out(cfg.error_width).array(width * height)``
        Dropped-packet counter of each router (saturating), row-major.
    errors : ``Out(cfg.error_width)``
        Sum of all the routers' counters (saturating), registered.
    """

    def __init__(self, width: int, height: int, cfg: NocConfig = DEFAULT):
        cfg.check_mesh(width, height)
        self._cfg = cfg
        self._size = (width, height)
        n = width * height
        flit = stream.Signature(cfg.flit_layout)
        super().__init__({
            "i_local": In(flit).array(n),
            "o_local": Out(flit).array(n),
            "i_host": In(flit),
            "o_host": Out(flit),
            "router_errors": Out(cfg.error_width).array(n),
            "errors": Out(cfg.error_width),
        })

    @property
    def cfg(self) -> NocConfig:
        """Network parameters."""
        return self._cfg

    @property
    def width(self) -> int:
        """Number of columns."""
        return self._size[0]

    @property
    def height(self) -> int:
        """Number of rows."""
        return self._size[1]

    def tile_index(self, x: int, y: int) -> int:
        """Return the index of tile ``(x, y)`` in the ``i_local``/``o_local`` arrays."""
        return y * self.width + x

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        width, height = self._size
        routers = {}
        for y in range(height):
            for x in range(width):
                r = Router(cfg, x, y, width, height, host_port=(x, y) == (0, 0))
                m.submodules[f"router_{x}_{y}"] = routers[x, y] = r
                i = self.tile_index(x, y)
                connect(m, flipped(self.i_local[i]), r.i_local)
                connect(m, r.o_local, flipped(self.o_local[i]))
                m.d.comb += self.router_errors[i].eq(r.errors)

        for (x, y), r in routers.items():
            if x + 1 < width:
                connect(m, r.o_e, routers[x + 1, y].i_w)
                connect(m, routers[x + 1, y].o_w, r.i_e)
            if y + 1 < height:
                connect(m, r.o_s, routers[x, y + 1].i_n)
                connect(m, routers[x, y + 1].o_n, r.i_s)
            # Edge ports facing nothing.
            edges = []
            if x == width - 1:
                edges.append((r.i_e, r.o_e))
            if y == 0:
                edges.append((r.i_n, r.o_n))
            if y == height - 1:
                edges.append((r.i_s, r.o_s))
            if x == 0 and (x, y) != (0, 0):
                edges.append((r.i_w, r.o_w))
            for link_in, link_out in edges:
                m.d.comb += [
                    link_in.flit.valid.eq(0),
                    link_in.flit.payload.eq(0),
                    link_out.flit.ready.eq(1),
                    link_out.room.eq(1),
                ]

        host = routers[0, 0]
        connect(m, flipped(self.i_host), host.i_w.flit)
        connect(m, host.o_w.flit, flipped(self.o_host))
        m.d.comb += host.o_w.room.eq(1)   # the host is a sink

        limit = (1 << cfg.error_width) - 1
        total = Signal(cfg.error_width + (width * height).bit_length())
        m.d.comb += total.eq(sum(r.errors for r in routers.values()))
        m.d.sync += self.errors.eq(Mux(total > limit, limit, total))
        return m
