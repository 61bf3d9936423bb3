"""`chipotle.sim.trace`: one step of the small chip on the ISA simulator and on the RTL.

The RTL side runs the counters-only trace on the ports-only Verilator build of
``test_driver_e2e`` (the same Verilog and flags: the build is shared), so the test costs one
short simulation.  It checks the cost model's claims on the RTL: the matrix unit's cycles per
tile (`chipotle.isa.core.matrix_cycles`, the write-back's pace included) equal the RTL's
``MATRIX_CYCLES`` but for cycles the write-back lost on the shared SRAM port, and the
useful-MAC cycles and instruction counts are equal.
"""

from __future__ import annotations

import pytest

from chipotle.compiler import compile_model, small_model
from chipotle.config import CONFIGS
from chipotle.sim import simulators_from_env
from chipotle.sim.trace import compare, isasim_trace, rtl_trace, step_list

SMALL = CONFIGS["small"]


def test_isasim_trace_retires_every_instruction():
    cm = compile_model(small_model(), SMALL, context=16, placement="tensor")
    steps = step_list(cm, 5)
    assert steps == [([1, 8, 15, 22], 0), ([29], 4), ([36], 5)]
    est = isasim_trace(cm, steps)
    last = est["steps"][-1]
    for xy, retires in est["retires"].items():
        assert len(retires) == last["perf_per_tile"][xy]["instructions"]
        cycles = [c for c, _ in retires]
        assert cycles == sorted(cycles) and 0 < cycles[-1] <= last["cycles"]
    with pytest.raises(ValueError, match="compiled context"):
        step_list(cm, 16)


@pytest.mark.rtl
@pytest.mark.parametrize("sim_name", [s for s in simulators_from_env() if s == "verilator"])
def test_trace_counters_match_the_cost_model(sim_name):
    cm = compile_model(small_model(), SMALL, context=16, placement="tensor")
    steps = step_list(cm, 5)
    est = isasim_trace(cm, steps)
    rtl = rtl_trace(cm, steps, sim=sim_name, retires=False, cxx_opt="-O0")
    rep = compare(cm, est, rtl)
    assert rep.bit_exact
    for xy, t in rep.tiles.items():
        c = t["counters"]
        assert c["mac_cycles"][0] == c["mac_cycles"][1], (xy, c["mac_cycles"])
        assert c["instructions"][0] == c["instructions"][1], (xy, c["instructions"])
        e, r = c["matrix_cycles"]
        assert e <= r <= e + c["sram_stalls"][1], (xy, c["matrix_cycles"], c["sram_stalls"])
    print(rep)
