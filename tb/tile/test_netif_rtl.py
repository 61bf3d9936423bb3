"""Regression: the network interface in a 2 x 2 mesh under cocotb, on Verilator and Icarus.

The design under test is ``netif_dut.NetifMesh``: a :class:`~chipotle.hw.noc.Mesh` with a
:class:`~chipotle.hw.tile.netif.NetworkInterface` and a 4 KiB SRAM on every tile, the host link
at the west edge of tile (0, 0).  Icarus runs the same tests with less random traffic
(``NETIF_SCALE``).  The generated Verilog is cached (`_verilog`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from netif_dut import NetifMesh

from chipotle.sim import run_cocotb
from chipotle.sim.flow import generate_verilog_cached

pytestmark = pytest.mark.rtl

TB = Path(__file__).parent
MESH = {"MESH_W": 2, "MESH_H": 2, "SRAM_BYTES": 4096, "N_COUNTERS": 4, "COUNTER_WIDTH": 8,
        "IMEM_WORDS": 64, "N_PERF": 2}
TESTS = ["host_sram", "counters_and_control", "send_and_wait", "refusals",
         "host_back_pressure"]


def _verilog() -> tuple[str, str]:
    """Return ``(verilog, toplevel)`` of the mesh, generated once per source change.

    Cached by ``chipotle.sim.flow.generate_verilog_cached``, whose digest covers every
    source the design is elaborated from (``hw/`` and ``sw/isa/``: the network interface
    takes ``ErrorCode`` and ``INSTR_BITS`` from ``chipotle.isa.core``); the key adds the
    parameters and ``netif_dut.py``, which lives here.  (A key of ``hw/noc`` and ``hw/tile``
    alone handed a stale mesh to the bench after an edit of ``sw/isa``.)"""
    top = "netif_mesh"
    dut_source = hashlib.sha256((TB / "netif_dut.py").read_bytes()).hexdigest()
    return generate_verilog_cached(
        lambda: NetifMesh(MESH["MESH_W"], MESH["MESH_H"], sram_bytes=MESH["SRAM_BYTES"],
                          imem_words=MESH["IMEM_WORDS"], n_counters=MESH["N_COUNTERS"],
                          counter_width=MESH["COUNTER_WIDTH"], n_perf=MESH["N_PERF"]),
        top, f"{sorted(MESH.items())} netif_dut {dut_source}"), top


def test_netif_mesh(sim):
    """Every network-interface test on the 2 x 2 mesh."""
    verilog, top = _verilog()
    env = {**MESH, "NETIF_SCALE": 1.0 if sim == "verilator" else 0.3}
    run = run_cocotb(sim=sim, verilog=verilog, toplevel=top, test_module="cocotb_netif",
                     test_dir=TB, testcase=TESTS, public=False,
                     extra_env={k: str(v) for k, v in env.items()})
    assert sorted(run.passed) == sorted(TESTS), run.passed
