"""cocotb side of the NoC benchmark (``tb/noc/bench_noc.py``): measures, does not assert.

One coroutine plays every tile: open-loop sources (a Bernoulli process per tile, unbounded
source queues) and always-ready sinks, so that the figures are the network's own.  Results
go to the JSON file named by ``BENCH_OUT``.

Parameters (environment): ``MESH_W``, ``MESH_H``, ``BENCH_RATES_UNIFORM``,
``BENCH_RATES_HOTSPOT`` (comma-separated offered loads, flits/cycle/tile), ``BENCH_LEN``
(flits per packet), ``BENCH_WARMUP``, ``BENCH_MEASURE`` (cycles), ``BENCH_SEED``.
"""

from __future__ import annotations

import json
import os
import random
from collections import deque

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from chipotle.hw.noc import Head, NocConfig, PacketType, encode_head, pack_flit

CFG = NocConfig()
W = int(os.environ.get("MESH_W", "4"))
H = int(os.environ.get("MESH_H", "4"))
TILES = [(x, y) for y in range(H) for x in range(W)]
LAST = 1 << CFG.flit_layout["last"].offset
ADDR_OFF = CFG.head_layout["addr"].offset
ADDR_MASK = (1 << CFG.addr_width) - 1


def _floats(name, default):
    return [float(v) for v in os.environ.get(name, default).split(",") if v]


class Network:
    """Drive all local ports of the mesh cycle by cycle from one coroutine."""

    def __init__(self, dut):
        self.dut = dut
        n = len(TILES)
        self.in_valid = [getattr(dut, f"i_local__{i}__valid") for i in range(n)]
        self.in_ready = [getattr(dut, f"i_local__{i}__ready") for i in range(n)]
        self.in_payload = [getattr(dut, f"i_local__{i}__payload") for i in range(n)]
        self.out_valid = [getattr(dut, f"o_local__{i}__valid") for i in range(n)]
        self.out_ready = [getattr(dut, f"o_local__{i}__ready") for i in range(n)]
        self.out_payload = [getattr(dut, f"o_local__{i}__payload") for i in range(n)]
        self.cycle = 0
        self.next_id = 1
        self.packets = {}      # id -> [created, head in, head out, tail out, src, dst]
        self.queues = [deque() for _ in range(n)]   # per source: [pid, flits, next flit]
        self.current = [None] * n                   # packet being injected per source
        self.receiving = [None] * n                 # id of the packet arriving per tile
        self.delivered_flits = 0

    async def start(self):
        dut = self.dut
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        dut.i_host__valid.value = 0
        dut.o_host__ready.value = 1
        for v in self.in_valid:
            v.value = 0
        for r in self.out_ready:
            r.value = 1
        dut.rst.value = 1
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        await RisingEdge(dut.clk)

    def packet(self, src, dst, length):
        """Return the flits of a new packet and register it."""
        pid = self.next_id
        self.next_id += 1
        head = Head(PacketType.SRAM_WRITE, dst[0], dst[1], dst[0], dst[1], False,
                    src[0], src[1], length - 1, pid)
        words = [encode_head(head, CFG)] + [pid] * (length - 1)
        self.packets[pid] = [self.cycle, None, None, None, src, dst]
        return pid, [pack_flit(w, i == length - 1, CFG) for i, w in enumerate(words)]

    async def run(self, cycles, make_traffic, stop_when=None):
        """Run ``cycles`` cycles (or until ``stop_when()``), ``make_traffic(cycle)``
        returning ``[(src index, flits, pid), ...]`` to queue."""
        n = len(TILES)
        queues, current, receiving = self.queues, self.current, self.receiving
        clk = RisingEdge(self.dut.clk)
        for _ in range(cycles):
            # Drive the inputs for this cycle.
            for i in range(n):
                cur = current[i]
                if cur is None and queues[i]:
                    cur = current[i] = queues[i].popleft()
                if cur is not None:
                    self.in_valid[i].value = 1
                    self.in_payload[i].value = cur[1][cur[2]]
                else:
                    self.in_valid[i].value = 0
            await ReadOnly()
            c = self.cycle
            for i in range(n):
                cur = current[i]
                if cur is not None and self.in_ready[i].value == 1:
                    if cur[2] == 0:
                        self.packets[cur[0]][1] = c
                    cur[2] += 1
                    if cur[2] == len(cur[1]):
                        current[i] = None
                if self.out_valid[i].value == 1:
                    flit = int(self.out_payload[i].value)
                    self.delivered_flits += 1
                    if receiving[i] is None:
                        receiving[i] = (flit >> ADDR_OFF) & ADDR_MASK
                        self.packets[receiving[i]][2] = c
                    if flit & LAST:
                        self.packets[receiving[i]][3] = c
                        receiving[i] = None
            await clk
            self.cycle += 1
            for src, flits, pid in make_traffic(self.cycle):
                queues[src].append([pid, flits, 0])
            if stop_when is not None and stop_when():
                break


def manhattan(a, b):
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


async def zero_load(net: Network):
    """Latency of lone packets from tile (0, 0): head and tail, against hops."""
    rows = []
    for dst in TILES:
        for length in (1, 4):
            pid, flits = net.packet((0, 0), dst, length)
            net.queues[0].append([pid, flits, 0])
            await net.run(60, lambda c: [],
                          stop_when=lambda p=pid: net.packets[p][3] is not None)
            created, head_in, head_out, tail_out, _, _ = net.packets[pid]
            rows.append({"dst": dst, "hops": manhattan((0, 0), dst), "flits": length,
                         "head_latency": head_out - head_in,
                         "tail_latency": tail_out - head_in})
    return rows


async def load(net: Network, pattern: str, rate: float, length: int, warmup: int,
               measure: int, rng: random.Random):
    """Average latency and accepted throughput at offered load ``rate``."""
    n = len(TILES)
    spot = TILES.index((1, 1))
    p_packet = rate / length
    tagged = []
    start_cycle = net.cycle

    def traffic(c):
        out = []
        for i, src in enumerate(TILES):
            if pattern == "hotspot" and i == spot:
                continue
            if rng.random() < p_packet:
                if pattern == "uniform":
                    j = rng.randrange(n - 1)
                    dst = TILES[j + (j >= i)]
                else:
                    dst = TILES[spot]
                pid, flits = net.packet(src, dst, length)
                if warmup <= c - start_cycle < warmup + measure:
                    tagged.append(pid)
                out.append((i, flits, pid))
        return out

    net.delivered_flits = 0
    await net.run(warmup, traffic)
    d0 = net.delivered_flits
    await net.run(measure, traffic)
    accepted = (net.delivered_flits - d0) / measure / n
    # Drain the tagged packets (sources keep injecting so the load stays up), then flush.
    limit = 6 * measure
    await net.run(limit, traffic,
                  stop_when=lambda: all(net.packets[p][3] is not None for p in tagged))
    done = [net.packets[p] for p in tagged if net.packets[p][3] is not None]
    backlog = sum(len(q) for q in net.queues)
    await net.run(200_000, lambda c: [],
                  stop_when=lambda: not any(net.queues) and not any(net.current)
                  and not any(net.receiving))
    await net.run(30, lambda c: [])
    lat = [p[3] - p[0] for p in done]
    net_lat = [p[3] - p[1] for p in done]
    senders = n - 1 if pattern == "hotspot" else n
    return {
        "pattern": pattern, "offered": rate, "offered_per_sender": rate,
        "accepted": accepted, "accepted_per_sender": accepted * n / senders,
        "packets": len(tagged), "delivered": len(done),
        "latency": sum(lat) / len(lat) if lat else None,
        "network_latency": sum(net_lat) / len(net_lat) if net_lat else None,
        "backlog_at_end": backlog, "cycles": net.cycle - start_cycle,
    }


@cocotb.test()
async def bench(dut):
    """Zero-load latency and load sweeps on the mesh; writes ``BENCH_OUT``."""
    net = Network(dut)
    await net.start()
    rng = random.Random(int(os.environ.get("BENCH_SEED", "1")))
    length = int(os.environ.get("BENCH_LEN", "4"))
    warmup = int(os.environ.get("BENCH_WARMUP", "300"))
    measure = int(os.environ.get("BENCH_MEASURE", "1500"))
    results = {"mesh": [W, H], "packet_flits": length, "warmup": warmup, "measure": measure,
               "zero_load": await zero_load(net), "uniform": [], "hotspot": []}
    for rate in _floats("BENCH_RATES_UNIFORM", "0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8"):
        results["uniform"].append(await load(net, "uniform", rate, length, warmup, measure,
                                             rng))
        dut._log.info("uniform %s", results["uniform"][-1])
    for rate in _floats("BENCH_RATES_HOTSPOT", "0.01,0.02,0.03,0.04,0.05,0.06,0.07,0.08"):
        results["hotspot"].append(await load(net, "hotspot", rate, length, warmup, measure,
                                             rng))
        dut._log.info("hotspot %s", results["hotspot"][-1])
    with open(os.environ["BENCH_OUT"], "w") as f:
        json.dump(results, f, indent=1)
