"""End to end: the compiler's small synthetic model on ``CONFIGS["small"]`` through the driver,
tokens and logits equal to ``GoldenModel`` bit for bit at every step: on `IsaSimBackend` here,
on the RTL (Verilator and Icarus, through ``chipotle.sim.chiprun``) in `test_e2e_rtl`."""

from __future__ import annotations

import asyncio
import functools

import pytest

from chipotle.compiler import compile_model, small_model
from chipotle.config import CONFIGS
from chipotle.driver import Driver, IsaSimBackend
from chipotle.generate import StopReason
from chipotle.sim import simulators_from_env
from tbcommon.golden import assert_steps_golden

SMALL = CONFIGS["small"]
PROMPT = [1, 5, 9, 13, 17, 21]      # BOS and 5 tokens: one batch of M = 4, then 2 tokens
DECODE = 3                          # decode steps after the first sampled token
CONTEXT = 16


@functools.cache
def _model():
    return small_model()


def check_against_golden(steps, tokens, qm):
    """Assert every step's token and logits equal the golden model's."""
    assert_steps_golden(steps, tokens, qm, PROMPT, DECODE + 1)
    assert len(steps) >= DECODE + 1
    assert all(s["cycles"] > 0 for s in steps)


def isasim_run(placement="pipeline", config=SMALL):
    """Return `Driver.generate`'s result for the test's prompt on `IsaSimBackend`."""
    cm = compile_model(_model(), config, context=CONTEXT, placement=placement)
    drv = Driver(cm, IsaSimBackend(config))

    async def go():
        await drv.load()
        return await drv.generate(PROMPT, DECODE + 1, read_logits=True)

    return asyncio.run(go())


def test_e2e_isasim():
    g = isasim_run()
    assert g.stop_reason is StopReason.STEPS and g.generated == DECODE + 1
    steps = [{"pos": s.pos, "tokens": s.tokens, "logits": s.logits, "token": s.token,
              "cycles": s.cycles} for s in g.steps]
    check_against_golden(steps, g.tokens, _model())
    assert g.prefill_steps == 2 and len(g.steps) == 2 + DECODE
    assert g.ttft_cycles > 0 and g.decode_cycles_per_token > 0


# The pipeline placement under every simulator of $SIM, the tensor placement under Verilator
# only (Icarus takes minutes per step of it), and the tensor placement with the SRAM's
# read/write port at latency 2 (`ChipConfig.sram_latency`) under Verilator: the
# combinations are listed, not skipped.
_RTL_RUNS = [(s, p, 1) for s in simulators_from_env() for p in ("pipeline", "tensor")
             if p == "pipeline" or s == "verilator"]
_RTL_RUNS += [(s, "tensor", 2) for s in simulators_from_env() if s == "verilator"]


@pytest.mark.rtl
@pytest.mark.parametrize(("sim_name", "placement", "sram_latency"), _RTL_RUNS)
def test_e2e_rtl(sim_name, placement, sram_latency):
    from chipotle.sim.chiprun import Job, run_rtl

    config = SMALL.replace(sram_latency=sram_latency)
    job = Job(config=config.as_dict(), model=_model(), context=CONTEXT, prompt_tokens=PROMPT,
              steps=DECODE + 1, read_logits=True, placement=placement)
    res = run_rtl(job, sim=sim_name, cxx_opt="-O0")
    assert res["stop_reason"] == StopReason.STEPS.value and res["generated"] == DECODE + 1
    check_against_golden(res["steps"], res["tokens"], _model())
    assert res["prefill_steps"] == 2
    # the RTL's counters: every name, and the matrix unit did work in every step; its
    # useful-MAC cycles (data-independent, N ceil(K / W) per matrix instruction) equal the
    # ISA simulator's count
    sim_steps = isasim_run(placement, config).steps
    assert len(sim_steps) == len(res["steps"])
    for s, e in zip(res["steps"], sim_steps, strict=True):
        assert s["perf"]["mac_cycles"] > 0 and s["perf"]["instructions"] > 0
        assert s["perf"]["mac_cycles"] == e.perf["mac_cycles"], (s["pos"], s["perf"], e.perf)
    print({k: res[k] for k in ("ttft_cycles", "decode_cycles_per_token", "load_cycles",
                               "load_seconds", "cycles_per_second")})
