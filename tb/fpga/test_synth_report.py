"""``chipotle.sim.synth``'s per-module report, and the Yosys block-RAM behaviour the vector
unit's tables rely on (``docs/fpga.md``, "Where a tile's resources go").

A memory with one write port and two read ports becomes one ECP5 ``DP16KD`` (a true
dual-port block RAM) only if one read port has the write port's address and the memory
carries ``no_rw_check``; without the attribute Yosys (YoWASP 0.70) builds two copies.  The vector
unit's lane tables use the first form.  The tile SRAM's banks use a third: the other read port
transparent for the write port (Yosys adds a bypass), one copy, 2 KiB per ``DP16KD``
(``test_sram_single_copy``; before commit ``4a9ae4d`` the port returned the old word and
each bank was built twice).  A few seconds of Yosys per case.
"""

from __future__ import annotations

import pytest
from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from chipotle.hw.tile.sram import Sram
from chipotle.sim.synth import format_hierarchy, synth_ecp5, synth_ecp5_hierarchy
from tbcommon.cli import refused


class _Table(wiring.Component):
    """1024 x 16 bits, one write port, two read ports (as a pair of vector-unit lanes)."""

    def __init__(self, shared: bool, no_rw_check: bool):
        self._shared, self._no_rw_check = shared, no_rw_check
        super().__init__({"we": In(1), "wa": In(10), "wd": In(16), "ra": In(10),
                          "rb": In(10), "da": Out(16), "db": Out(16)})

    def elaborate(self, platform):
        m = Module()
        attrs = {"no_rw_check": 1} if self._no_rw_check else None
        m.submodules.mem = mem = memory.Memory(shape=unsigned(16), depth=1024, init=[],
                                               attrs=attrs)
        wp, pa, pb = mem.write_port(), mem.read_port(), mem.read_port()
        if self._shared:
            addr = Signal(10)
            m.d.comb += [addr.eq(Mux(self.we, self.wa, self.ra)), wp.addr.eq(addr),
                         pa.addr.eq(addr)]
        else:
            m.d.comb += [wp.addr.eq(self.wa), pa.addr.eq(self.ra)]
        m.d.comb += [wp.en.eq(self.we), wp.data.eq(self.wd), pb.addr.eq(self.rb),
                     self.da.eq(pa.data), self.db.eq(pb.data)]
        return m


class _Outer(wiring.Component):
    """A table as a submodule and a 16 x 16 multiplier in the top module."""

    def __init__(self, shared: bool, no_rw_check: bool):
        self._table = _Table(shared, no_rw_check)
        super().__init__({"we": In(1), "wa": In(10), "wd": In(16), "ra": In(10),
                          "rb": In(10), "p": Out(32)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.table = t = self._table
        m.d.comb += [t.we.eq(self.we), t.wa.eq(self.wa), t.wd.eq(self.wd), t.ra.eq(self.ra),
                     t.rb.eq(self.rb)]
        m.d.sync += self.p.eq(t.da * t.db)
        return m


@pytest.mark.parametrize(("shared", "no_rw_check", "blocks"),
                         [(True, True, 1), (True, False, 2)])
def test_table_block_rams(shared, no_rw_check, blocks):
    counts = synth_ecp5_hierarchy(_Outer(shared, no_rw_check), "outer")
    assert set(counts) == {"outer", "outer.table"}, counts
    assert counts["outer.table"].get("DP16KD") == blocks, counts
    assert "DP16KD" not in counts["outer"], counts
    assert counts["outer"].get("MULT18X18D") == 1, counts
    assert "MULT18X18D" not in counts["outer.table"], counts
    text = format_hierarchy(counts)
    rows = text.splitlines()
    assert rows[0].startswith("| module |") and rows[-1].startswith("| total |")
    assert "| `outer.table` |" in text


def test_sram_single_copy():
    """The tile SRAM takes one DP16KD per 2 KiB: each bank (1,024 x 64 bits here) is one
    copy of 1,024 x 18-bit blocks, 16 data bits each; two copies would double the count."""
    size = 16 * 1024
    cells = synth_ecp5(Sram(size_bytes=size, word_bytes=8, n_banks=2), "tile_sram")
    block_data_bytes = 1024 * 16 // 8          # a DP16KD as 1,024 x 18: 16 data bits a row
    assert cells.get("DP16KD") == size // block_data_bytes, cells


def test_vector_unit_design_follows_the_config():
    """``synth vector-unit`` builds ``VectorUnit()`` without ``--config`` and a tile's unit
    of the configuration with it (its V, W, reads and result slots)."""
    from chipotle.config import CONFIGS
    from chipotle.sim.synth import DESIGNS
    from tbcommon.elab import never_built
    factory, _ = DESIGNS["vector-unit"]
    with never_built():                            # the units are read, not synthesised
        plain = factory(None)
        assert (plain.lanes, plain.read_words, plain.slots) == (8, 1, 3)
        for name in ("default", "ulx3s"):
            c = CONFIGS[name]
            vu = factory(c)
            assert (vu.lanes, vu.word_bytes, vu.sram_bytes, vu.read_words, vu.slots) == (
                c.lanes, c.word_bytes, c.sram_bytes, c.n_banks, c.vec_slots)
        del plain, vu


@pytest.mark.parametrize(("fix", "blocks"), [(False, 2), (True, 1)])
def test_table_block_rams_from_rtlil(fix, blocks):
    """From Amaranth's RTLIL (the board build's tile, ``chipotle.sim.bitstream.tile_file``)
    Yosys ignores ``no_rw_check`` and builds the shared-address table twice, unless
    `rtlil_no_rw_check` marks its read ports' collisions undefined: then one ``DP16KD``."""
    from chipotle.sim.bitstream import rtlil_no_rw_check
    cells = synth_ecp5(_Table(True, True), "t",
                       rtlil_filter=rtlil_no_rw_check if fix else (lambda text: text))
    assert cells.get("DP16KD") == blocks, cells


@pytest.mark.parametrize("design", ["router", "tile-datapath"])
def test_config_is_refused_for_designs_built_with_their_own_defaults(design, capsys,
                                                                     monkeypatch):
    """``--config`` for the router or the tile datapath, which are built with their own
    defaults, was ignored without a word: it is one error line naming the designs that take
    it, exit 2, before anything is built or synthesised."""
    import chipotle.sim.synth as synth
    monkeypatch.setattr(synth, "DESIGNS", {k: (lambda c: pytest.fail("built"), top)
                                           for k, (_, top) in synth.DESIGNS.items()})
    err = refused(capsys, synth.main, [design, "--config", "small"], "python -m chipotle.sim.synth")
    assert err.startswith(f"--config: the {design} design is built with its own defaults and "
                          f"takes no configuration; the designs built from --config: "
                          f"controller, sram, tile, vector-unit"), err
