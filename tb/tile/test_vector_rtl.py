"""Regression: the vector unit under cocotb, on Verilator and Icarus.

The DUT is ``cocotb_vector_env.VectorTop`` (``VectorUnit`` with an 8 KiB SRAM and a host port)
in the default configuration (V = 8, W = 8, 2 banks: the unit reads 2 consecutive words per
cycle; 4 result slots: the ``default`` chip's unit) and, on smaller samples of the random
cases, ``narrow`` (V = 4, one bank, one word per read, 3 result slots, an SRAM port of latency
2: the ``ulx3s`` tile's unit) and ``min`` (as ``default`` with one result slot, the fewest the
unit takes). After every command the whole SRAM is compared with the reference, read straight
from the bank arrays (``BACKDOOR=1``: no clock cycles; the host port is exercised by every
operand load and by the contention tests). Icarus is several times slower, so it runs a
deterministic sample of the random cases (``VEC_SCALE``); the directed extremes and errors kept
by ``_sample`` run on both. Other lane counts and word widths run on Amaranth's simulator
(``test_vector_pysim.py``).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from cocotb_vector_env import CONFIGS, VectorTop

from chipotle.sim import generate_verilog, run_cocotb, simulators_from_env
from chipotle.sim.flow import build_root

pytestmark = pytest.mark.rtl

TB = Path(__file__).parent
TESTS = ["tables_missing_then_load", "elementwise", "requant", "reductions", "rmsnorm",
         "rmsnormq", "dynq", "softmax", "rope_silu", "wsum", "errors", "timing"]
#: Per simulator: (configuration, fraction of the random cases).
PLAN = {
    "verilator": [("default", 1.0), ("narrow", 0.3), ("min", 0.1)],
    "icarus": [("default", 0.3), ("narrow", 0.1), ("min", 0.05)],
}


@functools.cache
def _verilog(config: str) -> str:
    return generate_verilog(VectorTop(CONFIGS[config]), name="vector_top")


#: One test per simulator and configuration (pytest-xdist spreads them over workers).
_RUNS = [(s, c, scale) for s in simulators_from_env() for c, scale in PLAN[s]]


@pytest.mark.parametrize(("sim_name", "config", "scale"), _RUNS)
def test_vector_rtl(sim_name, config, scale):
    out = build_root() / "reports" / f"vector-timing-{sim_name}-{config}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    run = run_cocotb(sim=sim_name, verilog=_verilog(config), toplevel="vector_top",
                     test_module="cocotb_vector", test_dir=TB,
                     public=[("vector_top.sram", "bank*")],     # the back door's arrays
                     extra_env={"VEC_CONFIG": config, "VEC_SCALE": str(scale),
                                "BACKDOOR": "1", "TIMING_JSON": str(out)})
    # elementwise is parametrised 2 x 2
    assert len(run.passed) == len(TESTS) + 3, run.passed
    report = json.loads(out.read_text())
    for row in report["rows"]:
        print(config, row)
