"""``chipotle.sim.congestion``: router2's congestion-by-net heatmap summed by module, and a
placement's cells by device column and row band (on small hand-made inputs of nextpnr's formats)."""

import json

import pytest

from chipotle.sim.congestion import bands, by_module, main


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
