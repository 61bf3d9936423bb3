"""``ChipConfig.vec_slots``: the vector unit's result slots, from the text form of a
configuration to the ISA simulator's estimate and the tile's ``VectorUnit``."""

from __future__ import annotations

import re

import pytest

from chipotle.config import CONFIGS, MAX_VEC_SLOTS, ChipConfig
from chipotle.isa.core import Dtype, Instr, Opcode, instr_cycles, vector_cycles
from tbcommon.elab import never_built


def test_named_configurations_slots():
    """The default and small chips have 4 result slots; the ULX3S board's chip keeps 3 (its
    Verilog unchanged, docs/performance.md session 12)."""
    assert CONFIGS["default"].vec_slots == 4 == ChipConfig().vec_slots
    assert CONFIGS["small"].vec_slots == 4
    assert CONFIGS["ulx3s"].vec_slots == 3


def test_vec_slots_parsed_and_passed_on():
    c = ChipConfig.from_string("ulx3s,vec_slots=5")
    assert c == CONFIGS["ulx3s"].replace(vec_slots=5)
    assert ChipConfig.from_string("vec_slots=0x2").vec_slots == 2
    assert ChipConfig.from_string("small,vec_slots=1").vec_slots == 1
    assert c.isa_config().cost.vec_slots == 5
    assert c.tile_config().vec_slots == 5
    assert c.tile_config().isa_config().cost.vec_slots == 5
    assert ChipConfig(**c.as_dict()) == c       # the RTL jobs rebuild it from as_dict


@pytest.mark.parametrize(("text", "expect"), [
    ("vec_slots=0", "'vec_slots=0': vec_slots must be a positive integer, not 0"),
    ("vec_slots=-3", "'vec_slots=-3': vec_slots must be a positive integer, not -3"),
    # in the text's own terms: the part that set the field
    ("default,mesh=0x4", "'mesh=0x4': mesh_width must be a positive integer, not 0"),
    ("small,M=0", "'M=0': max_m (M) must be a positive integer, not 0"),
    ("mesh=16x16", "'mesh=16x16': the mesh must be 1..15 x 1..16 tiles (the host link takes "
                   "the last column address), not 16 x 16"),
    ("W=12", "'W=12': word_bytes must be a power of two (the SRAM's word and bank "
             "addressing), not 12"),
    ("vec_slots=four", "bad value 'four' for 'vec_slots' in 'vec_slots=four': expected an "
                       "integer"),
    ("vec_slots=2.5", "bad value '2.5' for 'vec_slots' in 'vec_slots=2.5': expected an "
                      "integer"),
    ("default,vec_slots", "'vec_slots' needs a value, e.g. vec_slots=<integer>"),
])
def test_bad_vec_slots_refused(text, expect):
    with pytest.raises(ValueError) as info:
        ChipConfig.from_string(text)
    assert str(info.value) == expect


def test_bad_vec_slots_refused_by_the_isa_and_the_model():
    from chipotle.isa.core import CostModel, IsaConfig
    with pytest.raises(ValueError, match=r"`cost.vec_slots` must be a positive integer, not 0"):
        IsaConfig(cost=CostModel(vec_slots=0))
    with pytest.raises(ValueError, match=r"`slots` must be a positive integer, not 0"):
        vector_cycles(Opcode.SILU, Dtype.I16, Dtype.I16, 64, 8, slots=0)


def test_estimate_follows_the_slots():
    """A short writing pass (reqi.i8.i32 at R = 2: 2 + 1 port cycles per chunk) is
    credit-bound with 3 slots and port-bound with 4, and the estimate says so."""
    ins = Instr(Opcode.REQI, td=Dtype.I8, ts=Dtype.I32.value, imm=3, c=4)
    est = {s: instr_cycles(ins, ChipConfig(vec_slots=s).isa_config(), 172) for s in (3, 4)}
    unit = {s: vector_cycles(Opcode.REQI, Dtype.I8, Dtype.I32, 172, 3, 4, slots=s,
                             read_words=2) for s in (3, 4)}
    assert unit[3] == 80            # docs/tile.md, session 11's table (R = 2)
    assert unit[4] < unit[3]
    assert est == {s: 2 + unit[s] for s in (3, 4)}      # issue + decode + the unit's


@pytest.mark.parametrize("name", ["default", "ulx3s"])
def test_tile_builds_the_vector_unit_with_the_slots(name):
    """The tile's ``VectorUnit`` gets the configuration's slot count (as the estimate)."""
    from chipotle.hw.tile.tile import TileCore
    cfg = CONFIGS[name].tile_config()
    with never_built():        # elaborated one level by hand: its submodules never built
        m = TileCore(cfg).elaborate(None)
        slots = m.submodules.vector.slots
        del m
    assert slots == CONFIGS[name].vec_slots == cfg.isa_config().cost.vec_slots


@pytest.mark.parametrize("text, message", [
    ("default,n_banks=3", "n_banks must be a power of two"),
    ("default,sram_kib=96,n_banks=3", "n_banks must be a power of two"),
    ("default,word_bytes=24", "word_bytes must be a power of two"),
    ("default,vec_slots=9", "vec_slots must be at most 8"),
    ("default,V=3", r"lanes \(V\) must be an even number from 2 to 128 .*not 3"),
    ("default,V=1", r"lanes \(V\) must be an even number"),
    # wider vector units are not built (a fresh user's V=1000 ended in a RecursionError)
    ("default,V=130", r"lanes \(V\) must be an even number from 2 to 128 .*not 130"),
    ("default,V=1000", r"lanes \(V\) must be an even number from 2 to 128 .*not 1000"),
    ("ulx3s,sram_kib=512,sram_kib=64", r"'sram_kib=64': sram_bytes is given twice"),
    ("default,V=4,lanes=8", r"'lanes=8': lanes is given twice"),
    ("default,mesh=2x2,mesh_width=3", r"mesh_width is given twice"),
    # the tile's own limits (the RTL flows refused these with a traceback, isasim ran them)
    ("default,noc_fifo_depth=4", r"gateware .*`mcast_max_flits` must be between 2 and "
                                 r"noc_fifo_depth \(4\), not 8"),
    ("default,mcast_max_flits=17", r"between 2 and noc_fifo_depth \(16\), not 17"),
    ("default,imem_words=70000", r"`imem_words` must be an integer from 1 to 65536"),
    ("default,n_counters=300", r"`n_counters` must be an integer from 1 to 256"),
])
def test_config_refuses_what_the_hardware_cannot_build(text, message):
    """A geometry the SRAM or the vector unit refuses is refused by the configuration itself,
    naming the key the user gave (a fresh user's ``n_banks=3`` ran on the ISA simulator, and
    with ``sram_kib=96`` the error named the 128 KiB of a size search)."""
    from chipotle.config import ChipConfig

    with pytest.raises(ValueError, match=message):
        ChipConfig.from_string(text)


def test_config_widest_vector_unit_is_accepted():
    """``V = MAX_LANES`` is a configuration, and the vector unit takes it (its elaboration,
    about 2.5 minutes for a tile, is left out of the regression)."""
    from chipotle.hw.tile.vector import MAX_LANES, VectorUnit
    assert ChipConfig.from_string(f"default,V={MAX_LANES}").lanes == MAX_LANES == 128
    with never_built():                            # constructed, not built
        assert VectorUnit(lanes=MAX_LANES).lanes == MAX_LANES
        with pytest.raises(ValueError, match="lanes must be an even integer from 2 to 128"):
            VectorUnit(lanes=MAX_LANES + 2)


def test_config_largest_vec_slots_is_accepted():
    assert MAX_VEC_SLOTS == 8
    assert ChipConfig.from_string(f"default,vec_slots={MAX_VEC_SLOTS}").vec_slots == 8


def test_config_refuses_sram_past_the_word_addresses():
    """An SRAM past the 16-bit word addresses is refused by the configuration in the unit
    it was given in: ``sram_kib=`` in KiB (a fresh user's ``sram_kib=9999`` was refused only
    by the compiler, in words and bytes, then in bytes), ``sram_bytes=`` in bytes and KiB;
    the bound follows ``word_bytes`` given beside it; the largest size is accepted, and the
    bound is the gateware's address width."""
    from chipotle.config import SRAM_ADDR_BITS
    from chipotle.hw.tile.sram import ADDR_WIDTH

    assert SRAM_ADDR_BITS == ADDR_WIDTH
    with pytest.raises(ValueError, match=r"^sram_kib must be at most 512 \(2\*\*16 words of "
                                         r"word_bytes = 8, .*\), not 9,999$"):
        ChipConfig.from_string("ulx3s,sram_kib=9999")
    with pytest.raises(ValueError, match=r"sram_kib must be at most 1,024 .*not 2,048$"):
        ChipConfig.from_string("default,sram_kib=2048,W=16")
    with pytest.raises(ValueError, match=r"at most 524,288 bytes \(512 KiB.*not 10,238,976 "
                                         r"\(9999 KiB\)"):
        ChipConfig.from_string(f"ulx3s,sram_bytes={9999 * 1024}")
    assert ChipConfig.from_string("ulx3s,sram_kib=512").sram_bytes == 512 * 1024
    assert ChipConfig.from_string("default,word_bytes=16,sram_kib=1024").max_sram_bytes \
        == 1024 * 1024


def test_config_letters_are_suggested_and_values_take_any_base():
    """``w=16`` is answered with the letter meant (``W``), and ``sram_kib`` takes the bases
    the other integer keys take (``W=0x10`` was accepted, ``sram_kib=0x80`` refused)."""
    with pytest.raises(ValueError, match=r"unknown configuration key 'w' \(did you mean 'W'\?\)"):
        ChipConfig.from_string("w=16")
    assert ChipConfig.from_string("sram_kib=0x80").sram_bytes == 128 * 1024
    assert ChipConfig.from_string("W=0x10").word_bytes == 16


@pytest.mark.parametrize("W, n_banks", [(8, 1), (8, 2), (128, 2), (128, 16), (1024, 2),
                                        (1024, 4), (64, 64)])
def test_sram_kib_sizes_are_the_sizes_the_configuration_takes(W, n_banks):
    """`ChipConfig.sram_kib_sizes` (the SRAM sizes the compiler's fit searches try, KiB):
    every size it yields is taken by the configuration and by the gateware's `Sram` (a whole
    number of words in every bank, at most the word addresses' reach), every whole-KiB size
    it skips is refused; a size just off the granule is refused naming the sizes either
    side it takes."""
    from chipotle.hw.tile.sram import Sram
    base = ChipConfig(word_bytes=W, n_banks=n_banks)
    sizes = base.sram_kib_sizes()
    top = base.max_sram_bytes // 1024
    assert sizes and list(sizes) == sorted(sizes) and sizes[-1] <= top
    for kib in [*range(1, 257), *range(top - 16, top + 3)]:
        nbytes = kib * 1024
        takes = nbytes <= base.max_sram_bytes and nbytes % W == 0 and nbytes // W % n_banks == 0
        assert (kib in sizes) == takes, kib
        if takes:
            assert base.replace(sram_bytes=nbytes).sram_bytes == nbytes
        else:
            with pytest.raises(ValueError):
                base.replace(sram_bytes=nbytes)
    assert list(base.sram_kib_sizes(5, 40)) == [k for k in sizes if 5 <= k <= 40]
    assert not base.sram_kib_sizes(top + 1)
    off = sizes[2] * 1024 + W * n_banks // 2              # half a granule past a size it takes
    with pytest.raises(ValueError, match=rf"multiple of word_bytes x n_banks \({W * n_banks}\), "
                                         r"e\.g\. sram_kib=(\d+) or (\d+)$") as e:
        base.replace(sram_bytes=off)
    below, above = map(int, re.search(r"sram_kib=(\d+) or (\d+)$", str(e.value)).groups())
    assert below == sizes[2] and above == sizes[3]
    with never_built():                                   # constructed, never elaborated
        for kib in (sizes[0], sizes[2], sizes[-1]):
            Sram(size_bytes=kib * 1024, word_bytes=W, n_banks=n_banks)
        with pytest.raises(ValueError, match="multiple of word_bytes"):
            Sram(size_bytes=off, word_bytes=W, n_banks=n_banks)
    with pytest.raises(TypeError, match="integers"):
        base.sram_kib_sizes(1.5)


def test_sram_read_bandwidths():
    """The roofline's bandwidth is the matrix units' read ports (a word per tile and cycle);
    the SRAM's whole read bandwidth adds each tile's read/write port, whose wide read
    returns n_banks words (docs/tile.md, "SRAM")."""
    d = CONFIGS["default"]
    assert (d.n_tiles, d.word_bytes, d.n_banks) == (16, 8, 2)
    assert d.sram_read_bytes_per_cycle == 128 and d.sram_peak_read_bytes_per_cycle == 384
    u = CONFIGS["ulx3s"]
    assert u.sram_read_bytes_per_cycle == 8 and u.sram_peak_read_bytes_per_cycle == 16
    w = ChipConfig.from_string("mesh=2x1,W=16,n_banks=4")
    assert w.sram_peak_read_bytes_per_cycle == 2 * 16 * 5


def test_wsum_estimate_pairs_rows_with_the_wide_read():
    """``wsum`` width V = W = 8, word-aligned operands (``docs/tile.md``, "Timing", session
    32): with one-word reads a row per chunk and a p word per W / 2 positions, ``n +
    ceil(2n / W) + 15``; with two-word reads (the ``default`` chip) and the row stride W (the
    decode attention's V rows) two rows per read and p two words at a time, ``ceil(n / 2) +
    ceil(n / W) + 15``; with another stride only the p windows; and the ISA simulator's
    estimate of the instruction on the ``default`` chip is the paired one."""
    W = 8
    for n in range(1, 200):
        one = vector_cycles(Opcode.WSUM, Dtype.I32, Dtype.U16, n, 8, W, read_words=1, slots=4)
        two = vector_cycles(Opcode.WSUM, Dtype.I32, Dtype.U16, n, 8, W, read_words=2, slots=4)
        off = vector_cycles(Opcode.WSUM, Dtype.I32, Dtype.U16, n, 8, W + 1, read_words=2,
                            slots=4)
        assert one == n + -(-2 * n // W) + 15, n
        assert two == -(-n // 2) + -(-n // W) + 15, n
        assert two <= off <= one and (off < one or n <= W // 2), n   # one p word below
    ins = Instr(Opcode.WSUM, td=Dtype.I32, ts=Dtype.U16.value, imm=8, c=W)
    assert instr_cycles(ins, ChipConfig().isa_config(), 65) == 2 + vector_cycles(
        Opcode.WSUM, Dtype.I32, Dtype.U16, 65, 8, W, read_words=2, slots=4)
