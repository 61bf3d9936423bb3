"""A UART host link: 8N1 receiver and transmitter, the flit framing, and `UartChip`.

The framing (``docs/fpga.md``, ``chipotle.driver.uart``): a flit of ``F`` bits is
``ceil(F / 7)`` bytes of 7 flit bits each, least significant first; bit 7 is 1 on the first
byte of a flit and 0 on the others.  A sync byte always starts a new flit, so a lost byte
costs at most one flit.

Members
-------
UartRx, UartTx
    8N1 serial receiver and transmitter (clock and baud as parameters).
FlitDeframer, FlitFramer
    Bytes to flits and flits to bytes.
UartBridge
    RX pin -> flit stream, flit stream -> TX pin.
UartChip
    `UartBridge` + ``chipotle.hw.chip.Chip``: the FPGA's design without the board.
uart_chip_verilog
    `UartChip`'s Verilog with the tile generated once (as ``chip.chip_verilog``).
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from chipotle.config import ChipConfig

__all__ = ["UartRx", "UartTx", "FlitDeframer", "FlitFramer", "UartBridge", "UartChip",
           "uart_chip_verilog", "divisor"]


def divisor(clk_hz: int, baud: int) -> int:
    """Return clock cycles per bit, ``round(clk_hz / baud)``.

    Raises
    ------
    ValueError
        If it is below 4 (the receiver samples mid-bit) or the rounding error exceeds 2 %
        (8N1 tolerates about 4 % between both ends).
    """
    if clk_hz <= 0 or baud <= 0:
        raise ValueError(f"clock and baud must be positive, not {clk_hz}, {baud}")
    d = round(clk_hz / baud)
    if d < 4:
        raise ValueError(f"{clk_hz} Hz / {baud} baud is {clk_hz / baud:.2f} cycles per bit; "
                         "the UART needs at least 4")
    if abs(clk_hz / d - baud) > 0.02 * baud:
        raise ValueError(f"{clk_hz} Hz cannot make {baud} baud within 2 % (divisor {d} gives "
                         f"{clk_hz / d:.0f})")
    return d


class UartRx(wiring.Component):
    """8N1 receiver: start bit, 8 data bits LSB first, stop bit; idle high.

    Each bit is sampled once in its middle (``divisor // 2`` cycles after the start bit's
    falling edge, then every ``divisor`` cycles), behind a two-flop synchroniser.  A byte
    whose stop bit is low is dropped (``framing_errors``).

    Parameters
    ----------
    clk_hz, baud : int
        See `divisor`.

    Members
    -------
    rx : ``In(1)``
        The serial input pin.
    o : ``Out(stream.Signature(8, always_ready=True))``
        One transfer per received byte (no back-pressure: the next byte does not wait).
    framing_errors : ``Out(8)``
        Bytes dropped for a low stop bit (wraps).
    """

    def __init__(self, clk_hz: int, baud: int):
        self.divisor = divisor(clk_hz, baud)
        super().__init__({"rx": In(1, init=1), "o": Out(stream.Signature(8, always_ready=True)),
                          "framing_errors": Out(8)})

    def elaborate(self, platform):
        m = Module()
        d = self.divisor
        sync = Signal(2, init=0b11)
        m.d.sync += sync.eq(Cat(self.rx, sync[0]))
        rx = sync[1]
        count = Signal(range(d))
        bit = Signal(range(8))
        shift = Signal(8)
        m.d.comb += self.o.payload.eq(shift)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~rx):
                    m.d.sync += count.eq(d // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                m.d.sync += count.eq(count - 1)
                with m.If(count == 0):
                    m.d.sync += [count.eq(d - 1), bit.eq(0)]
                    with m.If(rx):           # a glitch, not a start bit
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "DATA"
            with m.State("DATA"):
                m.d.sync += count.eq(count - 1)
                with m.If(count == 0):
                    m.d.sync += [count.eq(d - 1), shift.eq(Cat(shift[1:], rx)), bit.eq(bit + 1)]
                    with m.If(bit == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                m.d.sync += count.eq(count - 1)
                with m.If(count == 0):
                    with m.If(rx):
                        m.d.comb += self.o.valid.eq(1)
                    with m.Else():
                        m.d.sync += self.framing_errors.eq(self.framing_errors + 1)
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """8N1 transmitter.

    Parameters
    ----------
    clk_hz, baud : int
        See `divisor`.

    Members
    -------
    i : ``In(stream.Signature(8))``
        Bytes to send; one is taken whenever the line is idle.
    tx : ``Out(1)``
        The serial output pin (idle high).
    """

    def __init__(self, clk_hz: int, baud: int):
        self.divisor = divisor(clk_hz, baud)
        super().__init__({"i": In(stream.Signature(8)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        d = self.divisor
        shift = Signal(10, init=0x3FF)     # stop, data[7:0], start; sent LSB first
        bits = Signal(range(11))           # bits left to send
        count = Signal(range(d))
        m.d.comb += [self.tx.eq(shift[0]), self.i.ready.eq(bits == 0)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [shift.eq(Cat(C(0, 1), self.i.payload, C(1, 1))), bits.eq(10),
                         count.eq(d - 1)]
        with m.Elif(bits != 0):
            m.d.sync += count.eq(count - 1)
            with m.If(count == 0):
                m.d.sync += [count.eq(d - 1), bits.eq(bits - 1),
                             shift.eq(Cat(shift[1:], C(1, 1)))]
        return m


class FlitDeframer(wiring.Component):
    """Line bytes to flits (``ceil(width / 7)`` bytes per flit; a byte with bit 7 set starts
    a flit).

    Parameters
    ----------
    width : int
        Flit width, bits.

    Members
    -------
    i : ``In(stream.Signature(8, always_ready=True))``
    o : ``Out(stream.Signature(width, always_ready=True))``
        One transfer per complete flit.
    """

    def __init__(self, width: int):
        self.width = width
        self.n = -(-width // 7)
        super().__init__({"i": In(stream.Signature(8, always_ready=True)),
                          "o": Out(stream.Signature(width, always_ready=True))})

    def elaborate(self, platform):
        m = Module()
        n = self.n
        acc = Signal(7 * n)
        count = Signal(range(n + 1))       # bytes of the current flit; 0: waiting for sync
        m.d.comb += self.o.payload.eq(acc[:self.width])
        with m.If(self.o.valid):
            m.d.sync += count.eq(0)
        with m.If(self.i.valid):
            m.d.sync += acc.eq(Cat(acc[7:], self.i.payload[:7]))
            with m.If(self.i.payload[7]):
                m.d.sync += count.eq(1)
            with m.Elif(count != 0):
                m.d.sync += count.eq(count + 1)
        # The flit is complete one cycle after its n-th byte (bytes are >= 40 cycles apart).
        m.d.comb += self.o.valid.eq(count == n)
        return m


class FlitFramer(wiring.Component):
    """Flits to line bytes (the inverse of `FlitDeframer`).

    Members
    -------
    i : ``In(stream.Signature(width))``
    o : ``Out(stream.Signature(8))``
    """

    def __init__(self, width: int):
        self.width = width
        self.n = -(-width // 7)
        super().__init__({"i": In(stream.Signature(width)), "o": Out(stream.Signature(8))})

    def elaborate(self, platform):
        m = Module()
        n = self.n
        shift = Signal(7 * n)
        left = Signal(range(n + 1))
        m.d.comb += [self.i.ready.eq(left == 0), self.o.valid.eq(left != 0),
                     self.o.payload.eq(Cat(shift[:7], left == n))]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [shift.eq(self.i.payload), left.eq(n)]
        with m.Elif(self.o.valid & self.o.ready):
            m.d.sync += [shift.eq(shift[7:]), left.eq(left - 1)]
        return m


class UartBridge(wiring.Component):
    """Serial pins <-> flit streams, with the framing of `FlitDeframer` / `FlitFramer`.

    Parameters
    ----------
    width : int
        Flit width, bits.
    clk_hz, baud : int
        See `divisor`.
    fifo_depth : int
        Flits buffered each way (default 8).

    Members
    -------
    rx : ``In(1)``, tx : ``Out(1)``
        The pins.
    o_flit : ``Out(stream.Signature(width))``
        Flits from the host.
    i_flit : ``In(stream.Signature(width))``
        Flits to the host.
    overflows : ``Out(8)``
        Flits from the host dropped because ``o_flit`` held the FIFO full (wraps).
    framing_errors : ``Out(8)``
        `UartRx`'s count.
    """

    def __init__(self, width: int, clk_hz: int, baud: int, fifo_depth: int = 8):
        self.width, self.clk_hz, self.baud, self.fifo_depth = width, clk_hz, baud, fifo_depth
        divisor(clk_hz, baud)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1),
                          "o_flit": Out(stream.Signature(width)),
                          "i_flit": In(stream.Signature(width)),
                          "overflows": Out(8), "framing_errors": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.rx = rx = UartRx(self.clk_hz, self.baud)
        m.submodules.tx = tx = UartTx(self.clk_hz, self.baud)
        m.submodules.deframer = deframer = FlitDeframer(self.width)
        m.submodules.framer = framer = FlitFramer(self.width)
        m.submodules.in_fifo = in_fifo = fifo.SyncFIFOBuffered(width=self.width,
                                                               depth=self.fifo_depth)
        m.submodules.out_fifo = out_fifo = fifo.SyncFIFOBuffered(width=self.width,
                                                                 depth=self.fifo_depth)
        m.d.comb += [rx.rx.eq(self.rx), self.tx.eq(tx.tx),
                     self.framing_errors.eq(rx.framing_errors)]
        connect(m, rx.o, deframer.i)
        m.d.comb += [in_fifo.w_data.eq(deframer.o.payload),
                     in_fifo.w_en.eq(deframer.o.valid)]
        with m.If(deframer.o.valid & ~in_fifo.w_rdy):
            m.d.sync += self.overflows.eq(self.overflows + 1)
        m.d.comb += [self.o_flit.payload.eq(in_fifo.r_data), self.o_flit.valid.eq(in_fifo.r_rdy),
                     in_fifo.r_en.eq(self.o_flit.ready),
                     out_fifo.w_data.eq(self.i_flit.payload), out_fifo.w_en.eq(self.i_flit.valid),
                     self.i_flit.ready.eq(out_fifo.w_rdy),
                     framer.i.payload.eq(out_fifo.r_data), framer.i.valid.eq(out_fifo.r_rdy),
                     out_fifo.r_en.eq(framer.i.ready)]
        connect(m, framer.o, tx.i)
        return m


class UartChip(wiring.Component):
    """The FPGA design without its board: `UartBridge` on the host link of a ``Chip``.

    Parameters
    ----------
    config : ChipConfig, optional
        Default ``ChipConfig()``.
    clk_hz, baud : int
        The clock of the ``sync`` domain and the line rate (see `divisor`).
    tile_instances : bool
        As ``Chip``'s (True: the tiles are instances of ``chip.TILE_MODULE``, see
        `uart_chip_verilog`).
    tile_reset_register : bool
        As ``Chip``'s (needs `tile_instances`; what `uart_chip_verilog` builds, the tiles'
        reset registered as in ``chip.chip_verilog``).

    Members
    -------
    rx : ``In(1)``, tx : ``Out(1)``
        UART pins (host to chip, chip to host).
    leds : ``Out(8)``
        Bit 0: some tile in the ERROR state; bit 1: some tile running or waiting; bit 2:
        every tile halted; bit 3: a flit from the host was dropped since reset; bits 4-7:
        the low bits of the count of flits received (activity).
    """

    def __init__(self, config: ChipConfig | None = None, *, clk_hz: int, baud: int,
                 tile_instances: bool = False, tile_reset_register: bool = False):
        self.config = ChipConfig() if config is None else config
        self.clk_hz, self.baud, self.tile_instances = clk_hz, baud, tile_instances
        self.tile_reset_register = tile_reset_register
        divisor(clk_hz, baud)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "leds": Out(8)})

    def elaborate(self, platform):
        from chipotle.hw.chip import Chip
        from chipotle.hw.tile.controller import ControllerState

        m = Module()
        m.submodules.chip = chip = Chip(self.config, tile_instances=self.tile_instances,
                                     tile_reset_register=self.tile_reset_register)
        width = self.config.noc.flit_width
        m.submodules.bridge = bridge = UartBridge(width, self.clk_hz, self.baud)
        m.d.comb += [bridge.rx.eq(self.rx), self.tx.eq(bridge.tx)]
        m.d.comb += [chip.i_host.payload.eq(bridge.o_flit.payload),
                     chip.i_host.valid.eq(bridge.o_flit.valid),
                     bridge.o_flit.ready.eq(chip.i_host.ready),
                     bridge.i_flit.payload.eq(chip.o_host.payload),
                     bridge.i_flit.valid.eq(chip.o_host.valid),
                     chip.o_host.ready.eq(bridge.i_flit.ready)]
        states = [s.state for s in chip.status]
        rx_count = Signal(4)
        m.d.comb += [
            self.leds[0].eq(Cat(*(s == ControllerState.ERROR for s in states)).any()),
            self.leds[1].eq(Cat(*((s == ControllerState.RUNNING) | (s == ControllerState.WAITING)
                                  for s in states)).any()),
            self.leds[2].eq(Cat(*(s == ControllerState.HALTED for s in states)).all()),
            self.leds[3].eq(bridge.overflows != 0),
            self.leds[4:].eq(rx_count),
        ]
        with m.If(bridge.o_flit.valid & bridge.o_flit.ready):
            m.d.sync += rx_count.eq(rx_count + 1)
        return m


def uart_chip_verilog(config: ChipConfig | None = None, *, clk_hz: int, baud: int,
                      name: str = "uart_chip") -> str:
    """Return the Verilog of ``UartChip`` with the tile generated once (``chip.TILE_MODULE``
    instantiated per position) as ``chipotle.hw.chip.chip_verilog`` generates it: with its
    inputs registered and Verilator's ``hier_block`` metacomment, so that a ports-only
    Verilator build (``run_cocotb(public=False)``) compiles the tile once and shares it.

    Ports of module ``name``: ``clk``, ``rst``, ``rx``, ``tx``, ``leds``.
    """
    from amaranth.back import verilog

    from chipotle.hw.chip import TILE_MODULE, _register_tile_inputs
    from chipotle.hw.tile.tile import Tile

    config = ChipConfig() if config is None else config
    tile = verilog.convert(Tile(config.tile_config(), x=None, y=None), name=TILE_MODULE,
                           emit_src=False)
    top = verilog.convert(UartChip(config, clk_hz=clk_hz, baud=baud, tile_instances=True,
                                   tile_reset_register=True), name=name, emit_src=False)
    return _register_tile_inputs(tile) + "\n" + top
