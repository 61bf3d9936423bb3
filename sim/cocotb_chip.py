"""cocotb test module: run a `chipotle.sim.chiprun.Job` on a ``Chip`` through the `Driver`.

Launched by `chipotle.sim.chiprun.run_rtl` (never collected by pytest).  Reads the pickled
job named by ``$CHIPOTLE_JOB``, compiles the model for the job's configuration, brings up an
``RtlBackend`` (clock, reset, host-link monitor), loads the model through the host link and
runs the job; writes a pickled result dict to ``$CHIPOTLE_RESULT``:

``tokens``, ``text``, ``stop_reason`` (str), ``prompt_tokens``, ``generated``
    As `GenerateResult` (``"generate"`` jobs).
``steps``
    Per step: ``tokens``, ``pos``, ``token``, ``logits`` (int32 array or None), ``cycles``,
    ``perf`` (summed over tiles).
``prefill_steps``, ``ttft_cycles``, ``decode_cycles_per_token``
``load_bytes``, ``load_cycles``, ``load_seconds``
    The host-link load.
``sim_cycles``, ``sim_seconds``, ``cycles_per_second``
    Simulated cycles after the load and the wall time they took.
``sim_cpu_seconds``
    The simulator process's CPU time over the same span (the speed on a loaded machine).
``token_marks``
    ``(cycle, wall seconds, CPU seconds)`` when each sampled (not forced) token arrived
    (``"generate"`` jobs, from the end of the load), for the speed of the decode steps
    alone.

An ``"idle"`` job (``idle_cycles``) only runs the clock for that many cycles after reset and
returns ``sim_cycles``, ``sim_seconds``, ``cycles_per_second``: the cost of the model and the
clock with no testbench work.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from pathlib import Path

import cocotb


def _compile(job, config):
    from chipotle.compiler import compile_model
    from chipotle.model import load_checkpoint

    model = job["model"]
    if hasattr(model, "programs") and hasattr(model, "step"):    # compiled already
        return model
    if isinstance(model, (str, Path)):
        model = load_checkpoint(Path(model))
    return compile_model(model, config, context=job.get("context"),
                         placement=job.get("placement", "pipeline"))


def _step_dict(s) -> dict:
    return {"tokens": list(s.tokens), "pos": s.pos, "token": s.token, "logits": s.logits,
            "cycles": s.cycles, "perf": dict(s.perf)}


@cocotb.test()
async def run_job(dut):
    """Load the job's model through the host link and run the job."""
    from chipotle.config import ChipConfig
    from chipotle.driver import Driver
    from chipotle.driver.rtl import RtlBackend

    # (Ctrl-C does not reach this process: the host starts it with SIGINT ignored and kills
    # it, `chipotle.sim.flow._execute_shielded`; where the host cannot, off its main thread,
    # `chipotle.simstart.quiet_interrupt` ends it quietly.  The one-line report is the
    # host command's.)
    job = pickle.loads(Path(os.environ["CHIPOTLE_JOB"]).read_bytes())
    config = ChipConfig(**job["config"])
    backend = RtlBackend(dut, config, clock=job.get("clock", "gpi"))
    await backend.power_on()
    if job.get("kind") == "idle":
        from cocotb.triggers import Timer

        t0, p0, c0 = time.perf_counter(), time.process_time(), backend.cycle
        await Timer(job["idle_cycles"] * backend.clock_ns, unit="ns")
        secs, cpu = time.perf_counter() - t0, time.process_time() - p0
        cycles = backend.cycle - c0
        Path(os.environ["CHIPOTLE_RESULT"]).write_bytes(pickle.dumps(
            {"sim_cycles": cycles, "sim_seconds": secs, "cycles_per_second": cycles / secs,
             "sim_cpu_seconds": cpu}))
        return
    compiled = _compile(job, config)
    tokenizer = None
    if job.get("tokenizer"):
        from chipotle.tokenizer import load_tokenizer
        tokenizer = load_tokenizer(Path(job["tokenizer"]), vocab_size=compiled.model.vocab_size)
    out = sys.__stdout__
    stream = job.get("stream", False)

    driver = Driver(compiled, backend, tokenizer, perf=job.get("perf", True))

    last = [0.0]

    def progress(done, total):
        now = time.perf_counter()
        if stream and (now - last[0] > 2 or done == total):
            last[0] = now
            print(f"[load] {done}/{total} bytes", file=sys.__stderr__, flush=True)

    t0, c0 = time.perf_counter(), backend.cycle
    await driver.load(progress=progress, skip_zero=job.get("skip_zero", True),
                      backdoor=job.get("backdoor", False))
    result = {"load_bytes": driver.load_bytes(), "load_cycles": backend.cycle - c0,
              "load_seconds": time.perf_counter() - t0}

    t1, p1, c1 = time.perf_counter(), time.process_time(), backend.cycle
    if job.get("kind", "generate") == "steps":
        steps = []
        for tokens, pos in job["step_list"]:
            steps.append(_step_dict(await driver.step(tokens, pos, logits=True)))
        result["steps"] = steps
    else:
        marks = []

        def on_token(ev):
            if not ev.forced:
                marks.append((backend.cycle, time.perf_counter() - t1,
                              time.process_time() - p1))
            if stream:
                out.write(ev.text)
                out.flush()

        g = await driver.generate(job["prompt_tokens"], job.get("steps"),
                                  temperature=job.get("temperature", 0.0),
                                  topp=job.get("topp", 0.9), seed=job.get("seed"),
                                  on_token=on_token, read_logits=job.get("read_logits", False))
        if stream:
            out.write("\n")
            out.flush()
        result.update(seed=g.seed, tokens=list(g.tokens), text=g.text,
                      stop_reason=g.stop_reason.value,
                      prompt_tokens=g.prompt_tokens, generated=g.generated,
                      steps=[_step_dict(s) for s in g.steps], prefill_steps=g.prefill_steps,
                      ttft_cycles=g.ttft_cycles,
                      decode_cycles_per_token=g.decode_cycles_per_token,
                      perf_prefill=g.perf_sum("prefill"), perf_decode=g.perf_sum("decode"),
                      token_marks=marks)
    secs = time.perf_counter() - t1
    result.update(sim_cycles=backend.cycle - c1, sim_seconds=secs,
                  sim_cpu_seconds=time.process_time() - p1,
                  cycles_per_second=(backend.cycle - c1) / secs if secs > 0 else 0.0,
                  flits_in=backend.flits_in, flits_out=backend.flits_out)
    Path(os.environ["CHIPOTLE_RESULT"]).write_bytes(pickle.dumps(result))
