"""Regression: the tile core (controller, matrix unit, write-back) against the ISA simulator.

Verilator runs the product-size configuration ("core": 16 KiB, W = 8, M = 4, k_max = 512)
and it with the SRAM read/write port at latency 3 ("core_l3", the tests of
``tbcore.CORE_TESTS``); Icarus a small one with the other parameter values ("core_small":
W = 16, M = 2, V = 4, 8 KiB) and it with the serial issue policy
(``tbcore.SIM_CORE_CONFIGS``).  Measured cycles land in
``build/reports/tile-core-cycles-<sim>-<config>.json``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from tbcore import BACKDOOR_SIGNALS, CORE_CONFIGS, CORE_TESTS, SIM_CORE_CONFIGS

from chipotle.hw.tile.tile import TileCore
from chipotle.sim import generate_verilog, run_cocotb, simulators_from_env
from chipotle.sim.flow import build_root

pytestmark = pytest.mark.rtl

TB = Path(__file__).parent


@functools.cache
def _verilog(config: str) -> str:
    return generate_verilog(TileCore(CORE_CONFIGS[config]), name="tile_core")


#: Each simulator's configurations, one test each (pytest-xdist spreads them over workers).
_CORE_RUNS = [(s, c) for s in simulators_from_env() for c in SIM_CORE_CONFIGS[s]]


@pytest.mark.parametrize(("sim_name", "config"), _CORE_RUNS)
def test_core_rtl(sim_name, config):
    out = build_root() / "reports" / f"tile-core-cycles-{sim_name}-{config}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    # the ports and the SRAM arrays only: the bench reads the SRAM back after every program
    # through the arrays (no cycles; `CoreBench.read_sram`), and Verilator optimises a
    # model whose other inner signals are not public (docs/performance.md)
    only = CORE_TESTS.get(config)
    run = run_cocotb(sim=sim_name, verilog=_verilog(config), toplevel="tile_core",
                     test_module="cocotb_core", test_dir=TB, public=BACKDOOR_SIGNALS,
                     testcase=list(only) if only else None,
                     extra_env={"TILE_CONFIG": config, "CYCLES_JSON": str(out)})
    assert len(run.passed) == (len(only) if only else 11), run.passed
    for entry in json.loads(out.read_text()):
        print(config, entry)


@pytest.mark.model
def test_layer_rtl(sim, model_paths):
    """One stories260K layer on one tile (Verilator only: about 30 k cycles per step)."""
    if sim != "verilator":
        pytest.skip("Verilator only: about 30 k cycles per step, too slow for Icarus")
    from tbcore import LAYER_CONFIG
    out = build_root() / "reports" / "tile-layer-cycles-verilator.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    verilog = generate_verilog(TileCore(LAYER_CONFIG), name="tile_core")
    run = run_cocotb(sim=sim, verilog=verilog, toplevel="tile_core",
                     test_module="cocotb_layer", test_dir=TB, public=BACKDOOR_SIGNALS,
                     extra_env={"CYCLES_JSON": str(out), "POSITIONS": "4",
                                "CHECK_AT": "0,3",
                                "CHIPOTLE_MODEL_DIR": str(model_paths[0].parent)})
    assert len(run.passed) == 1, run.passed
    for entry in json.loads(out.read_text()):
        print(entry)


def test_mesh_rtl(sim):
    """Whole tiles (network interface included) on a 2 x 2 chip: SEND / WAIT / multicast
    through the host link (Verilator only: four tiles are too slow for Icarus).

    The chip is ``chip_verilog``'s: the tile generated once, a Verilator hierarchy block
    verilated and compiled once for its four instances (ports public only).
    """
    if sim != "verilator":
        pytest.skip("Verilator only: four tiles are too slow for Icarus")
    from tbcore import MESH_CONFIGS

    from chipotle.hw.chip import chip_verilog
    verilog = chip_verilog(MESH_CONFIGS["mesh2x2"], name="tile_mesh")
    run = run_cocotb(sim=sim, verilog=verilog, toplevel="tile_mesh", test_module="cocotb_mesh",
                     test_dir=TB, public=False, extra_env={"MESH_CONFIG": "mesh2x2"})
    assert len(run.passed) == 2, run.passed
