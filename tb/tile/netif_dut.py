"""Designs under test of the network-interface benches (elaborated on the pytest side).

Members
-------
NetifUnit
    One :class:`~chipotle.hw.tile.netif.NetworkInterface` and its :class:`Sram`, the NoC
    ports open (the Amaranth-simulator tier).
NetifMesh
    A ``width`` x ``height`` :class:`~chipotle.hw.noc.Mesh` with a network interface and an
    SRAM on every tile and the host link at the edge (the cocotb tier).
perf_value
    The constant each tile's ``i_perf[k]`` is tied to, so register reads can be checked.
"""

# ruff: noqa: F403, F405

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from chipotle.hw.noc import Mesh, NocConfig
from chipotle.hw.tile import KvParams, Sram
from chipotle.hw.tile.netif import (
    ImemWrite,
    NetCommand,
    NetCompletion,
    NetifConfig,
    NetworkInterface,
    WaitRequest,
)

__all__ = ["NetifUnit", "NetifMesh", "perf_value", "status_value"]


def perf_value(tile: int, k: int) -> int:
    """Return the constant on ``i_perf[k]`` of tile ``tile`` (row-major index)."""
    return 0x1000 * (tile + 1) + k


def status_value(tile: int) -> int:
    """Return the constant on ``i_status`` of tile ``tile``."""
    return 0xC0DE0000 | tile


def _tile(m, name, cfg: NetifConfig, tile: int, sram_banks: int):
    ni = NetworkInterface(cfg)
    sram = Sram(size_bytes=cfg.sram_bytes, word_bytes=cfg.word_bytes, n_banks=sram_banks)
    m.submodules[f"ni_{name}"] = ni
    m.submodules[f"sram_{name}"] = sram
    connect(m, ni.sram, sram.rw)
    m.d.comb += [sram.r.en.eq(0), sram.r.addr.eq(0), ni.i_status.eq(status_value(tile))]
    for k in range(cfg.n_perf):
        m.d.comb += ni.i_perf[k].eq(perf_value(tile, k))
    return ni


class NetifUnit(wiring.Component):
    """A network interface and its SRAM; the NoC and controller ports are the top's."""

    def __init__(self, cfg: NetifConfig, *, sram_banks: int = 2):
        self._cfg = cfg
        self._banks = sram_banks
        flit = stream.Signature(cfg.noc.flit_layout)
        super().__init__({
            "i_noc": In(flit),
            "o_noc": Out(flit),
            "i_cmd": In(stream.Signature(NetCommand)),
            "o_cmd_done": Out(stream.Signature(NetCompletion)),
            "i_wait": In(stream.Signature(WaitRequest)),
            "o_start": Out(stream.Signature(16)),
            "o_reset": Out(1),
            "o_imem": Out(stream.Signature(ImemWrite)),
            "counters": Out(cfg.counter_width).array(cfg.n_counters),
            "errors": Out(8),
            "kv_layout": Out(KvParams),
            "i_kv_capacity": In(16),
        })

    def elaborate(self, platform):
        m = Module()
        ni = _tile(m, "0", self._cfg, 0, self._banks)
        m.d.comb += [self.kv_layout.eq(ni.kv_layout), ni.i_kv_capacity.eq(self.i_kv_capacity)]
        for name in ("i_noc", "i_cmd", "i_wait"):
            connect(m, flipped(getattr(self, name)), getattr(ni, name))
        for name in ("o_noc", "o_cmd_done", "o_start", "o_imem"):
            connect(m, getattr(ni, name), flipped(getattr(self, name)))
        m.d.comb += [self.o_reset.eq(ni.o_reset), self.errors.eq(ni.errors),
                     ni.i_noc_errors.eq(0)]
        for c in range(self._cfg.n_counters):
            m.d.comb += self.counters[c].eq(ni.counters[c])
        return m


class NetifMesh(wiring.Component):
    """A mesh of tiles, each a network interface + SRAM, with the host link at the edge.

    Ports per tile ``i`` (row-major): ``i_cmd[i]``, ``o_cmd_done[i]``, ``i_wait[i]``,
    ``o_start[i]``, ``o_reset[i]``, ``o_imem[i]``, ``counters[i]`` (all counters packed,
    counter ``c`` at bits ``c * counter_width``), ``errors[i]``; and ``i_host`` / ``o_host``,
    ``noc_errors``.
    """

    def __init__(self, width: int, height: int, *, noc: NocConfig | None = None,
                 sram_bytes: int = 2048, imem_words: int = 64, n_counters: int = 4,
                 counter_width: int = 8, n_perf: int = 2, sram_banks: int = 2):
        noc = NocConfig() if noc is None else noc
        self._size = (width, height)
        self._banks = sram_banks
        self._cfgs = [NetifConfig(x=x, y=y, width=width, height=height, noc=noc,
                                  sram_bytes=sram_bytes, imem_words=imem_words,
                                  n_counters=n_counters, counter_width=counter_width,
                                  n_perf=n_perf)
                      for y in range(height) for x in range(width)]
        n = width * height
        cfg = self._cfgs[0]
        flit = stream.Signature(noc.flit_layout)
        self._noc = noc
        super().__init__({
            "i_host": In(flit),
            "o_host": Out(flit),
            "i_cmd": In(stream.Signature(NetCommand)).array(n),
            "o_cmd_done": Out(stream.Signature(NetCompletion)).array(n),
            "i_wait": In(stream.Signature(WaitRequest)).array(n),
            "o_start": Out(stream.Signature(16)).array(n),
            "o_reset": Out(1).array(n),
            "o_imem": Out(stream.Signature(ImemWrite)).array(n),
            "counters": Out(cfg.counter_width * cfg.n_counters).array(n),
            "errors": Out(8).array(n),
            "noc_errors": Out(noc.error_width),
        })

    @property
    def configs(self) -> list[NetifConfig]:
        """The network-interface configuration of every tile, row-major."""
        return self._cfgs

    def elaborate(self, platform):
        m = Module()
        width, height = self._size
        m.submodules.mesh = mesh = Mesh(width, height, self._noc)
        connect(m, flipped(self.i_host), mesh.i_host)
        connect(m, mesh.o_host, flipped(self.o_host))
        m.d.comb += self.noc_errors.eq(mesh.errors)
        for i, cfg in enumerate(self._cfgs):
            ni = _tile(m, f"{cfg.x}_{cfg.y}", cfg, i, self._banks)
            connect(m, mesh.o_local[i], ni.i_noc)
            connect(m, ni.o_noc, mesh.i_local[i])
            connect(m, flipped(self.i_cmd[i]), ni.i_cmd)
            connect(m, flipped(self.i_wait[i]), ni.i_wait)
            connect(m, ni.o_cmd_done, flipped(self.o_cmd_done[i]))
            connect(m, ni.o_start, flipped(self.o_start[i]))
            connect(m, ni.o_imem, flipped(self.o_imem[i]))
            m.d.comb += [
                self.o_reset[i].eq(ni.o_reset),
                self.errors[i].eq(ni.errors),
                self.counters[i].eq(Cat(*ni.counters)),
                ni.i_noc_errors.eq(mesh.errors),
            ]
        return m
