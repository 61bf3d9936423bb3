"""The SRAM routing probe (``chipotle.sim.sram_probe``): it elaborates for the board with
every block RAM and output bit kept, and refuses what it cannot drive.  (Its place and route,
about 3 minutes, stays out of the regression: ``docs/fpga.md``, "Session 12".)"""

import re

import pytest

from chipotle.sim.sram_probe import SramProbe, main
from tbcommon.cli import refused
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


@pytest.mark.parametrize("build_dir, message", [
    ("{file}", "--build-dir {file}: is a file, not a folder"),
    ("{file}/sub", "--build-dir {file}/sub: cannot be created (Not a directory)"),
    ("", "--build-dir is empty: give a folder (an empty one would be the current directory)"),
])
def test_probe_refuses_a_bad_build_dir_before_elaborating(build_dir, message, tmp_path,
                                                          capsys, monkeypatch):
    """A --build-dir that is a file (a FileExistsError after ~4 s of elaboration), one that
    cannot be created (FileNotFoundError) or an empty one (the current directory) is one
    error line, exit 2, before anything is elaborated."""
    from chipotle.hw.fpga.boards import Board
    monkeypatch.setattr(Board, "make_platform", lambda self: pytest.fail("elaborated"))
    (tmp_path / "f").write_text("")
    file = str(tmp_path / "f")
    with never_built():             # the probe is built, then the refusal leaves it unused
        err = refused(capsys, main, ["--build-dir", build_dir.format(file=file)],
                      "python -m chipotle.sim.sram_probe")
    assert err.startswith(message.format(file=file)), err
