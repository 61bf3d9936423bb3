"""The SRAM routing probe (``chipotle.sim.sram_probe``): it elaborates for the board with
every block RAM and output bit kept, and refuses what it cannot drive.  (Its place and route,
about 3 minutes, stays out of the regression: ``docs/fpga.md``, "Session 12".)"""

import re

import pytest

from chipotle.sim.sram_probe import SramProbe, main
from tbcommon.elab import never_built


def _rtlil(top):
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    plan = ULX3S_85F_Platform().prepare(top, name="top")
    return plan.files["top.il"]


def test_probe_elaborates_with_the_sram_and_leds():
    text = _rtlil(SramProbe(sram_bytes=16 * 1024, word_bytes=8, n_banks=2))
    # one 64-bit memory of 1,024 words per bank, and the 8 LED outputs
    assert re.findall(r"memory width (\d+) size (\d+) ", text) == [("64", "1024")] * 2
    for i in range(8):
        assert re.search(rf"wire width 1 output \d+ +\\led_{i}__io", text)


def test_probe_refuses_a_geometry_the_sram_refuses():
    with never_built(), pytest.raises(ValueError, match="n_banks"):
        SramProbe(sram_bytes=16 * 1024, word_bytes=8, n_banks=3)


def test_probe_refuses_a_word_too_wide_for_its_stimulus():
    with never_built(), pytest.raises(ValueError, match="stimulus bits"):
        SramProbe(sram_bytes=64 * 1024, word_bytes=16, n_banks=1)


def test_probe_bad_config_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--config", "bogus"])
    assert e.value.code == 2
    assert "--config bogus: unknown configuration 'bogus'" in capsys.readouterr().err
