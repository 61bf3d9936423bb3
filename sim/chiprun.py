"""Run a job (a generation, or teacher-forced steps) on the RTL of a `Chip` under cocotb.

`run_rtl` generates the ``Chip`` Verilog of a configuration (`chip_verilog`, cached on
disk, keyed by the configuration and a digest of the hardware sources), builds it with
Verilator or Icarus (cached by `run_cocotb`), and runs the cocotb module
`chipotle.sim.cocotb_chip`, which builds a ``Driver`` over an ``RtlBackend`` and runs the
job.  The job goes to the simulator as a pickle file named by ``$CHIPOTLE_JOB`` and the
result comes back as a pickle file named by ``$CHIPOTLE_RESULT``.  Tokens are streamed to
standard output as they arrive when the job asks for it.  ``WAVES=1`` dumps waveforms (see
`run_cocotb`).

Members
-------
chip_verilog
    The cached Verilog of ``Chip(config)``.
Job
    What to run.
run_rtl
    Build and run; return the result dict.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from . import toolchain
from .flow import SIMULATORS, env_flag, generate_verilog_cached, run_cocotb

#: cocotb 2.1.0's own start-up entry points (``pygpi.entry.load_entry``'s default
#: ``$PYGPI_USERS``; ``tb/driver/test_cli_chip.py`` checks them against the installed
#: cocotb's).
COCOTB_ENTRY_POINTS = ("cocotb_tools._coverage:start_cocotb_library_coverage",
                       "cocotb.logging:_configure",
                       "cocotb._init:init_package_from_simulation",
                       "cocotb.regression:_run_regression")

#: The simulator's entry points for `run_rtl`: `chipotle.simstart.quiet_interrupt` first (a
#: module that imports only `os` and `signal`), then cocotb's.
PYGPI_USERS = ("chipotle.simstart:quiet_interrupt", *COCOTB_ENTRY_POINTS)

__all__ = ["chip_verilog", "Job", "run_rtl", "training_job", "TOPLEVEL"]

#: Name of the generated top-level Verilog module.
TOPLEVEL = "chip"


def chip_verilog(config, progress: Callable[[str], None] | None = None) -> str:
    """Return the Verilog of ``Chip(config)`` (``chipotle.hw.chip.chip_verilog``: the tile
    generated once and instantiated per position), generated once, then cached.

    The text is kept in ``build/verilog/chip-<hash>.v``, the hash covering the configuration
    and `chipotle.sim.flow.source_digest` (the hardware sources).

    Parameters
    ----------
    config : chipotle.config.ChipConfig
    progress : callable of str, optional
        Told when a generation starts and ends.
    """
    from chipotle.hw.chip import chip_verilog as generate

    return generate_verilog_cached(lambda: generate(config, name=TOPLEVEL), TOPLEVEL,
                                   f"tile instances {config!r}", progress=progress)


@dataclass
class Job:
    """A job for `run_rtl` (pickled for the simulator process).

    Attributes
    ----------
    config : dict
        ``ChipConfig.as_dict()`` of the chip.
    model : path or object
        A llama2.c checkpoint path, an object ``compile_model`` takes (``Checkpoint``,
        ``QuantizedModel``), or a ``CompiledModel`` (for ``config``) used as it is.
    tokenizer : path, optional
        For the text (and the streamed story).
    context : int, optional
        Positions to compile for (``compile_model``'s ``context``).
    placement : str
        ``compile_model``'s ``placement`` ("pipeline" or "tensor").
    kind : str
        ``"generate"``: `Driver.generate` from ``prompt_tokens``; ``"steps"``: run the
        ``(tokens, pos)`` pairs of ``step_list`` and return each step's token and logits;
        ``"idle"``: only run the clock for ``idle_cycles`` cycles after reset (the
        simulator's own speed, `chipotle.sim.bench_simspeed`; ``model`` is not used).
    prompt_tokens : list of int
        BOS included.
    steps : int or None
        Tokens to sample (``"generate"``).
    temperature, topp, seed
        Sampling (``"generate"``).
    read_logits : bool
        Read the logits back at every step (``"generate"``; always for ``"steps"``).
    step_list : list of (list of int, int)
        For ``"steps"``.
    stream : bool
        Print each token's text to standard output as it arrives.
    skip_zero : bool
        Load without the all-zero words (the RTL's SRAM is zero after configuration).
    perf : bool or "phase"
        Read the performance counters around each step (True), only at the generation's
        phase boundaries (``"phase"``: `chipotle.driver.Driver`'s ``perf``; the result's
        steps then carry no counters, ``perf_prefill`` / ``perf_decode`` do), or never.
    backdoor : bool
        Load the SRAM images straight into the simulator's memories (the programs still go
        through the host link).
    clock : {"gpi", "py"}
        cocotb clock implementation (`chipotle.driver.rtl.RtlBackend`'s ``clock``).
    idle_cycles : int
        Cycles of an ``"idle"`` job.
    trace_step : int
        For `chipotle.sim.cocotb_trace`: the index in ``step_list`` of the step whose
        instruction retires are recorded.
    trace_retires : bool
        For `chipotle.sim.cocotb_trace`: record the retires (needs ``public``); else only the
        per-tile performance counters of every step.
    """

    config: dict
    model: Any
    tokenizer: Any = None
    context: int | None = None
    placement: str = "pipeline"
    kind: str = "generate"
    prompt_tokens: list = field(default_factory=lambda: [1])
    steps: int | None = 256
    temperature: float = 0.0
    topp: float = 0.9
    seed: int | None = None
    read_logits: bool = False
    step_list: list = field(default_factory=list)
    stream: bool = False
    skip_zero: bool = True
    perf: bool | str = True
    backdoor: bool = False
    clock: str = "gpi"
    idle_cycles: int = 0
    trace_step: int = -1
    trace_retires: bool = False


TRAINING_STEPS = 6
"""Decode steps of the training run of a profile-guided build (`training_job`)."""


def training_job(job: Job) -> Job:
    """Return the training run of a profile-guided build for ``job``: the same chip, model
    and placement, at most 9 prompt tokens and `TRAINING_STEPS` decode steps (greedy, no
    streaming, no logits read back), so that every unit of the tile runs (host-link load,
    prefill, decode, argmax) in a few seconds of simulation.  An ``"idle"`` job trains on
    at most 20,000 idle cycles; a ``"steps"`` job on its first 4 steps."""
    return replace(job, prompt_tokens=list(job.prompt_tokens[:9]), stream=False,
                   steps=TRAINING_STEPS if job.steps is None else min(job.steps, TRAINING_STEPS),
                   temperature=0.0, read_logits=False, step_list=list(job.step_list[:4]),
                   idle_cycles=min(job.idle_cycles, 20_000))


def _write_job(path: Path, job: Job) -> None:
    """Pickle ``job``'s fields for the simulator process (``$CHIPOTLE_JOB``); shallow, since
    ``asdict`` would turn a QuantizedModel (a dataclass) into a dict."""
    path.write_bytes(pickle.dumps({f.name: getattr(job, f.name) for f in fields(job)}))


def run_rtl(job: Job, *, sim: str = "verilator", cxx_opt: str = toolchain.FAST_CXX_OPT,
            waves: bool | None = None, public: bool | None = None, threads: int = 1,
            verilog: str | None = None, progress: Callable[[str], None] | None = None,
            test_module: str = "chipotle.sim.cocotb_chip", pgo: bool | None = None) -> dict:
    """Build the chip of ``job.config`` and run ``job`` on it; return the result.

    Parameters
    ----------
    job : Job
    sim : {"verilator", "icarus"}
    cxx_opt : str
        Verilator's C++ optimisation (default `chipotle.sim.toolchain.FAST_CXX_OPT`,
        ``-O3``, which simulates fastest; the regression uses ``-O0``, which builds
        fastest).
    waves : bool, optional
        Dump waveforms; default ``$WAVES``.
    public : bool or sequence of (str, str), optional
        Verilator: the internal signals exposed to cocotb (`run_cocotb`'s ``public``: True
        for every one, about 10 times slower; pairs for some, a flat build).  Default:
        `chipotle.hw.chip.BACKDOOR_SIGNALS` (the SRAM arrays) when ``job.backdoor`` needs
        them, else none.
    threads : int
        Verilator: threads of the model (`run_cocotb`'s ``threads``; default 1).
    verilog : str, optional
        The chip's Verilog (default `chip_verilog` of ``job.config``): several runs of one
        design stay on one build while the hardware sources change.
    progress : callable of str, optional
        Told about the slow phases (Verilog generation, the simulator build).
    test_module : str
        The cocotb module that runs the job (default `chipotle.sim.cocotb_chip`;
        `chipotle.sim.cocotb_trace` records instruction retires for `chipotle.sim.trace`).
    pgo : bool, optional
        Verilator: a profile-guided build (`run_cocotb`'s ``pgo_train``), trained by
        `training_job` of ``job`` (a few decode steps); about 20 % faster, and a build costs
        two compiles and the training run.  Default: ``$PGO`` (``1`` turns it on), else off.

    Returns
    -------
    dict
        Written by `chipotle.sim.cocotb_chip` (see there): ``tokens``, ``text``,
        ``stop_reason``, ``steps`` (per-step ``cycles``, ``perf``, ``token``, ``logits``),
        ``ttft_cycles``, ``decode_cycles_per_token``, ``load_cycles``, ``load_seconds``,
        ``load_bytes``, ``sim_cycles``, ``sim_seconds``, ``cycles_per_second``, plus
        ``build_seconds`` added here.

    Raises
    ------
    ValueError
        If ``sim`` is not a known simulator.
    AssertionError
        If the cocotb run failed (with its message).
    """
    from chipotle.config import ChipConfig
    from chipotle.hw.chip import BACKDOOR_SIGNALS

    if sim not in SIMULATORS:
        raise ValueError(f"`sim` must be one of {', '.join(SIMULATORS)}, not {sim!r}")
    config = ChipConfig(**job.config)
    if public is None:
        public = BACKDOOR_SIGNALS if job.backdoor else False
    t0 = time.perf_counter()
    if verilog is None:
        verilog = chip_verilog(config, progress)
    with tempfile.TemporaryDirectory(prefix="chipotle-job-") as tmp:
        job_path, result_path = Path(tmp) / "job.pkl", Path(tmp) / "result.pkl"
        _write_job(job_path, job)
        if progress:
            progress(f"running the {config} chip under {sim}")
        env = {"CHIPOTLE_JOB": str(job_path), "CHIPOTLE_RESULT": str(result_path),
               "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"),
               "GPI_LOG_LEVEL": os.environ.get("GPI_LOG_LEVEL", "WARNING"),
               "PYGPI_USERS": ",".join(PYGPI_USERS)}
        pgo_train = None
        if env_flag("PGO", False) if pgo is None else pgo:
            train_path = Path(tmp) / "train.pkl"
            _write_job(train_path, training_job(job))
            pgo_train = {**env, "CHIPOTLE_JOB": str(train_path),
                         "CHIPOTLE_RESULT": str(Path(tmp) / "train-result.pkl")}
        run = run_cocotb(sim=sim, verilog=verilog, toplevel=TOPLEVEL,
                         test_module=test_module, extra_env=env, waves=waves,
                         cxx_opt=cxx_opt, check=False, threads=threads,
                         public=public, pgo_train=pgo_train)
        if not result_path.exists():
            run.raise_on_failure()
            raise AssertionError(f"the cocotb run wrote no result ({run.results_xml})")
        result = pickle.loads(result_path.read_bytes())
        run.raise_on_failure()
    result["wall_seconds"] = time.perf_counter() - t0
    result["build_dir"] = str(run.build_dir)
    return result
