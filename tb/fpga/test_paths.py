"""`chipotle.sim.paths`: the longest-path proxy on a hand-built ECP5 netlist (no tools)."""

import pytest

from chipotle.sim.paths import CELL_NS, NET_NS, SETUP_NS, format_paths, longest_paths, rtl_name
from tbcommon.cli import refused

FF_Q = CELL_NS["TRELLIS_FF"][0]
LUT = CELL_NS["LUT4"][1][("A", "Z")]
CARRY_IN = CELL_NS["CCU2C"][1][("A0", "COUT")]
CARRY_OUT = CELL_NS["CCU2C"][1][("CIN", "S0")]


def _ff(name, d, q):
    return name, {"type": "TRELLIS_FF", "port_directions": {"CLK": "input", "DI": "input",
                                                            "Q": "output"},
                  "connections": {"CLK": [1], "DI": [d], "Q": [q]}, "attributes": {}}


def _lut(name, ins, z, src=""):
    conns = dict(zip("ABCD", ([b] for b in ins), strict=False))
    conns["Z"] = [z]
    return name, {"type": "LUT4", "port_directions": {**{p: "input" for p in conns if p != "Z"},
                                                      "Z": "output"},
                  "connections": conns, "attributes": {"src": src} if src else {}}


def _ccu(name, conns):
    dirs = {p: ("output" if p in ("S0", "S1", "COUT") else "input") for p in conns}
    return name, {"type": "CCU2C", "port_directions": dirs,
                  "connections": {p: [b] for p, b in conns.items()}, "attributes": {}}


def _netlist():
    cells = dict([
        _ff("u.a_TRELLIS_FF_Q", 20, 2), _ff("u.b_TRELLIS_FF_Q", 21, 3),
        _lut("u.x_LUT4_Z", [2, 3], 4, "design.v:7.1-7.9|/share/lattice/cells_map.v:1"),
        _lut("u.y_LUT4_Z", [4], 5, "design.v:9.1-9.9"),
        _ff("u.long_TRELLIS_FF_Q", 5, 30), _ff("u.short_TRELLIS_FF_Q", 4, 31),
        _ccu("u.sum_CCU2C_S0", {"A0": 2, "COUT": 6}),
        _ccu("u.sum_CCU2C_S0_1", {"CIN": 6, "S0": 7}),
        _ff("u.carry_TRELLIS_FF_Q", 7, 32),
        # a combinational loop, read by a flip-flop: must terminate
        _lut("u.loop_LUT4_Z", [9], 8), _lut("u.loop_LUT4_Z_1", [8], 9),
        _ff("u.looped_TRELLIS_FF_Q", 8, 33),
    ])
    nets = {"u.a": {"bits": [2], "hide_name": 0, "attributes": {}},
            "u.x": {"bits": [4], "hide_name": 0, "attributes": {}},
            "u.x_LUT4_Z_1": {"bits": [4], "hide_name": 0, "attributes": {}}}
    return {"modules": {"top": {"cells": cells, "netnames": nets}}}


def test_longest_paths_proxy_delays():
    paths = longest_paths(_netlist(), n=10)
    by_end = {p.end.split(" ")[0]: p for p in paths}
    long_ = FF_Q + NET_NS + LUT + NET_NS + LUT + NET_NS + SETUP_NS
    short = FF_Q + NET_NS + LUT + NET_NS + SETUP_NS
    carry = FF_Q + NET_NS + CARRY_IN + CARRY_OUT + NET_NS + SETUP_NS    # CIN: no net delay
    assert by_end["u.long"].delay_ns == pytest.approx(long_, abs=0.01)
    assert by_end["u.short"].delay_ns == pytest.approx(short, abs=0.01)
    assert by_end["u.carry"].delay_ns == pytest.approx(carry, abs=0.01)
    assert "u.looped" in by_end
    assert paths[0].end.startswith("u.long") and paths[0].delay_ns == max(
        p.delay_ns for p in paths)
    assert paths[0].cells == ["TRELLIS_FF", "LUT4", "LUT4"]
    assert paths[0].start.split(" ")[0] in ("u.a", "u.b")
    # the RTL sources of the path's cells (outside the cell library), in order
    assert paths[0].srcs == ["design.v:7.1-7.9", "design.v:9.1-9.9"]
    assert paths[0].nets[-1] != paths[0].nets[0]


def test_format_resolves_verilog_lines():
    paths = longest_paths(_netlist(), n=1)
    text = format_paths(paths, {"design.v": {7: "m: assign x = a & b;",
                                             9: "m: assign y = ~x;"}})
    assert "m: assign x = a & b;" in text and "m: assign y = ~x;" in text
    assert "(proxy)" in text


def test_rtl_name_and_errors():
    assert rtl_name("core.controller.a_val_LUT4_Z_1_C") == "core.controller.a_val"
    assert rtl_name("core.controller.pc") == "core.controller.pc"
    net = _netlist()
    with pytest.raises(ValueError, match="not in the netlist"):
        longest_paths(net, top="nope")
    net["modules"]["top"]["cells"]["odd"] = {"type": "MYSTERY", "port_directions": {},
                                             "connections": {}, "attributes": {}}
    with pytest.raises(ValueError, match="MYSTERY"):
        longest_paths(net)


def _write(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


@pytest.mark.parametrize("args, message", [
    (["{missing}"], "missing.json: no such file"),
    (["{dir}"], "d: is a folder, not a Yosys JSON netlist"),
    ([""], "the file name is empty: give a Yosys JSON netlist"),
    (["{text}"], "text.json: not a Yosys JSON netlist (not JSON: Expecting value, line 1 "
                 "column 1)"),
    (["{binary}"], "binary.json: not a Yosys JSON netlist (not text: byte 0xff at offset 0"),
    (["{empty}"], 'empty.json: not a Yosys JSON netlist (its "modules" object is empty)'),
    (["{list}"], 'list.json: not a Yosys JSON netlist (no "modules" object)'),
    (["{nocells}"], "nocells.json: not a Yosys JSON netlist (module 'top': no \"cells\" "
                    "object)"),
    (["{ice40}"], "ice40.json: cell types without a delay model: ['SB_LUT4']"),
    (["{good}", "--module", "nosuch"], "--module nosuch: {good} has no such module (it has "
                                       "top)"),
    (["{good}", "--top", "0"], "--top must be 1 or more, not 0"),
    (["{good}", "--top", "-1"], "--top must be 1 or more, not -1"),
    (["{good}", "--net-ns", "-5"], "--net-ns must be a finite number of ns, 0 or more, not -5"),
    (["{good}", "--net-ns", "nan"], "--net-ns must be a finite number of ns, 0 or more, not nan"),
    (["{good}", "--verilog", "/nonexistent.v"], "--verilog /nonexistent.v: no such file"),
    (["{good}", "--verilog", "{dir}"], "--verilog {dir}: is a folder, not a Verilog file"),
    (["{good}", "--verilog", "{binary}"], "binary.json: not a Verilog file (not text"),
    (["{good}", "--verilog", ""], "--verilog is empty: give a Verilog file"),
])
def test_command_refuses_bad_input_in_one_line(args, message, tmp_path, capsys):
    """Bad input is one `error:` line, exit status 2, before anything is printed: no
    traceback (a missing, binary or non-JSON file, a netlist without modules, an unknown
    --module, a missing --verilog), nor a silently wrong listing (--top 0, --net-ns -5)."""
    import json

    from chipotle.sim.paths import main
    (tmp_path / "d").mkdir()
    files = {"missing": str(tmp_path / "missing.json"), "dir": str(tmp_path / "d"),
             "text": _write(tmp_path, "text.json", "not json\n"),
             "binary": _write(tmp_path, "binary.json", b"\xff\xfe\x00\x01"),
             "empty": _write(tmp_path, "empty.json", '{"modules": {}}'),
             "list": _write(tmp_path, "list.json", "[1, 2]"),
             "nocells": _write(tmp_path, "nocells.json", '{"modules": {"top": {}}}'),
             "ice40": _write(tmp_path, "ice40.json", json.dumps({"modules": {"top": {
                 "cells": {"c": {"type": "SB_LUT4", "connections": {},
                                 "port_directions": {}}}, "netnames": {}}}})),
             "good": _write(tmp_path, "good.json", json.dumps(_netlist()))}
    err = refused(capsys, main, [a.format(**files) for a in args], "python -m chipotle.sim.paths")
    assert message.format(**files) in err, err


def test_command_lists_the_paths(tmp_path, capsys):
    import json

    from chipotle.sim.paths import main
    net = _write(tmp_path, "top.json", json.dumps(_netlist()))
    _write(tmp_path, "design.v", "module m (a);\n\n\n\n\n\nassign x = a & b;\n\nassign y = ~x;\n")
    main([net, "--top", "1"])
    out = capsys.readouterr().out
    assert out.count("ns (proxy)") == 1 and "m: assign x = a & b;" in out
