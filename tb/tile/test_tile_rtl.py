"""Regression: the tile datapath and SRAM under cocotb, on Verilator and Icarus.

Both simulators run the product-size configuration ("full": 32 KiB SRAM, K up to 512);
Verilator also one with the other parameter values ("narrow": W = 4, 4 banks, M = 2),
Icarus also a small one ("small": 8 KiB, K up to 176).  See ``tilemodel.SIM_CONFIGS``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from tilemodel import CONFIGS, SIM_CONFIGS

from chipotle.hw.tile import Sram, TileDatapath
from chipotle.sim import generate_verilog, run_cocotb
from chipotle.sim.flow import build_root

pytestmark = pytest.mark.rtl

TB = Path(__file__).parent


@functools.cache
def _datapath_verilog(config: str) -> str:
    return generate_verilog(TileDatapath(CONFIGS[config]), name="tile_datapath")


def _run(sim, config, module, **env):
    return run_cocotb(sim=sim, verilog=_datapath_verilog(config), toplevel="tile_datapath",
                      test_module=module, test_dir=TB, public=False,
                      extra_env={"TILE_CONFIG": config, **env})


def test_matrix_rtl(sim):
    for config in SIM_CONFIGS[sim]:
        out = build_root() / "reports" / f"tile-utilisation-{sim}-{config}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        run = _run(sim, config, "cocotb_matrix", UTIL_JSON=str(out))
        assert len(run.passed) == 9, run.passed
        report = json.loads(out.read_text())
        w = CONFIGS[config].word_bytes
        for entry in report["shapes"]:
            print(config, entry)
            # Steady state is one weight word per cycle: only the command cycle, the
            # activation load and the 3-cycle drain are overhead.
            load = 0 if entry["x_keep"] else entry["m"] * -(-entry["k"] // w)
            assert entry["cycles"] == entry["words"] + load + 4, entry


def test_kvstore_rtl(sim):
    for config in SIM_CONFIGS[sim]:
        run = _run(sim, config, "cocotb_kvstore")
        assert len(run.passed) == 6, run.passed


def test_sram_rtl(sim):
    """One-word reads, and wide reads of 3 words from 4 banks and 2 from 2 banks."""
    for banks, words in ((4, 1), (4, 3), (2, 2)):
        verilog = generate_verilog(Sram(size_bytes=768, word_bytes=8, n_banks=banks,
                                        read_words=words), name="tile_sram")
        run = run_cocotb(sim=sim, verilog=verilog, toplevel="tile_sram",
                         test_module="cocotb_sram", test_dir=TB, public=False,
                         extra_env={"SRAM_DEPTH": "96", "READ_WORDS": str(words)})
        assert len(run.passed) == 2, (banks, words, run.passed)
