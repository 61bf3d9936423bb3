"""The chip: a mesh of tiles with the host link on an edge port.

Members
-------
Chip
    ``ChipConfig.mesh_width`` x ``mesh_height`` :class:`~chipotle.hw.tile.tile.Tile` on a
    :class:`~chipotle.hw.noc.Mesh`, the host link at the west port of tile (0, 0).
TILE_MODULE
    Name of the tile's Verilog module in `chip_verilog`.
chip_verilog
    The chip's Verilog with ONE tile module instantiated ``n_tiles`` times.

Why `chip_verilog`: Amaranth emits every instance of a component as a module of its own, so
a 4 x 4 chip generated directly is 16 copies of the tile (about two minutes to generate and
a C++ model that takes Verilator an hour to compile).  The tiles differ only in their
position, which `Tile` can take from ports (``x = y = None``); `chip_verilog` generates the
tile once and the chip around it with ``Instance``, so simulators and synthesis compile the
tile once.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from amaranth import *  # house style (STYLE.md)
from amaranth.hdl import Instance
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from chipotle.config import ChipConfig

from .noc import Mesh
from .tile.controller import Status
from .tile.tile import Tile

__all__ = ["Chip", "TILE_MODULE", "chip_verilog"]

#: Verilog module name of the tile in `chip_verilog`.
TILE_MODULE = "chipotle_tile"


class Chip(wiring.Component):
    """The accelerator: tiles of one configuration on a mesh, and the host link.

    Everything the host does (load SRAM and programs, start tiles, read results and
    performance counters, receive ``DONE`` doorbells) goes through ``i_host`` / ``o_host`` as
    packets of ``chipotle.hw.noc.packet`` (``docs/noc.md``, ``docs/tile.md``).

    The reset (of the ``sync`` domain) reaches the mesh and the tiles through one register:
    they leave reset one cycle after ``rst`` falls.

    Parameters
    ----------
    config : ChipConfig, optional
        Default ``ChipConfig()`` (4 x 4 tiles).
    tile_instances : bool, optional
        False (default): the tiles are Amaranth submodules (one Verilog module per tile).
        True: each tile is an ``Instance`` of the external module `TILE_MODULE` (a
        ``Tile(config, x=None, y=None)``, position on its ``i_x`` / ``i_y`` ports); the
        design is then complete only with that module's Verilog (`chip_verilog`).

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

    def __init__(self, config: ChipConfig | None = None, *, tile_instances: bool = False):
        self._config = config = ChipConfig() if config is None else config
        self._tile_instances = tile_instances
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
        # The mesh and the tiles run in the domain "core": the clock of "sync", and "sync"'s
        # reset through one register (a reset that ends one cycle later; on an FPGA also a
        # cut of the reset's fan-out).  Without it every tile's next-state logic depends on
        # the top-level input ``rst``, which Verilator evaluates again at every call of
        # eval() (its "ico" region, several per clock cycle under cocotb).
        m.domains.core = core = ClockDomain("core", local=True)
        rst_q = Signal(init=1, reset_less=True)
        m.d.sync += rst_q.eq(ResetSignal("sync"))
        m.d.comb += [core.clk.eq(ClockSignal("sync")), core.rst.eq(rst_q)]
        m.submodules.mesh = mesh = DomainRenamer("core")(Mesh(c.mesh_width, c.mesh_height,
                                                               tc.noc))
        connect(m, flipped(self.i_host), mesh.i_host)
        connect(m, mesh.o_host, flipped(self.o_host))
        for i, (x, y) in enumerate(c.tiles):
            if self._tile_instances:
                into, outof = mesh.o_local[i], mesh.i_local[i]
                m.submodules[f"tile_{x}_{y}"] = Instance(
                    TILE_MODULE,
                    i_clk=ClockSignal("core"), i_rst=ResetSignal("core"),
                    i_i_noc__payload=into.payload.as_value(), i_i_noc__valid=into.valid,
                    o_i_noc__ready=into.ready,
                    o_o_noc__payload=outof.payload.as_value(), o_o_noc__valid=outof.valid,
                    i_o_noc__ready=outof.ready,
                    i_i_noc_errors=mesh.errors, i_i_x=C(x, 8), i_i_y=C(y, 8),
                    o_status=self.status[i].as_value(), o_errors=Signal(8, name=f"errors_{i}"))
                continue
            tile = Tile(tc, x=x, y=y)
            m.submodules[f"tile_{x}_{y}"] = DomainRenamer("core")(tile)
            connect(m, mesh.o_local[i], tile.i_noc)
            connect(m, tile.o_noc, mesh.i_local[i])
            m.d.comb += [tile.i_noc_errors.eq(mesh.errors), self.status[i].eq(tile.status)]
        return m


def chip_verilog(config: ChipConfig | None = None, name: str = "chip") -> str:
    """Return the Verilog of ``Chip(config)`` with the tile generated once.

    The text holds the module `TILE_MODULE` (``Tile(config.tile_config(), x=None, y=None)``)
    and the top module `name` (``Chip(config, tile_instances=True)``), which instantiates it
    ``n_tiles`` times with constant positions.  Ports of `name` are those of `Chip`.

    Parameters
    ----------
    config : ChipConfig, optional
    name : str
        Top-level module name.
    """
    from amaranth.back import verilog

    config = ChipConfig() if config is None else config
    tile = verilog.convert(Tile(config.tile_config(), x=None, y=None), name=TILE_MODULE,
                           emit_src=False)
    top = verilog.convert(Chip(config, tile_instances=True), name=name, emit_src=False)
    # Metacomments, plain comments to other tools.  Verilator inlines modules into their
    # parent by default; `no_inline_module` keeps the tile a module of its own in a flat
    # C++ model, which cut the 4 x 4 chip's C++ from 173 MB to 130 MB (with
    # --public-flat-rw), though the tile's functions are still emitted once per instance.
    # `hier_block` makes the tile a hierarchy block when Verilator runs with
    # --hierarchical (`chipotle.sim.flow.run_cocotb`): verilated and compiled once, its
    # code shared by every instance; without --hierarchical Verilator ignores it.
    header = f"module {TILE_MODULE}("
    at = tile.index(";", tile.index(header)) + 1
    tile = (tile[:at] + "\n  /* verilator no_inline_module */\n  /* verilator hier_block */"
            + tile[at:])
    return tile + "\n" + top
