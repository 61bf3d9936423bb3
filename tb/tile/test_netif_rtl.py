"""Regression: the network interface in a 2 x 2 mesh under cocotb, on Verilator and Icarus.

The design under test is ``netif_dut.NetifMesh``: a :class:`~chipotle.hw.noc.Mesh` with a
:class:`~chipotle.hw.tile.netif.NetworkInterface` and a 4 KiB SRAM on every tile, the host link
at the west edge of tile (0, 0).  Icarus runs the same tests with less random traffic
(``NETIF_SCALE``).  The generated Verilog is cached like the NoC benches' (``tb/noc``).
"""

from __future__ import annotations

import fcntl
import hashlib
from pathlib import Path

import amaranth
import pytest
from netif_dut import NetifMesh

from chipotle.hw import noc, tile
from chipotle.sim import generate_verilog, run_cocotb
from chipotle.sim.flow import build_root

pytestmark = pytest.mark.rtl

TB = Path(__file__).parent
MESH = {"MESH_W": 2, "MESH_H": 2, "SRAM_BYTES": 4096, "N_COUNTERS": 4, "COUNTER_WIDTH": 8,
        "IMEM_WORDS": 64, "N_PERF": 2}
TESTS = ["host_sram", "counters_and_control", "send_and_wait", "refusals",
         "host_back_pressure"]


def _verilog() -> tuple[str, str]:
    """Return ``(verilog, toplevel)`` of the mesh, generated once per source change."""
    top = "netif_mesh"
    h = hashlib.sha256()
    sources = [*sorted(Path(noc.__file__).parent.glob("*.py")),
               *sorted(Path(tile.__file__).parent.glob("*.py")), TB / "netif_dut.py"]
    for path in sources:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    h.update(repr((amaranth.__version__, sorted(MESH.items()))).encode())
    folder = build_root() / "netif-verilog"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{top}-{h.hexdigest()[:16]}.v"
    with open(folder / f"{top}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            dut = NetifMesh(MESH["MESH_W"], MESH["MESH_H"], sram_bytes=MESH["SRAM_BYTES"],
                            imem_words=MESH["IMEM_WORDS"], n_counters=MESH["N_COUNTERS"],
                            counter_width=MESH["COUNTER_WIDTH"], n_perf=MESH["N_PERF"])
            tmp = path.with_suffix(".tmp")
            tmp.write_text(generate_verilog(dut, top))
            tmp.rename(path)
    return path.read_text(), top


def test_netif_mesh(sim):
    """Every network-interface test on the 2 x 2 mesh."""
    verilog, top = _verilog()
    env = {**MESH, "NETIF_SCALE": 1.0 if sim == "verilator" else 0.3}
    run = run_cocotb(sim=sim, verilog=verilog, toplevel=top, test_module="cocotb_netif",
                     test_dir=TB, testcase=TESTS,
                     extra_env={k: str(v) for k, v in env.items()})
    assert sorted(run.passed) == sorted(TESTS), run.passed
