"""``chipotle.sim.congestion``: router2's congestion-by-net heatmap summed by module, and a
placement's cells by device column and row band (on small hand-made inputs of nextpnr's formats)."""

import json

import pytest

from chipotle.sim.congestion import bands, by_module, main
from tbcommon.cli import refused


def test_by_module_sums_nets_under_their_module():
    rows = [("uart_chip.chip.tile_0_0.core.vector.a_LUT4_Z", 5),
            ("uart_chip.chip.tile_0_0.core.vector.b[3]", 2),
            ("uart_chip.chip.tile_0_0.netif.o_reset_LUT4_D_Z[0]", 7),
            ("uart_chip.bridge.rx", 1), ("$PACKER_GND_NET", 4)]
    assert by_module(rows) == {"vector": 7, "netif": 7, "bridge": 1, "(other)": 4}


def test_bands_count_placed_logic_cells(tmp_path, capsys):
    cells = {"a": {"type": "TRELLIS_COMB", "attributes": {"NEXTPNR_BEL": "X3/Y2/SLICEA"}},
             "b": {"type": "TRELLIS_FF", "attributes": {"NEXTPNR_BEL": "X20/Y17/SLICEB"}},
             "c": {"type": "TRELLIS_FF", "attributes": {"NEXTPNR_BEL": "X1/Y40/SLICEC"}},
             "d": {"type": "DP16KD", "attributes": {"NEXTPNR_BEL": "X5/Y1/DP16KD"}},
             "e": {"type": "TRELLIS_COMB", "attributes": {}}}
    for c in cells.values():
        c["connections"] = {"Q": [7]} if c["type"] == "TRELLIS_FF" else {"A": [7]}
    placed = {"modules": {"top": {"cells": cells, "netnames": {
        "uart_chip.chip.tile_0_0.core.controller.x": {"bits": [7]}}}}}
    assert bands(placed) == bands(placed, "Y") == {0: 1, 1: 1, 2: 1}
    assert bands(placed, "X") == {0: 2, 1: 1}          # X 3 and X 1; X 20
    with pytest.raises(ValueError, match="axis"):
        bands(placed, "Z")
    net_csv = tmp_path / "hm_congestion_by_net_2.csv"
    net_csv.write_text("uart_chip.chip.tile_0_0.core.controller.x,9\n$PACKER_VCC_NET,1\n")
    (tmp_path / "placed.json").write_text(json.dumps(placed))
    main([str(net_csv), "--placed", str(tmp_path / "placed.json")])
    out = capsys.readouterr().out
    assert "cell pins on uart_chip.chip.tile_0_0.core.controller.x: 5" in out
    assert "rows (Y // 16): 0: 1, 1: 1, 2: 1" in out
    assert "columns (X // 16): 0: 2, 1: 1" in out


def test_cli_prints_the_tallies(tmp_path, capsys):
    net_csv = tmp_path / "n.csv"
    net_csv.write_text("uart_chip.chip.tile_0_0.core.controller.x,9\n$PACKER_VCC_NET,1\n")
    main([str(net_csv)])
    out = capsys.readouterr().out
    assert "2 nets, overuse 10" in out
    assert "controller" in out and "90.0 %" in out


def _placed(bel=True):
    attributes = {"NEXTPNR_BEL": "X3/Y2/SLICEA"} if bel else {}
    return {"modules": {"top": {"cells": {"a": {"type": "TRELLIS_FF", "attributes": attributes,
                                                "connections": {"Q": [7]}}},
                                "netnames": {"x": {"bits": [7]}}}}}


@pytest.mark.parametrize("args, message", [
    (["{missing}"], "missing.csv: no such file"),
    (["{dir}"], "d: is a folder, not router2's *_congestion_by_net_<i>.csv"),
    ([""], "the file name is empty: give router2's *_congestion_by_net_<i>.csv"),
    (["{binary}"], "binary.csv: not router2's *_congestion_by_net_<i>.csv (not text: byte "
                   "0xff at offset 0 is not UTF-8)"),
    (["{unrelated}"], "unrelated.txt: line 1 is not 'net name,overuse', a line of router2's "
                      "--router2-heatmap *_congestion_by_net_<i>.csv: 'hello world'"),
    (["{good}", "--top", "-1"], "--top must be 1 or more, not -1"),
    (["{good}", "--top", "0"], "--top must be 1 or more, not 0"),
    (["{good}", "--placed", "{missing}"], "--placed {missing}: no such file"),
    (["{good}", "--placed", "{dir}"], "--placed {dir}: is a folder, not a nextpnr placement"),
    (["{good}", "--placed", ""], "--placed is empty: give a nextpnr placement"),
    (["{good}", "--placed", "{unrelated}"], "unrelated.txt: not a nextpnr placement (not JSON: "
                                            "Expecting value, line 1 column 1)"),
    (["{good}", "--placed", "{binary}"], "binary.csv: not a nextpnr placement (not text"),
    (["{good}", "--placed", "{nomodules}"], "nomodules.json: not a nextpnr placement (its "
                                            "\"modules\" object is empty; give the JSON nextpnr "
                                            "wrote with --write after placement)"),
    (["{good}", "--placed", "{unplaced}"], "unplaced.json: not a nextpnr placement (no cell "
                                           "has a NEXTPNR_BEL: a netlist before placement"),
])
def test_command_refuses_bad_input_in_one_line(args, message, tmp_path, capsys):
    """Bad input is one `error:` line, exit status 2, before anything is printed: no
    traceback (a missing, binary or non-JSON --placed, one without modules), nor a silently
    wrong tally (--top -1 dropped the last net; an unrelated text file was 0 nets)."""
    (tmp_path / "d").mkdir()
    files = {"missing": str(tmp_path / "missing.csv"), "dir": str(tmp_path / "d")}
    for key, name, content in (
            ("binary", "binary.csv", b"\xff\xfe\x00"),
            ("unrelated", "unrelated.txt", b"hello world\n"),
            ("good", "good.csv", b"uart_chip.bridge.rx,3\n"),
            ("nomodules", "nomodules.json", b'{"modules": {}}'),
            ("unplaced", "unplaced.json", json.dumps(_placed(bel=False)).encode())):
        (tmp_path / name).write_bytes(content)
        files[key] = str(tmp_path / name)
    err = refused(capsys, main, [a.format(**files) for a in args],
                  "python -m chipotle.sim.congestion")
    assert message.format(**files) in err, err


def test_an_empty_file_is_an_iteration_without_overuse(tmp_path, capsys):
    """router2 writes an empty congestion-by-net file for an iteration without overuse (its
    last): taken, and said so; --top N lists N nets."""
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "placed.json").write_text(json.dumps(_placed()))
    main([str(tmp_path / "empty.csv"), "--placed", str(tmp_path / "placed.json")])
    out = capsys.readouterr().out
    assert "0 nets, overuse 0 (no congested net: router2 writes an empty file" in out
    assert "rows (Y // 16): 0: 1" in out
    (tmp_path / "n.csv").write_text("a,1\nb,3\nnet, with a comma,2\n")
    main([str(tmp_path / "n.csv"), "--top", "2"])
    out = capsys.readouterr().out
    assert "3 nets, overuse 6" in out
    assert out.split("worst nets:\n")[1].split("\n")[:2] == ["       3  b",
                                                            "       2  net, with a comma"]
