"""The chip: a mesh of tiles with the host link on an edge port.

Members
-------
Chip
    ``ChipConfig.mesh_width`` x ``mesh_height`` :class:`~chipotle.hw.tile.tile.Tile` on a
    :class:`~chipotle.hw.noc.Mesh`, the host link at the west port of tile (0, 0).
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from chipotle.config import ChipConfig

from .noc import Mesh
from .tile.controller import Status
from .tile.tile import Tile

__all__ = ["Chip"]


class Chip(wiring.Component):
    """The accelerator: tiles of one configuration on a mesh, and the host link.

    Everything the host does (load SRAM and programs, start tiles, read results and
    performance counters, receive ``DONE`` doorbells) goes through ``i_host`` / ``o_host`` as
    packets of ``chipotle.hw.noc.packet`` (``docs/noc.md``, ``docs/tile.md``).

    Parameters
    ----------
    config : ChipConfig, optional
        Default ``ChipConfig()`` (4 x 4 tiles).

    Members
    -------
    i_host : ``In(stream.Signature(config.noc.flit_layout))``
        Flits from the host into the mesh (west port of tile (0, 0)).
    o_host : ``Out(stream.Signature(config.noc.flit_layout))``
        Flits from the mesh to the host.
    status : ``Out(Status).array(n_tiles)``
        Each tile's controller status word, row-major (for LEDs and waveforms; the host
        reads the same word as register ``STATUS``).
    """

    def __init__(self, config: ChipConfig | None = None):
        self._config = config = ChipConfig() if config is None else config
        self._tile_config = config.tile_config()
        flit = stream.Signature(self._tile_config.noc.flit_layout)
        super().__init__({
            "i_host": In(flit),
            "o_host": Out(flit),
            "status": Out(Status).array(config.n_tiles),
        })

    @property
    def config(self) -> ChipConfig:
        """The chip's parameters."""
        return self._config

    def elaborate(self, platform):
        m = Module()
        c, tc = self._config, self._tile_config
        m.submodules.mesh = mesh = Mesh(c.mesh_width, c.mesh_height, tc.noc)
        connect(m, flipped(self.i_host), mesh.i_host)
        connect(m, mesh.o_host, flipped(self.o_host))
        for i, (x, y) in enumerate(c.tiles):
            tile = Tile(tc, x=x, y=y)
            m.submodules[f"tile_{x}_{y}"] = tile
            connect(m, mesh.o_local[i], tile.i_noc)
            connect(m, tile.o_noc, mesh.i_local[i])
            m.d.comb += [tile.i_noc_errors.eq(mesh.errors), self.status[i].eq(tile.status)]
        return m
