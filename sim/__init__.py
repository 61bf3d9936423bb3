"""Simulation flows for chipotle: Verilog generation, simulator set-up, cached builds.

This is the one place that knows how to find and configure the simulators
(:mod:`chipotle.sim.toolchain`) and how to turn an Amaranth component into a
cocotb run under Verilator or Icarus (:mod:`chipotle.sim.flow`).
"""

from .flow import SIMULATORS, CocotbRun, generate_verilog, run_cocotb
from .toolchain import SimulatorNotFound, simulators_from_env

__all__ = [
    "SIMULATORS",
    "CocotbRun",
    "SimulatorNotFound",
    "generate_verilog",
    "run_cocotb",
    "simulators_from_env",
]
