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

__all__ = ["BACKDOOR_SIGNALS", "Chip", "RESET_LATENCY", "TILE_MODULE", "TRACE_SIGNALS",
           "chip_verilog"]

#: Verilog module name of the tile in `chip_verilog`.
TILE_MODULE = "chipotle_tile"

#: ``(module, variable)`` pairs of `chip_verilog` that a simulation back door reaches
#: through VPI (`chipotle.sim.flow.run_cocotb`'s ``public``): every tile's SRAM bank arrays
#: (``bank0`` .. ``bank{n_banks - 1}`` of ``hw/tile/sram.py``), which
#: `chipotle.driver.rtl.RtlBackend.backdoor_write_sram` writes.
BACKDOOR_SIGNALS = ((f"{TILE_MODULE}.core.sram", "bank*"),)

#: `BACKDOOR_SIGNALS` and the controller's ``retired`` port and ``pc`` register, which
#: `chipotle.sim.cocotb_trace` samples every cycle.
TRACE_SIGNALS = BACKDOOR_SIGNALS + ((f"{TILE_MODULE}.core.controller", "retired"),
                                    (f"{TILE_MODULE}.core.controller", "pc"))


#: Rising clock edges after ``rst`` falls (sampled low) until the mesh and the tiles leave
#: reset (`Chip`'s reset pipeline): a host must not offer a flit before them.
RESET_LATENCY = 2


class Chip(wiring.Component):
    """The accelerator: tiles of one configuration on a mesh, and the host link.

    Everything the host does (load SRAM and programs, start tiles, read results and
    performance counters, receive ``DONE`` doorbells) goes through ``i_host`` / ``o_host`` as
    packets of ``chipotle.hw.noc.packet`` (``docs/noc.md``, ``docs/tile.md``).

    The reset (of the ``sync`` domain) reaches the mesh and the tiles through two registers
    (a reset pipeline): they leave reset two cycles after ``rst`` falls, all in the same
    cycle.

    Parameters
    ----------
    config : ChipConfig, optional
        Default ``ChipConfig()`` (4 x 4 tiles).
    tile_instances : bool, optional
        False (default): the tiles are Amaranth submodules (one Verilog module per tile).
        True: each tile is an ``Instance`` of the external module `TILE_MODULE` (a
        ``Tile(config, x=None, y=None)``, position on its ``i_x`` / ``i_y`` ports); the
        design is then complete only with that module's Verilog (`chip_verilog`).
    tile_reset_register : bool, optional
        With ``tile_instances`` only.  False (default): each ``Instance`` gets the reset
        pipeline's output.  True: it gets the pipeline's first register, and the module
        must register it once more (the same timing): `chip_verilog`'s `TILE_MODULE` does,
        so that a Verilator hierarchy block of it has no input in its next-state logic and
        the chip's calls of the blocks depend on no top-level input.

    Raises
    ------
    ValueError
        If `tile_reset_register` is set without `tile_instances`.

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

    def __init__(self, config: ChipConfig | None = None, *, tile_instances: bool = False,
                 tile_reset_register: bool = False):
        if tile_reset_register and not tile_instances:
            raise ValueError("tile_reset_register needs tile_instances")
        self._config = config = ChipConfig() if config is None else config
        self._tile_instances = tile_instances
        self._tile_reset_register = tile_reset_register
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
        # reset through a pipeline of two registers (a reset that ends two cycles later; on
        # an FPGA also cuts of the reset's fan-out).  Without it every tile's next-state
        # logic depends on the top-level input ``rst``, which Verilator evaluates again at
        # every call of eval() (its "ico" region, several per clock cycle under cocotb).
        # Tile instances that register their reset themselves (`chip_verilog`) get the first
        # register: their hierarchy blocks then see no top-level input at all.
        m.domains.core = core = ClockDomain("core", local=True)
        rst_q1 = Signal(init=1, reset_less=True)
        rst_q2 = Signal(init=1, reset_less=True)
        m.d.sync += [rst_q1.eq(ResetSignal("sync")), rst_q2.eq(rst_q1)]
        m.d.comb += [core.clk.eq(ClockSignal("sync")), core.rst.eq(rst_q2)]
        m.submodules.mesh = mesh = DomainRenamer("core")(Mesh(c.mesh_width, c.mesh_height,
                                                               tc.noc))
        connect(m, flipped(self.i_host), mesh.i_host)
        connect(m, mesh.o_host, flipped(self.o_host))
        for i, (x, y) in enumerate(c.tiles):
            if self._tile_instances:
                into, outof = mesh.o_local[i], mesh.i_local[i]
                tile_rst = rst_q1 if self._tile_reset_register else ResetSignal("core")
                m.submodules[f"tile_{x}_{y}"] = Instance(
                    TILE_MODULE,
                    i_clk=ClockSignal("core"), i_rst=tile_rst,
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

    The text holds the module `TILE_MODULE` (``Tile(config.tile_config(), x=None, y=None)``
    with registers on its inputs ``rst``, ``i_x`` and ``i_y``) and the top module `name`
    (``Chip(config, tile_instances=True, tile_reset_register=True)``), which instantiates it
    ``n_tiles`` times with constant positions.  The tiles leave reset two cycles after
    ``rst`` falls, with the mesh, as in ``Chip``; the hierarchy below each instance is the
    ``Tile``'s (``tile_<x>_<y>.core.sram``...).  Ports of `name` are those of `Chip`.

    `TILE_MODULE` carries two Verilator metacomments (plain comments to other tools):
    ``no_inline_module`` (one module in a flat C++ model; Verilator would inline it into
    every instance: 173 against 130 MB of C++ for the 4 x 4 chip with --public-flat-rw)
    and ``hier_block`` (with ``--hierarchical``, `chipotle.sim.flow.run_cocotb`: verilated
    and compiled once, its code shared by every instance; Verilator ignores it otherwise).
    The registers are for the hierarchy block: Verilator evaluates the logic that depends
    on a block's inputs at every call of the block (its "ico" region), and with ``rst`` an
    input that is most of the tile's next-state logic.

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
    top = verilog.convert(Chip(config, tile_instances=True, tile_reset_register=True),
                          name=name, emit_src=False)
    return _register_tile_inputs(tile) + "\n" + top


#: Inputs of `TILE_MODULE` that `chip_verilog` registers, and the registers' names.
_TILE_INPUT_REGISTERS = {"rst": "chipotle_rst_q", "i_x": "chipotle_x_q", "i_y": "chipotle_y_q"}


def _register_tile_inputs(tile: str) -> str:
    """Return the Verilog ``tile`` (`TILE_MODULE` and its submodules) with the metacomments
    and the registers of `chip_verilog`: inside `TILE_MODULE`, every use of an input of
    `_TILE_INPUT_REGISTERS` reads its register instead (``rst``'s starts at 1, as ``Chip``'s
    reset register).

    Raises
    ------
    ValueError
        If the module lacks one of those inputs or already uses a register's name.
    """
    import re

    m = re.search(rf"^module {TILE_MODULE}\((.*?)\);\n(.*?)^endmodule", tile, re.M | re.S)
    if m is None:
        raise ValueError(f"no module {TILE_MODULE} in the tile's Verilog")
    body = m.group(2)
    widths = {}
    for port, reg in _TILE_INPUT_REGISTERS.items():
        decl = re.search(rf"^  input (\[\d+:0\] )?{port};$", body, re.M)
        if decl is None or reg in body:
            raise ValueError(f"{TILE_MODULE}: no input {port!r}, or {reg!r} already used")
        widths[port] = decl.group(1) or ""
    names = "|".join(_TILE_INPUT_REGISTERS)
    use = re.compile(rf"(?<![.\w$\\])({names})(?![\w$])")
    # uses only: not the port's own `input` / `wire` declarations
    lines = [ln if re.match(rf"^  (input|wire) (\[\d+:0\] )?({names});$", ln)
             else use.sub(lambda u: _TILE_INPUT_REGISTERS[u.group(1)], ln)
             for ln in body.split("\n")]
    regs = ["  /* verilator no_inline_module */", "  /* verilator hier_block */"]
    regs += [f"  reg {widths[p]}{r} = {1 if p == 'rst' else 0};"
             for p, r in _TILE_INPUT_REGISTERS.items()]
    # declared first (used by the instances below), updated last (after `clk`'s declaration)
    update = ["  always @(posedge clk) begin"]
    update += [f"    {r} <= {p};" for p, r in _TILE_INPUT_REGISTERS.items()]
    update += ["  end", ""]
    new_body = "\n".join(regs + lines[:-1] + update)
    return tile[:m.start(2)] + new_body + tile[m.end(2):]
