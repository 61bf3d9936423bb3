"""Verilog of the NoC designs for the cocotb benches, generated once and cached on disk.

Generating a 4 x 4 mesh takes about 10 s, so the text is kept in
``build/noc-verilog/<toplevel>-<hash>.v``, keyed by the sources of ``chipotle.hw.noc``, the
Amaranth version and the design parameters; every pytest worker and simulator shares it.
"""

from __future__ import annotations

import fcntl
import hashlib
from pathlib import Path

import amaranth

from chipotle.hw import noc
from chipotle.sim import generate_verilog, run_cocotb
from chipotle.sim.flow import build_root

TB_DIR = Path(__file__).parent

__all__ = ["TB_DIR", "router_verilog", "mesh_verilog", "run"]


def _sources_key(*params) -> str:
    h = hashlib.sha256()
    for path in sorted(Path(noc.__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    h.update(repr((amaranth.__version__, params)).encode())
    return h.hexdigest()[:16]


def _cached(toplevel: str, make, *params) -> str:
    folder = build_root() / "noc-verilog"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{toplevel}-{_sources_key(toplevel, *params)}.v"
    with open(folder / f"{toplevel}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(generate_verilog(make(), toplevel))
            tmp.rename(path)
    return path.read_text()


def router_verilog(x=1, y=1, width=3, height=3, cfg=None) -> tuple[str, str]:
    """Return ``(verilog, toplevel)`` of one router."""
    cfg = cfg or noc.NocConfig()
    top = "noc_router"
    return _cached(top, lambda: noc.Router(cfg, x, y, width, height), x, y, width, height,
                   cfg), top


def mesh_verilog(width: int, height: int, cfg=None) -> tuple[str, str]:
    """Return ``(verilog, toplevel)`` of a mesh."""
    cfg = cfg or noc.NocConfig()
    top = f"noc_mesh_{width}x{height}"
    return _cached(top, lambda: noc.Mesh(width, height, cfg), width, height, cfg), top


def run(sim: str, design: tuple[str, str], test_module: str, *, testcase=None, env=None):
    """Run cocotb tests of ``design`` from this folder; raise on any failure."""
    verilog, top = design
    return run_cocotb(sim=sim, verilog=verilog, toplevel=top, test_module=test_module,
                      test_dir=TB_DIR, testcase=testcase, public=False,
                      extra_env={k: str(v) for k, v in (env or {}).items()})
