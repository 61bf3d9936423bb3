"""Running compiled steps on the ISA simulator (for the tests and the benchmark), and the
small synthetic model of the regression.

The product's host loop is `chipotle.driver`; this is the minimal loop the compiler's own
tests need: load the images and programs, then per step write the step block, start the
tiles, run, and read the token and the logits back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import ModelConfig, synthetic_checkpoint

__all__ = ["SMALL_MODEL_DIMS", "small_model", "load_isasim", "run_step_isasim",
           "run_plan_isasim", "StepResult"]

#: Shape of the synthetic model the regression runs on ``CONFIGS["small"]`` (2 x 2 tiles of
#: 32 KiB): 2 layers, grouped-query attention 2:1, head size 8.
SMALL_MODEL_DIMS = dict(dim=32, hidden_dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
                        vocab_size=64, seq_len=32)


def small_model(seed: int = 7):
    """Return the quantised synthetic model of `SMALL_MODEL_DIMS` (deterministic).

    Returns
    -------
    chipotle.golden.QuantizedModel
    """
    from ..golden.quantize import calibration_sequences, quantize
    ckpt = synthetic_checkpoint(ModelConfig(**SMALL_MODEL_DIMS), seed=seed, scale=0.3)
    return quantize(ckpt, calibration_sequences(ckpt, n=2, length=16))


@dataclass
class StepResult:
    """One step on the simulator.

    Attributes
    ----------
    token : int
        The on-chip argmax.
    logits : numpy.ndarray
        int32, ``(vocab_size,)``: the last row's logits, read from the classifier tiles.
    cycles : int
        Estimated cycles from the start to the doorbell.
    perf : dict of str to int
        The tiles' performance counters over the step, each summed over the tiles, except
        ``cycles``: the step's latency (= `cycles`), not the tiles' sum.
    busy : dict of (x, y) to int
        Cycles each tile spent executing (not waiting) in the step.
    """

    token: int
    logits: np.ndarray
    cycles: int
    perf: dict
    busy: dict


def load_isasim(compiled):
    """Return a `chipotle.isasim.IsaSim` of the compiled model's mesh, images and programs
    loaded, and the KV layouts (`CompiledModel.kv_layouts`) set."""
    from ..isasim import IsaSim
    cfg = compiled.config
    sim = IsaSim(cfg.mesh_width, cfg.mesh_height, cfg.isa_config())
    for xy, chunks in compiled.images.items():
        for addr, data in chunks:
            sim.write(xy, addr, data)
    for xy, words in compiled.programs.items():
        sim.load_program(xy, words)
    for xy, layout in compiled.kv_layouts.items():
        sim.set_kv_layout(xy, layout)
    return sim


def run_step_isasim(sim, compiled, tokens, pos: int) -> StepResult:
    """Run one step (``len(tokens)`` tokens at ``pos ..``) and read its results back.

    The tiles' clocks are first brought to the latest of them (the time between steps is
    the host's), so that ``cycles`` is the step's latency.

    Raises
    ------
    RuntimeError
        If a tile stops on an error, a tile is not halted or a counter is not zero after the
        step, or the doorbell is not the plan's.
    """
    return run_plan_isasim(sim, compiled, compiled.step(tokens, pos))


def run_plan_isasim(sim, compiled, plan) -> StepResult:
    """Run one `StepPlan` (of `CompiledModel.step`, `prefill` or `plans`); see
    `run_step_isasim`."""
    from ..isasim import TileState
    for xy, addr, data in plan.writes:
        sim.write(xy, addr, data)
    t0 = max(t.perf.cycles for t in sim.tiles)
    before = {}
    for t in sim.tiles:
        t.perf.cycles = t0
        before[t.xy] = dict(vars(t.perf))
    n_events = len(sim.events)
    for xy, pc in plan.starts:
        sim.start(xy, pc)
    sim.run()
    for t in sim.tiles:
        if t.error.value:
            raise RuntimeError(f"tile {t.xy} stopped: {t.error_message}")
        if t.xy in compiled.programs and t.state != TileState.HALTED:
            raise RuntimeError(f"tile {t.xy} is {t.state} after the step")
        if any(t.counters):
            raise RuntimeError(f"tile {t.xy} has counters {t.counters} after the step")
    events = sim.events[n_events:]
    if [(e.tile, e.code) for e in events] != [plan.done]:
        raise RuntimeError(f"doorbells {events}, expected one {plan.done}")
    token = int(sim.read(plan.token_at[0], plan.token_at[1], 1, np.int32)[0])
    logits = np.zeros(compiled.model.vocab_size, np.int32)
    for xy, addr, first, n in plan.logits_at:
        logits[first:first + n] = sim.read(xy, addr, n, np.int32)
    perf = {k: sum(vars(t.perf)[k] - before[t.xy][k] for t in sim.tiles)
            for k in before[sim.tiles[0].xy]}
    perf["cycles"] = events[0].cycle - t0
    busy = {t.xy: (t.perf.cycles - before[t.xy]["cycles"])
            - (t.perf.wait_cycles - before[t.xy]["wait_cycles"])
            for t in sim.tiles if t.xy in compiled.programs}
    return StepResult(token, logits, events[0].cycle - t0, perf, busy)
