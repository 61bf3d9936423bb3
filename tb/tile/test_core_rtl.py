"""Regression: the tile core (controller, matrix unit, write-back) against the ISA simulator.

Verilator runs the product-size configuration ("core": 32 KiB, W = 8, M = 4, k_max = 512)
and the narrow one ("core_narrow": W = 4, M = 2, 4 KiB); Icarus the narrow one only
(``tbcore.SIM_CORE_CONFIGS``).  Measured cycles land in
``build/reports/tile-core-cycles-<sim>-<config>.json``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from tbcore import CORE_CONFIGS, SIM_CORE_CONFIGS

from chipotle.hw.tile.tile import TileCore
from chipotle.sim import generate_verilog, run_cocotb
from chipotle.sim.flow import build_root

TB = Path(__file__).parent


@functools.cache
def _verilog(config: str) -> str:
    return generate_verilog(TileCore(CORE_CONFIGS[config]), name="tile_core")


def test_core_rtl(sim):
    for config in SIM_CORE_CONFIGS[sim]:
        out = build_root() / "reports" / f"tile-core-cycles-{sim}-{config}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        run = run_cocotb(sim=sim, verilog=_verilog(config), toplevel="tile_core",
                         test_module="cocotb_core", test_dir=TB,
                         extra_env={"TILE_CONFIG": config, "CYCLES_JSON": str(out)})
        assert len(run.passed) == 4, run.passed
        for entry in json.loads(out.read_text()):
            print(config, entry)
