"""The driver on the RTL: `RtlBackend` against `IsaSimBackend` on a ``Chip`` of the small
configuration, under Verilator and Icarus (``cocotb_driver.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chipotle.config import CONFIGS
from chipotle.hw.chip import BACKDOOR_SIGNALS
from chipotle.sim import run_cocotb
from chipotle.sim.chiprun import TOPLEVEL, chip_verilog
from chipotle.sim.flow import build_root

TB = Path(__file__).parent
pytestmark = pytest.mark.rtl


def test_driver_rtl(sim):
    out = build_root() / "reports" / f"driver-toy-{sim}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    run = run_cocotb(sim=sim, verilog=chip_verilog(CONFIGS["small"]), toplevel=TOPLEVEL,
                     test_module="cocotb_driver", test_dir=TB, public=BACKDOOR_SIGNALS,
                     extra_env={"CHIP_CONFIG": "small", "RESULT": str(out)})
    assert sorted(run.passed) == ["backdoor_load", "reset_mid_step", "tile_fault",
                                 "toy_scenario", "unfinished_step"], run.passed
    print(json.loads(out.read_text()))
