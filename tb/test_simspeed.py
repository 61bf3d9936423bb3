"""The simulation-speed plumbing: ``run_cocotb(public=False)``'s port-only configuration,
its hierarchical Verilator build, and the decode-speed arithmetic of
``chipotle.sim.bench_simspeed``."""

from pathlib import Path

import pytest

from chipotle.sim import run_cocotb
from chipotle.sim.bench_simspeed import build_record, decode_speed
from chipotle.sim.flow import _public_ports_config, hier_blocks
from tbcommon.cli import refused

TB = Path(__file__).parent

PORTS_TOP = """module ports_top(clk, a, q);
  input clk;
  wire clk;
  input [7:0] a;
  wire [7:0] a;
  output [7:0] q;
  reg [7:0] q = 8'h00;
  wire [7:0] inner;
  assign inner = a + 8'h01;
  always @(posedge clk)
    q <= inner;
endmodule
"""


def test_public_ports_config_names_every_port_of_the_toplevel_only():
    other = "module other(x, y);\n  input x;\nendmodule\n"
    text = _public_ports_config(other + PORTS_TOP, "ports_top")
    lines = text.splitlines()
    assert lines[0] == "`verilator_config"
    want = [f'public_flat_rw -module "ports_top" -var "{p}"' for p in ("clk", "a", "q")]
    assert lines[1:] == want


def test_public_ports_config_adds_the_named_signals_of_other_modules():
    verilog = "module \\top.sram (clk);\n  input clk;\nendmodule\n" + PORTS_TOP
    lines = _public_ports_config(verilog, "ports_top", [("top.sram", "bank*")]).splitlines()
    assert lines[-1] == 'public_flat_rw -module "top.sram" -var "bank*"'
    assert len(lines) == 5
    with pytest.raises(ValueError, match=r"public signal other\.x: no module 'other'"):
        _public_ports_config(verilog, "ports_top", [("other", "x")])


def test_public_ports_config_refuses_a_missing_toplevel():
    with pytest.raises(ValueError, match="no module 'chip'"):
        _public_ports_config(PORTS_TOP, "chip")


def test_decode_speed_spans_first_to_last_sampled_token():
    marks = [(100, 1.0, 0.5), (1100, 2.0, 1.0), (3100, 4.0, 2.5)]
    assert decode_speed({"token_marks": marks}) == (3000, 3.0, 2.0)
    with pytest.raises(ValueError, match="two generated tokens"):
        decode_speed({"token_marks": marks[:1]})


@pytest.mark.rtl
def test_ports_only_build_under_verilator():
    run = run_cocotb(sim="verilator", verilog=PORTS_TOP, toplevel="ports_top",
                     test_module="cocotb_ports", test_dir=TB, public=False)
    assert run.passed == ["ports_only"]
    assert (run.build_dir / "ports.vlt").is_file()


HIER_TOP = """module hier_leaf(clk, a, q);
  /* verilator no_inline_module */
  /* verilator hier_block */
  input clk;
  wire clk;
  input [7:0] a;
  wire [7:0] a;
  output [7:0] q;
  reg [7:0] q = 8'h00;
  always @(posedge clk)
    q <= a + 8'h01;
endmodule

module hier_top(clk, a, q);
  input clk;
  wire clk;
  input [7:0] a;
  wire [7:0] a;
  output [7:0] q;
  wire [7:0] mid;
  hier_leaf first(.clk(clk), .a(a), .q(mid));
  hier_leaf second(.clk(clk), .a(mid), .q(q));
endmodule
"""


def test_hier_blocks_names_the_marked_modules():
    assert hier_blocks(HIER_TOP) == ["hier_leaf"]
    assert hier_blocks(PORTS_TOP) == []
    with pytest.raises(ValueError, match="outside a module"):
        hier_blocks("/* verilator hier_block */\n" + PORTS_TOP)


def test_chip_verilog_marks_the_tile_only():
    from chipotle.config import CONFIGS
    from chipotle.hw.chip import TILE_MODULE
    from chipotle.sim.chiprun import chip_verilog

    assert hier_blocks(chip_verilog(CONFIGS["small"])) == [TILE_MODULE]


@pytest.mark.rtl
@pytest.mark.parametrize("hierarchical", [True, False])
def test_hierarchical_build_under_verilator(hierarchical):
    run = run_cocotb(sim="verilator", verilog=HIER_TOP, toplevel="hier_top",
                     test_module="cocotb_hier", test_dir=TB, public=False,
                     hierarchical=hierarchical)
    assert run.passed == ["through_two_blocks"]
    # the hierarchy block is verilated into a library of its own (Verilator's prefix V<name>)
    assert (run.build_dir / "Vhier_leaf").is_dir() == hierarchical


@pytest.mark.rtl
def test_hierarchical_build_falls_back_to_flat_for_waveforms():
    run = run_cocotb(sim="verilator", verilog=HIER_TOP, toplevel="hier_top",
                     test_module="cocotb_hier", test_dir=TB, public=False, hierarchical=True,
                     waves=True)
    assert run.passed == ["through_two_blocks"]
    assert not (run.build_dir / "Vhier_leaf").exists()
    assert (run.build_dir / "dump.vcd").stat().st_size > 0
    assert build_record(run.build_dir)["build"] == "flat"


@pytest.mark.rtl
def test_hierarchical_build_falls_back_to_flat_for_public_signals():
    run = run_cocotb(sim="verilator", verilog=HIER_TOP, toplevel="hier_top",
                     test_module="cocotb_hier", test_dir=TB, public=True, hierarchical=True)
    assert run.passed == ["through_two_blocks"]
    assert not (run.build_dir / "Vhier_leaf").exists()


@pytest.mark.rtl
def test_named_public_signals_build_flat_and_expose_only_those():
    """``public`` as ``(module, variable)`` pairs (the back door's SRAM arrays): the ports and
    those variables reach cocotb, nothing else, and a design with hierarchy blocks is built
    flat (VPI cannot reach inside a block)."""
    run = run_cocotb(sim="verilator", verilog=HIER_TOP, toplevel="hier_top",
                     test_module="cocotb_named", test_dir=TB,
                     public=[("hier_leaf", "q")], hierarchical=True)
    assert run.passed == ["named_signals_only"]
    assert not (run.build_dir / "Vhier_leaf").exists()
    assert 'public_flat_rw -module "hier_leaf" -var "q"' in \
        (run.build_dir / "ports.vlt").read_text()


def test_chip_refuses_a_tile_reset_register_without_tile_instances():
    from chipotle.config import CONFIGS
    from chipotle.hw.chip import Chip
    from tbcommon.elab import never_built

    # The refusal comes from Chip.__init__, after Amaranth's Elaboratable.__new__ registered
    # the object as one to be used: its "created but never used" warning, emitted when the
    # object is collected, is expected.  The traceback keeps the object alive, so it is
    # dropped and collected here, inside the filter, not during a later test.
    with never_built():
        with pytest.raises(ValueError, match="needs tile_instances") as refused:
            Chip(CONFIGS["small"], tile_reset_register=True)
        del refused


def test_build_record_reads_the_stamp(tmp_path):
    (tmp_path / "built.ok").write_text("ok\nbuild_seconds 12.5\nbuild hierarchical t\n")
    assert build_record(tmp_path) == {"build_seconds": "12.5", "build": "hierarchical t"}


@pytest.mark.rtl
def test_hierarchical_small_chip_is_bit_exact_with_the_golden_model(monkeypatch):
    """The regression's end-to-end job (``tb/driver/test_driver_e2e.py``, tensor placement,
    the same build) on a build that is hierarchical: every step's logits and token equal
    the golden model's."""
    from chipotle.compiler import small_model
    from chipotle.config import CONFIGS
    from chipotle.hw.chip import TILE_MODULE
    from chipotle.sim.chiprun import Job, run_rtl
    from tbcommon.golden import assert_steps_golden

    monkeypatch.setenv("HIERARCHICAL", "1")
    qm, prompt, n_new = small_model(), [1, 5, 9, 13, 17, 21], 4
    job = Job(config=CONFIGS["small"].as_dict(), model=qm, context=16, prompt_tokens=prompt,
              steps=n_new, read_logits=True, placement="tensor")
    res = run_rtl(job, sim="verilator", cxx_opt="-O0")
    assert build_record(res["build_dir"])["build"] == f"hierarchical {TILE_MODULE}"

    assert_steps_golden(res["steps"], res["tokens"], qm, prompt, n_new)
    assert len(res["steps"]) >= n_new


@pytest.mark.rtl
def test_profile_guided_build_under_verilator():
    plain = run_cocotb(sim="verilator", verilog=HIER_TOP, toplevel="hier_top",
                       test_module="cocotb_hier", test_dir=TB, public=False, hierarchical=True)
    run = run_cocotb(sim="verilator", verilog=HIER_TOP, toplevel="hier_top",
                     test_module="cocotb_hier", test_dir=TB, public=False, hierarchical=True,
                     pgo_train={"CHIPOTLE_PGO_TRAINING": "1"})
    assert run.passed == ["through_two_blocks"]
    assert run.build_dir != plain.build_dir, "a profile-guided build is cached apart"
    assert build_record(run.build_dir)["pgo"] == "yes"
    assert "pgo" not in build_record(plain.build_dir)
    # the training run profiled the top level and the hierarchy block's library
    assert list(run.build_dir.glob("*.gcda"))
    assert list((run.build_dir / "Vhier_leaf").glob("*.gcda"))
    assert not list(plain.build_dir.rglob("*.gcda"))
    # the second build used the profile (GCC's -fprofile-use on every compile)
    assert "-fprofile-generate" in (run.build_dir / "build-instrumented.log").read_text()
    assert "-fprofile-use" in (run.build_dir / "build.log").read_text()


def test_training_job_is_a_short_greedy_run_of_the_same_model():
    from chipotle.sim.chiprun import TRAINING_STEPS, Job, training_job

    job = Job(config={"mesh": "2x2"}, model="m.bin", placement="tensor",
              prompt_tokens=list(range(1, 40)), steps=256, temperature=0.8, stream=True,
              read_logits=True, step_list=[([1], 0)] * 10, idle_cycles=10**6)
    t = training_job(job)
    assert (t.config, t.model, t.placement) == (job.config, job.model, job.placement)
    assert t.prompt_tokens == job.prompt_tokens[:9] and t.steps == TRAINING_STEPS
    assert (t.temperature, t.stream, t.read_logits) == (0.0, False, False)
    assert len(t.step_list) == 4 and t.idle_cycles == 20_000
    assert training_job(Job(config={}, model=None, steps=2)).steps == 2
    assert job.steps == 256, "the job itself is left as it was"


def test_a_bad_model_is_refused_before_the_build(tmp_path, capsys, monkeypatch):
    """`--model` is read before the chip's Verilog and its build, which take minutes."""
    from chipotle.sim import bench_simspeed, chiprun
    monkeypatch.setattr(chiprun, "chip_verilog", lambda *a, **k: pytest.fail("built"))
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\0" * 40)
    for path, message in ((tmp_path / "missing.bin", "missing.bin: no such file"),
                          (bad, "bad.bin: bad header")):
        with pytest.raises(SystemExit) as e:
            bench_simspeed.main(["--config", "default", "--model", str(path)])
        assert e.value.code == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--no-generate"], "--no-generate runs only the --idle run; give --idle CYCLES"),
    (["--steps", "1"], "--steps must be at least 2 (the first token ends the prefill), not 1"),
    (["--idle", "-5"], "--idle must be a number of cycles, 0 or more, not -5"),
    (["--threads", "0"], "--threads must be 1 or more, not 0"),
    (["--model", ""], "--model is empty: give 'synthetic' or a llama2.c checkpoint"),
    (["--config", "bogus"], "--config: unknown configuration 'bogus'"),
    (["--verilog", ""], "--verilog is empty: give the chip's Verilog"),
    (["--verilog", "{missing}"], "--verilog {missing}: no such file"),
    (["--verilog", "{binary}"], "--verilog {binary}: not the chip's Verilog (not text"),
])
def test_bad_options_are_refused_in_one_line_before_the_build(args, message, tmp_path, capsys,
                                                             monkeypatch):
    """Each refusal is one `<prog>: error:` line, exit 2, before the chip's Verilog or a
    Verilator build: --no-generate without --idle printed nothing and exited 0, --idle -5 and
    --threads 0 reached the build, --model '' was the default model, and the command's own
    refusals lacked the prefix."""
    from chipotle.sim import bench_simspeed, chiprun
    monkeypatch.setattr(chiprun, "chip_verilog", lambda *a, **k: pytest.fail("built"))
    monkeypatch.setattr(chiprun, "run_rtl", lambda *a, **k: pytest.fail("ran"))
    (tmp_path / "chip.v").write_bytes(b"\xff\xfe")
    names = {"missing": str(tmp_path / "missing.v"), "binary": str(tmp_path / "chip.v")}
    err = refused(capsys, bench_simspeed.main, [a.format(**names) for a in args],
                  "python -m chipotle.sim.bench_simspeed")
    assert err.startswith(message.format(**names)), err
