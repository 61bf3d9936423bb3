"""The 5-port wormhole router of the chipotle network-on-chip.

Members
-------
Dir
    Port numbering (N, E, S, W, LOCAL).
Link
    Signature of a router-to-router link: a flit stream plus the ``room`` back-signal.
Router
    The router component.
"""

# ruff: noqa: F403, F405  (names come from `from amaranth import *`)

from __future__ import annotations

import enum as py_enum

from amaranth import *  # house style (STYLE.md)
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .packet import DEFAULT, NocConfig, PacketType

__all__ = ["Dir", "Link", "Router", "output_order"]


class Dir(py_enum.IntEnum):
    """Router ports, in the order the router numbers its inputs and outputs."""

    N = 0
    E = 1
    S = 2
    W = 3
    LOCAL = 4


_NAMES = {Dir.N: "n", Dir.E: "e", Dir.S: "s", Dir.W: "w", Dir.LOCAL: "local"}


class Link(wiring.Signature):
    """Signature of one direction of a router-to-router link (unflipped: the sending side).

    Members
    -------
    flit : ``Out(stream.Signature(cfg.flit_layout))``
        The flits, with Amaranth's stream transfer rules.
    room : ``In(1)``
        Driven by the receiving router: 1 when its input FIFO has at least
        ``cfg.mcast_max_flits`` free entries, so that a whole multicast packet fits.  It only
        depends on registers of the receiver (the FIFO level).
    """

    def __init__(self, cfg: NocConfig = DEFAULT):
        self._cfg = cfg
        super().__init__({
            "flit": Out(stream.Signature(cfg.flit_layout)),
            "room": In(1),
        })

    @property
    def cfg(self) -> NocConfig:
        """Network parameters."""
        return self._cfg

    def __eq__(self, other):
        return type(other) is type(self) and other.cfg == self.cfg

    def __hash__(self):
        return hash((type(self), self.cfg))

    def __repr__(self):
        return f"Link({self._cfg!r})"


def output_order(x: int, y: int, width: int, height: int, host_port: bool = False) -> list[Dir]:
    """Return the order in which a router at ``(x, y)`` acquires the outputs of a packet.

    The order sorts the outputs by the rank of their channel in a total order of all the
    channels of the mesh that rises along every route the network takes (X channels, then Y
    channels, then the sinks: the local port and the host link).  Acquiring in that order is
    what keeps a multicast that waits for one output while holding others out of any cycle
    of waits; ``docs/noc.md`` gives the argument.
    """
    rank = {
        Dir.E: (0, x, 0),
        Dir.W: (0, width - 1 - x, 1),
        Dir.S: (1, y, 0),
        Dir.N: (1, height - 1 - y, 1),
        Dir.LOCAL: (2, 0, 0),
    }
    if host_port:
        rank[Dir.W] = (2, 0, 1)
    return sorted(Dir, key=lambda d: rank[d])


class Router(wiring.Component):
    """A 5-port (N, E, S, W, local) wormhole router with XY routing and multicast.

    Each input has a FIFO of ``cfg.fifo_depth`` flits.  The flit at the front of a FIFO that
    starts a packet (a *head*) is checked and routed: dimension-order XY routing for unicast,
    replication along the XY tree for multicast (the packet goes east/west along its row to
    the columns of the rectangle, then north/south along each of those columns; every tile
    of the rectangle gets one copy).  The packet then *acquires* every output it needs, one
    after the other in :func:`output_order` (several in one cycle when they are free), each
    output through its own round-robin arbiter; an output stays locked to the packet until
    its tail flit has left (wormhole switching).  A multicast acquires a router-to-router
    output only while the neighbour's FIFO has room for a whole multicast packet
    (``room``).  Each flit leaves on all the outputs of its packet before the next one is
    read; an output that has taken it waits for the others (at most one flit apart).

    A head that is malformed, addressed outside the mesh, or that has no output here is
    consumed with the rest of its packet (through the tail) and counted in ``errors``.

    Latency: a head written into an input FIFO at clock edge *t* is offered on the output at
    *t* + 1 when the output is free (one cycle per hop).  Throughput: one flit per cycle on
    each input and each output.

    Parameters
    ----------
    cfg : NocConfig
        Network parameters (flit width, FIFO depth, multicast limit).
    x, y : int
        Position of the router: column (east-increasing) and row (south-increasing).
    width, height : int
        Size of the mesh the router belongs to (for the destination checks).
    host_port : bool
        The router's west port is the host link (only at ``(0, 0)``): packets for the host
        leave there, and the host's packets enter there.

    Raises
    ------
    ValueError
        If the mesh does not fit ``cfg``'s coordinates (`NocConfig.check_mesh`), ``(x, y)``
        lies outside it, or `host_port` is set at a router other than ``(0, 0)``.

    Members
    -------
    i_n, i_e, i_s, i_w : ``In(Link(cfg))``
        Flits arriving from the neighbour in that direction (``i_w`` of router (0, 0) is the
        host link's input).  Each ``room`` output is 1 while the input FIFO has at least
        ``mcast_max_flits`` free entries (level ``<= fifo_depth - mcast_max_flits``).
    o_n, o_e, o_s, o_w : ``Out(Link(cfg))``
        Flits leaving towards that neighbour; ``room`` comes from the neighbour.
    i_local : ``In(stream.Signature(cfg.flit_layout))``
        Flits injected by the tile.
    o_local : ``Out(stream.Signature(cfg.flit_layout))``
        Flits delivered to the tile.  The tile must eventually accept every flit
        independently of what it sends (see ``docs/noc.md``).
    errors : ``Out(cfg.error_width)``
        Number of packets dropped at this router (saturating; never reset but by ``rst``).
    """

    def __init__(self, cfg: NocConfig = DEFAULT, x: int = 0, y: int = 0,
                 width: int = 1, height: int = 1, *, host_port: bool = False):
        cfg.check_mesh(width, height)
        if not (isinstance(x, int) and 0 <= x < width and isinstance(y, int) and
                0 <= y < height):
            raise ValueError(f"router position must lie in the {width}x{height} mesh, "
                             f"not ({x}, {y})")
        if host_port and (x, y) != (0, 0):
            raise ValueError(f"only router (0, 0) can hold the host port, not ({x}, {y})")
        self._cfg = cfg
        self._pos = (x, y)
        self._size = (width, height)
        self._host_port = bool(host_port)
        flit = stream.Signature(cfg.flit_layout)
        super().__init__({
            "i_n": In(Link(cfg)), "i_e": In(Link(cfg)),
            "i_s": In(Link(cfg)), "i_w": In(Link(cfg)),
            "o_n": Out(Link(cfg)), "o_e": Out(Link(cfg)),
            "o_s": Out(Link(cfg)), "o_w": Out(Link(cfg)),
            "i_local": In(flit),
            "o_local": Out(flit),
            "errors": Out(cfg.error_width),
        })

    @property
    def cfg(self) -> NocConfig:
        """Network parameters."""
        return self._cfg

    @property
    def position(self) -> tuple[int, int]:
        """``(x, y)`` of this router."""
        return self._pos

    @property
    def mesh_size(self) -> tuple[int, int]:
        """``(width, height)`` of the mesh this router belongs to."""
        return self._size

    @property
    def host_port(self) -> bool:
        """Whether the west port is the host link."""
        return self._host_port

    # -- routing -------------------------------------------------------------------------------

    def _route(self, m, d: Dir, head, last):
        """Return ``(outputs, bad)`` for a head at the front of input ``d``.

        ``outputs`` maps each output this input can ever use to a 1-bit signal (requested);
        ``bad`` is 1 when the packet must be dropped.
        """
        name = _NAMES[d]

        def named(value, what, shape=1):
            sig = Signal(shape, name=f"{what}_{name}")
            m.d.comb += sig.eq(value)
            return sig

        cfg = self._cfg
        x, y = self._pos
        width, height = self._size
        host_x, host_y = cfg.host

        c = cfg.coord_width
        mc = head.mcast
        to_host = named(~mc & (head.x0 == host_x), "to_host")
        # A unicast is the 1x1 rectangle at (x0, y0); a packet for the host is routed to
        # (0, 0), where it leaves on the host link instead of the local port.
        x0 = named(Mux(to_host, 0, head.x0), "rx0", c)
        y0 = named(Mux(to_host, 0, head.y0), "ry0", c)
        x1 = named(Mux(to_host, 0, Mux(mc, head.x1, head.x0)), "rx1", c)
        y1 = named(Mux(to_host, 0, Mux(mc, head.y1, head.y0)), "ry1", c)

        in_col = named((x0 <= x) & (x <= x1), "in_col")
        in_row = named((y0 <= y) & (y <= y1), "in_row")
        out = {}
        if d in (Dir.W, Dir.LOCAL):           # travelling east (or starting here)
            out[Dir.E] = x < x1
        if d in (Dir.E, Dir.LOCAL):           # travelling west (or starting here)
            out[Dir.W] = x > x0
        if d != Dir.N:                        # not travelling south
            out[Dir.N] = in_col & (y > y0)
        if d != Dir.S:                        # not travelling north
            out[Dir.S] = in_col & (y < y1)
        local = in_col & in_row
        out[Dir.LOCAL] = local & ~to_host
        if self._host_port:
            out[Dir.W] = out.get(Dir.W, C(0)) | (local & to_host)
        # Drop impossible outputs at the mesh edges (they are never requested anyway).
        if x == width - 1:
            out.pop(Dir.E, None)
        if x == 0 and not self._host_port:
            out.pop(Dir.W, None)
        if y == 0:
            out.pop(Dir.N, None)
        if y == height - 1:
            out.pop(Dir.S, None)
        out = {o: named(v, f"route_{_NAMES[o]}") for o, v in out.items()}

        type_ok = Cat(head.type == t for t in PacketType).any()
        length_ok = last == (head.length == 0)
        rect_ok = ((head.x0 <= head.x1) & (head.y0 <= head.y1) &
                   (head.x1 < width) & (head.y1 < height) &
                   (head.length < cfg.mcast_max_flits))
        dst_ok = (((head.x0 < width) & (head.y0 < height)) |
                  (to_host & (head.y0 == host_y)))
        routed = Cat(*out.values()).any()
        bad = ~type_ok | ~length_ok | Mux(mc, ~rect_ok, ~dst_ok) | ~routed
        return out, bad

    # -- elaboration ---------------------------------------------------------------------------

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        depth = cfg.fifo_depth
        x, y = self._pos
        width, height = self._size

        links_in = {Dir.N: self.i_n, Dir.E: self.i_e, Dir.S: self.i_s, Dir.W: self.i_w}
        links_out = {Dir.N: self.o_n, Dir.E: self.o_e, Dir.S: self.o_s, Dir.W: self.o_w}
        ins = {**{d: link.flit for d, link in links_in.items()}, Dir.LOCAL: self.i_local}
        outs = {**{d: link.flit for d, link in links_out.items()}, Dir.LOCAL: self.o_local}
        # Sinks (the tile, the host link) need no room check: they drain on their own.
        sink = {d: d == Dir.LOCAL or (d == Dir.W and self._host_port) for d in Dir}
        order = output_order(x, y, width, height, self._host_port)

        # -- input FIFOs and per-input state --
        front, fvalid, pop = {}, {}, {}
        fwd, drop, acq, sent = {}, {}, {}, {}
        for d in Dir:
            name = _NAMES[d]
            fifo = m.submodules[f"fifo_{name}"] = SyncFIFO(width=cfg.flit_width, depth=depth)
            m.d.comb += [
                fifo.w_data.eq(ins[d].payload),
                fifo.w_en.eq(ins[d].valid),
                ins[d].ready.eq(fifo.w_rdy),
            ]
            if d in links_in:
                m.d.comb += links_in[d].room.eq(fifo.level <= depth - cfg.mcast_max_flits)
            front[d] = cfg.flit_layout(fifo.r_data)
            fvalid[d] = fifo.r_rdy
            pop[d] = Signal(name=f"pop_{name}")
            m.d.comb += fifo.r_en.eq(pop[d])
            fwd[d] = Signal(name=f"fwd_{name}")      # forwarding the body of a packet
            drop[d] = Signal(name=f"drop_{name}")    # consuming the body of a dropped packet
            acq[d] = Signal(5, name=f"acq_{name}")   # outputs held by this input's packet
            sent[d] = Signal(5, name=f"sent_{name}")  # outputs that took the front flit

        route, bad, mcast, is_head, head_ok, dests = {}, {}, {}, {}, {}, {}
        for d in Dir:
            name = _NAMES[d]
            head = cfg.head_layout(front[d].data)
            out, b = self._route(m, d, head, front[d].last)
            route[d] = out
            bad[d] = Signal(name=f"bad_{name}")
            m.d.comb += bad[d].eq(b)
            mcast[d] = head.mcast
            is_head[d] = Signal(name=f"is_head_{name}")
            m.d.comb += is_head[d].eq(fvalid[d] & ~fwd[d] & ~drop[d])
            head_ok[d] = Signal(name=f"head_ok_{name}")
            m.d.comb += head_ok[d].eq(is_head[d] & ~bad[d])
            # The outputs the front flit must leave on: the route of a head, else the held set.
            route_vec = Cat(*(out.get(o, C(0)) for o in Dir))
            dests[d] = Signal(5, name=f"dests_{name}")
            m.d.comb += dests[d].eq(Mux(fwd[d], acq[d], route_vec))

        # -- per-output state --
        locked = {o: Signal(name=f"locked_{_NAMES[o]}") for o in Dir}
        owner = {o: Signal(5, name=f"owner_{_NAMES[o]}") for o in Dir}   # one-hot input
        ptr = {o: Signal(range(5), name=f"rr_{_NAMES[o]}") for o in Dir}  # last granted
        rooms = {o: (C(1) if sink[o] else links_out[o].room) for o in Dir}

        # -- acquisition: outputs in `order`, each with a round-robin arbiter --
        have = {d: {} for d in Dir}          # held already, or granted this cycle
        grant = {}
        for k, o in enumerate(order):
            oname = _NAMES[o]
            want = {}
            for d in Dir:
                if o not in route[d]:
                    continue
                prefix = C(1)
                for o2 in order[:k]:
                    if o2 in route[d]:
                        prefix = prefix & (~route[d][o2] | have[d][o2])
                room_ok = C(1) if sink[o] else (~mcast[d] | rooms[o])
                w = Signal(name=f"want_{_NAMES[d]}_{oname}")
                m.d.comb += w.eq(head_ok[d] & route[d][o] & ~acq[d][o] & prefix &
                                 room_ok & ~locked[o])
                want[d] = w
            grant[o] = gnt = {d: Signal(name=f"grant_{_NAMES[d]}_{oname}") for d in want}
            with m.Switch(ptr[o]):
                for p in range(5):
                    with m.Case(p):
                        taken = C(0)
                        for k2 in range(1, 6):
                            d = Dir((p + k2) % 5)
                            if d in want:
                                m.d.comb += gnt[d].eq(want[d] & ~taken)
                                taken = taken | want[d]
            for d in Dir:
                if d in gnt:
                    have[d][o] = Signal(name=f"have_{_NAMES[d]}_{oname}")
                    m.d.comb += have[d][o].eq(acq[d][o] | gnt[d])
                else:
                    have[d][o] = acq[d][o]

        all_have = {}
        for d in Dir:
            all_have[d] = Signal(name=f"all_have_{_NAMES[d]}")
            m.d.comb += all_have[d].eq(
                Cat(~dests[d][o] | have[d][o] for o in Dir).all())

        # -- switch: each output carries the front flit of its owner --
        xfer = {o: Signal(name=f"xfer_{_NAMES[o]}") for o in Dir}
        sel = {}
        for o in Dir:
            sel[o] = Signal(5, name=f"sel_{_NAMES[o]}")
            gvec = Cat(*(grant[o].get(d, C(0)) for d in Dir))
            m.d.comb += sel[o].eq(Mux(locked[o], owner[o], gvec))
            # Only the inputs that can route to `o` (XY turn rules) are wired to it.
            cands = list(grant[o])
            valid = Cat(sel[o][d] & fvalid[d] & all_have[d] & dests[d][o] & ~sent[d][o]
                        for d in cands).any()
            payload = 0
            for d in cands:
                payload = payload | (front[d].as_value() & sel[o][d].replicate(cfg.flit_width))
            m.d.comb += outs[o].payload.eq(payload)
            m.d.comb += [
                outs[o].valid.eq(valid),
                xfer[o].eq(valid & outs[o].ready),
            ]

        # -- input side: pop when every output took the flit; drop bad packets --
        n_dropped = []
        go = {}
        for d in Dir:
            name = _NAMES[d]
            took = Cat(sel[o][d] & xfer[o] for o in Dir)
            done = Cat(~dests[d] | sent[d] | took).all()
            go[d] = Signal(name=f"go_{name}")            # the front flit has left
            start_drop = Signal(name=f"start_drop_{name}")
            m.d.comb += [
                go[d].eq(fvalid[d] & (fwd[d] | head_ok[d]) & all_have[d] & done),
                start_drop.eq(is_head[d] & bad[d]),
                pop[d].eq(go[d] | start_drop | (fvalid[d] & drop[d])),
            ]
            n_dropped.append(start_drop)
            with m.If(go[d]):
                m.d.sync += sent[d].eq(0)
            with m.Else():
                m.d.sync += sent[d].eq(sent[d] | took)
            with m.If(start_drop & ~front[d].last):
                m.d.sync += drop[d].eq(1)
            with m.If(drop[d] & fvalid[d] & front[d].last):
                m.d.sync += drop[d].eq(0)

        # Grants lock outputs; a tail leaving releases everything its packet held.  The
        # release comes last so that a one-flit packet never leaves an output locked.
        for o in Dir:
            for d, g in grant[o].items():
                with m.If(g):
                    m.d.sync += [
                        locked[o].eq(1),
                        owner[o].eq(1 << d),
                        ptr[o].eq(d),
                        acq[d][o].eq(1),
                    ]
        for d in Dir:
            with m.If(go[d] & ~front[d].last):
                m.d.sync += fwd[d].eq(1)
            with m.If(go[d] & front[d].last):
                m.d.sync += [fwd[d].eq(0), acq[d].eq(0)]
                for o in Dir:
                    if o in grant and d in grant[o]:
                        with m.If(have[d][o]):
                            m.d.sync += locked[o].eq(0)

        # -- error counter (saturating) --
        total = Signal(cfg.error_width + 3)
        m.d.comb += total.eq(self.errors + sum(n_dropped))
        limit = (1 << cfg.error_width) - 1
        m.d.sync += self.errors.eq(Mux(total > limit, limit, total))
        return m
