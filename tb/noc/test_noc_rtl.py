"""Regression: the NoC router and meshes under cocotb, on Verilator and Icarus.

Icarus runs the same tests with fewer packets (``ICARUS_SCALE``): it simulates these designs
about 30 times slower than Verilator.
"""

from __future__ import annotations

import pytest
from noc_rtl import mesh_verilog, router_verilog, run

pytestmark = pytest.mark.rtl

ROUTER_TESTS = ["every_direction", "multicast", "back_to_back", "round_robin", "wormhole",
                "drop_and_count", "zero_load_latency", "input_ready_back_pressure"]


def _scale(sim: str, verilator: float, icarus: float) -> float:
    return verilator if sim == "verilator" else icarus


def test_router(sim):
    """Every router test on one router, (1, 1) of a 3 x 3 mesh."""
    run(sim, router_verilog(), "cocotb_noc_router", testcase=ROUTER_TESTS,
        env={"NOC_SCALE": _scale(sim, 1.0, 0.4)})


# (width, height): (cocotb tests, packets per source under Verilator, under Icarus)
ALL = ["uniform_random", "hotspot", "transpose", "multicast_mixed", "multicast_contention",
       "drop_bad_destinations", "single_flit_storm"]
LINE = ["uniform_random", "multicast_mixed", "multicast_contention", "drop_bad_destinations"]
MESHES = {
    (1, 4): (LINE, 60, 30),
    (4, 1): (LINE, 60, 30),
    (2, 3): (ALL, 50, 25),
    (4, 4): (ALL, 40, 10),
}


@pytest.mark.parametrize("size", list(MESHES), ids=lambda s: f"{s[0]}x{s[1]}")
def test_mesh(sim, size):
    """Traffic tests on a mesh: delivery exactly once, intact, in order; drops counted."""
    tests, n_verilator, n_icarus = MESHES[size]
    run(sim, mesh_verilog(*size), "cocotb_noc_mesh", testcase=tests,
        env={"MESH_W": size[0], "MESH_H": size[1],
             "NOC_PACKETS": int(_scale(sim, n_verilator, n_icarus))})
