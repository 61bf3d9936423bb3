"""Board top levels: `UartChip` on the board's clock, USB-serial pins and LEDs.

Members
-------
Board
    What a board build needs: its Amaranth platform, the chip configuration, clocks, the
    device's resources (for the report).
BOARDS
    ``ulx3s-85f`` (Lattice ECP5 LFE5U-85F) and ``icebreaker`` (iCE40 UP5K).
BoardTop
    The top-level elaboratable: clock (through a PLL where the chip clock differs from the
    oscillator), power-on reset, `UartChip`, LEDs.
ecp5_pll_params
    ``EHXPLLL`` dividers for an output frequency.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from __future__ import annotations

from dataclasses import dataclass

from amaranth import *  # house style (STYLE.md)
from amaranth.hdl import Instance
from amaranth.lib import io

from chipotle.config import CONFIGS, ChipConfig

from .uart import UartChip, divisor

__all__ = ["Board", "BOARDS", "BoardTop", "ecp5_pll_params"]


@dataclass(frozen=True)
class Board:
    """A board target of ``make bitstream``.

    Attributes
    ----------
    name : str
    platform : str
        ``module:Class`` of the amaranth-boards platform.
    family : {"ecp5", "ice40"}
    osc_hz : int
        The board oscillator.
    clk_hz : int
        The chip clock (a PLL makes it when it differs from ``osc_hz``; ECP5 only), Hz: the
        timing constraint nextpnr places and routes for, so a bitstream that meets it runs.
    baud : int
        UART line rate.
    config : ChipConfig
        The chip configuration built for the board (``docs/fpga.md`` says why).
    resources : dict of str to int
        Device totals: ``LUT4``, ``FF``, ``DSP``, ``BRAM`` (and ``SPRAM`` on the UP5K).
    context : int or None
        The longest context (positions) for which ``config`` holds stories260K resident
        (``chipotle generate --backend uart --context N``); None if the model does not fit.
    nextpnr_opts : str
        nextpnr options ``make bitstream`` passes for this board (``chipotle.sim.bitstream``;
        an option given again in ``--nextpnr-opts`` replaces the board's).
    goal_hz : int or None
        The clock the design aims at, Hz, when it is above ``clk_hz`` (the ECP5's 50 MHz of
        issue 6): the report says whether the routed Fmax reaches it, beside the clock.
    """

    name: str
    platform: str
    family: str
    osc_hz: int
    clk_hz: int
    baud: int
    config: ChipConfig
    resources: dict
    context: int | None = None
    nextpnr_opts: str = ""
    goal_hz: int | None = None

    def clock_plan(self) -> dict[str, int] | None:
        """Check that the board makes `clk_hz` and return the PLL's dividers.

        Returns
        -------
        dict or None
            `ecp5_pll_params` for the clock, or None when it is the oscillator's (no PLL).

        Raises
        ------
        ValueError
            If the board cannot make the clock: no PLL divider set gives it exactly, the
            family has no PLL in this flow, or the UART cannot keep `baud` at it
            (`chipotle.hw.fpga.uart.divisor`).
        """
        pll = None
        if self.clk_hz != self.osc_hz:
            if self.family != "ecp5":
                raise ValueError(f"{self.name} has no PLL in this flow: its clock is the "
                                 f"oscillator's {self.osc_hz / 1e6:g} MHz")
            pll = ecp5_pll_params(self.osc_hz, self.clk_hz)
        divisor(self.clk_hz, self.baud)
        return pll

    def make_platform(self):
        """Return an instance of the board's amaranth-boards platform."""
        import importlib
        mod, cls = self.platform.split(":")
        return getattr(importlib.import_module(mod), cls)()


#: Boards of ``make bitstream BOARD=...`` (``docs/fpga.md`` gives the numbers).  The ULX3S builds
#: ``CONFIGS["ulx3s"]``, one tile of 384 KiB that holds stories260K resident at a context of up
#: to 204 positions (140 in sessions 11-15; before, two tiles of 176 KiB held 53 and filled 88 %
#: of the 85F's logic slots, where neither nextpnr router finished).  The iCEBreaker builds the
#: smallest chip the tile accepts (nothing useful fits the UP5K).  The ULX3S chip clock is
#: 28.125 MHz from the PLL (25 MHz x 9 / 8) since session 20, whose build routes at 31.3 MHz
#: against it (30.5 MHz at 25 MHz: docs/fpga.md "Session 20"); the 25 MHz oscillator's (no
#: PLL) in session 19, below its 26-28 MHz routed Fmax; 20 MHz from the PLL (25 MHz x 4 / 5)
#: in sessions 14-18, at 21.1-23.8 MHz routed; 15 MHz in sessions 11-13, when nothing routed:
#: so that the bitstream meets it.  The 50 MHz goal stays in the report (``goal_hz``).
#: nextpnr places it with the electrostatic placer and routes with router2 (session 14: the first
#: routed build of this chip; with HeAP's placement router2 stalled near 3,700 overused wires,
#: docs/fpga.md "Session 14").
BOARDS = {
    "ulx3s-85f": Board(
        "ulx3s-85f", "amaranth_boards.ulx3s:ULX3S_85F_Platform", "ecp5", 25_000_000,
        28_125_000, 1_000_000,
        CONFIGS["ulx3s"], {"LUT4": 83_640, "FF": 83_640, "DSP": 156, "BRAM": 208}, context=204,
        nextpnr_opts="--placer static --router router2", goal_hz=50_000_000),
    "icebreaker": Board(
        "icebreaker", "amaranth_boards.icebreaker:ICEBreakerPlatform", "ice40", 12_000_000,
        12_000_000, 1_000_000,
        ChipConfig(mesh_width=1, mesh_height=1, sram_bytes=16 * 1024, lanes=2, imem_words=256,
                   max_m=1, k_max=256, vec_slots=3),
        {"LUT4": 5_280, "FF": 5_280, "DSP": 8, "BRAM": 30, "SPRAM": 4}),
}


def ecp5_pll_params(f_in: int, f_out: int) -> dict[str, int]:
    """Return ``CLKI_DIV``, ``CLKFB_DIV``, ``CLKOP_DIV`` of an ``EHXPLLL`` making exactly
    ``f_out`` from ``f_in`` (feedback from CLKOP; VCO 400..800 MHz, nearest 600 MHz; the
    phase detector's input ``f_in / CLKI_DIV`` 3.125..400 MHz, the limits Project Trellis's
    ``ecppll`` uses).

    Raises
    ------
    ValueError
        If no divider set gives exactly ``f_out``.
    """
    for clki in range(1, 129):
        if not 3_125_000 * clki <= f_in <= 400_000_000 * clki:
            continue
        for fb in range(1, 81):
            if f_in * fb != f_out * clki:
                continue
            ops = [op for op in range(1, 129) if 400e6 <= f_out * op <= 800e6]
            if ops:     # the VCO nearest the middle of its range
                op = min(ops, key=lambda op: abs(f_out * op - 600e6))
                return {"CLKI_DIV": clki, "CLKFB_DIV": fb, "CLKOP_DIV": op}
    raise ValueError(f"an ECP5 PLL cannot make exactly {f_out} Hz from {f_in} Hz")


class BoardTop(Elaboratable):
    """`UartChip` on a board: oscillator (and PLL), reset, UART pins, LEDs.

    Parameters
    ----------
    board : Board
    config : ChipConfig, optional
        Overrides ``board.config``.
    tile_instances : bool
        True: the tiles are instances of ``chip.TILE_MODULE``, whose Verilog the build adds
        as a file (`chipotle.sim.bitstream`).
    """

    def __init__(self, board: Board, config: ChipConfig | None = None, *,
                 tile_instances: bool = True):
        self.board = board
        self.config = board.config if config is None else config
        self.tile_instances = tile_instances
        self._pll = board.clock_plan()      # refused here, before any elaboration

    def elaborate(self, platform):
        b = self.board
        m = Module()
        clk_io = platform.request(platform.default_clk, dir="-")
        m.submodules.clk_buf = clk_buf = io.Buffer("i", clk_io)
        m.domains.sync = cd_sync = ClockDomain()
        locked = Signal(init=1)
        p = self._pll
        if p is None:
            m.d.comb += cd_sync.clk.eq(clk_buf.i)
        else:       # an ECP5's (`Board.clock_plan`)
            clk = Signal()
            m.submodules.pll = Instance(
                "EHXPLLL",
                p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
                p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
                p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
                p_CLKI_DIV=p["CLKI_DIV"], p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=p["CLKOP_DIV"],
                p_CLKOP_CPHASE=p["CLKOP_DIV"] - 1, p_CLKOP_FPHASE=0, p_FEEDBK_PATH="CLKOP",
                p_CLKFB_DIV=p["CLKFB_DIV"],
                a_FREQUENCY_PIN_CLKI=f"{b.osc_hz / 1e6:g}",
                a_FREQUENCY_PIN_CLKOP=f"{b.clk_hz / 1e6:g}",
                i_RST=0, i_STDBY=0, i_CLKI=clk_buf.i, o_CLKOP=clk, i_CLKFB=clk,
                i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
                i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=locked)
            m.d.comb += cd_sync.clk.eq(clk)
            # No constraint of our own on `clk`: nextpnr derives the PLL output's from the
            # oscillator's and the divisors ("Derived frequency constraint of 20.0 MHz for net
            # clk" in top.tim), and one given here named a net Yosys does not keep ("net
            # 'clk$12' does not exist in design, ignoring clock constraint", until session 15).
        # Power-on reset: held for 255 cycles after the PLL locks.
        m.domains.por = cd_por = ClockDomain(reset_less=True)
        m.d.comb += cd_por.clk.eq(cd_sync.clk)
        por = Signal(8)
        with m.If(~locked):
            m.d.por += por.eq(0)
        with m.Elif(por != 255):
            m.d.por += por.eq(por + 1)
        m.d.comb += cd_sync.rst.eq(por != 255)

        m.submodules.uart_chip = chip = UartChip(self.config, clk_hz=b.clk_hz, baud=b.baud,
                                                 tile_instances=self.tile_instances)
        uart = platform.request("uart", 0, dir="-")
        m.submodules.rx_buf = rx_buf = io.Buffer("i", uart.rx)
        m.submodules.tx_buf = tx_buf = io.Buffer("o", uart.tx)
        m.d.comb += [chip.rx.eq(rx_buf.i), tx_buf.o.eq(chip.tx)]
        n_leds = 8 if b.family == "ecp5" else 2
        for i in range(n_leds):
            led = platform.request("led", i, dir="-")
            m.submodules[f"led_buf_{i}"] = buf = io.Buffer("o", led)
            m.d.comb += buf.o.eq(chip.leds[i])
        return m
