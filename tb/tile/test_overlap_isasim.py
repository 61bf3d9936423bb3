"""The overlap issue policy in the ISA simulator (``IsaConfig.overlap``): footprints, the
busy-until clock and the deferred ``ARITH`` (the RTL side is ``cocotb_core.overlap``)."""

from __future__ import annotations

import numpy as np
import pytest

from chipotle.isa import assemble
from chipotle.isa.core import (
    CostModel,
    Dtype,
    ErrorCode,
    IsaConfig,
    Opcode,
    hazard,
    matrix_footprint,
    ranges_overlap,
    scoreboard_limit,
    vector_footprint,
)
from chipotle.isa.kv import KvLayout
from chipotle.isasim import IsaSim, TileState

W = 8
K, N, M = 40, 6, 2
XA, WA, CA, YA, F = 0x0, 0x200, 0x400, 0x500, 0x800


def _sim(overlap, *, arith=False, seed=5):
    cfg = IsaConfig(sram_bytes=4096, word_bytes=W, max_m=4, overlap=overlap)
    sim = IsaSim(1, 1, cfg)
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, 4096).astype(np.uint8)
    rec = cfg.record_bytes(K)
    for r in range(M):                              # X records: mu, b small
        image[XA + r * rec:XA + r * rec + 4] = np.array([300, 100 if arith else 2],
                                                        "<i2").view(np.uint8)
    image[CA:CA + 4 * N] = np.array([[1000, 20]] * N, "<u2").reshape(-1).view(np.uint8)
    sim.write((0, 0), 0, image)
    return sim


def _run(sim, text):
    sim.load_program((0, 0), assemble(text))
    sim.start((0, 0))
    sim.run()
    return sim.tile((0, 0))


MATMUL = f"matmul.i16 {YA:#x}, {XA:#x}, {WA:#x}, {CA:#x}, {N}, {K}, {M}"


def test_matrix_footprint_is_exact():
    """The Y range is exactly the bytes the simulator writes; the reads bound X, W, table."""
    reads, write = matrix_footprint(Opcode.MATMUL, YA, XA, WA, N, CA, M, K, Dtype.I16, W)
    cfg = IsaConfig(word_bytes=W)
    assert write == (YA, YA + (M - 1) * cfg.pad(2 * N) + 2 * N)
    assert reads[0] == (XA, XA + W + (M - 1) * cfg.record_bytes(K) + K)
    assert reads[1] == (WA, WA + (N - 1) * cfg.pad(K) + K)
    assert reads[2] == (CA, CA + 4 * N)
    # N = 0 (a SHAPE error after its hazard wait): W to the end, as the controller's clamped
    # end of a negative product; it meets a write anywhere above W's start
    reads0, _ = matrix_footprint(Opcode.MATMUL, YA, XA, WA, 0, CA, M, K, Dtype.I16, W)
    assert reads0[1] == (WA, 1 << 64)
    limit = scoreboard_limit(4096)
    assert ranges_overlap(reads0[1], (WA + 4000, WA + 4001), limit)
    # the same operands on two backgrounds around Y: a byte equal in both runs was written
    sims = []
    for fill in (0x00, 0xA5):
        s = _sim(False)
        s.write((0, 0), YA - 16, np.full(64, fill, np.uint8))
        _run(s, MATMUL + "\nhalt")
        sims.append(s.tile((0, 0)).sram)
    a, b = sims
    written = {addr for addr in range(YA - 16, YA + 48) if a[addr] == b[addr]}
    assert written <= set(range(*write)), sorted(written - set(range(*write)))
    assert write[0] in written and write[1] - 1 in written


@pytest.mark.parametrize("op, b_used", [(Opcode.VADD, True), (Opcode.RSUM, False),
                                        (Opcode.WSUM, True)])
def test_vector_footprint(op, b_used):
    reads, write = vector_footprint(op, 0x100, 0x200, 0x300, 10, 64, 8, W)
    assert reads[0] == (0x200, 0x200 + 40)
    assert (len(reads) == 2) == b_used
    if op == Opcode.WSUM:
        assert reads[1] == (0x300, 0x300 + 10 * 64 + 32) and write == (0x100, 0x100 + 32)
    else:
        assert write == (0x100, 0x100 + 40 + W)
    assert ranges_overlap((0, 4), (3, 8)) and not ranges_overlap((0, 4), (4, 8))


def test_ranges_overlap_limit():
    """With the scoreboard's limit (the controller's AW + 1-bit ends): ranges inside the SRAM
    meet as without it; a range from the limit on meets nothing, however long."""
    size = 384 * 1024
    limit = scoreboard_limit(size)
    assert limit == 1 << 19 and scoreboard_limit(32768) == 65536   # above a power of two
    inside = [(0, 4), (3, 8), (4, 8), (size - 8, size), (100, 100), (0, size)]
    for r1 in inside:
        for r2 in inside:
            assert ranges_overlap(r1, r2, limit) == ranges_overlap(r1, r2), (r1, r2)
    # ends beyond the limit saturate: a range reaching past it still meets one inside
    assert ranges_overlap((size - 8, 2 ** 32), (size - 4, size), limit)
    # a range wholly beyond the limit: met without it, not with it
    beyond = (limit + 16, limit + 64)
    assert ranges_overlap(beyond, (limit, 2 ** 33)) and not ranges_overlap(
        beyond, (limit, 2 ** 33), limit)
    assert not ranges_overlap(beyond, (0, 2 ** 32), limit)
    assert hazard([beyond], None, [], (0, 2 ** 32)) and not hazard(
        [beyond], None, [], (0, 2 ** 32), limit)


INDEPENDENT = f"{MATMUL}\nvadd.i16.i16 {F:#x}, {F + 0x80:#x}, {F + 0x100:#x}, 32\nhalt"
DEPENDENT = f"{MATMUL}\nvadd.i16.i16 {F:#x}, {YA:#x}, {F + 0x100:#x}, 4\nhalt"


def test_overlap_same_state_fewer_cycles():
    """The same SRAM under both policies; the estimate hides independent vector work under
    the matmul and not dependent work."""
    cyc = {}
    for prog in (INDEPENDENT, DEPENDENT):
        serial, ov = _run(_sim(False), prog), _run(_sim(True), prog)
        assert serial.state == ov.state == TileState.HALTED
        assert np.array_equal(serial.sram, ov.sram)
        cyc[prog] = serial.perf.cycles, ov.perf.cycles
    s, o = cyc[INDEPENDENT]
    assert o < s - 20, cyc
    s, o = cyc[DEPENDENT]
    # only the vadd's decode-register cycle overlaps the wait for the matmul
    assert o == s - CostModel().decode, cyc


def test_arith_deferred_to_the_sync_point():
    """ARITH of a background matmul: the independent vector instruction after it runs, the
    reader of Y stops the tile with the matmul's PC; serially nothing after it runs."""
    prog = (f"{MATMUL}\nvadd.i16.i16 {F:#x}, {F + 0x80:#x}, {F + 0x100:#x}, 8\n"
            f"vadd.i16.i16 {F + 0x200:#x}, {YA:#x}, {F + 0x100:#x}, 4\nhalt")
    before = _sim(True, arith=True).tile((0, 0)).sram.copy()
    for overlap in (False, True):
        t = _run(_sim(overlap, arith=True), prog)
        assert (t.state, t.error, t.error_pc) == (TileState.ERROR, ErrorCode.ARITH, 0)
        first = not np.array_equal(t.sram[F:F + 16], before[F:F + 16])
        assert first == overlap
        assert np.array_equal(t.sram[F + 0x200:F + 0x208], before[F + 0x200:F + 0x208])
        assert t.perf.instructions == (2 if overlap else 0)


def test_later_error_after_arith_reports_arith():
    prog = f"{MATMUL}\nvadd.i16.i16 {F + 1:#x}, {F:#x}, {F:#x}, 4\nhalt"
    t = _run(_sim(True, arith=True), prog)
    assert (t.error, t.error_pc) == (ErrorCode.ARITH, 0)
    t = _run(_sim(True), prog)
    assert (t.error, t.error_pc) == (ErrorCode.ALIGN, 1)


# -- the general policy: vector and SEND in the background too ------------------------------

VEC = f"vadd.i16.i16 {F:#x}, {F + 0x100:#x}, {F + 0x200:#x}, 64"     # independent of MATMUL
SEND = f"send {F + 0x400:#x}, {F + 0x100:#x}, 64, (0, 0), 1"          # A -> D on the tile


@pytest.mark.parametrize("prog, overlaps", [
    (f"{VEC}\n{MATMUL}", True),                                      # matrix under vector
    (f"vadd.i16.i16 {WA:#x}, {F:#x}, {F + 0x80:#x}, 8\n{MATMUL}", False),        # RAW (W)
    (f"vadd.i16.i16 {F:#x}, {YA:#x}, {F + 0x100:#x}, 8\n{MATMUL}", False),       # WAR (Y)
    (f"vadd.i16.i16 {YA:#x}, {F:#x}, {F + 0x100:#x}, 8\n{MATMUL}", False),       # WAW (Y)
    (f"{SEND}\n{MATMUL}", True),                                     # matrix under send
    (f"{SEND}\nvadd.i16.i16 {F + 0x100:#x}, {F:#x}, {F:#x}, 8", False),          # WAR (A)
    (f"{SEND}\nvadd.i16.i16 {F:#x}, {F + 0x400:#x}, {F:#x}, 8", False),          # RAW (D)
    (f"{VEC}\n{SEND}", False),                                       # send releases
    (f"{MATMUL}\n{SEND}", False),
    (f"{VEC}\ncopy {F + 0x400:#x}, {F + 0x180:#x}, 40", True),           # copy under vector
    (f"{MATMUL}\ncopy {F + 0x400:#x}, {F + 0x100:#x}, 40", True),        # copy under matrix
    (f"{VEC}\ncopy {F + 0x400:#x}, {F + 0x20:#x}, 40", False),            # RAW
    (f"{MATMUL}\ncopy {WA + 8:#x}, {F:#x}, 40", False),                   # WAR
    (f"{SEND}\ncopy {F + 0x100:#x}, {F:#x}, 40", False),                  # WAR
])
def test_units_overlap_iff_no_hazard(prog, overlaps):
    """Same SRAM under both policies; the estimate is the serial one minus the shorter of
    the two (they overlap) or the serial one but for the issue cycles (they do not)."""
    head, tail = prog.split("\n")
    cyc = {}
    for text in (head, tail, prog):
        serial, ov = _run(_sim(False), text + "\nhalt"), _run(_sim(True), text + "\nhalt")
        assert serial.state == ov.state == TileState.HALTED, (serial.error, ov.error)
        assert np.array_equal(serial.sram, ov.sram)
        cyc[text] = ov.perf.cycles
    both, h, t = cyc[prog], cyc[head], cyc[tail]
    assert (both < h + t - min(h, t) // 2) == overlaps, (both, h, t)


# -- KVAPP (the KV store's entry) and TABLE (the vector unit's) ------------------------------

KVL = KvLayout(n_layers=1, n_kv_heads=2, head_size=64, max_pos=4, base=(4096 - 1088) // W,
               word_bytes=W, k_header=True)                        # the SRAM's last 1088 bytes
KS, VS = F + 0x300, F + 0x380                                       # K record, V row sources
APP = f"kvapp 1, {KS:#x}, {VS:#x}, 2"                               # (0, 1) at position 2
TAB = f"table exp2, {F + 0x100:#x}"


def _kv_sim(overlap):
    sim = _sim(overlap)
    sim.set_kv_layout((0, 0), KVL)
    return sim


@pytest.mark.parametrize("prog, overlaps", [
    (f"{MATMUL}\n{APP}", True),                                      # kvapp under matrix
    (f"{APP}\n{MATMUL}", True),                                      # matrix under kvapp
    (f"{APP}\n{VEC}", True),                                         # vector under kvapp
    (f"{APP}\nrsum.i32.i8 {F:#x}, {W * KVL.v_row(0, 1, 2):#x}, 64", False),   # RAW (map)
    (f"{APP}\nrsum.i32.i16 {KS + 8:#x}, {F:#x}, 4", False),          # WAR (its K source)
    (f"vadd.i16.i16 {VS:#x}, {F:#x}, {F + 0x80:#x}, 32\n{APP}", False),       # RAW (V source)
    (f"{APP}\nkvapp 0, {KS:#x}, {VS:#x}, 3", False),                 # the store: one at a time
    (f"{APP}\n{SEND}", False),                                       # send releases
    (f"{MATMUL}\n{TAB}", True),                                      # table under matrix
    (f"{SEND}\n{TAB}", True),                                        # table under send
    (f"{MATMUL}\ntable exp2, {YA:#x}", False),                       # RAW (Y)
    (f"{VEC}\n{TAB}", False),                                        # the vector unit's
])
def test_kvapp_and_table_overlap_iff_no_hazard(prog, overlaps):
    """KVAPP runs in the background under the KV store's entry (reads its sources, writes
    the whole KV map), TABLE waits only for the vector unit and its RAW hazards: same SRAM
    under both policies, and the estimate overlaps iff there is no hazard."""
    head, tail = prog.split("\n")
    cyc = {}
    for text in (head, tail, prog):
        serial = _run(_kv_sim(False), text + "\nhalt")
        ov = _run(_kv_sim(True), text + "\nhalt")
        assert serial.state == ov.state == TileState.HALTED, (serial.error, ov.error)
        assert np.array_equal(serial.sram, ov.sram)
        cyc[text] = ov.perf.cycles
    both, h, t = cyc[prog], cyc[head], cyc[tail]
    assert (both < h + t - min(h, t) // 2) == overlaps, (both, h, t)


def test_kvapp_errors_are_not_deferred():
    """A refused KVAPP stops the tile at once (its checks come before it retires), after the
    matmul before it finished."""
    t = _run(_kv_sim(True), f"{MATMUL}\nkvapp 0, {KS:#x}, {VS:#x}, {KVL.max_pos}\nli r1, 3\nhalt")
    assert (t.state, t.error, t.error_pc) == (TileState.ERROR, ErrorCode.KV_RANGE, 1)
    assert t.regs[1] == 0


def test_vector_error_deferred():
    """A failed background vector instruction: the independent matmul after it runs, the
    next vector instruction (the same unit) stops the tile with the vector PC; serially the
    matmul does not run."""
    prog = (f"vadd.i16.i16 {F + 1:#x}, {F:#x}, {F:#x}, 4\n{MATMUL}\nli r1, 5\n"
            f"rsum.i32.i16 {F + 0x300:#x}, {F:#x}, 4\nhalt")
    before = _sim(False).tile((0, 0)).sram.copy()
    for overlap in (False, True):
        t = _run(_sim(overlap), prog)
        assert (t.state, t.error, t.error_pc) == (TileState.ERROR, ErrorCode.ALIGN, 0)
        assert (not np.array_equal(t.sram[YA:YA + 8], before[YA:YA + 8])) == overlap
        assert t.regs[1] == (5 if overlap else 0)
        assert t.perf.instructions == (3 if overlap else 0)
        assert np.array_equal(t.sram[F + 0x300:F + 0x310], before[F + 0x300:F + 0x310])


BAD_VEC = f"vadd.i16.i16 {F + 1:#x}, {F:#x}, {F:#x}, 4"             # ALIGN
BAD_SEND = "send 0, 0, 8, (0, 0), 99"                               # COUNTER
ILLEGAL = (1 << 128) - 1                                            # reserved opcode


@pytest.mark.parametrize("prog, arith, code, pc", [
    (f"{BAD_SEND}\n{MATMUL}", False, ErrorCode.COUNTER, 0),
    (f"{BAD_SEND}\n{MATMUL}", True, ErrorCode.COUNTER, 0),          # two faults
    (f"{BAD_VEC}\n{MATMUL}", True, ErrorCode.ALIGN, 0),
    (f"{MATMUL}\n{BAD_VEC}", True, ErrorCode.ARITH, 0),
    (f"{BAD_SEND}\n{BAD_VEC}", False, ErrorCode.COUNTER, 0),
    (f"{BAD_VEC}\nli r1, 1\n.word {ILLEGAL:#x}", False, ErrorCode.ALIGN, 0),  # later error
    (f"li r1, 1\n.word {ILLEGAL:#x}\n{BAD_VEC}", False, ErrorCode.ILLEGAL, 1),
    ("send 0, 4, 8, (0, 0), 1\nli r1, 1\ndone 3", False, ErrorCode.ALIGN, 0),  # done drains
    (f"{BAD_SEND}\nwait 1, 1", False, ErrorCode.COUNTER, 0),        # wait drains, no deadlock
])
def test_first_error_in_program_order(prog, arith, code, pc):
    """Failed background instructions and later errors: the oldest in program order wins."""
    sim = _sim(True, arith=arith)
    t = _run(sim, prog + "\nhalt")
    assert (t.state, t.error, t.error_pc) == (TileState.ERROR, code, pc), t.error_message
    assert not sim.events                                           # done never ran
