"""The tile controller: fetch, decode, check and sequence the tile ISA (``docs/isa.md``).

The controller runs one tile program from its instruction memory.  It decodes every word
with the one definition of the instruction format (``chipotle.isa.Instruction``), checks it
against the operand rules (``chipotle.isa.SPECS``: the legality logic is generated from
them; it and the opcode's class are computed when a word is written into the instruction
memory and stored beside it, `Predecode`, ``docs/tile.md`` "Pre-decode"), resolves operand
addresses (``r[reg] + off``), executes the control and scalar
instructions itself and dispatches the others: matrix instructions to the matrix unit and
its write-back stage, vector instructions and ``TABLE`` to the vector unit, ``KVAPP`` to the
KV store, ``KVQK`` to the KV store (``STREAM_K``) and the matrix write-back, ``SEND`` /
``DONE`` to the network interface, ``WAIT`` to the network interface's counters.

Issue policy (``docs/tile.md``, "Issue policy"), chosen by ``overlap``: **in order**. A
scalar or control instruction retires in one cycle, the next one is fetched in the same
cycle (the instruction memory read port is addressed with the next PC through the loop
stack, from registers only), so straight-line scalar code and loop ends cost one cycle per
instruction; a ``LOOP`` takes two (its count into the decode register, then state
``Loop``). The instructions checked against the scoreboard's SRAM ranges (vector,
``TABLE``, ``LD``, ``ST``, ``COPY``, ``KVAPP``) take one cycle more: Execute resolves their
operands into the decode register and state ``Issue`` checks, waits and dispatches from it
(an FPGA timing cut: no path from the instruction memory through the operand adders into
the range compares and the retire decision; ``docs/tile.md``, "Decode register"); with
``overlap`` a vector instruction dispatches from that compare registered (Issue-Go: a
cycle more when it waits for nothing, ``CostModel.issue_go``). With ``overlap=False`` an
instruction that uses a unit waits for that unit to finish before the next instruction
issues. With ``overlap=True`` the matrix unit (``KVQK`` included), the
vector unit (not ``TABLE``), the network interface (``SEND``) and the KV store (``KVAPP``,
once the store checked it: its errors are never deferred) each run one instruction in the
background: it retires once its unit took it, and a scoreboard entry per unit (its PC, its
SRAM byte ranges resolved at issue, busy and fault bits) makes a later instruction wait
only for its own unit (a) or on a RAW / WAR / WAW overlap with an in-flight instruction (b)
(``chipotle.isa.core.vector_footprint``, ``matrix_footprint``, ``send_footprint``,
``kvapp_footprint``, ``mem_footprint``, ``table_footprint``, ``hazard``; ``LD``, ``ST`` and
``COPY``, which the controller runs itself, wait on (b) only; ``TABLE``, run by the vector
unit in the foreground, waits for the vector entry and on (b); ``KVQK`` also for the KV
entry: it uses the store); ``SEND`` (release), ``WAIT``, ``DONE`` and ``HALT`` wait for
every entry (d); scalar and control instructions never wait. A background instruction's
error is kept in its entry and reported at the next instruction that waits for it, or at a
later error: the controller then drains every unit ("Drain") and stops with the first error
in program order and its PC. Besides that the controller stalls only on SRAM- port
arbitration (c: the ports are shared word by word, no issue stall), on a ``WAIT`` whose
counter is short (a ``WAIT`` retires at once and the next instruction holds until the
network interface grants the request it left in registers: ``docs/tile.md``, "Registered
WAIT"), and on the network interface taking a command.

Members
-------
ControllerState
    The controller's states as the host sees them (``Status.state``).
Status
    The 32-bit status word the host reads (``Reg.STATUS`` of the network interface).
PerfIndex
    Index of each performance counter in ``perf``.
Controller
    The component.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

import enum as py_enum

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from chipotle.isa.core import (
    C_BITS,
    SCALAR_OPS,
    SPECS,
    TABLE_ENTRIES,
    Dtype,
    ErrorCode,
    Instruction,
    Opcode,
    TableId,
)

from .kvstore import KvCommand, KvError, KvOp
from .matrix import MatrixCommand, MatrixJob, MatrixOp
from .netif import ImemWrite, NetCommand, NetCompletion, NetOp, WaitRequest
from .sram import SramSignature, wait_states
from .vector import VectorCommand, VectorDone

__all__ = ["ControllerState", "Status", "PerfIndex", "Controller", "N_PERF"]


class ControllerState(enum.Enum, shape=3):
    """What the controller is doing, as the host sees it.

    Members
    -------
    IDLE
        Never started since reset.
    RUNNING
        Executing (including stalls on units, SRAM and the network).
    WAITING
        Stalled on a ``WAIT`` whose counter is short.
    HALTED
        Executed ``HALT``; a host start resumes it at any PC.
    ERROR
        Stopped on an error (``Status.error``, at ``Status.pc``); only a reset clears it.
    """

    IDLE = 0
    RUNNING = 1
    WAITING = 2
    HALTED = 3
    ERROR = 4


class Status(data.Struct):
    """The controller's status word (32 bits, host-readable).

    Members
    -------
    state : `ControllerState`
        Bits 0-2.
    error : ``ErrorCode``
        Bits 4-7: the first error since reset (``NONE`` when the flag is clear).
    pc : ``unsigned(16)``
        Bits 16-31: the PC; with ``state == ERROR`` the PC of the faulting instruction.
    """

    state: ControllerState
    _pad0: 1
    error: ErrorCode
    _pad1: 8
    pc: 16


class PerfIndex(py_enum.IntEnum):
    """Index of each counter in ``Controller.perf`` / the tile's performance registers.

    All count cycles since the last reset unless said, 32 bits, wrapping.
    """

    #: Cycles since reset.
    CYCLES = 0
    #: Instructions retired.
    INSTRUCTIONS = 1
    #: Cycles the matrix unit issued a weight word (useful MAC cycles).
    MAC_CYCLES = 2
    #: Cycles the vector unit was busy.
    VECTOR_BUSY = 3
    #: Cycles stalled on ``WAIT``.
    WAIT_STALLS = 4
    #: Cycles stalled on the network interface (``SEND`` / ``DONE`` in progress).
    NET_STALLS = 5
    #: Cycles some tile-side initiator requested the shared SRAM port and was not granted.
    SRAM_STALLS = 6
    #: SRAM bytes read (all ports): W per word an initiator reads: one per read of the
    #: matrix unit's port and per granted read of the one-word initiators, the words of its
    #: source a vector-unit wide read takes (1 .. ``n_banks``, its ``bus_words``) per
    #: granted vector read (docs/tile.md, "Performance counters").
    BYTES_READ = 7
    #: SRAM bytes written (all ports).
    BYTES_WRITTEN = 8
    #: Cycles a matrix instruction was in progress (issue to last write-back).
    MATRIX_CYCLES = 9
    #: Cycles the KV store was busy (``KVAPP`` copying its K record and V row).
    KV_CYCLES = 10


N_PERF = len(PerfIndex)

_MATRIX_OPS = (Opcode.MATMUL, Opcode.MATQK, Opcode.MATRAW)
#: Instructions of the matrix unit's scoreboard entry (KVQK: the K rows streamed by the KV
#: store).
_MATRIX_UNIT_OPS = (*_MATRIX_OPS, Opcode.KVQK)
_FIELD_BITS = {"d.reg": 4, "d.off": 17, "a.reg": 4, "a.off": 17, "b.reg": 4, "b.off": 17,
               "n.reg": 4, "n.imm": 16, "c": C_BITS, "imm": 16}


def _legal(ins, op):
    """Return the legality condition of `ins` assuming its opcode is `op` (from `SPECS`).

    Sets are walked in code order so that the generated Verilog (and the build cache key)
    does not depend on Python's string-hash seed.
    """
    spec = SPECS[op]
    fields = {"d.reg": ins.d.reg, "d.off": ins.d.off, "a.reg": ins.a.reg, "a.off": ins.a.off,
              "b.reg": ins.b.reg, "b.off": ins.b.off, "n.reg": ins.n.reg, "n.imm": ins.n.imm,
              "c": ins.c, "imm": ins.imm}
    used = spec.fields
    ok = C(1, 1)
    for name, value in fields.items():
        if name not in used:
            ok &= value == 0
    td = ins.td.as_value()
    ts = ins.ts.as_value()
    if spec.td is None:
        ok &= td == 0
    else:
        ok &= Cat(*(td == t.value for t in sorted(spec.td, key=lambda t: t.value))).any()
    if spec.ts is None:
        ok &= ts == 0
    elif spec.ts != "m":
        ok &= Cat(*(ts == t.value for t in sorted(spec.ts, key=lambda t: t.value))).any()
    if op in _MATRIX_OPS:
        ok &= ins.imm != 0
    if op == Opcode.ROPE:
        ok &= (ins.imm >= 2) & ~ins.imm[0]
    if op == Opcode.WSUM:
        ok &= ins.imm != 0
    if op == Opcode.LI:
        ok &= ins.c[16:] == 0
    if op == Opcode.TABLE:
        ok &= Cat(*(ins.c == t.value for t in TableId)).any()
    if op == Opcode.SEND:
        ok &= (ins.imm[0:4] <= ins.imm[4:8]) & (ins.imm[8:12] <= ins.imm[12:16])
    return ok


class Predecode(data.Struct):
    """The decode of an instruction word that the controller stores beside it (16 bits).

    The instruction memory is written through `predecode`: each word is stored with these
    bits, computed from the word alone on the memory's write side, so that ``Execute`` reads
    its legality and class from the memory's output instead of decoding the opcode and the
    reserved fields in the cycle it retires the instruction (an FPGA timing cut, no cycle:
    ``docs/tile.md``, "Pre-decode").  Every class bit is 0 when the word is illegal.

    Members
    -------
    legal : 1
        The word is a legal instruction (``chipotle.isa.core.decode`` accepts it; the
        conditions are generated from ``SPECS`` by ``_legal``).
    issue : 1
        Checked against the scoreboard and issued from the decode register (vector
        instructions, ``TABLE``, ``LD``, ``ST``, ``COPY``, ``KVAPP``: state ``Issue``).
    mat : 1
        The matrix unit's instruction (``MATMUL``, ``MATQK``, ``MATRAW``, ``KVQK``).
    need : 4
        The scoreboard entries (matrix, vector, net, KV) ``Execute`` waits for, by opcode.
    simple : 1
        ``NOP``, ``LI``, ``ADD``, ``SUB``, ``MUL``: retires to ``pc + 1`` in ``Execute``.
    halt, loop, wait : 1
        ``HALT``, ``LOOP``, ``WAIT``.
    wait_bad : 1
        A ``WAIT`` whose counter is not below ``n_counters`` (``COUNTER``).
    net : 1
        ``SEND`` or ``DONE``.
    send : 1
        ``SEND``.
    loop_far : 1
        A ``LOOP`` whose end is past ``imem_words`` (``IMEM_RANGE``).
    """

    legal: 1
    issue: 1
    mat: 1
    need: 4
    simple: 1
    halt: 1
    loop: 1
    wait: 1
    wait_bad: 1
    net: 1
    send: 1
    loop_far: 1
    _spare: 1


def predecode(m, ins, *, imem_words, n_counters):
    """Add to `m` the pre-decode of the instruction `ins` and return it.

    Parameters
    ----------
    m : Module
    ins : ``Instruction`` view (128 bits)
    imem_words, n_counters : int
        As the controller's (the ``LOOP`` end and ``WAIT`` counter checks).

    Returns
    -------
    ``Signal(Predecode)``, combinational from `ins`.
    """
    pd = Signal(Predecode)
    legal = Signal()
    opv = ins.op.as_value()
    with m.Switch(opv):
        for op in SPECS:
            with m.Case(op.value):
                m.d.comb += legal.eq(_legal(ins, op))
        with m.Default():
            m.d.comb += legal.eq(0)

    def one_of(ops):
        return Cat(*(opv == o.value for o in sorted(ops, key=lambda o: o.value))).any()

    vec_ops = [o for o in Opcode if o.value >> 4 in (1, 2)]
    is_scalar = one_of(SCALAR_OPS)
    is_mat = one_of(_MATRIX_UNIT_OPS)
    is_issue = one_of([*vec_ops, Opcode.LD, Opcode.ST, Opcode.COPY, Opcode.KVAPP,
                       Opcode.TABLE])
    is_kvqk = opv == Opcode.KVQK.value
    # Execute's sync point (the `is_issue` instructions wait in Issue, not there)
    need_mx = ~is_scalar & ~is_issue
    need_vx = ~(is_scalar | is_mat | is_issue)
    need_nt = ~(is_scalar | is_mat | is_issue)
    need_kv = ~(is_scalar | is_mat & ~is_kvqk | is_issue)
    is_wait = opv == Opcode.WAIT.value
    is_loop = opv == Opcode.LOOP.value
    m.d.comb += [
        pd.legal.eq(legal),
        pd.issue.eq(legal & is_issue),
        pd.mat.eq(legal & is_mat),
        pd.need.eq(Cat(need_mx, need_vx, need_nt, need_kv) & legal.replicate(4)),
        pd.simple.eq(legal & one_of([Opcode.NOP, Opcode.LI, Opcode.ADD, Opcode.SUB,
                                     Opcode.MUL])),
        pd.halt.eq(legal & (opv == Opcode.HALT.value)),
        pd.loop.eq(legal & is_loop),
        pd.wait.eq(legal & is_wait),
        pd.wait_bad.eq(legal & is_wait & (ins.c >= n_counters)),
        pd.net.eq(legal & one_of([Opcode.SEND, Opcode.DONE])),
        pd.send.eq(legal & (opv == Opcode.SEND.value)),
        pd.loop_far.eq(legal & is_loop & (ins.c > imem_words)),
    ]
    return pd


class Controller(wiring.Component):
    """The tile controller (see the module docstring for the issue policy).

    Parameters
    ----------
    sram_bytes : int
        SRAM capacity in bytes (operand range checks).
    word_bytes : int
        W.
    max_m, k_max : int
        The matrix unit's rows and largest K (``SHAPE`` checks).
    imem_words : int
        Instruction memory size (at most ``2**16``).
    n_counters : int
        Counters of the network interface (``COUNTER`` check of ``WAIT``).
    loop_depth : int
        Hardware loop stack entries.
    overlap : bool
        Issue policy: True (default) lets one matrix, one vector and one ``SEND``
        instruction run in the background under independent instructions (the scoreboard
        of ``docs/tile.md``, "Issue policy"); False waits for every unit instruction to
        finish.
    sram_latency : int
        L of ``bus`` (`SramSignature.latency`): 1 (default), 2 or 3 cycles.

    Raises
    ------
    ValueError
        If `imem_words` is not in ``1 .. 2**16``, or `sram_latency` is not 1, 2 or 3
        (`SramSignature`).

    Members
    -------
    i_imem : ``In(stream.Signature(ImemWrite))``
        Host writes of the instruction memory (always accepted, one per cycle).
    i_start : ``In(stream.Signature(16))``
        Host start at a PC; taken when the controller is idle, halted or stopped on an error
        (then ignored: only a reset clears an error).
    status : ``Out(Status)``
        State, error code and PC.
    bus : ``Out(SramSignature(word_bytes=W, latency=sram_latency))``
        The controller's SRAM port (``LD``, ``ST``, ``COPY``; a read's word is taken
        ``sram_latency`` cycles after its grant: ``LD`` and each step of ``COPY`` take
        ``sram_latency - 1`` cycles more than at 1).
    o_mcmd : ``Out(stream.Signature(MatrixCommand))``
        Matrix unit commands.
    o_mjob : ``Out(stream.Signature(MatrixJob))``
        Write-back jobs (one per matrix instruction, offered with its command).
    mjob_busy : ``In(1)``
        The write-back stage is working (the matrix instruction is finished when it drops).
    mjob_error : ``In(1)``
        The write-back stage hit an arithmetic error (``ARITH``).
    o_vec : ``Out(stream.Signature(VectorCommand))``
        Vector-unit instructions (and ``TABLE``) with resolved operands.
    i_vec_done : ``In(stream.Signature(VectorDone))``
        One completion per vector instruction (``NONE`` or the error it hit).
    o_net : ``Out(stream.Signature(NetCommand))``
        ``SEND`` and ``DONE`` to the network interface.
    i_net_done : ``In(stream.Signature(NetCompletion))``
        Their completions (a refused ``SEND`` carries its ``ErrorCode``).
    o_wait : ``Out(stream.Signature(WaitRequest))``
        ``WAIT``: offered from registers from the cycle after the ``WAIT`` retired, taken by
        the network interface when the counter suffices; the next instruction holds until
        then.
    o_kv : ``Out(stream.Signature(KvCommand))``
        ``KVAPP`` as a KV store ``APPEND`` (word addresses), once its operands passed the
        alignment and range checks.
    kv_busy, kv_error : ``In(1)``
        The KV store is working; its sticky error flag (the instruction is finished when
        ``kv_busy`` is low in the cycle after the command was taken).
    kv_running : ``In(1)``
        The KV store's command passed its checks (with ``overlap`` a ``KVAPP`` retires then
        and copies in the background).
    kv_error_code : ``In(KvError)``
        The KV store's first error (``BAD_HEAD`` and ``POS_RANGE`` stop the tile with
        ``KV_RANGE``).
    kv_k_words, kv_v_words : ``In(16)``
        Words of a K record (header included) and of a V row in the current KV layout (the
        source range checks of ``KVAPP``).
    kv_head_size : ``In(16)``
        The KV layout's ``head_size``: K of ``KVQK``.
    kv_stream : ``In(1)``
        The KV store offers the matrix command of a ``STREAM_K`` (its ``o_mcmd.valid``).
    kv_k_hdr : ``In(16)``
        Word address of the first K record of that ``STREAM_K`` (the write-back job's
        ``w_hdr``).
    kv_map_lo, kv_map_hi : ``In(16)``, ``In(17)``
        The KV map's words ``[lo, hi)``: what a ``KVQK`` may read, for the scoreboard.
    retired : ``Out(1)``
        An instruction retired this cycle.
    stall_wait, stall_net, stall_sram, matrix_active : ``Out(1)``
        This cycle the controller is stalled on a ``WAIT``, on the network interface (a
        command not yet taken, a ``DONE`` not completed, or with ``overlap`` an instruction
        waiting for the in-flight ``SEND``), on its SRAM port, or has a matrix instruction
        in progress.
    """

    def __init__(self, *, sram_bytes=32768, word_bytes=8, max_m=4, k_max=512,
                 imem_words=1024, n_counters=16, loop_depth=4, overlap=True, sram_latency=1):
        if not 1 <= imem_words <= 2 ** 16:
            raise ValueError(f"`imem_words` must be in [1, 65536], not {imem_words}")
        self._p = dict(sram_bytes=sram_bytes, word_bytes=word_bytes, max_m=max_m,
                       k_max=k_max, imem_words=imem_words, n_counters=n_counters,
                       loop_depth=loop_depth, overlap=bool(overlap))
        super().__init__({
            "i_imem": In(stream.Signature(ImemWrite)),
            "i_start": In(stream.Signature(16)),
            "status": Out(Status),
            "bus": Out(SramSignature(word_bytes=word_bytes, latency=sram_latency)),
            "o_mcmd": Out(stream.Signature(MatrixCommand)),
            "o_mjob": Out(stream.Signature(MatrixJob)),
            "mjob_busy": In(1),
            "mjob_error": In(1),
            "o_vec": Out(stream.Signature(VectorCommand)),
            "i_vec_done": In(stream.Signature(VectorDone)),
            "o_net": Out(stream.Signature(NetCommand)),
            "i_net_done": In(stream.Signature(NetCompletion)),
            "o_wait": Out(stream.Signature(WaitRequest)),
            "o_kv": Out(stream.Signature(KvCommand)),
            "kv_busy": In(1),
            "kv_error": In(1),
            "kv_error_code": In(KvError),
            "kv_k_words": In(16),
            "kv_v_words": In(16),
            "kv_running": In(1),
            "kv_head_size": In(16),
            "kv_stream": In(1),
            "kv_k_hdr": In(16),
            "kv_map_lo": In(16),
            "kv_map_hi": In(17),
            "retired": Out(1),
            "stall_wait": Out(1),
            "stall_net": Out(1),
            "stall_sram": Out(1),
            "matrix_active": Out(1),
        })

    def __getattr__(self, name):
        if name in ("sram_bytes", "word_bytes", "max_m", "k_max", "imem_words",
                    "n_counters", "loop_depth", "overlap"):
            return self._p[name]
        raise AttributeError(name)

    def elaborate(self, platform):
        m = Module()
        p = self._p
        W = p["word_bytes"]
        wb = exact_log2(W)
        size = p["sram_bytes"]
        depth = p["imem_words"]
        D = p["loop_depth"]
        max_m = p["max_m"]

        # ---- instruction memory --------------------------------------------------------------
        # Each word is stored with its pre-decode (`Predecode`, 16 bits: 144 bits a word, the
        # width of 8 DP16KD of 18 bits on an ECP5 as the 128 bits alone).  A host write is
        # registered (`iq_*`, no reset: a write taken before a reset still lands) and
        # pre-decoded from that register in the next cycle, as it is written.
        imem = memory.Memory(shape=data.StructLayout({"ins": Instruction, "pd": Predecode}),
                             depth=depth, init=[])
        m.submodules.imem = imem
        iw = imem.write_port()
        ir = imem.read_port()
        iq_en = Signal(reset_less=True)
        iq_addr = Signal(16, reset_less=True)
        iq_ins = Signal(Instruction, reset_less=True)
        m.d.sync += [iq_en.eq(self.i_imem.valid), iq_addr.eq(self.i_imem.payload.addr),
                     iq_ins.eq(self.i_imem.payload.data)]
        m.d.comb += [
            iw.addr.eq(iq_addr),
            iw.data.ins.eq(iq_ins),
            iw.data.pd.eq(predecode(m, iq_ins, imem_words=depth,
                                    n_counters=p["n_counters"])),
            iw.en.eq(iq_en),
            self.i_imem.ready.eq(1),
        ]
        # The read port's address comes from registers only (an FPGA timing cut: no path
        # from the instruction memory's output through decode and the retire decision back
        # into its address pins).  Every cycle it reads the next PC through the loop stack
        # (`npc_pc`, from the PC and the stack), in `Fetch` the PC itself, and in `Idle` /
        # `Halted` the start PC offered.  The instruction is decoded from the instruction
        # register `ins_q`, never from the read port's output (an FPGA timing cut: the
        # block RAM's 5.8 ns clock-to-out and its route are off every decode path into the
        # register file, the scoreboard and the retire).  `ins_q` takes the port's word
        # (`load_d`) when an instruction retires, which is its successor's when the port
        # has been reading that for a cycle already (`settled`: the instruction did not
        # retire in its first cycle, or came after a refill); else the next state is
        # `Refill`, which takes the right word a cycle later.  So an instruction that
        # retires in its first cycle without a settled port costs one cycle more
        # (`CostModel.refill`); `Fetch` loads it too (docs/tile.md, "Fetch").
        # A LOOP skipped (n = 0) jumps to its end from state `Loop`, where the end's cascade
        # on `ins_q` addresses the port, through `Refill`.
        ins_q = Signal.like(ir.data, reset_less=True)
        load_d = Signal()
        settled = Signal()
        with m.If(load_d):
            m.d.sync += ins_q.eq(ir.data)
        cur = ins_q
        ins = cur.ins
        pd = cur.pd

        # ---- architectural state --------------------------------------------------------------
        pcw = 17
        pc = Signal(pcw)
        error = Signal(ErrorCode)
        lp_start = Array(Signal(pcw, name=f"loop_start{i}") for i in range(D))
        lp_end = Array(Signal(pcw, name=f"loop_end{i}") for i in range(D))
        lp_rem = Array(Signal(32, name=f"loop_rem{i}") for i in range(D))
        sp = Signal(range(D + 1))

        # The registers r1 .. r15: a 16 x 32-bit memory with one write port and one
        # asynchronous read port per operand (a, b, d, n), LUT RAM on an FPGA (four
        # 16 x 32 copies, TRELLIS_DPR16X4 on an ECP5) instead of 480 flip-flops and four
        # 16-way read multiplexers (an FPGA area and routing cut).  r0 is never written
        # and reads 0.  A reset cannot clear LUT RAM, so the controller writes 0 to
        # r1 .. r15 in the 15 cycles after a reset (`rf_clr`), during which it takes no
        # host start: registers read 0 after a reset, as the ISA says (docs/isa.md).
        rf = memory.Memory(shape=32, depth=16, init=[])
        m.submodules.rf = rf
        rf_w = rf.write_port()
        rf_r = {x: rf.read_port(domain="comb") for x in "abdn"}
        rf_clr = Signal(range(17), init=1)      # the register cleared next; 16: done
        rf_clearing = Signal()
        m.d.comb += rf_clearing.eq(rf_clr != 16)
        with m.If(rf_clearing):
            m.d.sync += rf_clr.eq(rf_clr + 1)
        for x, opd in (("a", ins.a), ("b", ins.b), ("d", ins.d), ("n", ins.n)):
            m.d.comb += rf_r[x].addr.eq(opd.reg)

        def val(opd, x):
            return (rf_r[x].data + opd.off)[:32]

        a_val = Signal(32)
        b_val = Signal(32)
        d_val = Signal(32)
        n_reg = Signal(32)
        n_val = Signal(32)
        m.d.comb += [a_val.eq(val(ins.a, "a")), b_val.eq(val(ins.b, "b")),
                     d_val.eq(val(ins.d, "d")), n_reg.eq(rf_r["n"].data),
                     n_val.eq((n_reg + ins.n.imm)[:32])]
        # One register write port: the states that write a register drive it (the LUT RAM's
        # one write port below).  Every write is to ``ins.d.reg`` (LI, ADD, SUB, MUL and
        # LD's latch).
        rf_we = Signal()
        rf_wdata = Signal(32)
        m.d.comb += [
            rf_w.en.eq(rf_clearing | rf_we & (ins.d.reg != 0)),
            rf_w.addr.eq(Mux(rf_clearing, rf_clr, ins.d.reg)),
            rf_w.data.eq(Mux(rf_clearing, 0, rf_wdata)),
        ]

        def write_reg(value):
            m.d.comb += [rf_we.eq(1), rf_wdata.eq(value)]

        # ---- retire: next PC through the loop stack (zero overhead) -------------------------
        retire = Signal()
        to_end = Signal()       # the retiring instruction is a LOOP skipped (n = 0): to its end
        npc = Signal(pcw)
        pc1 = (pc + 1)[:pcw]
        lb = ceil_log2(max(D, 2))
        m.d.comb += self.retired.eq(retire)

        def cascade(npc_in, tag):
            """The cascade of loop ends at `npc_in`: level k from the top ends there and
            either repeats (remaining > 1) or is popped and the next level is looked at.
            Returns ``[(hit, rep)]`` per level and the next PC (the deepest repeat's start,
            else `npc_in`)."""
            still = C(1, 1)
            levels = []
            nxt = npc_in
            for k in range(D):
                lvl = (sp - 1 - k)[:lb]
                hit = Signal(name=f"loop_hit{k}_{tag}")
                rep = Signal(name=f"loop_rep{k}_{tag}")
                m.d.comb += [hit.eq(still & (sp > k) & (lp_end[lvl] == npc_in)),
                             rep.eq(hit & (lp_rem[lvl] > 1))]
                levels.append((hit, rep))
                nxt = Mux(rep, lp_start[lvl], nxt)     # at most one level repeats
                still = hit & ~rep
            out = Signal(pcw, name=f"npc_{tag}")
            m.d.comb += out.eq(nxt)
            return levels, out

        # Both candidates of the next PC go through the cascade side by side, each from
        # registers only: pc + 1 and a LOOP's end (in state `Loop`, from the held word
        # `ins_q`); the LOOP's `n = 0` decision (`n_q == 0`, registered) only selects
        # between them.
        lv_pc, npc_pc = cascade(pc1, "pc")
        lv_end, npc_end = cascade(ins_q.ins.c, "end")
        m.d.comb += npc.eq(Mux(to_end, npc_end, npc_pc))
        with m.If(retire):
            m.d.sync += pc.eq(npc)
            for k in range(D):
                lvl = (sp - 1 - k)[:lb]
                hit = Mux(to_end, lv_end[k][0], lv_pc[k][0])
                rep = Mux(to_end, lv_end[k][1], lv_pc[k][1])
                with m.If(hit):
                    with m.If(rep):
                        m.d.sync += [lp_rem[lvl].eq(lp_rem[lvl] - 1), sp.eq(sp - k)]
                    with m.Else():
                        m.d.sync += sp.eq(sp - k - 1)
        # A LOOP's checks (isasim's order), registered in every cycle from the held word, the
        # PC and the loop stack: in state `Loop` they are those of its Execute cycle, which
        # changed none of them.  `lp_loop_q`: its end not after pc + 1, or (inside the
        # instruction memory) beyond the enclosing loop's end (LOOP); `lp_far_q`: its end
        # past the instruction memory (IMEM_RANGE); `lp_full_q`: the stack full (LOOP, after
        # the n = 0 skip).
        lp_loop_q = Signal()
        lp_far_q = Signal()
        lp_full_q = Signal()
        end_le = ins_q.ins.c <= pc1
        m.d.sync += [
            lp_loop_q.eq(end_le | ~ins_q.pd.loop_far & (sp != 0)
                         & (ins_q.ins.c > lp_end[(sp - 1)[:lb]])),
            lp_far_q.eq(~end_le & ins_q.pd.loop_far),
            lp_full_q.eq(sp >= D),
        ]
        # Fetch of the next instruction: the read port is addressed with `npc_pc` in every
        # cycle but `Idle`, `Halted`, `Fetch` and a skipping `Loop` (after the FSM below).
        fetch_now = Signal()
        m.d.comb += ir.en.eq(1)

        def do_retire(loop_skip=False):
            """Retire the instruction: next PC pc + 1, or with `loop_skip` the end of the
            LOOP (``c``), through the loop stack; decode it in the next cycle if the read
            port has its word now (`settled`), else after `Refill`."""
            m.d.comb += retire.eq(1)
            if loop_skip:
                m.d.comb += to_end.eq(1)
            with m.If(npc_end < depth if loop_skip else npc_pc < depth):
                if loop_skip:
                    m.next = "Refill"
                else:
                    with m.If(settled):
                        m.next = "Execute"
                    with m.Else():
                        m.next = "Refill"
            with m.Else():
                m.next = "Fetch"

        ov = p["overlap"]
        # ---- addresses of the checks and the scoreboard ----------------------------------------
        # AW bits, 2**AW > the SRAM size: an address or an end at or beyond 2**AW is past the
        # SRAM whatever its higher bits, so the range checks add AW-bit operands and test
        # the higher bits by an OR, and the scoreboard holds every range end as
        # min(end, 2**AW) in AW + 1 bits (chipotle.isa.core.ranges_overlap's `limit`: exact
        # for every range inside the SRAM; a range wholly beyond it meets nothing).
        AW = size.bit_length()

        def hi_any(v):
            v = Value.cast(v)
            return v[AW:].any() if len(v) > AW else C(0, 1)

        def clamp(low, over):
            """2**AW if `over`, else the AW-bit `low`: AW + 1 bits."""
            return Cat(Mux(over, 0, low), over)

        def cl(v):
            """min(v, 2**AW) (v unsigned) in AW + 1 bits."""
            v = Value.cast(v)
            return v if len(v) <= AW else clamp(v[:AW], hi_any(v))

        def rend(lo, length):
            """min(lo + length, 2**AW) in AW + 1 bits, with an AW-bit adder."""
            lo, length = Value.cast(lo), Value.cast(length)
            s_ = lo[:AW] + length[:AW]
            s_ = Cat(s_, C(0, max(0, AW + 1 - len(s_))))
            return clamp(s_[:AW], s_[AW] | hi_any(lo) | hi_any(length))

        # ---- overlap scoreboard: one entry per background unit (0 matrix, 1 vector, 2 net) --
        # An entry is live while its instruction is in flight (busy) or finished with an
        # error (fault, kept until the next sync point reports it).  Ranges are byte ranges
        # [lo, hi) resolved at issue, both ends as `cl` (above).
        mx_busy = Signal()      # issued, write-back not finished
        mx_fault = Signal()     # it finished with ARITH (reported at the next sync point)
        mx_pc = Signal(pcw)
        vx_busy = Signal()      # a vector instruction issued, its completion not yet taken
        vx_fault = Signal()
        vx_code = Signal(ErrorCode)
        vx_pc = Signal(pcw)
        nt_busy = Signal()      # a SEND handed to the network interface, not completed
        nt_fault = Signal()
        nt_code = Signal(ErrorCode)
        nt_pc = Signal(pcw)

        def rng(name):
            return (Signal(AW + 1, name=f"{name}_lo"), Signal(AW + 1, name=f"{name}_hi"))

        vr_a, vr_b, vr_c, vr_d = rng("vx_a"), rng("vx_b"), rng("vx_c"), rng("vx_d")
        vr_b_en = Signal()
        vr_c_en = Signal()
        nr_src, nr_dst = rng("nt_src"), rng("nt_dst")
        # older[(u, v)]: unit u's entry was issued before unit v's
        older = {(u, v): Signal(name=f"older_{u}_{v}") for u in range(3) for v in range(3)
                 if u != v}
        # entry 3: a KVAPP the KV store is copying (its checks are made before it retires,
        # so it never faults); it reads its K record and V row, writes (conservatively) the
        # whole KV map
        kq_busy = Signal()
        kr_k, kr_v = rng("kv_k"), rng("kv_v")
        busy3 = Cat(mx_busy, vx_busy, nt_busy)
        fault3 = Cat(mx_fault, vx_fault, nt_fault)
        live3 = busy3 | fault3
        busy4 = Cat(busy3, kq_busy)
        fault4 = Cat(fault3, C(0, 1))
        live4 = Cat(live3, kq_busy)
        ex_sync = Signal(4)     # Execute: the live entries the fetched instruction waits for
        is_sync = Signal(4)     # Issue: the same for an `is_issue` instruction
        go_q = Signal()         # Issue-Go: none of them live in this cycle (registered)
        mc_sync = Signal(4)     # Matrix-Check: the live entries the matrix instruction waits for
        err_pc = Signal(pcw)

        # The class of an instruction in state Issue and, for a vector instruction, its
        # footprint (chipotle.isa.core.vector_footprint: a for 4 n bytes, b for 4 n (wsum:
        # n c + 4 imm), rmsnorm's and rmsnormq's epsilon 8 bytes at c; writes d for 4 n + W
        # (wsum: 4 imm)).
        # Execute decides from the pre-decode (`pd`), not from these.
        opv = ins.op.as_value()
        vec_ops = [o for o in Opcode if o.value >> 4 in (1, 2)]
        is_vec = Cat(*(opv == o.value for o in vec_ops)).any()
        uses_b = Cat(*(opv == o.value for o in vec_ops if "b.reg" in SPECS[o].fields)).any()
        is_wsum = opv == Opcode.WSUM.value
        is_rms = (opv == Opcode.RMSNORM.value) | (opv == Opcode.RMSNORMQ.value)
        is_ld = opv == Opcode.LD.value
        is_st = opv == Opcode.ST.value
        is_copy = opv == Opcode.COPY.value
        is_mem = is_ld | is_st | is_copy
        is_kvapp = opv == Opcode.KVAPP.value
        is_table = opv == Opcode.TABLE.value

        # ---- decode register ------------------------------------------------------------------
        # Execute resolves the operands of an `is_issue` instruction (r[reg] + off and the
        # lengths of its vector ranges) into registers; "Issue" checks, dispatches and
        # computes its footprint from them, so no path runs from the instruction memory
        # through the operand adders into the range compares and the retire decision.
        # The footprint of an `is_issue` instruction is at most three read ranges and one
        # write range, one per operand slot (chipotle.isa.core's footprints): slot a reads
        # [a, a + al) (vector 4 n, LD 4, COPY n, KVAPP its K record, TABLE its entries),
        # slot b [b, b + bl) (vector: 4 n, wsum n c + 4 imm; KVAPP its V row), slot c
        # rmsnorm's epsilon [c, c + 8), the write slot [d, d + dl) (vector 4 n + W, wsum
        # 4 imm, ST 4, COPY n) or KVAPP's whole KV map.  Execute registers each slot's
        # length, chosen by opcode, with the operands, so Issue adds one length per slot
        # and compares each slot once per scoreboard entry (an FPGA area and routing cut:
        # one compare per opcode's range before, 84 range pairs against 25 now).
        a_q, b_q, d_q, n_q = (Signal(32, name=f"{x}_q") for x in "abdn")
        al_q = Signal(34)               # slot a's range length
        bl_q = Signal(32 + C_BITS + 1)  # slot b's range length
        dl_q = Signal(35)               # the write slot's range length
        # TABLE: bytes of its entries (table_footprint), decoded from `c` in Execute
        tab_src = Signal(13)
        with m.Switch(ins.c):
            for tid, entries in TABLE_ENTRIES.items():
                with m.Case(tid.value):
                    m.d.comb += tab_src.eq(2 * entries)

        s_a = (cl(a_q), rend(a_q, al_q))
        s_b = (cl(b_q), rend(b_q, bl_q))
        s_c = (cl(ins.c), rend(ins.c, 8))
        s_d = (cl(d_q), rend(d_q, dl_q))

        def issued(u):
            for v in range(3):
                if v != u:
                    m.d.sync += [older[(v, u)].eq(1), older[(u, v)].eq(0)]

        def fail(code):
            m.d.sync += error.eq(code)
            if ov:
                # Drain: wait for the in-flight matrix instruction; its ARITH comes first
                # in program order and wins.
                m.d.sync += err_pc.eq(pc)
                m.next = "Drain"
            else:
                m.next = "Error"

        def kv_refused():
            # The KV store's verdict on a KVAPP or a KVQK: a bad slot or position is the
            # program's KV_RANGE; BAD_OP, SRC_RANGE and SRAM cannot reach the store (the
            # controller checks the op and the sources first) and map to ILLEGAL /
            # SRAM_RANGE should they ever.
            with m.Switch(self.kv_error_code):
                with m.Case(KvError.BAD_HEAD, KvError.POS_RANGE):
                    fail(ErrorCode.KV_RANGE)
                with m.Case(KvError.BAD_OP):
                    fail(ErrorCode.ILLEGAL)
                with m.Default():
                    fail(ErrorCode.SRAM_RANGE)

        # ---- operand checks ---------------------------------------------------------------------
        # Issue's range checks are the slot ends (`s_a` .. `s_d`: LD [a, a + 4), ST [d, d + 4),
        # COPY [a, a + n) and [d, d + n), KVAPP its K record and V row), past the SRAM when
        # above its size (exact, no wrap: 2**AW > size).
        def past(end):
            return end > size

        def misaligned(addr, align):
            bits = exact_log2(align)
            return addr[:bits].any() if bits else C(0, 1)

        # ---- LD / ST / COPY registers ------------------------------------------------------
        mem_addr = Signal(32)
        cp_src = Signal(32)
        cp_dst = Signal(32)
        cp_left = Signal(32)
        cp_back = Signal()
        cp_word = Signal(8 * W, reset_less=True)     # the word read
        cp_wm = Signal()            # this step moves a whole word (source and destination
        #                             word-aligned in the copy's direction, W bytes left)

        # ---- matrix instruction registers -----------------------------------------------------
        mx_op = Signal(MatrixOp)
        mx_kv = Signal()        # KVQK: W is the KV store's K rows of the slot in mx_wa
        mx_m = Signal(4)
        mx_k = Signal(16)
        mx_n = Signal(32)
        mx_kw = Signal(16)      # ceil(K / W)
        mx_es = Signal(3)       # destination element bytes
        mx_xa = Signal(32)
        mx_wa = Signal(32)
        mx_ya = Signal(32)
        mx_c = Signal(C_BITS)
        mx_td = Signal(2)
        mcmd_sent = Signal()
        mjob_sent = Signal()
        # Parts of the range ends, computed in Execute from the instruction (no multiplier
        # by a register value there): X's (M - 1) x_stride, Y's row N size and row stride
        # pad(N size); Matrix-Check multiplies the rest.  The sums of the ends' other terms
        # are made there too, and W's stride and N - 1 registered (an FPGA timing cut: no
        # operand adder before Matrix-Check's multiplier, one adder after it):
        #   x_end = mx_xk + mx_xoff      (mx_xk = x_first + K)
        #   w_end = mx_wk + mx_n1 w_stride   (mx_wk = w_first + K, mx_n1 = N - 1, signed)
        #   y_end = mx_yl + (M - 1) y_stride (mx_yl = y + N size)
        mx_xoff = Signal(64)
        mx_ystride = Signal(32)
        mx_xk = Signal(34)
        mx_wk = Signal(34)
        mx_n1 = Signal(signed(33))
        mx_wstride = Signal(17 + wb)    # strides(): (ceil(K / W) + 1) << wb at most
        mx_yl = Signal(36)
        # The matrix instruction's range ends, registered in Matrix-Ends (an FPGA timing cut:
        # Matrix-Check's range checks and hazard compare, and a later instruction's hazard
        # compare with the matrix entry, live from Matrix-Issue on, start at registers, not
        # at the ends' products and adders).
        mx_xend_q = Signal(AW + 1)     # as `cl`
        mx_wend_q = Signal(AW + 1)
        mx_yend_q = Signal(AW + 1)
        mx_tend_q = Signal(AW + 1)

        # M - 1 of a matrix instruction in the range ends: ceil(log2(max_m)) bits, exact for
        # every M the SHAPE check lets through (1 .. max_m), which comes before the range
        # checks; no multiplier at max_m = 1 (the ULX3S chip), a small one otherwise (an FPGA
        # timing cut: the product was on the longest path of Matrix-Check).
        mb = ceil_log2(max_m)

        def m_less_1(v):
            return v[:mb] if mb else C(0, 1)

        def strides(kw, is_raw, is_qk):
            """x_stride, w_stride (bytes) of a matrix instruction with ceil(K / W) = kw."""
            rec = (kw + 1) << wb                    # record bytes W + pad(K)
            plain = kw << wb                        # pad(K)
            return Mux(is_raw, plain, rec), Mux(is_qk, rec, plain)

        # ---- perf strobes -----------------------------------------------------------------------
        m.d.comb += self.stall_sram.eq(self.bus.en & ~self.bus.ready)

        # ---- status ------------------------------------------------------------------------
        st = Signal(ControllerState)
        m.d.comb += [self.status.state.eq(st), self.status.error.eq(error)]
        # err_pc: the faulting instruction's PC (ERROR, with `overlap`), or the PC of the WAIT
        # whose request holds the next instruction (WAITING)
        if ov:
            m.d.comb += self.status.pc.eq(Mux((st == ControllerState.ERROR)
                                              | (st == ControllerState.WAITING), err_pc, pc)[:16])
        else:
            m.d.comb += self.status.pc.eq(Mux(st == ControllerState.WAITING, err_pc, pc)[:16])

        def sync_point(sync):
            """A sync point (in the current state, while `sync` names scoreboard entries
            still busy): wait for them; if one failed, drain every unit and stop with the
            first error in program order."""
            m.d.comb += self.stall_net.eq(sync[2] & nt_busy)
            with m.If((sync & fault4).any()):
                m.next = "Drain"

        # ---- WAIT, offered from registers ------------------------------------------------------
        # A WAIT retires in its Execute cycle once its sync point is passed (no cycle of its
        # own) and leaves its request (counter, need) in registers, offered on `o_wait` from
        # the next cycle on; the instruction after it (Fetch, Execute) holds while the
        # network interface has not granted it (`wt_hold`).  So no path runs from the
        # instruction memory through the operand adder and the counter compare into the
        # retire decision (an FPGA timing cut, docs/tile.md "Registered WAIT"); a grant in
        # the request's first cycle costs nothing, a stalled WAIT ends a cycle earlier than
        # a compare in Execute would let it.
        wt_pend = Signal()
        wt_c = Signal(8)
        wt_need = Signal(32)
        wt_hold = Signal()
        m.d.comb += [
            self.o_wait.valid.eq(wt_pend),
            self.o_wait.payload.counter.eq(wt_c),
            self.o_wait.payload.need.eq(wt_need),
            wt_hold.eq(wt_pend & ~self.o_wait.ready),
        ]
        with m.If(self.o_wait.ready):
            m.d.sync += wt_pend.eq(0)      # a WAIT retiring in this cycle sets it again below

        def hold_on_wait():
            """The instruction after a WAIT whose request is not granted this cycle holds."""
            m.d.comb += [st.eq(ControllerState.WAITING), self.stall_wait.eq(1)]

        with m.FSM(name="fsm") as fsm:
            def accept_start():
                m.d.comb += self.i_start.ready.eq(~rf_clearing)
                with m.If(self.i_start.valid & ~rf_clearing):
                    m.d.sync += [pc.eq(self.i_start.payload), sp.eq(0)]
                    m.next = "Fetch"

            with m.State("Idle"):
                m.d.comb += st.eq(ControllerState.IDLE)
                accept_start()

            with m.State("Halted"):
                m.d.comb += st.eq(ControllerState.HALTED)
                accept_start()

            with m.State("Error"):
                m.d.comb += [st.eq(ControllerState.ERROR), self.i_start.ready.eq(1)]

            with m.State("Fetch"):
                m.d.comb += st.eq(ControllerState.RUNNING)
                with m.If(wt_hold):
                    hold_on_wait()
                with m.Elif(pc >= depth):
                    fail(ErrorCode.IMEM_RANGE)
                with m.Else():
                    m.d.comb += fetch_now.eq(1)
                    m.next = "Execute"

            with m.State("Refill"):
                # the retired instruction's successor is on the read port now: into the
                # instruction register (`load_d`), decoded in the next cycle
                # (an instruction after a WAIT holds for its grant from Execute on)
                m.d.comb += st.eq(ControllerState.RUNNING)
                m.next = "Execute"

            with m.State("Execute"):
                m.d.comb += st.eq(ControllerState.RUNNING)
                op = ins.op
                with m.If(wt_hold):
                    hold_on_wait()
                if ov:
                    with m.Elif(ex_sync.any()):      # pd.need is 0 for an illegal word
                        sync_point(ex_sync)
                with m.Elif(~pd.legal):
                    fail(ErrorCode.ILLEGAL)
                with m.Elif(pd.issue):
                    # Resolve the operands into the decode register; "Issue" checks and
                    # dispatches from it in the next cycle.
                    m.d.sync += [a_q.eq(a_val), b_q.eq(b_val), d_q.eq(d_val), n_q.eq(n_val)]
                    with m.If(is_vec):
                        m.d.sync += [al_q.eq(n_val << 2),
                                     bl_q.eq(Mux(is_wsum, n_val * ins.c + (ins.imm << 2),
                                                 n_val << 2)),
                                     dl_q.eq(Mux(is_wsum, ins.imm << 2, (n_val << 2) + W))]
                    with m.Elif(is_kvapp):
                        m.d.sync += [al_q.eq(self.kv_k_words << wb),
                                     bl_q.eq(self.kv_v_words << wb)]
                    with m.Elif(is_table):
                        m.d.sync += al_q.eq(tab_src)
                    with m.Else():      # LD, ST, COPY
                        m.d.sync += [al_q.eq(Mux(is_copy, n_val, 4)),
                                     dl_q.eq(Mux(is_copy, n_val, 4))]
                    m.next = "Issue"
                with m.Elif(pd.simple):
                    # NOP, LI, ADD, SUB, MUL: the register write by opcode, the retire by
                    # the pre-decode
                    with m.Switch(opv):
                        with m.Case(Opcode.LI.value):
                            write_reg(Cat(ins.imm, ins.c[:16]))
                        with m.Case(Opcode.ADD.value):
                            write_reg((a_val + b_val)[:32])
                        with m.Case(Opcode.SUB.value):
                            write_reg((a_val - b_val)[:32])
                        with m.Case(Opcode.MUL.value):
                            write_reg((a_val * ins.imm)[:32])
                    do_retire()
                with m.Elif(pd.halt):
                    m.d.comb += self.retired.eq(1)
                    m.next = "Halted"
                with m.Elif(pd.loop):
                    # its count into the decode register, its checks into `lp_*_q` (below);
                    # state `Loop` acts on them
                    m.d.sync += n_q.eq(n_val)
                    m.next = "Loop"
                with m.Elif(pd.wait):
                    with m.If(pd.wait_bad):
                        fail(ErrorCode.COUNTER)
                    with m.Else():
                        # Retire; the request waits in registers (see `wt_hold`), the
                        # status shows this PC while it holds the next instruction.
                        m.d.sync += [wt_pend.eq(1), wt_c.eq(ins.c), wt_need.eq(n_val),
                                     err_pc.eq(pc)]
                        do_retire()
                with m.Elif(pd.net):
                    m.d.comb += [self.o_net.valid.eq(1), self.stall_net.eq(1)]
                    with m.If(self.o_net.ready):
                        if ov:
                            with m.If(pd.send):
                                # In the background: the entry waits for its completion.
                                m.d.sync += [nt_busy.eq(1), nt_fault.eq(0), nt_pc.eq(pc),
                                             nr_src[0].eq(cl(a_val)),
                                             nr_src[1].eq(rend(a_val, n_val)),
                                             nr_dst[0].eq(cl(d_val)),
                                             nr_dst[1].eq(rend(d_val, n_val))]
                                issued(2)
                                do_retire()
                            with m.Else():
                                m.next = "Net-Done"
                        else:
                            m.next = "Net-Done"
                with m.Elif(pd.mat):
                    is_kvqk = op == Opcode.KVQK
                    # KVQK: K is the KV layout's head size, W the KV store's K records
                    k_val = Mux(is_kvqk, self.kv_head_size, ins.imm)
                    kw_e = Signal(16)
                    es_e = Signal(3)
                    nes_e = Signal(35)      # N size: N x es_e, by shifts
                    ys_e = Signal(32)
                    m.d.comb += [
                        kw_e.eq((k_val + W - 1) >> wb),
                        es_e.eq(Mux(ins.td == Dtype.I8, 1, Mux(ins.td == Dtype.I16, 2, 4))),
                        nes_e.eq(Mux(ins.td == Dtype.I8, n_val,
                                     Mux(ins.td == Dtype.I16, n_val << 1, n_val << 2))),
                        ys_e.eq(((nes_e + W - 1) >> wb) << wb),
                    ]
                    is_raw_e = op == Opcode.MATRAW
                    is_qk_e = (op == Opcode.MATQK) | is_kvqk            # mx_op's MATQK
                    xs_e, ws_e = strides(kw_e, is_raw_e, is_qk_e)
                    m.d.sync += [
                        mx_xoff.eq(m_less_1(ins.ts.m1) * xs_e),
                        mx_ystride.eq(ys_e),
                        mx_xk.eq(Mux(is_raw_e, a_val, a_val + W) + k_val),
                        mx_wk.eq(Mux(is_qk_e, b_val + W, b_val) + k_val),
                        mx_n1.eq(n_val - 1),
                        mx_wstride.eq(ws_e),
                        mx_yl.eq(d_val + nes_e),
                    ]
                    m.d.sync += [
                        mx_op.eq(Mux(op == Opcode.MATMUL, MatrixOp.MATMUL,
                                     Mux(op == Opcode.MATRAW, MatrixOp.MATRAW,
                                         MatrixOp.MATQK))),
                        mx_kv.eq(is_kvqk),
                        mx_m.eq(ins.ts.m1 + 1),
                        mx_k.eq(k_val),
                        mx_kw.eq(kw_e),
                        mx_n.eq(n_val),
                        mx_xa.eq(a_val), mx_wa.eq(b_val), mx_ya.eq(d_val), mx_c.eq(ins.c),
                        mx_td.eq(ins.td.as_value()[:2]),
                        mx_es.eq(es_e),
                        mcmd_sent.eq(0), mjob_sent.eq(0),
                    ]
                    m.next = "Matrix-Ends"
            with m.State("Loop"):
                # A LOOP, from the held word and its count in `n_q` (an FPGA timing cut: no
                # path from the instruction memory through the register file and the count's
                # adder into the loop stack, the PC and the retire), and its checks from
                # `lp_*_q`, made in its Execute cycle (an FPGA timing cut: no path from the
                # loop stack's top through the nesting compare into the retire, the loop
                # stack and `err_pc`).  A skip (n = 0) goes to the end through the end
                # cascade, which addresses the instruction memory in this cycle (from
                # registers).
                m.d.comb += st.eq(ControllerState.RUNNING)
                end = ins_q.ins.c
                with m.If(lp_loop_q):
                    fail(ErrorCode.LOOP)
                with m.Elif(lp_far_q):
                    fail(ErrorCode.IMEM_RANGE)
                with m.Elif(n_q == 0):
                    do_retire(loop_skip=True)
                with m.Elif(lp_full_q):
                    fail(ErrorCode.LOOP)
                with m.Else():
                    lvl = sp[:lb]
                    m.d.sync += [lp_start[lvl].eq(pc1), lp_end[lvl].eq(end),
                                 lp_rem[lvl].eq(n_q)]
                    # Pushing happens after the retire cascade (which only looks at ends
                    # equal to pc + 1 < end, so it never fires here).
                    m.d.sync += sp.eq(sp + 1)
                    do_retire()

            with m.State("Issue"):
                # Vector instructions, TABLE, LD, ST, COPY and KVAPP, from the decode
                # register (their other fields from the held word, `ins_q`).
                m.d.comb += st.eq(ControllerState.RUNNING)
                # The operands of LD, ST and COPY, loaded in every Issue cycle (an FPGA
                # timing cut: their enable from the state register, not from the hazard
                # compare and the range checks); only the states after Issue use them.
                back = d_q > a_q
                m.d.sync += [
                    mem_addr.eq(Mux(is_st, d_q, a_q)),
                    cp_back.eq(back),
                    cp_src.eq(Mux(is_st, a_q, Mux(is_copy & back, a_q + n_q - 1, a_q))),
                    cp_dst.eq(Mux(back, d_q + n_q - 1, d_q)),
                    cp_left.eq(n_q),
                ]
                op = ins.op
                first = m.If
                if ov:
                    # Issue-Go: a vector instruction and TABLE dispatch, and a COPY of 0
                    # bytes retires, only from `go_q`, the scoreboard compare and the COPY's
                    # range checks registered in the cycle before (below), so the dispatch
                    # and retire start at registers (an FPGA timing cut; CostModel.issue_go).
                    with m.If((is_vec | is_table) & go_q):
                        m.d.comb += self.o_vec.valid.eq(1)
                        with m.If(self.o_vec.ready):
                            with m.If(is_table):
                                m.next = "Vector"
                            with m.Else():
                                # In the background: the entry waits for its completion
                                # (its ranges and PC: `vr_*`, loaded while the entry is
                                # not live, below)
                                m.d.sync += [vx_busy.eq(1), vx_fault.eq(0)]
                                issued(1)
                                do_retire()
                    with m.Elif(is_copy & (n_q == 0) & go_q):
                        do_retire()
                    with m.Elif(is_sync.any()):
                        sync_point(is_sync)
                    with m.Elif(is_vec | is_table):
                        pass        # the first cycle in Issue: `go_q` is computed now
                    first = m.Elif
                with first(op == Opcode.LD):
                    with m.If(misaligned(a_q, 4)):
                        fail(ErrorCode.ALIGN)
                    with m.Elif(past(s_a[1])):
                        fail(ErrorCode.SRAM_RANGE)
                    with m.Else():
                        m.next = "Load-Read"
                with m.Elif(op == Opcode.ST):
                    with m.If(misaligned(d_q, 4)):
                        fail(ErrorCode.ALIGN)
                    with m.Elif(past(s_d[1])):
                        fail(ErrorCode.SRAM_RANGE)
                    with m.Else():
                        m.next = "Store"
                with m.Elif(op == Opcode.KVAPP):
                    # Source checks in the simulator's order (K record, then V row: alignment,
                    # then range); the slot and position are the KV store's to check.
                    with m.If(misaligned(a_q, W)):
                        fail(ErrorCode.ALIGN)
                    with m.Elif(past(s_a[1])):       # its K record
                        fail(ErrorCode.SRAM_RANGE)
                    with m.Elif(misaligned(b_q, W)):
                        fail(ErrorCode.ALIGN)
                    with m.Elif(past(s_b[1])):       # its V row
                        fail(ErrorCode.SRAM_RANGE)
                    with m.Elif(d_q[16:].any() | n_q[16:].any()):
                        fail(ErrorCode.KV_RANGE)      # beyond the store's 16-bit fields
                    with m.Else():
                        m.d.comb += self.o_kv.valid.eq(1)
                        with m.If(self.o_kv.ready):
                            # (its ranges: `kr_*`, loaded while the KV entry is not busy)
                            m.next = "Kv"
                with m.Elif(op == Opcode.COPY):
                    with m.If(past(s_a[1])):
                        fail(ErrorCode.SRAM_RANGE)
                    with m.Elif(past(s_d[1])):
                        fail(ErrorCode.SRAM_RANGE)
                    with m.Elif(n_q == 0):
                        if not ov:
                            do_retire()     # (with `overlap`: from `go_q`, above)
                    with m.Else():
                        m.next = "Copy-Read"
                with m.Else():
                    # Vector units 1 and 2, and TABLE.
                    # (with `overlap` only TABLE gets here: the others dispatch above)
                    m.d.comb += self.o_vec.valid.eq(1)
                    with m.If(self.o_vec.ready):
                        m.next = "Vector"

            # a read's word comes L cycles after its grant: L - 1 wait states before a latch
            lat = self.bus.signature.latency

            def running():
                m.d.comb += st.eq(ControllerState.RUNNING)

            load_latch = wait_states(m, "Load-Latch", lat, running)
            copy_latch = wait_states(m, "Copy-Latch", lat, running)

            with m.State("Load-Read"):
                m.d.comb += [st.eq(ControllerState.RUNNING), self.bus.en.eq(1),
                             self.bus.addr.eq(mem_addr[wb:])]
                with m.If(self.bus.ready):
                    m.next = load_latch

            with m.State("Load-Latch"):
                m.d.comb += st.eq(ControllerState.RUNNING)
                word = self.bus.rdata
                lane = word.word_select(mem_addr[2:wb], 32) if wb > 2 else word[:32]
                write_reg(lane)
                do_retire()

            with m.State("Store"):
                m.d.comb += [st.eq(ControllerState.RUNNING), self.bus.en.eq(1),
                             self.bus.we.eq(1), self.bus.addr.eq(mem_addr[wb:]),
                             self.bus.wdata.eq(cp_src.replicate(W // 4)),
                             self.bus.wmask.eq(C(0xF, W) << Cat(C(0, 2), mem_addr[2:wb]))]
                with m.If(self.bus.ready):
                    do_retire()

            # COPY: a word per step where source and destination are both at a word
            # boundary in the copy's direction (forward: their first byte, backward: their
            # last) and a word is left, else a byte; 3 cycles a step (read, latch, write).
            # Backward steps go down from the last byte, so overlapping ranges copy as
            # through a buffer in either mode.
            with m.State("Copy-Read"):
                m.d.comb += [st.eq(ControllerState.RUNNING), self.bus.en.eq(1),
                             self.bus.addr.eq(cp_src[wb:])]
                edge = Mux(cp_back, W - 1, 0)
                m.d.sync += cp_wm.eq((cp_src[:wb] == edge) & (cp_dst[:wb] == edge)
                                     & (cp_left >= W))
                with m.If(self.bus.ready):
                    m.next = copy_latch

            with m.State("Copy-Latch"):
                m.d.comb += st.eq(ControllerState.RUNNING)
                m.d.sync += cp_word.eq(self.bus.rdata)
                m.next = "Copy-Write"

            with m.State("Copy-Write"):
                m.d.comb += [st.eq(ControllerState.RUNNING), self.bus.en.eq(1),
                             self.bus.we.eq(1), self.bus.addr.eq(cp_dst[wb:]),
                             self.bus.wdata.eq(Mux(cp_wm, cp_word, cp_word.word_select(
                                 cp_src[:wb], 8).replicate(W))),
                             self.bus.wmask.eq(Mux(cp_wm, (1 << W) - 1,
                                                   C(1, W) << cp_dst[:wb]))]
                with m.If(self.bus.ready):
                    moved = Mux(cp_wm, W, 1)
                    step = Mux(cp_back, -moved, moved)
                    m.d.sync += [cp_src.eq(cp_src + step), cp_dst.eq(cp_dst + step),
                                 cp_left.eq(cp_left - moved)]
                    with m.If(cp_left == moved):
                        do_retire()
                    with m.Else():
                        m.next = "Copy-Read"

            with m.State("Net-Done"):
                m.d.comb += [st.eq(ControllerState.RUNNING), self.i_net_done.ready.eq(1),
                             self.stall_net.eq(1)]
                with m.If(self.i_net_done.valid):
                    with m.If(self.i_net_done.payload.error != ErrorCode.NONE):
                        fail(self.i_net_done.payload.error)
                    with m.Else():
                        do_retire()

            with m.State("Kv"):
                # The store's verdict comes after its decode cycle.  With overlap the KVAPP
                # retires once the store runs it (it cannot be refused any more) and copies
                # in the background under the KV scoreboard entry; else once it is done.
                m.d.comb += st.eq(ControllerState.RUNNING)
                with m.If(self.kv_error):
                    kv_refused()
                with m.Elif(self.kv_running if ov else ~self.kv_busy):
                    if ov:
                        m.d.sync += kq_busy.eq(1)
                    do_retire()

            with m.State("Vector"):
                m.d.comb += [st.eq(ControllerState.RUNNING), self.i_vec_done.ready.eq(1)]
                with m.If(self.i_vec_done.valid):
                    with m.If(self.i_vec_done.payload.error != ErrorCode.NONE):
                        fail(self.i_vec_done.payload.error)
                    with m.Else():
                        do_retire()

            # -- matrix instructions: checks (isasim's order), then command + write-back job
            rec = (mx_kw + 1) << wb                 # record bytes W + pad(K)
            is_raw = mx_op == MatrixOp.MATRAW
            is_qk = mx_op == MatrixOp.MATQK
            x_stride, w_stride = strides(mx_kw, is_raw, is_qk)
            x_first = Mux(is_raw, mx_xa, mx_xa + W)
            w_first = Mux(is_qk, mx_wa + W, mx_wa)
            y_stride = mx_ystride
            # the ends as `cl` (N = 0 makes W's product negative, so its end is 2**AW; the
            # simulator's matrix_footprint takes W to the end for N = 0 too: the hazard wait
            # before the SHAPE refusal is the same)
            x_end = Signal(AW + 1)
            w_end = Signal(AW + 1)
            y_end = Signal(AW + 1)
            t_end = Signal(AW + 1)
            tab_bytes = Mux(is_qk, 4, mx_n << 2)
            m.d.comb += [
                x_end.eq(rend(mx_xk, mx_xoff)),
                w_end.eq(rend(mx_wk, mx_n1 * mx_wstride)),
                y_end.eq(rend(mx_yl, m_less_1(mx_m - 1) * y_stride)),
                t_end.eq(rend(mx_c, tab_bytes)),
            ]

            with m.State("Matrix-Ends"):
                # the range ends from Execute's registers into the `_q` registers
                m.d.comb += st.eq(ControllerState.RUNNING)
                m.d.sync += [mx_xend_q.eq(x_end), mx_wend_q.eq(w_end), mx_yend_q.eq(y_end),
                             mx_tend_q.eq(t_end)]
                m.next = "Matrix-Check"

            with m.State("Matrix-Check"):
                m.d.comb += st.eq(ControllerState.RUNNING)
                first = m.If
                if ov:
                    # Hazards with the in-flight vector instruction and SEND (the matrix
                    # entry was synced at Execute: the same unit).
                    with m.If(mc_sync.any()):
                        with m.If((mc_sync & fault4).any()):
                            m.next = "Drain"
                    first = m.Elif
                with first((mx_m > max_m) | (mx_k > p["k_max"]) | ~mx_kv & (mx_n == 0)):
                    fail(ErrorCode.SHAPE)
                with m.Elif(misaligned(mx_xa, W) | ~mx_kv & misaligned(mx_wa, W)):
                    fail(ErrorCode.ALIGN)
                with m.Elif((mx_xend_q > size) | ~mx_kv & (mx_wend_q > size)):
                    fail(ErrorCode.SRAM_RANGE)
                with m.Elif(~is_raw & misaligned(mx_c, 4)):
                    fail(ErrorCode.ALIGN)
                with m.Elif(~is_raw & (mx_tend_q > size)):
                    fail(ErrorCode.SRAM_RANGE)
                with m.Elif((mx_td == 1) & mx_ya[0] | (mx_td == 2) & mx_ya[:2].any()):
                    fail(ErrorCode.ALIGN)
                with m.Elif(mx_yend_q > size):
                    fail(ErrorCode.SRAM_RANGE)
                with m.Elif(mx_kv & ((mx_n == 0) | mx_n[16:].any() | mx_wa[16:].any())):
                    fail(ErrorCode.KV_RANGE)    # beyond the KV store's 16-bit fields
                with m.Elif(mx_kv):
                    m.next = "Kv-Stream"
                with m.Else():
                    m.next = "Matrix-Issue"

            with m.State("Kv-Stream"):
                # KVQK: the KV store checks the slot and the positions and, if they are
                # inside the layout, offers the matrix command over the slot's K records.
                m.d.comb += [st.eq(ControllerState.RUNNING), self.matrix_active.eq(1)]
                m.d.comb += self.o_kv.valid.eq(1)
                m.d.sync += mjob_sent.eq(0)
                with m.If(self.o_kv.ready):
                    m.next = "Kv-Stream-Job"

            with m.State("Kv-Stream-Job"):
                # The KV store refused (error) or offers its matrix command (kv_stream, with
                # the rows' header address on kv_k_hdr) to the matrix unit through the
                # tile's command mux; the write-back job goes with it.  Done when both were
                # taken (the store is idle again).
                m.d.comb += [st.eq(ControllerState.RUNNING), self.matrix_active.eq(1)]
                with m.If(self.kv_error):
                    kv_refused()
                with m.Else():
                    m.d.comb += self.o_mjob.valid.eq(~mjob_sent & self.kv_stream)
                    job_done = mjob_sent | self.o_mjob.valid & self.o_mjob.ready
                    m.d.sync += mjob_sent.eq(job_done)
                    with m.If(job_done & ~self.kv_busy):
                        if ov:
                            m.d.sync += [mx_busy.eq(1), mx_fault.eq(0), mx_pc.eq(pc)]
                            issued(0)
                            do_retire()
                        else:
                            m.next = "Matrix-Run"

            with m.State("Matrix-Issue"):
                m.d.comb += [st.eq(ControllerState.RUNNING), self.matrix_active.eq(1)]
                m.d.comb += [self.o_mcmd.valid.eq(~mcmd_sent), self.o_mjob.valid.eq(~mjob_sent)]
                cmd_done = mcmd_sent | self.o_mcmd.ready
                job_done = mjob_sent | self.o_mjob.ready
                m.d.sync += [mcmd_sent.eq(cmd_done), mjob_sent.eq(job_done)]
                with m.If(cmd_done & job_done):
                    if ov:
                        # Retire now; the scoreboard tracks it until the write-back ends.
                        m.d.sync += [mx_busy.eq(1), mx_fault.eq(0), mx_pc.eq(pc)]
                        issued(0)
                        do_retire()
                    else:
                        m.next = "Matrix-Run"

            with m.State("Matrix-Run"):
                m.d.comb += [st.eq(ControllerState.RUNNING), self.matrix_active.eq(1)]
                with m.If(~self.mjob_busy):
                    with m.If(self.mjob_error):
                        fail(ErrorCode.ARITH)
                    with m.Else():
                        do_retire()

            if ov:
                with m.State("Drain"):
                    # Wait for every unit; the first error in program order wins (an entry's
                    # over a later instruction's, which fail() recorded).
                    m.d.comb += st.eq(ControllerState.RUNNING)
                    with m.If(~busy4.any()):
                        firsts = [fault3[u] & ~Cat(*(fault3[v] & older[(v, u)]
                                                     for v in range(3) if v != u)).any()
                                  for u in range(3)]
                        with m.If(firsts[0]):
                            m.d.sync += [error.eq(ErrorCode.ARITH), err_pc.eq(mx_pc)]
                        with m.Elif(firsts[1]):
                            m.d.sync += [error.eq(vx_code), err_pc.eq(vx_pc)]
                        with m.Elif(firsts[2]):
                            m.d.sync += [error.eq(nt_code), err_pc.eq(nt_pc)]
                        m.next = "Error"

        # The instruction memory's address: the start PC offered on `i_start` in `Idle` and
        # `Halted` (the network interface's start flit), the PC in `Fetch`, a skipped LOOP's
        # end in `Loop`, else the next PC through the loop stack (`npc_pc`); from registers
        # only but the start, so no decode path reaches it.
        m.d.comb += ir.addr.eq(Mux(fsm.ongoing("Idle") | fsm.ongoing("Halted"),
                                   self.i_start.payload,
                                   Mux(fsm.ongoing("Fetch"), pc,
                                       Mux(fsm.ongoing("Loop") & (n_q == 0), npc_end,
                                           npc_pc))))
        # The port's word is the next PC's in a cycle after one that addressed it with
        # `npc_pc` and retired nothing (the PC and the loop stack are unchanged since; a
        # skipping `Loop`, the one other address, always retires or fails).  Every retire
        # loads the instruction register: one that goes to `Refill` (not settled, or a skip)
        # loads the wrong word, which `Refill` replaces with the right one.
        m.d.sync += settled.eq(~retire & ~fsm.ongoing("Fetch"))
        m.d.comb += load_d.eq(retire | fetch_now | fsm.ongoing("Refill"))

        # ---- command payloads, driven whatever the state (no multiplexer chain of the FSM's
        # conditions in front of them: 9,707 -> 9,306 LUT slots at a fixed 20 ns mapping,
        # docs/fpga.md "Session 14"; a consumer looks at them only while `valid`, which the
        # states drive) ---------------------------------------------------------------------
        nc = self.o_net.payload
        m.d.comb += [
            nc.op.eq(Mux(ins.op == Opcode.SEND, NetOp.SEND, NetOp.DONE)),
            nc.src.eq(a_val), nc.dst.eq(d_val), nc.length.eq(n_val), nc.rect.eq(ins.imm),
            nc.counter.eq(ins.c), nc.code.eq(ins.imm),
        ]
        vc = self.o_vec.payload
        m.d.comb += [
            vc.op.eq(ins.op), vc.td.eq(ins.td), vc.ts.eq(ins.ts.as_value()), vc.c.eq(ins.c),
            vc.imm.eq(ins.imm), vc.d.eq(d_q), vc.a.eq(a_q), vc.b.eq(b_q), vc.n.eq(n_q),
        ]
        kc = self.o_kv.payload
        with m.If(fsm.ongoing("Kv-Stream")):        # KVQK's STREAM_K
            m.d.comb += [
                kc.op.eq(KvOp.STREAM_K),
                kc.layer.eq(mx_wa[8:16]),
                kc.head.eq(mx_wa[:8]),
                kc.pos.eq((mx_n - 1)[:16]),
                kc.args.stream.x_base.eq(x_first[wb:]),
                kc.args.stream.x_stride.eq(rec[wb:]),
                kc.args.stream.m.eq(mx_m),
                kc.args.stream.x_keep.eq(0),
            ]
        with m.Else():                              # KVAPP's APPEND (state Issue)
            m.d.comb += [
                kc.op.eq(KvOp.APPEND),
                kc.layer.eq(d_q[8:16]),
                kc.head.eq(d_q[:8]),
                kc.pos.eq(n_q[:16]),
                kc.args.append.k_src.eq(a_q[wb:]),
                kc.args.append.v_src.eq(b_q[wb:]),
            ]
        cmd = self.o_mcmd.payload
        m.d.comb += [
            cmd.w_base.eq(w_first[wb:]), cmd.w_stride.eq(w_stride[wb:]), cmd.n.eq(mx_n),
            cmd.k.eq(mx_k), cmd.x_base.eq(x_first[wb:]), cmd.x_stride.eq(x_stride[wb:]),
            cmd.m.eq(mx_m), cmd.x_keep.eq(0),
        ]
        job = self.o_mjob.payload
        m.d.comb += [
            job.op.eq(mx_op),       # KVQK's is MATQK
            job.td.eq(mx_td), job.m.eq(mx_m), job.x_hdr.eq(mx_xa[wb:]),
            job.x_stride.eq(rec[wb:]),
            # KVQK (state Kv-Stream-Job): the rows' header from the KV store
            job.w_hdr.eq(Mux(mx_kv, self.kv_k_hdr, mx_wa[wb:])),
            job.w_stride.eq(rec[wb:]), job.c.eq(mx_c), job.y.eq(mx_ya),
            job.y_stride.eq(y_stride),
        ]

        if ov:
            with m.If(mx_busy & ~self.mjob_busy):
                m.d.sync += mx_busy.eq(0)
                with m.If(self.mjob_error):
                    m.d.sync += mx_fault.eq(1)
            with m.If(mx_busy):
                m.d.comb += self.matrix_active.eq(1)

            with m.If(vx_busy):
                m.d.comb += self.i_vec_done.ready.eq(1)
                with m.If(self.i_vec_done.valid):
                    code = self.i_vec_done.payload.error
                    m.d.sync += [vx_busy.eq(0), vx_fault.eq(code != ErrorCode.NONE),
                                 vx_code.eq(code)]
            with m.If(kq_busy & ~self.kv_busy):
                m.d.sync += kq_busy.eq(0)
            with m.If(nt_busy):
                m.d.comb += self.i_net_done.ready.eq(1)
                with m.If(self.i_net_done.valid):
                    code = self.i_net_done.payload.error
                    m.d.sync += [nt_busy.eq(0), nt_fault.eq(code != ErrorCode.NONE),
                                 nt_code.eq(code)]

            # The vector entry's ranges and PC are loaded in every cycle in which the entry
            # is not live (an FPGA timing cut: their enable from two registers, not from the
            # hazard compare and the dispatch in Issue).  A vector instruction issues only
            # with the entry not live (it waits for the entry), from the decode register,
            # which holds in Issue: so the entry takes its own ranges in its issue cycle, and
            # they hold while it is live.
            # The KV entry's ranges likewise, in every cycle in which it is not busy (a
            # KVAPP issues with the entry not busy, from the held decode register).
            with m.If(~kq_busy):
                m.d.sync += [kr_k[0].eq(s_a[0]), kr_k[1].eq(s_a[1]),
                             kr_v[0].eq(s_b[0]), kr_v[1].eq(s_b[1])]
            with m.If(~vx_busy & ~vx_fault):
                m.d.sync += [vx_pc.eq(pc),
                             vr_a[0].eq(s_a[0]), vr_a[1].eq(s_a[1]),
                             vr_b[0].eq(s_b[0]), vr_b[1].eq(s_b[1]),
                             vr_c[0].eq(s_c[0]), vr_c[1].eq(s_c[1]),
                             vr_d[0].eq(s_d[0]), vr_d[1].eq(s_d[1]),
                             vr_b_en.eq(uses_b), vr_c_en.eq(is_rms)]

            # The scoreboard compare (chipotle.isa.core: vector_footprint, matrix_footprint,
            # send_footprint, mem_footprint, hazard; the same formulas): a read of the new
            # instruction meets an entry's write (RAW), its write meets the entry's write
            # (WAW) or reads (WAR).  Scalar and control instructions never wait; a vector
            # instruction waits for the vector entry and the entries it has a hazard with;
            # LD, ST and COPY for the entries they have a hazard with; a matrix instruction
            # for the matrix entry here and its hazards in Matrix-Check; every other
            # instruction (SEND included) for every entry.
            def meet(r1, r2):       # every end as `cl`
                assert all(len(Value.cast(v)) <= AW + 1 for v in (*r1, *r2))
                return (r1[0] < r2[1]) & (r2[0] < r1[1])

            # the matrix instruction's ranges, from the registered ends (Matrix-Ends)
            k_map = (cl(self.kv_map_lo << wb), cl(self.kv_map_hi << wb))
            m_x = (cl(mx_xa), mx_xend_q)
            m_w = (Mux(mx_kv, k_map[0], cl(mx_wa)), Mux(mx_kv, k_map[1], mx_wend_q))
            m_t = (cl(mx_c), mx_tend_q)
            m_y = (cl(mx_ya), mx_yend_q)
            # the `is_issue` instruction's slots (above: `s_a` .. `s_d`); ST's `a` is the
            # value stored, not an address
            s_w = (Mux(is_kvapp, k_map[0], s_d[0]), Mux(is_kvapp, k_map[1], s_d[1]))
            f_reads = [(is_vec | is_ld | is_copy | is_kvapp | is_table, s_a),
                       (is_vec & uses_b | is_kvapp, s_b), (is_vec & is_rms, s_c)]
            f_writes = [(is_vec | is_st | is_copy | is_kvapp, s_w)]

            def hz(e_reads, e_write):
                terms = [en & meet(r, e_write) for en, r in f_reads + f_writes]
                terms += [wen & ren & meet(w, r) for wen, w in f_writes for ren, r in e_reads]
                return Cat(*terms).any()

            hz_mx = hz([(C(1, 1), m_x), (C(1, 1), m_w), (~is_raw, m_t)], m_y)
            hz_vx = hz([(C(1, 1), vr_a), (vr_b_en, vr_b), (vr_c_en, vr_c)], vr_d)
            hz_nt = hz([(C(1, 1), nr_src)], nr_dst)
            hz_kv = hz([(C(1, 1), kr_k), (C(1, 1), kr_v)], k_map)
            # KVAPP: its own entry (the store), hazards with the others; TABLE: the vector
            # entry (it loads the vector unit's tables), hazards with the others on its
            # source; KVQK: the KV entry (it uses the store), its hazards in Matrix-Check
            # Execute (the `is_issue` instructions wait in Issue, not here): by opcode only,
            # pre-decoded (`predecode`: `need`)
            m.d.comb += ex_sync.eq(pd.need & live4)
            # Issue: the ranges from the decode register
            is_need = Cat(hz_mx, Mux(is_mem | is_kvapp, hz_vx, 1), hz_nt, Mux(is_kvapp, 1, hz_kv))
            m.d.comb += is_sync.eq(is_need & live4)
            # Issue-Go (`go_q`, used in Issue from its second cycle on): the same compare
            # with the entries as they will be in the next cycle, registered.  In Issue no
            # entry becomes live (only an issue makes one) and a live entry's ranges hold,
            # so only completions change it: an entry stays live unless its unit finishes
            # without an error now.  With the COPY's range checks (a COPY of 0 bytes
            # retires from it).  0 in the first Issue cycle, which follows Execute.
            vec_ok = self.i_vec_done.payload.error == ErrorCode.NONE
            net_ok = self.i_net_done.payload.error == ErrorCode.NONE
            live4_n = Cat(mx_busy & self.mjob_busy | mx_fault
                          | mx_busy & ~self.mjob_busy & self.mjob_error,
                          vx_busy & ~(self.i_vec_done.valid & vec_ok) | vx_fault,
                          nt_busy & ~(self.i_net_done.valid & net_ok) | nt_fault,
                          kq_busy & self.kv_busy)
            m.d.sync += go_q.eq(fsm.ongoing("Issue") & ~(is_need & live4_n).any()
                                & ~(is_copy & (past(s_a[1]) | past(s_d[1]))))

            mat_vs_vx = (meet(m_x, vr_d) | meet(m_w, vr_d) | ~is_raw & meet(m_t, vr_d)
                         | meet(m_y, vr_d) | meet(m_y, vr_a) | vr_b_en & meet(m_y, vr_b)
                         | vr_c_en & meet(m_y, vr_c))
            mat_vs_nt = (meet(m_x, nr_dst) | meet(m_w, nr_dst) | ~is_raw & meet(m_t, nr_dst)
                         | meet(m_y, nr_dst) | meet(m_y, nr_src))
            mat_vs_kv = (meet(m_x, k_map) | meet(m_w, k_map) | ~is_raw & meet(m_t, k_map)
                         | meet(m_y, k_map) | meet(m_y, kr_k) | meet(m_y, kr_v))
            m.d.comb += mc_sync.eq(Cat(C(0, 1), mat_vs_vx, mat_vs_nt, mat_vs_kv) & live4)

        return m
