"""Regression: the SkidBuffer component under both simulators (proves the sim/ flow)."""

from pathlib import Path

import pytest

from chipotle.hw.stream_util import SkidBuffer
from chipotle.sim import generate_verilog, run_cocotb
from tbcommon.pysim import run_testbench

TB = Path(__file__).parent


@pytest.mark.rtl
def test_skid_buffer_rtl(sim, capfd):
    verilog = generate_verilog(SkidBuffer(16), name="skid_buffer")
    run = run_cocotb(
        sim=sim, verilog=verilog, toplevel="skid_buffer", test_module="cocotb_skid",
        test_dir=TB, extra_env={"SKID_WIDTH": "16"},
    )
    assert len(run.passed) == 5
    # The simulator's own output (a subprocess): cocotb's output is there, and Verilator's
    # "- :0: Verilog $finish" line is not (sim/verilator_finish.cpp).
    out = capfd.readouterr().out
    assert "cocotb_skid.full_throughput passed" in out
    assert "Verilog $finish" not in out


@pytest.mark.rtl
def test_waves_dump(sim):
    """``waves=True`` (what ``WAVES=1`` selects) leaves a waveform in the build folder."""
    verilog = generate_verilog(SkidBuffer(8), name="skid_buffer_waves")
    run = run_cocotb(
        sim=sim, verilog=verilog, toplevel="skid_buffer_waves", test_module="cocotb_skid",
        test_dir=TB, testcase="full_throughput", extra_env={"SKID_WIDTH": "8"}, waves=True,
    )
    dump = run.build_dir / ("dump.vcd" if sim == "verilator" else "skid_buffer_waves.fst")
    dump.unlink(missing_ok=True)
    run_cocotb(
        sim=sim, verilog=verilog, toplevel="skid_buffer_waves", test_module="cocotb_skid",
        test_dir=TB, testcase="full_throughput", extra_env={"SKID_WIDTH": "8"}, waves=True,
    )
    # 420 ns of a small design: a few hundred bytes of FST, tens of kilobytes of VCD.
    assert dump.is_file() and dump.stat().st_size > 500, dump


@pytest.mark.rtl
def test_build_output_goes_to_the_log(sim, capfd, tmp_path, monkeypatch):
    """A fresh build writes the compiler's output to ``build.log`` and only progress lines to
    stderr; a failing build prints the log's last lines and raises."""
    monkeypatch.setenv("CHIPOTLE_BUILD_DIR", str(tmp_path))
    verilog = generate_verilog(SkidBuffer(8), name="skid_buffer_log")
    run = run_cocotb(sim=sim, verilog=verilog, toplevel="skid_buffer_log",
                     test_module="cocotb_skid", test_dir=TB, testcase="full_throughput",
                     extra_env={"SKID_WIDTH": "8"})
    err = capfd.readouterr().err
    assert f"{sim} build of skid_buffer_log: not in the cache" in err and "done in" in err
    log = run.build_dir / "build.log"
    assert log.is_file()              # iverilog prints nothing when all is well
    if sim == "verilator":
        assert "Verilator: Built from" in log.read_text() and "Built from" not in err
    # the same design again: the cached build is reused, and says so
    run_cocotb(sim=sim, verilog=verilog, toplevel="skid_buffer_log", test_module="cocotb_skid",
               test_dir=TB, testcase="full_throughput", extra_env={"SKID_WIDTH": "8"})
    err = capfd.readouterr().err
    assert f"{sim} build of skid_buffer_log: cached in" in err and "done in" not in err, err
    broken = verilog.replace("endmodule", "this is not verilog;\nendmodule", 1)
    with pytest.raises(RuntimeError):
        run_cocotb(sim=sim, verilog=broken, toplevel="skid_buffer_log",
                   test_module="cocotb_skid", test_dir=TB, testcase="full_throughput",
                   extra_env={"SKID_WIDTH": "8"})
    err = capfd.readouterr().err
    assert "FAILED; last lines of" in err and "build.log" in err


def test_skid_buffer_output_is_registered_and_a_waiting_sink_is_served_pysim():
    """Two guarantees the cocotb bench (its sink's ready is random, independent of valid)
    does not check: a word accepted while the sink is not ready appears on ``o`` in the
    next cycle (``o.valid`` does not wait for ``o.ready``: a stream source must not), so a
    sink that raises ``ready`` only after it sees ``valid`` (as a stream sink may) is served,
    every word once, in order.  A buffer that loaded its output register only on
    ``o.ready`` parked such a word in its skid register forever (mutation audit)."""
    dut = SkidBuffer(8)
    words = list(range(1, 25))
    got = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.payload, 0xA5)
        ctx.set(dut.i.valid, 1)
        await ctx.tick()                 # accepted (the buffer is empty: i.ready)
        ctx.set(dut.i.valid, 0)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 0xA5
        await ctx.tick().repeat(3)       # held while the sink waits
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 0xA5
        ctx.set(dut.o.ready, 1)
        await ctx.tick()
        ctx.set(dut.o.ready, 0)
        assert not ctx.get(dut.o.valid)
        # a source offering every cycle, a sink that accepts the cycle after it sees valid
        pending = list(words)
        for _ in range(200):
            if not pending and len(got) == len(words):
                break
            ctx.set(dut.i.valid, bool(pending))
            ctx.set(dut.i.payload, pending[0] if pending else 0)
            o_valid, o_ready = ctx.get(dut.o.valid), ctx.get(dut.o.ready)
            took_in = pending and ctx.get(dut.i.ready)
            if o_valid and o_ready:
                got.append(ctx.get(dut.o.payload))
            await ctx.tick()
            if took_in:
                pending.pop(0)
            ctx.set(dut.o.ready, o_valid and not o_ready)
        assert got == words

    run_testbench(dut, bench)
