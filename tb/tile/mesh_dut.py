"""Design under test of the multi-tile bench: a mesh of whole tiles (elaborated by pytest).

Members
-------
TileMesh
    ``width`` x ``height`` :class:`~chipotle.hw.tile.tile.Tile` on a
    :class:`~chipotle.hw.noc.Mesh`, the host link at the edge.
"""

# ruff: noqa: F403, F405

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from chipotle.hw.noc import Mesh
from chipotle.hw.tile.controller import Status
from chipotle.hw.tile.tile import Tile

__all__ = ["TileMesh"]


class TileMesh(wiring.Component):
    """Tiles of one `TileConfig` on a mesh of its size; ``status`` of every tile exposed.

    Members
    -------
    i_host, o_host : the host link (``Mesh.i_host`` / ``o_host``).
    status : ``Out(Status).array(width * height)``
        Each tile's status word, row-major.
    """

    def __init__(self, config):
        self._config = config
        flit = stream.Signature(config.noc.flit_layout)
        n = config.mesh_width * config.mesh_height
        super().__init__({
            "i_host": In(flit),
            "o_host": Out(flit),
            "status": Out(Status).array(n),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._config
        m.submodules.mesh = mesh = Mesh(c.mesh_width, c.mesh_height, c.noc)
        connect(m, flipped(self.i_host), mesh.i_host)
        connect(m, mesh.o_host, flipped(self.o_host))
        for i in range(c.mesh_width * c.mesh_height):
            x, y = i % c.mesh_width, i // c.mesh_width
            tile = Tile(c, x=x, y=y)
            m.submodules[f"tile_{x}_{y}"] = tile
            connect(m, mesh.o_local[i], tile.i_noc)
            connect(m, tile.o_noc, mesh.i_local[i])
            m.d.comb += [tile.i_noc_errors.eq(mesh.errors), self.status[i].eq(tile.status)]
        return m
