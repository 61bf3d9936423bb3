"""The tile datapath so far: SRAM, matrix unit and KV store wired together.

This is what the tile controller and network interface will drive (issue 4): a host-side
SRAM port, a matrix command stream, a KV command stream and the result stream.  Until they
exist it is also the device under test of the cocotb benches.

Members
-------
TileConfig
    Elaboration parameters of the datapath.
TileDatapath
    The component.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from dataclasses import dataclass, field

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from .kvstore import KvCommand, KvError, KvLayout, KvParams, KvStore
from .matrix import MatrixCommand, MatrixError, MatrixUnit, matrix_result_layout
from .sram import Sram, SramArbiter, SramSignature

__all__ = ["TileConfig", "TileDatapath", "mux_matrix_commands"]


def mux_matrix_commands(m, kv, other, sink):
    """Add to `m` the matrix unit's command mux: `kv` (the KV store's ``STREAM_K`` commands)
    first, else `other`; once a command is offered the choice holds until `sink` takes it (a
    stream's payload must not change while valid).

    Parameters
    ----------
    m : Module
    kv, other : stream interfaces of ``stream.Signature(MatrixCommand)``
        The sources, as seen from their producers (``Out`` members, or ``flipped`` inputs).
    sink : stream interface
        The matrix unit's ``i_cmd``.
    """
    held = Signal()
    held_kv = Signal()
    pick_kv = Signal()
    m.d.comb += pick_kv.eq(Mux(held, held_kv, kv.valid))
    with m.If(sink.valid & ~sink.ready):
        m.d.sync += [held.eq(1), held_kv.eq(pick_kv)]
    with m.Else():
        m.d.sync += held.eq(0)
    with m.If(pick_kv):
        m.d.comb += [sink.payload.eq(kv.payload), sink.valid.eq(1),
                     kv.ready.eq(sink.ready)]
    with m.Else():
        m.d.comb += [sink.payload.eq(other.payload), sink.valid.eq(other.valid),
                     other.ready.eq(sink.ready)]


@dataclass(frozen=True)
class TileConfig:
    """Elaboration parameters of the tile datapath.

    Attributes
    ----------
    sram_bytes : int
        SRAM capacity (default 32 KiB).
    word_bytes : int
        W, bytes per SRAM word (default 8).
    n_banks : int
        SRAM banks (default 2).
    max_m : int
        M, activation rows of the matrix unit (default 4).
    k_max : int
        Largest K of the matrix unit (default 512).
    kv : KvLayout or None
        The KV store's address map (its ``word_bytes`` must equal ``word_bytes``).
    imem_words : int
        Instruction memory of the controller, in instructions (default 1024).
    n_counters : int
        Counters (semaphores) of the network interface (default 16).
    loop_depth : int
        Hardware loop stack of the controller (default 4).
    lanes : int
        V, vector-unit lanes (default 8).
    vec_slots : int
        The vector unit's result slots (``VectorUnit(slots=)``, default
        ``chipotle.hw.tile.vector.RESULT_SLOTS`` = 3; ``ChipConfig`` gives 4).
    mesh_width, mesh_height : int
        Size of the mesh the tile sits in (SEND rectangles are checked against it).
    noc_fifo_depth, noc_length_width, mcast_max_flits : int
        NoC parameters (``chipotle.hw.noc.NocConfig``); the flit payload is one SRAM word.
    overlap : bool
        The controller's issue policy (default True: a matrix instruction runs in the
        background under independent instructions; False: every unit instruction finishes
        before the next issues; ``docs/tile.md`` "Issue policy").
    sram_latency : int
        L, cycles from a granted read on the SRAM's read/write port to its data (default 1;
        2 registers the request before the block RAMs, 3 also their read data:
        `chipotle.hw.tile.sram.SramSignature`); every initiator of the port takes it.

    The ISA-level view of the same parameters is `isa_config` (``chipotle.isa.IsaConfig``),
    so that the ISA simulator, the compiler and the testbenches see the configuration the
    gateware was elaborated with.
    """

    sram_bytes: int = 32768
    word_bytes: int = 8
    n_banks: int = 2
    max_m: int = 4
    k_max: int = 512
    kv: KvLayout = field(default_factory=lambda: KvLayout(
        n_layers=1, n_kv_heads=2, head_size=8, max_pos=256, base=2048, k_header=True))
    imem_words: int = 1024
    n_counters: int = 16
    loop_depth: int = 4
    lanes: int = 8
    vec_slots: int = 3
    mesh_width: int = 1
    mesh_height: int = 1
    noc_fifo_depth: int = 16
    noc_length_width: int = 8
    mcast_max_flits: int = 8
    overlap: bool = True
    sram_latency: int = 1

    def __post_init__(self):
        if self.sram_latency not in (1, 2, 3):
            raise ValueError(f"sram_latency must be 1, 2 or 3 cycles, not "
                             f"{self.sram_latency!r}")
        if self.kv is None:
            return
        if self.kv.word_bytes != self.word_bytes:
            raise ValueError(f"kv.word_bytes must equal word_bytes ({self.word_bytes}), "
                             f"not {self.kv.word_bytes}")
        if self.kv.end > self.sram_words:
            raise ValueError(f"the KV store (words {self.kv.base}..{self.kv.end - 1}) must fit "
                             f"in the SRAM of {self.sram_words} words")

    @property
    def sram_words(self):
        """SRAM capacity in words."""
        return self.sram_bytes // self.word_bytes

    @property
    def noc(self):
        """The network parameters (``chipotle.hw.noc.NocConfig``, payload = one word)."""
        from ..noc.packet import NocConfig
        return NocConfig(payload_width=8 * self.word_bytes, fifo_depth=self.noc_fifo_depth,
                         length_width=self.noc_length_width,
                         mcast_max_flits=self.mcast_max_flits)

    def isa_config(self):
        """Return the ``chipotle.isa.IsaConfig`` of a tile with these parameters."""
        from chipotle.isa.core import CostModel, IsaConfig
        return IsaConfig(sram_bytes=self.sram_bytes, word_bytes=self.word_bytes,
                         max_m=self.max_m, lanes=self.lanes, k_max=self.k_max,
                         imem_words=self.imem_words, n_counters=self.n_counters,
                         loop_depth=self.loop_depth, mcast_max_flits=self.mcast_max_flits,
                         max_packet_flits=(1 << self.noc_length_width) - 1,
                         read_words=self.n_banks,
                         cost=CostModel(vec_slots=self.vec_slots,
                                        sram_latency=self.sram_latency),
                         overlap=self.overlap)


class TileDatapath(wiring.Component):
    """SRAM + matrix unit + KV store, with the SRAM's read/write port shared.

    The matrix unit owns the SRAM read port.  The read/write port is shared round-robin
    (:class:`SramArbiter`) between ``host`` and the KV store.  The matrix unit's commands
    come from ``i_mcmd`` or from the KV store (``STREAM_K``), through
    `mux_matrix_commands`.

    Parameters
    ----------
    config : TileConfig

    Members
    -------
    host : ``In(SramSignature(word_bytes=W, latency=sram_latency))``
        Read/write SRAM access for the host / network interface / testbench.
    i_mcmd : ``In(stream.Signature(MatrixCommand))``
        Matrix commands.
    i_kvcmd : ``In(stream.Signature(KvCommand))``
        KV store commands.
    o_res : ``Out(stream.Signature(matrix_result_layout(M)))``
        Matrix results.
    busy : ``Out(1)``
        The matrix unit or the KV store is working.
    mac : ``Out(1)``
        The matrix unit issues a weight word this cycle.
    mx_error : ``Out(1)``, mx_error_code : ``Out(MatrixError)``
        Matrix unit errors (sticky).
    kv_error : ``Out(1)``, kv_error_code : ``Out(KvError)``
        KV store errors (sticky).
    kv_capacity : ``Out(16)``
        Positions per (layer, KV head) of the KV store.
    """

    def __init__(self, config=None):
        config = TileConfig() if config is None else config
        self._config = config
        super().__init__({
            "host": In(SramSignature(word_bytes=config.word_bytes,
                                     latency=config.sram_latency)),
            "i_mcmd": In(stream.Signature(MatrixCommand)),
            "i_kvcmd": In(stream.Signature(KvCommand)),
            "o_res": Out(stream.Signature(matrix_result_layout(config.max_m))),
            "busy": Out(1),
            "mac": Out(1),
            "mx_error": Out(1),
            "mx_error_code": Out(MatrixError),
            "kv_error": Out(1),
            "kv_error_code": Out(KvError),
            "kv_capacity": Out(16),
        })

    @property
    def config(self):
        """The elaboration parameters."""
        return self._config

    def elaborate(self, platform):
        m = Module()
        c = self._config
        m.submodules.sram = sram = Sram(size_bytes=c.sram_bytes, word_bytes=c.word_bytes,
                                        n_banks=c.n_banks, rw_latency=c.sram_latency)
        m.submodules.arbiter = arb = SramArbiter(2, word_bytes=c.word_bytes,
                                                 latency=c.sram_latency)
        m.submodules.matrix = mx = MatrixUnit(word_bytes=c.word_bytes, max_m=c.max_m,
                                              k_max=c.k_max, input_stage=c.sram_latency > 1)
        m.submodules.kvstore = kv = KvStore(word_bytes=c.word_bytes, sram_depth=c.sram_words,
                                            k_header=c.kv.k_header,
                                            sram_latency=c.sram_latency)
        m.d.comb += kv.layout.eq(KvParams.from_layout(c.kv))

        connect(m, mx.bus, sram.r)
        connect(m, arb.o, sram.rw)
        connect(m, flipped(self.host), arb.i[0])
        connect(m, kv.bus, arb.i[1])
        connect(m, flipped(self.i_kvcmd), kv.i_cmd)
        connect(m, mx.o, flipped(self.o_res))

        mux_matrix_commands(m, kv.o_mcmd, flipped(self.i_mcmd), mx.i_cmd)

        m.d.comb += [
            self.busy.eq(mx.busy | kv.busy),
            self.mac.eq(mx.mac),
            self.mx_error.eq(mx.error),
            self.mx_error_code.eq(mx.error_code),
            self.kv_error.eq(kv.error),
            self.kv_error_code.eq(kv.error_code),
            self.kv_capacity.eq(kv.capacity),
        ]
        return m
