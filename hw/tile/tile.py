"""The compute tile: SRAM, matrix unit with write-back, vector unit, KV store, controller,
network interface.

``docs/tile.md`` has the block diagram, the issue policy and the timing.

Members
-------
TileCore
    Everything but the network interface, with the network interface's side exposed (the
    device under test of the single-tile ISA benches).
Tile
    `TileCore` + :class:`~chipotle.hw.tile.netif.NetworkInterface`: the tile with its NoC
    local port.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped
from amaranth.utils import exact_log2

from ..stream_util import SkidBuffer
from .controller import N_PERF, Controller, PerfIndex, Status
from .datapath import TileConfig, mux_matrix_commands
from .kvstore import KvParams, KvStore
from .matrix import MatrixUnit, MatrixWriteback
from .netif import ImemWrite, NetCommand, NetCompletion, NetifConfig, NetworkInterface, WaitRequest
from .sram import Sram, SramArbiter, SramSignature, check_latency, connect_narrow
from .vector import VectorUnit

__all__ = ["TileCore", "Tile", "tile_controller"]


def tile_controller(c: TileConfig) -> Controller:
    """The controller of a tile of configuration `c` (``TileCore``'s; also what
    ``python -m chipotle.sim.synth controller`` synthesises)."""
    return Controller(sram_bytes=c.sram_bytes, word_bytes=c.word_bytes, max_m=c.max_m,
                      k_max=c.k_max, imem_words=c.imem_words, n_counters=c.n_counters,
                      loop_depth=c.loop_depth, overlap=c.overlap,
                      sram_latency=c.sram_latency)


class TileCore(wiring.Component):
    """SRAM, matrix unit, matrix write-back, vector unit, KV store and controller of one tile.

    The SRAM's read port belongs to the matrix unit; its read/write port is shared
    round-robin (:class:`SramArbiter`) by ``sram`` (the network interface), the controller,
    the matrix write-back stage, the vector unit (:class:`VectorUnit`, ``lanes`` wide;
    it needs ``word_bytes >= 8``; it reads ``n_banks`` consecutive words per cycle, the
    SRAM's wide read, which the one-word initiators share as word 0) and the KV store
    (:class:`KvStore`, always present, K rows with a header word: the ISA's records;
    ``KVAPP`` and ``KVQK`` drive it; its ``STREAM_K`` commands reach the matrix unit through
    `mux_matrix_commands`).  ``soft_reset`` resets the
    controller, the units and the performance counters (not the SRAM, the instruction
    memory nor the KV layout, which is an input).

    Parameters
    ----------
    config : TileConfig
        ``config.kv`` is not used: the KV layout is the ``kv_layout`` input (the host's
        registers), so one elaboration serves any placement.

    Members
    -------
    sram : ``In(SramSignature(word_bytes=W, latency=sram_latency))``
        The network interface's SRAM port (host and arriving writes, SEND reads).
    i_imem : ``In(stream.Signature(ImemWrite))``
        Instruction-memory writes.
    i_start : ``In(stream.Signature(16))``
        Start the controller at a PC.
    soft_reset : ``In(1)``
        Reset the controller, the units and the performance counters.
    status : ``Out(Status)``
        The controller's status word.
    perf : ``Out(32).array(N_PERF)``
        Performance counters, indexed by :class:`PerfIndex`.
    o_net : ``Out(stream.Signature(NetCommand))``
        ``SEND`` / ``DONE`` commands.
    i_net_done : ``In(stream.Signature(NetCompletion))``
        Their completions.
    o_wait : ``Out(stream.Signature(WaitRequest))``
        ``WAIT`` requests.
    kv_layout : ``In(KvParams)``
        The KV layout (the network interface's KV registers).
    kv_capacity : ``Out(16)``
        The KV store's capacity in positions (0 when the layout is empty or does not fit).
    """

    def __init__(self, config=None):
        config = TileConfig(kv=None) if config is None else config
        self._config = config
        super().__init__({
            "sram": In(SramSignature(word_bytes=config.word_bytes,
                                     latency=config.sram_latency)),
            "i_imem": In(stream.Signature(ImemWrite)),
            "i_start": In(stream.Signature(16)),
            "soft_reset": In(1),
            "status": Out(Status),
            "perf": Out(32).array(N_PERF),
            "o_net": Out(stream.Signature(NetCommand)),
            "i_net_done": In(stream.Signature(NetCompletion)),
            "o_wait": Out(stream.Signature(WaitRequest)),
            "kv_layout": In(KvParams),
            "kv_capacity": Out(16),
        })

    @property
    def config(self):
        """The elaboration parameters."""
        return self._config

    def elaborate(self, platform):
        m = Module()
        c = self._config
        W = c.word_bytes
        rst = self.soft_reset
        # The vector unit reads n_banks consecutive words per cycle (the SRAM's wide read);
        # the other initiators read one word (word 0 of the same rdata)
        L = c.sram_latency
        m.submodules.sram = sram = Sram(size_bytes=c.sram_bytes, word_bytes=W,
                                        n_banks=c.n_banks, read_words=c.n_banks, rw_latency=L)
        m.submodules.arbiter = arb = SramArbiter(5, word_bytes=W, read_words=c.n_banks,
                                                 latency=L)
        mx = MatrixUnit(word_bytes=W, max_m=c.max_m, k_max=c.k_max, input_stage=L > 1)
        wb = MatrixWriteback(word_bytes=W, max_m=c.max_m, sram_latency=L)
        ctrl = tile_controller(c)
        vec = VectorUnit(lanes=c.lanes, word_bytes=W, sram_bytes=c.sram_bytes,
                         read_words=c.n_banks, slots=c.vec_slots, sram_latency=L)
        m.submodules.vector = ResetInserter(rst)(vec)
        m.submodules.matrix = ResetInserter(rst)(mx)
        m.submodules.writeback = ResetInserter(rst)(wb)
        m.submodules.controller = ResetInserter(rst)(ctrl)
        kv = KvStore(word_bytes=W, sram_depth=c.sram_words, k_header=True, sram_latency=L)
        m.submodules.kvstore = ResetInserter(rst)(kv)

        connect(m, mx.bus, sram.r)
        connect(m, arb.o, sram.rw)
        connect_narrow(m, flipped(self.sram), arb.i[0])
        connect_narrow(m, ctrl.bus, arb.i[1])
        connect_narrow(m, wb.bus, arb.i[2])
        connect(m, ctrl.o_mjob, wb.i_job)
        connect(m, mx.o, wb.i_res)
        connect(m, flipped(self.i_imem), ctrl.i_imem)
        connect(m, flipped(self.i_start), ctrl.i_start)
        connect(m, ctrl.o_net, flipped(self.o_net))
        connect(m, flipped(self.i_net_done), ctrl.i_net_done)
        connect(m, ctrl.o_wait, flipped(self.o_wait))
        m.d.comb += [
            ctrl.mjob_busy.eq(wb.busy),
            ctrl.mjob_error.eq(wb.error),
            self.status.eq(ctrl.status),
        ]

        connect(m, ctrl.o_vec, vec.i_cmd)
        connect(m, vec.o_done, ctrl.i_vec_done)
        check_latency(vec.bus, arb.i[3])
        connect(m, vec.bus, arb.i[3])
        vec_busy = vec.busy

        # KV store: APPEND (KVAPP) and STREAM_K (KVQK) from the controller; STREAM_K's
        # matrix command reaches the matrix unit through the command mux, the controller
        # sends the write-back job with the K records' header address.
        connect_narrow(m, kv.bus, arb.i[4])
        connect(m, ctrl.o_kv, kv.i_cmd)
        mux_matrix_commands(m, kv.o_mcmd, ctrl.o_mcmd, mx.i_cmd)
        m.d.comb += [
            ctrl.kv_head_size.eq(self.kv_layout.head_size),
            ctrl.kv_stream.eq(kv.o_mcmd.valid),
            ctrl.kv_k_hdr.eq(kv.k_hdr),
            ctrl.kv_map_lo.eq(self.kv_layout.base),
            ctrl.kv_map_hi.eq(kv.map_end),
            kv.layout.eq(self.kv_layout),
            self.kv_capacity.eq(kv.capacity),
            ctrl.kv_busy.eq(kv.busy),
            ctrl.kv_running.eq(kv.running),
            ctrl.kv_error.eq(kv.error),
            ctrl.kv_error_code.eq(kv.error_code),
            ctrl.kv_k_words.eq(kv.k_row_words),
            ctrl.kv_v_words.eq(kv.v_row_words),
        ]

        # ---- performance counters ---------------------------------------------------------
        perf = [Signal(32, name=f"perf_{k.name.lower()}") for k in PerfIndex]
        running = ctrl.status.state.as_value().matches(1, 2)   # RUNNING, WAITING
        rw_read = arb.o.en & arb.o.ready & ~arb.o.we
        rw_write = arb.o.en & arb.o.ready & arb.o.we
        # words of the shared port's granted read: the vector unit's wide read takes
        # `bus_words` (1 .. n_banks) words of its rdata, every other initiator one
        vec_read = vec.bus.en & vec.bus.ready & ~vec.bus.we
        rw_words = Mux(vec_read, vec.bus_words, rw_read)
        written = sum(Mux(rw_write, arb.o.wmask[b], 0) for b in range(W))
        tile_stall = Cat(*(i.en & ~i.ready for i in (ctrl.bus, wb.bus, vec.bus, kv.bus))).any()
        inc = {
            PerfIndex.CYCLES: running,
            PerfIndex.INSTRUCTIONS: ctrl.retired,
            PerfIndex.MAC_CYCLES: mx.mac,
            PerfIndex.VECTOR_BUSY: vec_busy,
            PerfIndex.WAIT_STALLS: ctrl.stall_wait,
            PerfIndex.NET_STALLS: ctrl.stall_net,
            PerfIndex.SRAM_STALLS: tile_stall,
            PerfIndex.BYTES_READ: (mx.bus.en + rw_words) << exact_log2(W),
            PerfIndex.BYTES_WRITTEN: written,
            PerfIndex.MATRIX_CYCLES: ctrl.matrix_active,
            PerfIndex.KV_CYCLES: kv.busy,
        }
        # Each increment is registered before its adder (an FPGA timing cut: the retire,
        # the scoreboard's stall and the SRAM arbiter's grants feed one flip-flop each, not
        # a 32-bit adder's carry chain and its 32 flip-flops): a counter shows a cycle's
        # count one cycle later, which no read of a finished step can see.
        for k in PerfIndex:
            inc_q = Signal(len(Value.cast(inc[k])), name=f"perf_{k.name.lower()}_inc")
            m.d.sync += inc_q.eq(Mux(rst, 0, inc[k]))
            with m.If(rst):
                m.d.sync += perf[k].eq(0)
            with m.Else():
                m.d.sync += perf[k].eq(perf[k] + inc_q)
            m.d.comb += self.perf[k].eq(perf[k])
        return m



def netif_config(config, *, x=None, y=None) -> NetifConfig:
    """Return the `NetifConfig` of a tile of `config` (a `TileConfig`) at ``(x, y)`` (both
    None: from its ports), as `Tile` builds it.

    Raises
    ------
    ValueError
        As `NetifConfig` and the `NocConfig` of `config` (a multicast packet longer than a
        router FIFO, an instruction memory or counter set beyond the register map).
    """
    return NetifConfig(
        x=x, y=y, width=config.mesh_width, height=config.mesh_height, noc=config.noc,
        sram_bytes=config.sram_bytes, imem_words=config.imem_words,
        n_counters=config.n_counters, n_perf=N_PERF, sram_latency=config.sram_latency,
        fetch_depth=max(4, config.sram_latency + 2))

class Tile(wiring.Component):
    """One compute tile with its network interface (see ``docs/tile.md``).

    Parameters
    ----------
    config : TileConfig
        The tile's parameters (the mesh size is ``config.mesh_width`` x ``mesh_height``).
    x, y : int or None
        Position of this tile in the mesh; both None: from the ports ``i_x`` / ``i_y`` (8 bits
        each), which makes every tile of a mesh the same module.

    Members
    -------
    i_noc : ``In(stream.Signature(config.noc.flit_layout))``
        Flits delivered to the tile (the mesh's local output of this tile).
    o_noc : ``Out(stream.Signature(config.noc.flit_layout))``
        Flits injected by the tile.
    i_noc_errors : ``In(config.noc.error_width)``
        The mesh's dropped-packet counter (host-readable through this tile).
    status : ``Out(Status)``
        The controller's status word (also host-readable as a register).
    errors : ``Out(8)``
        The network interface's sticky error flags.
    """

    def __init__(self, config=None, *, x=0, y=0):
        config = TileConfig(kv=None) if config is None else config
        self._config = config
        self._netif_config = netif_config(config, x=x, y=y)
        flit = stream.Signature(config.noc.flit_layout)
        super().__init__({
            "i_noc": In(flit),
            "o_noc": Out(flit),
            "i_noc_errors": In(config.noc.error_width),
            "status": Out(Status),
            "errors": Out(8),
            **({} if x is not None else {"i_x": In(8), "i_y": In(8)}),
        })

    @property
    def config(self):
        """The elaboration parameters."""
        return self._config

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = TileCore(self._config)
        m.submodules.netif = ni = NetworkInterface(self._netif_config)
        # Registered NoC boundary: a skid buffer each way, so no path from the router's
        # outputs (flit valid/payload, local-port ready) reaches the network interface, the
        # SRAM arbiter or the units combinationally (FPGA timing; Verilator evaluates the
        # hierarchical tile only on its clock).  Full throughput, 1 cycle of latency each way.
        flit = self._config.noc.flit_layout
        m.submodules.rx_skid = rx = SkidBuffer(flit)
        m.submodules.tx_skid = tx = SkidBuffer(flit)
        connect(m, flipped(self.i_noc), rx.i)
        connect(m, rx.o, ni.i_noc)
        connect(m, ni.o_noc, tx.i)
        connect(m, tx.o, flipped(self.o_noc))
        connect(m, ni.sram, core.sram)
        connect(m, ni.o_imem, core.i_imem)
        connect(m, ni.o_start, core.i_start)
        connect(m, core.o_net, ni.i_cmd)
        connect(m, ni.o_cmd_done, core.i_net_done)
        connect(m, core.o_wait, ni.i_wait)
        m.d.comb += [core.kv_layout.eq(ni.kv_layout), ni.i_kv_capacity.eq(core.kv_capacity)]
        m.d.comb += [
            core.soft_reset.eq(ni.o_reset),
            ni.i_status.eq(core.status),
            ni.i_noc_errors.eq(self.i_noc_errors),
            self.status.eq(core.status),
            self.errors.eq(ni.errors),
        ]
        if self._netif_config.x is None:
            m.d.comb += [ni.i_x.eq(self.i_x), ni.i_y.eq(self.i_y)]
        for k in range(N_PERF):
            m.d.comb += ni.i_perf[k].eq(core.perf[k])
        return m
