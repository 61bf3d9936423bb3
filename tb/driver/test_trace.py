"""`chipotle.sim.trace`: one step of the small chip on the ISA simulator and on the RTL.

The RTL side runs the counters-only trace on the ports-only Verilator build of
``test_driver_e2e`` (the same Verilog and flags: the build is shared), so the test costs one
short simulation.  It checks the cost model's claims on the RTL: the matrix unit's cycles per
tile (`chipotle.isa.core.matrix_cycles`, the write-back's pace included) equal the RTL's
``MATRIX_CYCLES`` but for cycles the write-back lost on the shared SRAM port, and the
useful-MAC cycles and instruction counts are equal.
"""

from __future__ import annotations

import pytest

from chipotle.compiler import compile_model, small_model
from chipotle.config import CONFIGS
from chipotle.sim import simulators_from_env
from chipotle.sim.trace import compare, isasim_trace, rtl_trace, step_list
from tbcommon.cli import refused

SMALL = CONFIGS["small"]


def test_isasim_trace_retires_every_instruction():
    cm = compile_model(small_model(), SMALL, context=16, placement="tensor")
    steps = step_list(cm, 5)
    assert steps == [([1, 8, 15, 22], 0), ([29], 4), ([36], 5)]
    est = isasim_trace(cm, steps)
    last = est["steps"][-1]
    for xy, retires in est["retires"].items():
        assert len(retires) == last["perf_per_tile"][xy]["instructions"]
        cycles = [c for c, _ in retires]
        assert cycles == sorted(cycles) and 0 < cycles[-1] <= last["cycles"]
    with pytest.raises(ValueError, match="compiled context"):
        step_list(cm, 16)


@pytest.mark.rtl
@pytest.mark.parametrize("sim_name", [s for s in simulators_from_env() if s == "verilator"])
def test_trace_counters_match_the_cost_model(sim_name):
    cm = compile_model(small_model(), SMALL, context=16, placement="tensor")
    steps = step_list(cm, 5)
    est = isasim_trace(cm, steps)
    rtl = rtl_trace(cm, steps, sim=sim_name, retires=False, cxx_opt="-O0")
    rep = compare(cm, est, rtl)
    assert rep.bit_exact
    for xy, t in rep.tiles.items():
        c = t["counters"]
        assert c["mac_cycles"][0] == c["mac_cycles"][1], (xy, c["mac_cycles"])
        assert c["instructions"][0] == c["instructions"][1], (xy, c["instructions"])
        e, r = c["matrix_cycles"]
        assert e <= r <= e + c["sram_stalls"][1], (xy, c["matrix_cycles"], c["sram_stalls"])
    print(rep)


@pytest.mark.parametrize("argv, message", [
    (["--context", "0"], "--context must be a positive number of positions, not 0 ("),
    (["--context", "-1"], "--context must be a positive number of positions, not -1 ("),
    (["--config", "default", "--context", "0"], "--context must be a positive number of "
                                                "positions, not 0 ("),
    (["--top", "-1"], "--top must be 1 or more (the instructions listed), not -1 ("),
    (["--top", "0"], "--top must be 1 or more (the instructions listed), not 0 ("),
    (["--model", ""], "--model is empty: give a llama2.c checkpoint file or 'synthetic', or "
                      "leave --model out for the default model ("),
    (["--model", "", "--config", "default"], "--model is empty: "),
])
def test_trace_refuses_bad_options_before_any_run(capsys, monkeypatch, argv, message):
    """``python -m chipotle.sim.trace``: ``--context 0`` was silently 16 on the synthetic
    model, an empty ``--model`` the default model, and ``--top -1`` (or 0) listed a wrong
    number of instructions after the RTL run; each is one usage line (the project's parser,
    not argparse's usage block), exit status 2, before anything runs.  The runs are
    replaced by a failure here, so that a missing check cannot start an RTL build."""
    from chipotle.sim import trace

    def no_run(*args, **kwargs):
        raise AssertionError("the trace ran: the options were not refused")
    monkeypatch.setattr(trace, "isasim_trace", no_run)
    monkeypatch.setattr(trace, "rtl_trace", no_run)
    err = refused(capsys, trace.main, argv, "python -m chipotle.sim.trace")
    assert err.startswith(message), err


@pytest.mark.model
def test_trace_refuses_a_model_it_cannot_read_or_fit_in_one_line(capsys, monkeypatch,
                                                                 model_paths, tmp_path):
    """A configuration too small for the checkpoint names the whole ``--config`` that fits
    (`chipotle.cli.config_tips`: ``small,sram_kib=...``, not a bare key), and a missing
    default checkpoint says where it was looked for and how to fetch it; both one line
    without the ``--help`` pointer (they are not the options' syntax), before any run."""
    from chipotle.sim import trace

    def no_run(*args, **kwargs):
        raise AssertionError("the trace ran: the model was not refused")
    monkeypatch.setattr(trace, "isasim_trace", no_run)
    monkeypatch.setattr(trace, "rtl_trace", no_run)
    for argv, env, message in (
            (["--config", "small", "--model", str(model_paths[0])], None,
             "a configuration that fits: --config small,sram_kib="),
            (["--config", "default"], tmp_path, f"checkpoint not found: "
                                                f"{tmp_path / 'stories260K.bin'} (from "
                                                f"$CHIPOTLE_MODEL_DIR={tmp_path}")):
        if env is not None:
            monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(env))
        err = refused(capsys, trace.main, argv, "python -m chipotle.sim.trace")
        assert message in err, err
        assert "--help lists the options" not in err, err
