"""The compiler: a llama2 model placed on the mesh, and the tile programs that run it.

`compile_model` quantises a checkpoint (or takes a golden `QuantizedModel`), cuts it into
pipeline stages (embedding, per layer attention and feed-forward, classifier split by
vocabulary rows, an on-chip argmax), places them along a snake path through the mesh, lays
out every tile's SRAM (weights, tables, RoPE, KV cache, buffers) and emits each tile's
program, with one entry per prefill batch size ``m = 1 .. M``.  With
``compile_model(..., placement="tensor")`` (`chipotle.compiler.tensor`) every layer is split
over every tile instead (attention by query heads, the other matrices by rows, the vectors
gathered by multicast), which shortens a decode step several times.  `CompiledModel.step` gives
the host's actions for one step.  ``docs/architecture.md`` describes the placement and the
programs; ``python -m chipotle.compiler`` prints the memory map and the cycle estimates.

Members
-------
compile_model, CompiledModel, StepPlan, FitError, Fit
    The interface the driver codes against.
SMALL_MODEL_DIMS, small_model
    The synthetic model of the regression on ``CONFIGS["small"]``.
load_isasim, run_step_isasim, run_plan_isasim
    Load a compiled model into a `chipotle.isasim.IsaSim` and run one step's plan on it
    (tests and the benchmark).
"""

from .compiled import CompiledModel, StepPlan, compile_model
from .placement import Fit, FitError
from .run import SMALL_MODEL_DIMS, load_isasim, run_plan_isasim, run_step_isasim, small_model

__all__ = ["compile_model", "CompiledModel", "StepPlan", "FitError", "Fit", "SMALL_MODEL_DIMS",
           "small_model", "run_step_isasim", "run_plan_isasim", "load_isasim"]
