"""The simulation-speed plumbing: ``run_cocotb(public=False)``'s port-only configuration,
and the decode-speed arithmetic of ``chipotle.sim.bench_simspeed``."""

from pathlib import Path

import pytest

from chipotle.sim import run_cocotb
from chipotle.sim.bench_simspeed import decode_speed
from chipotle.sim.flow import _public_ports_config

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
