"""cocotb bench: one stories260K transformer layer on one tile, against isasim and GoldenModel.

The layer of ``chipotle.isa.programs`` (weights, tables, RoPE, KV cache of ``max_pos``
positions in one tile's SRAM, the 60-instruction decode-step program) runs for consecutive
positions on the RTL (``TileCore`` in ``tbcore.LAYER_CONFIG``) and on ``chipotle.isasim``
from the same SRAM image.  After every step the whole SRAM, the state and the DONE code must
be identical; at some positions every intermediate of the layer and the KV cache read from
the **RTL's** SRAM must equal ``GoldenModel.forward``'s trace.  Measured cycles per step (and
the simulator's estimate) go to ``CYCLES_JSON``.

Environment: ``LAYER`` (default 0), ``POSITIONS`` (default 4), ``CHECK_AT`` (comma list),
``CYCLES_JSON``, ``CHIPOTLE_MODEL_DIR``.
"""

from __future__ import annotations

import json
import os

import cocotb
import numpy as np
from tbcore import LAYER_CONFIG, CoreBench, decode_status

from chipotle.golden import GoldenModel, quantize
from chipotle.hw.tile.controller import ControllerState, PerfIndex
from chipotle.isa import assemble
from chipotle.isa.core import ErrorCode
from chipotle.isa.programs import (
    LayerLayout,
    layer_program,
    place_layer,
    read_layer_trace,
    write_step_input,
)
from chipotle.isasim import IsaSim, TileState
from chipotle.model import load_checkpoint
from chipotle.paths import default_model_dir

TILE = (0, 0)
TOKENS = [1, 403, 407, 261, 378, 45, 2, 300, 59]


@cocotb.test()
async def stories260k_layer(dut):
    """Decode steps of one layer at positions 0 .. POSITIONS-1, bit for bit."""
    layer = int(os.environ.get("LAYER", "0"))
    positions = int(os.environ.get("POSITIONS", "4"))
    check_at = {int(p) for p in os.environ.get("CHECK_AT", "0,3").split(",")}
    ckpt = default_model_dir() / "stories260K.bin"
    assert ckpt.is_file(), f"model file {ckpt} not found (set CHIPOTLE_MODEL_DIR)"
    qm = quantize(load_checkpoint(ckpt))
    isa = LAYER_CONFIG.isa_config()
    lay = LayerLayout(qm, isa, max_pos=16)
    assert lay.size <= LAYER_CONFIG.sram_bytes
    sim = IsaSim(1, 1, isa)
    place_layer(sim, TILE, lay, layer)
    sym = {}
    words = assemble(layer_program(lay, layer), symbols_out=sym)
    sim.load_program(TILE, words)
    golden = GoldenModel(qm)

    tb = CoreBench(dut, LAYER_CONFIG, seed=3)
    await tb.start()
    await tb.write_imem(words)
    results = []
    n_done = 0
    for pos, tok in enumerate(TOKENS[:positions]):
        trace = {}
        golden.forward(tok, pos, trace)
        x = trace["x.emb"] if layer == 0 else trace[f"l{layer - 1}.res"]
        write_step_input(sim, TILE, lay, pos, x)
        t = sim.tile(TILE)
        est0 = t.perf.cycles
        await tb.load_sram(t.sram.copy())           # the host's writes of this step
        pc = 0 if pos == 0 else sym["step"]
        sim.start(TILE, pc)
        sim.run()
        assert t.state == TileState.HALTED and t.error == ErrorCode.NONE, t.error_message
        cyc0 = tb.perf(PerfIndex.CYCLES)
        mac0 = tb.perf(PerfIndex.MAC_CYCLES)
        vec0 = tb.perf(PerfIndex.VECTOR_BUSY)
        mx0 = tb.perf(PerfIndex.MATRIX_CYCLES)
        await tb.start_at(pc)
        await tb.wait_stopped(400000)
        state, error, rtl_pc = decode_status(int(dut.status.value))
        assert (state, error) == (ControllerState.HALTED, ErrorCode.NONE), (state, error, rtl_pc)
        got = await tb.read_sram()
        tb._rtl_image = got.copy()
        diff = np.flatnonzero(got != t.sram)
        assert not diff.size, (f"position {pos}: SRAM differs from isasim at {diff.size} bytes, "
                               f"first {[hex(a) for a in diff[:8]]}")
        # every DONE of the steps so far, in order, as the ISA simulator's (neither clears
        # its record between steps, so this step must have added its own)
        ref_codes = [e.code for e in sim.events]
        assert tb.net.done_codes == ref_codes, (pos, tb.net.done_codes, ref_codes)
        assert len(ref_codes) > n_done and ref_codes[-1] == 1, (pos, n_done, ref_codes)
        n_done = len(ref_codes)
        if pos in check_at:
            view = IsaSim(1, 1, isa)
            view.write(TILE, 0, got)                # read the RTL's SRAM through the layout
            rtl_trace = read_layer_trace(view, TILE, lay, pos)
            caches = {"key_cache": golden.key_cache, "value_cache": golden.value_cache,
                      "key_mu": golden.key_mu, "key_exp": golden.key_exp}
            for name, value in rtl_trace.items():
                ref = (caches[name][layer, :pos + 1] if name in caches
                       else trace[f"l{layer}.{name}"])
                assert np.array_equal(value, ref), f"position {pos}: `{name}` differs"
            dut._log.info("position %d: %d intermediates equal the golden trace", pos,
                          len(rtl_trace))
        res = {"position": pos, "start_pc": pc,
               "rtl_cycles": tb.perf(PerfIndex.CYCLES) - cyc0,
               "est_cycles": t.perf.cycles - est0,
               "rtl_mac_cycles": tb.perf(PerfIndex.MAC_CYCLES) - mac0,
               "rtl_matrix_cycles": tb.perf(PerfIndex.MATRIX_CYCLES) - mx0,
               "rtl_vector_busy": tb.perf(PerfIndex.VECTOR_BUSY) - vec0}
        dut._log.info("position %d: %s", pos, res)
        results.append(res)
    path = os.environ.get("CYCLES_JSON")
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
